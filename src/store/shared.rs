//! Many elections of one process over a few connections: each operation takes the next
//! connection in turn (waiting for it if another election is using it). For programs that
//! run many elections or many contenders (the scale benchmark); the daemon runs one
//! election and keeps a connection of its own.
//!
//! Each connection is a [`SqlStore`], so everything about it holds here too: one statement
//! per operation, timeouts on both sides, and a connection dropped after any error,
//! timeout or cancellation.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Mutex;

use super::{Commands, DatabaseUrl, Lease, LeaseRow, LeaseStore, SqlStore, StoreError, Timeouts};

/// A cheap-to-clone handle; every clone shares the same connections.
#[derive(Clone)]
pub struct SharedStore {
    connections: Arc<[Mutex<SqlStore>]>,
    next: Arc<AtomicUsize>,
}

impl SharedStore {
    /// `connections` connections to `url` (at least one), opened on first use.
    pub fn new(url: DatabaseUrl, timeouts: Timeouts, connections: usize, migrate: bool) -> Self {
        let connections = (0..connections.max(1))
            .map(|_| Mutex::new(SqlStore::new(url.clone(), timeouts, migrate).without_wake_ups()))
            .collect();
        SharedStore {
            connections,
            next: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The next connection in turn.
    fn pick(&self) -> &Mutex<SqlStore> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        &self.connections[i]
    }
}

impl LeaseStore for SharedStore {
    async fn get(&mut self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        self.pick().lock().await.get(name).await
    }

    async fn ensure_row(&mut self, name: &str) -> Result<(), StoreError> {
        self.pick().lock().await.ensure_row(name).await
    }

    async fn claim(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        self.pick().lock().await.claim(lease).await
    }

    async fn reacquire(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        self.pick().lock().await.reacquire(lease).await
    }

    async fn renew_seeing(&mut self, lease: &Lease, seen: Commands) -> Result<bool, StoreError> {
        self.pick().lock().await.renew_seeing(lease, seen).await
    }

    async fn accept_handover(
        &mut self,
        name: &str,
        node: &str,
        term: i64,
    ) -> Result<bool, StoreError> {
        let connection = self.pick();
        connection
            .lock()
            .await
            .accept_handover(name, node, term)
            .await
    }

    async fn release(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        self.pick().lock().await.release(lease).await
    }

    async fn hold(&mut self, lease: &Lease, left: Duration) -> Result<bool, StoreError> {
        self.pick().lock().await.hold(lease, left).await
    }
}
