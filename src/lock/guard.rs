//! A held lock: renewed in the background, lost early enough for the work to stop.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use super::error::LockError;
use crate::election::{RenewHandle, Role, Status};
use crate::store::{Fence, StoreError};

/// A held lock. It is renewed in the background until [`LockGuard::release`] or drop;
/// dropping it releases the lock from a background task (if the runtime is still running;
/// otherwise the lease lapses after its ttl).
#[derive(Debug)]
pub struct LockGuard {
    pub(super) name: String,
    pub(super) holder: String,
    pub(super) term: i64,
    /// When the claim's answer came (after the database took it).
    pub(super) taken_at: Instant,
    /// Set by [`LockGuard::release_holding`]: the release becomes a hold until then.
    pub(super) hold_until: Arc<Mutex<Option<Instant>>>,
    pub(super) status: watch::Receiver<Status>,
    pub(super) renew: RenewHandle,
    pub(super) stop: Option<oneshot::Sender<()>>,
    pub(super) task: Option<JoinHandle<Option<Result<bool, StoreError>>>>,
}

impl LockGuard {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The fencing token: higher for every later holder of this lock. Pass it along with
    /// writes the lock protects, and have them refuse tokens lower than the last seen.
    pub fn term(&self) -> i64 {
        self.term
    }

    /// The fence of this lock's term: the statement the work runs last in each of its
    /// transactions, so that none of them commits once a later holder has the lock
    /// (docs/fencing.md).
    pub fn fence(&self) -> Fence {
        Fence::new(&self.name, self.term)
    }

    /// Until when this process may act on the lock (monotonic clock), while it holds it.
    pub fn deadline(&self) -> Option<Instant> {
        held_until(&self.status.borrow(), self.term).filter(|&deadline| deadline > Instant::now())
    }

    /// Whether the lock is still held: the last renewal succeeded and its deadline has
    /// not passed.
    pub fn is_held(&self) -> bool {
        self.deadline().is_some()
    }

    /// Completes when the lock is lost: its deadline passed without a renewal, or the
    /// database refused one. Cancel-safe; may be awaited many times.
    pub async fn lost(&self) {
        let mut status = self.status.clone();
        loop {
            let Some(deadline) = held_until(&status.borrow_and_update(), self.term) else {
                return;
            };
            tokio::select! {
                changed = status.changed() => if changed.is_err() { return },
                _ = sleep_until(deadline) => return,
            }
        }
    }

    /// Renews the lease now and returns the new deadline. While the database fails this
    /// keeps trying until the deadline; past it the lock is lost.
    pub async fn extend(&self) -> Result<Instant, LockError> {
        self.renew.renew().await.ok_or_else(|| LockError::Lost {
            name: self.name.clone(),
            term: self.term,
        })
    }

    /// The election's status, for running work fenced to this lock's lease.
    pub(crate) fn status(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }

    /// Stops renewing the lock and gives the row up if it still names this holder in this
    /// term (also after the lock was lost, if nobody took it since): `Ok(true)`. `Ok(false)`:
    /// another holder has it by now. An error means it could not be released; the lease
    /// lapses by itself. Whether the lock was lost before is [`LockGuard::is_held`]'s to
    /// say, before this call.
    pub async fn release(mut self) -> Result<bool, LockError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let released = match self.task.take() {
            Some(task) => task.await.ok().flatten(),
            None => None,
        };
        match released {
            Some(Ok(released)) => Ok(released),
            None => Ok(false),
            Some(Err(source)) => Err(LockError::Unavailable {
                name: self.name.clone(),
                source,
            }),
        }
    }
}

impl LockGuard {
    /// [`LockGuard::release`], except that a lock taken less than `hold_for` ago stays
    /// taken until `hold_for` after it was taken, renewed no more: the rest of the hold is
    /// written into the row as the lease's end, in one statement guarded by this holder
    /// and term, and the lease then lapses by the database clock (ShedLock's
    /// `lockAtLeastFor`). Returns once that statement is answered, so the caller can stop
    /// at once; nothing may act on the lock after this returns. The hold counts from the
    /// claim's answer, which came after the database took the claim, so it never ends
    /// before `hold_for` after the claim by the database clock (clock rates aside).
    /// `Ok(true)`: held (or released, once `hold_for` has passed); `Ok(false)`: the lease
    /// was no longer this holder's to keep.
    pub async fn release_holding(self, hold_for: Duration) -> Result<bool, LockError> {
        let until = self.taken_at.checked_add(hold_for);
        *self.hold_until.lock().unwrap_or_else(|e| e.into_inner()) = until;
        self.release().await
    }

    /// When the lock was taken (the claim's answer), on the monotonic clock.
    pub fn taken_at(&self) -> Instant {
        self.taken_at
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // The election task releases the row on its own once told to stop.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The local deadline while `status` says this node leads in `term`.
fn held_until(status: &Status, term: i64) -> Option<Instant> {
    match status.role {
        Role::Leader if status.term == Some(term) => status.lease_deadline,
        _ => None,
    }
}
