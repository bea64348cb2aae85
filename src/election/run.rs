//! The election loop: [`Election`] carries out what its state machine (`machine.rs`) asks,
//! against the store and the channels, and feeds back what happens: answers, timers,
//! requests from its handles (`handles.rs`), and the stop. One wait over every source,
//! with at most one statement in flight; the machine says which sources it listens to
//! and in which order they are handed over (`Source`), as it does for the simulator's
//! drivers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until, timeout};
use tracing::{info, warn};

use super::clock::{BootClock, Instants, boottime_by_tokio};
use super::handles::{
    CandidacyGate, ClaimGate, FenceHandle, RenewHandle, RenewRequest, ResignHandle,
};
use super::machine::{Action, Input, Machine, Moment, Reply, Source, Statement};
use super::settings::ElectionSettings;
use super::status::{RoleEvent, RoundObserver, Status};
use crate::store::{LeaseStore, ProcessToken, StoreError};

/// One node's election loop.
pub struct Election<S> {
    settings: Arc<ElectionSettings>,
    store: S,
    machine: Machine,
    outlets: Outlets,
    /// CLOCK_BOOTTIME, or a stand-in in tests.
    boot: BootClock,
    /// The system's wall clock, or a stand-in in tests.
    wall: super::clock::WallClock,
    /// Requests to give up leadership (see [`Election::resign_handle`]), in a given term
    /// or any.
    resign: Option<mpsc::Receiver<Option<i64>>>,
    /// Requests to renew now (see [`Election::renew_handle`]).
    renew: Option<mpsc::Receiver<RenewRequest>>,
    claims: ClaimGate,
    /// Further gates, each closed and opened by one holder (a health check).
    extra_claims: Vec<CandidacyGate>,
    /// Ask the store for release notifications (see [`Election::poll_only`]).
    listen_for_releases: bool,
    /// The last status version made durable (see [`Election::release_after`]).
    durable: Option<watch::Receiver<u64>>,
}

/// Where the machine's publications go.
struct Outlets {
    settings: Arc<ElectionSettings>,
    status: watch::Sender<Status>,
    /// Where role changes go, if anyone listens.
    events: Option<mpsc::UnboundedSender<RoleEvent>>,
    /// Where the errors of failed rounds go, if anyone listens (the status carries only
    /// their text).
    round_errors: Option<mpsc::UnboundedSender<StoreError>>,
    observers: Vec<RoundObserver>,
    /// Renew requests waiting for a successful renewal or the loss of the lease.
    renewals: Vec<RenewRequest>,
}

/// What the machine waits on: a statement's answer, or the status consumer's word.
enum Wait {
    Statement(Statement),
    Durable { version: u64, within: Duration },
}

/// What the loop does next, after carrying out a step's actions.
#[derive(Default)]
struct Flow {
    send: Option<Wait>,
    abandoned: bool,
    finish: Option<Option<Result<bool, StoreError>>>,
}

impl Outlets {
    fn carry_out(&mut self, actions: Vec<Action>) -> Flow {
        let mut flow = Flow::default();
        for action in actions {
            match action {
                Action::Send(statement) => flow.send = Some(Wait::Statement(statement)),
                Action::AwaitDurable { version, within } => {
                    flow.send = Some(Wait::Durable { version, within })
                }
                Action::Abandon => flow.abandoned = true,
                Action::Finish(released) => flow.finish = Some(released),
                Action::Publish(status) => {
                    self.status.send_replace(status);
                }
                Action::Event(event) => {
                    if let Some(events) = &self.events {
                        let _ = events.send(event);
                    }
                }
                Action::RoundFailed(error) => {
                    if let Some(errors) = &self.round_errors {
                        let _ = errors.send(error);
                    }
                }
                Action::Report(report) => {
                    for observer in &self.observers {
                        observer(&report);
                    }
                }
                Action::AnswerRenewals(answer) => {
                    for request in self.renewals.drain(..) {
                        let _ = request.send(answer);
                    }
                }
                Action::PassOnResign { term } => self.pass_on_resign(term),
            }
        }
        flow
    }

    /// Passes an operator's request to step down on to whoever consumes the events (leader
    /// work stopped, on_demoted), which then resigns through the resign handle. Without a
    /// consumer nothing here knows whether the leader's work has stopped (`leaderd lock`'s
    /// command, a library's task), and releasing first would let another node start while
    /// it runs: the request is refused, and the leader keeps renewing.
    fn pass_on_resign(&self, term: i64) {
        let settings = &self.settings;
        let passed_on = self
            .events
            .as_ref()
            .is_some_and(|events| events.send(RoleEvent::ResignRequested { term }).is_ok());
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

/// Carries out one statement against the store.
async fn execute<S: LeaseStore>(
    store: &mut S,
    settings: &ElectionSettings,
    token: ProcessToken,
    statement: Statement,
) -> Result<Reply, StoreError> {
    let (name, me) = (settings.name.as_str(), settings.node_id.as_str());
    Ok(match statement {
        Statement::Renew { term, seen } => Reply::Done(
            store
                .renew_seeing(&settings.lease(token, term), seen)
                .await?,
        ),
        Statement::Read => Reply::Row(store.get(name).await?),
        Statement::Reacquire { term } => {
            Reply::Started(store.reacquire(&settings.lease(token, term)).await?)
        }
        Statement::Claim { expected } => {
            Reply::Started(store.claim(&settings.lease(token, expected)).await?)
        }
        Statement::AcceptHandover { term } => {
            Reply::Done(store.accept_handover(name, me, term).await?)
        }
        Statement::EnsureRow => {
            store.ensure_row(name).await?;
            Reply::RowEnsured
        }
        Statement::Release { term, within } => {
            let lease = settings.lease(token, term);
            let released = timeout(within, store.release(&lease)).await;
            Reply::Done(released.unwrap_or(Err(StoreError::QueryTimeout { after: within }))?)
        }
    })
}

/// Waits until `durable` has reached `version`, at most `within`: whether it did.
async fn await_durable(
    durable: &mut watch::Receiver<u64>,
    version: u64,
    within: Duration,
) -> Reply {
    let said = timeout(within, durable.wait_for(|v| *v >= version)).await;
    Reply::Durable(matches!(said, Ok(Ok(_))))
}

/// The next message of an optional channel (release notifications, renew and resign
/// requests); never ready without a channel, nor once it has closed.
fn poll_message<T>(receiver: &mut Option<mpsc::Receiver<T>>, cx: &mut Context<'_>) -> Poll<T> {
    let Some(open) = receiver else {
        return Poll::Pending;
    };
    match open.poll_recv(cx) {
        Poll::Ready(Some(message)) => Poll::Ready(message),
        Poll::Ready(None) => {
            *receiver = None;
            Poll::Pending
        }
        Poll::Pending => Poll::Pending,
    }
}

/// The statement in flight: its answer, once it comes.
type InFlight<'a> = Pin<Box<dyn Future<Output = Result<Reply, StoreError>> + Send + 'a>>;

/// What one of the sources had, as the wait over them found it.
enum Ready {
    Stop,
    Look,
    Hint,
    Renew(RenewRequest),
    Resign(Option<i64>),
    Answer(Result<Reply, StoreError>),
    Due,
}

impl<S: LeaseStore> Election<S> {
    pub fn new(settings: ElectionSettings, store: S) -> (Self, watch::Receiver<Status>) {
        let settings = Arc::new(settings);
        let (status, receiver) = watch::channel(Status::initial());
        let machine = Machine::new(Arc::clone(&settings), Instant::now());
        let outlets = Outlets {
            settings: Arc::clone(&settings),
            status,
            events: None,
            round_errors: None,
            observers: Vec::new(),
            renewals: Vec::new(),
        };
        (
            Election {
                settings,
                store,
                machine,
                outlets,
                boot: Arc::new(boottime_by_tokio),
                wall: Arc::new(SystemTime::now),
                resign: None,
                renew: None,
                claims: ClaimGate::default(),
                extra_claims: Vec::new(),
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

    /// The fence of the term this node leads in, for leader work in this program.
    pub fn fence_handle(&self) -> FenceHandle {
        FenceHandle {
            election: self.settings.name().into(),
            status: self.outlets.status.subscribe(),
        }
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
        self.machine.single_term = true;
    }

    /// Calls `observer` after every completed round (see [`RoundReport`](super::RoundReport)).
    pub fn observe(&mut self, observer: RoundObserver) {
        self.outlets.observers.push(observer);
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
        self.machine.release_waits_for_durable = true;
    }

    /// Makes every random choice of this election follow `seed`: its process token and
    /// the spread of its polls (the simulator replays a run from its seed).
    #[cfg(test)]
    pub(crate) fn seed_randomness(&mut self, seed: u64) {
        let mut rng: rand::rngs::SmallRng = rand::SeedableRng::seed_from_u64(seed);
        self.machine.token = ProcessToken::from_rng(&mut rng);
        self.machine.rng = rng;
    }

    /// Replaces CLOCK_BOOTTIME (tests suspend the host with it).
    #[cfg(test)]
    pub(crate) fn set_boot_clock(&mut self, boot: super::BootClock) {
        self.boot = boot;
    }

    /// Replaces the wall clock (the simulator steps it).
    #[cfg(test)]
    pub(crate) fn set_wall_clock(&mut self, wall: super::clock::WallClock) {
        self.wall = wall;
    }

    /// The errors of failed rounds from now on, in order, each sent before the status that
    /// reports it (whose [`Status::error`] holds only its text).
    pub fn round_errors(&mut self) -> mpsc::UnboundedReceiver<StoreError> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.outlets.round_errors = Some(sender);
        receiver
    }

    /// The node's role changes from now on, in order.
    pub fn events(&mut self) -> mpsc::UnboundedReceiver<RoleEvent> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.outlets.events = Some(sender);
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
            mut outlets,
            boot,
            wall,
            mut resign,
            mut renew,
            claims,
            extra_claims,
            listen_for_releases,
            mut durable,
        } = self;
        tokio::pin!(shutdown);
        let mut releases = match listen_for_releases {
            true => store.release_notifications(&settings.name),
            false => None,
        };
        let moment = || Moment {
            at: Instants::now(&boot),
            wall: wall(),
            claims_open: !claims.is_closed() && !extra_claims.iter().any(CandidacyGate::is_closed),
        };
        // The statement in flight, and whether it has left (been polled once): a stop that
        // comes before that means it was never sent.
        let mut in_flight: Option<InFlight<'_>> = None;
        let mut sent = false;
        loop {
            let now = Instant::now();
            let look = machine.next_look(now).map(sleep_until);
            let due = machine.next_round();
            let due_sleep = due.filter(|due| *due > now).map(sleep_until);
            tokio::pin!(look, due_sleep);
            // One wait over every source, handed over in the machine's order.
            let ready = std::future::poll_fn(|cx| {
                for source in Source::ORDER {
                    if !machine.listens_to(source, now) {
                        continue;
                    }
                    let ready = match source {
                        Source::Stop => shutdown.as_mut().poll(cx).map(|()| Ready::Stop),
                        Source::Look => match look.as_mut().as_pin_mut() {
                            Some(look) => look.poll(cx).map(|()| Ready::Look),
                            None => Poll::Pending,
                        },
                        Source::ReleaseHint => poll_message(&mut releases, cx).map(|_| Ready::Hint),
                        Source::RenewRequest => poll_message(&mut renew, cx).map(Ready::Renew),
                        Source::Resign => poll_message(&mut resign, cx).map(Ready::Resign),
                        Source::Answer => match in_flight.as_mut() {
                            Some(statement) => {
                                sent = true;
                                statement.as_mut().poll(cx).map(Ready::Answer)
                            }
                            None => Poll::Pending,
                        },
                        // Due already (a wake-up, a command): now, not at the timer's next
                        // millisecond tick, which a sleep until a past instant waits for.
                        Source::Due => match due_sleep.as_mut().as_pin_mut() {
                            Some(due) => due.poll(cx).map(|()| Ready::Due),
                            None => Poll::Ready(Ready::Due),
                        },
                    };
                    if ready.is_ready() {
                        return ready;
                    }
                }
                Poll::Pending
            });
            let (input, unsent) = match ready.await {
                Ready::Stop => (Input::Stop, in_flight.is_some() && !sent),
                Ready::Look => (Input::Look, false),
                // Released by its holder: try now rather than at the next poll, and in the
                // term last seen rather than after reading the row again. For a leader, an
                // operator command may be pending (commands wake the same channel): renew
                // now, which sees it.
                Ready::Hint => (Input::ReleaseHint, false),
                Ready::Renew(request) => {
                    outlets.renewals.push(request);
                    (Input::RenewRequested, false)
                }
                Ready::Resign(only_term) => (Input::Resign(only_term), false),
                Ready::Answer(answer) => {
                    in_flight = None;
                    (Input::Answer(answer), false)
                }
                Ready::Due => (Input::Due, false),
            };
            let mut flow = outlets.carry_out(machine.step(moment(), input));
            // A stop that came before the statement left: it is never sent.
            if unsent && machine.stopping_in_flight() {
                flow = outlets.carry_out(machine.step(moment(), Input::Unsent));
            }
            if flow.abandoned {
                in_flight = None;
            }
            if let Some(released) = flow.finish {
                return released;
            }
            if let Some(wait) = flow.send {
                // Ends the last statement's borrow of the store before the next one's.
                drop(in_flight);
                in_flight = Some(match wait {
                    Wait::Statement(statement) => {
                        let token = machine.token;
                        Box::pin(execute(&mut store, &settings, token, statement))
                    }
                    Wait::Durable { version, within } => {
                        let durable = durable.as_mut().expect(
                            "the machine waits for a durable status only after release_after",
                        );
                        Box::pin(async move { Ok(await_durable(durable, version, within).await) })
                    }
                });
                sent = false;
            }
            if machine.claims_ended() {
                // A lock that was held will not be waited for again.
                releases = None;
            }
        }
    }
}
