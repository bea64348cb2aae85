//! How long two processes act as leader after a failover that lost acknowledged commits,
//! by promotion delay: a table measured over direct runs, each with one rollback of up to
//! [`MOST_LOST`](crate::sim::failures::MOST_LOST) forced into its seed's scenario. Every
//! other property must hold in them (property 3 above all: no term is issued twice).
//! `LEADERD_SIM_OVERLAP_SEEDS=2000 cargo test --lib sim::direct::overlap -- --nocapture`.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;

use super::run_scenario;
use crate::sim::failures::MOST_LOST;
use crate::sim::schedule::{Event, Fault, Scenario};

/// Seeds per promotion delay in CI.
const CI_SEEDS: u64 = 150;

/// The promotion delays measured, in ttls.
const DELAYS: [f64; 6] = [0.0, 0.25, 0.5, 1.0, 1.5, 3.0];

/// `seed`'s scenario with one failover (and no other) that loses up to [`MOST_LOST`]
/// and promotes `delay` ttls later.
fn with_failover(seed: u64, delay: f64) -> Scenario {
    let mut scenario = Scenario::draw(seed);
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x07e7_01a9);
    scenario
        .events
        .retain(|e| !matches!(e.fault, Fault::Failover { .. }));
    let from = Duration::from_millis(rng.random_range(3_000..40_000));
    let delay = scenario.ttl.mul_f64(delay);
    scenario.events.push(Event {
        from,
        until: from + delay,
        fault: Fault::Failover {
            lost: MOST_LOST.mul_f64(rng.random_range(0.0..1.0)),
            delay,
            clock_us: rng.random_range(-2_000..=2_000),
        },
    });
    scenario.events.sort_by_key(|e| e.from);
    scenario
}

#[test]
fn the_overlap_after_a_lost_commit_by_promotion_delay() {
    let seeds = std::env::var("LEADERD_SIM_OVERLAP_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_SEEDS);
    let started = std::time::Instant::now();
    let mut table = String::from(
        "| promotion delay | runs | runs with two leaders | mean overlap of those | longest |\n|---|---|---|---|---|\n",
    );
    for delay in DELAYS {
        let mut overlaps = Vec::new();
        for seed in 0..seeds {
            let report = run_scenario(seed, with_failover(seed, delay), 0);
            if report.violation.is_some() {
                let again = run_scenario(seed, with_failover(seed, delay), super::TRACE_LINES);
                panic!("with a failover {delay} ttl late: {}", again.explain());
            }
            let ttl = Scenario::draw(seed).ttl;
            for overlap in report.failovers.iter().map(|f| f.overlap()) {
                if delay >= 1.0 && !overlap.is_zero() {
                    eprintln!("seed {seed}: {overlap:?} after a promotion {delay} ttl late");
                }
                overlaps.push(overlap.div_duration_f64(ttl));
            }
        }
        let with: Vec<f64> = overlaps.into_iter().filter(|o| *o > 0.0).collect();
        let mean = match with.len() {
            0 => 0.0,
            n => with.iter().sum::<f64>() / n as f64,
        };
        let longest = with.iter().copied().fold(0.0, f64::max);
        table.push_str(&format!(
            "| {delay} ttl | {seeds} | {} | {mean:.2} ttl | {longest:.2} ttl |\n",
            with.len(),
        ));
    }
    eprintln!("{table}({:.1}s)", started.elapsed().as_secs_f64());
}

/// `LEADERD_SIM_OVERLAP_SEED=N LEADERD_SIM_OVERLAP_DELAY=1.5`: one seed's run with its
/// forced failover, and its whole trace.
#[test]
fn replay_with_a_failover() {
    let var = |name| std::env::var(name).ok().and_then(|v| v.parse::<f64>().ok());
    let (Some(seed), Some(delay)) = (
        var("LEADERD_SIM_OVERLAP_SEED"),
        var("LEADERD_SIM_OVERLAP_DELAY"),
    ) else {
        return;
    };
    let report = run_scenario(seed as u64, with_failover(seed as u64, delay), usize::MAX);
    eprintln!(
        "{}\n{:?}\n{}",
        report.explain(),
        report.failovers,
        report.trace.join("\n")
    );
}
