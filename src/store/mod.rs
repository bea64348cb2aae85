//! The lease table, seen as a handful of single-statement operations.
//!
//! [`LeaseStore`] is what the election needs from a database; [`SqlStore`] provides it over
//! one owned connection to PostgreSQL, MySQL/MariaDB or SQLite. No operation opens a
//! multi-statement transaction, and a connection is dropped after any error, timeout or
//! cancellation, so it is never reused in an unknown state.

mod dialect;
#[cfg(any(test, feature = "test-util"))]
pub mod memory;
mod notify;
pub mod shared;
mod sql;
mod url;

use futures_util::future::BoxFuture;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::timeout;

pub use sql::DbConnection;
pub use url::{Backend, DatabaseUrl, UrlError};

/// The election's row as the database saw it at the moment it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// Who holds the row; `None` once it was released.
    pub holder: Option<String>,
    /// The fencing token: grows whenever a node starts holding the row.
    pub term: i64,
    /// The lease length the holder promised at its last renewal.
    pub lease: Duration,
    /// Time since the last renewal, by the database clock.
    pub age: Duration,
    /// The database clock minus this host's wall clock, in microseconds, estimated at the
    /// middle of the read (`None` where it cannot be measured).
    pub clock_offset_us: Option<i64>,
    /// Which process started the current term (see [`ProcessToken::for_term`]); `None`
    /// until a node that writes it starts a term (older versions do not).
    pub term_token: Option<i64>,
}

impl LeaseRow {
    /// The holder, if its lease is still live by the database clock.
    pub fn live_holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|_| self.age < self.lease)
    }

    /// Whether the process with `token` started the current term. The holder id alone
    /// cannot tell: another process may run with the same node id.
    pub fn started_by(&self, token: ProcessToken) -> bool {
        self.term_token == Some(token.for_term(self.term))
    }

    /// How long the lease has left by the database clock (zero once lapsed or released).
    pub fn remaining(&self) -> Duration {
        if self.holder.is_some() {
            self.lease.saturating_sub(self.age)
        } else {
            Duration::ZERO
        }
    }
}

/// Marks the terms one election starts; drawn at random once per election. A node whose
/// claim's answer was lost must find out from the row whether that claim started the term
/// it shows, and the node id cannot tell: two processes may (wrongly) run with the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessToken(i64);

impl ProcessToken {
    pub fn random() -> Self {
        ProcessToken(rand::random())
    }

    /// What a claim or reacquire by this process writes into the row for the term it
    /// starts. Bound to the term: a node of a version without the column starts the next
    /// term without touching it, and the value left behind never matches that term.
    pub fn for_term(self, term: i64) -> i64 {
        self.0 ^ term
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: diesel::ConnectionError,
    },
    #[error("connecting to {url} timed out after {}", humantime::format_duration(*.after))]
    ConnectTimeout { url: String, after: Duration },
    #[error("query failed: {0}")]
    Query(#[from] diesel::result::Error),
    #[error(
        "the table service_leader_lock has no column {column}, which this version needs: \
         run `leaderd migrate` (or start a node with database.migrate = true)"
    )]
    SchemaOutdated { column: &'static str },
    #[error("query timed out after {}", humantime::format_duration(*.after))]
    QueryTimeout { after: Duration },
    #[error("migrations failed: {0}")]
    Migration(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error(
        "another node held the migration lock ({lock}) for more than {}, so the migrations \
         were not run: retry; if it stays held, find what holds it, or run `leaderd \
         migrate` once and set database.migrate = false on the nodes",
        humantime::format_duration(*.waited)
    )]
    MigrationLockTimeout { lock: String, waited: Duration },
    #[error("database task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl StoreError {
    /// A short label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Connect { .. } => "connect",
            StoreError::ConnectTimeout { .. } => "connect_timeout",
            StoreError::Query(_) => "query",
            StoreError::SchemaOutdated { .. } => "schema_outdated",
            StoreError::QueryTimeout { .. } => "query_timeout",
            StoreError::Migration(_) | StoreError::MigrationLockTimeout { .. } => "migration",
            StoreError::Task(_) => "task",
        }
    }
}

/// What the election needs from the database. Every write names the term it expects and
/// reports whether it took effect.
pub trait LeaseStore: Send {
    /// Reads the row of `name`, if there is one.
    fn get(
        &mut self,
        name: &str,
    ) -> impl Future<Output = Result<Option<LeaseRow>, StoreError>> + Send;
    /// Creates the row of `name`, unheld, if missing. Never grants anything.
    fn ensure_row(&mut self, name: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Takes a released or lapsed lease whose term is still `expected_term`; the new term
    /// is `expected_term + 1`, marked with `token` (see [`LeaseRow::started_by`]).
    fn claim(
        &mut self,
        name: &str,
        holder: &str,
        token: ProcessToken,
        ttl: Duration,
        expected_term: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Starts term `term + 1`, marked with `token`, on a row that `holder` still holds in
    /// `term`.
    fn reacquire(
        &mut self,
        name: &str,
        holder: &str,
        token: ProcessToken,
        ttl: Duration,
        term: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Extends `holder`'s lease in `term` if it is still live.
    fn renew(
        &mut self,
        name: &str,
        holder: &str,
        ttl: Duration,
        term: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Gives the row up if `holder` still holds it in `term`.
    fn release(
        &mut self,
        name: &str,
        holder: &str,
        term: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Hints that the lease of `name` was released, as soon as the backend can tell
    /// (`None`: it cannot, and waiting nodes poll). A hint to poll now, never a grant.
    fn release_notifications(&self, name: &str) -> Option<tokio::sync::mpsc::Receiver<()>> {
        let _ = name;
        None
    }
}

/// Bounds on every database round trip.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Establishing a connection (TCP, TLS, authentication, session settings).
    pub connect: Duration,
    /// One statement, on the client and as the server-side statement limit.
    pub query: Duration,
}

/// A [`LeaseStore`] over one owned connection, opened lazily and replaced after any
/// failure.
pub struct SqlStore {
    url: Arc<DatabaseUrl>,
    timeouts: Timeouts,
    conn: Option<DbConnection>,
    /// Apply the embedded migrations on the next connection (cleared once they ran).
    migrate_on_connect: bool,
    /// Connections run nothing but the operations asked for (see [`SqlStore::read_only`]).
    read_only: bool,
}

/// What a connection opened for an operation does before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// Prepares the statements of a handover (see [`DbConnection::prepare_handover`]).
    PrepareHandover,
    /// Nothing: a renewal on a new connection is already late enough.
    Plain,
}

/// Migrations wait for other nodes' migrations on the same database.
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(30);

impl SqlStore {
    pub fn new(url: DatabaseUrl, timeouts: Timeouts, migrate_on_connect: bool) -> Self {
        SqlStore {
            url: Arc::new(url),
            timeouts,
            conn: None,
            migrate_on_connect,
            read_only: false,
        }
    }

    /// For a store that will only [`LeaseStore::get`] (`leaderd status`): connecting
    /// neither migrates nor prepares the handover statements, which are UPDATEs, so a
    /// monitoring role that may only SELECT can use it.
    pub fn read_only(mut self) -> Self {
        self.migrate_on_connect = false;
        self.read_only = true;
        self
    }

    /// Connects now (applying migrations if asked to) instead of on the first operation.
    pub async fn connect(&mut self) -> Result<(), StoreError> {
        self.run(Opening::PrepareHandover, |_| Box::pin(async { Ok(()) }))
            .await
    }

    /// Runs `op` on the connection, opening one first if needed.
    ///
    /// The work runs in its own task that owns the connection and hands it back only on
    /// success. If the caller stops waiting (timeout, shutdown, a deadline in a `select!`),
    /// the task finishes on its own and drops the connection: nothing here can leave a
    /// half-used connection behind, and a slow driver cannot stall the caller.
    async fn run<T: Send + 'static>(
        &mut self,
        opening: Opening,
        op: impl for<'c> FnOnce(&'c mut DbConnection) -> BoxFuture<'c, Result<T, StoreError>>
        + Send
        + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.take();
        let url = Arc::clone(&self.url);
        let timeouts = self.timeouts;
        let migrate = self.migrate_on_connect;
        let opening = match self.read_only {
            true => Opening::Plain,
            false => opening,
        };
        let task = tokio::spawn(async move {
            let mut conn = match conn {
                Some(conn) => conn,
                None => {
                    let opened = timeout(
                        timeouts.connect,
                        DbConnection::connect(&url, timeouts.query),
                    )
                    .await
                    .map_err(|_| StoreError::ConnectTimeout {
                        url: url.redacted(),
                        after: timeouts.connect,
                    })??;
                    let mut opened = if migrate {
                        timeout(MIGRATION_TIMEOUT, opened.migrate())
                            .await
                            .map_err(|_| StoreError::QueryTimeout {
                                after: MIGRATION_TIMEOUT,
                            })??
                    } else {
                        opened
                    };
                    if opening == Opening::PrepareHandover {
                        timeout(timeouts.query, opened.prepare_handover())
                            .await
                            .map_err(|_| StoreError::QueryTimeout {
                                after: timeouts.query,
                            })??;
                    }
                    opened
                }
            };
            match timeout(timeouts.query, op(&mut conn)).await {
                Ok(Ok(value)) => Ok((conn, value)),
                Ok(Err(error)) => Err(error),
                Err(_) => Err(StoreError::QueryTimeout {
                    after: timeouts.query,
                }),
            }
        });
        let (conn, value) = task.await??;
        self.conn = Some(conn);
        self.migrate_on_connect = false;
        Ok(value)
    }
}

impl LeaseStore for SqlStore {
    async fn get(&mut self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let name = name.to_owned();
        self.run(Opening::PrepareHandover, move |c| {
            Box::pin(async move { c.get(&name).await })
        })
        .await
    }

    async fn ensure_row(&mut self, name: &str) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.run(Opening::PrepareHandover, move |c| {
            Box::pin(async move { c.ensure_row(&name).await })
        })
        .await
    }

    async fn claim(
        &mut self,
        name: &str,
        holder: &str,
        token: ProcessToken,
        ttl: Duration,
        expected_term: i64,
    ) -> Result<bool, StoreError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.run(Opening::PrepareHandover, move |c| {
            Box::pin(async move { c.claim(&name, &holder, token, ttl, expected_term).await })
        })
        .await
    }

    async fn reacquire(
        &mut self,
        name: &str,
        holder: &str,
        token: ProcessToken,
        ttl: Duration,
        term: i64,
    ) -> Result<bool, StoreError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.run(Opening::PrepareHandover, move |c| {
            Box::pin(async move { c.reacquire(&name, &holder, token, ttl, term).await })
        })
        .await
    }

    async fn renew(
        &mut self,
        name: &str,
        holder: &str,
        ttl: Duration,
        term: i64,
    ) -> Result<bool, StoreError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.run(Opening::Plain, move |c| {
            Box::pin(async move { c.renew(&name, &holder, ttl, term).await })
        })
        .await
    }

    async fn release(&mut self, name: &str, holder: &str, term: i64) -> Result<bool, StoreError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.run(Opening::PrepareHandover, move |c| {
            Box::pin(async move { c.release(&name, &holder, term).await })
        })
        .await
    }

    fn release_notifications(&self, name: &str) -> Option<tokio::sync::mpsc::Receiver<()>> {
        match self.url.backend() {
            Backend::Postgres => Some(notify::listen(
                Arc::clone(&self.url),
                self.timeouts.connect,
                name,
            )),
            _ => None,
        }
    }
}
