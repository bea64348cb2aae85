//! The SQL lease store against the real PostgreSQL, MariaDB and SQLite: each statement's
//! guarantees, judged by the database clock, on a database created for the test. The
//! lease contract itself (`contract`) runs on the in-memory store as well.

use crate::support as common;

use common::proxy::{Mode, Proxy};
use common::{Backend, TestDb, lease};
use leaderd::store::DatabaseUrl;
use leaderd::store::memory::MemoryStore;
use leaderd::store::shared::SharedStore;
use leaderd::store::{
    Commands, ControlStore, DbConnection, Lease, LeaseStore, Member, MemberRecord, MemberStanding,
    ProcessToken, RecordOrder, SqlStore, StepDownRequest, StoreError, Timeouts,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) mod by_hand;
mod contract;
mod flavour;
mod tls;

use contract::*;

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

/// A connection of the test's own to `db`, its tables migrated.
async fn migrated(db: &TestDb) -> DbConnection {
    let url = DatabaseUrl::parse(&db.url).unwrap();
    DbConnection::connect(&url, TTL)
        .await
        .unwrap()
        .migrate()
        .await
        .unwrap()
}

/// A new connection to the table of `db`.
fn store<T: Table>(db: &T) -> T::Store {
    db.store()
}

/// The table of a test database.
impl Table for TestDb {
    type Store = SqlStore;

    fn store(&self) -> SqlStore {
        store_at(&self.url, TTL)
    }

    fn notifies(&self) -> bool {
        // NOTIFY on PostgreSQL, side locks elsewhere.
        true
    }

    async fn start_term_as_old_version(&self, name: &str, holder: &str) -> bool {
        let url = DatabaseUrl::parse(&self.url).unwrap();
        let mut old_node = DbConnection::connect(&url, TTL).await.unwrap();
        let update = format!(
            "UPDATE service_leader_lock SET term = term + 1, container_id = '{holder}'
           WHERE name = '{name}'"
        );
        execute_raw(&mut old_node, &[&update]).await;
        true
    }

    async fn set_term(&self, name: &str, holder: &str, term: i64) {
        let url = DatabaseUrl::parse(&self.url).unwrap();
        let mut operator = DbConnection::connect(&url, TTL).await.unwrap();
        let update = format!(
            "UPDATE service_leader_lock SET term = {term}, container_id = '{holder}'
           WHERE name = '{name}'"
        );
        execute_raw(&mut operator, &[&update]).await;
    }

    async fn step_clock_back(&self, by: Duration) {
        let url = DatabaseUrl::parse(&self.url).unwrap();
        let mut operator = DbConnection::connect(&url, TTL).await.unwrap();
        let us = by.as_micros() as i64;
        by_hand::move_times(&mut operator, self.backend, None, us).await;
    }

    async fn set_handover(&self, name: &str, to: Option<&str>, until: Option<Duration>) {
        let url = DatabaseUrl::parse(&self.url).unwrap();
        let mut operator = DbConnection::connect(&url, TTL).await.unwrap();
        let until = until.map(|until| (true, until));
        by_hand::edit_handover(&mut operator, self.backend, name, to, until).await;
    }
}

impl Connect for SqlStore {
    fn connect(&mut self) -> impl std::future::Future<Output = Result<(), StoreError>> {
        SqlStore::connect(self)
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
                    .claim(&lease(
                        &name,
                        &format!("n{node}"),
                        Duration::from_secs(30),
                        0,
                    ))
                    .await
                    .unwrap();
                (election, won)
            }));
        }
    }
    let mut winners = [0; 10];
    let mut terms = [0; 10];
    for task in tasks {
        let (election, won) = task.await.unwrap();
        if let Some(term) = won {
            winners[election] += 1;
            terms[election] = term;
        }
    }
    assert_eq!(winners, [1; 10], "one winner per election");
    let mut reader = shared.clone();
    for (election, term) in terms.iter().enumerate() {
        let row = reader.get(&format!("e{election}")).await.unwrap().unwrap();
        assert_eq!(row.term, *term);
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
    let term = s
        .claim(&lease("stall", "a", TTL, 0))
        .await
        .unwrap()
        .unwrap();
    proxy.set(Mode::Stall);
    let started = Instant::now();
    let error = s.renew(&lease("stall", "a", TTL, term)).await.unwrap_err();
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
        s.renew(&lease("stall", "a", TTL, term)).await.unwrap(),
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
    let mut conn = migrated(&db).await;
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
        let taken = conn.claim(&lease(name, "a", TTL, term)).await.unwrap();
        let taken = taken.expect("the free row is taken");
        assert!(
            conn.renew(&lease(name, "a", TTL, taken), Default::default())
                .await
                .unwrap()
        );
        assert!(conn.release(&lease(name, "a", TTL, taken)).await.unwrap());
    }
    let cached = cached.lock().unwrap();
    let mut distinct = cached.clone();
    distinct.sort();
    distinct.dedup();
    // ensure_row, get, claim, renew and release: once each; and on MySQL the read of the
    // term the claim started.
    let statements = if backend == Backend::Mysql { 6 } else { 5 };
    assert_eq!(
        (cached.len(), distinct.len()),
        (statements, statements),
        "{cached:#?}"
    );
}

#[derive(diesel::QueryableByName)]
struct Setting {
    #[diesel(sql_type = diesel::sql_types::Text)]
    setting: String,
}

/// PostgreSQL's release turns `synchronous_commit` off for its own transaction only: the
/// connection's next writes (a node that resigned renews and claims on it again) still
/// wait for the WAL flush.
#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_release_leaves_later_commits_synchronous() {
    use diesel_async::RunQueryDsl;
    let db = TestDb::new(Backend::Postgres);
    let mut conn = migrated(&db).await;
    let name = "released";
    conn.ensure_row(name).await.unwrap();
    let term = conn
        .claim(&lease(name, "a", TTL, 0))
        .await
        .unwrap()
        .unwrap();
    assert!(conn.release(&lease(name, "a", TTL, term)).await.unwrap());
    let DbConnection::Postgres(c) = &mut conn else {
        unreachable!()
    };
    let now: Setting = diesel::sql_query("SELECT current_setting('synchronous_commit') AS setting")
        .get_result(c)
        .await
        .unwrap();
    assert_eq!(now.setting, "on");
    assert!(
        conn.claim(&lease(name, "a", TTL, term))
            .await
            .unwrap()
            .is_some()
    );
}

/// Runs each statement in turn on a connection of the test's own (an operator, or another
/// node's statement caught mid-way).
async fn execute_raw(conn: &mut DbConnection, statements: &[&str]) {
    use diesel_async::SimpleAsyncConnection;
    for sql in statements {
        match conn {
            DbConnection::Postgres(c) => c.batch_execute(sql).await,
            DbConnection::Mysql(c) => c.batch_execute(sql).await,
            DbConnection::Sqlite(c) => c.batch_execute(sql).await,
        }
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
    }
}

#[derive(diesel::QueryableByName)]
struct Micros {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    us: i64,
}

/// When the row's lease started (its `timestamp`), in microseconds of the database clock.
async fn lease_start_us(conn: &mut DbConnection, name: &str) -> i64 {
    use diesel_async::RunQueryDsl;
    let sql = match conn {
        DbConnection::Postgres(_) => format!(
            r#"SELECT (EXTRACT(EPOCH FROM "timestamp") * 1000000)::BIGINT AS us
               FROM service_leader_lock WHERE name = '{name}'"#
        ),
        DbConnection::Mysql(_) => format!(
            "SELECT CAST(UNIX_TIMESTAMP(`timestamp`) * 1000000 AS SIGNED) AS us
             FROM service_leader_lock WHERE name = '{name}'"
        ),
        DbConnection::Sqlite(_) => format!(
            r#"SELECT CAST(ROUND((julianday("timestamp") - 2440587.5) * 86400000000.0) AS INTEGER) AS us
               FROM service_leader_lock WHERE name = '{name}'"#
        ),
    };
    let query = diesel::sql_query(sql);
    let row: Micros = match conn {
        DbConnection::Postgres(c) => query.get_result(c).await,
        DbConnection::Mysql(c) => query.get_result(c).await,
        DbConnection::Sqlite(c) => query.get_result(c).await,
    }
    .unwrap();
    row.us
}

/// A renewal that started on the server, then waited for the row lock while a newer write
/// of the same lease committed (the leader's next renewal, sent after this one's connection
/// was reset), must not move the lease's start back when it commits after it: the leader
/// counts its deadline from the newer renewal. MySQL's NOW(6) is the statement's start.
async fn a_renewal_that_waited_for_the_row_lock_never_moves_the_lease_start_back(backend: Backend) {
    let db = TestDb::new(backend);
    let mut leader = store(&db);
    leader.connect().await.unwrap();
    let name = "waited";
    leader.ensure_row(name).await.unwrap();
    let term = leader
        .claim(&lease(name, "a", TTL, 0))
        .await
        .unwrap()
        .unwrap();

    let url = DatabaseUrl::parse(&db.url).unwrap();
    let mut other = DbConnection::connect(&url, Duration::from_secs(10))
        .await
        .unwrap();
    let (lock, write) = match backend {
        Backend::Postgres => (
            "SELECT term FROM service_leader_lock WHERE name = 'waited' FOR UPDATE",
            r#"UPDATE service_leader_lock SET "timestamp" = clock_timestamp() WHERE name = 'waited'"#,
        ),
        Backend::Mysql => (
            "SELECT term FROM service_leader_lock WHERE name = 'waited' FOR UPDATE",
            "UPDATE service_leader_lock SET `timestamp` = NOW(6) WHERE name = 'waited'",
        ),
        // One writer at a time: the whole database is the lock.
        Backend::Sqlite => (
            "SELECT term FROM service_leader_lock WHERE name = 'waited'",
            r#"UPDATE service_leader_lock SET "timestamp" = strftime('%Y-%m-%d %H:%M:%f', 'now')
               WHERE name = 'waited'"#,
        ),
    };
    let begin = match backend {
        Backend::Sqlite => "BEGIN IMMEDIATE",
        _ => "BEGIN",
    };
    execute_raw(&mut other, &[begin, lock]).await;
    let renewal = tokio::spawn(async move { leader.renew(&lease(name, "a", TTL, term)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!renewal.is_finished(), "the renewal waits for the row lock");
    // The newer write, 300 ms after the renewal started; read before the commit, as the
    // renewal may commit at once after it.
    execute_raw(&mut other, &[write]).await;
    let newer = lease_start_us(&mut other, name).await;
    execute_raw(&mut other, &["COMMIT"]).await;
    assert!(renewal.await.unwrap().unwrap(), "the lease was live");
    let after = lease_start_us(&mut other, name).await;
    assert!(
        after >= newer,
        "the renewal moved the lease's start back by {} µs",
        newer - after
    );
}

/// A table the previous version created, with a lease one of its nodes holds, keeps that
/// lease through the migration that adds `term_token`: the row reads with no token, and
/// the live lease stays its holder's.
async fn a_lease_held_before_the_term_token_migration_survives_it(backend: Backend) {
    let db = TestDb::new(backend);
    let url = DatabaseUrl::parse(&db.url).unwrap();
    let mut old_node = DbConnection::connect(&url, TTL).await.unwrap();
    let (create_table, now) = match backend {
        Backend::Postgres => (
            include_str!(
                "../../migrations/postgres/2026-11-22-000000_create_service_leader_lock/up.sql"
            ),
            "clock_timestamp()",
        ),
        Backend::Mysql => (
            include_str!(
                "../../migrations/mysql/2026-11-22-000000_create_service_leader_lock/up.sql"
            ),
            "NOW(6)",
        ),
        Backend::Sqlite => (
            include_str!(
                "../../migrations/sqlite/2026-11-22-000000_create_service_leader_lock/up.sql"
            ),
            "strftime('%Y-%m-%d %H:%M:%f', 'now')",
        ),
    };
    let hold = format!(
        "INSERT INTO service_leader_lock (name, container_id, {}, term, lease_ms)
         VALUES ('kept', 'old', {now}, 7, 60000)",
        match backend {
            Backend::Mysql => "`timestamp`",
            _ => r#""timestamp""#,
        }
    );
    execute_raw(&mut old_node, &[create_table, &hold]).await;

    // A node of this version that does not migrate is told what to do.
    let mut unmigrated = SqlStore::new(
        url.clone(),
        Timeouts {
            connect: Duration::from_secs(2),
            query: TTL,
        },
        false,
    );
    let error = unmigrated.get("kept").await.unwrap_err();
    assert!(
        // Any column a later migration added (the database names the first it misses).
        matches!(error, StoreError::SchemaOutdated { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("leaderd migrate"), "{error}");

    let mut new_node = store(&db);
    new_node.connect().await.unwrap();
    let row = new_node.get("kept").await.unwrap().unwrap();
    assert_eq!(
        (row.live_holder(), row.term, row.term_token),
        (Some("old"), 7, None)
    );
    assert!(
        new_node
            .claim(&lease("kept", "new", TTL, 7))
            .await
            .unwrap()
            .is_none(),
        "still the old node's lease"
    );
}

backend_tests!(postgres = TestDb::new(Backend::Postgres) => claim_renew_release, a_handover_without_a_window_is_none, a_resign_ends_an_offer_that_went_unanswered, a_hold_after_the_clock_stepped_back_lasts_its_time, a_new_term_is_at_least_the_database_clock, leases_lapse_by_the_database_clock, ids_are_compared_exactly, concurrent_claims_have_one_winner, a_release_notifies_where_the_backend_can_tell, the_term_token_tells_which_process_started_the_term, the_time_held_counts_from_the_start_of_the_term, a_pause_keeps_free_and_lapsed_leases_from_every_claim, a_handover_lets_only_its_target_claim_within_its_window, members_are_recorded_by_the_database_clock; Backend::Postgres => migrations_run_concurrently_and_again, a_stalled_connection_is_replaced, a_shared_store_serves_many_elections, statements_are_prepared_once_per_connection, a_renewal_that_waited_for_the_row_lock_never_moves_the_lease_start_back, a_lease_held_before_the_term_token_migration_survives_it);
backend_tests!(mysql = TestDb::new(Backend::Mysql) => claim_renew_release, a_handover_without_a_window_is_none, a_resign_ends_an_offer_that_went_unanswered, a_hold_after_the_clock_stepped_back_lasts_its_time, a_new_term_is_at_least_the_database_clock, leases_lapse_by_the_database_clock, ids_are_compared_exactly, concurrent_claims_have_one_winner, a_release_notifies_where_the_backend_can_tell, the_term_token_tells_which_process_started_the_term, the_time_held_counts_from_the_start_of_the_term, a_pause_keeps_free_and_lapsed_leases_from_every_claim, a_handover_lets_only_its_target_claim_within_its_window, members_are_recorded_by_the_database_clock; Backend::Mysql => migrations_run_concurrently_and_again, a_stalled_connection_is_replaced, a_shared_store_serves_many_elections, statements_are_prepared_once_per_connection, a_renewal_that_waited_for_the_row_lock_never_moves_the_lease_start_back, a_lease_held_before_the_term_token_migration_survives_it);
backend_tests!(sqlite = TestDb::new(Backend::Sqlite) => claim_renew_release, a_handover_without_a_window_is_none, a_resign_ends_an_offer_that_went_unanswered, a_hold_after_the_clock_stepped_back_lasts_its_time, a_new_term_is_at_least_the_database_clock, leases_lapse_by_the_database_clock, ids_are_compared_exactly, concurrent_claims_have_one_winner, a_release_notifies_where_the_backend_can_tell, the_term_token_tells_which_process_started_the_term, the_time_held_counts_from_the_start_of_the_term, a_pause_keeps_free_and_lapsed_leases_from_every_claim, a_handover_lets_only_its_target_claim_within_its_window, members_are_recorded_by_the_database_clock; Backend::Sqlite => migrations_run_concurrently_and_again, a_shared_store_serves_many_elections, statements_are_prepared_once_per_connection, a_renewal_that_waited_for_the_row_lock_never_moves_the_lease_start_back, a_lease_held_before_the_term_token_migration_survives_it);
backend_tests!(memory = MemoryStore::new() => claim_renew_release, a_handover_without_a_window_is_none, a_resign_ends_an_offer_that_went_unanswered, a_hold_after_the_clock_stepped_back_lasts_its_time, a_new_term_is_at_least_the_database_clock, leases_lapse_by_the_database_clock, ids_are_compared_exactly, concurrent_claims_have_one_winner, a_release_notifies_where_the_backend_can_tell, the_term_token_tells_which_process_started_the_term, the_time_held_counts_from_the_start_of_the_term, a_pause_keeps_free_and_lapsed_leases_from_every_claim, a_handover_lets_only_its_target_claim_within_its_window, members_are_recorded_by_the_database_clock);

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
