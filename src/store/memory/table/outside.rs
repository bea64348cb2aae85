//! What tests and the simulator do to the tables of [`Table`] outside its statements: a
//! row overwritten or its handover set by hand, every stored time moved (a stepped
//! clock), and the instants at which an answer could change.

use std::time::Duration;
use tokio::time::Instant;

use super::{Row, Table};

impl Table {
    /// Every instant at which a statement on the tables could start to answer otherwise:
    /// the lease starts and ends, the ends of pauses, handover windows and preemption
    /// holds, and when each member falls to `prune_after` unseen. (A test that moves time
    /// keeps clear of them.)
    pub fn boundaries(&self, prune_after: Duration) -> Vec<Instant> {
        let rows = self.rows.values().flat_map(|row| {
            [Some(row.renewed_at), Some(row.lease_end())]
                .into_iter()
                .chain([row.paused_until, row.handover_until])
                .flatten()
        });
        let members = self.members.values().flat_map(|member| {
            [
                Some(member.last_seen + prune_after),
                member.no_preempt_until,
            ]
            .into_iter()
            .flatten()
        });
        rows.chain(members).collect()
    }

    /// Moves every stored time of the tables `by` later (`later`) or earlier: as if the
    /// database clock had stepped back, or forward, by as much.
    pub fn move_times(&mut self, later: bool, by: Duration) {
        let moved = |at: &mut Instant| {
            *at = match later {
                true => *at + by,
                false => at.checked_sub(by).unwrap_or(*at),
            }
        };
        for row in self.rows.values_mut() {
            moved(&mut row.renewed_at);
            [
                &mut row.taken_at,
                &mut row.paused_until,
                &mut row.handover_until,
            ]
            .into_iter()
            .flatten()
            .for_each(moved);
        }
        for member in self.members.values_mut() {
            moved(&mut member.started);
            moved(&mut member.last_seen);
            member.no_preempt_until.iter_mut().for_each(moved);
        }
    }

    /// Sets the term of `name` by hand: one a database started whose clock the model does
    /// not read to the microsecond (SQLite's float of its millisecond clock).
    pub fn set_term(&mut self, name: &str, term: i64) {
        if let Some(row) = self.rows.get_mut(name) {
            row.term = term;
        }
    }

    /// Sets the handover columns of `name` by hand, as an operator's UPDATE or a node of
    /// another version might leave them (a target without a window, say).
    pub fn set_handover(&mut self, name: &str, to: Option<&str>, until: Option<Instant>) {
        if let Some(row) = self.rows.get_mut(name) {
            row.handover_to = to.map(str::to_owned);
            row.handover_until = until;
        }
    }

    /// Replaces the row, as an operator, a stepped database clock or a node of a version
    /// that does not write term tokens might.
    pub fn overwrite(
        &mut self,
        now: Instant,
        name: &str,
        holder: &str,
        term: i64,
        lease: Duration,
    ) {
        let now = self.reading(now);
        let lease = self.flavour.duration(lease);
        let row = self
            .rows
            .entry(name.to_owned())
            .or_insert_with(|| Row::unheld(now));
        *row = Row {
            holder: Some(holder.to_owned()),
            term,
            lease,
            renewed_at: now,
            ..Row::unheld(now)
        };
    }
}
