//! The status file as its readers see it (`leaderd status --local`, `leaderd wait`,
//! scripts): its `valid_until` read on the wall clock of the node's host, which NTP or an
//! operator can step forward or back. Each node has a wall clock of its own that follows
//! the virtual clock plus its steps; the election reads it for the status it publishes,
//! and the readers judge the durable file with the real reader code
//! ([`StatusDocument::valid_at`]).
//!
//! Property 14: a reader never sees two leaders valid at once, and never sees a leader
//! valid while the row does not hold that node's lease in its term, live by the database
//! clock. A wall clock stepped back by S since the file was written makes any wall-clock
//! deadline look S later (readers have no other clock in common with the writer), so the
//! readers are judged on the clock without the backward steps taken since the status in
//! the file was published.

use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use super::schedule::Fault;
use super::wall::wall_base;
use super::world::{ELECTION, ProcessView, World, fail};
use crate::election::Role;
use crate::standing::Standing;
use crate::status_file::StatusDocument;

impl World {
    /// Node `node`'s wall clock at `now`: the virtual clock, plus the time its host slept
    /// (CLOCK_REALTIME counts a suspend, as the boot clock does), plus its steps so far.
    pub(super) fn wall(&self, node: usize, now: Instant) -> SystemTime {
        let since = now.saturating_duration_since(self.start);
        let slept: Duration = self
            .scenario
            .events
            .iter()
            .filter(|e| e.fault == Fault::Suspend { node } && e.from <= since)
            .map(|e| e.until - e.from)
            .sum();
        let stepped: i64 = self.steps_of(node, None, since).sum();
        shift(wall_base() + since + slept, stepped)
    }

    /// The steps of `node`'s clock after `after` (all: `None`) up to `upto`, in
    /// milliseconds.
    fn steps_of(
        &self,
        node: usize,
        after: Option<Duration>,
        upto: Duration,
    ) -> impl Iterator<Item = i64> {
        self.scenario
            .wall_steps
            .iter()
            .filter(move |s| s.node == node && s.at <= upto && after.is_none_or(|a| s.at > a))
            .map(|s| s.by_ms)
    }

    /// What the readers of `view`'s status file, just written, parse from it while it
    /// says the node leads, and when the status written was published (its wall clock
    /// was read then).
    pub(super) fn as_read(
        &self,
        view: &ProcessView,
        published: Instant,
    ) -> Option<(Instant, StatusDocument)> {
        let file = view.file.as_ref().filter(|f| f.role == Role::Leader)?;
        let id = &self.scenario.nodes[view.node].id;
        let document = StatusDocument::new(ELECTION, id, file, Standing::default());
        Some((published, document))
    }

    /// Property 14, after every event: what the readers of each durable status file see.
    pub(super) fn check_readers(&self) {
        let now = Instant::now();
        let since = now - self.start;
        let mut state = self.state.lock().unwrap();
        if state.violation.is_some() {
            return;
        }
        let mut valid = Vec::new();
        for view in &state.processes {
            let Some((written, document)) = &view.file_read else {
                continue;
            };
            // The reader's clock, less the backward steps since the status was published.
            let back: i64 = self
                .steps_of(view.node, Some(*written - self.start), since)
                .filter(|by| *by < 0)
                .sum();
            let read = shift(self.wall(view.node, now), -back);
            // A lease the database acknowledged and then forgot (a failover that lost
            // commits) is excused here as for properties 1 and 2 (`failover.rs`): no
            // protocol on top of such a database can keep its readers from it.
            let forgotten = view
                .file
                .as_ref()
                .and_then(|f| Some((f.term?, f.lease_deadline?)))
                .is_some_and(|(term, deadline)| {
                    let deadline = deadline.saturating_duration_since(self.start);
                    state
                        .db
                        .failures
                        .forgotten(&document.node_id, term, deadline)
                });
            if document.valid_at(read) && !forgotten {
                valid.push((view.label.clone(), document.node_id.clone(), document.term));
            }
        }
        let detail = match valid.as_slice() {
            [] => return,
            [_, _, ..] => format!("{valid:?} are all valid leaders in their status files"),
            [(label, id, term)] => {
                let row = state.db.table.lease_row(ELECTION, self.db_clock(now));
                let held = row.as_ref().is_some_and(|r| {
                    r.holder.as_deref() == Some(id.as_str())
                        && Some(r.term) == *term
                        && !r.remaining().is_zero()
                });
                if held {
                    return;
                }
                format!("{label}'s status file says it leads in term {term:?}; the row is {row:?}")
            }
        };
        let at = now - self.start;
        fail(
            &mut state,
            at,
            "14: a reader of the status files sees at most one valid leader, within its lease",
            detail,
        );
    }
}

fn shift(time: SystemTime, by_ms: i64) -> SystemTime {
    let by = Duration::from_millis(by_ms.unsigned_abs());
    match by_ms < 0 {
        true => time - by,
        false => time + by,
    }
}
