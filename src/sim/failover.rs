//! The tokio-driven runs' side of `failures.rs`: a failover window, a clock step, and the
//! processes that act on a lease the database forgot.

use std::time::Duration;
use tokio::time::Instant;

use super::world::{ELECTION, State, World, fail};
use crate::election::Status;

impl World {
    /// A failover window opens: every connection is cut, none is accepted for `delay`,
    /// and the new primary has lost the last `lost` and reads its clock `clock_us` off.
    pub(super) fn fail_over(&self, lost: Duration, delay: Duration, clock_us: i64) {
        let now = Instant::now();
        let at = now - self.start;
        let mut state = self.state.lock().unwrap();
        let row = state.db.table.lease_row(ELECTION, self.db_clock(now));
        let row = row.map(|r| {
            let left = self.in_node_time(r.remaining());
            (r, left)
        });
        state.db.epoch += 1;
        state.db.refuse(now + delay);
        let db = &mut state.db;
        db.failures
            .fail_over(&mut db.table, at, lost, clock_us, row);
        // The old primary's open transactions, fenced ones among them, died with it.
        db.table.end_every_fenced();
        // The holds of manual moves the database forgot (property 9 judges the rest).
        let kept_before = now - lost;
        state.moved_away.retain(|_, moved| *moved < kept_before);
        // Property 5 counts afresh: a node redoes what the database forgot (a preemption,
        // say), which is no busy loop.
        for process in &mut state.processes {
            process.sent.clear();
            process.sent_members.clear();
        }
        self.clock_step_us
            .fetch_add(clock_us, std::sync::atomic::Ordering::Relaxed);
        let row = state.db.table.lease_row(ELECTION, self.db_clock(now));
        state
            .trace
            .push(at, "driver", format!("the new primary has {row:?}"));
    }

    /// The database clock steps by `by_us` microseconds.
    pub(super) fn step_clock(&self, by_us: i64) {
        self.clock_step_us
            .fetch_add(by_us, std::sync::atomic::Ordering::Relaxed);
        self.state.lock().unwrap().db.failures.step_us += by_us;
    }

    /// Leaves out of `acting` whoever acts on a lease the database forgot (measuring the
    /// overlap), after holding it to property 3.
    pub(super) fn excuse_forgotten(
        &self,
        state: &mut State,
        now: Instant,
        acting: Vec<(usize, Status, bool)>,
    ) -> Vec<(usize, Status, bool)> {
        let at = now - self.start;
        let several = acting.len() > 1;
        let mut kept = Vec::new();
        for (index, status, says) in acting {
            let node_id = self.scenario.nodes[state.processes[index].node].id.clone();
            let (Some(term), Some(deadline)) = (status.term, status.lease_deadline) else {
                kept.push((index, status, says));
                continue;
            };
            let deadline = deadline.saturating_duration_since(self.start);
            if !state.db.failures.forgotten(&node_id, term, deadline) {
                kept.push((index, status, says));
                continue;
            }
            if several {
                state.db.failures.overlapping(at, &node_id, term, deadline);
            }
            let first = *state.acted.entry(term).or_insert(index);
            if first != index && says {
                let (other, label) = (
                    state.processes[first].label.clone(),
                    state.processes[index].label.clone(),
                );
                fail(
                    state,
                    at,
                    "3: no term is acted on by two processes",
                    format!("term {term}: {other} and {label}"),
                );
            }
        }
        kept
    }
}
