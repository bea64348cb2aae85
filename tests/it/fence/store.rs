//! The fence statement by statement, on a database of the test's own: it passes in a
//! live term and refuses every other (wrong or older term, lapsed, released, no such
//! election), and nothing of a refused transaction commits; a claim of the next term waits
//! for a fenced transaction (the lock), while on PostgreSQL the leader's renewal does not;
//! a snapshot from before a new term cannot pass; a fenced transaction left idle is ended
//! by the server. The elections are run by leaderd's own statements (`SqlStore`).

use super::{WorkConnection, create_work_table, work_connection};
use crate::support::{Backend, TestDb, lease, unique};
use leaderd::store::{DatabaseUrl, Fence, FenceError, LeaseStore, SqlStore, StoreError, Timeouts};
use std::time::{Duration, Instant};

/// A store whose statements may wait up to `limit` for a lock.
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

/// `holder` claims `name` with a lease of `ttl`; the term it holds.
async fn elect(store: &mut SqlStore, name: &str, holder: &str, ttl: Duration) -> i64 {
    store.ensure_row(name).await.unwrap();
    let before = store.get(name).await.unwrap().unwrap().term;
    assert!(
        store
            .claim(&lease(name, holder, ttl, before))
            .await
            .unwrap()
            .is_some()
    );
    let term = store.get(name).await.unwrap().unwrap().term;
    assert!(term > before);
    term
}

/// A database with an election `name` held by "a" for `ttl`, and the table leader work
/// writes: (db, term, table).
async fn set_up(backend: Backend, name: &str, ttl: Duration) -> (TestDb, SqlStore, i64, String) {
    let db = TestDb::new(backend);
    let mut leader = store(&db, Duration::from_secs(5));
    let term = elect(&mut leader, name, "a", ttl).await;
    let table = unique("work");
    let mut setup = work_connection(&db).await;
    setup
        .exec(&create_work_table(backend, &table))
        .await
        .unwrap();
    (db, leader, term, table)
}

/// Rows of `table` written by `node`.
async fn rows(conn: &mut WorkConnection, table: &str, node: &str) -> i64 {
    conn.number(&format!(
        "SELECT COUNT(*) AS n FROM {table} WHERE node = '{node}'"
    ))
    .await
    .unwrap()
}

/// One transaction of leader work: a row, then the fence (last), then COMMIT. What the
/// fence said, and whether the COMMIT went through.
async fn fenced_write(
    conn: &mut WorkConnection,
    table: &str,
    node: &str,
    fence: &Fence,
) -> (Result<(), FenceError>, bool) {
    conn.exec("BEGIN").await.unwrap();
    let insert = format!(
        "INSERT INTO {table} (node, term, seq) VALUES ('{node}', {}, 0)",
        fence.term()
    );
    conn.exec(&insert).await.unwrap();
    let fenced = conn.fence(fence).await;
    // A program that goes on to COMMIT whatever the fence said: nothing may commit.
    let committed = conn.exec("COMMIT").await.is_ok();
    if !committed {
        let _ = conn.exec("ROLLBACK").await;
    }
    (fenced, committed)
}

fn refusal(result: Result<(), FenceError>) -> String {
    match result {
        Err(FenceError::Refused { reason, .. }) => reason,
        other => panic!("expected the fence to refuse, got {other:?}"),
    }
}

async fn the_fence_passes_in_a_live_term_and_refuses_every_other(backend: Backend) {
    let name = unique("fenced");
    let ttl = Duration::from_millis(800);
    let (db, mut leader, term, table) = set_up(backend, &name, Duration::from_secs(60)).await;
    let mut work = work_connection(&db).await;

    // In the live term: the write commits.
    let (fenced, committed) =
        fenced_write(&mut work, &table, "live", &Fence::new(&name, term)).await;
    fenced.unwrap();
    assert!(committed);
    assert_eq!(rows(&mut work, &table, "live").await, 1);

    // An older term, and a term never issued: refused, naming the election and both terms
    // (SQLite's trigger can only say which check failed).
    let older = refusal(
        fenced_write(&mut work, &table, "older", &Fence::new(&name, term - 1))
            .await
            .0,
    );
    let newer = refusal(
        fenced_write(&mut work, &table, "newer", &Fence::new(&name, term + 1))
            .await
            .0,
    );
    for reason in [&older, &newer] {
        assert!(reason.starts_with("leaderd fence:"), "{reason}");
        match backend {
            Backend::Sqlite => assert!(
                reason.contains("not the election's current term"),
                "{reason}"
            ),
            _ => {
                assert!(reason.contains(&format!("'{name}'")), "{reason}");
                assert!(reason.contains(&format!("term {term} holds")), "{reason}");
            }
        }
    }
    assert!(older.contains(&(term - 1).to_string()) || backend == Backend::Sqlite);
    // A NULL term is no term.
    let null = match backend {
        Backend::Postgres => format!("SELECT leaderd_fence('{name}', NULL)"),
        Backend::Mysql => format!("CALL leaderd_fence('{name}', NULL)"),
        Backend::Sqlite => {
            format!("INSERT INTO leaderd_fence (election, term) VALUES ('{name}', NULL)")
        }
    };
    let refused = work.exec(&format!("BEGIN; {null}")).await;
    let message = refused.expect_err("a NULL term is refused").to_string();
    assert!(message.contains("leaderd fence:"), "{message}");
    let _ = work.exec("ROLLBACK").await;
    let missing = refusal(
        fenced_write(&mut work, &table, "missing", &Fence::new("no such", term))
            .await
            .0,
    );
    assert!(missing.contains("no such election"), "{missing}");

    // Released by its holder: refused, though the term is still the row's.
    let held = lease(&name, "a", Duration::from_secs(60), term);
    assert!(leader.release(&held).await.unwrap());
    let released = refusal(
        fenced_write(&mut work, &table, "released", &Fence::new(&name, term))
            .await
            .0,
    );
    assert!(released.contains("released"), "{released}");

    // Lapsed by the database clock, though nobody has claimed it: refused (the expiry
    // check; without it a deposed leader's work goes on until someone claims).
    let short = elect(&mut leader, &name, "a", ttl).await;
    let (fenced, _) = fenced_write(&mut work, &table, "short", &Fence::new(&name, short)).await;
    fenced.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let lapsed = refusal(
        fenced_write(&mut work, &table, "lapsed", &Fence::new(&name, short))
            .await
            .0,
    );
    assert!(lapsed.contains("lapsed"), "{lapsed}");
    assert_eq!(
        leader.get(&name).await.unwrap().unwrap().term,
        short,
        "nobody claimed"
    );

    // Nothing of a refused transaction committed, though each went on to COMMIT.
    for node in ["older", "newer", "missing", "released", "lapsed"] {
        assert_eq!(rows(&mut work, &table, node).await, 0, "{node}'s row");
    }
    // The connection is still usable after a refusal.
    assert_eq!(rows(&mut work, &table, "short").await, 1);
}

/// The statement handed to shell scripts (`LEADERD_FENCE`) does what `Fence::check` does.
async fn the_statement_as_text_fences_the_same(backend: Backend) {
    let name = unique("it's \\ quoted");
    let (db, _leader, term, table) = set_up(backend, &name, Duration::from_secs(60)).await;
    let mut work = work_connection(&db).await;
    let statement = Fence::new(&name, term).statement(super::store_backend(backend));
    let insert = format!("INSERT INTO {table} (node, term, seq) VALUES ('text', {term}, 0)");
    work.exec(&format!("BEGIN; {insert}; {statement}; COMMIT"))
        .await
        .unwrap();
    assert_eq!(rows(&mut work, &table, "text").await, 1);
    let stale = Fence::new(&name, term - 1).statement(super::store_backend(backend));
    let refused = work
        .exec(&format!("BEGIN; {insert}; {stale}; COMMIT"))
        .await;
    let message = refused.expect_err("an older term is refused").to_string();
    assert!(message.contains("leaderd fence:"), "{message}");
    let _ = work.exec("ROLLBACK").await;
    assert_eq!(rows(&mut work, &table, "text").await, 1);
}

/// The lock: a claim of the next term waits until the fenced transaction has ended, so
/// the fenced write commits first. Here the holder releases while the fenced transaction
/// is open (a handover) and another node claims at once.
async fn a_claim_waits_for_the_fenced_transaction(backend: Backend) {
    let name = unique("locked");
    let (db, leader, term, table) = set_up(backend, &name, Duration::from_secs(60)).await;
    drop(leader);
    let mut work = work_connection(&db).await;
    work.exec("BEGIN").await.unwrap();
    work.exec(&format!(
        "INSERT INTO {table} (node, term, seq) VALUES ('old', {term}, 0)"
    ))
    .await
    .unwrap();
    work.fence(&Fence::new(&name, term)).await.unwrap();
    let fenced_at = Instant::now();

    // The old leader releases, the next one claims, each on a connection of its own.
    let handover = {
        let (mut old, mut new) = (
            store(&db, Duration::from_secs(10)),
            store(&db, Duration::from_secs(10)),
        );
        let name = name.clone();
        tokio::spawn(async move {
            let released = old
                .release(&lease(&name, "a", Duration::from_secs(60), term))
                .await;
            let released_at = Instant::now();
            let claimed = new
                .claim(&lease(&name, "b", Duration::from_secs(60), term))
                .await;
            (released, released_at, claimed, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !handover.is_finished(),
        "the claim waited for the fenced transaction"
    );
    // Locks go as the server commits, maybe before its answer reaches this task.
    let commit_sent = Instant::now();
    work.exec("COMMIT").await.unwrap();
    let (released, released_at, claimed, claimed_at) = handover.await.unwrap();
    assert!(released.unwrap());
    assert!(
        claimed.unwrap().is_some(),
        "the claim went through once the transaction ended"
    );
    assert!(claimed_at >= commit_sent);
    match backend {
        // A release changes no key column: it does not wait.
        Backend::Postgres => assert!(released_at < fenced_at + Duration::from_millis(500)),
        // Every write of the row waits (MySQL: a shared lock on it; SQLite: the one
        // write lock).
        Backend::Mysql | Backend::Sqlite => assert!(released_at >= commit_sent),
    }
    assert_eq!(
        rows(&mut work, &table, "old").await,
        1,
        "the fenced write committed"
    );
}

/// The leader's renewal does not wait for a fenced transaction on PostgreSQL (the lock
/// holds back only what changes the term). On MySQL and SQLite it does: hence "run the
/// fence last, just before COMMIT" (docs/fencing.md).
async fn a_renewal_waits_only_where_documented(backend: Backend) {
    let name = unique("renewed");
    let (db, leader, term, _table) = set_up(backend, &name, Duration::from_secs(60)).await;
    drop(leader);
    let mut work = work_connection(&db).await;
    work.exec("BEGIN").await.unwrap();
    work.fence(&Fence::new(&name, term)).await.unwrap();
    let mut renewing = store(&db, Duration::from_secs(10));
    let renewal = {
        let name = name.clone();
        tokio::spawn(async move {
            let renewed = renewing
                .renew(&lease(&name, "a", Duration::from_secs(60), term))
                .await;
            (renewed, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waited = !renewal.is_finished();
    work.exec("COMMIT").await.unwrap();
    let (renewed, _) = renewal.await.unwrap();
    assert!(renewed.unwrap());
    assert_eq!(
        waited,
        backend != Backend::Postgres,
        "the renewal waited: {waited}"
    );
}

/// A REPEATABLE READ snapshot taken before a new term cannot pass the fence of the old
/// one: InnoDB's locking read reads the newest row (LD001); PostgreSQL's lock fails with
/// a serialization failure (fails closed); SQLite cannot write on a snapshot that is
/// behind (SQLITE_BUSY_SNAPSHOT).
async fn a_snapshot_from_before_a_new_term_does_not_pass(backend: Backend) {
    let name = unique("snapshot");
    let (db, mut leader, term, table) = set_up(backend, &name, Duration::from_secs(60)).await;
    let mut work = work_connection(&db).await;
    work.exec(match backend {
        Backend::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ",
        Backend::Mysql => "START TRANSACTION WITH CONSISTENT SNAPSHOT",
        Backend::Sqlite => "BEGIN",
    })
    .await
    .unwrap();
    // The snapshot: read the row and the work's table.
    work.number(&format!("SELECT COUNT(*) AS n FROM {table}"))
        .await
        .unwrap();
    work.number("SELECT COUNT(*) AS n FROM service_leader_lock")
        .await
        .unwrap();
    // A handover on other connections.
    assert!(
        leader
            .release(&lease(&name, "a", Duration::from_secs(60), term))
            .await
            .unwrap()
    );
    let mut next = store(&db, Duration::from_secs(5));
    assert!(
        next.claim(&lease(&name, "b", Duration::from_secs(60), term))
            .await
            .unwrap()
            .is_some()
    );
    let fenced = work.fence(&Fence::new(&name, term)).await;
    match backend {
        Backend::Sqlite => assert!(matches!(fenced, Err(FenceError::Query(_))), "{fenced:?}"),
        _ => {
            let reason = refusal(fenced);
            assert!(
                reason.contains("holds") || reason.contains("new term began"),
                "{reason}"
            );
        }
    }
    let _ = work.exec("ROLLBACK").await;
}

/// A fenced transaction whose client goes quiet (frozen, cut off, dead) does not hold the
/// next claim back for longer than the lease time left: the server ends its session
/// (PostgreSQL to the millisecond, MariaDB in whole seconds rounded up), and nothing of it
/// commits.
async fn an_idle_fenced_transaction_is_ended_by_the_server(backend: Backend) {
    let name = unique("idle");
    let ttl = Duration::from_millis(1500);
    let (db, mut leader, _, table) = set_up(backend, &name, Duration::from_secs(60)).await;
    let term = elect_again(&mut leader, &name, ttl).await;
    let mut work = work_connection(&db).await;
    work.exec("BEGIN").await.unwrap();
    work.exec(&format!(
        "INSERT INTO {table} (node, term, seq) VALUES ('idle', {term}, 0)"
    ))
    .await
    .unwrap();
    work.fence(&Fence::new(&name, term)).await.unwrap();
    // Quiet for longer than the bound (1.5 s; 2 s on MariaDB).
    tokio::time::sleep(Duration::from_millis(2600)).await;
    assert!(work.exec("COMMIT").await.is_err(), "the session was ended");
    let mut check = work_connection(&db).await;
    assert_eq!(rows(&mut check, &table, "idle").await, 0);
}

/// A new term on the row `name`, held by "a" for `ttl`, after its lease of 60 s: released
/// and claimed again.
async fn elect_again(leader: &mut SqlStore, name: &str, ttl: Duration) -> i64 {
    let row = leader.get(name).await.unwrap().unwrap();
    assert!(
        leader
            .release(&lease(name, "a", Duration::from_secs(60), row.term))
            .await
            .unwrap()
    );
    elect(leader, name, "a", ttl).await
}

/// A claim on MySQL that waited past its own limit for a fenced transaction fails
/// cleanly and the next one goes through: a wait costs time, never the lease.
async fn a_claim_that_gives_up_waiting_changes_nothing(backend: Backend) {
    let name = unique("gives_up");
    let (db, mut leader, term, _table) = set_up(backend, &name, Duration::from_secs(60)).await;
    let mut work = work_connection(&db).await;
    work.exec("BEGIN").await.unwrap();
    work.fence(&Fence::new(&name, term)).await.unwrap();
    if backend == Backend::Postgres {
        // The release does not wait here; the claim does.
        assert!(
            leader
                .release(&lease(&name, "a", Duration::from_secs(60), term))
                .await
                .unwrap()
        );
    }
    let mut impatient = store(&db, Duration::from_millis(300));
    let gave_up = match backend {
        Backend::Postgres => impatient
            .claim(&lease(&name, "b", Duration::from_secs(60), term))
            .await
            .map(|started| started.is_some()),
        _ => {
            impatient
                .release(&lease(&name, "a", Duration::from_secs(60), term))
                .await
        }
    };
    assert!(
        matches!(
            gave_up,
            Err(StoreError::Query(_) | StoreError::QueryTimeout { .. })
        ),
        "{gave_up:?}"
    );
    // Past the server's own limit on the statement the client gave up on, which the
    // server ends by itself (a client's timeout does not stop it).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    work.exec("COMMIT").await.unwrap();
    if backend != Backend::Postgres {
        assert!(
            leader
                .release(&lease(&name, "a", Duration::from_secs(60), term))
                .await
                .unwrap()
        );
    }
    let mut patient = store(&db, Duration::from_secs(5));
    assert!(
        patient
            .claim(&lease(&name, "b", Duration::from_secs(60), term))
            .await
            .unwrap()
            .is_some()
    );
}

backend_tests!(postgres = Backend::Postgres =>
    the_fence_passes_in_a_live_term_and_refuses_every_other,
    the_statement_as_text_fences_the_same,
    a_claim_waits_for_the_fenced_transaction,
    a_renewal_waits_only_where_documented,
    a_snapshot_from_before_a_new_term_does_not_pass,
    an_idle_fenced_transaction_is_ended_by_the_server,
    a_claim_that_gives_up_waiting_changes_nothing);
backend_tests!(mysql = Backend::Mysql =>
    the_fence_passes_in_a_live_term_and_refuses_every_other,
    the_statement_as_text_fences_the_same,
    a_claim_waits_for_the_fenced_transaction,
    a_renewal_waits_only_where_documented,
    a_snapshot_from_before_a_new_term_does_not_pass,
    an_idle_fenced_transaction_is_ended_by_the_server,
    a_claim_that_gives_up_waiting_changes_nothing);
backend_tests!(sqlite = Backend::Sqlite =>
    the_fence_passes_in_a_live_term_and_refuses_every_other,
    the_statement_as_text_fences_the_same,
    a_claim_waits_for_the_fenced_transaction,
    a_renewal_waits_only_where_documented,
    a_snapshot_from_before_a_new_term_does_not_pass,
    a_claim_that_gives_up_waiting_changes_nothing);

/// Through PgBouncer in transaction mode, with one server connection shared by two
/// clients: the fence works as it does directly, through `Fence::check` (diesel with its
/// statement cache off, as anything through such a pooler needs) and as text, and its
/// limits are the transaction's only: the next client of the server connection has none.
#[tokio::test(flavor = "multi_thread")]
async fn through_a_transaction_pooler_the_fence_sets_nothing_beyond_its_transaction() {
    use crate::support::servers::PgBouncer;
    use diesel::connection::CacheSize;
    let name = unique("pooled");
    let (db, _leader, term, table) =
        set_up(Backend::Postgres, &name, Duration::from_secs(60)).await;
    let bouncer = PgBouncer::start(5432, "transaction", 1);
    let url = db.url_via(format!("127.0.0.1:{}", bouncer.port).parse().unwrap());
    let mut first = WorkConnection::open(Backend::Postgres, &url).await.unwrap();
    let mut second = WorkConnection::open(Backend::Postgres, &url).await.unwrap();
    if let WorkConnection::Postgres(c) = &mut first {
        diesel_async::AsyncConnection::set_prepared_statement_cache_size(c, CacheSize::Disabled);
    }
    let (fenced, committed) =
        fenced_write(&mut first, &table, "pooled", &Fence::new(&name, term)).await;
    fenced.unwrap();
    assert!(committed);
    let text = Fence::new(&name, term).statement(super::store_backend(Backend::Postgres));
    first.exec(&format!("BEGIN; {text}; COMMIT")).await.unwrap();
    for setting in ["statement_timeout", "idle_in_transaction_session_timeout"] {
        let left = second
            .number(&format!(
                "SELECT EXTRACT(EPOCH FROM current_setting('{setting}')::INTERVAL)::BIGINT AS n"
            ))
            .await
            .unwrap();
        assert_eq!(left, 0, "{setting} outlived the fenced transaction");
    }
    assert_eq!(rows(&mut second, &table, "pooled").await, 1);
}
