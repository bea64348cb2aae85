//! The election loop against the in-memory store, with tokio's clock paused: time only
//! moves when every task waits, so timings are exact and the tests fast. This file holds
//! what every topic shares: a started [`Node`], the safety invariant checked every virtual
//! millisecond, and a log capture.

mod clock_jump;
mod handover;
mod lost_answers;
mod machine;
mod renewals;
mod rounds;
mod settings;
mod stop;
mod suspend;

use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::clock::boottime_by_tokio;
use super::machine::BOOT_LOOK_EVERY;
use super::*;
use crate::store::memory::{Faults, MemoryStore};
use crate::store::{Lease, LeaseStore, ProcessToken};

const ELECTION: &str = "jobs";
const TTL: Duration = Duration::from_millis(1200);
const INTERVAL: Duration = Duration::from_secs(1);
const STEP: Duration = Duration::from_millis(1);

struct Node {
    id: &'static str,
    store: MemoryStore,
    status: watch::Receiver<Status>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Node {
    fn start(table: &MemoryStore, id: &'static str) -> Node {
        let store = table.handle();
        let settings = ElectionSettings::new(ELECTION, id, TTL, INTERVAL).unwrap();
        let (election, status) = Election::new(settings, store.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            election
                .run(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Node {
            id,
            store,
            status,
            stop: Some(stop),
            task,
        }
    }

    fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    fn is_leader(&self) -> bool {
        self.status().role == Role::Leader
    }

    fn faults(&self, faults: Faults) {
        self.store.set_faults(faults);
    }

    async fn stop(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        (&mut self.task).await.unwrap();
    }
}

/// The safety property: whoever acts as leader holds a live lease in the table, in the
/// term it reports; so at most one node acts as leader at any instant.
fn check_invariant(table: &MemoryStore, nodes: &[&Node]) {
    let leaders: Vec<_> = nodes.iter().filter(|n| n.is_leader()).collect();
    assert!(
        leaders.len() <= 1,
        "two leaders at {:?}: {:?}",
        Instant::now(),
        leaders.iter().map(|n| n.id).collect::<Vec<_>>()
    );
    if let Some(leader) = leaders.first() {
        let row = table.row(ELECTION).expect("a leader implies a row");
        let status = leader.status();
        assert_eq!(
            row.live_holder(),
            Some(leader.id),
            "{} acts as leader without a live lease: {row:?}",
            leader.id
        );
        assert_eq!(
            Some(row.term),
            status.term,
            "{} acts as leader in a stale term",
            leader.id
        );
        // Paused time moves tokio's clock only, so compare monotonic instants.
        let deadline = status.lease_deadline.expect("a leader has a deadline");
        assert!(
            deadline <= Instant::now() + row.remaining(),
            "{} may act as leader after its lease lapses",
            leader.id
        );
    }
}

/// Lets `duration` of virtual time pass, checking the invariant every millisecond.
async fn run_checked(duration: Duration, table: &MemoryStore, nodes: &[&Node]) {
    let end = Instant::now() + duration;
    while Instant::now() < end {
        tokio::time::sleep(STEP).await;
        check_invariant(table, nodes);
    }
}

/// Runs until `condition` holds (checking the invariant), and returns how long that took.
async fn until(
    limit: Duration,
    table: &MemoryStore,
    nodes: &[&Node],
    condition: impl Fn() -> bool,
) -> Duration {
    let start = Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < limit,
            "condition not reached within {limit:?}"
        );
        tokio::time::sleep(STEP).await;
        check_invariant(table, nodes);
    }
    start.elapsed()
}

/// Creates the row and takes it in term 1 for "ghost", a holder that never renews.
async fn ghost_holds_a_term(table: &MemoryStore) -> i64 {
    let mut ghost = table.handle();
    ghost.ensure_row(ELECTION).await.unwrap();
    ghost
        .claim(&lease("ghost", 0))
        .await
        .unwrap()
        .expect("the ghost takes the free row")
}

/// `holder`'s lease on the election's row in `term`.
fn lease(holder: &str, term: i64) -> Lease {
    Lease {
        name: ELECTION.to_owned(),
        holder: holder.to_owned(),
        token: ProcessToken::random(),
        ttl: TTL,
        term,
    }
}

/// Collects the log lines written on this thread (the paused-time runtime is
/// single-threaded, so the spawned election logs here too).
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        // tracing caches each callsite's interest for the whole process, from the thread
        // that first reaches it: a parallel test's thread with no subscriber would cache
        // "never", and this capture would miss the event. A do-nothing global subscriber
        // keeps every thread interested; the capture below still gets this thread's.
        static EVERY_THREAD_INTERESTED: std::sync::Once = std::sync::Once::new();
        EVERY_THREAD_INTERESTED.call_once(|| {
            let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
        });
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn count(&self, text: &str) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .matches(text)
            .count()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
