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
                    let report = run(seed, 0);
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
    failed.map(|seed| run(seed, TRACE_LINES))
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
    for seed in [59352, 60996, 61590, 95593] {
        let report = run(seed, TRACE_LINES);
        assert!(
            report.violation.is_none(),
            "seed {seed}: {:?}",
            report.violation
        );
    }
}
