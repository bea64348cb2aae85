//! The warning when the measured database clock offset jumps between rounds.

use std::time::Duration;
use tokio::time::{Instant, advance};

use super::Logs;
use crate::election::{ClockJumps, RoundReport, safety_margin};

const TTL: Duration = Duration::from_millis(1200);

fn read(offset_us: i64, round_trip_ms: u64) -> RoundReport {
    RoundReport {
        clock_offset_us: Some(offset_us),
        round_trip: Some(Duration::from_millis(round_trip_ms)),
        ..RoundReport::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_database_clock_step_beyond_the_margin_is_logged() {
    let (logs, _guard) = Logs::capture();
    let margin = safety_margin(TTL);
    assert_eq!(margin, Duration::from_micros(4_400));
    let mut jumps = ClockJumps::new(margin);
    // A second apart, 1 ms round trips: 4.4 + 1 + 2 ms allowed.
    assert_eq!(jumps.observe(&read(1_000, 1), Instant::now()), None);
    advance(Duration::from_secs(1)).await;
    assert_eq!(jumps.observe(&read(7_000, 1), Instant::now()), None);
    advance(Duration::from_secs(1)).await;
    let jump = jumps.observe(&read(7_000 + 7_500, 1), Instant::now());
    assert_eq!(jump.map(|j| (j.from_us, j.to_us)), Some((7_000, 14_500)));
    assert_eq!(logs.count("the database clock moved by 7.5 ms"), 1);
    // Back, too.
    advance(Duration::from_secs(1)).await;
    assert!(jumps.observe(&read(0, 1), Instant::now()).is_some());
    assert_eq!(logs.count("the database clock moved by -14.5 ms"), 1);
}

#[tokio::test(start_paused = true)]
async fn slow_reads_and_long_gaps_are_no_jump() {
    let (logs, _guard) = Logs::capture();
    let mut jumps = ClockJumps::new(safety_margin(TTL));
    // A read without a round trip (its connection was new) measures nothing here.
    let mut first = read(0, 1);
    first.round_trip = None;
    assert_eq!(jumps.observe(&first, Instant::now()), None);
    assert_eq!(jumps.observe(&read(0, 30), Instant::now()), None);
    advance(Duration::from_secs(1)).await;
    // 30 and 20 ms round trips: each offset is uncertain by half of its own.
    assert_eq!(jumps.observe(&read(29_000, 20), Instant::now()), None);
    // After a minute without a read, drift at 2000 ppm could be 120 ms.
    advance(Duration::from_secs(60)).await;
    assert_eq!(jumps.observe(&read(129_000, 1), Instant::now()), None);
    // No offset (a leader renewing): nothing.
    assert_eq!(jumps.observe(&RoundReport::default(), Instant::now()), None);
    assert_eq!(logs.count("the database clock moved"), 0);
}
