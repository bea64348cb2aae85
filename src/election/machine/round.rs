//! A round's way through its statements: renew if leading, else claim a free lease, else
//! observe. The first statement is the only one in steady state (a renewal for the leader,
//! a read for a follower). The machine keeps the [`Round`] under way (when it started,
//! whether it may claim, what it sent) and [`Awaiting`], the statement whose answer it
//! waits for with what the round has learnt so far; when the round is over, `fold.rs`
//! takes its [`Outcome`].

use std::time::Duration;
use tracing::info;

use super::{Action, Machine, Moment, Reply, State, Statement};
use crate::election::clock::Instants;
use crate::store::{Commands, LeaseRow, StoreError};

/// The round under way: when it started, whether it may claim, and what it sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::election) struct Round {
    pub(super) started: Instants,
    /// Whether this node may take the lease in this round (the gates are asked again right
    /// before each claim: a stop may come between a read and it).
    pub(super) may_claim: bool,
    /// Statements sent, for [`RoundReport::statements`](crate::election::RoundReport::statements).
    pub(super) statements: u64,
    /// The operator commands the round's renewals state: the leader's, and those read
    /// when a renewal was refused (a new term starts with nothing seen).
    pub(super) seen: Commands,
}

/// The statement whose answer the machine waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::election) enum Awaiting {
    /// A leader's renewal in `term`. `retry`: the second one, after a read, stating the
    /// commands read (`seen`) and the round trip of the first.
    Renewal {
        term: i64,
        retry: Option<(Commands, Duration)>,
    },
    /// A leader's read after its renewal was refused.
    OwnRow {
        term: i64,
        round_trip: Duration,
    },
    /// A lapsed leader starting a new term on its own row, held in `term`.
    Reacquire {
        term: i64,
    },
    /// A claim in `expected`, sent at `sent`. `round_trip`: of the read before it, if any
    /// (a claim of a term whose release was announced reads nothing first).
    Claim {
        expected: i64,
        sent: Instants,
        round_trip: Option<Duration>,
    },
    Read,
    /// Accepting a handover of `term` offered to this node, after reading `row`.
    Accept {
        term: i64,
        row: Option<LeaseRow>,
        round_trip: Duration,
    },
    /// Creating the missing row, then claiming it in term 0.
    EnsureRow {
        round_trip: Duration,
    },
    /// A read after another node won the claim.
    Winner {
        round_trip: Duration,
    },
    /// Stepping down: the status durable, then the release of `term`.
    Durable,
    Release {
        term: i64,
    },
}

/// What a finished round found.
#[derive(Debug)]
pub(super) enum Outcome {
    /// The database holds the lease for this node in `term`, from a statement sent at `sent`.
    Holding { term: i64, sent: Instants },
    /// Someone else holds the lease, or nobody does and this node could not take it.
    Observed(Option<LeaseRow>),
    /// The database refused to renew: the lease is not ours (any more) in the term we led.
    NotHeld,
}

/// A failed round, with the term on top of which it may have started one: a claim whose
/// answer was lost may still have committed.
#[derive(Debug)]
pub(super) struct RoundError {
    pub(super) error: StoreError,
    pub(super) in_doubt: Option<i64>,
}

impl Awaiting {
    /// The statement whose answer this awaits, derived from it so that the two are never
    /// set apart; `round`: the round it belongs to (a renewal states what the round has
    /// seen). `None` for the wait on a durable status, which is an action.
    pub(super) fn statement(&self, round: Option<Round>) -> Option<Statement> {
        Some(match *self {
            Awaiting::Renewal { term, retry } => {
                let seen = retry.map_or_else(
                    || round.map(|r| r.seen).unwrap_or_default(),
                    |(seen, _)| seen,
                );
                Statement::Renew { term, seen }
            }
            Awaiting::OwnRow { .. } | Awaiting::Read | Awaiting::Winner { .. } => Statement::Read,
            Awaiting::Reacquire { term } => Statement::Reacquire { term },
            Awaiting::Claim { expected, .. } => Statement::Claim { expected },
            Awaiting::Accept { term, .. } => Statement::AcceptHandover { term },
            Awaiting::EnsureRow { .. } => Statement::EnsureRow,
            Awaiting::Release { term } => Statement::Release {
                term,
                within: super::RELEASE_WITHIN,
            },
            Awaiting::Durable => return None,
        })
    }

    /// The term this answer holds the row in, and when its statement was sent, if it took
    /// or kept the row.
    pub(super) fn holding(
        &self,
        round: Option<Round>,
        answer: Result<Reply, StoreError>,
    ) -> Option<(i64, Instants)> {
        let started = round.map(|round| round.started)?;
        match (self, answer) {
            (Awaiting::Renewal { term, .. }, Ok(Reply::Done(true))) => Some((*term, started)),
            (Awaiting::Reacquire { .. }, Ok(Reply::Started(Some(term)))) => Some((term, started)),
            (Awaiting::Claim { sent, .. }, Ok(Reply::Started(Some(term)))) => Some((term, *sent)),
            _ => None,
        }
    }

    /// The term on top of which a failed statement may have started one.
    fn in_doubt(&self) -> Option<i64> {
        match self {
            Awaiting::Reacquire { term, .. } => Some(*term),
            Awaiting::Claim { expected, .. } => Some(*expected),
            _ => None,
        }
    }
}

/// Where a round goes after an answer: its next statement, or its end.
enum Next {
    Send(Awaiting),
    Finish(Outcome, Duration),
}

/// A leader's renewal answered. Renewed: it holds. Refused: the lease is no longer ours,
/// or an operator command changed (a pause, a resign or handover request); only a read
/// tells, and it costs a statement only when something changed.
fn renewal_answered(
    round: &mut Round,
    term: i64,
    retry: Option<(Commands, Duration)>,
    renewed: bool,
    elapsed: Duration,
) -> Next {
    let sent = round.started;
    match (renewed, retry) {
        (true, None) => Next::Finish(Outcome::Holding { term, sent }, elapsed),
        (true, Some((now_seen, round_trip))) => {
            round.seen = now_seen;
            Next::Finish(Outcome::Holding { term, sent }, round_trip)
        }
        (false, None) => {
            let next = Awaiting::OwnRow {
                term,
                round_trip: elapsed,
            };
            Next::Send(next)
        }
        (false, Some((_, round_trip))) => Next::Finish(Outcome::NotHeld, round_trip),
    }
}

impl Machine {
    /// Starts a round with its first statement.
    pub(super) fn start_round(&mut self, now: Moment, actions: &mut Vec<Action>) {
        let resigned = self.resigned_until.is_some_and(|until| now.at.at < until);
        let seen = match self.state {
            State::Leading { seen, .. } => seen,
            _ => Commands::default(),
        };
        let mut round = Round {
            started: now.at,
            may_claim: now.claims_open && !self.claims_ended() && !resigned,
            statements: 0,
            seen,
        };
        let released_in = match &mut self.state {
            State::Following { released_in, .. } => released_in.take(),
            _ => None,
        };
        let awaiting = match self.state {
            State::Leading { term, .. } => Awaiting::Renewal { term, retry: None },
            State::Lapsed { term, .. } if round.may_claim => Awaiting::Reacquire { term },
            // The claim checks the term and that the lease is free, so a stale term only
            // costs the read after it.
            State::Following { .. } if round.may_claim && released_in.is_some() => {
                Awaiting::Claim {
                    expected: released_in.unwrap_or_default(),
                    sent: now.at,
                    round_trip: None,
                }
            }
            _ => Awaiting::Read,
        };
        round.statements = 1;
        self.round = Some(round);
        self.send(awaiting, actions);
    }

    /// Takes a round's statement's answer: sends the next statement, or folds the outcome.
    pub(super) fn round_answered(
        &mut self,
        now: Moment,
        awaiting: Awaiting,
        answer: Result<Reply, StoreError>,
        actions: &mut Vec<Action>,
    ) {
        let Some(mut round) = self.round else {
            return;
        };
        let elapsed = now.at.at.saturating_duration_since(round.started.at);
        let reply = match answer {
            Ok(reply) => reply,
            Err(error) => {
                let in_doubt = awaiting.in_doubt();
                return self.finish_round(now, round, Err(RoundError { error, in_doubt }), actions);
            }
        };
        let next = match (awaiting, reply) {
            (Awaiting::Renewal { term, retry }, Reply::Done(renewed)) => {
                renewal_answered(&mut round, term, retry, renewed, elapsed)
            }
            (Awaiting::OwnRow { term, round_trip }, Reply::Row(row)) => {
                self.own_row_read(term, round_trip, row)
            }
            (Awaiting::Reacquire { .. }, Reply::Started(Some(term))) => {
                let sent = round.started;
                Next::Finish(Outcome::Holding { term, sent }, elapsed)
            }
            (
                Awaiting::Claim {
                    sent, round_trip, ..
                },
                Reply::Started(Some(term)),
            ) => Next::Finish(
                Outcome::Holding { term, sent },
                round_trip.unwrap_or(elapsed),
            ),
            // Another node was faster; see who.
            (
                Awaiting::Claim {
                    round_trip: Some(round_trip),
                    ..
                },
                Reply::Started(None),
            ) => Next::Send(Awaiting::Winner { round_trip }),
            (Awaiting::Reacquire { .. } | Awaiting::Claim { .. }, Reply::Started(None)) => {
                Next::Send(Awaiting::Read)
            }
            (Awaiting::Read, Reply::Row(row)) => self.row_read(now, round, row, elapsed),
            (
                Awaiting::Accept {
                    row, round_trip, ..
                },
                Reply::Done(accepted),
            ) => {
                if accepted {
                    let term = row.as_ref().map(|r| r.term);
                    info!(election = %self.settings.name, node = %self.settings.node_id, term, "accepted the handover offered to this node");
                }
                self.claim_if_free(now, round, row, round_trip)
            }
            // The gates again: a stop may have closed them while the row was made.
            (Awaiting::EnsureRow { round_trip }, _) if !(round.may_claim && now.claims_open) => {
                Next::Finish(Outcome::Observed(None), round_trip)
            }
            (Awaiting::EnsureRow { round_trip }, _) => {
                let next = Awaiting::Claim {
                    expected: 0,
                    sent: now.at,
                    round_trip: Some(round_trip),
                };
                Next::Send(next)
            }
            (Awaiting::Winner { round_trip }, Reply::Row(row)) => {
                Next::Finish(Outcome::Observed(row), round_trip)
            }
            (awaiting, reply) => unreachable!("{reply:?} does not answer {awaiting:?}"),
        };
        match next {
            Next::Send(awaiting) => self.send_next(round, awaiting, actions),
            Next::Finish(outcome, round_trip) => {
                self.finish_round(now, round, Ok((outcome, round_trip)), actions)
            }
        }
    }

    /// A leader's read after its renewal was refused: renews again stating what is
    /// pending now, if the lease is still ours in this term.
    fn own_row_read(&self, term: i64, round_trip: Duration, row: Option<LeaseRow>) -> Next {
        let me = self.settings.node_id.as_str();
        let ours = row.filter(|r| {
            r.holder.as_deref() == Some(me) && r.term == term && r.live_holder().is_some()
        });
        let Some(row) = ours else {
            return Next::Finish(Outcome::NotHeld, round_trip);
        };
        // The same guarded renewal, stating what is pending now: it still extends
        // only a live lease of ours in this term. The deadline still counts from
        // the first statement's sending, which is earlier. Also when the commands
        // read are the ones the leader knew: one that came and went between the
        // two statements (a short pause, a pause then a resume) refused the first.
        let seen = row.commands();
        let next = Awaiting::Renewal {
            term,
            retry: Some((seen, round_trip)),
        };
        Next::Send(next)
    }

    /// A follower's read: accepts a handover offered to it, or claims a free lease.
    fn row_read(
        &self,
        now: Moment,
        round: Round,
        row: Option<LeaseRow>,
        elapsed: Duration,
    ) -> Next {
        // A handover offered to this node: accepting it asks the leader to step
        // down, and proves to the operator that this node runs and could lead (a
        // node that could not, whose gates are closed, never accepts).
        let me = self.settings.node_id.as_str();
        let may_claim = round.may_claim && now.claims_open;
        let offered = row.as_ref().filter(|r| r.offered_to(me) && may_claim);
        if let Some(term) = offered.map(|r| r.term) {
            let next = Awaiting::Accept {
                term,
                row,
                round_trip: elapsed,
            };
            return Next::Send(next);
        }
        self.claim_if_free(now, round, row, elapsed)
    }

    /// After a read: claims the lease if it is free and this node may, else observes.
    fn claim_if_free(
        &self,
        now: Moment,
        round: Round,
        row: Option<LeaseRow>,
        round_trip: Duration,
    ) -> Next {
        let me = self.settings.node_id.as_str();
        let expected = match &row {
            _ if !(round.may_claim && now.claims_open) => None,
            None => return Next::Send(Awaiting::EnsureRow { round_trip }),
            // A pause, or a handover to another node, keeps a free lease from this node:
            // the claim would check the same, at the cost of a statement.
            Some(row) if row.paused() || row.handed_over_away_from(me) => None,
            Some(row) if row.live_holder().is_none() => Some(row.term),
            Some(_) => None,
        };
        match expected {
            Some(expected) => {
                let next = Awaiting::Claim {
                    expected,
                    sent: now.at,
                    round_trip: Some(round_trip),
                };
                Next::Send(next)
            }
            None => Next::Finish(Outcome::Observed(row), round_trip),
        }
    }

    /// Sends the round's next statement, counting it.
    fn send_next(&mut self, mut round: Round, awaiting: Awaiting, actions: &mut Vec<Action>) {
        round.statements += 1;
        self.round = Some(round);
        self.send(awaiting, actions);
    }
}
