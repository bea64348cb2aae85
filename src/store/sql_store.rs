//! [`SqlStore`]: a [`LeaseStore`] over one owned connection to PostgreSQL, MySQL/MariaDB or
//! SQLite, opened lazily and replaced after any failure. Its operator and member
//! statements ([`ControlStore`]) are in `sql_store/control_store.rs`.

mod control_store;

use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::timeout;
use tracing::debug;

use super::{
    Backend, Commands, DatabaseUrl, DbConnection, HeldRow, Lease, LeaseRow, LeaseStore, StoreError,
    notify, wakeup,
};

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
    /// The side locks that wake waiting nodes where there is no NOTIFY (`wakeup.rs`),
    wakeups: Arc<wakeup::Wakeups>,
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
        let url = Arc::new(url);
        SqlStore {
            wakeups: Arc::new(wakeup::Wakeups::new(Arc::clone(&url), timeouts.connect)),
            url,
            timeouts,
            conn: None,
            migrate_on_connect,
            read_only: false,
        }
    }

    /// Without the side locks that wake waiting nodes on MySQL and SQLite (`wakeup.rs`):
    /// they take a connection per election, which a store shared by many elections is
    /// there to avoid.
    pub(super) fn without_wake_ups(mut self) -> Self {
        self.wakeups = Arc::new(wakeup::Wakeups::disabled());
        self
    }

    /// [`SqlStore::note`] for a statement that starts a term.
    fn note_started(&self, lease: &Lease, answer: &Result<Option<i64>, StoreError>) {
        self.note(lease, &answer.as_ref().map(Option::is_some).map_err(|_| ()));
    }

    /// Tells the side lock of the lease's row whether this node holds it, after a write's
    /// answer.
    fn note<E>(&self, lease: &Lease, answer: &Result<bool, E>) {
        match answer {
            Ok(true) => self.wakeups.leading(&lease.name, Some(&lease.holder)),
            Ok(false) => self.wakeups.leading(&lease.name, None),
            Err(_) => {}
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

    /// Closes the connection, if one is open; the next operation opens another. For a
    /// task that writes seldom and should hold no connection between its writes.
    pub fn disconnect(&mut self) {
        self.conn = None;
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
        let pooled = self.url.transaction_pooled();
        let opening = match self.read_only {
            true => Opening::Plain,
            false => opening,
        };
        let task = tokio::spawn(async move {
            let mut conn = match conn {
                Some(conn) => conn,
                None => {
                    // SQLite creates the file it opens: a mistyped path must not become
                    // a new, empty database under an operator command.
                    if let Some(reason) = url.missing_sqlite_file() {
                        let cause = diesel::ConnectionError::BadConnection(reason);
                        let url = url.redacted();
                        return Err(StoreError::Connect { url, cause });
                    }
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
                        let migrating = async {
                            match pooled {
                                true => opened.migrate_in_transaction().await,
                                false => opened.migrate().await,
                            }
                        };
                        timeout(MIGRATION_TIMEOUT, migrating).await.map_err(|_| {
                            StoreError::QueryTimeout {
                                after: MIGRATION_TIMEOUT,
                            }
                        })??
                    } else {
                        opened
                    };
                    // Through a transaction pooler nothing stays prepared.
                    if opening == Opening::PrepareHandover && !pooled {
                        timeout(timeouts.query, opened.prepare_handover())
                            .await
                            .map_err(|_| StoreError::QueryTimeout {
                                after: timeouts.query,
                            })??;
                    }
                    opened
                }
            };
            let limited = async {
                if !pooled {
                    return op(&mut conn).await;
                }
                conn.begin_limited(timeouts.query).await?;
                let value = op(&mut conn).await?;
                conn.commit().await?;
                Ok(value)
            };
            match timeout(timeouts.query, limited).await {
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

impl SqlStore {
    /// Every live lease, elections' and locks', by name (`leaderd locks`).
    pub async fn held_rows(&mut self) -> Result<Vec<HeldRow>, StoreError> {
        self.run(Opening::Plain, |c| {
            Box::pin(async move { c.held_rows().await })
        })
        .await
    }
}

impl LeaseStore for SqlStore {
    async fn get(&mut self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let owned = name.to_owned();
        let row = self
            .run(Opening::PrepareHandover, move |c| {
                Box::pin(async move { c.get(&owned).await })
            })
            .await;
        if let Ok(Some(row)) = &row {
            self.wakeups.seen(name, row.live_holder());
        }
        row
    }

    async fn ensure_row(&mut self, name: &str) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.run(Opening::PrepareHandover, move |c| {
            Box::pin(async move { c.ensure_row(&name).await })
        })
        .await
    }

    async fn claim(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        let owned = lease.clone();
        debug!(election = %lease.name, expected_term = lease.term, "claim sent");
        let answer = self
            .run(Opening::PrepareHandover, move |c| {
                Box::pin(async move { c.claim(&owned).await })
            })
            .await;
        debug!(
            election = %lease.name,
            taken = ?answer.as_ref().ok().copied().flatten(),
            "claim answered"
        );
        self.note_started(lease, &answer);
        answer
    }

    async fn reacquire(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        let owned = lease.clone();
        let answer = self
            .run(Opening::PrepareHandover, move |c| {
                Box::pin(async move { c.reacquire(&owned).await })
            })
            .await;
        self.note_started(lease, &answer);
        answer
    }

    async fn renew_seeing(&mut self, lease: &Lease, seen: Commands) -> Result<bool, StoreError> {
        let owned = lease.clone();
        let answer = self
            .run(Opening::Plain, move |c| {
                Box::pin(async move { c.renew(&owned, seen).await })
            })
            .await;
        self.note(lease, &answer);
        answer
    }

    async fn accept_handover(
        &mut self,
        name: &str,
        node: &str,
        term: i64,
    ) -> Result<bool, StoreError> {
        let (name, node) = (name.to_owned(), node.to_owned());
        self.run(Opening::Plain, move |c| {
            Box::pin(async move { c.accept_handover(&name, &node, term).await })
        })
        .await
    }

    async fn release(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        let owned = lease.clone();
        debug!(election = %lease.name, term = lease.term, "release sent");
        let answer = self
            .run(Opening::PrepareHandover, move |c| {
                Box::pin(async move { c.release(&owned).await })
            })
            .await;
        // Whatever the answer: a wake-up is only a hint, and this node leads no more.
        self.wakeups.leading(&lease.name, None);
        answer
    }

    async fn hold(&mut self, lease: &Lease, left: Duration) -> Result<bool, StoreError> {
        let owned = lease.clone();
        debug!(
            election = %lease.name,
            term = lease.term,
            left_ms = left.as_millis() as u64,
            "hold sent"
        );
        let answer = self
            .run(Opening::Plain, move |c| {
                Box::pin(async move { c.hold(&owned, left).await })
            })
            .await;
        // This node acts on the lease no more.
        self.wakeups.leading(&lease.name, None);
        answer
    }

    fn release_notifications(&self, name: &str) -> Option<tokio::sync::mpsc::Receiver<()>> {
        match self.url.backend() {
            // LISTEN does not work through a pooler in transaction mode: waiting nodes poll.
            Backend::Postgres if self.url.transaction_pooled() => None,
            Backend::Postgres => Some(notify::listen(
                Arc::clone(&self.url),
                self.timeouts.connect,
                name,
            )),
            Backend::Mysql | Backend::Sqlite => self.wakeups.wake_ups(name),
        }
    }
}
