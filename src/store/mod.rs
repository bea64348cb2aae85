//! The lease table, seen as a handful of single-statement operations.
//!
//! [`LeaseStore`] is what the election needs from a database; [`SqlStore`] provides it over
//! one owned connection to PostgreSQL, MySQL/MariaDB or SQLite. No operation opens a
//! multi-statement transaction, and a connection is dropped after any error, timeout or
//! cancellation, so it is never reused in an unknown state.

mod dialect;
pub(crate) mod error_text;
#[cfg(any(test, feature = "test-util"))]
pub mod memory;
mod notify;
mod pooler;
pub mod shared;
mod sql;
pub mod tls;
mod url;
mod wakeup;

use futures_util::future::BoxFuture;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::timeout;
use tracing::debug;

pub use pooler::Pooler;
pub use sql::DbConnection;
/// Members not seen for this long are deleted.
pub const MEMBER_PRUNE_AFTER: Duration = Duration::from_secs(100);
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
    /// Since the current term started, by the database clock; `None` for a term started
    /// before the table had `taken_at`, or by a node of an older version (which does not
    /// write it).
    pub held_for: Option<Duration>,
    /// Operator commands pending on the row (see [`Pending`]).
    pub pending: Pending,
}

/// One node's lease on a row, as every write of the node's own lease states it: which row,
/// who holds it, the token that marks the terms it starts, how long each write makes it
/// last, and the term the write expects to find on the row. Built once per statement by
/// the election (or a test) and handed to [`LeaseStore`]'s writes: a claim reads `term` as
/// the term of the free lease it takes and starts `term + 1`; a reacquire, renewal,
/// release or hold as the term the node leads in. A write reads only the fields it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The election's (or lock's) row.
    pub name: String,
    /// The node that holds (or claims) the row.
    pub holder: String,
    /// Marks the terms this node starts (see [`LeaseRow::started_by`]).
    pub token: ProcessToken,
    /// The lease length a claim, reacquire or renewal asks for.
    pub ttl: Duration,
    /// The term the write expects on the row.
    pub term: i64,
}

impl Lease {
    /// The same lease, expecting `term` on the row.
    pub fn in_term(&self, term: i64) -> Lease {
        Lease {
            term,
            ..self.clone()
        }
    }
}

/// A live lease as `leaderd locks` lists it: an election's or a lock's row, times by the
/// database clock at the read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRow {
    pub name: String,
    pub holder: String,
    pub term: i64,
    /// The lease length the holder last promised (or held for, see [`LeaseStore::hold`]).
    pub lease: Duration,
    /// Since its last renewal.
    pub age: Duration,
    /// Since its term started (see [`LeaseRow::held_for`]).
    pub held: Option<Duration>,
}

impl HeldRow {
    /// How long the lease has left.
    pub fn remaining(&self) -> Duration {
        self.lease.saturating_sub(self.age)
    }
}

/// Operator commands pending on an election's row (`leaderd pause`, `handover`, `resign`),
/// as the database saw them at the read: times left are by the database clock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pending {
    /// How long the pause lasts yet (`None`: not paused).
    pub paused_for: Option<Duration>,
    /// The node a handover is for, while its window lasts (`None` once it is over).
    pub handover_to: Option<String>,
    /// How long the handover's window lasts yet.
    pub handover_for: Option<Duration>,
    /// The term whose leader was asked to step down.
    pub resign_term: Option<i64>,
}

/// The commands a leader has seen on its row, which its renewals state: a renewal stating
/// other commands than the row has matches nothing, and the leader reads the row (a read
/// only when a command changed, so the steady state stays one statement a round).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Commands {
    /// The leader was asked to step down from the term it renews.
    pub resign: bool,
    /// The election is paused.
    pub paused: bool,
}

impl LeaseRow {
    /// The commands pending on this row, as its leader in its term sees them.
    pub fn commands(&self) -> Commands {
        Commands {
            resign: self.pending.resign_term == Some(self.term),
            paused: self.paused(),
        }
    }

    /// Whether the election is paused: no node takes a free or lapsed lease.
    pub fn paused(&self) -> bool {
        self.pending.paused_for.is_some()
    }

    /// Whether `node` may not claim because the row is handed over to another node.
    pub fn handed_over_away_from(&self, node: &str) -> bool {
        self.pending.handover_for.is_some()
            && self
                .pending
                .handover_to
                .as_deref()
                .is_some_and(|to| to != node)
    }

    /// Whether the live lease is offered to `node` by a handover it has not accepted yet
    /// (see [`StepDownRequest::Offer`]).
    pub fn offered_to(&self, node: &str) -> bool {
        self.pending.handover_to.as_deref() == Some(node)
            && self.pending.handover_for.is_some()
            && self.pending.resign_term != Some(self.term)
            && self.live_holder().is_some_and(|holder| holder != node)
    }

    /// The holder, if its lease is still live by the database clock.
    pub fn live_holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|_| self.age < self.lease)
    }

    /// Whether the process with `token` started the current term. The holder id alone
    /// cannot tell: another process may run with the same node id.
    pub fn started_by(&self, token: ProcessToken) -> bool {
        self.term_token == Some(token.for_term(self.term))
    }

    /// Whether `node`, which held the row in `term`, could start the next term on it now
    /// (what the reacquire statement checks).
    pub fn reacquirable_by(&self, node: &str, term: i64) -> bool {
        self.term == term
            && self.holder.as_deref() == Some(node)
            && self.pending.resign_term != Some(term)
            && !self.handed_over_away_from(node)
            && (!self.paused() || self.live_holder().is_some())
    }

    /// How long until `node` could claim the lease, by the database clock, as far as this
    /// read tells: until it lapses, and any pause or handover to another node is over.
    pub fn claimable_in(&self, node: &str) -> Duration {
        let paused = self.pending.paused_for.unwrap_or_default();
        let handed_over = match self.handed_over_away_from(node) {
            true => self.pending.handover_for.unwrap_or_default(),
            false => Duration::ZERO,
        };
        self.remaining().max(paused).max(handed_over)
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

/// What a member of an election is, as it records itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberStanding {
    /// `election.candidate = false`: it follows and never claims.
    Observer,
    /// It may lead.
    Candidate,
    /// A candidate whose health check has not passed yet.
    Starting,
    /// A candidate whose health check fails.
    Unhealthy,
    /// It stepped down and left (a clean stop).
    Stopped,
}

impl MemberStanding {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberStanding::Observer => "observer",
            MemberStanding::Candidate => "candidate",
            MemberStanding::Starting => "starting",
            MemberStanding::Unhealthy => "unhealthy",
            MemberStanding::Stopped => "stopped",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            MemberStanding::Observer,
            MemberStanding::Candidate,
            MemberStanding::Starting,
            MemberStanding::Unhealthy,
            MemberStanding::Stopped,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// What a running node records about itself in `leaderd_member` (see
/// [`ControlStore::record_member`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    pub election: String,
    pub node_id: String,
    pub standing: MemberStanding,
    pub priority: i64,
    /// leaderd's version.
    pub version: String,
    pub host: String,
}

impl MemberRecord {
    /// Whether it may lead now (the `candidate` column, as nodes of the previous
    /// release read it).
    pub fn candidate(&self) -> bool {
        self.standing == MemberStanding::Candidate
    }
}

/// A member of an election as the table has it, times by the database clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub node_id: String,
    /// Whether it may lead now (as it last recorded itself).
    pub candidate: bool,
    /// What it is; `None` in a record of a version before standings.
    pub standing: Option<MemberStanding>,
    pub priority: i64,
    pub version: String,
    pub host: String,
    /// Since the running process first recorded itself.
    pub member_for: Duration,
    /// Since its last record.
    pub seen_ago: Duration,
    /// It lost leadership through preemption: it preempts nobody for this long yet.
    pub no_preempt_for: Option<Duration>,
}

/// How often a node records itself in `leaderd_member`.
pub const MEMBER_PERIOD: Duration = Duration::from_secs(10);

impl Member {
    /// It stopped, or was not seen for three record periods: its process is gone (or cut
    /// off).
    pub fn gone(&self) -> bool {
        self.standing == Some(MemberStanding::Stopped) || self.seen_ago > MEMBER_PERIOD * 3
    }

    /// What it is now: its recorded standing, `Stopped` once gone.
    pub fn standing(&self) -> MemberStanding {
        match (self.gone(), self.standing) {
            (true, _) => MemberStanding::Stopped,
            (false, Some(standing)) => standing,
            (false, None) if self.candidate => MemberStanding::Candidate,
            (false, None) => MemberStanding::Observer,
        }
    }

    /// Whether it could take the lease now, as far as the table says.
    pub fn may_lead(&self) -> bool {
        self.standing() == MemberStanding::Candidate
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

    /// A token drawn from `rng` (the simulator's runs replay from a seed).
    pub fn from_rng(rng: &mut impl rand::Rng) -> Self {
        ProcessToken(rng.random())
    }

    /// What a claim or reacquire by this process writes into the row for the term it
    /// starts. Bound to the term: a node of a version without the column starts the next
    /// term without touching it, and the value left behind never matches that term.
    pub fn for_term(self, term: i64) -> i64 {
        self.0 ^ term
    }
}

#[derive(Debug, thiserror::Error)]
///
/// Each message holds its cause's text, and no variant has a `source()`: a chain printed
/// with `{:#}` says each thing once, and a log line (`%error`) keeps the root cause
/// (connection refused, no such host, a TLS or authentication failure).
pub enum StoreError {
    #[error("cannot connect to {url}: {}", error_text::connection(.cause))]
    Connect {
        url: String,
        cause: diesel::ConnectionError,
    },
    #[error("cannot connect to {url}: {cause}")]
    Tls {
        url: String,
        cause: Box<tls::TlsError>,
    },
    #[error("connecting to {url} timed out after {}", humantime::format_duration(*.after))]
    ConnectTimeout { url: String, after: Duration },
    #[error("query failed: {}{}", .0, error_text::missing_table_hint(.0))]
    Query(diesel::result::Error),
    #[error(
        "the table service_leader_lock has no column {column}, which this version needs: \
         run `leaderd migrate` (or start a node with database.migrate = true)"
    )]
    SchemaOutdated { column: &'static str },
    #[error("query timed out after {}", humantime::format_duration(*.after))]
    QueryTimeout { after: Duration },
    #[error("migrations failed: {}", error_text::chain(.0.as_ref()))]
    Migration(Box<dyn std::error::Error + Send + Sync>),
    #[error(
        "another node held the migration lock ({lock}) for more than {}, so the migrations \
         were not run: retry; if it stays held, find what holds it, or run `leaderd \
         migrate` once and set database.migrate = false on the nodes",
        humantime::format_duration(*.waited)
    )]
    MigrationLockTimeout { lock: String, waited: Duration },
    #[error("database task failed: {0}")]
    Task(tokio::task::JoinError),
    #[error("this store cannot {operation}")]
    Unsupported { operation: &'static str },
    #[error(
        "{message}: the connection goes through a pooler in transaction mode (PgBouncer \
         pool_mode = transaction), where a prepared statement does not outlive its \
         transaction; set database.pooler = \"transaction\", or connect directly or through \
         a pool in session mode"
    )]
    TransactionPooler { message: String },
}

impl From<diesel::result::Error> for StoreError {
    fn from(error: diesel::result::Error) -> Self {
        StoreError::Query(error)
    }
}

impl From<tokio::task::JoinError> for StoreError {
    fn from(error: tokio::task::JoinError) -> Self {
        StoreError::Task(error)
    }
}

impl StoreError {
    /// Every [`StoreError::kind`], so that counters by kind can start at zero.
    pub const KINDS: [&'static str; 10] = [
        "connect",
        "tls",
        "connect_timeout",
        "query",
        "schema_outdated",
        "query_timeout",
        "migration",
        "task",
        "pooler",
        "unsupported",
    ];

    /// A short label for logs and metrics (one of [`StoreError::KINDS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Connect { .. } => "connect",
            StoreError::Tls { .. } => "tls",
            StoreError::ConnectTimeout { .. } => "connect_timeout",
            StoreError::Query(_) => "query",
            StoreError::SchemaOutdated { .. } => "schema_outdated",
            StoreError::QueryTimeout { .. } => "query_timeout",
            StoreError::Migration(_) | StoreError::MigrationLockTimeout { .. } => "migration",
            StoreError::Task(_) => "task",
            StoreError::TransactionPooler { .. } => "pooler",
            StoreError::Unsupported { .. } => "unsupported",
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
    /// Takes a released or lapsed lease whose term is still `lease.term`; the new term is
    /// `lease.term + 1`, marked with `lease.token` (see [`LeaseRow::started_by`]).
    fn claim(&mut self, lease: &Lease) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Starts term `lease.term + 1`, marked with `lease.token`, on a row that
    /// `lease.holder` still holds in `lease.term`.
    fn reacquire(&mut self, lease: &Lease)
    -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Extends the holder's lease in its term by `lease.ttl` if it is still live (and no
    /// command this renewal has not seen is pending: see [`LeaseStore::renew_seeing`]).
    fn renew(&mut self, lease: &Lease) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.renew_seeing(lease, Commands::default())
    }
    /// [`LeaseStore::renew`], stating the commands pending on the row as the leader last
    /// saw them: if the row's differ, nothing is renewed (`false`), and the leader reads
    /// the row to tell a new command from a lost lease. A store without commands ignores
    /// `seen`.
    fn renew_seeing(
        &mut self,
        lease: &Lease,
        seen: Commands,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// `node` accepts a handover offered to it (see [`StepDownRequest::Offer`]) of the
    /// live lease in `term`, which asks its leader to step down. Whether it did.
    fn accept_handover(
        &mut self,
        name: &str,
        node: &str,
        term: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Gives the row up if the holder still holds it in `lease.term`.
    fn release(&mut self, lease: &Lease) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Keeps the holder's live lease in `lease.term` for `left` more by the database clock
    /// and stops renewing it, instead of releasing it: a lock whose work ended early and
    /// that must stay taken for a minimum time (`leaderd lock --hold-at-least`). The holder
    /// stays on the row. One conditional statement; `false` if the lease was no longer
    /// live. Stores without it answer [`StoreError::Unsupported`].
    fn hold(
        &mut self,
        lease: &Lease,
        left: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = (lease, left);
        async {
            Err(StoreError::Unsupported {
                operation: "hold a lease without renewing it",
            })
        }
    }
    /// Hints that the lease of `name` was released, as soon as the backend can tell
    /// (`None`: it cannot, and waiting nodes poll). A hint to poll now, never a grant.
    fn release_notifications(&self, name: &str) -> Option<tokio::sync::mpsc::Receiver<()>> {
        let _ = name;
        None
    }
}

/// How a leader is asked to give its lease up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepDownRequest<'a> {
    /// `leaderd resign`: step down; anyone may claim.
    Resign,
    /// `leaderd handover --to`: only `to` may claim for two lease lengths, and the leader
    /// is asked only once `to` accepts ([`LeaseStore::accept_handover`]), which a node
    /// does only while it runs and could lead.
    Offer { to: &'a str },
    /// Step down, and only `to` may claim for two lease lengths, without waiting for `to`
    /// (`handover --force`, and a candidate that preempts, being `to` itself).
    Handover { to: &'a str },
}

/// Operator commands (`leaderd pause`, `resume`, `resign`, `handover`) on an election's
/// row, and the members table (`leaderd_member`): what `operator.rs` and `members.rs` need
/// from a database, beside the election's own [`LeaseStore`]. Each is one statement (and
/// a wake-up of the nodes, where the backend has one); times are by the database clock.
pub trait ControlStore: LeaseStore {
    /// Pauses `name` for `duration` (creating its row if needed) and wakes the nodes.
    fn pause(
        &mut self,
        name: &str,
        duration: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Ends a pause of `name`; whether the row exists.
    fn resume(&mut self, name: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Asks `holder`, leader of `name` in `term`, to step down, or offers its lease to a
    /// node (see [`StepDownRequest`]); `false` if that lease is not live any more.
    fn request_step_down(
        &mut self,
        name: &str,
        holder: &str,
        term: i64,
        request: StepDownRequest<'_>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Records (or refreshes) a member; `fresh` on the process's first record.
    fn record_member(
        &mut self,
        record: &MemberRecord,
        fresh: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Marks a member that lost leadership through preemption: it preempts nobody for `hold`.
    fn hold_preemption(
        &mut self,
        election: &str,
        node_id: &str,
        hold: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The members of `election`, by node id.
    fn members(
        &mut self,
        election: &str,
    ) -> impl Future<Output = Result<Vec<Member>, StoreError>> + Send;
    /// Forgets the members of `election` not seen for [`MEMBER_PRUNE_AFTER`].
    fn prune_members(
        &mut self,
        election: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Closes the connection, if one is open (for a task that writes seldom).
    fn disconnect(&mut self) {}
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

    /// Tells the side lock of the lease's row whether this node holds it, after a write's
    /// answer.
    fn note(&self, lease: &Lease, answer: &Result<bool, StoreError>) {
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

/// Operator commands and the members table: statements of their own, on the store's
/// connection (the daemon records members on a store of their own, off its renewals).
impl ControlStore for SqlStore {
    fn disconnect(&mut self) {
        SqlStore::disconnect(self);
    }

    async fn pause(&mut self, name: &str, duration: Duration) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.run(Opening::Plain, move |c| {
            Box::pin(async move {
                c.ensure_row(&name).await?;
                c.pause(&name, duration).await?;
                c.wake(&name).await
            })
        })
        .await
    }

    async fn resume(&mut self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.run(Opening::Plain, move |c| {
            Box::pin(async move {
                let found = c.resume(&name).await?;
                c.wake(&name).await?;
                Ok(found)
            })
        })
        .await
    }

    async fn request_step_down(
        &mut self,
        name: &str,
        holder: &str,
        term: i64,
        request: StepDownRequest<'_>,
    ) -> Result<bool, StoreError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        let (offer, to) = match request {
            StepDownRequest::Resign => (false, None),
            StepDownRequest::Offer { to } => (true, Some(to.to_owned())),
            StepDownRequest::Handover { to } => (false, Some(to.to_owned())),
        };
        self.run(Opening::Plain, move |c| {
            Box::pin(async move {
                let asked = match &to {
                    Some(to) => c.request_handover(&name, &holder, term, to, offer).await?,
                    None => c.request_resign(&name, &holder, term).await?,
                };
                if asked {
                    c.wake(&name).await?;
                }
                Ok(asked)
            })
        })
        .await
    }

    async fn record_member(
        &mut self,
        record: &MemberRecord,
        fresh: bool,
    ) -> Result<(), StoreError> {
        let record = record.clone();
        self.run(Opening::Plain, move |c| {
            Box::pin(async move { c.record_member(&record, fresh).await })
        })
        .await
    }

    async fn hold_preemption(
        &mut self,
        election: &str,
        node_id: &str,
        hold: Duration,
    ) -> Result<(), StoreError> {
        let (election, node_id) = (election.to_owned(), node_id.to_owned());
        self.run(Opening::Plain, move |c| {
            Box::pin(async move { c.hold_preemption(&election, &node_id, hold).await })
        })
        .await
    }

    async fn members(&mut self, election: &str) -> Result<Vec<Member>, StoreError> {
        let election = election.to_owned();
        self.run(Opening::Plain, move |c| {
            Box::pin(async move { c.members(&election).await })
        })
        .await
    }

    async fn prune_members(&mut self, election: &str) -> Result<(), StoreError> {
        let election = election.to_owned();
        self.run(Opening::Plain, move |c| {
            Box::pin(async move { c.prune_members(&election, MEMBER_PRUNE_AFTER).await })
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

    async fn claim(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        let owned = lease.clone();
        debug!(election = %lease.name, expected_term = lease.term, "claim sent");
        let answer = self
            .run(Opening::PrepareHandover, move |c| {
                Box::pin(async move { c.claim(&owned).await })
            })
            .await;
        debug!(
            election = %lease.name,
            taken = matches!(answer, Ok(true)),
            "claim answered"
        );
        self.note(lease, &answer);
        answer
    }

    async fn reacquire(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        let owned = lease.clone();
        let answer = self
            .run(Opening::PrepareHandover, move |c| {
                Box::pin(async move { c.reacquire(&owned).await })
            })
            .await;
        self.note(lease, &answer);
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
