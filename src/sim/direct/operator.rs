//! The operators of a direct run: `leaderd pause`, `resume`, `resign` and `handover --to`
//! on a connection of their own, whose statements meet the faults the schedule aims at
//! the operators' connection ([`OPERATOR`](crate::sim::failures::OPERATOR)) and the database's: a failure before the
//! commit, a connection refused or cut by a restart, and a delay before the write (in
//! flight and in a row lock wait). A command reads the row when asked and writes later,
//! guarded by the term it read, as `operator::step_down_with` does.

use super::{ELECTION, Event, OperatorWrite, World};
use crate::sim::db::CONNECT;

impl World {
    /// `leaderd resign`, or `handover --to` node `to`: reads the row now, and sends the
    /// request guarded by the term it read.
    pub(super) fn operator(&mut self, to: Option<usize>) {
        let db_now = self.db_clock();
        let Some(row) = self.db.table.lease_row(ELECTION, db_now) else {
            return;
        };
        let Some(holder) = row.live_holder().map(str::to_owned) else {
            return;
        };
        let term = row.term;
        let write = match to {
            None => OperatorWrite::Resign { holder, term },
            // The operator refuses a target that could not lead: no process of it runs,
            // it is an observer, stopping, or unhealthy.
            Some(to) => {
                let could_lead = self.scenario.nodes[to].candidate
                    && (self.processes.iter())
                        .any(|p| p.node == to && p.alive && !p.stopped && !p.unhealthy);
                let to = self.scenario.nodes[to].id.clone();
                if !could_lead || to == holder {
                    self.note("op", || format!("refuses a handover to {to}"));
                    return;
                }
                OperatorWrite::Handover { holder, term, to }
            }
        };
        self.operator_send(write);
    }

    /// Sends an operator's write through the operators' connection's faults.
    pub(super) fn operator_send(&mut self, write: OperatorWrite) {
        let fate = self.operators.fate(self.base + self.now);
        let mut delay = fate.there + fate.lock_wait;
        // A connection per command, as the CLI opens one.
        delay += CONNECT;
        if self.db.refusing(self.base + self.now + CONNECT) {
            self.operator_writes.1 += 1;
            return self.note("op", || format!("{write:?}: connection refused"));
        }
        if fate.fail_before_commit {
            self.operator_writes.1 += 1;
            return self.note("op", || format!("{write:?}: failed before the commit"));
        }
        let epoch = self.db.epoch;
        self.at(self.now + delay, Event::Operator { write, epoch });
    }

    /// An operator's write reaches the database (unless a restart cut its connection).
    pub(super) fn operator_write(&mut self, write: OperatorWrite, epoch: u64) {
        if epoch != self.db.epoch {
            self.operator_writes.1 += 1;
            return self.note("op", || format!("{write:?}: connection cut by a restart"));
        }
        self.operator_writes.0 += 1;
        let db_now = self.db_clock();
        let table = &mut self.db.table;
        let done = match &write {
            OperatorWrite::Pause { length } => {
                table.pause(db_now, ELECTION, *length);
                true
            }
            OperatorWrite::Resume => table.resume(ELECTION),
            OperatorWrite::Resign { holder, term } => {
                table.request_resign(db_now, ELECTION, holder, *term)
            }
            OperatorWrite::Handover { holder, term, to } => {
                table.request_handover(db_now, ELECTION, holder, *term, to, true)
            }
        };
        self.note("op", || format!("{write:?}: {done}"));
        if done {
            self.notify_all();
        }
    }
}
