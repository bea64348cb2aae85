//! Findings of the review of the term floor and the fence, each a test that fails on the
//! code it was written against (see the commit message of each).
//!
//! * MariaDB with `SIMULTANEOUS_ASSIGNMENT` in `sql_mode`: a claim's `taken_term = term`
//!   reads the old term, so the term is not bound to the token and a lost claim's answer
//!   is never recognised.
//! * MariaDB: `idle_write_transaction_timeout` (or `idle_readonly_…`), where set, wins
//!   over the `idle_transaction_timeout` the fence lowers: an idle fenced transaction is
//!   not ended within the lease time left.
//! * MariaDB 11.6.2 and later (`innodb_snapshot_isolation` ON by default): a REPEATABLE
//!   READ transaction whose read view predates the leader's last renewal cannot pass the
//!   fence of the live term (error 1020).
//! * PostgreSQL: the fence's lock holds a claim back only while the unique index on
//!   (name, term) exists; without it (an index that looks redundant and is never
//!   scanned) the fence passes and the next term starts under the open transaction.

use super::{create_work_table, work_connection};
use crate::support::{Backend, TestDb, lease, unique};
use diesel_async::SimpleAsyncConnection;
use leaderd::store::{
    DatabaseUrl, DbConnection, Fence, FenceError, Lease, LeaseStore, ProcessToken, SqlStore,
    Timeouts,
};
use std::time::{Duration, Instant};

fn store(db: &TestDb, limit: Duration) -> SqlStore {
    SqlStore::new(
        DatabaseUrl::parse(&db.url).unwrap(),
        Timeouts {
            connect: Duration::from_secs(2),
            query: limit,
        },
        true,
    )
}

/// "a" holds `name` for `ttl`; its term.
async fn elect(store: &mut SqlStore, name: &str, ttl: Duration) -> i64 {
    store.ensure_row(name).await.unwrap();
    let before = store.get(name).await.unwrap().unwrap().term;
    store
        .claim(&lease(name, "a", ttl, before))
        .await
        .unwrap()
        .expect("claimed")
}

/// A claim on a MariaDB session whose `sql_mode` has SIMULTANEOUS_ASSIGNMENT (MariaDB
/// 10.3.5+, standard UPDATE semantics: every SET reads the old row) still binds the
/// process token to the term it started (`taken_term = term`), so that a node whose
/// claim's answer was lost finds its term (`LeaseRow::started_by`).
#[tokio::test(flavor = "multi_thread")]
async fn mysql_claim_binds_its_token_under_simultaneous_assignment() {
    let db = TestDb::new(Backend::Mysql);
    let url = DatabaseUrl::parse(&db.url).unwrap();
    let mut conn = DbConnection::connect(&url, Duration::from_secs(5))
        .await
        .unwrap()
        .migrate()
        .await
        .unwrap();
    // What a server started with --sql-mode=...,SIMULTANEOUS_ASSIGNMENT gives every
    // session (leaderd sets no sql_mode of its own).
    match &mut conn {
        DbConnection::Mysql(c) => c
            .batch_execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',SIMULTANEOUS_ASSIGNMENT')")
            .await
            .unwrap(),
        _ => unreachable!(),
    }
    let name = unique("simultaneous");
    conn.ensure_row(&name).await.unwrap();
    let token = ProcessToken::random();
    let claim = Lease {
        name: name.clone(),
        holder: "a".into(),
        token,
        ttl: Duration::from_secs(60),
        term: 0,
    };
    let started = conn.claim(&claim).await.unwrap().expect("claimed");
    let row = conn.get(&name).await.unwrap().unwrap();
    assert_eq!(row.term, started);
    assert!(
        row.held_for.is_some() && row.started_by(token),
        "term {started} is not bound to the token that started it: {row:?}"
    );
}

/// The fence bounds how long a fenced transaction may sit idle by the lease time left
/// (docs/fencing.md): also on a MariaDB session with `idle_write_transaction_timeout`
/// set (by the application or the server's configuration), which MariaDB applies to a
/// writing transaction instead of `idle_transaction_timeout`.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_idle_fenced_transaction_is_ended_whatever_idle_write_timeout_says() {
    let db = TestDb::new(Backend::Mysql);
    let name = unique("idle_write");
    let mut leader = store(&db, Duration::from_secs(5));
    let term = elect(&mut leader, &name, Duration::from_millis(1500)).await;
    let table = unique("work");
    let mut work = work_connection(&db).await;
    work.exec(&create_work_table(Backend::Mysql, &table))
        .await
        .unwrap();
    work.exec("SET SESSION idle_write_transaction_timeout = 30")
        .await
        .unwrap();
    work.exec("BEGIN").await.unwrap();
    work.exec(&format!(
        "INSERT INTO {table} (node, term, seq) VALUES ('idle', {term}, 0)"
    ))
    .await
    .unwrap();
    work.fence(&Fence::new(&name, term)).await.unwrap();
    // Quiet for longer than the bound (1.5 s left, 2 s in whole seconds).
    tokio::time::sleep(Duration::from_millis(2600)).await;
    assert!(
        work.exec("COMMIT").await.is_err(),
        "the fenced transaction outlived the lease time left by {} ms of idleness",
        2600
    );
}

/// A REPEATABLE READ transaction (MariaDB's default) that read before the leader's last
/// renewal. MariaDB 11.6.2 and later turn `innodb_snapshot_isolation` on by default (here
/// on the session, 10.6.18+ has the variable): a locking read of a row changed after the
/// read view then fails with error 1020, and the leader renews its row every interval. The
/// fence then fails closed, saying so (`StaleSnapshot`): nothing the transaction wrote
/// commits, even if the caller goes on to COMMIT; and the same work at READ COMMITTED
/// passes.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_fence_passes_a_snapshot_from_before_a_renewal() {
    let db = TestDb::new(Backend::Mysql);
    let name = unique("renewed_snapshot");
    let mut leader = store(&db, Duration::from_secs(5));
    let ttl = Duration::from_secs(60);
    let term = elect(&mut leader, &name, ttl).await;
    let table = unique("work");
    let mut work = work_connection(&db).await;
    work.exec(&create_work_table(Backend::Mysql, &table))
        .await
        .unwrap();
    if work
        .exec("SET SESSION innodb_snapshot_isolation = ON")
        .await
        .is_err()
    {
        eprintln!("this server has no innodb_snapshot_isolation; nothing to check");
        return;
    }
    work.exec("BEGIN").await.unwrap();
    // The outbox relay's read: it opens the transaction's read view.
    work.number(&format!("SELECT COUNT(*) AS n FROM {table}"))
        .await
        .unwrap();
    // The leader renews, as it does every interval.
    assert!(leader.renew(&lease(&name, "a", ttl, term)).await.unwrap());
    work.exec(&format!(
        "INSERT INTO {table} (node, term, seq) VALUES ('a', {term}, 0)"
    ))
    .await
    .unwrap();
    let fenced = work.fence(&Fence::new(&name, term)).await;
    assert!(
        matches!(fenced, Err(FenceError::StaleSnapshot { .. })),
        "{fenced:?}"
    );
    let _ = work.exec("COMMIT").await;
    let written = work
        .number(&format!("SELECT COUNT(*) AS n FROM {table}"))
        .await
        .unwrap();
    assert_eq!(written, 0, "a write whose fence failed committed");

    work.exec("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await
        .unwrap();
    work.exec("BEGIN").await.unwrap();
    work.number(&format!("SELECT COUNT(*) AS n FROM {table}"))
        .await
        .unwrap();
    assert!(leader.renew(&lease(&name, "a", ttl, term)).await.unwrap());
    work.exec(&format!(
        "INSERT INTO {table} (node, term, seq) VALUES ('a', {term}, 1)"
    ))
    .await
    .unwrap();
    let fenced = work.fence(&Fence::new(&name, term)).await;
    assert!(
        fenced.is_ok(),
        "the live term {term} at READ COMMITTED: {fenced:?}"
    );
    work.exec("COMMIT").await.unwrap();
}

/// The fence's lock on PostgreSQL holds a claim back only because the unique index on
/// (name, term) makes `term` a key column. The index is redundant with the one on `name`
/// and never scanned, so index advisors and "unused index" reports name it for dropping.
/// Without it the fence must not pass (or the claim must still wait): here it passes and
/// the next term starts while the fenced transaction is open.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_fence_does_not_pass_without_its_lock() {
    let db = TestDb::new(Backend::Postgres);
    let name = unique("no_key_index");
    let mut leader = store(&db, Duration::from_secs(5));
    let ttl = Duration::from_secs(60);
    let term = elect(&mut leader, &name, ttl).await;
    let table = unique("work");
    let mut work = work_connection(&db).await;
    work.exec(&create_work_table(Backend::Postgres, &table))
        .await
        .unwrap();
    work.exec("DROP INDEX service_leader_lock_name_term")
        .await
        .unwrap();
    work.exec("BEGIN").await.unwrap();
    work.exec(&format!(
        "INSERT INTO {table} (node, term, seq) VALUES ('a', {term}, 0)"
    ))
    .await
    .unwrap();
    match work.fence(&Fence::new(&name, term)).await {
        Ok(()) => {}
        // Refused as not installed: fails closed, which is fine.
        Err(FenceError::NotInstalled { .. }) => {
            let _ = work.exec("ROLLBACK").await;
            return;
        }
        Err(other) => panic!("{other:?}"),
    }
    // A handover on other connections while the fenced transaction is open.
    assert!(leader.release(&lease(&name, "a", ttl, term)).await.unwrap());
    let mut next = store(&db, Duration::from_secs(5));
    let claim = tokio::spawn({
        let name = name.clone();
        async move {
            let started = next.claim(&lease(&name, "b", ttl, term)).await;
            (started, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let commit_sent = Instant::now();
    work.exec("COMMIT").await.unwrap();
    let (started, claimed_at) = claim.await.unwrap();
    let started = started.unwrap().expect("claimed");
    assert!(
        claimed_at >= commit_sent,
        "term {started} started while the transaction fenced in term {term} was open, \
         and that transaction then committed"
    );
}

/// A refused fence run outside a transaction (a "do I still lead?" check before the work,
/// which docs/fencing.md says fences nothing, but which must not break the connection):
/// on SQLite `Fence::check` answers a refusal with a `BEGIN` of its own, which here opens
/// a transaction nobody knows of. The work's next write, meant to autocommit, then sits
/// in it uncommitted, holding the database's one write lock (every claim and renewal
/// waits for it) until the connection closes.
#[tokio::test(flavor = "multi_thread")]
async fn sqlite_refused_fence_outside_a_transaction_leaves_none_open() {
    let db = TestDb::new(Backend::Sqlite);
    let name = unique("autocommit");
    let ttl = Duration::from_secs(60);
    let mut leader = store(&db, Duration::from_secs(5));
    let term = elect(&mut leader, &name, ttl).await;
    let table = unique("work");
    let mut work = work_connection(&db).await;
    work.exec(&create_work_table(Backend::Sqlite, &table))
        .await
        .unwrap();
    // The term ends.
    assert!(leader.release(&lease(&name, "a", ttl, term)).await.unwrap());
    let refused = work.fence(&Fence::new(&name, term)).await;
    assert!(
        matches!(refused, Err(FenceError::Refused { .. })),
        "{refused:?}"
    );
    // A write of the program's own afterwards, outside any transaction it opened.
    work.exec(&format!(
        "INSERT INTO {table} (node, term, seq) VALUES ('after', {term}, 0)"
    ))
    .await
    .unwrap();
    let mut other = work_connection(&db).await;
    let seen = other
        .number(&format!(
            "SELECT COUNT(*) AS n FROM {table} WHERE node = 'after'"
        ))
        .await
        .unwrap();
    assert_eq!(
        seen, 1,
        "the autocommitted write is not committed: the connection sits in a transaction \
         the fence opened, holding the write lock"
    );
}
