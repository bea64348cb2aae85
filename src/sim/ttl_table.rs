//! Choosing ttl and interval (issue 29, section 5): spurious leader changes per hour and
//! crash failover under database latency, for a few ttl/interval pairs, measured in
//! virtual time. Three real nodes ([`Process`]: the daemon's `Election`, stop sequence and
//! members task) over the simulated database, every statement of every node delayed as
//! the fault schedule's `SlowStatements` delays it (`db.rs`: three parts, each uniform up
//! to a third of its `max`), with `max` set so that the injected p99 is the one asked.
//!
//! Deterministic and independent of the machine's load. `scripts/bench.sh --only ttl`
//! runs the table (ignored test `table`) and writes it into BENCHMARKS.md; the CI test
//! `smoke` runs one small cell.

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::{Instant, sleep};

use super::db::Dice;
use super::node::Process;
use super::schedule::{Event, Fault, NodeSpec, Scenario};
use super::world::World;
use crate::election::Role;

/// p99 of the sum of three independent uniforms on [0, max/3], as a fraction of `max`:
/// the top tail of that sum has P(S > max - t·max/3) = t³/6, and t³/6 = 0.01.
pub(super) const P99_OF_MAX: f64 = 1.0 - 0.391_487_2 / 3.0;

/// One cell of the table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cell {
    pub(super) ttl: Duration,
    pub(super) interval: Duration,
    /// The injected per-statement latency's p99.
    pub(super) p99: Duration,
}

/// What a cell measured.
#[derive(Debug, Clone, Default)]
pub(super) struct Measured {
    /// Virtual time of the quiet run (no kills).
    pub(super) quiet: Duration,
    /// New terms after the first in the quiet run: each runs on_demoted / on_elected.
    pub(super) new_terms: u64,
    /// Of those, the ones that moved leadership to another node.
    pub(super) moves: u64,
    /// Per kill of the leader: from the SIGKILL to another node publishing itself leader
    /// (`None`: none did within the wait).
    pub(super) failovers: Vec<Option<Duration>>,
    /// p99 of the latencies the dice drew (a check on [`P99_OF_MAX`]).
    pub(super) drawn_p99: Duration,
    pub(super) statements: u64,
    pub(super) violation: Option<String>,
}

/// The terms acted on, first publication of each: term -> (node, when).
#[derive(Default)]
struct Terms {
    seen: Mutex<BTreeMap<i64, (usize, Instant)>>,
    changed: Notify,
}

impl Terms {
    fn last(&self) -> Option<(i64, usize, Instant)> {
        let seen = self.seen.lock().unwrap();
        seen.iter().next_back().map(|(t, (n, at))| (*t, *n, *at))
    }

    /// New terms after `from` (exclusive) and how many of them moved to another node.
    fn changes_after(&self, from: i64) -> (u64, u64) {
        let seen = self.seen.lock().unwrap();
        let mut previous = seen.get(&from).map(|(n, _)| *n);
        let (mut terms, mut moves) = (0, 0);
        for (_, (node, _)) in seen.range(from + 1..) {
            terms += 1;
            if previous.is_some_and(|p| p != *node) {
                moves += 1;
            }
            previous = Some(*node);
        }
        (terms, moves)
    }
}

fn scenario(cell: Cell, length: Duration) -> Scenario {
    let max = cell.p99.div_f64(P99_OF_MAX);
    let nodes = (0..3)
        .map(|i| NodeSpec {
            id: ((b'a' + i as u8) as char).to_string(),
            candidate: true,
            priority: 0,
            preempt_after: Duration::ZERO,
            health_check: false,
            step_down: Duration::ZERO,
        })
        .collect();
    let events = (0..3)
        .map(|node| Event {
            from: Duration::ZERO,
            until: length,
            fault: Fault::SlowStatements { node, max },
        })
        .collect();
    Scenario {
        ttl: cell.ttl,
        interval: cell.interval,
        // PostgreSQL's way: release notifications, the clock read at the write.
        notifies: true,
        clock_at_arrival: false,
        db_clock_ppm: 0,
        query_timeout: cell.ttl,
        nodes,
        events,
        length,
        wall_steps: Vec::new(),
    }
}

/// The p99 of `count` latencies the dice draw for `scenario`'s node 0.
fn drawn_p99(scenario: &Scenario, count: usize) -> Duration {
    let start = Instant::now();
    let mut dice = Dice::new(SmallRng::seed_from_u64(1), start, 0, &scenario.events);
    let mut drawn: Vec<Duration> = (0..count)
        .map(|_| {
            let fate = dice.fate(start);
            fate.there + fate.lock_wait + fate.back
        })
        .collect();
    drawn.sort();
    drawn[count * 99 / 100]
}

struct Cluster {
    world: Arc<World>,
    terms: Arc<Terms>,
    /// Every process ever started (a dropped one would read as SIGTERM), by node.
    processes: Vec<Vec<Process>>,
    rng: SmallRng,
}

impl Cluster {
    fn start(&mut self, node: usize) {
        let incarnation = self.processes[node].len() as u32 + 1;
        let process = Process::start(&self.world, node, incarnation, 0, self.rng.next_u64());
        let mut status = self.world.state.lock().unwrap().processes[process.index]
            .status
            .clone();
        let terms = Arc::clone(&self.terms);
        tokio::spawn(async move {
            while status.changed().await.is_ok() {
                let now = status.borrow().clone();
                if let (Role::Leader, Some(term)) = (now.role, now.term) {
                    let mut seen = terms.seen.lock().unwrap();
                    seen.entry(term).or_insert((node, Instant::now()));
                    drop(seen);
                    terms.changed.notify_waiters();
                }
            }
        });
        self.processes[node].push(process);
    }

    /// Waits until a term after `after` is acted on, for at most `limit`.
    async fn term_after(
        &self,
        after: Option<i64>,
        limit: Duration,
    ) -> Option<(i64, usize, Instant)> {
        let until = Instant::now() + limit;
        loop {
            let changed = self.terms.changed.notified();
            if let Some(last) = self.terms.last().filter(|(t, _, _)| Some(*t) > after) {
                return Some(last);
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                return None;
            }
        }
    }
}

/// Runs `cell`: `quiet` of virtual time without faults but the latency, then `kills`
/// crashes of the leader, each at a random point of its renewal cycle.
pub(super) fn measure(cell: Cell, quiet: Duration, kills: usize, seed: u64) -> Measured {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime for the simulation");
    runtime.block_on(drive(cell, quiet, kills, seed))
}

async fn drive(cell: Cell, quiet: Duration, kills: usize, seed: u64) -> Measured {
    // The latency never ends.
    let scenario = scenario(cell, Duration::from_secs(10 * 365 * 86_400));
    let mut measured = Measured {
        drawn_p99: drawn_p99(&scenario, 100_000),
        ..Measured::default()
    };
    let mut cluster = Cluster {
        world: Arc::new(World::new(scenario)),
        terms: Arc::new(Terms::default()),
        processes: vec![Vec::new(), Vec::new(), Vec::new()],
        rng: SmallRng::seed_from_u64(seed),
    };
    for node in 0..3 {
        sleep(Duration::from_millis(cluster.rng.random_range(0..200))).await;
        cluster.start(node);
    }
    let first = cluster
        .term_after(None, cell.ttl * 10)
        .await
        .expect("three nodes elect a leader");
    // The quiet run, counted from the first term on.
    let quiet_from = Instant::now();
    sleep(quiet).await;
    measured.quiet = Instant::now() - quiet_from;
    (measured.new_terms, measured.moves) = cluster.terms.changes_after(first.0);
    // Kill whichever node leads, at a random point of its renewal cycle; where latency
    // keeps moving the lead, some tries find no leader at that instant, and try again.
    let mut tries = 0;
    while measured.failovers.len() < kills && tries < kills * 20 {
        tries += 1;
        let wait = cell.ttl + cell.interval.mul_f64(cluster.rng.random_range(0.0..3.0));
        sleep(wait).await;
        let leading = cluster.world.state.lock().unwrap().leading.map(|(n, _)| n);
        let Some((term, leader, _)) = cluster.terms.last() else {
            continue;
        };
        if leading != Some(leader) {
            continue;
        }
        let killed_at = Instant::now();
        cluster.processes[leader]
            .last_mut()
            .expect("the leader's process")
            .kill(&cluster.world);
        let next = cluster.term_after(Some(term), cell.ttl * 6).await;
        measured
            .failovers
            .push(next.map(|(_, _, at)| at - killed_at));
        // systemd starts it again.
        cluster.start(leader);
    }
    for process in cluster.processes.iter_mut().flatten() {
        process.kill(&cluster.world);
    }
    let state = cluster.world.state.lock().unwrap();
    measured.statements = state.statements;
    measured.violation = state
        .violation
        .as_ref()
        .map(|v| format!("{}: {}", v.property, v.detail));
    measured
}

/// `q` of the failovers that ended (ms), and how many did not.
pub(super) fn failover_quantile(measured: &Measured, q: f64) -> (f64, usize) {
    let mut done: Vec<Duration> = measured.failovers.iter().flatten().copied().collect();
    let missing = measured.failovers.len() - done.len();
    if done.is_empty() {
        return (f64::NAN, missing);
    }
    done.sort();
    let at = ((done.len() - 1) as f64 * q).round() as usize;
    (done[at].as_secs_f64() * 1000.0, missing)
}

#[cfg(test)]
#[path = "ttl_table_tests.rs"]
mod tests;
