//! The election as one state machine with no I/O: [`Machine::step`] takes what happened
//! (an [`Input`]: a statement's answer, a timer, a request, the stop) at a [`Moment`] and
//! returns what to do ([`Action`]s: send this statement, publish this status, wait for the
//! status to be durable). The loop in `run.rs` carries the actions out against the store
//! and the channels; the simulator can carry them out against its model of the database
//! just as well. What the node holds is the [`State`]; a round's progress through its
//! statements is in `machine/round.rs`, what a finished round means in `machine/fold.rs`,
//! and which inputs it takes when, in which order, in `machine/inputs.rs`: the drivers
//! only carry out. The release's bound and the wait for a durable status are data of the
//! actions ([`Statement::Release`], [`Action::AwaitDurable`]).
//!
//! What stays beside the [`State`] enum, and why: what spans states rather than belongs
//! to one. The round under way and the statement awaited (`round`, `awaiting`) cut across
//! `Leading`, `Lapsed` and `Following` alike (a round starts in one and may end in
//! another); `due` is when the next round starts whatever the state; `resigned_until`
//! outlives the step-down into `Following` and `Lapsed`; the link's health, what was
//! published last (its term is the one a release hint names) and `held_any` are history
//! of the process, not of a phase; and the settings, token, rng and `single_term`,
//! `release_waits_for_durable` are configuration, set once.

#[cfg(test)]
mod fingerprint;
#[cfg(test)]
pub(crate) use fingerprint::hash_debug;
mod fold;
mod inputs;
mod publish;
mod round;
mod step_down;

use rand::rngs::SmallRng;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tracing::info;

use super::clock::Instants;
use super::settings::ElectionSettings;
use super::status::{RoleEvent, RoundReport, Status};
use crate::store::{Commands, LeaseRow, ProcessToken, StoreError};
pub(crate) use inputs::{Input, Source};
pub(super) use round::{Awaiting, Round};

/// How often a leader looks at CLOCK_BOOTTIME for its deadline: its timers would not
/// notice that the host slept.
pub(crate) const BOOT_LOOK_EVERY: Duration = Duration::from_millis(100);

/// How long a stopping node tries to release its row.
pub(crate) const RELEASE_WITHIN: Duration = Duration::from_millis(500);

/// How long a stopping node waits for the answer of a statement already in flight: a
/// claim may have just taken the row, and its term is the one to release.
pub(crate) const STOP_WAIT_IN_FLIGHT: Duration = Duration::from_millis(400);

/// What this node holds in the database as far as it knows, and what it is doing about it.
///
/// ```text
///             claim/reacquire answered        deadline passed
///  Following ─────────────────────────► Leading ───────────────► Lapsed
///      ▲  ▲      renewal refused           │ resign            │  │
///      │  └────────────────────────────────┼───────────────────┘  │ reacquire answered
///      │          resign done              ▼                      ▼
///      └───────────────────────────── SteppingDown ◄──── (stop) Leading
///                                          │ stop
///  any ──stop, a statement in flight──► Stopping ──► SteppingDown ──► Done
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// Holds nothing: reads the row, and claims a free lease when it may.
    Following {
        /// A claim of this node on top of this term failed on the way back, so it may have
        /// committed and started a term above it. The next read tells, by the row's term
        /// token.
        in_doubt: Option<i64>,
        /// A term whose release was just announced: the next round claims it without
        /// reading first.
        released_in: Option<i64>,
    },
    /// Acts as leader in `term` until `deadline`.
    Leading {
        term: i64,
        deadline: Instants,
        /// The operator commands this leader has seen pending on its row (its renewals
        /// state them, so a changed one refuses the renewal).
        seen: Commands,
        /// Whether an operator's request to step down from this term was passed on.
        resign_passed_on: bool,
    },
    /// The row may still name this node in `term`, but it stopped acting as leader (its
    /// deadline passed). Leadership resumes only through a new term. `in_doubt`: as in
    /// `Following`, for a reacquire on top of `term`.
    Lapsed { term: i64, in_doubt: Option<i64> },
    /// Giving leadership up: stopped acting, waiting for that to be durable, then
    /// releasing `term`. `for_good`: the stop; otherwise a resign, which follows after.
    SteppingDown {
        term: i64,
        lease_end: Instants,
        for_good: bool,
        /// A stop came during a resign: end once it is done.
        stop_after: bool,
        /// The term on top of which a lost reacquire answer may have started one, for the
        /// read after a resign.
        in_doubt: Option<i64>,
    },
    /// Stopped while a statement was in flight: waits for its answer until `give_up`,
    /// since a claim's answer names a term to release.
    Stopping {
        held: Option<(i64, Instants)>,
        give_up: Instant,
    },
    /// Stopped: nothing more to do.
    Done,
}

/// When a step happens, as the machine may know it: both clocks, the wall clock for the
/// status, and whether every claim gate is open (read by the loop right before the step,
/// so a gate closed between a read and a claim stops the claim).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Moment {
    pub(crate) at: Instants,
    pub(crate) wall: SystemTime,
    pub(crate) claims_open: bool,
}

/// A statement for the store. The loop fills in the election's name, node id, ttl and
/// token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Statement {
    /// Renew a live lease of ours in `term`, stating the commands seen.
    Renew {
        term: i64,
        seen: Commands,
    },
    Read,
    /// Start a new term on a row still ours in `term`.
    Reacquire {
        term: i64,
    },
    /// Take a free lease in `expected`, starting a new term.
    Claim {
        expected: i64,
    },
    AcceptHandover {
        term: i64,
    },
    EnsureRow,
    /// Release our lease in `term`, giving up after `within`: a lease that cannot be
    /// released in time lapses by itself.
    Release {
        term: i64,
        within: Duration,
    },
}

/// A statement's answer.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// Renew, accept, release: whether the row changed.
    Done(bool),
    /// Claim, reacquire: the term started (`None`: the row did not change).
    Started(Option<i64>),
    Row(Option<LeaseRow>),
    RowEnsured,
    /// Whether the status was made durable in time.
    Durable(bool),
}

/// What to do, in order.
#[derive(Debug)]
pub(crate) enum Action {
    Send(Statement),
    /// Wait until whoever makes statuses durable (the status file) has made `version`
    /// durable, at most `within`; answered by [`Reply::Durable`] as a statement is.
    AwaitDurable {
        version: u64,
        within: Duration,
    },
    /// Drop the statement in flight unanswered.
    Abandon,
    Publish(Status),
    Event(RoleEvent),
    /// An operator asked this leader to step down: pass the request on to whoever stops
    /// its work (a [`RoleEvent::ResignRequested`]), or warn that nobody can.
    PassOnResign {
        term: i64,
    },
    Report(RoundReport),
    /// A round failed with this error (sent before the status that reports it).
    RoundFailed(StoreError),
    /// Answer every waiting renew request: the new deadline, or `None` once the lease is
    /// lost.
    AnswerRenewals(Option<Instant>),
    /// The election has ended: how the release went (`None`: none was sent).
    Finish(Option<Result<bool, StoreError>>),
}

/// The health of the connection to the database, as rounds find it.
#[derive(Debug, Default, Clone)]
pub(crate) struct Link {
    /// Consecutive failed rounds (0 when the database answers).
    pub(crate) failures: u32,
    /// Whether the last round succeeded, so the store's connection is open.
    pub(crate) connected: bool,
    /// Whether the round trip was last seen thin against the renew margin.
    pub(crate) thin_margin: bool,
    /// The last round's error while rounds keep failing.
    pub(crate) error: Option<String>,
}

/// One node's election, as a state machine.
#[cfg_attr(test, derive(Clone))]
pub(crate) struct Machine {
    pub(crate) settings: Arc<ElectionSettings>,
    /// Marks the terms this election starts, so that it can tell an in-doubt term of its
    /// own from one another process with the same node id started.
    pub(crate) token: ProcessToken,
    pub(super) state: State,
    /// The statement whose answer the machine waits for, and the round it belongs to.
    pub(super) awaiting: Option<Awaiting>,
    /// The round under way, while one is.
    pub(super) round: Option<Round>,
    /// When the next round is due, while none is under way.
    pub(super) due: Instant,
    /// After resigning, no claim or reacquire before this instant, so another node takes
    /// over (a term in doubt through the resign may turn out this node's own).
    pub(super) resigned_until: Option<Instant>,
    pub(super) link: Link,
    /// What was published last.
    pub(super) published: Status,
    /// Hold at most one term (a lock): once held and lost, claim no more.
    pub(super) single_term: bool,
    /// Whether a step-down waits for its status to be durable before it releases (set
    /// once, when something makes statuses durable; without it there is nothing to wait
    /// for).
    pub(crate) release_waits_for_durable: bool,
    /// Whether this node has held the lease in any term.
    pub(super) held_any: bool,
    /// A term in which the table names this node although this process never took it.
    pub(super) foreign_term_warned: Option<i64>,
    pub(super) rounds_completed: u64,
    /// Spreads followers' polls at a lapse; seeded by the simulator, so that a seed
    /// replays the same run.
    pub(crate) rng: SmallRng,
}

impl Machine {
    pub(crate) fn new(settings: Arc<ElectionSettings>, now: Instant) -> Self {
        Machine {
            settings,
            token: ProcessToken::random(),
            state: State::Following {
                in_doubt: None,
                released_in: None,
            },
            awaiting: None,
            round: None,
            due: now,
            resigned_until: None,
            link: Link::default(),
            published: Status::initial(),
            single_term: false,
            release_waits_for_durable: false,
            held_any: false,
            foreign_term_warned: None,
            rounds_completed: 0,
            rng: rand::SeedableRng::from_os_rng(),
        }
    }

    /// The one transition: what `input` at `now` changes, and what to do about it.
    pub(crate) fn step(&mut self, now: Moment, input: Input) -> Vec<Action> {
        let mut actions = Vec::new();
        match input {
            Input::Stop => self.stop(now, &mut actions),
            Input::Look => self.look_at_deadline(now, &mut actions),
            Input::Answer(answer) => self.answer(now, answer, &mut actions),
            Input::Due => match &self.state {
                State::Stopping { held, .. } => self.give_up_in_flight(now, *held, &mut actions),
                _ => self.start_round(now, &mut actions),
            },
            Input::Unsent => {
                if let State::Stopping { held, .. } = &self.state {
                    self.give_up_in_flight(now, *held, &mut actions);
                }
            }
            Input::ReleaseHint => {
                if let State::Following { released_in, .. } = &mut self.state {
                    *released_in = self.published.term;
                }
                self.due = now.at.at;
            }
            Input::RenewRequested => match self.state {
                State::Leading { .. } if self.awaiting.is_none() => self.due = now.at.at,
                // The renewal on its way answers it (or the deadline does).
                State::Leading { .. } => {}
                _ => actions.push(Action::AnswerRenewals(None)),
            },
            Input::Resign(only_term) => {
                let held = self
                    .held(now)
                    .filter(|(term, _)| only_term.is_none_or(|only| only == *term));
                if let Some(held) = held {
                    info!(election = %self.settings.name, node = %self.settings.node_id, term = held.0, "resigning");
                    self.step_down(now, Some(held), false, &mut actions);
                }
            }
        }
        actions
    }

    /// A stopping node gives up the statement in flight (too slow, or never sent) and steps
    /// down with what it held at the stop.
    fn give_up_in_flight(
        &mut self,
        now: Moment,
        held: Option<(i64, Instants)>,
        actions: &mut Vec<Action>,
    ) {
        (self.awaiting, self.round) = (None, None);
        actions.push(Action::Abandon);
        self.step_down(now, held, true, actions);
    }

    /// Whether a lock that held its one term will never claim again.
    pub(crate) fn claims_ended(&self) -> bool {
        self.single_term && self.held_any
    }

    pub(crate) fn is_leading(&self) -> bool {
        matches!(self.state, State::Leading { .. })
    }

    /// The term this node may hold in the database, and where its lease ends locally: a
    /// lapsed hold's has passed already.
    fn held(&self, now: Moment) -> Option<(i64, Instants)> {
        match self.state {
            State::Leading { term, deadline, .. } => Some((term, deadline)),
            State::Lapsed { term, .. } => Some((term, now.at)),
            _ => None,
        }
    }

    /// Where the lease granted by a statement sent at `sent` ends locally.
    pub(crate) fn lease_from(&self, sent: Instants) -> Instants {
        sent.plus(self.settings.ttl - self.settings.safety_margin())
    }

    /// Answers renew requests once a renewal succeeded or the lease is gone; while
    /// renewals fail but the deadline has not passed, they wait for the next attempt.
    fn answer_renewals(&self, actions: &mut Vec<Action>) {
        match self.state {
            State::Leading { deadline, .. } if self.link.failures == 0 => {
                actions.push(Action::AnswerRenewals(Some(deadline.at)))
            }
            State::Leading { .. } => {}
            _ => actions.push(Action::AnswerRenewals(None)),
        }
    }

    /// Sends the statement whose answer `awaiting` waits for (or waits for a durable
    /// status).
    fn send(&mut self, awaiting: Awaiting, actions: &mut Vec<Action>) {
        if let Some(statement) = awaiting.statement(self.round) {
            actions.push(Action::Send(statement));
        }
        self.awaiting = Some(awaiting);
    }

    fn answer(
        &mut self,
        now: Moment,
        answer: Result<Reply, StoreError>,
        actions: &mut Vec<Action>,
    ) {
        let Some(awaiting) = self.awaiting.take() else {
            return;
        };
        match self.state {
            State::SteppingDown { .. } => self.stepping_down(now, awaiting, answer, actions),
            State::Stopping { held, .. } => {
                // The statement may have just taken or kept the row: its term is the one
                // to release.
                let held = match (awaiting.holding(self.round, answer), held) {
                    (Some((term, sent)), _) => Some((term, self.lease_from(sent))),
                    (None, held) => held,
                };
                self.step_down(now, held, true, actions);
            }
            _ => self.round_answered(now, awaiting, answer, actions),
        }
    }
}
