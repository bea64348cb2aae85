//! The connections onto the simulated database (`database.rs`): [`SimStore`], one connection
//! whose every statement meets the faults its node's dice draw: delays before the
//! database, in the row lock and on the way back, failures before the commit, answers
//! lost after it, and the client's timeout.

use rand::Rng;
use rand::rngs::SmallRng;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

use super::database::{Db, judge_new_term};
use super::schedule::{Event, Fault};
use super::world::{ELECTION, World};
use crate::store::{
    Commands, ControlStore, Lease, LeaseRow, LeaseStore, Member, MemberRecord, StepDownRequest,
    StoreError,
};

/// How often a claim waiting for a fenced transaction looks again.
const FENCE_POLL: Duration = Duration::from_millis(1);

/// Time to open a connection.
pub(super) const CONNECT: Duration = Duration::from_millis(1);

/// What happens to one statement.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Fate {
    /// On the way to the database.
    pub(super) there: Duration,
    /// Waiting for the row lock, after the database read its clock (if it reads it on
    /// arrival).
    pub(super) lock_wait: Duration,
    /// On the way back.
    pub(super) back: Duration,
    pub(super) fail_before_commit: bool,
    pub(super) lose_answer: bool,
}

/// One node's statement faults: its windows from the schedule, and the dice.
pub(super) struct Dice {
    rng: SmallRng,
    windows: Vec<(Instant, Instant, Fault)>,
}

impl Dice {
    pub(super) fn new(rng: SmallRng, start: Instant, node: usize, events: &[Event]) -> Dice {
        let windows = events
            .iter()
            .filter(|e| match e.fault {
                Fault::SlowStatements { node: n, .. }
                | Fault::LostAnswers { node: n, .. }
                | Fault::FailedStatements { node: n, .. } => n == node,
                Fault::RowLockWaits { .. } => true,
                _ => false,
            })
            .map(|e| (start + e.from, start + e.until, e.fault.clone()))
            .collect();
        Dice { rng, windows }
    }

    pub(super) fn fate(&mut self, now: Instant) -> Fate {
        let quick = Duration::from_micros(300);
        let mut fate = Fate {
            there: quick.mul_f64(self.rng.random_range(0.5..2.0)),
            back: quick.mul_f64(self.rng.random_range(0.5..2.0)),
            ..Fate::default()
        };
        for (from, until, fault) in &self.windows {
            if now < *from || now >= *until {
                continue;
            }
            match *fault {
                Fault::SlowStatements { max, .. } => {
                    let mut part = || max.mul_f64(self.rng.random_range(0.0..1.0) / 3.0);
                    fate.there += part();
                    fate.lock_wait += part();
                    fate.back += part();
                }
                Fault::RowLockWaits { max } => {
                    fate.lock_wait += max.mul_f64(self.rng.random_range(0.0..1.0))
                }
                Fault::LostAnswers { p, .. } => fate.lose_answer |= self.rng.random_bool(p),
                Fault::FailedStatements { p, .. } => {
                    fate.fail_before_commit |= self.rng.random_bool(p)
                }
                _ => {}
            }
        }
        fate
    }
}

/// One connection of a node process (or of an operator) to the simulated database.
pub(super) struct SimStore {
    world: Arc<World>,
    /// The process it belongs to (`None`: an operator's).
    process: Option<usize>,
    who: String,
    /// The restart epoch of the open connection; `None`: not connected.
    connected: Option<u64>,
    dice: Arc<Mutex<Dice>>,
    /// The client's bound on a statement (`database.query_timeout`).
    query_timeout: Duration,
}

impl SimStore {
    pub(super) fn new(
        world: &Arc<World>,
        process: Option<usize>,
        who: &str,
        dice: Arc<Mutex<Dice>>,
    ) -> SimStore {
        SimStore {
            world: Arc::clone(world),
            process,
            who: who.to_owned(),
            connected: None,
            dice,
            query_timeout: world.scenario.query_timeout,
        }
    }

    /// Runs one statement: `apply` is what it does to the database at its clock reading.
    async fn statement<T: Debug + Send + 'static>(
        &mut self,
        what: String,
        starts_term: bool,
        apply: impl FnOnce(&mut Db, Instant) -> T + Send + 'static,
    ) -> Result<T, StoreError> {
        let world = Arc::clone(&self.world);
        world.on_send(self.process, &self.who, &what, starts_term);
        let epoch = match self.connected {
            Some(epoch) => epoch,
            None => {
                sleep(CONNECT).await;
                let now = Instant::now();
                let state = world.state.lock().unwrap();
                if state.db.refusing(now) {
                    drop(state);
                    world.trace(&self.who, format!("{what}: connection refused"));
                    return Err(StoreError::ConnectTimeout {
                        url: "sim".into(),
                        after: CONNECT,
                    });
                }
                let epoch = state.db.epoch;
                drop(state);
                self.connected = Some(epoch);
                epoch
            }
        };
        let fate = self.dice.lock().unwrap().fate(Instant::now());
        let who = self.who.clone();
        let at_arrival = world.scenario.clock_at_arrival;
        let task = tokio::spawn(async move {
            if !fate.there.is_zero() {
                sleep(fate.there).await;
            }
            if fate.fail_before_commit {
                world.trace(&who, format!("{what}: failed before the commit"));
                return Err(StoreError::QueryTimeout { after: fate.there });
            }
            let arrived = Instant::now();
            if !fate.lock_wait.is_zero() {
                sleep(fate.lock_wait).await;
            }
            // A claim or reacquire waits for the fenced transactions that hold the row
            // (`fenced.rs`; PostgreSQL's FOR KEY SHARE against its FOR UPDATE).
            while starts_term && world.state.lock().unwrap().db.table.fenced(ELECTION) {
                sleep(FENCE_POLL).await;
            }
            let value = {
                let mut state = world.state.lock().unwrap();
                if state.db.epoch != epoch {
                    drop(state);
                    world.trace(&who, format!("{what}: cut by a restart"));
                    return Err(StoreError::QueryTimeout { after: fate.there });
                }
                let clock = world.db_clock(if at_arrival { arrived } else { Instant::now() });
                let db = &mut state.db;
                db.failures
                    .before_statement(Instant::now() - world.start, &db.table);
                let value = apply(&mut state.db, clock);
                drop(state);
                world.trace(&who, format!("{what} -> {value:?}"));
                value
            };
            world.check();
            if !fate.back.is_zero() {
                sleep(fate.back).await;
            }
            let cut = world.state.lock().unwrap().db.epoch != epoch;
            if fate.lose_answer || cut {
                world.trace(&who, "answer lost".to_owned());
                return Err(StoreError::QueryTimeout {
                    after: fate.there + fate.back,
                });
            }
            Ok(value)
        });
        let answer = match tokio::time::timeout(self.query_timeout, task).await {
            Ok(joined) => joined.expect("simulated statements do not panic"),
            Err(_) => {
                self.world.trace(&self.who, "client timeout".to_owned());
                Err(StoreError::QueryTimeout {
                    after: self.query_timeout,
                })
            }
        };
        if answer.is_err() {
            // As SqlStore does: a connection is never reused after an error.
            self.connected = None;
        }
        answer
    }
}

impl LeaseStore for SimStore {
    async fn get(&mut self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let name = name.to_owned();
        self.statement("get".into(), false, move |db, now| {
            db.table.lease_row(&name, now)
        })
        .await
    }

    async fn ensure_row(&mut self, name: &str) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.statement("ensure_row".into(), false, move |db, now| {
            db.table.ensure_row(&name, now)
        })
        .await
    }

    async fn claim(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        let lease = lease.clone();
        self.statement(format!("claim {}", lease.term), true, move |db, now| {
            let before = db.table.lease_row(&lease.name, now);
            let claimed = db.table.claim(now, &lease);
            if let Some(term) = claimed {
                judge_new_term(db, before, &lease.holder, None);
                let breach = db.failures.issued(term, &lease.holder);
                db.breaches.extend(breach);
            }
            claimed
        })
        .await
    }

    async fn reacquire(&mut self, lease: &Lease) -> Result<Option<i64>, StoreError> {
        let lease = lease.clone();
        self.statement(format!("reacquire {}", lease.term), true, move |db, now| {
            let before = db.table.lease_row(&lease.name, now);
            let reacquired = db.table.reacquire(now, &lease);
            if let Some(term) = reacquired {
                judge_new_term(db, before, &lease.holder, Some(lease.term));
                let breach = db.failures.issued(term, &lease.holder);
                db.breaches.extend(breach);
            }
            reacquired
        })
        .await
    }

    async fn renew_seeing(&mut self, lease: &Lease, seen: Commands) -> Result<bool, StoreError> {
        let lease = lease.clone();
        let described = format!("renew {} {seen:?}", lease.term);
        self.statement(described, false, move |db, now| {
            db.table.renew(now, &lease, seen)
        })
        .await
    }

    async fn release(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        let lease = lease.clone();
        let notifies = self.world.scenario.notifies;
        self.statement(format!("release {}", lease.term), false, move |db, now| {
            let released = db.table.release(now, &lease);
            if released && notifies {
                db.notify(&lease.name);
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
        let notifies = self.world.scenario.notifies;
        self.statement(format!("accept handover {term}"), false, move |db, now| {
            let accepted = db.table.accept_handover(now, &name, &node, term);
            if accepted && notifies {
                db.notify(&name);
            }
            accepted
        })
        .await
    }

    fn release_notifications(&self, name: &str) -> Option<mpsc::Receiver<()>> {
        if !self.world.scenario.notifies {
            return None;
        }
        let (wake, woken) = mpsc::channel(1);
        // Like PostgreSQL's listener: one wake once listening.
        let _ = wake.try_send(());
        self.world
            .state
            .lock()
            .unwrap()
            .db
            .listeners
            .push((name.to_owned(), wake));
        Some(woken)
    }
}

impl ControlStore for SimStore {
    async fn pause(&mut self, name: &str, duration: Duration) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.statement(format!("pause {duration:?}"), false, move |db, now| {
            db.table.pause(now, &name, duration);
            db.notify(&name);
        })
        .await
    }

    async fn resume(&mut self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.statement("resume".into(), false, move |db, _| {
            let found = db.table.resume(&name);
            db.notify(&name);
            found
        })
        .await
    }

    async fn request_step_down(
        &mut self,
        name: &str,
        holder: &str,
        term: i64,
        request: StepDownRequest<'_>,
    ) -> Result<bool, StoreError> {
        if let (Some(process), StepDownRequest::Handover { to }) = (self.process, request) {
            // A node asks: a candidate preempting.
            self.world.check_preemption_wait(process, to);
            self.world.check_preemption(to);
        }
        let (name, holder) = (name.to_owned(), holder.to_owned());
        let what = format!("step down {holder} {term}: {request:?}");
        let target = request.target();
        self.statement(what, false, move |db, now| {
            let asked = match &target {
                Some((to, offer)) => db
                    .table
                    .request_handover(now, &name, &holder, term, to, *offer),
                None => db.table.request_resign(now, &name, &holder, term),
            };
            if asked {
                db.notify(&name);
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
        let what = format!("record member {:?} p={}", record.standing, record.priority);
        self.statement(what, false, move |db, now| {
            db.table.record_member(now, &record, fresh)
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
        self.statement("hold preemption".into(), false, move |db, now| {
            db.table.hold_preemption(now, &election, &node_id, hold)
        })
        .await
    }

    async fn members(&mut self, election: &str) -> Result<Vec<Member>, StoreError> {
        let election = election.to_owned();
        self.statement("members".into(), false, move |db, now| {
            db.table.members(now, &election)
        })
        .await
    }

    async fn prune_members(&mut self, election: &str) -> Result<(), StoreError> {
        let election = election.to_owned();
        self.statement("prune members".into(), false, move |db, now| {
            db.table
                .prune_members(now, &election, crate::store::MEMBER_PRUNE_AFTER)
        })
        .await
    }

    fn disconnect(&mut self) {
        self.connected = None;
    }
}
