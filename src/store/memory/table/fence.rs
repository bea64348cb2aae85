//! The fence of leader work (`store/fence.rs`, the migrations' `leaderd_fence`) in memory:
//! in a transaction of term T it refuses unless the row is in term T, held and live by
//! the database clock, and otherwise holds the row against a new term until the
//! transaction ends. A claim or reacquire waits while [`Table::fenced`] says so (the
//! simulator's database makes it wait); renewals, releases and the operator commands do
//! not (PostgreSQL's `FOR KEY SHARE`; MySQL's shared lock also holds renewals back).

use std::time::Duration;
use tokio::time::Instant;

use super::Table;

/// Why the fence refused, as its SQL says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceRefusal {
    NoSuchElection,
    /// Another term holds.
    OtherTerm {
        holds: i64,
    },
    /// Its holder released it.
    Released,
    /// Its lease lapsed this long ago.
    Lapsed {
        ago: Duration,
    },
}

impl Table {
    /// `leaderd_fence(name, term)` in transaction `transaction` at database time `now`:
    /// the lease time left if it passes, and the row is then held against a new term
    /// until [`Table::end_fenced`] ends the transaction.
    pub fn fence(
        &mut self,
        now: Instant,
        name: &str,
        term: i64,
        transaction: u64,
    ) -> Result<Duration, FenceRefusal> {
        let now = self.reading(now);
        let row = self.rows.get(name).ok_or(FenceRefusal::NoSuchElection)?;
        if row.term != term {
            return Err(FenceRefusal::OtherTerm { holds: row.term });
        }
        if row.holder.is_none() {
            return Err(FenceRefusal::Released);
        }
        if !row.live(now) {
            let ago = now.saturating_duration_since(row.lease_end());
            return Err(FenceRefusal::Lapsed { ago });
        }
        let left = row.lease_end().saturating_duration_since(now);
        self.fences.insert(transaction, name.to_owned());
        Ok(left)
    }

    /// The fenced transaction `transaction` ended (committed, rolled back, or its session
    /// gone): its hold on the row ends.
    pub fn end_fenced(&mut self, transaction: u64) {
        self.fences.remove(&transaction);
    }

    /// Whether a fenced transaction holds `name` against a new term now.
    pub fn fenced(&self, name: &str) -> bool {
        self.fences.values().any(|fenced| fenced == name)
    }

    /// A restart: every session, and every fenced transaction with it, is gone.
    pub fn end_every_fenced(&mut self) {
        self.fences.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Lease, ProcessToken};

    fn lease(holder: &str, term: i64) -> Lease {
        Lease {
            name: "e".into(),
            holder: holder.into(),
            term,
            ttl: Duration::from_secs(1),
            token: ProcessToken::random(),
        }
    }

    #[test]
    fn the_fence_admits_only_a_live_held_lease_of_its_term_and_holds_it() {
        let mut table = Table::default();
        let now = Instant::now();
        table.ensure_row("e", now);
        let term = table.claim(now, &lease("a", 0)).expect("claimed");
        let later = now + Duration::from_millis(300);
        assert_eq!(
            table.fence(later, "e", term, 1),
            Ok(Duration::from_millis(700))
        );
        assert!(table.fenced("e"));
        assert_eq!(
            table.fence(later, "e", term - 1, 2),
            Err(FenceRefusal::OtherTerm { holds: term })
        );
        let lapsed = now + Duration::from_millis(1200);
        assert_eq!(
            table.fence(lapsed, "e", term, 3),
            Err(FenceRefusal::Lapsed {
                ago: Duration::from_millis(200)
            })
        );
        table.end_fenced(1);
        assert!(!table.fenced("e"));
        assert!(table.release(later, &lease("a", term)));
        assert_eq!(
            table.fence(later, "e", term, 4),
            Err(FenceRefusal::Released)
        );
        assert!(!table.fenced("e"));
    }
}
