//! One open connection to whichever backend the URL names ([`DbConnection`]): opening it
//! with its session limits, and running each operation of the lease as one of the
//! dialect's statements (see `dialect/`, which holds their SQL). Applying the migrations
//! is in `migrate.rs`; the operator commands, the members and `leaderd locks` in
//! `control_statements.rs`; the MySQL server settings a claim's durability depends on in
//! `durability.rs`.

use diesel::QueryableByName;
use diesel::connection::CacheSize;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::{
    AsyncConnection, AsyncMysqlConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection,
    sync_connection_wrapper::SyncConnectionWrapper,
};
use std::time::{Duration, SystemTime};
use tracing::debug;

use super::dialect::{
    Dialect, MYSQL, POSTGRES, Param, SQLITE, SQLITE_SYNCED, SQLITE_UNSYNCED, Statement,
};
use super::pooler;
use super::{Backend, DatabaseUrl};
use super::{Commands, Lease, LeaseRow, Pending, ProcessToken, StoreError};

/// Sets a new SQLite connection up: how long a statement waits for another connection's
/// lock, WAL mode, and commits that do not wait for the disk (see
/// [`DbConnection::start_term`]).
///
/// Two connections that open a new database file at once (a node's election and its
/// member record, at the node's first start) meet in the switch to WAL, where SQLite
/// answers "database is locked" at once rather than through `busy_timeout`: that answer
/// is retried until the statement timeout.
async fn set_up_sqlite(
    conn: &mut SyncConnectionWrapper<diesel::SqliteConnection>,
    statement_timeout: Duration,
) -> Result<(), StoreError> {
    const RETRY_AFTER: Duration = Duration::from_millis(5);
    let limit = ms(statement_timeout).max(1);
    // busy_timeout first: the switch to WAL waits for a lock where it can.
    let set_up =
        format!("PRAGMA busy_timeout = {limit}; PRAGMA journal_mode = WAL; {SQLITE_UNSYNCED}");
    let give_up = tokio::time::Instant::now() + statement_timeout;
    loop {
        match conn.batch_execute(&set_up).await {
            Err(diesel::result::Error::DatabaseError(_, info))
                if info.message() == "database is locked"
                    && tokio::time::Instant::now() + RETRY_AFTER < give_up =>
            {
                debug!("a new SQLite connection met another's switch to WAL; retrying");
                tokio::time::sleep(RETRY_AFTER).await;
            }
            done => return Ok(done?),
        }
    }
}

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

mod control_statements;
mod durability;
mod migrate;
pub use migrate::applied_by_this_process as migrations_applied;

use durability::check_mysql_durability;

/// The term a claim or reacquire started.
#[derive(QueryableByName)]
struct StartedTerm {
    #[diesel(sql_type = BigInt)]
    term: i64,
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

fn unix_us(time: SystemTime) -> i64 {
    match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => since.as_micros() as i64,
        Err(before) => -(before.duration().as_micros() as i64),
    }
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Milliseconds the database computed, as a duration (none below zero).
fn duration(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

/// A read's failure as the caller should see it: a missing column says to migrate, a
/// statement a transaction pooler refused says so.
fn read_error(error: diesel::result::Error) -> StoreError {
    pooler::explain(StoreError::from(error).diagnosed())
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
                // in UTC whatever the server's zone (see dialect/mysql.rs, "TIME ZONES").
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
                set_up_sqlite(&mut conn, statement_timeout).await?;
                DbConnection::Sqlite(conn)
            }
        };
        Ok(conn)
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
                .map_err(read_error)?
        });
        let middle = sent + (unix_us(SystemTime::now()) - sent) / 2;
        Ok(rows.into_iter().next().map(|row| LeaseRow {
            holder: row.container_id,
            term: row.term,
            lease: duration(row.lease_ms),
            age: duration(row.age_ms),
            clock_offset_us: Some(row.now_us - middle),
            term_token: row.term_token,
            held_for: row.held_ms.map(duration),
            pending: Pending {
                paused_for: row.paused_ms.map(duration),
                handover_to: row.handover_to.filter(|_| row.handover_ms.is_some()),
                handover_for: row.handover_ms.map(duration),
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
                .map_err(read_error)?
        }))
    }

    pub async fn ensure_row(&mut self, name: &str) -> Result<(), StoreError> {
        self.write(|d| d.ensure_row, vec![Param::Text(name)])
            .await?;
        Ok(())
    }

    /// Runs a statement that starts a term; the term it started, if it matched the row.
    /// On SQLite it waits for the disk. SQLite connections otherwise commit without it
    /// (`synchronous = NORMAL` in WAL mode): every contender runs on the database's own
    /// host, so a power loss that undoes a renewal or a release ends them all with it, and
    /// nothing acted on a belief the lost write made; but a term must not be handed out
    /// twice to hooks that use it as a fencing token, so a claim is synced. Saves an fsync
    /// per renewal and one on a handover's release.
    async fn start_term(
        &mut self,
        statement: fn(&Dialect) -> &'static str,
        params: Vec<Param<'_>>,
        on_top_of: i64,
    ) -> Result<Option<i64>, StoreError> {
        if let DbConnection::Sqlite(conn) = self {
            conn.batch_execute(SQLITE_SYNCED).await?;
        }
        let started = on_connection!(self, |c, d| match d.started_term {
            None => Statement::new(statement(d), params)
                .load::<StartedTerm>(c)
                .await
                .map_err(read_error)?
                .into_iter()
                .next()
                .map(|started| started.term),
            // No RETURNING: the statement kept its term as the connection's LAST_INSERT_ID.
            Some(read_back) => {
                let matched = Statement::new(statement(d), params)
                    .execute(c)
                    .await
                    .map_err(read_error)?;
                match matched {
                    0 => None,
                    _ => {
                        let read = Statement::new(read_back, Vec::new())
                            .get_result::<StartedTerm>(c)
                            .await?
                            .term;
                        // Another session's LAST_INSERT_ID (a multiplexing proxy) would
                        // hand hooks a wrong fencing token.
                        if read <= on_top_of {
                            return Err(StoreError::StartedTermUnread {
                                after: on_top_of,
                                read,
                            });
                        }
                        Some(read)
                    }
                }
            }
        });
        if let DbConnection::Sqlite(conn) = self {
            conn.batch_execute(SQLITE_UNSYNCED).await?;
        }
        Ok(started)
    }

    /// Takes a released or lapsed lease in `lease.term`; the term it started.
    pub async fn claim(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        let params = vec![
            Param::Text(&lease.holder),
            Param::BigInt(lease.token.value()),
            Param::BigInt(ms(lease.ttl)),
            Param::Text(&lease.name),
            Param::BigInt(lease.term),
            Param::Text(&lease.holder),
        ];
        self.start_term(|d| d.claim, params, lease.term).await
    }

    /// Starts the next term on a row the holder still holds in `lease.term`; that term.
    pub async fn reacquire(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        let params = vec![
            Param::BigInt(lease.token.value()),
            Param::BigInt(ms(lease.ttl)),
            Param::Text(&lease.name),
            Param::Text(&lease.holder),
            Param::BigInt(lease.term),
            Param::Text(&lease.holder),
        ];
        self.start_term(|d| d.reacquire, params, lease.term).await
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

    /// Keeps the holder's live lease in its term for `left` more, renewed no more; whether
    /// it was still live.
    pub async fn hold(&mut self, lease: &Lease, left: Duration) -> Result<bool, StoreError> {
        let params = vec![
            Param::BigInt(ms(left)),
            Param::Text(&lease.name),
            Param::Text(&lease.holder),
            Param::BigInt(lease.term),
        ];
        Ok(self.write(|d| d.hold, params).await? == 1)
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
