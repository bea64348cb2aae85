//! Pinned scenarios for leader work and its fenced writes (properties 15 and 16).

use std::time::Duration;

use super::run_scenario;
use super::schedule::{Event, Fault, NodeSpec, RUN, Scenario};

fn node(id: &str, step_down_ms: u64) -> NodeSpec {
    NodeSpec {
        id: id.to_owned(),
        candidate: true,
        priority: 0,
        preempt_after: Duration::from_secs(10),
        health_check: false,
        step_down: Duration::from_millis(step_down_ms),
    }
}

fn at(from_ms: u64, until_ms: u64, fault: Fault) -> Event {
    Event {
        from: Duration::from_millis(from_ms),
        until: Duration::from_millis(until_ms),
        fault,
    }
}

fn scenario(nodes: Vec<NodeSpec>, events: Vec<Event>) -> Scenario {
    Scenario {
        ttl: Duration::from_millis(1200),
        interval: Duration::from_secs(1),
        notifies: true,
        clock_at_arrival: false,
        db_clock_ppm: 0,
        query_timeout: Duration::from_millis(1200),
        nodes,
        events,
        length: RUN / 2,
        wall_steps: Vec::new(),
    }
}

fn passes(scenario: Scenario) {
    for seed in 0..10 {
        let report = run_scenario(seed, scenario.clone());
        assert!(report.violation.is_none(), "{}", report.explain());
    }
}

/// Each node in turn is stopped (and started again), the leader among them: its leader
/// work, which takes 0.1 to 0.9 s to stop, must be gone before the lease is released.
#[test]
fn a_stopping_leader_releases_only_once_its_work_is_gone() {
    passes(scenario(
        vec![node("a", 100), node("b", 500), node("c", 900)],
        vec![
            at(
                3000,
                4000,
                Fault::Stop {
                    node: 0,
                    restart: true,
                },
            ),
            at(
                8000,
                9000,
                Fault::Stop {
                    node: 1,
                    restart: true,
                },
            ),
            at(
                13000,
                14000,
                Fault::Stop {
                    node: 2,
                    restart: true,
                },
            ),
            at(
                18000,
                19000,
                Fault::Stop {
                    node: 0,
                    restart: true,
                },
            ),
        ],
    ));
}
