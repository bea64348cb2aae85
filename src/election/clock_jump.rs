//! A warning when the database clock jumps. leaderd needs the database clock to run at
//! the rate of this node's monotonic clock within the safety margin over a ttl, and
//! never to step by more than the margin (nor a promoted standby's to read more than the
//! margin off the old primary's): a lease lapses by the database clock, and a step
//! forward by more than the margin lets another node claim while this one still acts.
//! The offset between the database clock and this host's wall clock is measured at every
//! read ([`RoundReport::clock_offset_us`]); this compares each with the last one.

use std::time::Duration;
use tokio::time::Instant;
use tracing::warn;

use super::RoundReport;

/// The offsets of two reads that moved by more than the margin allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockJump {
    /// The database clock minus this host's wall clock, in microseconds, before and after.
    pub from_us: i64,
    pub to_us: i64,
    /// How far the offset may move between the two reads without a warning.
    pub allowed: Duration,
}

/// Follows the measured clock offset from round to round (see the module's comment).
#[derive(Debug)]
pub struct ClockJumps {
    margin: Duration,
    /// The last offset measured, its read's round trip, and when.
    last: Option<(i64, Duration, Instant)>,
}

impl ClockJumps {
    /// Warns when the offset moves by more than `margin` (the election's safety margin).
    pub fn new(margin: Duration) -> ClockJumps {
        ClockJumps { margin, last: None }
    }

    /// Takes a round's report at `now`. The offset is measured at the middle of a round
    /// trip, so each reading is uncertain by half of it; and the clocks may drift apart
    /// by 2000 ppm between reads (what the margin allows for). A move beyond the margin
    /// and both is a jump: it is logged, and returned.
    pub fn observe(&mut self, report: &RoundReport, now: Instant) -> Option<ClockJump> {
        let (Some(offset), Some(round_trip)) = (report.clock_offset_us, report.round_trip) else {
            return None;
        };
        let last = self.last.replace((offset, round_trip, now));
        let (from_us, last_trip, then) = last?;
        let allowed = self.margin + (last_trip + round_trip) / 2 + now.duration_since(then) / 500;
        let moved = Duration::from_micros(offset.abs_diff(from_us));
        if moved <= allowed {
            return None;
        }
        warn!(
            from_us,
            to_us = offset,
            allowed_us = allowed.as_micros() as u64,
            "the database clock moved by {:.1} ms against this host's between two reads, \
             more than the {:.1} ms the lease allows: a database clock that steps forward \
             by more than the safety margin (or a promoted standby whose clock is ahead) \
             can let two nodes lead at once; check time synchronisation on the database \
             hosts and on this one",
            (offset - from_us) as f64 / 1e3,
            allowed.as_secs_f64() * 1e3,
        );
        Some(ClockJump {
            from_us,
            to_us: offset,
            allowed,
        })
    }
}
