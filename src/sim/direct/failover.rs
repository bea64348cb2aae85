//! A direct run's side of `sim/failover.rs`: the failover window, and the processes that
//! act on a lease the database forgot.

use std::time::Duration;

use super::{ELECTION, World};

impl World {
    /// A failover window opens: every connection is cut, none is accepted for `delay`,
    /// and the new primary has lost the last `lost` and reads its clock `clock_us` off.
    pub(super) fn fail_over(&mut self, lost: Duration, delay: Duration, clock_us: i64) {
        let ppm = 1.0 + self.scenario.db_clock_ppm as f64 * 1e-6;
        let row = self.db.table.lease_row(ELECTION, self.db_clock());
        let row = row.map(|r| {
            let left = r.remaining().div_f64(ppm);
            (r, left)
        });
        self.db.epoch += 1;
        self.db.refuse(self.base + self.now + delay);
        let db = &mut self.db;
        db.failures
            .fail_over(&mut db.table, self.now, lost, clock_us, row);
        // Property 5 counts afresh: a node redoes what the database forgot.
        for process in &mut self.processes {
            process.sent.clear();
        }
        let row = self.db.table.lease_row(ELECTION, self.db_clock());
        self.note("driver", || format!("the new primary has {row:?}"));
    }

    /// Leaves out of `acting` whoever acts on a lease the database forgot (measuring the
    /// overlap), after holding it to property 3.
    pub(super) fn excuse_forgotten(&mut self, acting: Vec<usize>) -> Vec<usize> {
        let several = acting.len() > 1;
        let mut kept = Vec::new();
        for index in acting {
            let p = &self.processes[index];
            let node_id = self.scenario.nodes[p.node].id.clone();
            let (Some(term), Some(deadline)) = (p.status.term, p.status.lease_deadline_boot) else {
                kept.push(index);
                continue;
            };
            // The boot clock reads 1000 s at the run's start.
            let deadline = deadline.saturating_sub(Duration::from_secs(1000));
            if !self.db.failures.forgotten(&node_id, term, deadline) {
                kept.push(index);
                continue;
            }
            if several {
                self.db
                    .failures
                    .overlapping(self.now, &node_id, term, deadline);
            }
            let first = *self.acted.entry(term).or_insert(index);
            if first != index {
                let (other, label) = (
                    self.processes[first].label.clone(),
                    self.processes[index].label.clone(),
                );
                self.fail(
                    "3: no term is acted on by two processes",
                    format!("term {term}: {other} and {label}"),
                );
            }
        }
        kept
    }
}
