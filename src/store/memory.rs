//! An in-memory [`LeaseStore`] for unit tests of code built on leases: the same semantics
//! as the SQL store, with tokio's clock as the "database clock" (so it works with paused
//! time) and faults that can be switched on per handle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use super::{LeaseRow, LeaseStore, ProcessToken, StoreError};

#[derive(Debug)]
struct Row {
    holder: Option<String>,
    term: i64,
    lease: Duration,
    renewed_at: Instant,
    term_token: Option<i64>,
    /// `leaderd resign` (see [`MemoryStore::request_resign`]).
    resign_term: Option<i64>,
    /// `leaderd pause` (see [`MemoryStore::pause`]).
    paused_until: Option<Instant>,
}

impl Row {
    fn live(&self, now: Instant) -> bool {
        self.holder.is_some() && now < self.renewed_at + self.lease
    }

    fn paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|until| now < until)
    }
}

/// Faults that apply to one handle's operations (one simulated node's connection).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Every operation fails after `latency`.
    pub fail: bool,
    /// Every operation waits forever (a stalled connection).
    pub hang: bool,
    /// Time before an operation reaches the "database".
    pub latency: Duration,
    /// Time between an operation taking effect and its answer arriving.
    pub answer_delay: Duration,
    /// Claims, renewals and releases take effect but their answers are lost (the caller
    /// sees an error).
    pub lose_write_answers: bool,
    /// Like `lose_write_answers`, for the next claim, reacquire, renewal or release only.
    pub lose_next_write_answer: bool,
}

/// One handle onto a shared in-memory table. [`MemoryStore::handle`] makes another handle
/// onto the same table with faults of its own.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    rows: Arc<Mutex<HashMap<String, Row>>>,
    /// Names released, for [`LeaseStore::release_notifications`] (like PostgreSQL's NOTIFY).
    releases: tokio::sync::broadcast::Sender<String>,
    /// Whether this handle (and handles made from it) offers release notifications.
    notifies: bool,
    /// Release listeners alive now, and ever started, over every handle of the table.
    listeners: Arc<std::sync::atomic::AtomicI64>,
    listeners_started: Arc<std::sync::atomic::AtomicI64>,
    faults: Arc<Mutex<Faults>>,
    /// Operations this handle has sent (round trips, for the SQL store).
    operations: Arc<std::sync::atomic::AtomicU64>,
    /// The name of the last operation sent.
    last_operation: Arc<Mutex<&'static str>>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            rows: Arc::default(),
            releases: tokio::sync::broadcast::channel(16).0,
            notifies: true,
            listeners: Arc::default(),
            listeners_started: Arc::default(),
            faults: Arc::default(),
            operations: Arc::default(),
            last_operation: Arc::default(),
        }
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many release listeners are alive, and how many were ever started (each would
    /// be a connection on PostgreSQL).
    pub fn listeners(&self) -> (i64, i64) {
        (
            self.listeners.load(std::sync::atomic::Ordering::SeqCst),
            self.listeners_started
                .load(std::sync::atomic::Ordering::SeqCst),
        )
    }

    /// A table whose handles offer no release notifications (like MySQL and SQLite).
    pub fn without_release_notifications() -> Self {
        MemoryStore {
            notifies: false,
            ..Self::default()
        }
    }

    /// Another connection to the same table, without faults.
    pub fn handle(&self) -> Self {
        MemoryStore {
            rows: Arc::clone(&self.rows),
            releases: self.releases.clone(),
            notifies: self.notifies,
            listeners: Arc::clone(&self.listeners),
            listeners_started: Arc::clone(&self.listeners_started),
            faults: Arc::default(),
            operations: Arc::default(),
            last_operation: Arc::default(),
        }
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.faults.lock().unwrap() = faults;
    }

    /// How many operations this handle has sent so far.
    pub fn operations(&self) -> u64 {
        self.operations.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn last_operation(&self) -> &'static str {
        *self.last_operation.lock().unwrap()
    }

    /// Replaces the row, as an operator, a stepped database clock or a node of a version
    /// that does not write term tokens might.
    pub fn overwrite(&self, name: &str, holder: &str, term: i64, lease: Duration) {
        self.rows.lock().unwrap().insert(
            name.to_owned(),
            Row {
                holder: Some(holder.to_owned()),
                term,
                lease,
                renewed_at: Instant::now(),
                term_token: None,
                resign_term: None,
                paused_until: None,
            },
        );
    }

    /// Asks the leader of `name`'s live term to step down, as `leaderd resign` does.
    pub fn request_resign(&self, name: &str) -> bool {
        let now = Instant::now();
        match self.rows.lock().unwrap().get_mut(name) {
            Some(row) if row.live(now) => {
                row.resign_term = Some(row.term);
                true
            }
            _ => false,
        }
    }

    /// Pauses `name` for `duration`, as `leaderd pause` does.
    pub fn pause(&self, name: &str, duration: Duration) {
        if let Some(row) = self.rows.lock().unwrap().get_mut(name) {
            row.paused_until = Some(Instant::now() + duration);
        }
    }

    /// The row as the table has it now.
    pub fn row(&self, name: &str) -> Option<LeaseRow> {
        let now = Instant::now();
        self.rows
            .lock()
            .unwrap()
            .get(name)
            .map(|r| to_lease_row(r, now))
    }

    /// Runs `op` on the table after the configured latency. Like a real database, an
    /// operation that was sent completes even if the caller stops waiting for it.
    async fn with_table<T: Send + 'static>(
        &self,
        operation: &'static str,
        op: impl FnOnce(&mut HashMap<String, Row>, Instant) -> T + Send + 'static,
    ) -> Result<T, StoreError> {
        self.operations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *self.last_operation.lock().unwrap() = operation;
        let writes = !matches!(operation, "get" | "ensure_row");
        let faults = {
            let mut shared = self.faults.lock().unwrap();
            let for_this_operation = shared.clone();
            if writes {
                shared.lose_next_write_answer = false;
            }
            for_this_operation
        };
        let rows = Arc::clone(&self.rows);
        tokio::spawn(async move {
            // No sleep at all without latency: a zero sleep waits for the timer's next
            // millisecond tick, a delay the tests of prompt wake-ups would see.
            if !faults.latency.is_zero() {
                tokio::time::sleep(faults.latency).await;
            }
            if faults.hang {
                std::future::pending::<()>().await;
            }
            if faults.fail {
                return Err(StoreError::QueryTimeout {
                    after: faults.latency,
                });
            }
            let value = op(&mut rows.lock().unwrap(), Instant::now());
            if !faults.answer_delay.is_zero() {
                tokio::time::sleep(faults.answer_delay).await;
            }
            if writes && (faults.lose_write_answers || faults.lose_next_write_answer) {
                return Err(StoreError::QueryTimeout {
                    after: faults.latency + faults.answer_delay,
                });
            }
            Ok(value)
        })
        .await
        .expect("memory store operations do not panic")
    }
}

fn to_lease_row(row: &Row, now: Instant) -> LeaseRow {
    LeaseRow {
        holder: row.holder.clone(),
        term: row.term,
        lease: row.lease,
        age: now.saturating_duration_since(row.renewed_at),
        // One clock for everything here.
        clock_offset_us: Some(0),
        term_token: row.term_token,
        pending: super::Pending {
            paused_for: row
                .paused_until
                .filter(|until| now < *until)
                .map(|until| until - now),
            resign_term: row.resign_term,
            ..super::Pending::default()
        },
    }
}

impl LeaseStore for MemoryStore {
    async fn get(&mut self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let name = name.to_owned();
        self.with_table("get", move |rows, now| {
            rows.get(&name).map(|r| to_lease_row(r, now))
        })
        .await
    }

    async fn ensure_row(&mut self, name: &str) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.with_table("ensure_row", move |rows, now| {
            rows.entry(name).or_insert(Row {
                holder: None,
                term: 0,
                lease: Duration::ZERO,
                renewed_at: now,
                term_token: None,
                resign_term: None,
                paused_until: None,
            });
        })
        .await
    }

    async fn claim(
        &mut self,
        name: &str,
        holder: &str,
        token: ProcessToken,
        ttl: Duration,
        expected_term: i64,
    ) -> Result<bool, StoreError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.with_table("claim", move |rows, now| match rows.get_mut(&name) {
            Some(row) if row.term == expected_term && !row.live(now) && !row.paused(now) => {
                *row = Row {
                    holder: Some(holder),
                    term: row.term + 1,
                    lease: ttl,
                    renewed_at: now,
                    term_token: Some(token.for_term(row.term + 1)),
                    resign_term: None,
                    paused_until: row.paused_until,
                };
                true
            }
            _ => false,
        })
        .await
    }

    async fn reacquire(
        &mut self,
        name: &str,
        holder: &str,
        token: ProcessToken,
        ttl: Duration,
        term: i64,
    ) -> Result<bool, StoreError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.with_table("reacquire", move |rows, now| match rows.get_mut(&name) {
            Some(row)
                if row.term == term
                    && row.holder.as_deref() == Some(holder.as_str())
                    && row.resign_term != Some(term)
                    && (row.live(now) || !row.paused(now)) =>
            {
                row.term += 1;
                row.resign_term = None;
                row.term_token = Some(token.for_term(row.term));
                row.lease = ttl;
                row.renewed_at = now;
                true
            }
            _ => false,
        })
        .await
    }

    async fn renew_seeing(
        &mut self,
        name: &str,
        holder: &str,
        ttl: Duration,
        term: i64,
        seen: super::Commands,
    ) -> Result<bool, StoreError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.with_table("renew", move |rows, now| match rows.get_mut(&name) {
            Some(row)
                if row.term == term
                    && row.holder.as_deref() == Some(holder.as_str())
                    && row.live(now)
                    && (row.resign_term == Some(term)) == seen.resign
                    && row.paused(now) == seen.paused =>
            {
                row.lease = ttl;
                row.renewed_at = now;
                true
            }
            _ => false,
        })
        .await
    }

    async fn release(&mut self, name: &str, holder: &str, term: i64) -> Result<bool, StoreError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        let releases = self.releases.clone();
        self.with_table("release", move |rows, now| match rows.get_mut(&name) {
            Some(row) if row.term == term && row.holder.as_deref() == Some(holder.as_str()) => {
                row.holder = None;
                row.renewed_at = now;
                let _ = releases.send(name);
                true
            }
            _ => false,
        })
        .await
    }

    fn release_notifications(&self, name: &str) -> Option<tokio::sync::mpsc::Receiver<()>> {
        if !self.notifies {
            return None;
        }
        let (wake, woken) = tokio::sync::mpsc::channel(1);
        let mut releases = self.releases.subscribe();
        // Like PostgreSQL's listener: one wake once listening, for a release that came
        // between the caller's last read and now.
        let _ = wake.try_send(());
        let name = name.to_owned();
        let listeners = Arc::clone(&self.listeners);
        listeners.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.listeners_started
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::spawn(async move {
            let _listening = ListenerCount(listeners);
            loop {
                tokio::select! {
                    _ = wake.closed() => return,
                    released = releases.recv() => match released {
                        Ok(released) if released != name => {}
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            let _ = wake.try_send(());
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                }
            }
        });
        Some(woken)
    }
}

/// Counts a release listener out when its task ends.
struct ListenerCount(Arc<std::sync::atomic::AtomicI64>);

impl Drop for ListenerCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}
