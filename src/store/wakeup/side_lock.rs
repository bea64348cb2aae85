//! What a side lock is to the wake-ups: a leaf, so that each kind (`file.rs`,
//! `mysql.rs`) and the task that runs one (`mod.rs`) need not import each other.

use std::future::Future;
use std::time::Duration;

/// The longest single wait for a side lock; a waiting MySQL connection that died without
/// a FIN or RST is noticed after it.
pub(super) const WAIT: Duration = Duration::from_secs(30);

/// One side lock, held by at most one node at a time.
pub(super) trait SideLock: Send + 'static {
    /// Takes the lock if it is free, without waiting.
    fn try_take(&mut self) -> impl Future<Output = Result<bool, String>> + Send;
    /// Takes the lock, waiting for it up to [`WAIT`] (false if it did not come).
    fn take(&mut self) -> impl Future<Output = Result<bool, String>> + Send;
    /// Lets go of the lock.
    fn give_back(&mut self) -> impl Future<Output = Result<(), String>> + Send;
    /// Checks that a held lock is still held.
    fn ping(&mut self) -> impl Future<Output = Result<(), String>> + Send;
    /// Drops the connection or file, and with them the lock.
    fn reset(&mut self);
    /// Why this lock is not one lock for every node of the database, if it is not: then
    /// holding it tells the others nothing, and waiting nodes poll instead.
    fn unshared(&mut self) -> impl Future<Output = Result<Option<String>, String>> + Send;
    /// What wakes waiting nodes when the lock is shared, for the log.
    fn kind(&self) -> &'static str;
}
