//! The lease table in memory: [`Table`] states, statement by statement, what the SQL in
//! `dialect/` does to the election's row and the members table, with the database clock
//! passed in; [`MemoryStore`] serves it as a [`LeaseStore`] and a [`ControlStore`] on
//! tokio's clock (so it works with paused time), with faults that can be switched on per
//! handle. The store contract tests (`tests/it/store/contract.rs`) hold it to the same
//! assertions as the SQL stores, so the unit tests and the simulator that run on it cannot
//! drift from what the databases do.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

mod flavour;
mod table;

pub use flavour::{ClockPoint, Flavour, Precision, RenewalStart};
pub use table::{FenceRefusal, Table};

use super::{
    Commands, ControlStore, Lease, LeaseRow, LeaseStore, Member, MemberRecord, StepDownRequest,
    StoreError,
};

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
    /// Claims, renewals, releases, holds (the leader's and preemption's) and step-down
    /// requests take effect but their answers are lost (the caller sees an error).
    pub lose_write_answers: bool,
    /// Like `lose_write_answers`, for the next claim, reacquire, renewal, release or hold
    /// only.
    pub lose_next_write_answer: bool,
}

/// One handle onto a shared in-memory table. [`MemoryStore::handle`] makes another handle
/// onto the same table with faults of its own.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    table: Arc<Mutex<Table>>,
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
        // Its database clock is the wall clock now (the term floor of a claim follows it).
        let mut table = Table::default();
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as i64);
        table.set_clock(Instant::now(), wall);
        MemoryStore {
            table: Arc::new(Mutex::new(table)),
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
            table: Arc::clone(&self.table),
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
        let now = Instant::now();
        self.table
            .lock()
            .unwrap()
            .overwrite(now, name, holder, term, lease);
    }

    /// Moves every stored time `by` later (`later`: the database clock stepped back by as
    /// much) or earlier (it stepped forward).
    pub fn move_times(&self, later: bool, by: Duration) {
        self.table.lock().unwrap().move_times(later, by);
    }

    /// Sets the handover columns of `name` by hand (see [`Table::set_handover`]); the
    /// window ends `until` from now.
    pub fn set_handover(&self, name: &str, to: Option<&str>, until: Option<Duration>) {
        let until = until.map(|until| Instant::now() + until);
        self.table.lock().unwrap().set_handover(name, to, until);
    }

    /// Asks the leader of `name`'s live term to step down, as `leaderd resign` does.
    pub fn request_resign(&self, name: &str) -> bool {
        let now = Instant::now();
        let mut table = self.table.lock().unwrap();
        match table.lease_row(name, now) {
            Some(row) => match row.live_holder().map(str::to_owned) {
                Some(holder) => table.request_resign(now, name, &holder, row.term),
                None => false,
            },
            None => false,
        }
    }

    /// Pauses `name` for `duration`, as `leaderd pause` does.
    pub fn pause(&self, name: &str, duration: Duration) {
        let now = Instant::now();
        self.table.lock().unwrap().pause(now, name, duration);
    }

    /// The row as the table has it now.
    pub fn row(&self, name: &str) -> Option<LeaseRow> {
        self.table.lock().unwrap().lease_row(name, Instant::now())
    }

    /// Runs `op` on the table after the configured latency. Like a real database, an
    /// operation that was sent completes even if the caller stops waiting for it.
    async fn with_table<T: Send + 'static>(
        &self,
        operation: &'static str,
        op: impl FnOnce(&mut Table, Instant) -> T + Send + 'static,
    ) -> Result<T, StoreError> {
        self.operations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *self.last_operation.lock().unwrap() = operation;
        let writes = matches!(
            operation,
            "claim" | "reacquire" | "renew" | "release" | "hold" | "hold_preemption" | "step_down"
        );
        let faults = {
            let mut shared = self.faults.lock().unwrap();
            let for_this_operation = shared.clone();
            if writes {
                shared.lose_next_write_answer = false;
            }
            for_this_operation
        };
        let table = Arc::clone(&self.table);
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
            let value = op(&mut table.lock().unwrap(), Instant::now());
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

impl LeaseStore for MemoryStore {
    async fn get(&mut self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let name = name.to_owned();
        self.with_table("get", move |table, now| table.lease_row(&name, now))
            .await
    }

    async fn ensure_row(&mut self, name: &str) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.with_table("ensure_row", move |table, now| table.ensure_row(&name, now))
            .await
    }

    async fn claim(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        let lease = lease.clone();
        self.with_table("claim", move |table, now| table.claim(now, &lease))
            .await
    }

    async fn reacquire(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        let lease = lease.clone();
        self.with_table("reacquire", move |table, now| table.reacquire(now, &lease))
            .await
    }

    async fn renew_seeing(&mut self, lease: &Lease, seen: Commands) -> Result<bool, StoreError> {
        let lease = lease.clone();
        self.with_table("renew", move |table, now| table.renew(now, &lease, seen))
            .await
    }

    async fn release(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        let lease = lease.clone();
        let releases = self.releases.clone();
        self.with_table("release", move |table, now| {
            let released = table.release(now, &lease);
            if released {
                let _ = releases.send(lease.name);
            }
            released
        })
        .await
    }

    async fn accept_handover(
        &mut self,
        name: &str,
        node: &str,
        term: i64,
    ) -> Result<bool, StoreError> {
        let (name, node) = (name.to_owned(), node.to_owned());
        let releases = self.releases.clone();
        self.with_table("accept_handover", move |table, now| {
            let accepted = table.accept_handover(now, &name, &node, term);
            if accepted {
                // Wakes the leader, as PostgreSQL's notification does.
                let _ = releases.send(name);
            }
            accepted
        })
        .await
    }

    async fn hold(&mut self, lease: &Lease, left: Duration) -> Result<bool, StoreError> {
        let lease = lease.clone();
        self.with_table("hold", move |table, now| table.hold(now, &lease, left))
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
                    biased;
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

impl ControlStore for MemoryStore {
    async fn pause(&mut self, name: &str, duration: Duration) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.with_table("pause", move |table, now| table.pause(now, &name, duration))
            .await
    }

    async fn resume(&mut self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.with_table("resume", move |table, _| table.resume(&name))
            .await
    }

    async fn request_step_down(
        &mut self,
        name: &str,
        holder: &str,
        term: i64,
        request: StepDownRequest<'_>,
    ) -> Result<bool, StoreError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        let target = request.target();
        let releases = self.releases.clone();
        self.with_table("step_down", move |table, now| {
            let asked = match &target {
                Some((to, offer)) => table.request_handover(now, &name, &holder, term, to, *offer),
                None => table.request_resign(now, &name, &holder, term),
            };
            if asked {
                let _ = releases.send(name);
            }
            asked
        })
        .await
    }

    async fn record_member(
        &mut self,
        record: &MemberRecord,
        fresh: bool,
    ) -> Result<(), StoreError> {
        let record = record.clone();
        self.with_table("record_member", move |table, now| {
            table.record_member(now, &record, fresh)
        })
        .await
    }

    async fn hold_preemption(
        &mut self,
        election: &str,
        node_id: &str,
        hold: Duration,
    ) -> Result<(), StoreError> {
        let (election, node_id) = (election.to_owned(), node_id.to_owned());
        self.with_table("hold_preemption", move |table, now| {
            table.hold_preemption(now, &election, &node_id, hold)
        })
        .await
    }

    async fn members(&mut self, election: &str) -> Result<Vec<Member>, StoreError> {
        let election = election.to_owned();
        self.with_table("members", move |table, now| table.members(now, &election))
            .await
    }

    async fn prune_members(&mut self, election: &str) -> Result<(), StoreError> {
        let election = election.to_owned();
        self.with_table("prune_members", move |table, now| {
            table.prune_members(now, &election, super::MEMBER_PRUNE_AFTER)
        })
        .await
    }
}

/// Counts a release listener out when its task ends.
struct ListenerCount(Arc<std::sync::atomic::AtomicI64>);

impl Drop for ListenerCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}
