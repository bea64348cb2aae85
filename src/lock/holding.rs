//! The store under a lock's election, which turns the release into a hold for
//! `--hold-at-least`.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use crate::store::{Commands, Lease, LeaseRow, LeaseStore, StoreError};

/// The store a lock's election runs on: its release becomes a hold (see
/// [`LockGuard::release_holding`]) once a hold is set and still ahead.
pub(super) struct HoldingStore<S> {
    pub(super) inner: S,
    pub(super) hold_until: Arc<Mutex<Option<Instant>>>,
}

impl<S: LeaseStore> LeaseStore for HoldingStore<S> {
    async fn get(&mut self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        self.inner.get(name).await
    }

    async fn ensure_row(&mut self, name: &str) -> Result<(), StoreError> {
        self.inner.ensure_row(name).await
    }

    async fn claim(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        self.inner.claim(lease).await
    }

    async fn reacquire(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        self.inner.reacquire(lease).await
    }

    async fn renew_seeing(&mut self, lease: &Lease, seen: Commands) -> Result<bool, StoreError> {
        self.inner.renew_seeing(lease, seen).await
    }

    async fn accept_handover(
        &mut self,
        name: &str,
        node: &str,
        term: i64,
    ) -> Result<bool, StoreError> {
        self.inner.accept_handover(name, node, term).await
    }

    async fn release(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        let until = *self.hold_until.lock().unwrap_or_else(|e| e.into_inner());
        let left = until.map(|until| until.saturating_duration_since(Instant::now()));
        match left {
            Some(left) if !left.is_zero() => self.inner.hold(lease, left).await,
            _ => self.inner.release(lease).await,
        }
    }

    async fn hold(&mut self, lease: &Lease, left: Duration) -> Result<bool, StoreError> {
        self.inner.hold(lease, left).await
    }

    fn release_notifications(&self, name: &str) -> Option<tokio::sync::mpsc::Receiver<()>> {
        self.inner.release_notifications(name)
    }
}
