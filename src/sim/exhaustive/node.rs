//! A node in the exhaustive check: its [`Machine`], the statement it has in flight, and
//! the inputs waiting for it, given to the machine in the machine's order
//! ([`Source::ORDER`](crate::election::machine::Source::ORDER)), as every driver does.

use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use crate::election::clock::Instants;
use crate::election::machine::{
    Action, Input, Machine, Moment, Reply, Source, Statement, hash_debug,
};
use crate::election::{ElectionSettings, Role, Status};
use crate::sim::world::ELECTION;
use crate::store::{ProcessToken, StoreError};

/// The election's timing in the check: two rounds per ttl.
pub(super) const TTL: Duration = Duration::from_secs(2);
pub(super) const INTERVAL: Duration = Duration::from_secs(1);
/// `database.query_timeout` (its default, the ttl): an answer not back by then is an
/// error.
pub(super) const QUERY_TIMEOUT: Duration = TTL;
/// Where the boot clock reads at the check's start (as in the direct runs).
pub(super) const BOOT_AT_START: Duration = Duration::from_secs(1000);

/// What a node waits on: a statement's answer, or the status file's word that a status
/// is durable (at most `within`).
#[derive(Clone, Copy, Debug)]
pub(super) enum Awaited {
    Statement(Statement),
    Durable { within: Duration },
}

/// A statement (or a wait for the status file) on its way: sent at `sent_at` (from the
/// start), and the database's reply once it ran.
#[derive(Clone, Debug)]
pub(super) struct Flight {
    pub(super) awaited: Awaited,
    pub(super) sent_at: Duration,
    pub(super) ran: Option<Reply>,
    /// Time moved on before it ran or, for the status file, answered (one fault however
    /// long that lasts).
    pub(super) slow: bool,
}

/// One node process.
#[derive(Clone)]
pub(super) struct Node {
    pub(super) id: &'static str,
    pub(super) machine: Machine,
    pub(super) flight: Option<Flight>,
    /// A statement the machine abandoned before it ran: it may still run.
    pub(super) orphan: Option<Flight>,
    /// An answer that arrived (`None`: an error), for the next pump.
    arrived: Option<Option<Reply>>,
    /// The stop is waiting to be taken; `stopped`: it was (the claim gate is closed).
    pub(super) stop: bool,
    pub(super) stopped: bool,
    pub(super) finished: bool,
    resign: Option<Option<i64>>,
    /// A resign the leader work will ask for, once it has stopped (any time later).
    pub(super) passed_on: Option<i64>,
    look_at: Option<Instant>,
    pub(super) status: Status,
    pub(super) last_term: Option<i64>,
}

/// What carrying a node's actions out asks of the world.
#[derive(Default)]
pub(super) struct Effects {
    /// A published status that breaks property 2 at its source.
    pub(super) violation: Option<String>,
    /// A leader stopped acting without being stopped (for the check's coverage).
    pub(super) lost_lead: bool,
}

impl Node {
    pub(super) fn new(id: &'static str, seed: u64, base: Instant) -> Node {
        let settings = ElectionSettings::new(ELECTION, id, TTL, INTERVAL)
            .expect("the check's settings are valid");
        let mut machine = Machine::new(Arc::new(settings), base);
        machine.release_waits_for_durable = true;
        let mut rng = SmallRng::seed_from_u64(seed);
        machine.token = ProcessToken::from_rng(&mut rng);
        machine.rng = rng;
        Node {
            id,
            machine,
            flight: None,
            orphan: None,
            arrived: None,
            stop: false,
            stopped: false,
            finished: false,
            resign: None,
            passed_on: None,
            look_at: None,
            status: Status::initial(),
            last_term: None,
        }
    }

    /// When the node's timer fires: its next round, or its look at its deadline.
    pub(super) fn wake(&self) -> Option<Instant> {
        if self.finished {
            return None;
        }
        [self.look_at, self.machine.next_round()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Delivers the answer to the statement in flight (`None`: an error).
    pub(super) fn arrive(&mut self, answer: Option<Reply>) {
        self.arrived = Some(answer);
    }

    pub(super) fn ask_to_stop(&mut self) {
        self.stop = true;
    }

    /// SIGTERM handed over before the statement just sent has left (the election loop
    /// polls the stop first): the machine hears the stop, then that the statement never
    /// left, and the statement never reaches the database.
    pub(super) fn stop_before_sending(&mut self, base: Instant, now: Duration) -> Effects {
        self.ask_to_stop();
        let mut effects = self.pump(base, now);
        if self.machine.stopping_in_flight() && effects.violation.is_none() {
            // Taken first: the machine's abandon finds nothing that could still run.
            self.flight = None;
            let actions = self.machine.step(self.moment(base, now), Input::Unsent);
            self.carry_out(actions, base, now, &mut effects);
            let after = self.pump(base, now);
            effects.violation = effects.violation.or(after.violation);
            effects.lost_lead |= after.lost_lead;
        }
        effects
    }

    pub(super) fn ask_to_resign(&mut self, term: i64) {
        self.resign = Some(Some(term));
    }

    /// The node's clocks at `now` (from `base`): no suspend, so both run together.
    fn moment(&self, base: Instant, now: Duration) -> Moment {
        Moment {
            at: Instants {
                at: base + now,
                boot: BOOT_AT_START + now,
            },
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + now,
            claims_open: !self.stopped,
        }
    }

    /// Gives the machine every input that is ready, in [`Source::ORDER`] (as every
    /// driver), then sets its deadline timer.
    pub(super) fn pump(&mut self, base: Instant, now: Duration) -> Effects {
        let mut effects = Effects::default();
        let mono = base + now;
        while !self.finished && effects.violation.is_none() {
            let machine = &self.machine;
            let source = machine.next_source(mono, |source| match source {
                Source::Stop => self.stop,
                Source::Look => self.look_at.is_some_and(|look| look <= mono),
                // No release notifications, no renew requests in this model.
                Source::ReleaseHint | Source::RenewRequest => false,
                Source::Resign => self.resign.is_some(),
                Source::Answer => self.arrived.is_some(),
                Source::Due => machine.next_round().is_some_and(|due| due <= mono),
            });
            let input = match source {
                None => break,
                Some(Source::Stop) => {
                    (self.stop, self.stopped) = (false, true);
                    Input::Stop
                }
                Some(Source::Look) => {
                    self.look_at = None;
                    Input::Look
                }
                Some(Source::Resign) => Input::Resign(self.resign.take().flatten()),
                Some(Source::Answer) => {
                    self.flight = None;
                    let answer = self.arrived.take().expect("an answer is ready");
                    Input::Answer(answer.ok_or(StoreError::QueryTimeout {
                        after: QUERY_TIMEOUT,
                    }))
                }
                Some(Source::Due) => Input::Due,
                Some(Source::ReleaseHint | Source::RenewRequest) => unreachable!("never ready"),
            };
            let actions = self.machine.step(self.moment(base, now), input);
            self.carry_out(actions, base, now, &mut effects);
        }
        // The deadline timer. With no suspend modelled, the looks every BOOT_LOOK_EVERY
        // find nothing before the deadline: look at the deadline only (the machine's look
        // as of an instant far ahead is its deadline).
        self.look_at = self.machine.next_look(mono + Duration::from_secs(3600));
        effects
    }

    fn carry_out(
        &mut self,
        actions: Vec<Action>,
        base: Instant,
        now: Duration,
        effects: &mut Effects,
    ) {
        for action in actions {
            match action {
                Action::Send(statement) => {
                    let starts_term = matches!(
                        statement,
                        Statement::Claim { .. } | Statement::Reacquire { .. }
                    );
                    if self.stopped && starts_term && effects.violation.is_none() {
                        effects.violation = Some(format!(
                            "6: a node that has begun to stop never starts a term: {} sends \
                             {statement:?} after its stop",
                            self.id
                        ));
                    }
                    self.flight = Some(Flight {
                        awaited: Awaited::Statement(statement),
                        sent_at: now,
                        ran: None,
                        slow: false,
                    });
                }
                // The status file makes a status durable at once.
                Action::AwaitDurable { within, .. } => {
                    self.flight = Some(Flight {
                        awaited: Awaited::Durable { within },
                        sent_at: now,
                        ran: Some(Reply::Durable(true)),
                        slow: false,
                    });
                }
                Action::Abandon => {
                    if let Some(flight) = self.flight.take() {
                        if flight.ran.is_none() {
                            self.orphan = Some(flight);
                        }
                    }
                }
                Action::Publish(status) => {
                    if effects.violation.is_none() {
                        effects.violation = self.published_too_late(&status, base, now);
                    }
                    // A leader that lost its lease without a stop: a lapse or a refused
                    // renewal.
                    if self.status.role == Role::Leader
                        && status.role != Role::Leader
                        && !self.stopped
                    {
                        effects.lost_lead = true;
                    }
                    self.status = status;
                }
                Action::PassOnResign { term } => self.passed_on = Some(term),
                Action::Finish(_) => {
                    self.finished = true;
                    self.status.role = Role::Unknown;
                }
                Action::Event(_)
                | Action::Report(_)
                | Action::RoundFailed(_)
                | Action::AnswerRenewals(_) => {}
            }
        }
    }

    /// Property 2 at the source: the leader role only with a deadline ahead by both clocks
    /// (as the direct runs' `check_published`).
    fn published_too_late(&self, status: &Status, base: Instant, now: Duration) -> Option<String> {
        if status.role != Role::Leader {
            return None;
        }
        let ahead = status.lease_deadline.is_some_and(|d| base + now < d)
            && status
                .lease_deadline_boot
                .is_some_and(|d| BOOT_AT_START + now < d);
        (!ahead).then(|| {
            format!(
                "2: a node acts as leader only while the row names it, in its term, live: \
                 {} publishes leader in term {:?} with its deadline passed",
                self.id, status.term
            )
        })
    }

    /// Feeds what decides the node's future into `hasher`.
    pub(super) fn fingerprint(&self, hasher: &mut impl Hasher) {
        self.machine.fingerprint(hasher);
        hash_debug(&(&self.flight, &self.orphan, &self.arrived), hasher);
        (self.stop, self.stopped, self.finished).hash(hasher);
        (self.resign, self.passed_on, self.look_at).hash(hasher);
        let status = &self.status;
        hash_debug(&status.role, hasher);
        (status.term, status.lease_deadline_boot, self.last_term).hash(hasher);
    }
}
