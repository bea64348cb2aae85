//! A named lock for one piece of work: a lease on a row of the election table, taken once
//! and held while the work runs.
//!
//! A lock is an [`Election`] that holds at most one term: it claims the row with the same
//! single statements, the same database-clock expiry and the same fencing term as the
//! daemon, renews it in the background, and once the lease is lost it is never retaken
//! behind the work's back. The work learns of the loss through [`LockGuard::lost`] early
//! enough to stop before another holder can start: the local deadline is a safety margin
//! ahead of the lapse on the database.
//!
//! ```
//! use leaderd::{DatabaseUrl, LockError, LockOptions, SqlStore, Timeouts};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "multi_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("leaderd-doctest-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! # let path = dir.join("lock.sqlite3");
//! let url = DatabaseUrl::parse(&format!("sqlite://{}", path.display()))?;
//! let timeouts = Timeouts { connect: Duration::from_secs(2), query: Duration::from_secs(2) };
//! let store = || SqlStore::new(url.clone(), timeouts, true);
//!
//! // Try once: either this process holds "nightly-report" now, or someone else does.
//! let report = LockOptions::new("nightly-report", Duration::from_secs(30))?;
//! let guard = report.try_acquire(store()).await?;
//! println!("holding {} in term {}", guard.name(), guard.term());
//!
//! // A second holder is refused, and told who holds the lock and until when.
//! let second = LockOptions::new("nightly-report", Duration::from_secs(30))?;
//! match second.try_acquire(store()).await {
//!     Err(LockError::Held { holder, lapses_in, .. }) => {
//!         assert_eq!(holder, guard.holder());
//!         assert!(lapses_in <= Duration::from_secs(30));
//!     }
//!     other => panic!("expected the lock to be held, got {other:?}"),
//! }
//!
//! // The work runs until it is done or the lock is lost, whichever comes first.
//! let work = tokio::time::sleep(Duration::from_millis(50));
//! tokio::select! {
//!     _ = work => {}
//!     _ = guard.lost() => return Err("lost the lock; the work was stopped".into()),
//! }
//! assert!(guard.is_held());
//! guard.extend().await?; // renews now; the background renewal does this anyway
//! assert!(guard.release().await?);
//!
//! // Released: the next holder gets the lock at once, in a higher term (the fencing token).
//! let again = LockOptions::new("nightly-report", Duration::from_secs(30))?
//!     .try_acquire(store())
//!     .await?;
//! assert!(again.term() > 1);
//! # drop(again);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::election::settings::{MAX_DURATION, Setting, SettingsError, id_with_suffix};
use crate::election::{Election, ElectionSettings, RenewHandle, Role, Status};
use crate::store::{Commands, Lease, LeaseRow, LeaseStore, StoreError};

/// How `leaderd lock NAME` names its row, `lock:NAME`, so that a lock never takes an
/// election's row by mistake; an election's name cannot start with it.
pub const LOCK_ROW_PREFIX: &str = "lock:";

/// The longest a waiting lock goes without reading the row, whatever its ttl.
const MAX_POLL: Duration = Duration::from_secs(1);
/// Shorter leases are mistakes for a lock around a command.
const MIN_TTL: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{}", held_message(.name, .holder, *.term, *.lapses_in, *.waited))]
    Held {
        name: String,
        /// Who holds the lock now.
        holder: String,
        term: i64,
        /// When its lease lapses unless it renews (as the database saw it).
        lapses_in: Duration,
        /// How long this attempt waited before giving up.
        waited: Duration,
    },
    #[error("cannot use the database for lock {name:?}: {source}")]
    Unavailable {
        name: String,
        #[source]
        source: StoreError,
    },
    #[error("cannot use the database for lock {name:?}: the lock's background task ended")]
    TaskEnded { name: String },
    #[error("lock {name:?} was lost in term {term}: its lease was not renewed in time")]
    Lost { name: String, term: i64 },
    #[error("gave up waiting for lock {name:?}")]
    Cancelled { name: String },
    #[error("lock {what} {value:?}: {reason}")]
    Invalid {
        what: &'static str,
        value: String,
        reason: String,
    },
}

fn held_message(
    name: &str,
    holder: &str,
    term: i64,
    lapses_in: Duration,
    waited: Duration,
) -> String {
    let waited = match waited.is_zero() {
        true => String::new(),
        false => format!(
            " (gave up after waiting {})",
            humantime::format_duration(waited)
        ),
    };
    format!(
        "lock {name:?} is held by {holder} (term {term}); its lease lapses in {} unless renewed{waited}",
        humantime::format_duration(round_to_ms(lapses_in))
    )
}

/// How a lock names each election setting.
fn option_name(setting: Setting) -> &'static str {
    match setting {
        Setting::Name => "name",
        Setting::NodeId => "holder",
        Setting::Ttl => "ttl",
        Setting::Interval | Setting::Poll => "renewal interval",
    }
}

impl From<SettingsError> for LockError {
    fn from(error: SettingsError) -> Self {
        LockError::Invalid {
            what: option_name(error.setting()),
            value: error.value(),
            reason: error.reason(option_name),
        }
    }
}

fn round_to_ms(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis() as u64)
}

/// What to lock and how.
#[derive(Debug, Clone)]
pub struct LockOptions {
    name: String,
    holder: String,
    ttl: Duration,
    renew_every: Duration,
}

impl LockOptions {
    /// A lock on `name` with a lease of `ttl`, renewed every third of it, held by
    /// [`LockOptions::default_holder`].
    pub fn new(name: &str, ttl: Duration) -> Result<Self, LockError> {
        let options = LockOptions {
            name: name.to_owned(),
            holder: Self::default_holder(),
            ttl,
            renew_every: ttl / 3,
        };
        options.settings()?;
        Ok(options)
    }

    /// `host:pid:n`, different for every lock a process takes, so that two locks in one
    /// process (or two processes on one host) never pass for the same holder.
    pub fn default_holder() -> String {
        static TAKEN: AtomicU64 = AtomicU64::new(0);
        let host = hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "localhost".to_owned());
        let n = TAKEN.fetch_add(1, Ordering::Relaxed) + 1;
        id_with_suffix(&host, &format!(":{}:{n}", std::process::id()))
    }

    /// Holds the lock under this id instead. It must be unique to this holder: two holders
    /// with one id are one holder to the database.
    pub fn holder(mut self, holder: &str) -> Result<Self, LockError> {
        self.holder = holder.to_owned();
        self.settings()?;
        Ok(self)
    }

    /// Renews this often instead of every third of the ttl.
    pub fn renew_every(mut self, interval: Duration) -> Result<Self, LockError> {
        self.renew_every = interval;
        self.settings()?;
        Ok(self)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn renewal_interval(&self) -> Duration {
        self.renew_every
    }

    /// The election this lock runs, if the options are valid: the election's own rules,
    /// named as the lock's options, plus a lower bound on the ttl.
    fn settings(&self) -> Result<ElectionSettings, LockError> {
        if self.ttl < MIN_TTL || self.ttl > MAX_DURATION {
            return Err(LockError::Invalid {
                what: "ttl",
                value: humantime::format_duration(self.ttl).to_string(),
                reason: "must be between 100ms and 1day".into(),
            });
        }
        let poll = self.renew_every.min(MAX_POLL);
        ElectionSettings::new(&self.name, &self.holder, self.ttl, self.renew_every)
            .and_then(|settings| settings.with_poll(poll))
            .map_err(LockError::from)
    }

    /// Takes the lock if nobody holds it; otherwise fails at once with
    /// [`LockError::Held`] (or [`LockError::Unavailable`] if the database cannot answer).
    pub async fn try_acquire<S>(self, store: S) -> Result<LockGuard, LockError>
    where
        S: LeaseStore + Send + 'static,
    {
        self.acquire(store, Duration::ZERO).await
    }

    /// Takes the lock, waiting up to `wait` for it to come free (`Duration::MAX`: for as
    /// long as it takes). A waiter reads the row at least every renewal interval (and
    /// every second at most), at the moment the holder's lease can lapse, and at once when
    /// the holder releases it where the store can tell (PostgreSQL).
    pub async fn acquire<S>(self, store: S, wait: Duration) -> Result<LockGuard, LockError>
    where
        S: LeaseStore + Send + 'static,
    {
        self.acquire_unless(store, wait, std::future::pending())
            .await
    }

    /// [`LockOptions::acquire`], given up with [`LockError::Cancelled`] when `cancel`
    /// completes first (a signal, say). A claim that was on its way by then is released
    /// before this returns, so a cancelled attempt never leaves the lock held.
    pub async fn acquire_unless<S>(
        self,
        store: S,
        wait: Duration,
        cancel: impl std::future::Future<Output = ()>,
    ) -> Result<LockGuard, LockError>
    where
        S: LeaseStore + Send + 'static,
    {
        let started = Instant::now();
        let give_up_at = started.checked_add(wait);
        let hold_until = Arc::new(Mutex::new(None));
        let store = HoldingStore {
            inner: store,
            hold_until: Arc::clone(&hold_until),
        };
        let (mut election, mut status) = Election::new(self.settings()?, store);
        election.single_term();
        if wait.is_zero() {
            election.poll_only();
        }
        let renew = election.renew_handle();
        let mut round_errors = election.round_errors();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(election.run(async move {
            let _ = stopped.await;
        }));
        let mut guard = LockGuard {
            name: self.name.clone(),
            holder: self.holder.clone(),
            term: 0,
            taken_at: started,
            hold_until,
            status: status.clone(),
            renew,
            stop: Some(stop),
            task: Some(task),
        };
        let mut refusal: Option<LockError> = None;
        let mut cancelled = false;
        // A failing database is retried for a moment even by a caller that will not wait:
        // a busy SQLite file or a reset connection is no outage.
        let unavailable_until = started + UNAVAILABLE_GRACE;
        let gives_up_at = |refusal: &Option<LockError>| match refusal {
            Some(LockError::Unavailable { .. }) => give_up_at.map(|at| at.max(unavailable_until)),
            _ => give_up_at,
        };
        tokio::pin!(cancel);
        loop {
            let deadline = gives_up_at(&refusal);
            let round = tokio::select! {
                changed = status.changed() => changed,
                _ = sleep_until(deadline.unwrap_or(started)), if refusal.is_some() && deadline.is_some() => break,
                _ = &mut cancel => {
                    cancelled = true;
                    break;
                }
            };
            if round.is_err() {
                break;
            }
            let current = status.borrow_and_update().clone();
            match current {
                Status {
                    role: Role::Leader,
                    term: Some(term),
                    ..
                } => {
                    guard.term = term;
                    guard.taken_at = Instant::now();
                    return Ok(guard);
                }
                Status { error: Some(_), .. } => {
                    // The error itself came before this status; the last one is its.
                    let mut last = None;
                    while let Ok(error) = round_errors.try_recv() {
                        last = Some(error);
                    }
                    if let Some(source) = last {
                        refusal = Some(LockError::Unavailable {
                            name: self.name.clone(),
                            source,
                        });
                    }
                }
                Status {
                    role: Role::Follower,
                    leader: Some(holder),
                    term,
                    leader_lease_until,
                    ..
                } if holder != self.holder => {
                    refusal = Some(LockError::Held {
                        name: self.name.clone(),
                        holder,
                        term: term.unwrap_or_default(),
                        lapses_in: leader_lease_until.map_or(Duration::ZERO, |until| {
                            until.saturating_duration_since(Instant::now())
                        }),
                        waited: Duration::ZERO,
                    })
                }
                // Between rounds, or a claim lost to a holder already gone: the next
                // round decides.
                _ => {}
            }
            if refusal.is_some() && gives_up_at(&refusal).is_some_and(|at| Instant::now() >= at) {
                break;
            }
        }
        // Stop the election (releasing a claim that was still in flight) before failing.
        let _ = guard.release().await;
        if cancelled {
            return Err(LockError::Cancelled { name: self.name });
        }
        if let Some(LockError::Held { waited, .. }) = &mut refusal {
            *waited = started.elapsed().min(wait);
        }
        Err(refusal.unwrap_or(LockError::TaskEnded { name: self.name }))
    }
}

/// How long a lock keeps trying a failing database before it reports it unavailable.
const UNAVAILABLE_GRACE: Duration = Duration::from_secs(1);

/// A held lock. It is renewed in the background until [`LockGuard::release`] or drop;
/// dropping it releases the lock from a background task (if the runtime is still running;
/// otherwise the lease lapses after its ttl).
#[derive(Debug)]
pub struct LockGuard {
    name: String,
    holder: String,
    term: i64,
    /// When the claim's answer came (after the database took it).
    taken_at: Instant,
    /// Set by [`LockGuard::release_holding`]: the release becomes a hold until then.
    hold_until: Arc<Mutex<Option<Instant>>>,
    status: watch::Receiver<Status>,
    renew: RenewHandle,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Option<Result<bool, StoreError>>>>,
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

/// The store a lock's election runs on: its release becomes a hold (see
/// [`LockGuard::release_holding`]) once a hold is set and still ahead.
struct HoldingStore<S> {
    inner: S,
    hold_until: Arc<Mutex<Option<Instant>>>,
}

impl<S: LeaseStore> LeaseStore for HoldingStore<S> {
    async fn get(&mut self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        self.inner.get(name).await
    }

    async fn ensure_row(&mut self, name: &str) -> Result<(), StoreError> {
        self.inner.ensure_row(name).await
    }

    async fn claim(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        self.inner.claim(lease).await
    }

    async fn reacquire(&mut self, lease: &Lease) -> Result<bool, StoreError> {
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

#[cfg(test)]
mod tests;
