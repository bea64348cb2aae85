//! Wake-ups for the backends without LISTEN/NOTIFY: a lock that the leader holds while it
//! leads and lets go of right after its release commits (or that goes away with the
//! leader's connection or process), and that every waiting node waits for.
//!
//! - MySQL/MariaDB: a named lock, `GET_LOCK`, on a side connection (one per node and
//!   election). Names are server-wide, so the name is derived from the database's and the
//!   election's names (see `dialect/`).
//! - SQLite: an exclusive `flock` on a file beside the database, `<db>.wake-<hash>`.
//!
//! Each side lock is in a file of its own (`mysql.rs`, `file.rs`); this one runs them.
//!
//! On a Galera member (`wsrep_on`) a `GET_LOCK` holds on that member only: there the side
//! lock is not used, and waiting nodes poll (logged once).
//!
//! A waiting node that gets the lock after having found it held lets go of it at once (the
//! other waiters wake in turn) and hints its election to look now. Like a notification, a
//! wake-up is only a hint: nothing is decided on it, polling goes on as before, and a lost
//! wake-up, a dead side connection or a lock held by a stale leader cost time, never
//! safety (the claim statement decides). The renew path never waits for any of this: each
//! side lock lives in a task of its own, told by the store what its node holds.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::sleep;
use tracing::{debug, info};

use super::{Backend, DatabaseUrl};
use file::FileLock;
use mysql::MysqlLock;
use side_lock::SideLock;

mod file;
mod mysql;
mod side_lock;

/// How often a held side lock's connection is checked.
const PING_EVERY: Duration = Duration::from_secs(30);
/// Between attempts after a side connection failed.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// A waiting node that finds the lock free (nobody leads, or the new leader has not taken
/// it yet) looks again after this, doubling up to [`FREE_BACKOFF_MAX`].
const FREE_BACKOFF_MIN: Duration = Duration::from_millis(5);
const FREE_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What a side lock's task is told about its election on this node.
#[derive(Default)]
struct Side {
    /// This node holds the lease (so it holds the side lock), as its store last saw.
    leading: bool,
    /// The holder id it leads as: a read that shows another live holder ends `leading`.
    holder: Option<String>,
    /// Where to send wake-ups, while the election waits for them.
    wake: Option<mpsc::Sender<()>>,
}

/// The side locks of one store (or of the connections of a shared store), one per
/// election name, each run by a task that ends with the store.
pub(super) struct Wakeups {
    url: Arc<DatabaseUrl>,
    connect_timeout: Duration,
    sides: Mutex<HashMap<String, watch::Sender<Side>>>,
    enabled: bool,
}

impl Wakeups {
    pub(super) fn new(url: Arc<DatabaseUrl>, connect_timeout: Duration) -> Self {
        Wakeups {
            url,
            connect_timeout,
            sides: Mutex::new(HashMap::new()),
            enabled: true,
        }
    }

    /// Wake-ups that never start a side lock.
    pub(super) fn disabled() -> Self {
        let url = DatabaseUrl::parse("sqlite://:memory:").expect("a valid URL");
        Wakeups {
            enabled: false,
            ..Wakeups::new(Arc::new(url), Duration::ZERO)
        }
    }

    /// Whether this backend wakes through a side lock (`None` for a database nobody else
    /// opens: an in-memory SQLite one).
    fn lock_path(&self, name: &str) -> Option<Option<PathBuf>> {
        if !self.enabled {
            return None;
        }
        match self.url.backend() {
            Backend::Postgres => None,
            Backend::Mysql => Some(None),
            Backend::Sqlite => {
                let path = self.url.sqlite_path();
                (!path.is_empty() && !path.starts_with(":memory:") && !path.contains("mode=memory"))
                    .then(|| Some(PathBuf::from(format!("{path}.wake-{:016x}", fnv1a(name)))))
            }
        }
    }

    /// Changes the side of `name`, starting its task first if needed.
    fn update(&self, name: &str, change: impl FnOnce(&mut Side) -> bool) {
        let Some(path) = self.lock_path(name) else {
            return;
        };
        let mut sides = self.sides.lock().unwrap_or_else(|e| e.into_inner());
        let side = sides.entry(name.to_owned()).or_insert_with(|| {
            let (side, watched) = watch::channel(Side::default());
            let (url, connect_timeout) = (Arc::clone(&self.url), self.connect_timeout);
            let election = name.to_owned();
            match path {
                Some(path) => {
                    tokio::spawn(run_side(FileLock { path, held: None }, election, watched))
                }
                None => tokio::spawn(run_side(
                    MysqlLock {
                        url,
                        connect_timeout,
                        name: election.clone(),
                        conn: None,
                    },
                    election,
                    watched,
                )),
            };
            side
        });
        side.send_if_modified(change);
    }

    /// This node now holds `name` as `holder` (or no longer does).
    pub(super) fn leading(&self, name: &str, holder: Option<&str>) {
        let known = self
            .sides
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(name);
        // Nothing to let go of where nothing was held.
        if holder.is_none() && !known {
            return;
        }
        self.update(name, |side| {
            let changed = side.leading != holder.is_some();
            side.leading = holder.is_some();
            side.holder = holder.map(str::to_owned);
            changed
        });
    }

    /// A read of `name` showed `live_holder`: if that is not who this node leads as, it
    /// leads no more.
    pub(super) fn seen(&self, name: &str, live_holder: Option<&str>) {
        let sides = self.sides.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(side) = sides.get(name) {
            side.send_if_modified(|side| {
                let lost = side.leading && side.holder.as_deref() != live_holder;
                if lost {
                    side.leading = false;
                }
                lost
            });
        }
    }

    /// Wake-ups for `name` (see [`super::LeaseStore::release_notifications`]), or `None`
    /// where this backend has no side lock.
    pub(super) fn wake_ups(&self, name: &str) -> Option<mpsc::Receiver<()>> {
        self.lock_path(name)?;
        let (wake, woken) = mpsc::channel(1);
        self.update(name, |side| {
            side.wake = Some(wake);
            true
        });
        Some(woken)
    }
}

/// 64-bit FNV-1a: a hash that every version and build of every node computes alike.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The task of one side lock: holds it while this node leads, waits for it while the
/// election wants wake-ups, and stops when the store is dropped.
async fn run_side<L: SideLock>(mut lock: L, election: String, mut side: watch::Receiver<Side>) {
    let mut backoff = FREE_BACKOFF_MIN;
    let mut reported = false;
    let mut checked = false;
    loop {
        let (leading, wake) = {
            let side = side.borrow_and_update();
            let wake = side.wake.clone().filter(|wake| !wake.is_closed());
            (side.leading, wake)
        };
        // Once, before the lock is first used: a lock that not every node shares (a
        // Galera member's GET_LOCK) would make a waiting node on another member find it
        // free whenever it looks, and look again and again. Polling alone is clean: one
        // statement per round, and a release seen within one interval.
        if !checked && (leading || wake.is_some()) {
            match lock.unshared().await {
                Ok(Some(why)) => {
                    lock.reset();
                    info!(
                        %election,
                        "wake-ups off: {why}; waiting nodes poll (one statement per round, a \
                         release seen within one interval)"
                    );
                    return;
                }
                Ok(None) => {
                    checked = true;
                    info!(%election, "wake-ups through {}", lock.kind());
                }
                // The lock's own use below fails too, and is reported there.
                Err(_) => {}
            }
        }
        let taken = if leading {
            tokio::select! {
                taken = lock.take() => taken.map(|taken| (taken, false)),
                _ = wait_until(&mut side, false) => {
                    lock.reset();
                    continue;
                }
            }
        } else if let Some(wake) = &wake {
            match lock.try_take().await {
                // Free: nobody leads, or the new leader has not taken it yet.
                Ok(true) if !side.borrow().leading => {
                    let _ = lock.give_back().await;
                    tokio::select! {
                        _ = sleep(backoff) => {}
                        _ = wake.closed() => {}
                        changed = side.changed() => if changed.is_err() { return },
                    }
                    backoff = (backoff * 2).min(FREE_BACKOFF_MAX);
                    continue;
                }
                Ok(true) => Ok((true, false)),
                Ok(false) => {
                    backoff = FREE_BACKOFF_MIN;
                    // Held: wait for its holder to let go, unless this node starts to lead
                    // meanwhile (then the wait is dropped with its connection).
                    tokio::select! {
                        taken = lock.take() => taken.map(|taken| (taken, true)),
                        _ = wait_until(&mut side, true) => {
                            lock.reset();
                            continue;
                        }
                    }
                }
                Err(error) => Err(error),
            }
        } else {
            // Neither leading nor waited for: no connection needed.
            lock.reset();
            if side.changed().await.is_err() {
                return;
            }
            continue;
        };
        match taken {
            Ok((true, waited)) => {
                reported = false;
                if side.borrow().leading {
                    if !hold(&mut lock, &mut side).await {
                        return;
                    }
                } else {
                    if let Some(wake) = wake.as_ref().filter(|_| waited) {
                        debug!(%election, "wake-up: the lease holder let go");
                        let _ = wake.try_send(());
                    }
                    if lock.give_back().await.is_err() {
                        lock.reset();
                    }
                }
            }
            Ok((false, _)) => {}
            Err(error) => {
                lock.reset();
                if !reported {
                    info!(%election, %error, "wake-ups unavailable; relying on polling");
                    reported = true;
                }
                tokio::select! {
                    _ = sleep(RETRY_AFTER) => {}
                    changed = side.changed() => if changed.is_err() { return },
                }
            }
        }
    }
}

/// Completes once the side says whether this node leads as `leading` (never, once the
/// store is gone).
async fn wait_until(side: &mut watch::Receiver<Side>, leading: bool) {
    if side.wait_for(|side| side.leading == leading).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Holds the lock until this node stops leading; false once the store is gone.
async fn hold<L: SideLock>(lock: &mut L, side: &mut watch::Receiver<Side>) -> bool {
    loop {
        tokio::select! {
            changed = side.changed() => {
                let gone = changed.is_err();
                if gone || !side.borrow().leading {
                    if lock.give_back().await.is_err() || gone {
                        lock.reset();
                    }
                    return !gone;
                }
            }
            _ = sleep(PING_EVERY) => if lock.ping().await.is_err() {
                lock.reset();
                return true;
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn the_name_hash_is_fixed() {
        // Nodes of every build must agree on the file and lock names.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
