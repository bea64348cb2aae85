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
//! let first_term = guard.term();
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
//! assert!(again.term() > first_term);
//! # drop(again);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep_until};

use crate::election::settings::{
    MAX_DURATION, MAX_NAME_CHARS, Setting, check_name, id_with_suffix,
};
use crate::election::{Election, ElectionSettings, Role, Status};
use crate::store::LeaseStore;

mod error;
mod guard;
mod holding;

pub use error::LockError;
pub use guard::LockGuard;
use holding::HoldingStore;

/// How `leaderd lock NAME` names its row, `lock:NAME`, so that a lock never takes an
/// election's row by mistake; an election's name cannot start with it.
pub const LOCK_ROW_PREFIX: &str = "lock:";

/// The longest name `leaderd lock NAME` takes: its row, `lock:NAME`, must fit the table.
pub const MAX_LOCK_NAME_CHARS: usize = MAX_NAME_CHARS - LOCK_ROW_PREFIX.len();

/// The row of the lock `name` as `leaderd lock NAME` takes it, `lock:NAME`, if `name` is a
/// lock name: an election name's rules (not empty, no white space at either end, no
/// control characters), at most [`MAX_LOCK_NAME_CHARS`] long, each said in the lock's
/// own terms (the prefix is not the user's to count).
pub fn lock_row(name: &str) -> Result<String, LockError> {
    let invalid = |reason: String| LockError::Invalid {
        what: "name",
        value: name.to_owned(),
        reason,
    };
    let chars = name.chars().count();
    if chars > MAX_LOCK_NAME_CHARS {
        return Err(invalid(format!(
            "is {chars} characters long; a lock name has at most {MAX_LOCK_NAME_CHARS}"
        )));
    }
    check_name(Setting::Name, name).map_err(|e| invalid(e.reason(|_| "name")))?;
    Ok(format!("{LOCK_ROW_PREFIX}{name}"))
}

/// The longest a waiting lock goes without reading the row, whatever its ttl.
const MAX_POLL: Duration = Duration::from_secs(1);
/// Shorter leases are mistakes for a lock around a command.
const MIN_TTL: Duration = Duration::from_millis(100);

/// How long a lock keeps trying a failing database before it reports it unavailable.
const UNAVAILABLE_GRACE: Duration = Duration::from_secs(1);

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

#[cfg(test)]
mod tests;
