//! The fence for leader work (docs/fencing.md): one statement, run last in the work's own
//! transaction, that fails unless the election's row is in the work's term, held, and
//! live by the database clock, and that holds the row against a new term until the
//! transaction ends. A write fenced in term T so commits before term T+1 starts, or not
//! at all. [`Fence`] is that statement for one term; its SQL is `dialect/fence.rs`'s, and
//! what it runs is installed by the migrations.

use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::Untyped;
use diesel_async::{AsyncConnection, RunQueryDsl, TransactionManager};

use super::Backend;
use super::dialect::{fence_call, fence_statement};

/// The message of every refusal by the fence starts with this, on every backend.
const REFUSAL: &str = "leaderd fence:";

/// The fence of one term of one election (or lock row): from a [`LockGuard`]
/// (`guard.fence()`) or an election's [`FenceHandle`] (`handle.current()`). The example
/// of docs/fencing.md, run by the test suite on SQLite:
///
/// ```
/// # #[tokio::main(flavor = "multi_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("leaderd-fence-doctest-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// # let path = dir.join("app.sqlite3");
/// # let path = path.to_str().unwrap();
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
/// use leaderd::{DatabaseUrl, FenceError, LockOptions, SqlStore, Timeouts};
/// use std::time::Duration;
///
/// // The lock (or election) lives in the database the work writes to.
/// let url = DatabaseUrl::parse(&format!("sqlite://{path}"))?;
/// let timeouts = Timeouts { connect: Duration::from_secs(2), query: Duration::from_secs(2) };
/// let guard = LockOptions::new("outbox-relay", Duration::from_secs(30))?
///     .try_acquire(SqlStore::new(url, timeouts, true))
///     .await?;
///
/// // The work's own connection.
/// let mut conn = SyncConnectionWrapper::<diesel::SqliteConnection>::establish(path).await?;
/// conn.batch_execute("PRAGMA busy_timeout = 5000").await?;
/// # conn.batch_execute("CREATE TABLE outbox (id INTEGER PRIMARY KEY, attempts INTEGER NOT NULL DEFAULT 0);
/// #                     INSERT INTO outbox (id) VALUES (42)").await?;
///
/// let fence = guard.fence();
/// conn.transaction(async |c| {
///     diesel::sql_query("UPDATE outbox SET attempts = attempts + 1 WHERE id = 42")
///         .execute(c)
///         .await?;
///     fence.check(c).await // last, just before COMMIT
/// })
/// .await?;
///
/// // Once the lock is gone (released here; lost, or taken by another holder), the same
/// // fence refuses, and nothing of the transaction commits.
/// guard.release().await?;
/// let late = conn
///     .transaction(async |c| {
///         diesel::sql_query("UPDATE outbox SET attempts = attempts + 1 WHERE id = 42")
///             .execute(c)
///             .await?;
///         fence.check(c).await
///     })
///     .await;
/// assert!(matches!(late, Err(FenceError::Refused { .. })));
/// # #[derive(diesel::QueryableByName)]
/// # struct Attempts { #[diesel(sql_type = diesel::sql_types::BigInt)] attempts: i64 }
/// # let row: Attempts = diesel::sql_query("SELECT attempts FROM outbox WHERE id = 42").get_result(&mut conn).await?;
/// # assert_eq!(row.attempts, 1);
/// # drop(conn);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
///
/// [`LockGuard`]: crate::LockGuard
/// [`FenceHandle`]: crate::FenceHandle
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    election: String,
    term: i64,
}

impl Fence {
    /// The fence of `term` of the row `election` (for a lock of `leaderd lock NAME`, the
    /// row is `lock:NAME`).
    pub fn new(election: &str, term: i64) -> Fence {
        Fence {
            election: election.to_owned(),
            term,
        }
    }

    pub fn election(&self) -> &str {
        &self.election
    }

    pub fn term(&self) -> i64 {
        self.term
    }

    /// The statement on `backend`, ready to run in a transaction by any client:
    /// `SELECT leaderd_fence('orders', 1764…)` on PostgreSQL, `CALL leaderd_fence(…)` on
    /// MySQL/MariaDB, `INSERT INTO leaderd_fence (election, term) VALUES (…)` on SQLite.
    /// What leaderd hands its hooks as `LEADERD_FENCE`.
    pub fn statement(&self, backend: Backend) -> String {
        fence_statement(backend, &self.election, self.term)
    }

    /// Runs the fence in the transaction open on `conn`, which should be its last
    /// statement before COMMIT. `Err(FenceError::Refused)` when the term is over (or its
    /// lease lapsed): nothing of the transaction commits (PostgreSQL aborts it; MySQL and
    /// SQLite have rolled it back), and the caller must stop acting as this term's leader.
    pub async fn check<C>(&self, conn: &mut C) -> Result<(), FenceError>
    where
        C: AsyncConnection,
        C::Backend: FenceBackend,
    {
        let call = FenceCall {
            sql: fence_call(<C::Backend as FenceBackend>::BACKEND),
            election: &self.election,
            term: self.term,
        };
        let refused = match call.execute(conn).await {
            Ok(_) => return Ok(()),
            Err(error) => self.explain(error),
        };
        // SQLite's refusal rolled the caller's transaction back whole (RAISE(ROLLBACK)):
        // an empty one stands in for a transaction diesel opened, so that its ROLLBACK
        // (`transaction` does one on the error) succeeds and reports the refusal. Not for
        // a fence run outside one: that would leave a transaction open that nobody ends,
        // whose next write would hold the database's one write lock.
        if <C::Backend as FenceBackend>::BACKEND == Backend::Sqlite
            && matches!(refused, FenceError::Refused { .. })
            && !matches!(
                C::TransactionManager::transaction_manager_status_mut(conn).transaction_depth(),
                Ok(None)
            )
        {
            let _ = conn.batch_execute("BEGIN").await;
        }
        Err(refused)
    }

    fn explain(&self, error: DieselError) -> FenceError {
        let refused = |reason: String| FenceError::Refused {
            election: self.election.clone(),
            term: self.term,
            reason,
        };
        match &error {
            // SQLSTATE LD002: a part of the fence is missing here (the index its lock needs
            // on PostgreSQL, the trigger on a Galera member).
            DieselError::DatabaseError(_, info)
                if info.message().starts_with(REFUSAL)
                    && info.message().contains("run leaderd migrate") =>
            {
                FenceError::NotInstalled {
                    election: self.election.clone(),
                    reason: info.message().to_owned(),
                }
            }
            DieselError::DatabaseError(_, info) if info.message().starts_with(REFUSAL) => {
                refused(info.message().to_owned())
            }
            // MariaDB's innodb_snapshot_isolation (on by default from 11.6.2): the
            // transaction read before the leader's last renewal, and a locking read of the
            // row changed since is refused (error 1020). The procedure rolled it back.
            DieselError::DatabaseError(_, info)
                if info
                    .message()
                    .contains("Record has changed since last read") =>
            {
                FenceError::StaleSnapshot {
                    election: self.election.clone(),
                    term: self.term,
                }
            }
            // Only a new term makes the fence's lock fail so (PostgreSQL under REPEATABLE
            // READ or SERIALIZABLE): a renewal or a release changes no key column.
            DieselError::DatabaseError(DatabaseErrorKind::SerializationFailure, info) => {
                refused(format!(
                    "a new term began after this transaction's snapshot ({})",
                    info.message()
                ))
            }
            _ => FenceError::Query(error),
        }
    }
}

/// Why [`Fence::check`] failed.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// The term is over, its lease lapsed or was released, or there is no such election:
    /// the transaction does not commit, and its work must stop acting as leader.
    #[error("the fence refused term {term} of {election:?}: {reason}")]
    Refused {
        election: String,
        term: i64,
        /// The database's message (`leaderd fence: …`).
        reason: String,
    },
    /// Part of the fence is missing on this database (SQLSTATE `LD002`: the unique index
    /// its lock needs on PostgreSQL, the trigger on a Galera member): nothing commits; run
    /// `leaderd migrate`.
    #[error("the fence of {election:?} cannot run here: {reason}")]
    NotInstalled { election: String, reason: String },
    /// MariaDB with `innodb_snapshot_isolation` (on by default from 11.6.2): this
    /// transaction read before the leader's last renewal of the row, so its snapshot is
    /// refused. Nothing commits (fails closed); the term may still hold.
    #[error(
        "the fence refused this transaction's snapshot of {election:?} (term {term}): it read \
         before the leader's last renewal and MariaDB's innodb_snapshot_isolation is on; \
         nothing committed: run the transaction at READ COMMITTED, or run the fence before \
         its reads (docs/fencing.md)"
    )]
    StaleSnapshot { election: String, term: i64 },
    /// The statement failed otherwise (a lost connection, a fence not installed: run
    /// `leaderd migrate`); whether the transaction can commit is the database's to say.
    #[error("the fence could not run: {0}")]
    Query(#[from] DieselError),
}

/// The fence with its election and term bound as parameters: one prepared statement
/// serves every term.
struct FenceCall<'a> {
    sql: &'static str,
    election: &'a str,
    term: i64,
}

impl<DB: FenceBackend> QueryFragment<DB> for FenceCall<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> diesel::QueryResult<()> {
        let mut pieces = self.sql.split('?');
        out.push_sql(pieces.next().unwrap_or_default());
        DB::push_text(&mut out, self.election)?;
        out.push_sql(pieces.next().unwrap_or_default());
        DB::push_bigint(&mut out, &self.term)?;
        out.push_sql(pieces.next().unwrap_or_default());
        Ok(())
    }
}

// Keyed by its text in the statement cache.
impl QueryId for FenceCall<'_> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for FenceCall<'_> {
    type SqlType = Untyped;
}

/// The diesel backends the fence is written for.
pub trait FenceBackend: diesel::backend::Backend + sealed::Sealed {
    const BACKEND: Backend;
}

impl FenceBackend for diesel::pg::Pg {
    const BACKEND: Backend = Backend::Postgres;
}

impl FenceBackend for diesel::mysql::Mysql {
    const BACKEND: Backend = Backend::Mysql;
}

impl FenceBackend for diesel::sqlite::Sqlite {
    const BACKEND: Backend = Backend::Sqlite;
}

/// What binds the fence's parameters on each backend, out of reach outside the crate.
mod sealed {
    use diesel::query_builder::AstPass;
    use diesel::sql_types::{BigInt, Text};

    pub trait Sealed: diesel::backend::Backend {
        fn push_text<'b>(out: &mut AstPass<'_, 'b, Self>, text: &'b str)
        -> diesel::QueryResult<()>;
        fn push_bigint<'b>(
            out: &mut AstPass<'_, 'b, Self>,
            value: &'b i64,
        ) -> diesel::QueryResult<()>;
    }

    macro_rules! sealed {
        ($($backend:ty),*) => {$(
            impl Sealed for $backend {
                fn push_text<'b>(
                    out: &mut AstPass<'_, 'b, Self>,
                    text: &'b str,
                ) -> diesel::QueryResult<()> {
                    out.push_bind_param::<Text, str>(text)
                }
                fn push_bigint<'b>(
                    out: &mut AstPass<'_, 'b, Self>,
                    value: &'b i64,
                ) -> diesel::QueryResult<()> {
                    out.push_bind_param::<BigInt, i64>(value)
                }
            }
        )*};
    }

    sealed!(diesel::pg::Pg, diesel::mysql::Mysql, diesel::sqlite::Sqlite);
}
