//! A run's scenario, drawn from its seed: the nodes and their settings, and a schedule of
//! faults and operator commands over the first part of the run, then a quiet tail in
//! which the election must settle.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;

use super::failures::{Drawn, OPERATOR};

/// One node of the run (a node id; its processes come and go).
#[derive(Debug, Clone)]
pub(super) struct NodeSpec {
    pub(super) id: String,
    /// `election.candidate`.
    pub(super) candidate: bool,
    pub(super) priority: i64,
    /// `election.preempt_after` (zero: off).
    pub(super) preempt_after: Duration,
    /// Whether it has an `[election.health_check]`.
    pub(super) health_check: bool,
    /// How long its leader work takes to stop when it steps down.
    pub(super) step_down: Duration,
}

/// What the schedule does, and to whom.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Fault {
    /// The node's statements are delayed by up to `max` each (before the database, in
    /// the row lock, on the way back).
    SlowStatements { node: usize, max: Duration },
    /// Answers lost after the commit, with probability `p`.
    LostAnswers { node: usize, p: f64 },
    /// Statements that fail before the commit, with probability `p`.
    FailedStatements { node: usize, p: f64 },
    /// The database refuses new connections.
    RefuseConnections,
    /// The database restarts: every connection is cut, and it is down for the window.
    Restart,
    /// Another transaction holds the row lock on and off: every statement waits up to
    /// `max` for it, each its own time, so two statements can take it out of order (a
    /// renewal that read the clock first may write last).
    RowLockWaits { max: Duration },
    /// The node's process is frozen (SIGSTOP), then continued.
    Freeze { node: usize },
    /// The node's host sleeps: its boot clock moves on by the window's length at once.
    Suspend { node: usize },
    /// The node's process is killed (SIGKILL); a new one starts at the window's end.
    Crash { node: usize, restart: bool },
    /// A second process with the node's id runs over the window (then is killed).
    Twin { node: usize },
    /// SIGTERM at the window's start; a new process starts at its end.
    Stop { node: usize, restart: bool },
    /// SIGHUP with a reload that takes `reload`, and SIGTERM during it.
    StopDuringReload { node: usize, reload: Duration },
    /// The status file's writes take up to `delay`, or fail, over the window.
    SlowStatusFile {
        node: usize,
        delay: Duration,
        fail: bool,
    },
    /// The health check fails over the window.
    Unhealthy { node: usize },
    /// `leaderd pause --for` the window (`resume` at its end if `resume`).
    Pause { resume: bool },
    /// `leaderd resign`.
    Resign,
    /// `leaderd handover --to` the node.
    Handover { to: usize },
    /// The node restarts with another `election.priority`.
    Priority { node: usize, priority: i64 },
    /// An asynchronous standby is promoted: the commits of the last `lost` are gone, new
    /// connections are refused for `delay` (the window), and the new primary's clock
    /// reads `clock_us` off the old one's (`failover.rs`).
    Failover {
        lost: Duration,
        delay: Duration,
        clock_us: i64,
    },
    /// The database clock steps by `by_us` microseconds (negative: back).
    ClockStep { by_us: i64 },
}

/// A fault over a window of the run.
#[derive(Debug, Clone)]
pub(super) struct Event {
    pub(super) from: Duration,
    pub(super) until: Duration,
    pub(super) fault: Fault,
}

/// A run's whole scenario.
#[derive(Debug, Clone)]
pub(super) struct Scenario {
    pub(super) ttl: Duration,
    pub(super) interval: Duration,
    /// Release notifications (PostgreSQL's NOTIFY) or polling only.
    pub(super) notifies: bool,
    /// The database reads its clock when a statement arrives (MySQL's `NOW(6)`), not
    /// when it writes the row (PostgreSQL's `clock_timestamp()`).
    pub(super) clock_at_arrival: bool,
    /// How much faster the database's clock runs than the nodes' monotonic clocks, in
    /// parts per million (NTP slews by at most 500; the safety margin allows 2000).
    pub(super) db_clock_ppm: u32,
    /// `database.query_timeout`: the ttl by default, shorter where a user set it so.
    pub(super) query_timeout: Duration,
    pub(super) nodes: Vec<NodeSpec>,
    pub(super) events: Vec<Event>,
    pub(super) length: Duration,
    /// Steps of the nodes' wall clocks (`readers.rs`).
    pub(super) wall_steps: Vec<super::wall::WallStep>,
}

/// How long a run lasts, and the tail of it with no new faults.
pub(super) const RUN: Duration = Duration::from_secs(60);
const QUIET_TAIL: Duration = Duration::from_secs(12);

impl Scenario {
    pub(super) fn draw(seed: u64) -> Scenario {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed_5eed_5eed_5eed);
        let (ttl, interval) = match rng.random_range(0..10) {
            0 => (Duration::from_secs(5), Duration::from_secs(2)),
            1 => (Duration::from_millis(600), Duration::from_millis(500)),
            _ => (Duration::from_millis(1200), Duration::from_secs(1)),
        };
        let count = rng.random_range(3..=5);
        let nodes: Vec<NodeSpec> = (0..count)
            .map(|i| NodeSpec {
                id: ((b'a' + i as u8) as char).to_string(),
                // At least two candidates.
                candidate: i < 2 || rng.random_bool(0.8),
                priority: match rng.random_range(0..4) {
                    0 => rng.random_range(1..=3),
                    _ => 0,
                },
                preempt_after: match rng.random_range(0..4) {
                    0 => Duration::ZERO,
                    1 => Duration::from_secs(2),
                    _ => Duration::from_secs(10),
                },
                health_check: rng.random_bool(0.3),
                step_down: match rng.random_range(0..3) {
                    0 => Duration::ZERO,
                    _ => ttl.mul_f64(rng.random_range(0.0..3.0)),
                },
            })
            .collect();
        let busy_until = RUN - QUIET_TAIL;
        let mut events = Vec::new();
        for _ in 0..rng.random_range(4..=18) {
            let from = Duration::from_millis(rng.random_range(500..busy_until.as_millis() as u64));
            let node = rng.random_range(0..count);
            let upto = |rng: &mut SmallRng, max: Duration| max.mul_f64(rng.random_range(0.05..1.0));
            let (fault, length) = match rng.random_range(0..20) {
                0 | 1 => (
                    Fault::SlowStatements {
                        node,
                        max: upto(&mut rng, ttl * 2),
                    },
                    upto(&mut rng, Duration::from_secs(8)),
                ),
                2 => (
                    Fault::LostAnswers {
                        node,
                        p: rng.random_range(0.1..0.8),
                    },
                    upto(&mut rng, Duration::from_secs(6)),
                ),
                3 => (
                    Fault::FailedStatements {
                        node,
                        p: rng.random_range(0.1..0.9),
                    },
                    upto(&mut rng, Duration::from_secs(6)),
                ),
                4 => (Fault::RefuseConnections, upto(&mut rng, ttl * 3)),
                5 => (Fault::Restart, upto(&mut rng, ttl * 2)),
                6 => (Fault::Freeze { node }, upto(&mut rng, ttl * 3)),
                7 => (Fault::Suspend { node }, upto(&mut rng, ttl * 3)),
                8 => (
                    Fault::Crash {
                        node,
                        restart: rng.random_bool(0.7),
                    },
                    upto(&mut rng, Duration::from_secs(5)),
                ),
                9 => (Fault::Twin { node }, upto(&mut rng, Duration::from_secs(6))),
                10 => (
                    Fault::Stop {
                        node,
                        restart: rng.random_bool(0.7),
                    },
                    upto(&mut rng, Duration::from_secs(6)),
                ),
                11 => {
                    let reload = upto(&mut rng, ttl * 3);
                    (Fault::StopDuringReload { node, reload }, reload)
                }
                12 => (
                    Fault::SlowStatusFile {
                        node,
                        delay: upto(&mut rng, ttl * 2),
                        fail: rng.random_bool(0.3),
                    },
                    upto(&mut rng, Duration::from_secs(5)),
                ),
                13 => (
                    Fault::Unhealthy { node },
                    upto(&mut rng, Duration::from_secs(8)),
                ),
                14 => (
                    Fault::Pause {
                        resume: rng.random_bool(0.5),
                    },
                    upto(&mut rng, Duration::from_secs(8)),
                ),
                15 | 16 => (Fault::Resign, ttl),
                17 | 18 => (Fault::Handover { to: node }, ttl * 2),
                _ => (
                    Fault::Priority {
                        node,
                        priority: rng.random_range(0..=3),
                    },
                    Duration::ZERO,
                ),
            };
            events.push(Event {
                from,
                until: (from + length).min(busy_until),
                fault,
            });
        }
        events.sort_by_key(|e| e.from);
        let notifies = rng.random_bool(0.5);
        let clock_at_arrival = rng.random_bool(0.5);
        // Drawn last, so that the seeds drawn before these existed keep their scenarios.
        let db_clock_ppm = match rng.random_range(0..3) {
            0 => 0,
            _ => rng.random_range(0..=1500),
        };
        let query_timeout = match rng.random_range(0..4) {
            0 => ttl.mul_f64(rng.random_range(0.25..0.5)),
            _ => ttl,
        };
        if rng.random_bool(0.25) {
            let from = Duration::from_millis(rng.random_range(500..busy_until.as_millis() as u64));
            let length = Duration::from_secs(8).mul_f64(rng.random_range(0.1..1.0));
            events.push(Event {
                from,
                until: (from + length).min(busy_until),
                fault: Fault::RowLockWaits {
                    max: ttl.mul_f64(rng.random_range(0.2..1.5)),
                },
            });
            events.sort_by_key(|e| e.from);
        }
        for (from, until, drawn) in super::failures::draw(seed, ttl, busy_until) {
            let fault = Fault::from(drawn);
            events.push(Event { from, until, fault });
        }
        events.sort_by_key(|e| e.from);
        // Drawn last, as above.
        let wall_steps = super::wall::draw_wall_steps(&mut rng, count, ttl, busy_until);
        Scenario {
            ttl,
            interval,
            notifies,
            clock_at_arrival,
            db_clock_ppm,
            query_timeout,
            nodes,
            events,
            length: RUN,
            wall_steps,
        }
    }
}

impl From<Drawn> for Fault {
    fn from(drawn: Drawn) -> Fault {
        let node = OPERATOR;
        match drawn {
            Drawn::Failover {
                lost,
                delay,
                clock_us,
            } => Fault::Failover {
                lost,
                delay,
                clock_us,
            },
            Drawn::ClockStep { by_us } => Fault::ClockStep { by_us },
            Drawn::OperatorSlow { max } => Fault::SlowStatements { node, max },
            Drawn::OperatorLostAnswers { p } => Fault::LostAnswers { node, p },
            Drawn::OperatorFailures { p } => Fault::FailedStatements { node, p },
        }
    }
}

impl Scenario {
    /// The most a failover of the run loses (none: no failover).
    pub(super) fn most_lost(&self) -> Option<Duration> {
        self.events
            .iter()
            .filter_map(|e| match e.fault {
                Fault::Failover { lost, .. } => Some(lost),
                _ => None,
            })
            .max()
    }

    /// The scenario in a few lines, for a failure's report.
    pub(super) fn brief(&self) -> String {
        let mut text = format!(
            "ttl {:?}, interval {:?}, query timeout {:?}, database clock +{} ppm, {}, clock read {}\n",
            self.ttl,
            self.interval,
            self.query_timeout,
            self.db_clock_ppm,
            if self.notifies {
                "notifications"
            } else {
                "polling only"
            },
            if self.clock_at_arrival {
                "on arrival"
            } else {
                "at the write"
            },
        );
        for node in &self.nodes {
            text.push_str(&format!("  node {node:?}\n"));
        }
        for step in &self.wall_steps {
            text.push_str(&format!("  {step:?}\n"));
        }
        for event in &self.events {
            text.push_str(&format!(
                "  {:>7.3}s..{:>7.3}s {:?}\n",
                event.from.as_secs_f64(),
                event.until.as_secs_f64(),
                event.fault
            ));
        }
        text
    }
}
