//! The lease table in memory: [`Table`] states, statement by statement, what the SQL in
//! `dialect.rs` does to the election's row and the members table, with the database clock
//! passed in; [`MemoryStore`] serves it as a [`LeaseStore`] and a [`ControlStore`] on
//! tokio's clock (so it works with paused time), with faults that can be switched on per
//! handle. The store contract tests (`tests/it/store/contract.rs`) hold it to the same
//! assertions as the SQL stores, so the unit tests and the simulator that run on it cannot
//! drift from what the databases do.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use super::{
    Commands, ControlStore, Lease, LeaseRow, LeaseStore, Member, MemberRecord, MemberStanding,
    Pending, StepDownRequest, StoreError,
};

/// One election's row (`service_leader_lock`).
#[derive(Debug, Clone)]
struct Row {
    holder: Option<String>,
    term: i64,
    lease: Duration,
    /// The database time of the last claim, renewal or release (`"timestamp"`).
    renewed_at: Instant,
    /// When the current term started (`taken_at`; `None` until a claim).
    taken_at: Option<Instant>,
    term_token: Option<i64>,
    resign_term: Option<i64>,
    paused_until: Option<Instant>,
    handover_to: Option<String>,
    handover_until: Option<Instant>,
}

impl Row {
    fn unheld(now: Instant) -> Row {
        Row {
            holder: None,
            term: 0,
            lease: Duration::ZERO,
            renewed_at: now,
            taken_at: None,
            term_token: None,
            resign_term: None,
            paused_until: None,
            handover_to: None,
            handover_until: None,
        }
    }

    /// Held, and the lease not lapsed by the database clock.
    fn live(&self, now: Instant) -> bool {
        self.holder.is_some() && now < self.renewed_at + self.lease
    }

    fn paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|until| now < until)
    }

    /// `handover_to IS NULL OR handover_until <= now OR handover_to = node`.
    fn open_to(&self, node: &str, now: Instant) -> bool {
        match (&self.handover_to, self.handover_until) {
            (Some(to), Some(until)) => until <= now || to == node,
            _ => true,
        }
    }

    /// A handover's window is open: `handover_to IS NOT NULL AND handover_until > now`.
    fn offered(&self, now: Instant) -> bool {
        self.handover_to.is_some() && self.handover_until.is_some_and(|until| now < until)
    }

    /// The row shows `lease`'s holder in `lease.term`.
    fn held_by(&self, lease: &Lease) -> bool {
        self.term == lease.term && self.holder.as_deref() == Some(lease.holder.as_str())
    }

    /// What a new term starts with: the commands of the old one are done.
    fn start_term(&mut self, lease: &Lease, now: Instant) {
        self.term += 1;
        self.holder = Some(lease.holder.clone());
        self.term_token = Some(lease.token.for_term(self.term));
        self.lease = lease.ttl;
        self.renewed_at = now;
        self.taken_at = Some(now);
        self.handover_to = None;
        self.handover_until = None;
        self.resign_term = None;
    }

    fn to_lease_row(&self, now: Instant) -> LeaseRow {
        let left = |until: Option<Instant>| until.filter(|u| now < *u).map(|u| u - now);
        LeaseRow {
            holder: self.holder.clone(),
            term: self.term,
            lease: self.lease,
            age: now.saturating_duration_since(self.renewed_at),
            // One clock for everything here.
            clock_offset_us: Some(0),
            term_token: self.term_token,
            held_for: self
                .taken_at
                .map(|taken| now.saturating_duration_since(taken)),
            pending: Pending {
                paused_for: left(self.paused_until),
                // As the SQL reads it: only while its window lasts.
                handover_to: self.handover_to.clone().filter(|_| self.offered(now)),
                handover_for: left(self.handover_until),
                resign_term: self.resign_term,
            },
        }
    }
}

/// One node's row in `leaderd_member`.
#[derive(Debug, Clone)]
struct MemberRow {
    candidate: bool,
    standing: MemberStanding,
    priority: i64,
    version: String,
    host: String,
    started: Instant,
    last_seen: Instant,
    no_preempt_until: Option<Instant>,
}

/// The tables, statement by statement. Every method is one statement of `dialect.rs`, run
/// at database time `now`, and answers what the SQL answers (for a write: whether it
/// matched the row).
#[derive(Debug, Default, Clone)]
pub struct Table {
    rows: BTreeMap<String, Row>,
    members: BTreeMap<(String, String), MemberRow>,
}

impl Table {
    pub fn lease_row(&self, name: &str, now: Instant) -> Option<LeaseRow> {
        self.rows.get(name).map(|row| row.to_lease_row(now))
    }

    pub fn ensure_row(&mut self, name: &str, now: Instant) {
        self.rows
            .entry(name.to_owned())
            .or_insert_with(|| Row::unheld(now));
    }

    /// Takes a released or lapsed lease in `lease.term`, unless paused or handed over to
    /// another node.
    pub fn claim(&mut self, now: Instant, lease: &Lease) -> bool {
        match self.rows.get_mut(&lease.name) {
            Some(row)
                if row.term == lease.term
                    && !row.live(now)
                    && !row.paused(now)
                    && row.open_to(&lease.holder, now) =>
            {
                row.start_term(lease, now);
                true
            }
            _ => false,
        }
    }

    /// Starts the next term on a row the holder still holds in `lease.term`, unless asked
    /// to resign it, handed over to another node, or paused with the lease lapsed.
    pub fn reacquire(&mut self, now: Instant, lease: &Lease) -> bool {
        match self.rows.get_mut(&lease.name) {
            Some(row)
                if row.held_by(lease)
                    && row.resign_term != Some(lease.term)
                    && row.open_to(&lease.holder, now)
                    && (!row.paused(now) || row.live(now)) =>
            {
                row.start_term(lease, now);
                true
            }
            _ => false,
        }
    }

    /// Extends a live lease of the holder in `lease.term` if the commands pending on the
    /// row are the ones it has seen. The lease never starts earlier than it did (MySQL's
    /// `GREATEST`: a renewal that waited for the row lock reads an earlier clock).
    pub fn renew(&mut self, now: Instant, lease: &Lease, seen: Commands) -> bool {
        match self.rows.get_mut(&lease.name) {
            Some(row)
                if row.held_by(lease)
                    && row.live(now)
                    && (row.resign_term == Some(lease.term)) == seen.resign
                    && row.paused(now) == seen.paused =>
            {
                row.lease = lease.ttl;
                row.renewed_at = row.renewed_at.max(now);
                true
            }
            _ => false,
        }
    }

    /// Gives the row up; a handover its leader was asked for gets its window anew.
    pub fn release(&mut self, now: Instant, lease: &Lease) -> bool {
        match self.rows.get_mut(&lease.name) {
            Some(row) if row.held_by(lease) => {
                row.holder = None;
                row.renewed_at = now;
                if row.handover_to.is_some() && row.resign_term == Some(lease.term) {
                    row.handover_until = Some(now + row.lease * 2);
                }
                true
            }
            _ => false,
        }
    }

    /// `leaderd pause`: creates the row if needed, as the command does.
    pub fn pause(&mut self, now: Instant, name: &str, duration: Duration) {
        self.ensure_row(name, now);
        if let Some(row) = self.rows.get_mut(name) {
            row.paused_until = Some(now + duration);
        }
    }

    /// `leaderd resume`; whether the row exists.
    pub fn resume(&mut self, name: &str) -> bool {
        match self.rows.get_mut(name) {
            Some(row) => {
                row.paused_until = None;
                true
            }
            None => false,
        }
    }

    /// `leaderd resign`: asks the leader of a live term to step down.
    pub fn request_resign(&mut self, now: Instant, name: &str, holder: &str, term: i64) -> bool {
        match self.rows.get_mut(name) {
            Some(row)
                if row.term == term
                    && row.holder.as_deref() == Some(holder)
                    && row.resign_term != Some(term)
                    && !row.offered(now)
                    && row.live(now) =>
            {
                row.resign_term = Some(term);
                true
            }
            _ => false,
        }
    }

    /// `leaderd handover --to`: only `to` may claim for two lease lengths; the leader is
    /// asked to step down at once (`offer` false), or once `to` accepts.
    pub fn request_handover(
        &mut self,
        now: Instant,
        name: &str,
        holder: &str,
        term: i64,
        to: &str,
        offer: bool,
    ) -> bool {
        match self.rows.get_mut(name) {
            Some(row)
                if row.term == term
                    && row.holder.as_deref() == Some(holder)
                    && row.resign_term != Some(term)
                    && !row.offered(now)
                    && row.live(now) =>
            {
                if !offer {
                    row.resign_term = Some(term);
                }
                row.handover_to = Some(to.to_owned());
                row.handover_until = Some(now + row.lease * 2);
                true
            }
            _ => false,
        }
    }

    /// `node` accepts the handover offered to it of a live lease in `term`.
    pub fn accept_handover(&mut self, now: Instant, name: &str, node: &str, term: i64) -> bool {
        match self.rows.get_mut(name) {
            Some(row)
                if row.handover_to.as_deref() == Some(node)
                    && row.holder.as_deref().is_some_and(|h| h != node)
                    && row.term == term
                    && row.handover_until.is_some_and(|until| now < until)
                    && row.live(now) =>
            {
                row.resign_term = Some(term);
                true
            }
            _ => false,
        }
    }

    /// One of the [`StepDownRequest`]s.
    pub fn request_step_down(
        &mut self,
        now: Instant,
        name: &str,
        holder: &str,
        term: i64,
        request: StepDownRequest<'_>,
    ) -> bool {
        match request {
            StepDownRequest::Resign => self.request_resign(now, name, holder, term),
            StepDownRequest::Offer { to } => {
                self.request_handover(now, name, holder, term, to, true)
            }
            StepDownRequest::Handover { to } => {
                self.request_handover(now, name, holder, term, to, false)
            }
        }
    }

    pub fn record_member(&mut self, now: Instant, record: &MemberRecord, fresh: bool) {
        let key = (record.election.clone(), record.node_id.clone());
        let member = self.members.entry(key).or_insert_with(|| MemberRow {
            candidate: record.candidate(),
            standing: record.standing,
            priority: record.priority,
            version: record.version.clone(),
            host: record.host.clone(),
            started: now,
            last_seen: now,
            no_preempt_until: None,
        });
        member.candidate = record.candidate();
        member.standing = record.standing;
        member.priority = record.priority;
        member.version = record.version.clone();
        member.host = record.host.clone();
        member.last_seen = now;
        if fresh {
            member.started = now;
        }
    }

    pub fn hold_preemption(&mut self, now: Instant, election: &str, node_id: &str, hold: Duration) {
        if let Some(member) = self
            .members
            .get_mut(&(election.to_owned(), node_id.to_owned()))
        {
            // A hold is never shortened: a preemption's short hold must not undo an
            // operator's longer one.
            member.no_preempt_until = member.no_preempt_until.max(Some(now + hold));
        }
    }

    /// The members of `election`, by node id.
    pub fn members(&self, now: Instant, election: &str) -> Vec<Member> {
        self.members
            .iter()
            .filter(|((e, _), _)| e == election)
            .map(|((_, node_id), m)| Member {
                node_id: node_id.clone(),
                candidate: m.candidate,
                standing: Some(m.standing),
                priority: m.priority,
                version: m.version.clone(),
                host: m.host.clone(),
                member_for: now.saturating_duration_since(m.started),
                seen_ago: now.saturating_duration_since(m.last_seen),
                no_preempt_for: m.no_preempt_until.filter(|u| now < *u).map(|u| u - now),
            })
            .collect()
    }

    pub fn prune_members(&mut self, now: Instant, election: &str, older_than: Duration) {
        self.members
            .retain(|(e, _), m| e != election || m.last_seen + older_than >= now);
    }

    /// Replaces the row, as an operator, a stepped database clock or a node of a version
    /// that does not write term tokens might.
    pub fn overwrite(
        &mut self,
        now: Instant,
        name: &str,
        holder: &str,
        term: i64,
        lease: Duration,
    ) {
        let row = self
            .rows
            .entry(name.to_owned())
            .or_insert_with(|| Row::unheld(now));
        *row = Row {
            holder: Some(holder.to_owned()),
            term,
            lease,
            renewed_at: now,
            ..Row::unheld(now)
        };
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
        MemoryStore {
            table: Arc::default(),
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
        let writes = matches!(operation, "claim" | "reacquire" | "renew" | "release");
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

    async fn claim(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        let lease = lease.clone();
        self.with_table("claim", move |table, now| table.claim(now, &lease))
            .await
    }

    async fn reacquire(&mut self, lease: &Lease) -> Result<bool, StoreError> {
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
        let (offer, to) = match request {
            StepDownRequest::Resign => (false, None),
            StepDownRequest::Offer { to } => (true, Some(to.to_owned())),
            StepDownRequest::Handover { to } => (false, Some(to.to_owned())),
        };
        let releases = self.releases.clone();
        self.with_table("step_down", move |table, now| {
            let asked = match &to {
                Some(to) => table.request_handover(now, &name, &holder, term, to, offer),
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
