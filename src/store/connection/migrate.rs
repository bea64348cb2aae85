//! The migrations, and the locks through which nodes that start together take turns to
//! run them: an advisory lock on PostgreSQL, GET_LOCK on MySQL, an exclusive flock on a
//! file beside the database on SQLite. Every run converges, however interrupted.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::{
    AnsiTransactionManager, AsyncConnection, AsyncMysqlConnection, RunQueryDsl,
    SimpleAsyncConnection, TransactionManager, async_connection_wrapper::AsyncConnectionWrapper,
    sync_connection_wrapper::SyncConnectionWrapper,
};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::time::Duration;

use super::{DbConnection, ms};
use crate::store::StoreError;
use crate::store::dialect::{MYSQL_GALERA_TRIGGER, MYSQL_GALERA_TRIGGER_PRESENT, MYSQL_WSREP_ON};

const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");
const MYSQL_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/mysql");
const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");

/// The MySQL named lock through which nodes take turns to migrate.
const MYSQL_MIGRATION_LOCK: &str = "leaderd_migrations";

/// Migrations this process has applied, all connections together: `leaderd migrate`
/// says from it whether it changed anything.
static APPLIED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many migrations this process has applied so far.
pub fn applied_by_this_process() -> usize {
    std::sync::atomic::AtomicUsize::load(&APPLIED, std::sync::atomic::Ordering::Relaxed)
}

/// How long a node waits for another node's migrations (MySQL, SQLite).
const MIGRATION_LOCK_WAIT: Duration = Duration::from_secs(10);

#[derive(QueryableByName)]
struct LockTaken {
    #[diesel(sql_type = Nullable<BigInt>)]
    taken: Option<i64>,
}

/// Takes MySQL's migration lock, waiting up to `wait`. GET_LOCK answers 1 once taken, 0
/// when the wait ran out, and NULL when interrupted: by the session's statement limit,
/// too, so that limit is lifted for this statement where MariaDB allows it (MySQL has no
/// `SET STATEMENT`). Anything but 1 means another node may be migrating: do not migrate.
async fn lock_mysql_migrations(
    conn: &mut AsyncMysqlConnection,
    wait: Duration,
) -> Result<(), StoreError> {
    let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
    let get_lock =
        format!("SELECT CAST(GET_LOCK('{MYSQL_MIGRATION_LOCK}', {seconds}) AS SIGNED) AS taken");
    let unlimited = format!("SET STATEMENT max_statement_time = 0 FOR {get_lock}");
    let answer: Vec<LockTaken> = match diesel::sql_query(&unlimited).load(conn).await {
        Ok(answer) => answer,
        Err(_) => diesel::sql_query(&get_lock).load(conn).await?,
    };
    match answer.as_slice() {
        [LockTaken { taken: Some(1) }] => Ok(()),
        _ => Err(StoreError::MigrationLockTimeout {
            lock: format!("GET_LOCK('{MYSQL_MIGRATION_LOCK}')"),
            waited: Duration::from_secs(seconds),
        }),
    }
}

#[derive(QueryableByName)]
struct DatabaseFile {
    #[diesel(sql_type = Text)]
    file: String,
}

/// How often a node that waits for another's SQLite migrations tries the lock again.
const SQLITE_LOCK_RETRY: Duration = Duration::from_millis(10);

/// Takes turns with the other processes on this database file: the migration harness
/// checks what is applied and then records it, so two first starts at once would both
/// apply and one would fail. The lock is an exclusive `flock` on a file beside the
/// database, not on the database itself: closing a second descriptor of it would drop
/// SQLite's own POSIX locks. Held until the returned lock is dropped; `None` for an
/// in-memory database, which nobody shares.
async fn lock_sqlite_migrations(
    conn: &mut SyncConnectionWrapper<diesel::SqliteConnection>,
    wait: Duration,
) -> Result<Option<Flock<std::fs::File>>, StoreError> {
    let main: Vec<DatabaseFile> =
        diesel::sql_query("SELECT file FROM pragma_database_list WHERE name = 'main'")
            .load(conn)
            .await?;
    let Some(DatabaseFile { file }) = main.into_iter().next().filter(|f| !f.file.is_empty()) else {
        return Ok(None);
    };
    let path = format!("{file}.migrations.lock");
    let mut lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|error| StoreError::Migration(Box::new(error)))?;
    let give_up_at = tokio::time::Instant::now() + wait;
    loop {
        match Flock::lock(lock_file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => return Ok(Some(locked)),
            Err((file, Errno::EWOULDBLOCK)) if tokio::time::Instant::now() < give_up_at => {
                lock_file = file;
                tokio::time::sleep(SQLITE_LOCK_RETRY).await;
            }
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(StoreError::MigrationLockTimeout {
                    lock: format!("flock {path}"),
                    waited: wait,
                });
            }
            Err((_, errno)) => return Err(StoreError::Migration(Box::new(errno))),
        }
    }
}

/// How a backend records an applied migration: a record another node wrote first is not
/// an error (diesel's own harness inserts it plainly, and on MySQL a duplicate would then
/// fail every later run).
#[derive(Clone, Copy)]
enum Record {
    /// `INSERT IGNORE` (MySQL/MariaDB).
    Ignore,
    /// `ON CONFLICT DO NOTHING` (PostgreSQL, SQLite).
    OnConflict,
}

impl Record {
    fn statement(self, version: &str) -> String {
        // Versions are the digits of the embedded directories' names.
        let version = version.replace('\'', "''");
        match self {
            Record::Ignore => format!(
                "INSERT IGNORE INTO __diesel_schema_migrations (version) VALUES ('{version}')"
            ),
            Record::OnConflict => format!(
                "INSERT INTO __diesel_schema_migrations (version) VALUES ('{version}') \
                 ON CONFLICT DO NOTHING"
            ),
        }
    }
}

/// Applies the migrations not recorded yet, each with its record in one transaction where
/// the backend has transactional DDL (PostgreSQL, SQLite). On MySQL every DDL statement
/// commits on its own, so a crash or a lost connection can leave a migration applied and
/// unrecorded, and on a multi-primary cluster (Galera) nodes on different members migrate
/// at once (the migration lock is per member): there every migration is written to be run
/// again (`IF NOT EXISTS`), and its record tolerates a duplicate, so that any number of
/// runs, interrupted or concurrent, end with the schema complete. Hands the connection
/// back whatever happened.
fn run_migrations<C>(
    conn: C,
    migrations: EmbeddedMigrations,
    record: Record,
) -> (C, Result<(), StoreError>)
where
    C: AsyncConnection + 'static,
    AsyncConnectionWrapper<C>:
        diesel::Connection<Backend = C::Backend> + MigrationHarness<C::Backend>,
{
    let mut conn = AsyncConnectionWrapper::<C>::from(conn);
    let ran = tokio::task::block_in_place(|| -> diesel::migration::Result<()> {
        for migration in conn.pending_migrations(migrations)? {
            let recorded = record.statement(&migration.name().version().to_string());
            let apply = |c: &mut AsyncConnectionWrapper<C>| -> diesel::migration::Result<()> {
                migration.run(c)?;
                diesel::connection::SimpleConnection::batch_execute(c, &recorded)?;
                Ok(())
            };
            match migration.metadata().run_in_transaction() {
                true => diesel::Connection::transaction(&mut conn, apply)?,
                false => apply(&mut conn)?,
            }
            APPLIED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    });
    (conn.into_inner(), ran.map_err(StoreError::Migration))
}

#[derive(QueryableByName)]
struct WsrepOn {
    #[diesel(sql_type = Nullable<BigInt>)]
    wsrep_on: Option<i64>,
}

#[derive(QueryableByName)]
struct Present {
    #[diesel(sql_type = BigInt)]
    present: i64,
}

/// How many times a node runs the MySQL migrations in one go: a Galera member aborts a
/// record that conflicts with one written at once on another member ("Deadlock found"),
/// and the next run finds the schema there.
const MYSQL_MIGRATION_RUNS: usize = 3;

/// The key of the advisory lock through which PostgreSQL nodes take turns to migrate.
const POSTGRES_MIGRATION_LOCK: i64 = 7026111822;

impl DbConnection {
    /// Applies the embedded migrations of this backend. Nodes that start together on one
    /// server take turns: an advisory lock on PostgreSQL, GET_LOCK on MySQL (a lock of one
    /// member on a multi-primary cluster, where nodes on different members migrate at once:
    /// see `run_migrations` for why that converges), an exclusive flock on a file beside
    /// the database on SQLite.
    ///
    /// The harness is synchronous (it blocks on the async connection inside), so it runs
    /// on a blocking thread where a caller's timeout can still fire.
    pub async fn migrate(self) -> Result<Self, StoreError> {
        self.migrate_waiting(MIGRATION_LOCK_WAIT).await
    }

    /// [`DbConnection::migrate`], waiting at most `lock_wait` for another node's
    /// migrations on MySQL (whole seconds, at least one).
    pub async fn migrate_waiting(self, lock_wait: Duration) -> Result<Self, StoreError> {
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || handle.block_on(self.migrate_here(lock_wait))).await?
    }

    async fn migrate_here(self, lock_wait: Duration) -> Result<Self, StoreError> {
        match self {
            DbConnection::Postgres(mut conn) => {
                conn.batch_execute(&format!(
                    "SELECT pg_advisory_lock({POSTGRES_MIGRATION_LOCK})"
                ))
                .await?;
                let (mut conn, ran) = run_migrations(conn, POSTGRES_MIGRATIONS, Record::OnConflict);
                ran?;
                conn.batch_execute(&format!(
                    "SELECT pg_advisory_unlock({POSTGRES_MIGRATION_LOCK})"
                ))
                .await?;
                Ok(DbConnection::Postgres(conn))
            }
            DbConnection::Mysql(mut conn) => {
                // Nodes on one server take turns; on a multi-primary cluster the lock is
                // the member's alone, and the migrations converge all the same.
                lock_mysql_migrations(&mut conn, lock_wait).await?;
                let mut runs = 0;
                loop {
                    runs += 1;
                    let (back, ran) = run_migrations(conn, MYSQL_MIGRATIONS, Record::Ignore);
                    conn = back;
                    match ran {
                        Ok(()) => break,
                        // Dropping the connection releases the lock.
                        Err(error) if runs >= MYSQL_MIGRATION_RUNS => return Err(error),
                        Err(_) => {}
                    }
                }
                conn.batch_execute(&format!("DO RELEASE_LOCK('{MYSQL_MIGRATION_LOCK}')"))
                    .await?;
                Ok(DbConnection::Mysql(conn))
            }
            DbConnection::Sqlite(mut conn) => {
                let _turn = lock_sqlite_migrations(&mut conn, lock_wait).await?;
                let (conn, ran) = run_migrations(conn, SQLITE_MIGRATIONS, Record::OnConflict);
                ran?;
                Ok(DbConnection::Sqlite(conn))
            }
        }
    }

    /// On a Galera member, creates the trigger the fence needs there (`dialect/fence.rs`)
    /// unless it is there; true if this created it. Elsewhere it does nothing: a lock is
    /// enough on one server, and a trigger would need the SUPER privilege once the binary
    /// log is on, and fail every claim once its definer is dropped. `leaderd migrate`
    /// runs this, not a node's own migrations: several members creating it at once, while
    /// running nodes' claims already fired it, hung a test cluster (a DDL's turn in total
    /// order waiting behind a transaction waiting for certification).
    pub async fn create_galera_fence_trigger(&mut self) -> Result<bool, StoreError> {
        let DbConnection::Mysql(conn) = self else {
            return Ok(false);
        };
        let galera: Vec<WsrepOn> = match diesel::sql_query(MYSQL_WSREP_ON).load(conn).await {
            Ok(galera) => galera,
            // MySQL, which has no such variable: no Galera.
            Err(_) => return Ok(false),
        };
        if !matches!(galera.as_slice(), [WsrepOn { wsrep_on: Some(1) }]) {
            return Ok(false);
        }
        let present: Vec<Present> = diesel::sql_query(MYSQL_GALERA_TRIGGER_PRESENT)
            .load(conn)
            .await?;
        if matches!(present.as_slice(), [Present { present: 1 }]) {
            return Ok(false);
        }
        conn.batch_execute(MYSQL_GALERA_TRIGGER).await?;
        Ok(true)
    }

    /// [`DbConnection::migrate`] through a pooler in transaction mode (PostgreSQL), where
    /// a session advisory lock would stay behind on whichever server connection took it:
    /// every migration runs in one transaction (the harness's own become savepoints) that
    /// first takes the lock at transaction level, so the commit or the end of the
    /// connection releases it.
    pub async fn migrate_in_transaction(self) -> Result<Self, StoreError> {
        let DbConnection::Postgres(conn) = self else {
            return self.migrate().await;
        };
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            handle.block_on(async move {
                let mut conn = conn;
                AnsiTransactionManager::begin_transaction(&mut conn).await?;
                // Bounded by the server too: a client that gives up leaves its waiting
                // backend behind, which a pooler does not end.
                conn.batch_execute(&format!(
                    "SET LOCAL lock_timeout = {}; \
                     SELECT pg_advisory_xact_lock({POSTGRES_MIGRATION_LOCK})",
                    ms(MIGRATION_LOCK_WAIT)
                ))
                .await?;
                let (mut conn, ran) = run_migrations(conn, POSTGRES_MIGRATIONS, Record::OnConflict);
                ran?;
                AnsiTransactionManager::commit_transaction(&mut conn).await?;
                Ok(DbConnection::Postgres(conn))
            })
        })
        .await?
    }
}
