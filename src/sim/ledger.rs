//! What the world records of leader work (`leader_work.rs`) and its fenced transactions
//! (`fenced.rs`), and property 15 judged on it.

use std::collections::BTreeSet;

use crate::store::LeaseRow;

/// What the world knows of leader work: every work process, and the fenced transactions.
#[derive(Default)]
pub(super) struct Ledger {
    pub(super) works: Vec<WorkView>,
    pub(super) transactions: Transactions,
}

pub(super) struct WorkView {
    pub(super) label: String,
    pub(super) node_id: String,
    pub(super) term: i64,
    pub(super) running: bool,
}

impl WorkView {
    /// Whether `row` lets it run: its node holds a live lease in its term. Or in a later
    /// term its node reacquired, while the work of the term before is being killed (the
    /// fence refuses that work's writes then: it fails closed).
    pub(super) fn held(&self, row: Option<&LeaseRow>) -> bool {
        row.is_some_and(|r| {
            r.holder.as_deref() == Some(self.node_id.as_str())
                && r.term >= self.term
                && !r.remaining().is_zero()
        })
    }
}

/// Property 15: leader work runs only while its node holds a live lease in its own term,
/// judged on `row` as the database sees it now.
pub(super) const LEADER_WORK: &str =
    "15: leader work runs only while its node holds a live lease in its term";

impl Ledger {
    /// Property 15 on the row now: the first work that runs outside its lease.
    pub(super) fn judge(
        &self,
        row: Option<&LeaseRow>,
        forgotten: impl Fn(&str, i64) -> bool,
    ) -> Option<(&'static str, String)> {
        let work = self
            .works
            .iter()
            .find(|w| w.running && !w.held(row) && !forgotten(&w.node_id, w.term))?;
        Some((
            LEADER_WORK,
            format!(
                "{} runs in term {}, but the row is {row:?}",
                work.label, work.term
            ),
        ))
    }
}

/// The fenced transactions of a run.
#[derive(Default)]
pub(super) struct Transactions {
    next: u64,
    /// Ended without a commit (their process gone, their answer given up on): a fence of
    /// theirs still on its way takes no lock.
    pub(super) aborted: BTreeSet<u64>,
    /// Fenced writes committed, and refused by the fence.
    pub(super) committed: u64,
    pub(super) refused: u64,
}

impl Transactions {
    pub(super) fn begin(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    pub(super) fn abort(&mut self, transaction: u64) {
        self.aborted.insert(transaction);
    }
}
