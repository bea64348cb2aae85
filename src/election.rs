//! One node's part in an election: a loop that claims or renews the lease through a
//! [`LeaseStore`] and publishes this node's [`Status`] on a watch channel.
//!
//! Safety rests on two clocks that are never compared with each other. The database clock
//! decides, inside each statement, whether a lease is live. This node's monotonic clock
//! decides how long it may act as leader: until `ttl` (less a small margin) after its last
//! successful renewal was *sent*. A renewal executes on the database no earlier than it was
//! sent, so the database keeps the lease at least that long, and no other node can take it
//! before this node has stopped acting as leader. A renewal whose answer comes back after
//! that instant is not trusted again: leadership resumes only with a new term.

use serde::Serialize;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until};
use tracing::{debug, info, warn};

use crate::store::{LeaseRow, LeaseStore, ProcessToken, StoreError};

pub mod settings;
use settings::check_name;
pub use settings::{Setting, SettingsError};

/// What an election needs to know about itself: only built through
/// [`ElectionSettings::new`], which refuses what the table or the timing cannot take.
#[derive(Debug, Clone)]
pub struct ElectionSettings {
    /// The row this election competes for.
    pub(crate) name: String,
    /// This node's id in the row.
    pub(crate) node_id: String,
    /// Lease length each renewal asks for.
    pub(crate) ttl: Duration,
    /// Time between renewals while holding the lease.
    pub(crate) interval: Duration,
    /// Most time between reads while not holding it (a follower also reads at the moment
    /// it expects the lease to lapse, spread by up to [`ElectionSettings::lapse_spread`]
    /// or more while the database is slow, which may come that much after the regular
    /// read). At most `interval` (see [`ElectionSettings::with_poll`]).
    pub(crate) poll: Duration,
}

/// A clock that goes on while the host is suspended, as the database's clock does:
/// CLOCK_BOOTTIME, as time since boot. tokio's timers run on CLOCK_MONOTONIC, which stands
/// still meanwhile, so a lease judged by it alone would outlive a suspend. Injectable so
/// that tests can suspend the host.
pub type BootClock = Arc<dyn Fn() -> Duration + Send + Sync>;

/// CLOCK_BOOTTIME now, as time since boot.
pub fn boottime() -> Duration {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .expect("CLOCK_BOOTTIME is available");
    Duration::new(now.tv_sec().max(0) as u64, now.tv_nsec() as u32)
}

/// CLOCK_BOOTTIME as seen from tokio's clock: [`boottime`], plus however far tokio's clock
/// runs ahead of the real one (never, unless tests pause and advance it). Elections use
/// it, so that paused-time tests see a boot clock that moves with their time.
fn boottime_by_tokio() -> Duration {
    let (tokio_now, real_now) = (Instant::now().into_std(), std::time::Instant::now());
    match tokio_now.checked_duration_since(real_now) {
        Some(ahead) => boottime() + ahead,
        // A paused clock that real time has overtaken (a starved test thread).
        None => boottime().saturating_sub(real_now - tokio_now),
    }
}

/// How often a leader looks at CLOCK_BOOTTIME for its deadline: its timers would not
/// notice that the host slept.
const BOOT_LOOK_EVERY: Duration = Duration::from_millis(100);

/// See [`ElectionSettings::safety_margin`].
pub fn safety_margin(ttl: Duration) -> Duration {
    ttl / 500 + Duration::from_millis(2)
}

impl ElectionSettings {
    /// Settings that renew and poll once per `interval`, if the name and node id fit the
    /// table and the ttl leaves a renewal room after the interval.
    pub fn new(
        name: &str,
        node_id: &str,
        ttl: Duration,
        interval: Duration,
    ) -> Result<Self, SettingsError> {
        check_name(Setting::Name, name)?;
        check_name(Setting::NodeId, node_id)?;
        settings::check_timing(ttl, interval)?;
        Ok(ElectionSettings {
            name: name.to_owned(),
            node_id: node_id.to_owned(),
            ttl,
            interval,
            poll: interval,
        })
    }

    /// How much earlier than `sent + ttl` this node stops acting as leader. It covers the
    /// rate difference between this node's monotonic clock and the database clock (NTP
    /// slews by at most 500 ppm; this allows 2000 ppm) and SQLite's millisecond timestamps.
    pub fn safety_margin(&self) -> Duration {
        safety_margin(self.ttl)
    }

    /// How long after a lease can lapse a follower that expects the lapse polls: a random
    /// instant within this, at most ttl/64 and 20 ms. Every follower reads the renewed lease
    /// at about the same moment, so without it they would all read again together right
    /// after each renewal (a thousand followers at once, in the scale benchmark).
    pub fn lapse_spread(&self) -> Duration {
        (self.ttl / 64).min(Duration::from_millis(20))
    }

    /// [`ElectionSettings::lapse_spread`], widened to four times the last read's round
    /// trip while the database is slow to answer (as when many followers read together),
    /// up to a quarter of the interval.
    fn lapse_spread_after(&self, round_trip: Duration) -> Duration {
        self.lapse_spread()
            .max(round_trip.saturating_mul(4))
            .min(self.interval / 4)
    }

    /// The margin a leader has to complete a renewal before its lease can lapse.
    fn renew_margin(&self) -> Duration {
        self.ttl.saturating_sub(self.interval)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Before the first successful round, while the database is unreachable, after the
    /// lease deadline passed without a renewal, and once stopped.
    Unknown,
    Follower,
    Leader,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Unknown => "unknown",
            Role::Follower => "follower",
            Role::Leader => "leader",
        }
    }
}

/// This node's view of the election, as published after every round.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub role: Role,
    /// The current leader's id, if one holds a live lease as far as this node knows.
    pub leader: Option<String>,
    /// The current term: this node's own while leader, else the last one observed.
    pub term: Option<i64>,
    /// When the current role began.
    pub since: SystemTime,
    pub updated_at: SystemTime,
    /// Wall-clock instant after which nobody may trust this status (for a leader: the
    /// local lease deadline).
    pub valid_until: SystemTime,
    /// The monotonic lease deadline while leader, for in-process consumers.
    pub lease_deadline: Option<Instant>,
    /// The same deadline on CLOCK_BOOTTIME ([`boottime`]), which also counts time the host
    /// spent suspended: fences are derived from it.
    pub lease_deadline_boot: Option<Duration>,
    /// When the current leader's lease lapses unless renewed, as far as this node knows:
    /// its own deadline while leader, else the remaining time the database reported at the
    /// last read, counted from when the answer arrived.
    pub leader_lease_until: Option<Instant>,
    /// Why the last round failed, while the database keeps failing (`None` once it
    /// answers).
    pub error: Option<String>,
    /// Grows with every publication, so a consumer can say which one it has made durable
    /// (see [`Election::release_after`]).
    pub version: u64,
}

impl Status {
    pub(crate) fn initial() -> Self {
        let now = SystemTime::now();
        Status {
            role: Role::Unknown,
            leader: None,
            term: None,
            since: now,
            updated_at: now,
            valid_until: now,
            lease_deadline: None,
            lease_deadline_boot: None,
            leader_lease_until: None,
            error: None,
            version: 0,
        }
    }
}

/// A change in this node's view, in the order it happened. Hooks consume these; sending
/// never blocks (the channel is unbounded and role changes are rare).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleEvent {
    /// This node started acting as leader in `term`.
    Elected { term: i64 },
    /// This node stopped acting as leader in `term`, for any reason.
    Demoted { term: i64 },
    /// The leader this node sees changed (`None`: no live leader as far as it knows).
    LeaderChanged {
        previous: Option<String>,
        current: Option<String>,
        term: Option<i64>,
    },
}

/// What one completed round measured, for consumers such as metrics and the systemd
/// watchdog. Observers are called synchronously on the election's task: they must only
/// record (atomics, a watch channel), never wait.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundReport {
    /// Rounds completed so far, failed ones included: proof the loop is turning.
    pub completed: u64,
    /// The round's first statement, on a connection that was already open.
    pub round_trip: Option<Duration>,
    /// For a successful renewal: how much of the local deadline was left when its answer
    /// came back.
    pub renewal_margin: Option<Duration>,
    /// Why the round failed ([`StoreError::kind`]).
    pub error_kind: Option<&'static str>,
    /// The database clock minus the local wall clock, from a read (microseconds).
    pub clock_offset_us: Option<i64>,
    /// Statements the round sent (1 in steady state, leader and follower alike).
    pub statements: u64,
}

/// A consumer of [`RoundReport`]s (see [`Election::observe`]).
pub type RoundObserver = Arc<dyn Fn(&RoundReport) + Send + Sync>;

/// An instant on both of this node's clocks: the monotonic one its timers run on, and
/// [`BootClock`], which also counts a suspend of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Instants {
    at: Instant,
    boot: Duration,
}

impl Instants {
    fn now(boot: &BootClock) -> Self {
        Instants {
            at: Instant::now(),
            boot: boot(),
        }
    }

    fn plus(self, duration: Duration) -> Self {
        Instants {
            at: self.at + duration,
            boot: self.boot + duration,
        }
    }

    /// Time left until this instant by both clocks: the host may have slept since `now`'s
    /// monotonic reading was taken, never the other way round.
    fn left(self, now: Instants) -> Duration {
        self.at
            .saturating_duration_since(now.at)
            .min(self.boot.saturating_sub(now.boot))
    }

    fn passed(self, now: Instants) -> bool {
        self.left(now).is_zero()
    }
}

/// What this node holds in the database, as far as it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Nothing: this node follows.
    None,
    /// Acting as leader in `term` until `deadline`.
    Leading { term: i64, deadline: Instants },
    /// The row may still be ours in `term`, but this node stopped acting as leader (its
    /// deadline passed). Leadership resumes only through a new term.
    Lapsed { term: i64 },
}

impl Hold {
    fn term(self) -> Option<i64> {
        match self {
            Hold::None => None,
            Hold::Leading { term, .. } | Hold::Lapsed { term } => Some(term),
        }
    }
}

/// The result of one round against the store.
#[derive(Debug)]
enum Outcome {
    /// The database holds the lease for this node in `term`, from a statement sent at `sent`.
    Holding { term: i64, sent: Instants },
    /// Someone else holds the lease, or nobody does and this node could not take it.
    Observed(Option<LeaseRow>),
    /// The database refused to renew: the lease is not ours (any more) in the term we led.
    NotHeld,
}

/// A failed round, with the term it may have started: a claim whose answer was lost may
/// still have committed.
#[derive(Debug)]
struct RoundError {
    error: StoreError,
    in_doubt: Option<i64>,
}

impl From<StoreError> for RoundError {
    fn from(error: StoreError) -> Self {
        RoundError {
            error,
            in_doubt: None,
        }
    }
}

/// Who sends a round: the election's settings, the clock its leases are also judged by,
/// and the token that marks the terms it starts.
struct Claimant<'a> {
    settings: &'a ElectionSettings,
    boot: &'a BootClock,
    token: ProcessToken,
}

/// One round: renew if leading, else claim a free lease, else observe. The first statement
/// is the only one in steady state (a renewal for the leader, a read for a follower).
/// `may_claim` is asked before each claim. `released_in`: a term whose release was just
/// announced, claimed without reading first. `statements` counts what it sends, for
/// [`RoundReport::statements`].
async fn round<S: LeaseStore>(
    store: &mut S,
    sender: &Claimant<'_>,
    hold: Hold,
    may_claim: impl Fn() -> bool,
    released_in: Option<i64>,
    statements: &mut u64,
) -> Result<(Outcome, Duration), RoundError> {
    let Claimant {
        settings,
        boot,
        token,
    } = *sender;
    let (name, me, ttl) = (&settings.name, &settings.node_id, settings.ttl);
    let sent = Instants::now(boot);
    match hold {
        Hold::Leading { term, .. } => {
            // Stop acting as leader at once when the database says no; the next round
            // reads the row.
            *statements += 1;
            let outcome = match store.renew(name, me, ttl, term).await? {
                true => Outcome::Holding { term, sent },
                false => Outcome::NotHeld,
            };
            return Ok((outcome, sent.at.elapsed()));
        }
        Hold::Lapsed { term } if may_claim() => {
            *statements += 1;
            let reacquired =
                store
                    .reacquire(name, me, token, ttl, term)
                    .await
                    .map_err(|error| RoundError {
                        error,
                        in_doubt: Some(term + 1),
                    })?;
            if reacquired {
                return Ok((
                    Outcome::Holding {
                        term: term + 1,
                        sent,
                    },
                    sent.at.elapsed(),
                ));
            }
        }
        Hold::None if may_claim() => {
            if let Some(expected) = released_in {
                // The claim checks the term and that the lease is free, so a stale term
                // only costs the read below.
                if let Some(holding) = claim(store, sender, expected, statements).await? {
                    return Ok((holding, sent.at.elapsed()));
                }
            }
        }
        Hold::Lapsed { .. } | Hold::None => {}
    }
    *statements += 1;
    let row = store.get(name).await?;
    let round_trip = sent.at.elapsed();
    let free_term = match &row {
        _ if !may_claim() => None,
        None => {
            *statements += 1;
            store.ensure_row(name).await?;
            Some(0)
        }
        Some(row) if row.live_holder().is_none() => Some(row.term),
        Some(_) => None,
    };
    if let Some(expected) = free_term {
        if let Some(holding) = claim(store, sender, expected, statements).await? {
            return Ok((holding, round_trip));
        }
        // Another node was faster; see who.
        *statements += 1;
        return Ok((Outcome::Observed(store.get(name).await?), round_trip));
    }
    Ok((Outcome::Observed(row), round_trip))
}

/// Claims a free lease in `expected`: `Holding` the next term if this node took it, `None`
/// if another node did first or the term was stale. A claim whose answer is lost may have
/// committed: its term is in doubt.
async fn claim<S: LeaseStore>(
    store: &mut S,
    sender: &Claimant<'_>,
    expected: i64,
    statements: &mut u64,
) -> Result<Option<Outcome>, RoundError> {
    let Claimant {
        settings,
        boot,
        token,
    } = *sender;
    let sent = Instants::now(boot);
    *statements += 1;
    let claimed = store
        .claim(
            &settings.name,
            &settings.node_id,
            token,
            settings.ttl,
            expected,
        )
        .await
        .map_err(|error| RoundError {
            error,
            in_doubt: Some(expected + 1),
        })?;
    Ok(claimed.then_some(Outcome::Holding {
        term: expected + 1,
        sent,
    }))
}

/// First retry after a failed round; doubles up to one interval.
const RETRY_BASE: Duration = Duration::from_millis(50);
/// The soonest a follower polls again when it expects a lease to come free.
const MIN_POLL: Duration = Duration::from_millis(2);
/// How long a stopping node waits for a round that is already in flight.
const STOP_WAIT_IN_FLIGHT: Duration = Duration::from_millis(400);
/// How long a stopping node tries to release its row.
const STOP_RELEASE: Duration = Duration::from_millis(500);

/// Gives leadership up, in the one order that a stop and a resign both follow. It stops
/// acting as leader and publishes that, waits until the publication is durable (see
/// [`Election::release_after`]), and only then releases the row, so that no successor can
/// start while this node's last durable word still says it leads. If that takes until the
/// lease would end, the release is withheld: the lease lapses on its own, and what this
/// node last said has expired by then too. `held`: the term to release and where its
/// lease ends (`None`: nothing to release). Returns how the release went, `None` if none
/// was sent.
async fn step_down<S: LeaseStore>(
    store: &mut S,
    machine: &mut Machine,
    durable: Option<&mut watch::Receiver<u64>>,
    held: Option<(i64, Instants)>,
    for_good: bool,
) -> Option<Result<bool, StoreError>> {
    machine.stop_acting();
    machine.answer_renewals();
    if for_good {
        // Stopped: nothing this node said holds any longer.
        machine.status.send_modify(|status| {
            status.valid_until = status.updated_at;
            status.version += 1;
        });
    }
    let (term, lease_end) = held?;
    let settings = Arc::clone(&machine.settings);
    if let Some(durable) = durable {
        let published = machine.status.borrow().version;
        let left = lease_end.left(Instants::now(&machine.boot));
        let said = tokio::time::timeout(left, durable.wait_for(|v| *v >= published)).await;
        if !matches!(said, Ok(Ok(_))) {
            warn!(
                election = %settings.name,
                term,
                "the status file did not say this node stopped leading before its lease \
                 would end; not releasing the lease, which lapses on its own"
            );
            return None;
        }
    }
    Some(release(store, &settings, term).await)
}

/// Gives the row up if it is still ours in `term`, within STOP_RELEASE; a lease that
/// cannot be released lapses by itself. `Ok(false)`: the row was no longer ours.
async fn release<S: LeaseStore>(
    store: &mut S,
    settings: &ElectionSettings,
    term: i64,
) -> Result<bool, StoreError> {
    let released = tokio::time::timeout(
        STOP_RELEASE,
        store.release(&settings.name, &settings.node_id, term),
    )
    .await
    .unwrap_or(Err(StoreError::QueryTimeout {
        after: STOP_RELEASE,
    }));
    match &released {
        Ok(true) => {
            info!(election = %settings.name, node = %settings.node_id, term, "released the lease")
        }
        Ok(false) => debug!(term, "nothing to release: the row is no longer ours"),
        Err(error) => warn!(%error, term, "could not release the lease; it lapses by itself"),
    }
    released
}

/// A request to renew at once, answered with the new lease deadline, or `None` once the
/// lease is lost.
type RenewRequest = oneshot::Sender<Option<Instant>>;

/// One node's election loop.
pub struct Election<S> {
    settings: Arc<ElectionSettings>,
    store: S,
    machine: Machine,
    /// Requests to give up leadership (see [`Election::resign_handle`]), in a given term
    /// or any.
    resign: Option<mpsc::Receiver<Option<i64>>>,
    /// Requests to renew now (see [`Election::renew_handle`]).
    renew: Option<mpsc::Receiver<RenewRequest>>,
    claims: ClaimGate,
    /// Claim no more once the first term held has ended (see [`Election::single_term`]).
    single_term: bool,
    /// Ask the store for release notifications (see [`Election::poll_only`]).
    listen_for_releases: bool,
    /// The last status version made durable (see [`Election::release_after`]).
    durable: Option<watch::Receiver<u64>>,
}

/// Asks a running election to give up leadership: it stops acting as leader, releases the
/// row, and does not claim again for one ttl, so that another node takes over.
#[derive(Debug, Clone)]
pub struct ResignHandle(mpsc::Sender<Option<i64>>);

impl ResignHandle {
    /// Resigns from whatever term this node holds.
    pub fn resign(&self) {
        // One pending request is enough.
        let _ = self.0.try_send(None);
    }

    /// Resigns from `term` only: a request that arrives once that term has ended (and
    /// another may have begun) is ignored.
    pub fn resign_term(&self, term: i64) {
        let _ = self.0.try_send(Some(term));
    }
}

/// Asks a running election to renew its lease now (see [`RenewHandle::renew`]).
#[derive(Debug, Clone)]
pub struct RenewHandle(mpsc::Sender<RenewRequest>);

impl RenewHandle {
    /// Renews the lease at once (or takes the answer of a renewal already on its way), and
    /// returns the new local deadline when a renewal has succeeded, or `None` if this node does not hold the lease (any more). While the
    /// database fails, the election keeps retrying until the deadline passes.
    pub async fn renew(&self) -> Option<Instant> {
        let (answer, answered) = oneshot::channel();
        self.0.send(answer).await.ok()?;
        answered.await.ok().flatten()
    }
}

/// Closes an election to new claims (a stopping node must not take the lease while its
/// hooks step down). Renewals of a lease it holds go on.
#[derive(Debug, Clone, Default)]
pub struct ClaimGate(Arc<std::sync::atomic::AtomicBool>);

impl ClaimGate {
    pub fn close(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn is_closed(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The next message of an optional channel (release notifications, renew and resign
/// requests); never completes without a channel, nor once it has closed.
async fn next_message<T>(receiver: &mut Option<mpsc::Receiver<T>>) -> T {
    if let Some(open) = receiver {
        if let Some(message) = open.recv().await {
            return message;
        }
        *receiver = None;
    }
    std::future::pending().await
}

/// The decisions, apart from the store so the loop can borrow each on its own.
struct Machine {
    settings: Arc<ElectionSettings>,
    /// CLOCK_BOOTTIME, or a stand-in in tests.
    boot: BootClock,
    hold: Hold,
    /// Where the lease this node last led under ends locally.
    lease_end: Option<Instants>,
    status: watch::Sender<Status>,
    /// Consecutive failed rounds (0 when the database answers).
    failures: u32,
    /// Whether the last round succeeded, so the store's connection is open.
    connected: bool,
    /// Whether the round trip was last seen thin against the renew margin.
    thin_margin: bool,
    /// A term this node may hold: its claim failed on the way back, so it may have committed.
    in_doubt: Option<i64>,
    /// Marks the terms this election starts, so that it can tell an in-doubt term of its
    /// own from one another process with the same node id started.
    token: ProcessToken,
    /// A term in which the table names this node although this process never took it.
    foreign_term_warned: Option<i64>,
    /// Where role changes go, if anyone listens.
    events: Option<mpsc::UnboundedSender<RoleEvent>>,
    /// After resigning, do not claim before this instant, so another node takes over.
    no_claim_until: Option<Instant>,
    /// Whether this node has held the lease in any term.
    held_any: bool,
    /// When another node's lease lapses, as of the last read.
    observed_lapse: Option<Instant>,
    /// The term a release notification announced (the last one seen), for the next round.
    released_in: Option<i64>,
    /// The last round's error while rounds keep failing.
    error: Option<String>,
    /// Renew requests waiting for a successful renewal or the loss of the lease.
    renewals: Vec<RenewRequest>,
    observers: Vec<RoundObserver>,
    rounds_completed: u64,
    /// Statements the round being applied sent.
    round_statements: u64,
}

impl<S: LeaseStore> Election<S> {
    pub fn new(settings: ElectionSettings, store: S) -> (Self, watch::Receiver<Status>) {
        let settings = Arc::new(settings);
        let (status, receiver) = watch::channel(Status::initial());
        let machine = Machine {
            settings: Arc::clone(&settings),
            boot: Arc::new(boottime_by_tokio),
            hold: Hold::None,
            lease_end: None,
            status,
            failures: 0,
            connected: false,
            thin_margin: false,
            in_doubt: None,
            token: ProcessToken::random(),
            foreign_term_warned: None,
            events: None,
            no_claim_until: None,
            held_any: false,
            observed_lapse: None,
            released_in: None,
            error: None,
            renewals: Vec::new(),
            observers: Vec::new(),
            rounds_completed: 0,
            round_statements: 0,
        };
        (
            Election {
                settings,
                store,
                machine,
                resign: None,
                renew: None,
                claims: ClaimGate::default(),
                single_term: false,
                listen_for_releases: true,
                durable: None,
            },
            receiver,
        )
    }

    /// A handle that stops this election from taking a lease it does not hold.
    pub fn claim_gate(&self) -> ClaimGate {
        self.claims.clone()
    }

    pub fn resign_handle(&mut self) -> ResignHandle {
        let (sender, receiver) = mpsc::channel(1);
        self.resign = Some(receiver);
        ResignHandle(sender)
    }

    pub fn renew_handle(&mut self) -> RenewHandle {
        let (sender, receiver) = mpsc::channel(8);
        self.renew = Some(receiver);
        RenewHandle(sender)
    }

    /// Makes this election hold at most one term: once this node has held the lease and
    /// lost or given it up, it claims no more (a lock, unlike a candidacy, is not retaken
    /// behind the back of the work that lost it).
    pub fn single_term(&mut self) {
        self.single_term = true;
    }

    /// Calls `observer` after every completed round (see [`RoundReport`]).
    pub fn observe(&mut self, observer: RoundObserver) {
        self.machine.observers.push(observer);
    }

    /// Does without release notifications (an election that will not wait for a lease
    /// need not hold a listening connection).
    pub fn poll_only(&mut self) {
        self.listen_for_releases = false;
    }

    /// Releases the lease (on a stop or a resign) only once `durable` has reached the
    /// [`Status::version`] that says this node stopped leading: a consumer such as the
    /// status file reports there what it has made durable. Until then a successor must
    /// not be able to start. If that does not happen before the lease would end, the
    /// release is withheld and the lease lapses on its own.
    pub fn release_after(&mut self, durable: watch::Receiver<u64>) {
        self.durable = Some(durable);
    }

    /// Replaces CLOCK_BOOTTIME (tests suspend the host with it).
    #[cfg(test)]
    pub(crate) fn set_boot_clock(&mut self, boot: BootClock) {
        self.machine.boot = boot;
    }

    /// The node's role changes from now on, in order.
    pub fn events(&mut self) -> mpsc::UnboundedReceiver<RoleEvent> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.machine.events = Some(sender);
        receiver
    }

    /// Runs rounds until `shutdown` completes, then steps down: stops acting as leader at
    /// once and releases the row if it is still ours in the same term. Returns how the
    /// release went, or `None` if there was nothing to release or the release was
    /// withheld (see [`Election::release_after`]).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Option<Result<bool, StoreError>> {
        let Election {
            settings,
            mut store,
            mut machine,
            mut resign,
            mut renew,
            claims,
            single_term,
            listen_for_releases,
            mut durable,
        } = self;
        tokio::pin!(shutdown);
        let mut releases = match listen_for_releases {
            true => store.release_notifications(&settings.name),
            false => None,
        };
        let mut next_round = Instant::now();
        let mut held_at_stop = None;
        'rounds: loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break 'rounds,
                _ = sleep_until(machine.next_look()), if machine.is_leading() => {
                    machine.look_at_deadline();
                    continue 'rounds;
                }
                // Released by its holder: try now rather than at the next poll, and in
                // the term last seen rather than after reading the row again.
                _ = next_message(&mut releases) => {
                    if !machine.is_leading() {
                        machine.released_in = machine.status.borrow().term;
                        next_round = Instant::now();
                    }
                    continue 'rounds;
                }
                request = next_message(&mut renew) => {
                    if machine.is_leading() {
                        machine.renewals.push(request);
                        next_round = Instant::now();
                    } else {
                        let _ = request.send(None);
                    }
                    continue 'rounds;
                }
                only_term = next_message(&mut resign) => {
                    let held = machine
                        .held()
                        .filter(|(term, _)| only_term.is_none_or(|only| only == *term));
                    if let Some(held) = held {
                        info!(election = %settings.name, node = %settings.node_id, term = held.0, "resigning");
                        step_down(&mut store, &mut machine, durable.as_mut(), Some(held), false).await;
                        machine.hold = Hold::None;
                        machine.no_claim_until = Some(Instant::now() + settings.ttl);
                        next_round = Instant::now();
                    }
                    continue 'rounds;
                }
                _ = sleep_until(next_round) => {}
            }
            let started = Instant::now();
            let hold = machine.hold;
            let done_with_claims = claims.is_closed() || (single_term && machine.held_any);
            let may_claim =
                !done_with_claims && machine.no_claim_until.is_none_or(|until| started >= until);
            // Closed again just before each claim: a stop may come between a read and it.
            let claims_gate = claims.clone();
            let may_claim_now = move || may_claim && !claims_gate.is_closed();
            let released_in = machine.released_in.take();
            let mut statements = 0;
            let boot = Arc::clone(&machine.boot);
            let result = {
                let sender = Claimant {
                    settings: &settings,
                    boot: &boot,
                    token: machine.token,
                };
                let attempt = round(
                    &mut store,
                    &sender,
                    hold,
                    may_claim_now,
                    released_in,
                    &mut statements,
                );
                tokio::pin!(attempt);
                loop {
                    tokio::select! {
                        biased;
                        _ = &mut shutdown => {
                            held_at_stop = machine.held();
                            machine.stop_acting();
                            // The round may have just taken the row: learn the term to release.
                            if let Ok(Ok((Outcome::Holding { term, sent }, _))) =
                                tokio::time::timeout(STOP_WAIT_IN_FLIGHT, &mut attempt).await
                            {
                                held_at_stop = Some((term, machine.lease_from(sent)));
                            }
                            break 'rounds;
                        }
                        _ = sleep_until(machine.next_look()), if machine.is_leading() => {
                            machine.look_at_deadline();
                        }
                        // The renewal on its way answers it (or the deadline does).
                        request = next_message(&mut renew) => {
                            machine.renewals.push(request);
                            machine.answer_renewals_if_lost();
                        }
                        result = &mut attempt => break result,
                    }
                }
            };
            machine.round_statements = statements;
            next_round = machine.apply(result, started, may_claim);
            if single_term && machine.held_any {
                // A lock that was held will not be waited for again.
                releases = None;
            }
            machine.answer_renewals();
        }
        let held = held_at_stop.or(machine.held());
        step_down(&mut store, &mut machine, durable.as_mut(), held, true).await
    }
}

impl Machine {
    fn is_leading(&self) -> bool {
        matches!(self.hold, Hold::Leading { .. })
    }

    /// When a leader next looks at its deadline: at the deadline by the monotonic clock,
    /// and every BOOT_LOOK_EVERY for a suspend of the host, which that clock misses.
    fn next_look(&self) -> Instant {
        match self.hold {
            Hold::Leading { deadline, .. } => deadline.at.min(Instant::now() + BOOT_LOOK_EVERY),
            // Never awaited: the select! branch is disabled unless leading.
            _ => Instant::now() + Duration::from_secs(3600),
        }
    }

    /// Stops acting as leader if the deadline has passed by either clock.
    fn look_at_deadline(&mut self) {
        if let Hold::Leading { deadline, .. } = self.hold {
            if deadline.passed(Instants::now(&self.boot)) {
                self.deadline_passed();
            }
        }
    }

    /// The term this node may hold in the database, and where its lease ends locally.
    fn held(&self) -> Option<(i64, Instants)> {
        let term = self.hold.term()?;
        let end = match self.hold {
            Hold::Leading { deadline, .. } => deadline,
            _ => self.lease_end.unwrap_or_else(|| Instants::now(&self.boot)),
        };
        Some((term, end))
    }

    /// Where the lease granted by a statement sent at `sent` ends locally.
    fn lease_from(&self, sent: Instants) -> Instants {
        sent.plus(self.settings.ttl - self.settings.safety_margin())
    }

    /// Answers renew requests once a renewal succeeded or the lease is gone; while
    /// renewals fail but the deadline has not passed, they wait for the next attempt.
    fn answer_renewals(&mut self) {
        let answer = match self.hold {
            Hold::Leading { deadline, .. } if self.failures == 0 => Some(deadline.at),
            Hold::Leading { .. } => return,
            _ => None,
        };
        for request in self.renewals.drain(..) {
            let _ = request.send(answer);
        }
    }

    fn answer_renewals_if_lost(&mut self) {
        if !self.is_leading() {
            self.answer_renewals();
        }
    }

    fn deadline_passed(&mut self) {
        if let Hold::Leading { term, .. } = self.hold {
            warn!(
                election = %self.settings.name,
                node = %self.settings.node_id,
                term,
                "no successful renewal before the lease deadline; no longer acting as leader"
            );
            self.hold = Hold::Lapsed { term };
            self.publish(Role::Unknown, None, Some(term));
        }
        self.answer_renewals();
    }

    /// Stops acting as leader at once (shutdown), keeping what we may hold to release it.
    fn stop_acting(&mut self) {
        if let Hold::Leading { term, .. } = self.hold {
            self.hold = Hold::Lapsed { term };
        }
        let term = self.status.borrow().term;
        self.publish(Role::Unknown, None, term);
    }

    /// Folds one round's result into the state and reports it to the observers; returns
    /// when the next round is due.
    fn apply(
        &mut self,
        result: Result<(Outcome, Duration), RoundError>,
        started: Instant,
        may_claim: bool,
    ) -> Instant {
        if self.observers.is_empty() {
            return self.fold(result, started, may_claim);
        }
        let mut report = RoundReport {
            statements: self.round_statements,
            ..RoundReport::default()
        };
        match &result {
            Err(RoundError { error, .. }) => report.error_kind = Some(error.kind()),
            Ok((outcome, round_trip)) => {
                if self.connected && self.failures == 0 {
                    report.round_trip = Some(*round_trip);
                }
                match (outcome, self.hold) {
                    (
                        Outcome::Holding { term, .. },
                        Hold::Leading {
                            term: led,
                            deadline,
                        },
                    ) if *term == led => {
                        report.renewal_margin = Some(deadline.left(Instants::now(&self.boot)));
                    }
                    (Outcome::Observed(Some(row)), _) => {
                        report.clock_offset_us = row.clock_offset_us
                    }
                    _ => {}
                }
            }
        }
        let next = self.fold(result, started, may_claim);
        self.rounds_completed += 1;
        report.completed = self.rounds_completed;
        for observer in &self.observers {
            observer(&report);
        }
        next
    }

    /// `may_claim`: whether this node may take the lease now; if not, nothing is gained
    /// by polling sooner than the regular poll.
    fn fold(
        &mut self,
        result: Result<(Outcome, Duration), RoundError>,
        started: Instant,
        may_claim: bool,
    ) -> Instant {
        let settings = Arc::clone(&self.settings);
        let now = Instant::now();
        let regular = (started + settings.interval).max(now);
        let (outcome, round_trip) = match result {
            Ok(ok) => ok,
            Err(RoundError { error, in_doubt }) => {
                if in_doubt.is_some() {
                    self.in_doubt = in_doubt;
                }
                self.failures += 1;
                self.connected = false;
                self.error = Some(error.to_string());
                if self.failures == 1 {
                    warn!(%error, kind = error.kind(), election = %settings.name, "database round failed; retrying");
                } else {
                    debug!(%error, failures = self.failures, "database round failed again");
                }
                if !self.is_leading() {
                    let term = self.status.borrow().term;
                    self.publish(Role::Unknown, None, term);
                }
                let backoff = RETRY_BASE
                    .saturating_mul(1 << (self.failures - 1).min(16))
                    .min(settings.poll);
                return now + backoff;
            }
        };
        debug!(round_trip_us = round_trip.as_micros() as u64, "round");
        // The first round after (re)connecting also paid for connecting.
        let measured_trip = match self.failures == 0 && self.connected {
            true => round_trip,
            false => Duration::ZERO,
        };
        if self.failures > 0 {
            info!(failures = self.failures, election = %settings.name, "database reachable again");
            self.failures = 0;
        } else if self.connected {
            // Only a round on an open connection measures the database: the first one
            // after (re)connecting also paid for connecting and migrating.
            self.check_round_trip(round_trip);
        }
        self.connected = true;
        self.error = None;
        match outcome {
            Outcome::Holding { term, sent } => {
                let deadline = self.lease_from(sent);
                self.in_doubt = None;
                self.held_any = true;
                self.hold = match self.hold {
                    // A renewal that came back after we stopped acting does not restore
                    // leadership in the same term.
                    Hold::Lapsed { term: lapsed } if lapsed == term => Hold::Lapsed { term },
                    // Too late by either clock: an answer that arrives after the host
                    // slept is no fresher than its sending.
                    _ if deadline.passed(Instants::now(&self.boot)) => Hold::Lapsed { term },
                    _ => Hold::Leading { term, deadline },
                };
                if let Hold::Leading { deadline, .. } = self.hold {
                    self.lease_end = Some(deadline);
                }
                match self.hold {
                    Hold::Leading { .. } => {
                        self.publish(Role::Leader, Some(settings.node_id.clone()), Some(term));
                        regular
                    }
                    // The answer came too late to act on (the deadline timer may not have
                    // fired yet): stop acting now, and start a new term at once rather
                    // than leave the row idle.
                    _ => {
                        self.publish(Role::Unknown, None, Some(term));
                        now
                    }
                }
            }
            Outcome::NotHeld => {
                if let Hold::Leading { term, .. } = self.hold {
                    warn!(
                        election = %settings.name,
                        node = %settings.node_id,
                        term,
                        "the database refused the renewal: the lease is no longer ours"
                    );
                }
                self.hold = Hold::None;
                let term = self.status.borrow().term;
                self.publish(Role::Unknown, None, term);
                now
            }
            Outcome::Observed(row) => {
                let me = settings.node_id.as_str();
                // The row's term is ours if this node led in it, or if it is the term a
                // claim or reacquire of ours may have started (its answer was lost) and the
                // row shows this election's token for it: the node id alone cannot tell,
                // another process may run with the same one. Both are checked against the
                // row, so the in-doubt term wins over the one led before.
                let ours = row.as_ref().filter(|r| {
                    r.holder.as_deref() == Some(me)
                        && (self.hold.term() == Some(r.term)
                            || (self.in_doubt == Some(r.term) && r.started_by(self.token)))
                });
                self.hold = match ours {
                    Some(r) => Hold::Lapsed { term: r.term },
                    None => Hold::None,
                };
                self.in_doubt = None;
                let leader = row
                    .as_ref()
                    .and_then(|r| r.live_holder())
                    .map(str::to_owned);
                let term = row.as_ref().map(|r| r.term);
                self.observed_lapse = leader
                    .as_ref()
                    .and(row.as_ref())
                    .map(|r| now + r.remaining());
                if leader.as_deref() == Some(me)
                    && self.hold == Hold::None
                    && self.foreign_term_warned != term
                {
                    warn!(
                        election = %settings.name,
                        node = me,
                        term,
                        "the table names this node as leader in a term this process did not take; \
                         is another process running with the same node id? waiting for that lease to lapse"
                    );
                    self.foreign_term_warned = term;
                }
                self.publish(Role::Follower, leader, term);
                let next_poll = (started + settings.poll).max(now);
                match (&self.hold, &row) {
                    _ if !may_claim => next_poll,
                    (Hold::Lapsed { .. }, _) => now,
                    // Poll again right when the lease can lapse (spread a little), if
                    // that is before the next regular poll. Not capped by the regular
                    // poll: that would keep the smallest spread drawn so far, and every
                    // follower would end up reading at the lapse instant again.
                    (_, Some(row)) => {
                        let lapse = now + row.remaining().max(MIN_POLL);
                        match lapse < next_poll {
                            true => {
                                let spread = settings.lapse_spread_after(measured_trip);
                                lapse + rand::random_range(Duration::ZERO..=spread)
                            }
                            false => next_poll,
                        }
                    }
                    (_, None) => now + MIN_POLL,
                }
            }
        }
    }

    /// Warns when round trips eat into the margin a leader has to renew.
    fn check_round_trip(&mut self, round_trip: Duration) {
        let margin = self.settings.renew_margin();
        if !self.thin_margin && round_trip > margin / 2 {
            self.thin_margin = true;
            warn!(
                round_trip_ms = round_trip.as_millis() as u64,
                margin_ms = margin.as_millis() as u64,
                "database round trip is more than half the margin between election.ttl and \
                 election.interval; a slow renewal will cost leadership: raise election.ttl"
            );
        } else if self.thin_margin && round_trip < margin / 4 {
            self.thin_margin = false;
            info!(
                round_trip_ms = round_trip.as_millis() as u64,
                "database round trip back well inside the renew margin"
            );
        }
    }

    fn publish(&mut self, role: Role, leader: Option<String>, term: Option<i64>) {
        let settings = &self.settings;
        let now_wall = SystemTime::now();
        let now = Instants::now(&self.boot);
        let lease = match self.hold {
            Hold::Leading { deadline, .. } if role == Role::Leader => Some(deadline),
            _ => None,
        };
        let valid_until = match lease {
            Some(deadline) => now_wall + deadline.left(now),
            None => now_wall + settings.interval + settings.ttl,
        };
        let previous = self.status.borrow().clone();
        let changed = previous.role != role || previous.leader != leader;
        if changed {
            let leader_text = leader.as_deref().unwrap_or("none");
            info!(
                election = %settings.name,
                node = %settings.node_id,
                role = role.as_str(),
                term,
                leader = leader_text,
                "role is now {}", role.as_str()
            );
        }
        let since = if previous.role != role || (role == Role::Leader && previous.term != term) {
            now_wall
        } else {
            previous.since
        };
        let lease_deadline = lease.map(|deadline| deadline.at);
        let leader_lease_until = match role {
            Role::Leader => lease_deadline,
            _ => leader.as_ref().and(self.observed_lapse),
        };
        self.status.send_replace(Status {
            role,
            leader: leader.clone(),
            term,
            since,
            updated_at: now_wall,
            valid_until,
            lease_deadline,
            lease_deadline_boot: lease.map(|deadline| deadline.boot),
            leader_lease_until,
            error: self.error.clone(),
            version: previous.version + 1,
        });
        // After the status: whoever handles an event finds the status it describes.
        if let Some(events) = &self.events {
            let was_leading = previous.role == Role::Leader;
            let leading = role == Role::Leader;
            let send = |event| {
                let _ = events.send(event);
            };
            if was_leading && (!leading || previous.term != term) {
                send(RoleEvent::Demoted {
                    term: previous.term.unwrap_or_default(),
                });
            }
            if previous.leader != leader {
                send(RoleEvent::LeaderChanged {
                    previous: previous.leader.clone(),
                    current: leader.clone(),
                    term,
                });
            }
            if leading && (!was_leading || previous.term != term) {
                send(RoleEvent::Elected {
                    term: term.unwrap_or_default(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
