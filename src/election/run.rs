//! The election loop and the handles that steer it from outside: [`Election`] runs rounds
//! until its shutdown future completes, then steps down; [`ResignHandle`],
//! [`RenewHandle`] and [`ClaimGate`] ask it to resign, renew now, or stop claiming.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until};
use tracing::{info, warn};

use super::candidacy::{Candidacy, RenewRequest};
use super::clock::boottime_by_tokio;
use super::hold::Hold;
use super::round::{Claimant, Outcome, round};
use super::settings::ElectionSettings;
use super::status::{RoleEvent, RoundObserver, Status};
use super::step_down::step_down;
use crate::store::{Commands, LeaseStore, ProcessToken, StoreError};

/// How long a stopping node waits for a round that is already in flight.
const STOP_WAIT_IN_FLIGHT: Duration = Duration::from_millis(400);

/// One node's election loop.
pub struct Election<S> {
    settings: Arc<ElectionSettings>,
    store: S,
    candidacy: Candidacy,
    /// Requests to give up leadership (see [`Election::resign_handle`]), in a given term
    /// or any.
    resign: Option<mpsc::Receiver<Option<i64>>>,
    /// Requests to renew now (see [`Election::renew_handle`]).
    renew: Option<mpsc::Receiver<RenewRequest>>,
    claims: ClaimGate,
    /// Further gates, each closed and opened by one holder (a health check).
    extra_claims: Vec<CandidacyGate>,
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

/// Closes an election to new claims for good (a stopping node must not take the lease
/// while its hooks step down). Renewals of a lease it holds go on. An election claims only
/// while this gate and every [`CandidacyGate`] it has are open.
///
/// ```compile_fail
/// // A closed stop gate cannot be opened again.
/// leaderd::ClaimGate::default().open();
/// ```
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

/// A gate on claims that its one holder closes and opens again (a health check, from
/// [`Election::extra_claim_gate`]). A type of its own, so that no holder of the stop
/// gate ([`ClaimGate`]) can reopen that one.
#[derive(Debug, Clone, Default)]
pub struct CandidacyGate(ClaimGate);

impl CandidacyGate {
    pub fn close(&self) {
        self.0.close();
    }

    pub fn open(&self) {
        (self.0).0.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
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

impl<S: LeaseStore> Election<S> {
    pub fn new(settings: ElectionSettings, store: S) -> (Self, watch::Receiver<Status>) {
        let settings = Arc::new(settings);
        let (status, receiver) = watch::channel(Status::initial());
        let candidacy = Candidacy {
            settings: Arc::clone(&settings),
            boot: Arc::new(boottime_by_tokio),
            hold: Hold::None,
            status,
            failures: 0,
            connected: false,
            thin_margin: false,
            in_doubt: None,
            token: ProcessToken::random(),
            foreign_term_warned: None,
            events: None,
            round_errors: None,
            no_claim_until: None,
            held_any: false,
            observed_lapse: None,
            released_in: None,
            error: None,
            renewals: Vec::new(),
            observers: Vec::new(),
            rounds_completed: 0,
            round_statements: 0,
            seen: Commands::default(),
            paused: false,
            resign_passed_on: None,
            rng: rand::SeedableRng::from_os_rng(),
        };
        (
            Election {
                settings,
                store,
                candidacy,
                resign: None,
                renew: None,
                claims: ClaimGate::default(),
                extra_claims: Vec::new(),
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

    /// Another gate, for a holder that opens it as well as closes it (a health check):
    /// this election claims only while this one and [`Election::claim_gate`] are open.
    pub fn extra_claim_gate(&mut self) -> CandidacyGate {
        let gate = CandidacyGate::default();
        self.extra_claims.push(gate.clone());
        gate
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

    /// Calls `observer` after every completed round (see [`RoundReport`](super::RoundReport)).
    pub fn observe(&mut self, observer: RoundObserver) {
        self.candidacy.observers.push(observer);
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

    /// Makes every random choice of this election follow `seed`: its process token and
    /// the spread of its polls (the simulator replays a run from its seed).
    #[cfg(test)]
    pub(crate) fn seed_randomness(&mut self, seed: u64) {
        let mut rng: rand::rngs::SmallRng = rand::SeedableRng::seed_from_u64(seed);
        self.candidacy.token = ProcessToken::from_rng(&mut rng);
        self.candidacy.rng = rng;
    }

    /// Replaces CLOCK_BOOTTIME (tests suspend the host with it).
    #[cfg(test)]
    pub(crate) fn set_boot_clock(&mut self, boot: super::BootClock) {
        self.candidacy.boot = boot;
    }

    /// The errors of failed rounds from now on, in order, each sent before the status that
    /// reports it (whose [`Status::error`] holds only its text).
    pub fn round_errors(&mut self) -> mpsc::UnboundedReceiver<StoreError> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.candidacy.round_errors = Some(sender);
        receiver
    }

    /// The node's role changes from now on, in order.
    pub fn events(&mut self) -> mpsc::UnboundedReceiver<RoleEvent> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.candidacy.events = Some(sender);
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
            mut candidacy,
            mut resign,
            mut renew,
            claims,
            extra_claims,
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
                _ = sleep_until(candidacy.next_look()), if candidacy.is_leading() => {
                    candidacy.look_at_deadline();
                    continue 'rounds;
                }
                // Released by its holder: try now rather than at the next poll, and in
                // the term last seen rather than after reading the row again.
                // For a leader, an operator command may be pending (commands wake the
                // same channel): renew now, which sees it.
                _ = next_message(&mut releases) => {
                    if !candidacy.is_leading() {
                        candidacy.released_in = candidacy.status.borrow().term;
                    }
                    next_round = Instant::now();
                    continue 'rounds;
                }
                request = next_message(&mut renew) => {
                    if candidacy.is_leading() {
                        candidacy.renewals.push(request);
                        next_round = Instant::now();
                    } else {
                        let _ = request.send(None);
                    }
                    continue 'rounds;
                }
                only_term = next_message(&mut resign) => {
                    let held = candidacy
                        .held()
                        .filter(|(term, _)| only_term.is_none_or(|only| only == *term));
                    if let Some(held) = held {
                        info!(election = %settings.name, node = %settings.node_id, term = held.0, "resigning");
                        step_down(&mut store, &mut candidacy, durable.as_mut(), Some(held), false).await;
                        candidacy.hold = Hold::None;
                        candidacy.no_claim_until = Some(Instant::now() + settings.ttl);
                        next_round = Instant::now();
                    }
                    continue 'rounds;
                }
                // Due already (a wake-up, a command): now, not at the timer's next
                // millisecond tick, which a sleep until a past instant waits for.
                _ = std::future::ready(()), if next_round <= Instant::now() => {}
                _ = sleep_until(next_round) => {}
            }
            let started = Instant::now();
            let hold = candidacy.hold;
            let gates_closed =
                || claims.is_closed() || extra_claims.iter().any(CandidacyGate::is_closed);
            let done_with_claims = gates_closed() || (single_term && candidacy.held_any);
            let may_claim = !done_with_claims
                && candidacy
                    .no_claim_until
                    .is_none_or(|until| started >= until);
            // Closed again just before each claim: a stop may come between a read and it.
            let may_claim_now = || may_claim && !gates_closed();
            let released_in = candidacy.released_in.take();
            let mut statements = 0;
            // A new term starts with nothing seen.
            let mut seen = match hold {
                Hold::Leading { .. } => candidacy.seen,
                _ => Commands::default(),
            };
            let boot = Arc::clone(&candidacy.boot);
            let result = {
                let sender = Claimant {
                    settings: &settings,
                    boot: &boot,
                    token: candidacy.token,
                };
                let attempt = round(
                    &mut store,
                    &sender,
                    hold,
                    may_claim_now,
                    released_in,
                    &mut statements,
                    &mut seen,
                );
                tokio::pin!(attempt);
                loop {
                    tokio::select! {
                        biased;
                        _ = &mut shutdown => {
                            held_at_stop = candidacy.held();
                            candidacy.stop_acting();
                            // The round may have just taken the row: learn the term to release.
                            if let Ok(Ok((Outcome::Holding { term, sent }, _))) =
                                tokio::time::timeout(STOP_WAIT_IN_FLIGHT, &mut attempt).await
                            {
                                held_at_stop = Some((term, candidacy.lease_from(sent)));
                            }
                            break 'rounds;
                        }
                        _ = sleep_until(candidacy.next_look()), if candidacy.is_leading() => {
                            candidacy.look_at_deadline();
                        }
                        // The renewal on its way answers it (or the deadline does).
                        request = next_message(&mut renew) => {
                            candidacy.renewals.push(request);
                            candidacy.answer_renewals_if_lost();
                        }
                        result = &mut attempt => break result,
                    }
                }
            };
            candidacy.round_statements = statements;
            candidacy.seen = seen;
            next_round = candidacy.apply(result, started, may_claim);
            // An operator asked this leader to step down: through the step-down sequence
            // of whoever consumes the events (leader work stopped, on_demoted), which
            // then resigns through the resign handle. Without a consumer nothing here
            // knows whether the leader's work has stopped (`leaderd lock`'s command, a
            // library's task), and releasing first would let another node start while
            // it runs: the request is refused, and the leader keeps renewing.
            if let Hold::Leading { term, .. } = candidacy.hold {
                if candidacy.seen.resign && candidacy.resign_passed_on != Some(term) {
                    candidacy.resign_passed_on = Some(term);
                    let passed_on = candidacy.events.as_ref().is_some_and(|events| {
                        events.send(RoleEvent::ResignRequested { term }).is_ok()
                    });
                    match passed_on {
                        true => {
                            info!(election = %settings.name, node = %settings.node_id, term, "asked to step down")
                        }
                        false => warn!(
                            election = %settings.name, node = %settings.node_id, term,
                            "asked to step down, but nothing here can stop this leader's work \
                             first; the request is ignored: stop the process instead"
                        ),
                    }
                }
            }
            if single_term && candidacy.held_any {
                // A lock that was held will not be waited for again.
                releases = None;
            }
            candidacy.answer_renewals();
        }
        let held = held_at_stop.or(candidacy.held());
        step_down(&mut store, &mut candidacy, durable.as_mut(), held, true).await
    }
}
