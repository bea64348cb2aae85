//! What the election needs from the database ([`LeaseStore`]), and what the operator
//! commands and the members table need beside it ([`ControlStore`]).

use std::future::Future;
use std::time::Duration;

use super::{Commands, Lease, LeaseRow, Member, MemberRecord, StoreError};

/// What the election needs from the database. Every write names the term it expects and
/// reports whether it took effect.
pub trait LeaseStore: Send {
    /// Reads the row of `name`, if there is one.
    fn get(
        &mut self,
        name: &str,
    ) -> impl Future<Output = Result<Option<LeaseRow>, StoreError>> + Send;
    /// Creates the row of `name`, unheld, if missing. Never grants anything.
    fn ensure_row(&mut self, name: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Takes a released or lapsed lease whose term is still `lease.term`, and starts a new
    /// term, marked with `lease.token` (see [`LeaseRow::started_by`]); the term it started
    /// (`None`: it took nothing). A new term is above the last, and no lower than the
    /// database clock in microseconds since 1970, so that a term lost with its commit is
    /// never started again.
    fn claim(
        &mut self,
        lease: &Lease,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;
    /// Starts a new term, as a claim does, on a row that `lease.holder` still holds in
    /// `lease.term`; the term it started.
    fn reacquire(
        &mut self,
        lease: &Lease,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;
    /// Extends the holder's lease in its term by `lease.ttl` if it is still live (and no
    /// command this renewal has not seen is pending: see [`LeaseStore::renew_seeing`]).
    fn renew(&mut self, lease: &Lease) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.renew_seeing(lease, Commands::default())
    }
    /// [`LeaseStore::renew`], stating the commands pending on the row as the leader last
    /// saw them: if the row's differ, nothing is renewed (`false`), and the leader reads
    /// the row to tell a new command from a lost lease. A store without commands ignores
    /// `seen`.
    fn renew_seeing(
        &mut self,
        lease: &Lease,
        seen: Commands,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// `node` accepts a handover offered to it (see [`StepDownRequest::Offer`]) of the
    /// live lease in `term`, which asks its leader to step down. Whether it did.
    fn accept_handover(
        &mut self,
        name: &str,
        node: &str,
        term: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Gives the row up if the holder still holds it in `lease.term`.
    fn release(&mut self, lease: &Lease) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Keeps the holder's live lease in `lease.term` for `left` more by the database clock
    /// and stops renewing it, instead of releasing it: a lock whose work ended early and
    /// that must stay taken for a minimum time (`leaderd lock --hold-at-least`). The holder
    /// stays on the row. One conditional statement; `false` if the lease was no longer
    /// live. Stores without it answer [`StoreError::Unsupported`].
    fn hold(
        &mut self,
        lease: &Lease,
        left: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = (lease, left);
        async {
            Err(StoreError::Unsupported {
                operation: "hold a lease without renewing it",
            })
        }
    }
    /// Hints that the lease of `name` was released, as soon as the backend can tell
    /// (`None`: it cannot, and waiting nodes poll). A hint to poll now, never a grant.
    fn release_notifications(&self, name: &str) -> Option<tokio::sync::mpsc::Receiver<()>> {
        let _ = name;
        None
    }
}

/// How a leader is asked to give its lease up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepDownRequest<'a> {
    /// `leaderd resign`: step down; anyone may claim.
    Resign,
    /// `leaderd handover --to`: only `to` may claim for two lease lengths, and the leader
    /// is asked only once `to` accepts ([`LeaseStore::accept_handover`]), which a node
    /// does only while it runs and could lead.
    Offer { to: &'a str },
    /// Step down, and only `to` may claim for two lease lengths, without waiting for `to`
    /// (`handover --force`, and a candidate that preempts, being `to` itself).
    Handover { to: &'a str },
}

impl StepDownRequest<'_> {
    /// Whom the request names, owned (to move into a statement), and whether the leader
    /// waits for that node to accept; `None` for a resign.
    pub fn target(self) -> Option<(String, bool)> {
        match self {
            StepDownRequest::Resign => None,
            StepDownRequest::Offer { to } => Some((to.to_owned(), true)),
            StepDownRequest::Handover { to } => Some((to.to_owned(), false)),
        }
    }
}

/// Operator commands (`leaderd pause`, `resume`, `resign`, `handover`) on an election's
/// row, and the members table (`leaderd_member`): what `operator.rs` and `daemon/members.rs` need
/// from a database, beside the election's own [`LeaseStore`]. Each is one statement (and
/// a wake-up of the nodes, where the backend has one); times are by the database clock.
pub trait ControlStore: LeaseStore {
    /// Pauses `name` for `duration` (creating its row if needed) and wakes the nodes.
    fn pause(
        &mut self,
        name: &str,
        duration: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Ends a pause of `name`; whether the row exists.
    fn resume(&mut self, name: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Asks `holder`, leader of `name` in `term`, to step down, or offers its lease to a
    /// node (see [`StepDownRequest`]); `false` if that lease is not live any more.
    fn request_step_down(
        &mut self,
        name: &str,
        holder: &str,
        term: i64,
        request: StepDownRequest<'_>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Records (or refreshes) a member; `fresh` on the process's first record.
    fn record_member(
        &mut self,
        record: &MemberRecord,
        fresh: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Marks a member that lost leadership through preemption: it preempts nobody for `hold`.
    fn hold_preemption(
        &mut self,
        election: &str,
        node_id: &str,
        hold: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The members of `election`, by node id.
    fn members(
        &mut self,
        election: &str,
    ) -> impl Future<Output = Result<Vec<Member>, StoreError>> + Send;
    /// Forgets the members of `election` not seen for [`MEMBER_PRUNE_AFTER`](super::MEMBER_PRUNE_AFTER).
    fn prune_members(
        &mut self,
        election: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Closes the connection, if one is open (for a task that writes seldom).
    fn disconnect(&mut self) {}
}
