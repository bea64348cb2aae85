//! What a finished round means: the new [`State`], what to publish and report, and when
//! the next round is due.

use rand::Rng;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::publish::View;
use super::round::{Outcome, Round, RoundError};
use super::{Action, Machine, Moment, RoundReport, State};
use crate::election::clock::Instants;
use crate::store::LeaseRow;

/// What a round that reached the database says about the link.
struct Reached {
    /// The round trip, if the round ran on a connection that was open already (the
    /// first one after connecting also paid for connecting).
    measured_trip: Duration,
    /// How many rounds in a row had failed before this one.
    failures_before: u32,
}

/// First retry after a failed round; doubles up to one interval.
const RETRY_BASE: Duration = Duration::from_millis(50);
/// The soonest a follower polls again when it expects a lease to come free.
const MIN_POLL: Duration = Duration::from_millis(2);

impl Machine {
    /// Folds a finished round in, reports it, and passes on what the row asks of a leader.
    pub(super) fn finish_round(
        &mut self,
        now: Moment,
        round: Round,
        result: Result<(Outcome, Duration), RoundError>,
        actions: &mut Vec<Action>,
    ) {
        self.round = None;
        let mut report = RoundReport {
            statements: round.statements,
            ..RoundReport::default()
        };
        match &result {
            Err(RoundError { error, .. }) => report.error_kind = Some(error.kind()),
            Ok((outcome, round_trip)) => {
                if self.link.connected && self.link.failures == 0 {
                    report.round_trip = Some(*round_trip);
                }
                match (outcome, &self.state) {
                    (
                        Outcome::Holding { term, .. },
                        State::Leading {
                            term: led,
                            deadline,
                            ..
                        },
                    ) if term == led => report.renewal_margin = Some(deadline.left(now.at)),
                    (Outcome::Observed(Some(row)), _) => {
                        report.clock_offset_us = row.clock_offset_us
                    }
                    _ => {}
                }
            }
        }
        self.due = self.fold(now, round, result, actions);
        self.rounds_completed += 1;
        report.completed = self.rounds_completed;
        actions.push(Action::Report(report));
        // An operator asked this leader to step down: through the step-down sequence of
        // whoever consumes the events (leader work stopped, on_demoted), which then
        // resigns through the resign handle.
        if let State::Leading {
            term,
            seen,
            ref mut resign_passed_on,
            ..
        } = self.state
        {
            if seen.resign && !*resign_passed_on {
                *resign_passed_on = true;
                actions.push(Action::PassOnResign { term });
            }
        }
        self.answer_renewals(actions);
    }

    /// The new state after a round; returns when the next round is due.
    fn fold(
        &mut self,
        now: Moment,
        round: Round,
        result: Result<(Outcome, Duration), RoundError>,
        actions: &mut Vec<Action>,
    ) -> Instant {
        let (outcome, round_trip) = match result {
            Ok(ok) => ok,
            Err(error) => return self.fold_failure(now, error, actions),
        };
        let reached = self.fold_link_reached(round_trip);
        match outcome {
            Outcome::Holding { term, sent } => {
                self.fold_holding(now, round, term, sent, reached, actions)
            }
            Outcome::NotHeld => self.fold_not_held(now, actions),
            Outcome::Observed(row) => self.fold_observed(now, round, row, reached, actions),
        }
    }

    /// A failed round: the term a lost claim or reacquire may have started is in doubt,
    /// and the next round waits the failures' backoff.
    fn fold_failure(
        &mut self,
        now: Moment,
        RoundError { error, in_doubt }: RoundError,
        actions: &mut Vec<Action>,
    ) -> Instant {
        if let Some(term) = in_doubt {
            match &mut self.state {
                State::Following { in_doubt, .. } | State::Lapsed { in_doubt, .. } => {
                    *in_doubt = Some(term)
                }
                _ => {}
            }
        }
        let settings = &self.settings;
        let link = &mut self.link;
        link.failures += 1;
        link.connected = false;
        link.error = Some(error.to_string());
        if link.failures == 1 {
            warn!(%error, kind = error.kind(), election = %settings.name, "database round failed; retrying");
        } else {
            debug!(%error, failures = link.failures, "database round failed again");
        }
        let backoff = retry_backoff(link.failures, settings.poll);
        // Before the status that reports it: whoever sees that finds the error.
        actions.push(Action::RoundFailed(error));
        if !self.is_leading() {
            let term = self.published.term;
            self.publish(now, View::unknown(term), actions);
        }
        now.at.at + backoff
    }

    /// The database answered the round: the link is up again. What the round measured of
    /// the database, and how many rounds had failed before it.
    fn fold_link_reached(&mut self, round_trip: Duration) -> Reached {
        debug!(round_trip_us = round_trip.as_micros() as u64, "round");
        // The first round after (re)connecting also paid for connecting.
        let measured_trip = match self.link.failures == 0 && self.link.connected {
            true => round_trip,
            false => Duration::ZERO,
        };
        let failures_before = self.link.failures;
        if self.link.failures > 0 {
            info!(failures = self.link.failures, election = %self.settings.name, "database reachable again");
            self.link.failures = 0;
        } else if self.link.connected {
            // Only a round on an open connection measures the database: the first one
            // after (re)connecting also paid for connecting and migrating.
            self.check_round_trip(round_trip);
        }
        self.link.connected = true;
        self.link.error = None;
        Reached {
            measured_trip,
            failures_before,
        }
    }

    /// A claim, reacquire or renewal that holds the row in `term`, sent at `sent`: leads,
    /// unless the answer came too late to act on.
    fn fold_holding(
        &mut self,
        now: Moment,
        round: Round,
        term: i64,
        sent: Instants,
        reached: Reached,
        actions: &mut Vec<Action>,
    ) -> Instant {
        let at = now.at.at;
        let deadline = self.lease_from(sent);
        self.held_any = true;
        self.state = match self.state {
            // A renewal that came back after we stopped acting does not restore
            // leadership in the same term.
            State::Lapsed { term: lapsed, .. } if lapsed == term => State::Lapsed {
                term,
                in_doubt: None,
            },
            // Too late by either clock: an answer that arrives after the host
            // slept is no fresher than its sending.
            _ if deadline.passed(now.at) => State::Lapsed {
                term,
                in_doubt: None,
            },
            // What the round's renewals stated (nothing, in a new term).
            _ => State::Leading {
                term,
                deadline,
                seen: round.seen,
                resign_passed_on: match self.state {
                    State::Leading {
                        term: led,
                        resign_passed_on,
                        ..
                    } => led == term && resign_passed_on,
                    _ => false,
                },
            },
        };
        self.published.paused = round.seen.paused;
        match self.state {
            State::Leading { .. } => {
                let view = View::leader(&self.settings.node_id, term);
                self.publish(now, view, actions);
                (round.started.at + self.settings.interval).max(at)
            }
            // The answer came too late to act on (the deadline timer may not have
            // fired yet): stop acting now, and start a new term at once rather
            // than leave the row idle.
            _ => {
                self.publish(now, View::unknown(Some(term)), actions);
                self.at_once_unless_failing(at, reached.failures_before)
            }
        }
    }

    /// A renewal refused, and the row read shows the lease is not ours any more.
    fn fold_not_held(&mut self, now: Moment, actions: &mut Vec<Action>) -> Instant {
        if let State::Leading { term, .. } = self.state {
            warn!(
                election = %self.settings.name,
                node = %self.settings.node_id,
                term,
                "the database refused the renewal: the lease is no longer ours"
            );
        }
        self.state = State::Following {
            in_doubt: None,
            released_in: None,
        };
        let term = self.published.term;
        self.publish(now, View::unknown(term), actions);
        now.at.at
    }

    /// A round that read the row and took nothing: follows, or holds a lapsed term of its
    /// own to reacquire; publishes who leads; polls again when the lease may come free.
    fn fold_observed(
        &mut self,
        now: Moment,
        round: Round,
        row: Option<LeaseRow>,
        reached: Reached,
        actions: &mut Vec<Action>,
    ) -> Instant {
        let settings = std::sync::Arc::clone(&self.settings);
        let at = now.at.at;
        let me = settings.node_id.as_str();
        let (held, in_doubt) = match self.state {
            State::Lapsed { term, in_doubt } => (Some(term), in_doubt),
            State::Following { in_doubt, .. } => (None, in_doubt),
            _ => (None, None),
        };
        // The row's term is ours if this node led in it, or if a claim or
        // reacquire of ours on top of an earlier term may have started it (its
        // answer was lost) and the row shows this election's token for it: the node
        // id alone cannot tell, another process may run with the same one. Both are
        // checked against the row, so the in-doubt term wins over the one led before.
        let ours = row.as_ref().filter(|r| {
            r.holder.as_deref() == Some(me)
                && (held == Some(r.term)
                    || (in_doubt.is_some_and(|below| r.term > below) && r.started_by(self.token)))
        });
        self.state = match ours {
            Some(r) => State::Lapsed {
                term: r.term,
                in_doubt: None,
            },
            None => State::Following {
                in_doubt: None,
                released_in: None,
            },
        };
        let leader = row
            .as_ref()
            .and_then(|r| r.live_holder())
            .map(str::to_owned);
        let term = row.as_ref().map(|r| r.term);
        self.published.paused = row.as_ref().is_some_and(|r| r.paused());
        let lapse = leader
            .as_ref()
            .and(row.as_ref())
            .map(|r| at + r.remaining());
        if leader.as_deref() == Some(me) && ours.is_none() && self.foreign_term_warned != term {
            warn!(
                election = %settings.name,
                node = me,
                term,
                "the table names this node as leader in a term this process did not take; \
                 is another process running with the same node id? waiting for that lease to lapse"
            );
            self.foreign_term_warned = term;
        }
        self.publish(now, View::follower(leader, term, lapse), actions);
        self.next_poll_after_reading(now, round, row.as_ref(), reached)
    }

    /// When a round that read `row` and took nothing is followed by the next.
    fn next_poll_after_reading(
        &mut self,
        now: Moment,
        round: Round,
        row: Option<&LeaseRow>,
        reached: Reached,
    ) -> Instant {
        let settings = std::sync::Arc::clone(&self.settings);
        let (at, me) = (now.at.at, settings.node_id.as_str());
        let next_poll = (round.started.at + settings.poll).max(at);
        match (&self.state, row) {
            _ if !round.may_claim => next_poll,
            // Start the next term at once, unless the row says the reacquire
            // would be refused (a pause over a lapsed lease, a resign or a
            // handover away from this node): then wait as a follower does.
            (State::Lapsed { term, .. }, Some(row)) if row.reacquirable_by(me, *term) => {
                self.at_once_unless_failing(at, reached.failures_before)
            }
            // Poll again right when the lease can be claimed (spread a little):
            // when it lapses, and a pause or another node's handover window is
            // over, if that is before the next regular poll. Not capped by the
            // regular poll: that would keep the smallest spread drawn so far, and
            // every follower would end up reading at the lapse instant again.
            (_, Some(row)) => {
                let lapse = at + row.claimable_in(me).max(MIN_POLL);
                match lapse < next_poll {
                    true => {
                        let spread = settings.lapse_spread_after(reached.measured_trip);
                        lapse + self.rng.random_range(Duration::ZERO..=spread)
                    }
                    false => next_poll,
                }
            }
            (_, None) => at + MIN_POLL,
        }
    }

    /// When to start the next term after a lapse: at once, unless the round before this one
    /// failed. Then the failures still count, and the reacquire waits their backoff: a
    /// reacquire whose answer is lost (in doubt), then refused and read back as this
    /// node's, would otherwise loop every retry pause with three statements a time, the
    /// count starting afresh at each good answer (direct seed 59352).
    fn at_once_unless_failing(&mut self, at: Instant, failures_before: u32) -> Instant {
        if failures_before == 0 {
            return at;
        }
        self.link.failures = failures_before;
        at + retry_backoff(failures_before, self.settings.poll)
    }

    /// Warns when round trips eat into the margin a leader has to renew.
    fn check_round_trip(&mut self, round_trip: Duration) {
        let margin = self.settings.renew_margin();
        if !self.link.thin_margin && round_trip > margin / 2 {
            self.link.thin_margin = true;
            warn!(
                round_trip_ms = round_trip.as_millis() as u64,
                margin_ms = margin.as_millis() as u64,
                "database round trip is more than half the margin between election.ttl and \
                 election.interval; a slow renewal will cost leadership: raise election.ttl"
            );
        } else if self.link.thin_margin && round_trip < margin / 4 {
            self.link.thin_margin = false;
            info!(
                round_trip_ms = round_trip.as_millis() as u64,
                "database round trip back well inside the renew margin"
            );
        }
    }
}

/// The pause before the next round after `failures` failed ones in a row: from
/// `RETRY_BASE`, doubling, at most `poll`.
fn retry_backoff(failures: u32, poll: Duration) -> Duration {
    RETRY_BASE
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(poll)
}
