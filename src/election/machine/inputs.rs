//! What the machine takes: its [`Input`]s, where they come from ([`Source`]) and in
//! which order a driver hands them over, and which sources it listens to in each state.

use tokio::time::Instant;

use super::{BOOT_LOOK_EVERY, Machine, Reply, State};
use crate::store::StoreError;

/// What happened.
#[derive(Debug)]
pub(crate) enum Input {
    /// The round timer fired (see [`Machine::next_round`]).
    Due,
    /// The deadline timer fired (see [`Machine::next_look`]).
    Look,
    /// The answer to the statement the machine sent last.
    Answer(Result<Reply, StoreError>),
    /// The statement the machine sent last never left (a stop came first).
    Unsent,
    /// The row's holder released it, or a command woke the row.
    ReleaseHint,
    /// A caller waits for a renewal (the loop keeps the request and answers it when told).
    RenewRequested,
    /// An operator or a health check asks this node to resign, from the given term only.
    Resign(Option<i64>),
    /// The process stops.
    Stop,
}

/// Where a machine's inputs come from. When several have an input at once, every driver
/// (the election loop, the simulator's direct runs and its exhaustive check) hands over
/// the first in [`Source::ORDER`] that the machine listens to ([`Machine::listens_to`]);
/// an input the machine does not listen to waits where it is (in its channel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The process stops ([`Input::Stop`]).
    Stop,
    /// The deadline timer ([`Input::Look`]).
    Look,
    /// A release notification ([`Input::ReleaseHint`]).
    ReleaseHint,
    /// A caller's request to renew now ([`Input::RenewRequested`]).
    RenewRequest,
    /// A request to resign ([`Input::Resign`]).
    Resign,
    /// The answer of the statement in flight ([`Input::Answer`]).
    Answer,
    /// The round timer ([`Input::Due`]).
    Due,
}

impl Source {
    /// The order of the sources when several are ready: the stop first (a stopping node
    /// sends nothing more), then the deadline (a leader stops acting before anything
    /// else), requests, the answer, and the round timer last.
    pub(crate) const ORDER: [Source; 7] = [
        Source::Stop,
        Source::Look,
        Source::ReleaseHint,
        Source::RenewRequest,
        Source::Resign,
        Source::Answer,
        Source::Due,
    ];
}

impl Machine {
    /// Whether the machine takes an input from `source` now (`now`: the driver's
    /// monotonic clock). Requests (a resign, a release hint) wait for the end of a round;
    /// renew requests are refused once the node steps down; the stop is taken once.
    pub(crate) fn listens_to(&self, source: Source, now: Instant) -> bool {
        match source {
            Source::Stop => !self.stopping(),
            Source::Look => self.next_look(now).is_some(),
            Source::ReleaseHint | Source::Resign => self.between_rounds(),
            Source::RenewRequest => self.takes_renew_requests(),
            Source::Answer => self.awaiting.is_some(),
            Source::Due => self.next_round().is_some(),
        }
    }

    /// The first source in [`Source::ORDER`] that the machine listens to and that has an
    /// input now, as `ready` says: what a discrete-event driver hands over next.
    #[cfg(test)]
    pub(crate) fn next_source(
        &self,
        now: Instant,
        mut ready: impl FnMut(Source) -> bool,
    ) -> Option<Source> {
        (Source::ORDER.into_iter()).find(|&source| self.listens_to(source, now) && ready(source))
    }

    /// Whether it waits, stopped, for the answer of a statement in flight.
    pub(crate) fn stopping_in_flight(&self) -> bool {
        matches!(self.state, State::Stopping { .. })
    }

    /// When the loop must step with [`Input::Due`] if nothing else comes first: the next
    /// round, or a stopping node's last wait for a statement in flight. `None` while a
    /// statement is in flight or nothing is left to do.
    pub(crate) fn next_round(&self) -> Option<Instant> {
        match &self.state {
            State::Stopping { give_up, .. } => Some(*give_up),
            State::SteppingDown { .. } | State::Done => None,
            _ if self.awaiting.is_some() => None,
            _ => Some(self.due),
        }
    }

    /// When a leader next looks at its deadline ([`Input::Look`]): at the deadline by the
    /// monotonic clock, and every BOOT_LOOK_EVERY for a suspend of the host, which that
    /// clock misses.
    pub(crate) fn next_look(&self, now: Instant) -> Option<Instant> {
        match self.state {
            State::Leading { deadline, .. } => Some(deadline.at.min(now + BOOT_LOOK_EVERY)),
            _ => None,
        }
    }

    /// Whether the machine takes requests (resign, release hints) now: between rounds,
    /// and not once it steps down.
    pub(crate) fn between_rounds(&self) -> bool {
        self.awaiting.is_none() && self.takes_renew_requests()
    }

    /// Whether renew requests are taken (not while stepping down or stopping).
    pub(crate) fn takes_renew_requests(&self) -> bool {
        !matches!(
            self.state,
            State::SteppingDown { .. } | State::Stopping { .. } | State::Done
        )
    }

    /// Whether it has stopped taking the stop (it is stopping already).
    pub(crate) fn stopping(&self) -> bool {
        matches!(
            self.state,
            State::Stopping { .. }
                | State::Done
                | State::SteppingDown { for_good: true, .. }
                | State::SteppingDown {
                    stop_after: true,
                    ..
                }
        )
    }
}
