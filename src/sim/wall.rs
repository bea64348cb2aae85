//! The nodes' wall clocks: where they start, and the steps NTP or an operator gives them
//! over a run (drawn with the scenario; `readers.rs` reads them).

use rand::Rng;
use rand::rngs::SmallRng;
use std::time::{Duration, SystemTime};

/// A step of one node's wall clock, at a virtual time since the run began.
#[derive(Debug, Clone)]
pub(super) struct WallStep {
    pub(super) at: Duration,
    pub(super) node: usize,
    /// Forward (positive) or back, in milliseconds.
    pub(super) by_ms: i64,
}

/// The wall clocks' readings at the start of a run (as the direct runs have it).
pub(super) fn wall_base() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// Steps of the nodes' wall clocks over the busy part of a run: none in most runs, a few
/// of a fraction of a ttl to a minute, forward or back, in the rest.
pub(super) fn draw_wall_steps(
    rng: &mut SmallRng,
    nodes: usize,
    ttl: Duration,
    busy_until: Duration,
) -> Vec<WallStep> {
    if !rng.random_bool(0.3) {
        return Vec::new();
    }
    let mut steps: Vec<WallStep> = (0..rng.random_range(1..=3))
        .map(|_| {
            let size = match rng.random_range(0..4) {
                0 => Duration::from_secs(60),
                _ => ttl.mul_f64(rng.random_range(0.1..3.0)),
            };
            let size = size.as_millis() as i64;
            WallStep {
                at: Duration::from_millis(rng.random_range(500..busy_until.as_millis() as u64)),
                node: rng.random_range(0..nodes),
                by_ms: if rng.random_bool(0.5) { size } else { -size },
            }
        })
        .collect();
    steps.sort_by_key(|s| s.at);
    steps
}
