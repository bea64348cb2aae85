//! The SQL lease store against the real PostgreSQL, MariaDB and SQLite: each statement's
//! guarantees, judged by the database clock, on a database created for the test.

#[macro_use]
mod common;

use common::proxy::{Mode, Proxy};
use common::{Backend, TestDb};
use leaderd::config::DatabaseUrl;
use leaderd::store::shared::SharedStore;
use leaderd::store::{DbConnection, LeaseStore, SqlStore, StoreError, Timeouts};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_millis(1200);

fn store_at(url: &str, query_timeout: Duration) -> SqlStore {
    SqlStore::new(
        DatabaseUrl::parse(url).unwrap(),
        Timeouts {
            connect: Duration::from_secs(2),
            query: query_timeout,
        },
        true,
    )
}

fn store(db: &TestDb) -> SqlStore {
    store_at(&db.url, TTL)
}

async fn claim_renew_release(backend: Backend) {
    let db = TestDb::new(backend);
    let (mut a, mut b) = (store(&db), store(&db));
    // Connect (and migrate) before any lease runs, so set-up time does not count.
    a.connect().await.unwrap();
    b.connect().await.unwrap();
    let name = "claims";
    assert_eq!(a.get(name).await.unwrap(), None);
    a.ensure_row(name).await.unwrap();
    a.ensure_row(name).await.unwrap();
    let row = a.get(name).await.unwrap().unwrap();
    assert_eq!(
        (row.holder, row.term),
        (None, 0),
        "creating the row grants nothing"
    );

    assert!(a.claim(name, "a", TTL, 0).await.unwrap());
    assert!(!b.claim(name, "b", TTL, 0).await.unwrap(), "stale term");
    assert!(!b.claim(name, "b", TTL, 1).await.unwrap(), "live lease");
    assert!(a.renew(name, "a", TTL, 1).await.unwrap());
    assert!(!b.renew(name, "b", TTL, 1).await.unwrap(), "not the holder");
    assert!(!a.renew(name, "a", TTL, 0).await.unwrap(), "wrong term");
    let row = b.get(name).await.unwrap().unwrap();
    assert_eq!((row.live_holder(), row.term), (Some("a"), 1));
    // The database runs on this host: its clock agrees with ours to well within 50 ms
    // (a time zone mix-up would be hours off).
    let offset = row
        .clock_offset_us
        .expect("a read measures the clock offset");
    assert!(offset.abs() < 50_000, "clock offset {offset} µs");
    assert!(
        row.remaining() > TTL - Duration::from_millis(300),
        "{row:?}"
    );

    assert!(!b.release(name, "b", 1).await.unwrap());
    assert!(a.release(name, "a", 1).await.unwrap());
    assert!(!a.release(name, "a", 1).await.unwrap(), "released once");
    assert!(
        !a.renew(name, "a", TTL, 1).await.unwrap(),
        "a released lease cannot be renewed"
    );
    let row = b.get(name).await.unwrap().unwrap();
    assert_eq!(
        (row.holder.as_deref(), row.remaining()),
        (None, Duration::ZERO)
    );
    assert!(
        b.claim(name, "b", TTL, 1).await.unwrap(),
        "a released lease is free at once"
    );
    assert_eq!(b.get(name).await.unwrap().unwrap().term, 2);
}

async fn leases_lapse_by_the_database_clock(backend: Backend) {
    let db = TestDb::new(backend);
    let (mut a, mut b) = (store(&db), store(&db));
    a.connect().await.unwrap();
    b.connect().await.unwrap();
    let name = "lapse";
    let short = Duration::from_millis(600);
    a.ensure_row(name).await.unwrap();
    let sent = Instant::now();
    assert!(a.claim(name, "a", short, 0).await.unwrap());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let row = b.get(name).await.unwrap().unwrap();
    // Sub-second precision: whole-second timestamps would show 0 or 1000.
    assert!(
        row.age >= Duration::from_millis(150)
            && row.age <= sent.elapsed() + Duration::from_millis(20),
        "age {:?} after {:?}",
        row.age,
        sent.elapsed()
    );
    assert!(
        !b.claim(name, "b", TTL, 1).await.unwrap(),
        "still live before its lease ends"
    );

    // Past the lease by the database clock (it executed the claim after `sent`).
    tokio::time::sleep(
        (sent + short + Duration::from_millis(30)).saturating_duration_since(Instant::now()),
    )
    .await;
    assert!(
        !a.renew(name, "a", short, 1).await.unwrap(),
        "a lapsed lease is not renewed"
    );
    assert!(
        b.claim(name, "b", TTL, 1).await.unwrap(),
        "a lapsed lease can be taken"
    );
    assert!(
        !a.reacquire(name, "a", TTL, 1).await.unwrap(),
        "not ours any more"
    );

    // The holder of a row can start a new term on it while it still holds it.
    assert!(b.reacquire(name, "b", TTL, 2).await.unwrap());
    assert_eq!(a.get(name).await.unwrap().unwrap().term, 3);
}

async fn ids_are_compared_exactly(backend: Backend) {
    let db = TestDb::new(backend);
    let mut s = store(&db);
    let name = "exact";
    s.ensure_row(name).await.unwrap();
    assert!(s.claim(name, "node-a", TTL, 0).await.unwrap());
    assert!(
        !s.renew(name, "Node-A", TTL, 1).await.unwrap(),
        "case-insensitive match"
    );
    assert!(!s.release(name, "NODE-A", 1).await.unwrap());
    assert!(s.renew(name, "node-a", TTL, 1).await.unwrap());
    // Election names, too.
    assert_eq!(s.get("EXACT").await.unwrap(), None);
}

async fn concurrent_claims_have_one_winner(backend: Backend) {
    let db = TestDb::new(backend);
    let mut setup = store(&db);
    setup.ensure_row("race").await.unwrap();
    for round in 0..5i64 {
        let mut tasks = Vec::new();
        for i in 0..5 {
            let mut s = store(&db);
            tasks.push(tokio::spawn(async move {
                s.claim("race", &format!("n{i}"), Duration::from_millis(1), round)
                    .await
                    .unwrap()
            }));
        }
        let mut winners = 0;
        for task in tasks {
            winners += task.await.unwrap() as usize;
        }
        assert_eq!(winners, 1, "round {round}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Many elections over a few shared connections: every operation gets a connection in
/// turn, claims still have one winner, and leases stay each election's own.
async fn a_shared_store_serves_many_elections(backend: Backend) {
    let db = TestDb::new(backend);
    let url = DatabaseUrl::parse(&db.url).unwrap();
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        query: TTL,
    };
    // Migrated once up front: three connections racing to migrate SQLite would retry.
    store(&db).connect().await.unwrap();
    let shared = SharedStore::new(url, timeouts, 3, false);
    let mut tasks = Vec::new();
    for election in 0..10 {
        for node in 0..5 {
            let mut store = shared.clone();
            tasks.push(tokio::spawn(async move {
                let name = format!("e{election}");
                store.ensure_row(&name).await.unwrap();
                let won = store
                    .claim(&name, &format!("n{node}"), Duration::from_secs(30), 0)
                    .await
                    .unwrap();
                (election, won)
            }));
        }
    }
    let mut winners = [0; 10];
    for task in tasks {
        let (election, won) = task.await.unwrap();
        winners[election] += won as usize;
    }
    assert_eq!(winners, [1; 10], "one winner per election");
    let mut reader = shared.clone();
    for election in 0..10 {
        let row = reader.get(&format!("e{election}")).await.unwrap().unwrap();
        assert_eq!(row.term, 1);
        assert!(row.live_holder().is_some());
    }
}

async fn migrations_run_concurrently_and_again(backend: Backend) {
    let db = TestDb::new(backend);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let mut s = store(&db);
        tasks.push(tokio::spawn(async move {
            // A node that loses a migration race on SQLite retries, as the daemon does.
            for _ in 0..5 {
                if s.connect().await.is_ok() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            false
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap());
    }
    store(&db).connect().await.unwrap();
}

/// A stalled connection times out on the client, and the store then opens a new one
/// instead of reusing the one in an unknown state.
async fn a_stalled_connection_is_replaced(backend: Backend) {
    let db = TestDb::new(backend);
    let proxy = Proxy::start(db.server_addr()).await;
    let mut s = store_at(&db.url_via(proxy.addr), Duration::from_millis(300));
    s.ensure_row("stall").await.unwrap();
    assert!(s.claim("stall", "a", TTL, 0).await.unwrap());
    proxy.set(Mode::Stall);
    let started = Instant::now();
    let error = s.renew("stall", "a", TTL, 1).await.unwrap_err();
    assert!(matches!(error, StoreError::QueryTimeout { .. }), "{error}");
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
    proxy.set(Mode::Drop);
    assert!(s.get("stall").await.is_err());
    proxy.set(Mode::Pass);
    assert!(
        s.renew("stall", "a", TTL, 1).await.unwrap(),
        "works again on a new connection"
    );
}

/// Each statement is prepared once per connection and reused from then on (diesel never
/// caches a `sql_query`: every use would be parsed and planned again, and cost PostgreSQL a
/// second round trip). On PostgreSQL the claim and the release are prepared on connecting.
async fn statements_are_prepared_once_per_connection(backend: Backend) {
    use diesel::connection::InstrumentationEvent;
    use diesel_async::AsyncConnection;
    let db = TestDb::new(backend);
    let url = DatabaseUrl::parse(&db.url).unwrap();
    let mut conn = DbConnection::connect(&url, TTL)
        .await
        .unwrap()
        .migrate()
        .await
        .unwrap();
    let cached = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&cached);
    let record = move |event: InstrumentationEvent<'_>| {
        if let InstrumentationEvent::CacheQuery { sql, .. } = event {
            seen.lock().unwrap().push(sql.to_owned());
        }
    };
    match &mut conn {
        DbConnection::Postgres(c) => c.set_instrumentation(record),
        DbConnection::Mysql(c) => c.set_instrumentation(record),
        DbConnection::Sqlite(c) => c.set_instrumentation(record),
    }
    conn.prepare_handover().await.unwrap();
    let prepared_on_connecting = cached.lock().unwrap().len();
    assert_eq!(
        prepared_on_connecting,
        if backend == Backend::Postgres { 2 } else { 0 }
    );
    let name = "prepared";
    for _ in 0..3 {
        conn.ensure_row(name).await.unwrap();
        let term = conn.get(name).await.unwrap().unwrap().term;
        assert!(conn.claim(name, "a", TTL, term).await.unwrap());
        assert!(conn.renew(name, "a", TTL, term + 1).await.unwrap());
        assert!(conn.release(name, "a", term + 1).await.unwrap());
    }
    let cached = cached.lock().unwrap();
    let mut distinct = cached.clone();
    distinct.sort();
    distinct.dedup();
    // ensure_row, get, claim, renew and release: once each.
    assert_eq!((cached.len(), distinct.len()), (5, 5), "{cached:#?}");
}

/// Where the backend can tell (PostgreSQL), a release wakes the listeners for that name
/// and only them; elsewhere there are no notifications to wait for.
async fn a_release_notifies_where_the_backend_can_tell(backend: Backend) {
    let db = TestDb::new(backend);
    let mut holder = store(&db);
    holder.connect().await.unwrap();
    let Some(mut woken) = holder.release_notifications("notified") else {
        assert_ne!(backend, Backend::Postgres, "PostgreSQL has LISTEN/NOTIFY");
        return;
    };
    let mut other_name = holder.release_notifications("other").unwrap();
    // Each listener wakes once when it starts listening (a release may have come first).
    for listener in [&mut woken, &mut other_name] {
        tokio::time::timeout(Duration::from_secs(5), listener.recv())
            .await
            .expect("listening");
    }
    holder.ensure_row("notified").await.unwrap();
    assert!(holder.claim("notified", "a", TTL, 0).await.unwrap());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(woken.try_recv().is_err(), "a claim is not a release");
    let released_at = Instant::now();
    assert!(holder.release("notified", "a", 1).await.unwrap());
    tokio::time::timeout(Duration::from_secs(2), woken.recv())
        .await
        .expect("the release is notified");
    let after = released_at.elapsed();
    assert!(
        after < Duration::from_millis(500),
        "notified after {after:?}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        other_name.try_recv().is_err(),
        "another name's listener stays asleep"
    );
    // A release that changed nothing tells nobody.
    assert!(!holder.release("notified", "a", 1).await.unwrap());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(woken.try_recv().is_err());
}

backend_tests!(postgres = Backend::Postgres => claim_renew_release, leases_lapse_by_the_database_clock, ids_are_compared_exactly, concurrent_claims_have_one_winner, migrations_run_concurrently_and_again, a_stalled_connection_is_replaced, a_release_notifies_where_the_backend_can_tell, a_shared_store_serves_many_elections, statements_are_prepared_once_per_connection);
backend_tests!(mysql = Backend::Mysql => claim_renew_release, leases_lapse_by_the_database_clock, ids_are_compared_exactly, concurrent_claims_have_one_winner, migrations_run_concurrently_and_again, a_stalled_connection_is_replaced, a_release_notifies_where_the_backend_can_tell, a_shared_store_serves_many_elections, statements_are_prepared_once_per_connection);
backend_tests!(sqlite = Backend::Sqlite => claim_renew_release, leases_lapse_by_the_database_clock, ids_are_compared_exactly, concurrent_claims_have_one_winner, migrations_run_concurrently_and_again, a_release_notifies_where_the_backend_can_tell, a_shared_store_serves_many_elections, statements_are_prepared_once_per_connection);

/// Migrates on a new connection (statements bounded by the ttl) waiting at most `wait` for
/// the migration lock; also says how long that took.
async fn migrate_waiting(
    url: &DatabaseUrl,
    wait: Duration,
) -> (Result<DbConnection, StoreError>, Duration) {
    let started = Instant::now();
    let migrated = DbConnection::connect(url, TTL)
        .await
        .unwrap()
        .migrate_waiting(wait)
        .await;
    (migrated, started.elapsed())
}

/// MySQL: a node that cannot take the migration lock within its bound (another node's
/// migrations hang) does not migrate alongside them; it fails naming the lock, the bound
/// and what to do. The session's statement limit (the ttl here) does not cut the wait
/// short.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_migrations_wait_for_the_lock_and_give_up_at_the_bound() {
    use diesel_async::{AsyncConnection, AsyncMysqlConnection, SimpleAsyncConnection};
    let db = TestDb::new(Backend::Mysql);
    let url = DatabaseUrl::parse(&db.url).unwrap();
    let mut other_node = AsyncMysqlConnection::establish(&db.url).await.unwrap();
    other_node
        .batch_execute("DO GET_LOCK('leaderd_migrations', 5)")
        .await
        .unwrap();
    let (refused, waited) = migrate_waiting(&url, Duration::from_secs(2)).await;
    other_node
        .batch_execute("DO RELEASE_LOCK('leaderd_migrations')")
        .await
        .unwrap();
    let error = refused.err().expect("no migrations while the lock is held");
    assert!(
        matches!(error, StoreError::MigrationLockTimeout { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("(GET_LOCK('leaderd_migrations')) for more than 2s")
            && message.contains("leaderd migrate"),
        "{message}"
    );
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(4),
        "gave up after {waited:?}"
    );
    let mut conn = DbConnection::connect(&url, TTL).await.unwrap();
    assert!(conn.get("x").await.is_err(), "the table was created anyway");
    // Free again: the migrations run.
    let mut conn = conn.migrate().await.unwrap();
    assert_eq!(conn.get("x").await.unwrap(), None);
}

/// SQLite: migrations take turns through an exclusive flock beside the database file, and
/// a node that cannot take it within its bound fails naming it instead of migrating.
#[tokio::test(flavor = "multi_thread")]
async fn sqlite_migrations_wait_for_the_flock_and_give_up_at_the_bound() {
    use nix::fcntl::{Flock, FlockArg};
    let db = TestDb::new(Backend::Sqlite);
    let url = DatabaseUrl::parse(&db.url).unwrap();
    let path = format!("{}.migrations.lock", url.sqlite_path());
    let file = std::fs::File::create(&path).unwrap();
    let other_node = Flock::lock(file, FlockArg::LockExclusive).unwrap();
    let (refused, waited) = migrate_waiting(&url, Duration::from_secs(1)).await;
    drop(other_node);
    let message = refused
        .err()
        .expect("no migrations while the lock is held")
        .to_string();
    assert!(
        message.contains(&format!("(flock {path}) for more than 1s")),
        "{message}"
    );
    assert!(waited >= Duration::from_secs(1), "gave up after {waited:?}");
    DbConnection::connect(&url, TTL)
        .await
        .unwrap()
        .migrate()
        .await
        .unwrap();
}
