//! The simulated database: the lease table ([`Table`], the model the store contract holds
//! to the SQL), restarts and refused connections, release listeners, and the terms the row
//! let start against its operator columns. It knows nothing of the world around it.

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::store::LeaseRow;
use crate::store::memory::Table;

/// The database beside the table: what restarts and refusals do to connections.
pub(super) struct Db {
    pub(super) table: Table,
    /// Bumped by every restart: connections opened before it are cut.
    pub(super) epoch: u64,
    /// New connections are refused until then (a restart, or a refusal window).
    pub(super) refuse_until: Option<Instant>,
    /// Release listeners (PostgreSQL's LISTEN), by election name.
    pub(super) listeners: Vec<(String, mpsc::Sender<()>)>,
    /// Terms the row let start against its operator columns (property, detail), for the
    /// next check to report.
    pub(super) breaches: Vec<(&'static str, String)>,
    /// Rollbacks and clock steps (`failures.rs`).
    pub(super) failures: super::failures::Failures,
}

/// Properties 11 and 12, judged on the row as it was just before a term started.
pub(super) fn judge_new_term(
    db: &mut Db,
    before: Option<LeaseRow>,
    starter: &str,
    reacquire: Option<i64>,
) {
    let Some(row) = before else { return };
    let live_holder = row.live_holder() == Some(starter);
    if row.paused() && !(reacquire.is_some() && live_holder) {
        db.breaches.push((
            "11: no term starts while the election is paused (but a live leader's)",
            format!("{starter} started term {} on {row:?}", row.term + 1),
        ));
    }
    if reacquire.is_some() && row.pending.resign_term == Some(row.term) {
        db.breaches.push((
            "12: a leader asked to step down does not continue its term",
            format!("{starter} reacquired term {} on {row:?}", row.term),
        ));
    }
    if row.handed_over_away_from(starter) {
        db.breaches.push((
            "12: within a handover's window only its target starts a term",
            format!("{starter} started term {} on {row:?}", row.term + 1),
        ));
    }
}

impl Db {
    pub(super) fn new() -> Db {
        Db {
            table: Table::default(),
            epoch: 0,
            refuse_until: None,
            listeners: Vec::new(),
            breaches: Vec::new(),
            failures: Default::default(),
        }
    }

    /// Wakes the listeners of `name` (a NOTIFY).
    pub(super) fn notify(&mut self, name: &str) {
        self.listeners.retain(|(_, l)| !l.is_closed());
        for (listening, listener) in &self.listeners {
            if listening == name {
                let _ = listener.try_send(());
            }
        }
    }

    /// New connections are refused until `until` at least (a shorter refusal while a
    /// longer one lasts, a restart during a failover's promotion, does not end it).
    pub(super) fn refuse(&mut self, until: Instant) {
        self.refuse_until = Some(self.refuse_until.map_or(until, |u| u.max(until)));
    }

    pub(super) fn refusing(&self, now: Instant) -> bool {
        self.refuse_until.is_some_and(|until| now < until)
    }
}
