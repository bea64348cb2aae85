//! One statement of a node's election, run against the table: what the direct runs and the
//! exhaustive check (`sim/exhaustive`) both carry a [`Statement`] out with.

use tokio::time::Instant;

use crate::election::ElectionSettings;
use crate::election::machine::{Reply, Statement};
use crate::store::memory::Table;
use crate::store::{LeaseRow, ProcessToken};

/// What running a statement did.
pub(in crate::sim) struct Ran {
    pub(in crate::sim) reply: Reply,
    /// A claim or a reacquire started a term: the row just before it, and the term a
    /// reacquire continued from (for properties 11 and 12).
    pub(in crate::sim) started: Option<(Option<LeaseRow>, Option<i64>)>,
    /// A release freed the row (listeners are notified).
    pub(in crate::sim) released: bool,
}

/// Runs `statement` of the node with `settings` and process `token` at database time
/// `db_now`.
pub(in crate::sim) fn run_statement(
    table: &mut Table,
    db_now: Instant,
    settings: &ElectionSettings,
    token: ProcessToken,
    statement: Statement,
) -> Ran {
    let (name, me) = (settings.name(), settings.node_id());
    let lease = |term| settings.lease(token, term);
    let before = table.lease_row(name, db_now);
    let (mut started, mut released) = (None, false);
    let reply = match statement {
        Statement::Renew { term, seen } => Reply::Done(table.renew(db_now, &lease(term), seen)),
        Statement::Read => Reply::Row(before),
        Statement::Reacquire { term } => {
            let term_started = table.reacquire(db_now, &lease(term));
            if term_started.is_some() {
                started = Some((before, Some(term)));
            }
            Reply::Started(term_started)
        }
        Statement::Claim { expected } => {
            let term_started = table.claim(db_now, &lease(expected));
            if term_started.is_some() {
                started = Some((before, None));
            }
            Reply::Started(term_started)
        }
        Statement::AcceptHandover { term } => {
            Reply::Done(table.accept_handover(db_now, name, me, term))
        }
        Statement::EnsureRow => {
            table.ensure_row(name, db_now);
            Reply::RowEnsured
        }
        Statement::Release { term, .. } => {
            released = table.release(db_now, &lease(term));
            Reply::Done(released)
        }
    };
    Ran {
        reply,
        started,
        released,
    }
}
