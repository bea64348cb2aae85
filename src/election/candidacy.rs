//! The state machine of one node's candidacy: what it holds ([`Hold`]), how each round's
//! outcome changes that, when the next round is due, and when a leader's deadline passes.
//! It sends nothing to the store itself: rounds do (see `round.rs`), and it folds in their
//! outcomes. What it publishes is in `publish.rs`.

use rand::Rng;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::clock::{BootClock, Instants};
use super::hold::Hold;
use super::round::{Outcome, RoundError};
use super::settings::ElectionSettings;
use super::status::{Role, RoleEvent, RoundObserver, RoundReport, Status};
use crate::store::{Commands, ProcessToken, StoreError};

/// A request to renew at once, answered with the new lease deadline, or `None` once the
/// lease is lost.
pub(super) type RenewRequest = oneshot::Sender<Option<Instant>>;

/// How often a leader looks at CLOCK_BOOTTIME for its deadline: its timers would not
/// notice that the host slept.
pub(super) const BOOT_LOOK_EVERY: Duration = Duration::from_millis(100);

/// First retry after a failed round; doubles up to one interval.
const RETRY_BASE: Duration = Duration::from_millis(50);
/// The soonest a follower polls again when it expects a lease to come free.
const MIN_POLL: Duration = Duration::from_millis(2);

/// This node's candidacy: what it holds, what it last published, and what it waits for.
/// The loop ([`Election::run`](super::Election::run)) owns it apart from the store, so that each can be borrowed
/// on its own; [`Candidacy::apply`] folds each round's outcome into it.
/// The decisions, apart from the store so the loop can borrow each on its own.
pub(super) struct Candidacy {
    pub(super) settings: Arc<ElectionSettings>,
    /// CLOCK_BOOTTIME, or a stand-in in tests.
    pub(super) boot: BootClock,
    pub(super) hold: Hold,
    pub(super) status: watch::Sender<Status>,
    /// Consecutive failed rounds (0 when the database answers).
    pub(super) failures: u32,
    /// Whether the last round succeeded, so the store's connection is open.
    pub(super) connected: bool,
    /// Whether the round trip was last seen thin against the renew margin.
    pub(super) thin_margin: bool,
    /// A term this node may hold: its claim failed on the way back, so it may have committed.
    pub(super) in_doubt: Option<i64>,
    /// Marks the terms this election starts, so that it can tell an in-doubt term of its
    /// own from one another process with the same node id started.
    pub(super) token: ProcessToken,
    /// A term in which the table names this node although this process never took it.
    pub(super) foreign_term_warned: Option<i64>,
    /// Where role changes go, if anyone listens.
    pub(super) events: Option<mpsc::UnboundedSender<RoleEvent>>,
    /// Where the errors of failed rounds go, if anyone listens (the status carries only
    /// their text).
    pub(super) round_errors: Option<mpsc::UnboundedSender<StoreError>>,
    /// After resigning, do not claim before this instant, so another node takes over.
    pub(super) no_claim_until: Option<Instant>,
    /// Whether this node has held the lease in any term.
    pub(super) held_any: bool,
    /// When another node's lease lapses, as of the last read.
    pub(super) observed_lapse: Option<Instant>,
    /// The term a release notification announced (the last one seen), for the next round.
    pub(super) released_in: Option<i64>,
    /// The last round's error while rounds keep failing.
    pub(super) error: Option<String>,
    /// Renew requests waiting for a successful renewal or the loss of the lease.
    pub(super) renewals: Vec<RenewRequest>,
    pub(super) observers: Vec<RoundObserver>,
    pub(super) rounds_completed: u64,
    /// Statements the round being applied sent.
    pub(super) round_statements: u64,
    /// The operator commands this node has seen on its row while leading (its renewals
    /// state them).
    pub(super) seen: Commands,
    /// Whether the election is paused, as of the last round.
    pub(super) paused: bool,
    /// The term whose resign request was last passed on, so it is passed on once.
    pub(super) resign_passed_on: Option<i64>,
    /// Spreads followers' polls at a lapse; seeded by the simulator, so that a seed
    /// replays the same run.
    pub(super) rng: rand::rngs::SmallRng,
}

impl Candidacy {
    pub(super) fn is_leading(&self) -> bool {
        matches!(self.hold, Hold::Leading { .. })
    }

    /// When a leader next looks at its deadline: at the deadline by the monotonic clock,
    /// and every BOOT_LOOK_EVERY for a suspend of the host, which that clock misses.
    pub(super) fn next_look(&self) -> Instant {
        match self.hold {
            Hold::Leading { deadline, .. } => deadline.at.min(Instant::now() + BOOT_LOOK_EVERY),
            // Never awaited: the select! branch is disabled unless leading.
            _ => Instant::now() + Duration::from_secs(3600),
        }
    }

    /// Stops acting as leader if the deadline has passed by either clock.
    pub(super) fn look_at_deadline(&mut self) {
        if let Hold::Leading { deadline, .. } = self.hold {
            if deadline.passed(Instants::now(&self.boot)) {
                self.deadline_passed();
            }
        }
    }

    /// The term this node may hold in the database, and where its lease ends locally: a
    /// lapsed hold's has passed already.
    pub(super) fn held(&self) -> Option<(i64, Instants)> {
        let term = self.hold.term()?;
        let end = match self.hold {
            Hold::Leading { deadline, .. } => deadline,
            _ => Instants::now(&self.boot),
        };
        Some((term, end))
    }

    /// Where the lease granted by a statement sent at `sent` ends locally.
    pub(super) fn lease_from(&self, sent: Instants) -> Instants {
        sent.plus(self.settings.ttl - self.settings.safety_margin())
    }

    /// Answers renew requests once a renewal succeeded or the lease is gone; while
    /// renewals fail but the deadline has not passed, they wait for the next attempt.
    pub(super) fn answer_renewals(&mut self) {
        let answer = match self.hold {
            Hold::Leading { deadline, .. } if self.failures == 0 => Some(deadline.at),
            Hold::Leading { .. } => return,
            _ => None,
        };
        for request in self.renewals.drain(..) {
            let _ = request.send(answer);
        }
    }

    pub(super) fn answer_renewals_if_lost(&mut self) {
        if !self.is_leading() {
            self.answer_renewals();
        }
    }

    pub(super) fn deadline_passed(&mut self) {
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
    pub(super) fn stop_acting(&mut self) {
        if let Hold::Leading { term, .. } = self.hold {
            self.hold = Hold::Lapsed { term };
        }
        let term = self.status.borrow().term;
        self.publish(Role::Unknown, None, term);
    }

    /// Folds one round's result into the state and reports it to the observers; returns
    /// when the next round is due.
    pub(super) fn apply(
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
    pub(super) fn fold(
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
                // Before the status that reports it: whoever sees that finds the error.
                if let Some(errors) = &self.round_errors {
                    let _ = errors.send(error);
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
                self.paused = self.seen.paused;
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
                self.paused = row.as_ref().is_some_and(|r| r.paused());
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
                    // Start the next term at once, unless the row says the reacquire
                    // would be refused (a pause over a lapsed lease, a resign or a
                    // handover away from this node): then wait as a follower does.
                    (Hold::Lapsed { term }, Some(row)) if row.reacquirable_by(me, *term) => now,
                    // Poll again right when the lease can be claimed (spread a little):
                    // when it lapses, and a pause or another node's handover window is
                    // over, if that is before the next regular poll. Not capped by the
                    // regular poll: that would keep the smallest spread drawn so far, and
                    // every follower would end up reading at the lapse instant again.
                    (_, Some(row)) => {
                        let lapse = now + row.claimable_in(me).max(MIN_POLL);
                        match lapse < next_poll {
                            true => {
                                let spread = settings.lapse_spread_after(measured_trip);
                                lapse + self.rng.random_range(Duration::ZERO..=spread)
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
    pub(super) fn check_round_trip(&mut self, round_trip: Duration) {
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
}
