//! The handles that steer a running [`Election`](super::Election) from outside: ask it to
//! resign ([`ResignHandle`]), to renew now ([`RenewHandle`]), or to stop claiming
//! ([`ClaimGate`], [`CandidacyGate`]); and the fence of the term it leads in
//! ([`FenceHandle`]), for leader work in the same program.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::{Role, Status};
use crate::store::Fence;

/// A request to renew at once, answered with the new lease deadline, or `None` once the
/// lease is lost.
pub(super) type RenewRequest = oneshot::Sender<Option<Instant>>;

/// Asks a running election to give up leadership: it stops acting as leader, releases the
/// row, and does not claim again for one ttl, so that another node takes over.
#[derive(Debug, Clone)]
pub struct ResignHandle(pub(super) mpsc::Sender<Option<i64>>);

impl ResignHandle {
    /// Resigns from whatever term this node holds.
    pub fn resign(&self) {
        // One pending request is enough.
        let _ = self.0.try_send(None);
    }

    /// Resigns from `term` only: a request that arrives once that term has ended (and
    /// another may have begun) is ignored.
    pub fn resign_term(&self, term: i64) {
        let _ = self.0.try_send(Some(term));
    }
}

/// Asks a running election to renew its lease now (see [`RenewHandle::renew`]).
#[derive(Debug, Clone)]
pub struct RenewHandle(pub(super) mpsc::Sender<RenewRequest>);

impl RenewHandle {
    /// Renews the lease at once (or takes the answer of a renewal already on its way), and
    /// returns the new local deadline when a renewal has succeeded, or `None` if this node does not hold the lease (any more). While the
    /// database fails, the election keeps retrying until the deadline passes.
    pub async fn renew(&self) -> Option<Instant> {
        let (answer, answered) = oneshot::channel();
        self.0.send(answer).await.ok()?;
        answered.await.ok().flatten()
    }
}

/// Closes an election to new claims for good (a stopping node must not take the lease
/// while its hooks step down). Renewals of a lease it holds go on. An election claims only
/// while this gate and every [`CandidacyGate`] it has are open.
///
/// ```compile_fail
/// // A closed stop gate cannot be opened again.
/// leaderd::ClaimGate::default().open();
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClaimGate(Arc<AtomicBool>);

impl ClaimGate {
    pub fn close(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub(super) fn is_closed(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A gate on claims that its one holder closes and opens again (a health check, from
/// [`Election::extra_claim_gate`](super::Election::extra_claim_gate)). A type of its own, so that no holder of the stop
/// gate ([`ClaimGate`]) can reopen that one.
#[derive(Debug, Clone, Default)]
pub struct CandidacyGate(ClaimGate);

impl CandidacyGate {
    pub fn close(&self) {
        self.0.close();
    }

    pub fn open(&self) {
        (self.0).0.store(false, Ordering::SeqCst);
    }

    pub(super) fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// The fence of the term this node leads in (from
/// [`Election::fence_handle`](super::Election::fence_handle)), for leader work in the same
/// program: its writes run [`Fence::check`] last in their transactions, so that none of
/// them commits once another node's term has begun.
#[derive(Debug, Clone)]
pub struct FenceHandle {
    pub(super) election: Arc<str>,
    pub(super) status: watch::Receiver<Status>,
}

impl FenceHandle {
    /// The fence of the current term while this node leads and its lease deadline has not
    /// passed; `None` otherwise (do no leader work then).
    pub fn current(&self) -> Option<Fence> {
        let status = self.status.borrow();
        let leading = status.role == Role::Leader
            && status
                .lease_deadline
                .is_some_and(|deadline| deadline > Instant::now());
        match (leading, status.term) {
            (true, Some(term)) => Some(Fence::new(&self.election, term)),
            _ => None,
        }
    }
}
