//! Databases as they fail: a failover to an asynchronous standby that had not received the
//! last acknowledged commits (a rollback), steps of the database clock, the new primary's
//! clock after a failover, and faults on the operators' connection: how a run draws
//! them, and what the database keeps to play them ([`Failures`]). Both drivers use it;
//! `failover.rs` and `direct/failover.rs` play the windows.
//!
//! A rollback forgets what a node was told had committed. Two leaders after a lost
//! renewal (or a lost claim) cannot be prevented by a protocol on top of such a database:
//! the properties excuse exactly the process that acts on a forgotten lease, until the
//! deadline that lease gave it, and measure how long another leader overlapped it. What
//! they never excuse is a term issued twice (property 3), and anyone else acting without
//! the row.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;
use tokio::time::Instant;

use crate::store::LeaseRow;
use crate::store::memory::Table;

/// The connection of the operators' commands, for the statement faults aimed at it.
pub(super) const OPERATOR: usize = usize::MAX;

/// The most a rollback loses: the commits of the last this long.
pub(super) const MOST_LOST: Duration = Duration::from_millis(500);

/// The database clock at `at`, stepped by `step_us` (negative: back).
pub(super) fn stepped(at: Instant, step_us: i64) -> Instant {
    let by = Duration::from_micros(step_us.unsigned_abs());
    match step_us >= 0 {
        true => at + by,
        false => at - by,
    }
}

/// A fault of this module, as drawn (`schedule.rs` makes it a `Fault`).
#[derive(Debug, Clone)]
pub(super) enum Drawn {
    Failover {
        lost: Duration,
        delay: Duration,
        clock_us: i64,
    },
    ClockStep {
        by_us: i64,
    },
    /// The operators' connection's statements: slow, their answers lost, or failing.
    OperatorSlow {
        max: Duration,
    },
    OperatorLostAnswers {
        p: f64,
    },
    OperatorFailures {
        p: f64,
    },
}

/// The faults of this module in a run (from, until, what), drawn from its seed apart
/// from the rest, so that every other fault of a seed stays what it was before these
/// existed. `LEADERD_SIM_DB_FAULTS=0` draws none (to compare).
pub(super) fn draw(
    seed: u64,
    ttl: Duration,
    busy_until: Duration,
) -> Vec<(Duration, Duration, Drawn)> {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *OFF.get_or_init(|| std::env::var("LEADERD_SIM_DB_FAULTS").is_ok_and(|v| v == "0")) {
        return Vec::new();
    }
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xfa11_07e4_u64);
    let mut events = Vec::new();
    let at = |rng: &mut SmallRng| {
        Duration::from_millis(rng.random_range(500..busy_until.as_millis() as u64))
    };
    // The margin left of the safety margin (ttl/500 + 2 ms) once the drift the scenario
    // allows (1500 ppm) is taken: the 2 ms, which is what leaderd needs of a step.
    let within = 2_000;
    if rng.random_bool(0.3) {
        let from = at(&mut rng);
        let lost = match rng.random_range(0..4) {
            0 => Duration::ZERO,
            _ => MOST_LOST.mul_f64(rng.random_range(0.0..1.0)),
        };
        let delay = promotion_delay(&mut rng, ttl);
        // The new primary's clock: within what leaderd needs of it, either way.
        let clock_us = rng.random_range(-within..=within);
        let until = (from + delay).min(busy_until);
        events.push((
            from,
            until,
            Drawn::Failover {
                lost,
                delay,
                clock_us,
            },
        ));
    }
    if rng.random_bool(0.2) {
        let from = at(&mut rng);
        // Forward within what leaderd needs; back by up to a second (NTP's step).
        let by_us = match rng.random_bool(0.5) {
            true => rng.random_range(1..=within),
            false => -rng.random_range(1..=1_000_000),
        };
        events.push((from, from, Drawn::ClockStep { by_us }));
    }
    // The operators' connection meets the faults every node's does.
    if rng.random_bool(0.3) {
        let from = at(&mut rng);
        let length = Duration::from_secs(8).mul_f64(rng.random_range(0.1..1.0));
        let fault = match rng.random_range(0..3) {
            0 => Drawn::OperatorSlow {
                max: ttl.mul_f64(rng.random_range(0.1..2.0)),
            },
            1 => Drawn::OperatorLostAnswers {
                p: rng.random_range(0.1..0.8),
            },
            _ => Drawn::OperatorFailures {
                p: rng.random_range(0.1..0.9),
            },
        };
        events.push((from, (from + length).min(busy_until), fault));
    }
    events
}

/// How long a standby takes to accept writes once the primary is gone: at once (a
/// script), within a ttl (Patroni's quick path), or ttls later (by hand).
pub(super) fn promotion_delay(rng: &mut SmallRng, ttl: Duration) -> Duration {
    match rng.random_range(0..3) {
        0 => Duration::from_millis(rng.random_range(0..=20)),
        1 => ttl.mul_f64(rng.random_range(0.0..1.0)),
        _ => ttl.mul_f64(rng.random_range(1.0..4.0)),
    }
}

/// A lease the database acknowledged and then forgot: its holder may act on it until
/// `until` (run time), which is no breach of the protocol's.
#[derive(Debug, Clone)]
struct Forgotten {
    holder: String,
    term: i64,
    until: Duration,
    failover: usize,
}

/// One failover of a run, and how long two processes acted as leader after it.
#[derive(Debug, Clone)]
pub(crate) struct FailoverRecord {
    /// When it happened (run time).
    pub(crate) at: Duration,
    /// From the first instant a second process acted beside one acting on a forgotten
    /// lease, to that lease's end (none: no overlap).
    pub(crate) overlap: Option<(Duration, Duration)>,
}

impl FailoverRecord {
    pub(crate) fn overlap(&self) -> Duration {
        self.overlap
            .map_or(Duration::ZERO, |(from, to)| to.saturating_sub(from))
    }
}

/// Whether a run's database must keep its recent history: the most its rollbacks lose.
pub(super) fn keeps_history(most_lost: Option<Duration>) -> bool {
    most_lost.is_some_and(|lost| !lost.is_zero())
}

/// What the failures of this module keep beside the database.
#[derive(Debug, Default)]
pub(super) struct Failures {
    /// The table before each statement of the last [`MOST_LOST`], at run time (kept
    /// only in runs with a rollback).
    history: VecDeque<(Duration, Table)>,
    pub(super) keeps_history: bool,
    /// How far the database clock has been stepped, in microseconds (negative: back).
    pub(super) step_us: i64,
    /// Every term the database started: the ground truth a rollback does not touch.
    issued: BTreeSet<i64>,
    forgotten: Vec<Forgotten>,
    pub(super) failovers: Vec<FailoverRecord>,
}

impl Failures {
    /// Called before every statement the database runs, at run time `at`, on `table`.
    pub(super) fn before_statement(&mut self, at: Duration, table: &Table) {
        if !self.keeps_history {
            return;
        }
        while self
            .history
            .front()
            .is_some_and(|(t, _)| *t + MOST_LOST < at)
        {
            self.history.pop_front();
        }
        self.history.push_back((at, table.clone()));
    }

    /// A term the database just started: property 3 holds it to be a new one (the
    /// breach to report, if it is not).
    pub(super) fn issued(&mut self, term: i64, starter: &str) -> Option<(&'static str, String)> {
        if self.issued.insert(term) {
            return None;
        }
        Some((
            "3: no term is issued twice",
            format!("{starter} was given term {term}, which was issued before"),
        ))
    }

    /// The failover: `table` becomes what the old primary had committed `lost` before
    /// `now` (run time), and the new primary's clock reads `clock_us` off the old one's.
    /// `row_before` is the row just before it, with how long its lease had left in the
    /// nodes' time.
    pub(super) fn fail_over(
        &mut self,
        table: &mut Table,
        now: Duration,
        lost: Duration,
        clock_us: i64,
        row_before: Option<(LeaseRow, Duration)>,
    ) {
        let since = now.saturating_sub(lost);
        if let Some(index) = self.history.iter().position(|(t, _)| *t > since) {
            *table = self.history[index].1.clone();
        }
        self.history.clear();
        self.step_us += clock_us;
        let failover = self.failovers.len();
        self.failovers.push(FailoverRecord {
            at: now,
            overlap: None,
        });
        // The holder of a lease the rollback shortened or erased may act on it: the
        // database had acknowledged it.
        let Some((before, left)) = row_before else {
            return;
        };
        let (Some(holder), false) = (before.holder.clone(), left.is_zero()) else {
            return;
        };
        self.forgotten.push(Forgotten {
            holder,
            term: before.term,
            // The clock's rate and a step of the new primary, on the safe side.
            until: now + left + Duration::from_millis(3),
            failover,
        });
    }

    /// Whether a failover happened at `since` (run time) or later.
    pub(super) fn failed_over_since(&self, since: Duration) -> bool {
        self.failovers.iter().any(|f| f.at >= since)
    }

    /// Whether node `holder`, acting in `term` until `deadline` (run time), acts on a
    /// lease the database forgot.
    pub(super) fn forgotten(&self, holder: &str, term: i64, deadline: Duration) -> bool {
        self.forgotten
            .iter()
            .any(|f| f.holder == holder && f.term == term && deadline <= f.until)
    }

    /// Whether node `holder`'s lease in `term`, which the database forgot, had not yet
    /// ended at `now` (run time): its leader work may still run on it.
    pub(super) fn forgotten_at(&self, holder: &str, term: i64, now: Duration) -> bool {
        self.forgotten
            .iter()
            .any(|f| f.holder == holder && f.term == term && now <= f.until)
    }

    /// Two processes act as leader at `now`, one of them (`holder` in `term`, until
    /// `deadline`) on a forgotten lease: the overlap a lost commit causes, measured.
    pub(super) fn overlapping(
        &mut self,
        now: Duration,
        holder: &str,
        term: i64,
        deadline: Duration,
    ) {
        let found = self
            .forgotten
            .iter()
            .find(|f| f.holder == holder && f.term == term);
        if let Some(f) = found {
            let record = &mut self.failovers[f.failover];
            let began = record.overlap.map_or(now, |(from, _)| from);
            let ended = record.overlap.map_or(deadline, |(_, to)| to.max(deadline));
            record.overlap = Some((began, ended));
        }
    }
}
