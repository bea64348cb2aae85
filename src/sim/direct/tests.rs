//! The direct runs' CI budget of seeds, and replays.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{DirectReport, TRACE_LINES, run};

/// Fixed seeds CI runs directly (`LEADERD_SIM_DIRECT_SEEDS` overrides), and fresh ones
/// beside them (`sim/seeds.rs`).
const CI_SEEDS: u64 = 8_000;
const CI_FRESH_SEEDS: u64 = 2_000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs `count` seeds from `first` on every core; the first failing one, run again with
/// its trace.
fn search(first: u64, count: u64) -> Option<DirectReport> {
    let started = std::time::Instant::now();
    let (seeds, statements, steps) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let failure = Mutex::new(None::<u64>);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (seeds, statements, steps, failure) = (&seeds, &statements, &steps, &failure);
            scope.spawn(move || {
                let mut seed = first + t;
                while seed < first + count {
                    if failure.lock().unwrap().is_some_and(|f| f < seed) {
                        return;
                    }
                    let Ok(report) = crate::sim::seeds::bounded(move || run(seed, 0)) else {
                        // Hung or panicked: its replay (below) shows which.
                        let mut found = failure.lock().unwrap();
                        if found.is_none_or(|f| f > seed) {
                            *found = Some(seed);
                        }
                        return;
                    };
                    seeds.fetch_add(1, Ordering::Relaxed);
                    statements.fetch_add(report.statements, Ordering::Relaxed);
                    steps.fetch_add(report.steps, Ordering::Relaxed);
                    if report.violation.is_some() {
                        let mut found = failure.lock().unwrap();
                        if found.is_none_or(|f| f > seed) {
                            *found = Some(seed);
                        }
                        return;
                    }
                    seed += threads;
                }
            });
        }
    });
    let took = started.elapsed().as_secs_f64();
    let seeds = seeds.load(Ordering::Relaxed);
    eprintln!(
        "simulator, driving step directly: {seeds} seeds in {took:.1}s ({:.0} seeds/s, {} statements, {} steps)",
        seeds as f64 / took,
        statements.load(Ordering::Relaxed),
        steps.load(Ordering::Relaxed),
    );
    let failed = failure.lock().unwrap().take();
    failed.map(|seed| {
        crate::sim::seeds::bounded(move || run(seed, TRACE_LINES)).unwrap_or_else(|why| {
            panic!("direct seed {seed} did not finish ({why:?}); replay: LEADERD_SIM_DIRECT_SEED={seed}")
        })
    })
}

#[test]
fn every_property_holds_for_the_ci_seeds_driving_step_directly() {
    let first = env_u64("LEADERD_SIM_FIRST").unwrap_or(0);
    let count = env_u64("LEADERD_SIM_DIRECT_SEEDS").unwrap_or(CI_SEEDS);
    if let Some(report) = search(first, count) {
        panic!("{}", report.explain());
    }
    use crate::sim::seeds::{announce, fresh_base, fresh_count};
    let (base, from) = fresh_base();
    let count = fresh_count(CI_FRESH_SEEDS);
    eprintln!(
        "{}",
        announce("simulator, driving step directly", base, count, &from)
    );
    if let Some(report) = search(base, count) {
        panic!("{}", report.explain());
    }
}

/// `LEADERD_SIM_DIRECT_SEED=N`: runs one seed directly and prints its whole trace; the
/// same seed gives the same trace.
#[test]
fn replay_directly() {
    let Some(seed) = env_u64("LEADERD_SIM_DIRECT_SEED") else {
        return;
    };
    let (first, again) = (run(seed, usize::MAX), run(seed, usize::MAX));
    assert_eq!(first.trace, again.trace, "a seed replays byte for byte");
    eprintln!("{}\n{}", first.explain(), first.trace.join("\n"));
}

/// A direct run is deterministic: the same seed, the same trace.
#[test]
fn a_seed_replays_the_same_trace() {
    for seed in [1, 2, 3] {
        assert_eq!(run(seed, usize::MAX).trace, run(seed, usize::MAX).trace);
    }
}

/// Seeds past the fixed ones that found a bug, replayed on every run (their fixes are
/// named in docs/testing.md): a reacquire lost in doubt, then refused and read back as
/// this node's own, looped every retry pause with its backoff reset (property 5).
#[test]
fn the_seeds_of_the_in_doubt_reacquire_loop_pass() {
    assert_seeds_pass(&[59352, 60996, 61590, 95593]);
}

/// And the three that broke property 4: a resigner's leader work and hold outlasting the
/// faults (44209, 77103: the property now lets them settle, as the tokio-driven one
/// does), and a restart while its host slept (70260, pinned below).
#[test]
fn the_seeds_of_a_slow_resign_and_a_sleeping_restart_pass() {
    assert_seeds_pass(&[44209, 70260, 77103]);
}

fn assert_seeds_pass(seeds: &[u64]) {
    for &seed in seeds {
        let report = run(seed, TRACE_LINES);
        assert!(
            report.violation.is_none(),
            "seed {seed}: {:?}",
            report.violation
        );
    }
}

/// Seed 70260: a process restarted while its host slept (a crash, then a suspend that
/// outlasted it) lagged at the wake by the whole sleep, so its first poll came 10 s late
/// and the election stayed leaderless. It sleeps from its start, and lags by that part.
#[test]
fn a_process_restarted_while_its_host_sleeps_lags_by_its_own_sleep_only() {
    use crate::sim::schedule::{Event, Fault, Scenario};
    use std::time::Duration;
    let secs = Duration::from_secs_f64;
    let mut scenario = Scenario::draw(1);
    scenario.nodes.truncate(1);
    scenario.nodes[0].candidate = true;
    scenario.wall_steps.clear();
    scenario.events = vec![
        Event {
            from: secs(5.0),
            until: secs(15.0),
            fault: Fault::Suspend { node: 0 },
        },
        Event {
            from: secs(10.0),
            until: secs(10.5),
            fault: Fault::Crash {
                node: 0,
                restart: true,
            },
        },
    ];
    scenario.length = secs(15.2);
    let mut world = super::World::new(1, scenario, 0);
    world.run();
    let restarted = world.processes.last().expect("the restart ran");
    assert!(restarted.alive && restarted.started == secs(10.5));
    assert_eq!(
        restarted.slept,
        secs(4.5),
        "asleep from its start to the wake"
    );
    assert!(
        restarted.frozen_until == secs(15.0),
        "it did not run while the host slept"
    );
}

/// The operators' commands meet their connection's faults in direct runs too: some are
/// lost before they reach the row (failed, refused, cut by a restart), the rest reach it
/// late, and every property holds either way.
#[test]
fn operators_meet_their_connections_faults_driving_step_directly() {
    let (mut written, mut lost) = (0, 0);
    for seed in 0..600 {
        let report = run(seed, TRACE_LINES);
        assert!(report.violation.is_none(), "{}", report.explain());
        written += report.operator_writes.0;
        lost += report.operator_writes.1;
    }
    eprintln!("operators' writes in 600 direct runs: {written} written, {lost} lost");
    assert!(written > 100 && lost > 5, "{written} written, {lost} lost");
}
