//! The properties a direct run checks after every event: 1 to 4 here (5, 6 at each
//! sending, 11 and 12 where the database starts a term).

use std::time::Duration;

use super::{ELECTION, World};
use crate::election::{Role, Status};
use crate::sim::world::LIVENESS_SLACK;
use crate::store::LeaseRow;

/// Property 2's test: `row`, read by the database clock, names `node_id` in `term`, and
/// its lease ends, in the nodes' time, no earlier than the leader's `deadline` on its boot
/// clock (`boot` now; the database clock runs `ppm` times as fast).
pub(in crate::sim) fn row_backs(
    row: Option<&LeaseRow>,
    node_id: &str,
    term: i64,
    deadline: Duration,
    boot: Duration,
    ppm: f64,
) -> bool {
    row.is_some_and(|r| {
        r.holder.as_deref() == Some(node_id)
            && r.term == term
            && deadline <= boot + r.remaining().div_f64(ppm)
    })
}

impl World {
    /// The process acting as leader now: one that says so, with its lease deadline not yet
    /// passed by its boot clock (a frozen leader's work is frozen with it, and the fence
    /// stops it at that deadline).
    pub(super) fn acting(&self) -> Vec<usize> {
        let boot = Duration::from_secs(1000) + self.now;
        (0..self.processes.len())
            .filter(|&i| {
                let p = &self.processes[i];
                p.alive
                    && p.status.role == Role::Leader
                    && p.status.lease_deadline_boot.is_some_and(|d| boot < d)
            })
            .collect()
    }

    /// Property 2 at the source: a node publishes the leader role only with a deadline
    /// ahead by both of its clocks (a late answer must not restore leadership).
    pub(super) fn check_published(&mut self, index: usize, status: &Status) {
        if status.role != Role::Leader {
            return;
        }
        let p = &self.processes[index];
        let (mono, boot) = (
            self.base + self.now - p.slept,
            Duration::from_secs(1000) + self.now,
        );
        let ahead = status.lease_deadline.is_some_and(|d| mono < d)
            && status.lease_deadline_boot.is_some_and(|d| boot < d);
        if !ahead {
            let label = p.label.clone();
            self.fail(
                "2: a node acts as leader only while the row names it, in its term, live",
                format!(
                    "{label} publishes leader in term {:?} with its deadline passed",
                    status.term
                ),
            );
        }
    }

    pub(super) fn check(&mut self) {
        if self.violation.is_some() {
            return;
        }
        let acting = self.excuse_forgotten(self.acting());
        if self.violation.is_some() {
            return;
        }
        if acting.len() > 1 {
            let who: Vec<String> = acting
                .iter()
                .map(|&i| {
                    let p = &self.processes[i];
                    format!("{} (term {:?})", p.label, p.status.term)
                })
                .collect();
            return self.fail(
                "1: at no instant do two nodes act as leader",
                who.join(" and "),
            );
        }
        let Some(&index) = acting.first() else {
            self.leaderless_since.get_or_insert(self.now);
            return self.check_liveness();
        };
        self.leaderless_since = None;
        let p = &self.processes[index];
        let (label, term) = (p.label.clone(), p.status.term.expect("a leader has a term"));
        let node_id = self.scenario.nodes[p.node].id.clone();
        let deadline = p
            .status
            .lease_deadline_boot
            .expect("a leader has a deadline");
        let ppm = 1.0 + self.scenario.db_clock_ppm as f64 * 1e-6;
        let row = self.db.table.lease_row(ELECTION, self.db_clock());
        let boot = Duration::from_secs(1000) + self.now;
        let held = row_backs(row.as_ref(), &node_id, term, deadline, boot, ppm);
        if !held {
            return self.fail(
                "2: a node acts as leader only while the row names it, in its term, live",
                format!(
                    "{label} acts in term {term} until boot {deadline:?}, but the row is {row:?}"
                ),
            );
        }
        let first = *self.acted.entry(term).or_insert(index);
        if first != index {
            let other = self.processes[first].label.clone();
            return self.fail(
                "3: no term is acted on by two processes",
                format!("term {term}: {other} and {label}"),
            );
        }
        let p = &mut self.processes[index];
        if p.last_term.is_some_and(|last| term < last) {
            let last = p.last_term;
            return self.fail(
                "3: terms only grow",
                format!("{label} acts in term {term} after term {last:?}"),
            );
        }
        p.last_term = Some(term);
    }

    /// Property 4: once the faults are over, a candidate leads within ttl + interval +
    /// `LIVENESS_SLACK`, whenever a live, healthy candidate could lead and no pause holds.
    fn check_liveness(&mut self) {
        let row = self.db.table.lease_row(ELECTION, self.db_clock());
        let paused = row.as_ref().is_some_and(|row| row.paused());
        // A handover window for a target that stopped after it accepted keeps the lease
        // from everyone else until it ends (2 ttl after the release): count from there.
        let handed_to_the_gone = row.as_ref().is_some_and(|row| {
            row.pending.handover_for.is_some()
                && !self.processes.iter().any(|p| {
                    p.alive
                        && !p.stopped
                        && row.pending.handover_to.as_deref()
                            == Some(self.scenario.nodes[p.node].id.as_str())
                })
        });
        if paused || handed_to_the_gone {
            self.leaderless_since = Some(self.now);
            return;
        }
        let Some(since) = self.leaderless_since else {
            return;
        };
        // As the tokio-driven check: the faults settle once a step-down begun during them
        // is over (a resign's leader work) and the resigner's hold of one ttl with it
        // (seeds 44209, 77103: the only candidate left was the resigner).
        let settle = (self.scenario.nodes.iter().map(|n| n.step_down).max()).unwrap_or_default()
            + self.scenario.ttl * 2;
        let quiet_from =
            (self.scenario.events.iter().map(|e| e.until).max()).map(|last| last + settle);
        let since = since.max(quiet_from.unwrap_or_default());
        let bound = self.scenario.ttl + self.scenario.interval + LIVENESS_SLACK;
        let could_lead = self.processes.iter().any(|p| {
            p.alive && !p.stopped && !p.unhealthy && self.scenario.nodes[p.node].candidate
        });
        if could_lead && self.now > since + bound {
            let detail = format!("no leader since {since:?}, faults over at {quiet_from:?}");
            self.fail(
                "4: once the faults are over, a candidate leads within ttl + interval + 1s",
                detail,
            );
        }
    }
}
