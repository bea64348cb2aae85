//! The properties of operator commands and preemption, checked by the tokio-driven runs:
//! 7 and 8 (handover), 9 (a manual move holds), 10 (status lists members as they are),
//! 13 (preemption within its bound).

use tokio::time::Instant;

use std::time::Duration;

use super::world::{ELECTION, LIVENESS_SLACK, MANUAL_HOLD, World, fail};

impl World {
    /// Property 13: once the faults are over, a candidate that outranks the leader takes
    /// the lead within `preempt_after` of becoming able to lead, plus the leader's
    /// step-down and a handover (unless a hold keeps it off: an operator moved the lead
    /// away from it, or it lost the lead by preemption itself).
    pub(super) fn check_preemption_lag(&self) {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        let Some((leader, _)) = state.leading else {
            return;
        };
        let handover = self.scenario.ttl * 2 + self.scenario.interval * 2 + LIVENESS_SLACK;
        let step_down = self.scenario.nodes[leader].step_down;
        // Whatever holds a node off preemption in the members table (an operator's move,
        // a lost preemption), as last seen there.
        for member in state.db.table.members(self.db_clock(now), ELECTION) {
            if member.no_preempt_for.is_some() {
                if let Some(node) = self.node_index(&member.node_id) {
                    state.held_seen.insert(node, now);
                }
            }
        }
        let leader_priority = state.truth[leader].priority;
        for (node, truth) in state.truth.iter().enumerate() {
            let preempt_after = self.scenario.nodes[node].preempt_after;
            let Some(eligible) = truth.eligible_since else {
                continue;
            };
            let held = |since: Option<&Instant>, hold: Duration| {
                since.is_some_and(|at| now < *at + hold + handover)
            };
            let id = &self.scenario.nodes[node].id;
            if truth.priority <= leader_priority
                || preempt_after.is_zero()
                || held(state.moved_away.get(id), MANUAL_HOLD)
                || held(state.preempted.get(&node), preempt_after * 2)
                || held(state.held_seen.get(&node), Duration::ZERO)
            {
                continue;
            }
            // A better-ranked candidate (which may not preempt) is left to it for a while.
            let rank = |n: usize| {
                (
                    state.truth[n].priority,
                    std::cmp::Reverse(&self.scenario.nodes[n].id),
                )
            };
            let outranked = (0..state.truth.len()).any(|other| {
                other != node
                    && other != leader
                    && state.truth[other].eligible_since.is_some()
                    && rank(other) > rank(node)
            });
            let deferred = match outranked {
                true => {
                    crate::daemon::members::DEFER_TO_BETTER + crate::daemon::members::PREEMPT_PERIOD
                }
                false => Duration::ZERO,
            };
            let due =
                eligible.max(self.quiet_from) + preempt_after + deferred + step_down + handover;
            if now > due {
                let at = now - self.start;
                let detail = format!(
                    "{} (priority {}) could lead since {:?}; {} (priority {leader_priority}) still leads",
                    id,
                    truth.priority,
                    eligible - self.start,
                    self.scenario.nodes[leader].id
                );
                return fail(
                    &mut state,
                    at,
                    "13: a candidate that outranks the leader takes over within preempt_after",
                    detail,
                );
            }
        }
    }
}

impl World {
    /// Whether any scheduled event other than `except` was under way (or settling) at some
    /// instant of `from..to`.
    pub(super) fn disturbed(&self, from: Instant, to: Instant, except: Option<usize>) -> bool {
        let settle = self.settle();
        self.scenario.events.iter().enumerate().any(|(i, e)| {
            Some(i) != except && self.start + e.from < to && self.start + e.until + settle > from
        })
    }

    /// How long an event's effects may last past its end: a step-down, a lease.
    pub(super) fn settle(&self) -> Duration {
        self.scenario
            .nodes
            .iter()
            .map(|n| n.step_down)
            .max()
            .unwrap_or_default()
            + self.scenario.ttl * 2
    }

    fn node_index(&self, id: &str) -> Option<usize> {
        self.scenario.nodes.iter().position(|n| n.id == id)
    }

    /// An operator's handover made the leader step down (asked at `asked_at`): its target
    /// must have been running then (a node that stopped cleanly has said so; a crashed one
    /// is judged within about one lease).
    pub(super) fn check_handover_accepted(&self, to: &str, asked_at: Instant) {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        let Some(node) = self.node_index(to) else {
            return;
        };
        let grace = self.scenario.ttl + self.scenario.interval + LIVENESS_SLACK;
        if let Some((gone, clean)) = state.truth[node].gone {
            if gone < asked_at && (clean || asked_at > gone + grace) {
                let at = now - self.start;
                let how = if clean { "stopped" } else { "died" };
                fail(
                    &mut state,
                    at,
                    "7: a handover makes the leader step down only for a running target",
                    format!("handover to {to}, which {how} {:?} before", asked_at - gone),
                );
            }
        }
    }

    /// An operator's resign or handover (scheduled event `event`) ended with `new`
    /// leading (or nobody, `None`); `held`: it wrote its hold on `old` (its request was
    /// written, whatever came of it).
    pub(super) fn check_step_down_outcome(
        &self,
        event: usize,
        asked_at: Instant,
        old: &str,
        to: Option<&str>,
        new: Option<&str>,
        held: bool,
    ) {
        let now = Instant::now();
        let disturbed =
            self.disturbed_for(asked_at - self.scenario.ttl, now, event, [Some(old), to]);
        let mut state = self.state.lock().unwrap();
        // A failover while the command ran may have lost its hold (property 9 then has
        // nothing to hold the database to; `failover.rs`).
        if held && !state.db.failures.failed_over_since(asked_at - self.start) {
            state.moved_away.insert(old.to_owned(), now);
        }
        let Some(to) = to else { return };
        let Some(node) = self.node_index(to) else {
            return;
        };
        let eligible = state.truth[node]
            .eligible_since
            .is_some_and(|since| since + self.scenario.interval <= asked_at);
        if eligible && !disturbed && new != Some(to) {
            let at = now - self.start;
            fail(
                &mut state,
                at,
                "8: an undisturbed handover to a live, healthy candidate makes it the leader",
                format!("handover from {old} to {to} ended with {new:?} leading"),
            );
        }
    }

    /// A candidate's members task asks the leader to hand over to `to` (preemption).
    pub(super) fn check_preemption(&self, to: &str) {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        if let Some((leader, _)) = state.leading {
            state.preempted.insert(leader, now);
        }
        if let Some(moved) = state.moved_away.get(to).copied() {
            if now < moved + MANUAL_HOLD {
                let at = now - self.start;
                fail(
                    &mut state,
                    at,
                    "9: a manual move holds: no preemption back within the hold",
                    format!(
                        "preemption to {to} {:?} after an operator moved leadership away from it",
                        now - moved
                    ),
                );
            }
        }
    }

    /// `leaderd status` lists each member as what it is: `observer` only for a node that
    /// is one by configuration, `gone` for a node that stopped.
    pub(super) fn check_member_report(&self) {
        let now = Instant::now();
        // Judged only where nothing kept the record from being written (a database down,
        // a node's statements failing) since the node changed.
        let since = {
            let state = self.state.lock().unwrap();
            state
                .truth
                .iter()
                .filter_map(|t| t.gone.map(|(at, _)| at).or(t.failing_since))
                .max()
        };
        if since.is_some_and(|since| self.disturbed(since - self.scenario.ttl, now, None)) {
            return;
        }
        let mut state = self.state.lock().unwrap();
        if state.violation.is_some() {
            return;
        }
        let members = state.db.table.members(self.db_clock(now), ELECTION);
        let leader = state
            .db
            .table
            .lease_row(ELECTION, self.db_clock(now))
            .and_then(|r| r.live_holder().map(str::to_owned));
        let reports = crate::operator::member_reports(&members, leader.as_deref());
        let settled = self.scenario.interval + LIVENESS_SLACK;
        for report in reports {
            let Some(node) = self.node_index(&report.node_id) else {
                continue;
            };
            let truth = &state.truth[node];
            let observer = !self.scenario.nodes[node].candidate;
            let failing = truth
                .failing_since
                .is_some_and(|since| now > since + settled);
            // A failover after a clean stop may have lost its record: judged as a kill.
            let stopped = truth.gone.is_some_and(|(since, clean)| {
                let record_kept = !state.db.failures.failed_over_since(since - self.start);
                clean && record_kept && now > since + settled
            });
            let wrong = match report.role {
                "observer" => !observer && truth.gone.is_none(),
                "gone" => false,
                _ => stopped || (failing && report.role == "follower"),
            };
            if wrong {
                let at = now - self.start;
                let ago = |at: Instant| format!("{:?} ago", now - at);
                let detail = format!(
                    "status lists {} as {} (observer by configuration: {observer}, gone: {:?}, \
                     failing since: {:?})",
                    report.node_id,
                    report.role,
                    truth.gone.map(|(at, clean)| (ago(at), clean)),
                    truth.failing_since.map(ago),
                );
                return fail(
                    &mut state,
                    at,
                    "10: status lists each member as what it is",
                    detail,
                );
            }
        }
    }
}
