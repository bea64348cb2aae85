//! One open connection to whichever backend the URL names ([`DbConnection`]): opening it
//! with its session limits, applying the migrations (so that they converge), and running each
//! operation as one of the dialect's statements (see `dialect.rs`, which holds their SQL).

use diesel::QueryableByName;
use diesel::connection::CacheSize;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::{
    AnsiTransactionManager, AsyncConnection, AsyncMysqlConnection, AsyncPgConnection, RunQueryDsl,
    SimpleAsyncConnection, TransactionManager, async_connection_wrapper::AsyncConnectionWrapper,
    sync_connection_wrapper::SyncConnectionWrapper,
};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};
use tracing::{debug, warn};

use super::dialect::{
    Dialect, MYSQL, MYSQL_DURABILITY, POSTGRES, Param, SQLITE, SQLITE_SYNCED, SQLITE_UNSYNCED,
    Statement,
};
use super::pooler;
use super::{Backend, DatabaseUrl};
use super::{
    Commands, HeldRow, Lease, LeaseRow, Member, MemberRecord, MemberStanding, Pending,
    ProcessToken, StoreError,
};

const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");
const MYSQL_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/mysql");
const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");

/// A term no row has: terms start at 0 and only grow.
const NO_TERM: i64 = -1;

#[derive(QueryableByName)]
struct RowSql {
    #[diesel(sql_type = Nullable<Text>)]
    container_id: Option<String>,
    #[diesel(sql_type = BigInt)]
    term: i64,
    #[diesel(sql_type = BigInt)]
    lease_ms: i64,
    #[diesel(sql_type = BigInt)]
    age_ms: i64,
    #[diesel(sql_type = BigInt)]
    now_us: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    term_token: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    held_ms: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    paused_ms: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    handover_to: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    handover_ms: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    resign_term: Option<i64>,
}

#[derive(QueryableByName)]
struct HeldSql {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    container_id: String,
    #[diesel(sql_type = BigInt)]
    term: i64,
    #[diesel(sql_type = BigInt)]
    lease_ms: i64,
    #[diesel(sql_type = BigInt)]
    age_ms: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    held_ms: Option<i64>,
}

#[derive(QueryableByName)]
struct MemberSql {
    #[diesel(sql_type = Text)]
    node_id: String,
    #[diesel(sql_type = BigInt)]
    candidate: i64,
    #[diesel(sql_type = BigInt)]
    priority: i64,
    #[diesel(sql_type = Text)]
    version: String,
    #[diesel(sql_type = Text)]
    host: String,
    #[diesel(sql_type = BigInt)]
    member_ms: i64,
    #[diesel(sql_type = BigInt)]
    seen_ms: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    no_preempt_ms: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    standing: Option<String>,
}

/// One open connection to whichever backend the URL names.
// A store owns exactly one of these, so the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum DbConnection {
    Postgres(AsyncPgConnection),
    Mysql(AsyncMysqlConnection),
    Sqlite(SyncConnectionWrapper<diesel::SqliteConnection>),
}

/// Runs the same code against whichever connection is open; each arm is type-checked on
/// its own (diesel's MultiConnection does not support async connections).
macro_rules! on_connection {
    ($conn:expr, |$c:ident, $dialect:ident| $body:expr) => {
        match $conn {
            DbConnection::Postgres($c) => {
                let $dialect = &POSTGRES;
                $body
            }
            DbConnection::Mysql($c) => {
                let $dialect = &MYSQL;
                $body
            }
            DbConnection::Sqlite($c) => {
                let $dialect = &SQLITE;
                $body
            }
        }
    };
}

/// The MySQL named lock through which nodes take turns to migrate.
const MYSQL_MIGRATION_LOCK: &str = "leaderd_migrations";

/// How long a node waits for another node's migrations (MySQL, SQLite).
pub const MIGRATION_LOCK_WAIT: Duration = Duration::from_secs(10);

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
        }
        Ok(())
    });
    (conn.into_inner(), ran.map_err(StoreError::Migration))
}

/// How many times a node runs the MySQL migrations in one go: a Galera member aborts a
/// record that conflicts with one written at once on another member ("Deadlock found"),
/// and the next run finds the schema there.
const MYSQL_MIGRATION_RUNS: usize = 3;

/// Columns later migrations added, which a table migrated for an older version lacks.
const ADDED_COLUMNS: [&str; 9] = [
    "term_token",
    "taken_at",
    "taken_term",
    "paused_until",
    "handover_to",
    "handover_until",
    "resign_term",
    "leaderd_member",
    "standing",
];

/// Tells a statement that failed on a column the table lacks (a node of this version on a
/// table nobody migrated yet) from other failures, so the error says what to do.
fn missing_column(error: StoreError) -> StoreError {
    if let StoreError::Query(diesel::result::Error::DatabaseError(_, info)) = &error {
        if let Some(column) = ADDED_COLUMNS
            .into_iter()
            .find(|column| info.message().contains(column))
        {
            return StoreError::SchemaOutdated { column };
        }
    }
    error
}

#[derive(QueryableByName)]
struct MysqlDurability {
    #[diesel(sql_type = Nullable<BigInt>)]
    flush_log: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    sync_binlog: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    log_bin: Option<i64>,
}

/// Whether this process has read the MySQL server's durability settings yet.
static MYSQL_DURABILITY_READ: AtomicBool = AtomicBool::new(false);

/// Reads, on the first MySQL connection of the process, the server settings a claim's
/// durability depends on, and warns once, naming them, when a commit acknowledged to a
/// node can be lost in a crash: `innodb_flush_log_at_trx_commit` other than 1 (the redo
/// log is written or flushed only about once a second), or `sync_binlog` other than 1
/// with the binary log on (a replica or a Galera member can get a transaction the crashed
/// server lost, or the reverse). Unlike PostgreSQL's `synchronous_commit`, neither can be
/// set for one transaction: they are the server's. A lost claim can hand the same term
/// out twice.
async fn check_mysql_durability(conn: &mut AsyncMysqlConnection) {
    if MYSQL_DURABILITY_READ.swap(true, Ordering::Relaxed) {
        return;
    }
    let read: Result<Vec<MysqlDurability>, _> =
        diesel::sql_query(MYSQL_DURABILITY).load(conn).await;
    let Ok(Some(settings)) = read.map(|rows| rows.into_iter().next()) else {
        debug!("could not read innodb_flush_log_at_trx_commit and sync_binlog");
        return;
    };
    let mut lax = Vec::new();
    if settings.flush_log != Some(1) {
        lax.push(format!(
            "innodb_flush_log_at_trx_commit = {}",
            settings.flush_log.map_or("?".into(), |v| v.to_string())
        ));
    }
    if settings.log_bin == Some(1) && settings.sync_binlog != Some(1) {
        lax.push(format!(
            "sync_binlog = {} (the binary log is on)",
            settings.sync_binlog.map_or("?".into(), |v| v.to_string())
        ));
    }
    if !lax.is_empty() {
        warn!(
            settings = %lax.join(", "),
            "the MySQL server may lose a commit it acknowledged if it crashes: a claim lost \
             that way can hand the same term out twice; set innodb_flush_log_at_trx_commit = 1 \
             and sync_binlog = 1 on the server"
        );
    }
}

/// PostgreSQL's bounds on a statement, its lock waits and an abandoned transaction, as
/// `SET` (the session) or `SET LOCAL` (one transaction) statements.
fn postgres_limits(set: &str, limit_ms: i64) -> String {
    format!(
        "{set} statement_timeout = {limit_ms}; {set} lock_timeout = {limit_ms}; \
         {set} idle_in_transaction_session_timeout = {}",
        limit_ms.saturating_mul(4)
    )
}

/// The key of the advisory lock through which PostgreSQL nodes take turns to migrate.
const POSTGRES_MIGRATION_LOCK: i64 = 7026111822;

fn unix_us(time: SystemTime) -> i64 {
    match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => since.as_micros() as i64,
        Err(before) => -(before.duration().as_micros() as i64),
    }
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl DbConnection {
    /// Opens a connection and bounds every later statement on it on the server side too,
    /// so a statement the client gave up on does not go on holding locks.
    pub async fn connect(
        url: &DatabaseUrl,
        statement_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let limit = ms(statement_timeout).max(1);
        let connect_error = |cause| StoreError::Connect {
            url: url.redacted(),
            cause,
        };
        let conn = match url.backend() {
            Backend::Postgres => {
                let mut conn = super::tls::connect_postgres(url)
                    .await
                    .map_err(pooler::explain)?;
                if url.transaction_pooled() {
                    // Each statement sets its own limits (`begin_limited`).
                    conn.set_prepared_statement_cache_size(CacheSize::Disabled);
                } else {
                    conn.batch_execute(&format!(
                        "{}; SET application_name = 'leaderd'",
                        postgres_limits("SET", limit)
                    ))
                    .await?;
                }
                DbConnection::Postgres(conn)
            }
            Backend::Mysql => {
                let mut conn = super::tls::connect_mysql(url).await?;
                let seconds = limit as f64 / 1000.0;
                // MariaDB bounds every statement; MySQL only bounds SELECTs, and the row
                // lock wait below covers the UPDATEs there.
                if conn
                    .batch_execute(&format!("SET SESSION max_statement_time = {seconds:.3}"))
                    .await
                    .is_err()
                {
                    conn.batch_execute(&format!("SET SESSION max_execution_time = {limit}"))
                        .await?;
                }
                // Lease times are DATETIME(6) compared with NOW(6): every connection runs
                // in UTC whatever the server's zone (see dialect.rs, "TIME ZONES").
                conn.batch_execute(&format!(
                    "SET SESSION innodb_lock_wait_timeout = {}, time_zone = '+00:00'",
                    (limit + 999) / 1000
                ))
                .await?;
                check_mysql_durability(&mut conn).await;
                DbConnection::Mysql(conn)
            }
            Backend::Sqlite => {
                let mut conn =
                    SyncConnectionWrapper::<diesel::SqliteConnection>::establish(url.sqlite_path())
                        .await
                        .map_err(connect_error)?;
                // busy_timeout first: switching to WAL itself may have to wait for a lock.
                // Commits do not wait for the disk (see [`DbConnection::write_synced`]).
                conn.batch_execute(&format!(
                    "PRAGMA busy_timeout = {limit}; PRAGMA journal_mode = WAL; {SQLITE_UNSYNCED}"
                ))
                .await?;
                DbConnection::Sqlite(conn)
            }
        };
        Ok(conn)
    }

    /// Applies the embedded migrations of this backend. Nodes that start together on one
    /// server take turns: an advisory lock on PostgreSQL, GET_LOCK on MySQL (a lock of one
    /// member on a multi-primary cluster, where nodes on different members migrate at once:
    /// see [`run_migrations`] for why that converges), an exclusive flock on a file beside
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

    /// Through a pooler in transaction mode: opens the transaction one statement runs in,
    /// with the limits a session would otherwise set once (see [`DbConnection::connect`]).
    /// One round trip; [`DbConnection::commit`] ends it. Not tracked by diesel's
    /// transaction manager: a connection on which either fails is dropped, which ends it.
    pub async fn begin_limited(&mut self, statement_timeout: Duration) -> Result<(), StoreError> {
        if let DbConnection::Postgres(conn) = self {
            let limits = postgres_limits("SET LOCAL", ms(statement_timeout).max(1));
            conn.batch_execute(&format!("BEGIN; {limits}")).await?;
        }
        Ok(())
    }

    /// Commits what [`DbConnection::begin_limited`] opened.
    pub async fn commit(&mut self) -> Result<(), StoreError> {
        if let DbConnection::Postgres(conn) = self {
            conn.batch_execute("COMMIT").await?;
        }
        Ok(())
    }

    /// On PostgreSQL, prepares the statements of a handover (the claim, and the release
    /// with its notification) by running each once against a term that never exists. A
    /// backend parses and plans a statement on its first use, which takes milliseconds;
    /// a handover there otherwise takes about one millisecond per round trip. The other
    /// backends poll, and an UPDATE that matches nothing still takes locks on them.
    /// Not run before a renewal (see `SqlStore::run`), which must not wait for it.
    pub async fn prepare_handover(&mut self) -> Result<(), StoreError> {
        if let DbConnection::Postgres(_) = self {
            let never = Lease {
                name: String::new(),
                holder: String::new(),
                token: ProcessToken::random(),
                ttl: Duration::ZERO,
                term: NO_TERM,
            };
            self.claim(&never).await?;
            self.release(&never).await?;
        }
        Ok(())
    }

    pub async fn get(&mut self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let sent = unix_us(SystemTime::now());
        let rows: Vec<RowSql> = on_connection!(self, |c, d| {
            Statement::new(d.get, vec![Param::Text(name)])
                .load(c)
                .await
                .map_err(|error| pooler::explain(missing_column(error.into())))?
        });
        let middle = sent + (unix_us(SystemTime::now()) - sent) / 2;
        Ok(rows.into_iter().next().map(|row| LeaseRow {
            holder: row.container_id,
            term: row.term,
            lease: Duration::from_millis(row.lease_ms.max(0) as u64),
            age: Duration::from_millis(row.age_ms.max(0) as u64),
            clock_offset_us: Some(row.now_us - middle),
            term_token: row.term_token,
            held_for: row
                .held_ms
                .map(|ms| Duration::from_millis(ms.max(0) as u64)),
            pending: Pending {
                paused_for: row
                    .paused_ms
                    .map(|ms| Duration::from_millis(ms.max(0) as u64)),
                handover_to: row.handover_to.filter(|_| row.handover_ms.is_some()),
                handover_for: row
                    .handover_ms
                    .map(|ms| Duration::from_millis(ms.max(0) as u64)),
                resign_term: row.resign_term,
            },
        }))
    }

    /// Runs one of the dialect's writes; how many rows it matched.
    async fn write(
        &mut self,
        statement: fn(&Dialect) -> &'static str,
        params: Vec<Param<'_>>,
    ) -> Result<usize, StoreError> {
        Ok(on_connection!(self, |c, d| {
            Statement::new(statement(d), params)
                .execute(c)
                .await
                .map_err(|error| pooler::explain(missing_column(error.into())))?
        }))
    }

    /// [`DbConnection::write`] for a statement that starts a term, which on SQLite waits
    /// for the disk. SQLite connections otherwise commit without it (`synchronous =
    /// NORMAL` in WAL mode): every contender runs on the database's own host, so a power
    /// loss that undoes a renewal or a release ends them all with it, and nothing acted
    /// on a belief the lost write made; but a term must not be handed out twice to
    /// hooks that use it as a fencing token, so a claim is synced. Saves an fsync per
    /// renewal and one on a handover's release.
    async fn write_synced(
        &mut self,
        statement: fn(&Dialect) -> &'static str,
        params: Vec<Param<'_>>,
    ) -> Result<usize, StoreError> {
        let DbConnection::Sqlite(conn) = self else {
            return self.write(statement, params).await;
        };
        conn.batch_execute(SQLITE_SYNCED).await?;
        let written = self.write(statement, params).await?;
        if let DbConnection::Sqlite(conn) = self {
            conn.batch_execute(SQLITE_UNSYNCED).await?;
        }
        Ok(written)
    }

    pub async fn ensure_row(&mut self, name: &str) -> Result<(), StoreError> {
        self.write(|d| d.ensure_row, vec![Param::Text(name)])
            .await?;
        Ok(())
    }

    pub async fn claim(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        let params = vec![
            Param::Text(&lease.holder),
            Param::BigInt(lease.token.for_term(lease.term + 1)),
            Param::BigInt(ms(lease.ttl)),
            Param::Text(&lease.name),
            Param::BigInt(lease.term),
            Param::Text(&lease.holder),
        ];
        Ok(self.write_synced(|d| d.claim, params).await? == 1)
    }

    pub async fn reacquire(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        let params = vec![
            Param::BigInt(lease.token.for_term(lease.term + 1)),
            Param::BigInt(ms(lease.ttl)),
            Param::Text(&lease.name),
            Param::Text(&lease.holder),
            Param::BigInt(lease.term),
            Param::Text(&lease.holder),
        ];
        Ok(self.write_synced(|d| d.reacquire, params).await? == 1)
    }

    pub async fn renew(&mut self, lease: &Lease, seen: Commands) -> Result<bool, StoreError> {
        let params = vec![
            Param::BigInt(ms(lease.ttl)),
            Param::Text(&lease.name),
            Param::Text(&lease.holder),
            Param::BigInt(lease.term),
            Param::BigInt(i64::from(seen.resign)),
            Param::BigInt(i64::from(seen.paused)),
        ];
        Ok(self.write(|d| d.renew, params).await? == 1)
    }

    /// Pauses the election for `duration` (the row must exist); whether it did.
    pub async fn pause(&mut self, name: &str, duration: Duration) -> Result<bool, StoreError> {
        let params = vec![Param::BigInt(ms(duration)), Param::Text(name)];
        Ok(self.write(|d| d.pause, params).await? == 1)
    }

    pub async fn resume(&mut self, name: &str) -> Result<bool, StoreError> {
        Ok(self.write(|d| d.resume, vec![Param::Text(name)]).await? == 1)
    }

    /// Asks `holder`, leader in `term`, to step down; `false` if that lease is not live.
    pub async fn request_resign(
        &mut self,
        name: &str,
        holder: &str,
        term: i64,
    ) -> Result<bool, StoreError> {
        let params = vec![Param::Text(name), Param::Text(holder), Param::BigInt(term)];
        Ok(self.write(|d| d.resign, params).await? == 1)
    }

    /// Asks `holder`, leader in `term`, to step down in favour of `to`, or (`offer`) only
    /// offers `to` its lease; `false` if that lease is not live.
    pub async fn request_handover(
        &mut self,
        name: &str,
        holder: &str,
        term: i64,
        to: &str,
        offer: bool,
    ) -> Result<bool, StoreError> {
        let params = vec![
            Param::Text(to),
            Param::Text(name),
            Param::Text(holder),
            Param::BigInt(term),
        ];
        let statement = match offer {
            true => |d: &Dialect| d.offer_handover,
            false => |d: &Dialect| d.handover,
        };
        Ok(self.write(statement, params).await? == 1)
    }

    /// `node` accepts the handover offered to it of the live lease in `term`.
    pub async fn accept_handover(
        &mut self,
        name: &str,
        node: &str,
        term: i64,
    ) -> Result<bool, StoreError> {
        let params = vec![
            Param::Text(node),
            Param::Text(name),
            Param::Text(node),
            Param::BigInt(term),
        ];
        Ok(self.write(|d| d.accept_handover, params).await? == 1)
    }

    /// Wakes the nodes of `name` that listen for notifications (PostgreSQL only).
    pub async fn wake(&mut self, name: &str) -> Result<(), StoreError> {
        #[derive(QueryableByName)]
        struct Woken {
            #[diesel(sql_type = Nullable<Text>)]
            #[allow(dead_code)]
            pg_notify: Option<String>,
        }
        if let DbConnection::Postgres(c) = self {
            if let Some(wake) = POSTGRES.wake {
                let _: Vec<Woken> = Statement::new(wake, vec![Param::Text(name)])
                    .load(c)
                    .await?;
            }
        }
        Ok(())
    }

    pub async fn record_member(
        &mut self,
        record: &MemberRecord,
        fresh: bool,
    ) -> Result<(), StoreError> {
        let params = vec![
            Param::Text(&record.election),
            Param::Text(&record.node_id),
            Param::BigInt(i64::from(record.candidate())),
            Param::BigInt(record.priority),
            Param::Text(&record.version),
            Param::Text(&record.host),
            Param::Text(record.standing.as_str()),
            Param::BigInt(i64::from(fresh)),
        ];
        self.write(|d| d.record_member, params).await?;
        Ok(())
    }

    pub async fn hold_preemption(
        &mut self,
        election: &str,
        node_id: &str,
        hold: Duration,
    ) -> Result<(), StoreError> {
        let params = vec![
            Param::BigInt(ms(hold)),
            Param::Text(election),
            Param::Text(node_id),
        ];
        self.write(|d| d.hold_preemption, params).await?;
        Ok(())
    }

    pub async fn members(&mut self, election: &str) -> Result<Vec<Member>, StoreError> {
        let rows: Vec<MemberSql> = on_connection!(self, |c, d| {
            Statement::new(d.members, vec![Param::Text(election)])
                .load(c)
                .await
                .map_err(|error| missing_column(error.into()))?
        });
        let duration = |ms: i64| Duration::from_millis(ms.max(0) as u64);
        Ok(rows
            .into_iter()
            .map(|row| Member {
                node_id: row.node_id,
                candidate: row.candidate != 0,
                standing: row.standing.as_deref().and_then(MemberStanding::parse),
                priority: row.priority,
                version: row.version,
                host: row.host,
                member_for: duration(row.member_ms),
                seen_ago: duration(row.seen_ms),
                no_preempt_for: row.no_preempt_ms.map(duration),
            })
            .collect())
    }

    pub async fn prune_members(
        &mut self,
        election: &str,
        older_than: Duration,
    ) -> Result<(), StoreError> {
        let params = vec![Param::Text(election), Param::BigInt(ms(older_than))];
        self.write(|d| d.prune_members, params).await?;
        Ok(())
    }

    /// Runs a statement the dialect gives per backend (see `dialect::hold`); how many
    /// rows it matched.
    async fn write_backend(
        &mut self,
        statement: fn(Backend) -> &'static str,
        params: Vec<Param<'_>>,
    ) -> Result<usize, StoreError> {
        let written = match self {
            DbConnection::Postgres(c) => {
                Statement::new(statement(Backend::Postgres), params)
                    .execute(c)
                    .await
            }
            DbConnection::Mysql(c) => {
                Statement::new(statement(Backend::Mysql), params)
                    .execute(c)
                    .await
            }
            DbConnection::Sqlite(c) => {
                Statement::new(statement(Backend::Sqlite), params)
                    .execute(c)
                    .await
            }
        };
        written.map_err(|error| pooler::explain(error.into()))
    }

    /// Keeps the holder's live lease in its term for `left` more, renewed no more; whether
    /// it was still live.
    pub async fn hold(&mut self, lease: &Lease, left: Duration) -> Result<bool, StoreError> {
        let params = vec![
            Param::BigInt(ms(left)),
            Param::Text(&lease.name),
            Param::Text(&lease.holder),
            Param::BigInt(lease.term),
        ];
        Ok(self.write_backend(super::dialect::hold, params).await? == 1)
    }

    /// Every live lease, elections' and locks', by name.
    pub async fn held_rows(&mut self) -> Result<Vec<HeldRow>, StoreError> {
        let rows: Vec<HeldSql> = match self {
            DbConnection::Postgres(c) => {
                Statement::new(super::dialect::held_rows(Backend::Postgres), vec![])
                    .load(c)
                    .await
            }
            DbConnection::Mysql(c) => {
                Statement::new(super::dialect::held_rows(Backend::Mysql), vec![])
                    .load(c)
                    .await
            }
            DbConnection::Sqlite(c) => {
                Statement::new(super::dialect::held_rows(Backend::Sqlite), vec![])
                    .load(c)
                    .await
            }
        }
        .map_err(|error| pooler::explain(error.into()))?;
        let duration = |ms: i64| Duration::from_millis(ms.max(0) as u64);
        Ok(rows
            .into_iter()
            .map(|row| HeldRow {
                name: row.name,
                holder: row.container_id,
                term: row.term,
                lease: duration(row.lease_ms),
                age: duration(row.age_ms),
                held: row.held_ms.map(duration),
            })
            .collect())
    }

    pub async fn release(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        let params = vec![
            Param::Text(&lease.name),
            Param::Text(&lease.holder),
            Param::BigInt(lease.term),
        ];
        Ok(self.write(|d| d.release, params).await? == 1)
    }
}
