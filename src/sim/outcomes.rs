//! The outcome properties of the tokio-driven runs (issue 27 §4): what a command or a stop
//! achieves, not only that it breaks nothing. 20: a resign hands the lead to another
//! candidate; 22: an election leads again after a pause ends; 23: preemption waits its
//! `preempt_after`; 24: a clean stop of the leader hands over at once when releases
//! notify. (Property 8, the handover's outcome, is judged with [`World::disturbed_for`].)

use std::time::Duration;
use tokio::time::Instant;

use super::outcome_state::Stop;
use super::schedule::Fault;
use super::world::{ELECTION, LIVENESS_SLACK, State, World, fail};
use crate::election::Role;
use crate::operator::StepDownOutcome;

/// How soon after a stopping leader's release another candidate leads when releases
/// notify: the claim is two statements of a millisecond or less once the notification
/// wakes the followers; a follower that only polls would take up to an interval (0.5 s
/// at least in the simulator).
pub(super) const NOTIFIED_TAKEOVER: Duration = Duration::from_millis(100);

impl World {
    /// The driver started a process (hook in `sim/mod.rs`): the last one in the world's
    /// list.
    pub(super) fn outcome_started(&self) {
        let mut state = self.state.lock().unwrap();
        let index = state.processes.len() - 1;
        let started = &mut state.outcomes.started;
        started.resize(index + 1, None);
        started[index] = Some(Instant::now());
    }

    /// Whether an event other than `except` that could change a handover's outcome from
    /// `old` to `to` was under way (or settling) at some instant of `from..until`: one on
    /// the database, an operator's command, a priority change, or a fault of `old` or
    /// `to`. A fault of a third node cannot: during the handover's window only its target
    /// may claim.
    pub(super) fn disturbed_for(
        &self,
        from: Instant,
        until: Instant,
        except: usize,
        [old, to]: [Option<&str>; 2],
    ) -> bool {
        let settle = self.settle();
        // The operators' connection (`failures::OPERATOR`) is no node: its faults count
        // as the database's.
        let id = |node: usize| self.scenario.nodes.get(node).map(|n| n.id.as_str());
        self.scenario.events.iter().enumerate().any(|(i, e)| {
            let on = match e.fault {
                Fault::SlowStatements { node, .. }
                | Fault::LostAnswers { node, .. }
                | Fault::FailedStatements { node, .. }
                | Fault::Freeze { node }
                | Fault::Suspend { node }
                | Fault::Crash { node, .. }
                | Fault::Twin { node }
                | Fault::Stop { node, .. }
                | Fault::StopDuringReload { node, .. }
                | Fault::SlowStatusFile { node, .. }
                | Fault::Unhealthy { node } => Some(node),
                _ => None,
            };
            i != except
                && on.is_none_or(|node| id(node).is_none() || id(node) == old || id(node) == to)
                && self.start + e.from < until
                && self.start + e.until + settle > from
        })
    }

    /// Property 20, at the end of a `leaderd resign` asked at `asked_at` of `old`:
    /// unless nothing else could lead or another event interfered, another live, healthy
    /// candidate leads within interval (the leader sees the request at its next renewal),
    /// plus the old leader's step-down, plus interval (a follower's poll), plus 1 s; the old
    /// leader does not take the lead back (`resigned_until`: one ttl after its release).
    pub(super) fn check_resign_outcome(
        &self,
        event: usize,
        asked_at: Instant,
        old: &str,
        outcome: &StepDownOutcome,
    ) {
        let now = Instant::now();
        let Some(old_node) = self.scenario.nodes.iter().position(|n| n.id == old) else {
            return;
        };
        if self.disturbed(asked_at - self.scenario.ttl, now, Some(event)) {
            return;
        }
        let interval = self.scenario.interval;
        let bound = interval * 2 + self.scenario.nodes[old_node].step_down + LIVENESS_SLACK;
        let mut state = self.state.lock().unwrap();
        let other_could_lead = state.truth.iter().enumerate().any(|(n, t)| {
            n != old_node
                && t.eligible_since
                    .is_some_and(|since| since + interval <= asked_at)
        });
        if !other_could_lead {
            return;
        }
        let wrong = match outcome {
            StepDownOutcome::TookOver { new, after, .. } if *after > bound => Some(format!(
                "{new} took over only {after:?} after the request (bound {bound:?})"
            )),
            StepDownOutcome::TookOver { .. } => None,
            StepDownOutcome::LedAgain { .. } => Some(format!("{old} took the lead back")),
            StepDownOutcome::NobodyTookOver { waited } => {
                Some(format!("nobody took over within {waited:?}"))
            }
            _ => None,
        };
        if let Some(detail) = wrong {
            let at = now - self.start;
            fail(
                &mut state,
                at,
                "20: a resign hands the lead to another live, healthy candidate",
                format!("resign of {old}: {detail}"),
            );
        }
    }

    /// Property 23, as process `process` (its members task) asks the leader to hand over
    /// to its node `to` (hook in `sim/db.rs`): it has run for its `preempt_after` at
    /// least. Members count that from the process's first record, by the database clock,
    /// which runs at most 0.15 % fast.
    pub(super) fn check_preemption_wait(&self, process: usize, to: &str) {
        let now = Instant::now();
        let Some(node) = self.scenario.nodes.iter().position(|n| n.id == to) else {
            return;
        };
        let mut state = self.state.lock().unwrap();
        let Some(Some(started)) = state.outcomes.started.get(process).copied() else {
            return;
        };
        let preempt_after = self.scenario.nodes[node].preempt_after;
        if now < started + preempt_after.mul_f64(0.998) {
            let at = now - self.start;
            let label = state.processes[process].label.clone();
            fail(
                &mut state,
                at,
                "23: a candidate preempts only after its preempt_after",
                format!(
                    "{label} asks for the lead {:?} after it started (preempt_after {preempt_after:?})",
                    now - started,
                ),
            );
        }
    }

    /// Follows the run at every check (hook in [`World::check`]): who leads, clean stops
    /// of the leader, and property 24.
    pub(super) fn watch_outcomes(&self, state: &mut State, now: Instant) {
        let leading = state.processes.iter().enumerate().find_map(|(i, p)| {
            let status = p.status.borrow();
            let leads = p.alive
                && status.role == Role::Leader
                && status.lease_deadline.is_some_and(|d| now < d);
            leads.then(|| (i, status.term.unwrap_or_default()))
        });
        if leading.is_some() {
            state.outcomes.leader_seen = Some(now);
        }
        // The leader was told to stop: follow it.
        if let Some((process, term)) = state.outcomes.leading {
            let view = &state.processes[process];
            if let Some(told) = view.stop_began {
                if !state.outcomes.stops.iter().any(|s| s.process == process) {
                    let node = view.node;
                    state.outcomes.stops.push(Stop {
                        process,
                        node,
                        term,
                        told,
                        released: None,
                    });
                }
            }
        }
        state.outcomes.leading = leading;
        if state.outcomes.stops.is_empty() {
            return;
        }
        let row = state.db.table.lease_row(ELECTION, self.db_clock(now));
        let mut judged = Vec::new();
        for (k, stop) in state.outcomes.stops.iter_mut().enumerate() {
            let released = row
                .as_ref()
                .is_some_and(|r| r.term == stop.term && r.holder.is_none());
            if released && stop.released.is_none() {
                stop.released = Some(now);
            }
            let other = leading.is_some_and(|(p, _)| p != stop.process);
            let ended = row.as_ref().is_some_and(|r| r.term != stop.term);
            match stop.released {
                Some(at) if other || now > at + NOTIFIED_TAKEOVER => judged.push((k, other)),
                None if ended || now > stop.told + Duration::from_secs(30) => {
                    judged.push((k, true))
                }
                _ => {}
            }
        }
        for (k, took_over) in judged.into_iter().rev() {
            let stop = state.outcomes.stops.remove(k);
            if !took_over {
                self.judge_stop(state, &stop, now);
            }
        }
    }

    /// Property 24: nobody took over within [`NOTIFIED_TAKEOVER`] of `stop`'s release.
    /// Judged with notifications on, when another candidate could lead at the release and
    /// no event interfered from a ttl before the stop to now.
    fn judge_stop(&self, state: &mut State, stop: &Stop, now: Instant) {
        let Some(released) = stop.released else {
            return;
        };
        let stop_event = self.scenario.events.iter().position(|e| {
            matches!(e.fault, Fault::Stop { node, .. } | Fault::StopDuringReload { node, .. }
                if node == stop.node)
                && self.start + e.from <= stop.told
                && stop.told <= self.start + e.until
        });
        let others_ready = state.truth.iter().enumerate().any(|(n, t)| {
            n != stop.node
                && t.eligible_since
                    .is_some_and(|since| since + self.scenario.interval <= released)
        });
        if !self.scenario.notifies
            || !others_ready
            || self.disturbed(stop.told - self.scenario.ttl, now, stop_event)
        {
            return;
        }
        let at = now - self.start;
        let label = state.processes[stop.process].label.clone();
        fail(
            state,
            at,
            "24: a clean stop of the leader hands over at once when releases notify",
            format!(
                "{label} released term {} at {:?}; nobody led within {NOTIFIED_TAKEOVER:?}",
                stop.term,
                released - self.start
            ),
        );
    }

    /// Property 22, at each tick: once a pause has ended (its `resume`, or the end of
    /// `pause --for`) and the faults before its end have settled, a candidate leads within
    /// ttl + interval + 1 s if one could, unless another event begins meanwhile.
    pub(super) fn check_pause_outcomes(&self) {
        let now = Instant::now();
        let settle = self.settle();
        let bound = self.scenario.ttl + self.scenario.interval + LIVENESS_SLACK;
        for (i, event) in self.scenario.events.iter().enumerate() {
            if !matches!(event.fault, Fault::Pause { .. }) {
                continue;
            }
            let end = self.start + event.until;
            // From the pause's end, or the settling of the faults that began before it.
            let from = self
                .scenario
                .events
                .iter()
                .enumerate()
                .filter(|(j, e)| *j != i && self.start + e.from < end)
                .map(|(_, e)| self.start + e.until + settle)
                .fold(end, Instant::max);
            if now <= from + bound {
                continue;
            }
            let mut state = self.state.lock().unwrap();
            if state.violation.is_some() || state.outcomes.pauses_judged.contains(&i) {
                continue;
            }
            state.outcomes.pauses_judged.push(i);
            let led = state.outcomes.leader_seen.is_some_and(|at| at >= from);
            let could_lead = state
                .truth
                .iter()
                .any(|t| t.eligible_since.is_some_and(|since| since <= from));
            if led || !could_lead || self.disturbed(from, from + bound, Some(i)) {
                continue;
            }
            let at = now - self.start;
            fail(
                &mut state,
                at,
                "22: after a pause ends, a candidate leads within ttl + interval + 1s",
                format!(
                    "the pause ended at {:?}; no leader from {:?} to {:?}",
                    event.until,
                    from - self.start,
                    now - self.start
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    /// Seed 4749, found by property 20: a resign written after a handover offer whose
    /// window had passed unanswered (its target was dead) left the offer in the row, and
    /// the release gave that target a window again; the resigner took the lead back
    /// when it ended. A resign now clears an offer that is over.
    #[test]
    fn a_resign_after_an_unanswered_offer_hands_the_lead_over() {
        let report = super::super::run(4749);
        assert!(report.violation.is_none(), "{}", report.explain());
    }
}
