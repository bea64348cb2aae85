//! Crash loops back off, as systemd's `RestartSec` steps and keepalived's FAULT state do:
//!
//! * a `leader_command` that keeps exiting within [`QUICK_EXIT`] of its start is restarted
//!   after `election.interval` at first, then after twice as long each time, up to
//!   [`MAX_DELAY`]; a run that lasts [`QUICK_EXIT`] starts the count again, and so does a
//!   new term;
//! * an `on_elected` that fails under `on_elected_failure = "step_down"` makes the node
//!   step down as before and also keeps it out of claims for the same steps (through a
//!   [`CandidacyGate`] of its own, as a failing health check does): a lone node retries
//!   less and less often instead of being elected and demoted every two seconds, and
//!   other nodes take over meanwhile. A successful `on_elected` starts the count again.
//!
//! While a crash loop holds a hook off, the node's [`Standing`] says so (status file,
//! `/status`, metrics, the member record).

use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::election::CandidacyGate;
use crate::hooks::kind::HookKind;
use crate::standing::{Backoff, Standing};

/// The longest wait between two tries.
pub const MAX_DELAY: Duration = Duration::from_secs(60);
/// A `leader_command` that ran this long was no crash loop.
pub const QUICK_EXIT: Duration = Duration::from_secs(10);

/// Where a crash loop shows and acts: the gate that keeps a node whose `on_elected`
/// keeps failing out of claims, and the standing it is published in. Both optional (a
/// test or a library caller may have neither).
#[derive(Debug, Default)]
pub struct CrashLoopWiring {
    pub gate: Option<CandidacyGate>,
    pub standing: Option<watch::Sender<Standing>>,
}

/// Failures in a row, and the delay they earn: `first`, doubled per failure, at most
/// [`MAX_DELAY`].
#[derive(Debug, Clone, Copy, Default)]
struct Steps {
    failures: u32,
}

impl Steps {
    fn failed(&mut self, first: Duration) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let doublings = (self.failures - 1).min(16);
        first.saturating_mul(1 << doublings).min(MAX_DELAY)
    }
}

/// The supervisor's crash-loop state.
pub(super) struct CrashLoops {
    wiring: CrashLoopWiring,
    /// The first delay: `election.interval`.
    first: Duration,
    elected: Steps,
    command: Steps,
    /// When the current leader_command run started.
    command_started: Option<Instant>,
    /// When the candidacy gate, closed after an on_elected failure, opens again.
    pub(super) reopen_at: Option<Instant>,
}

impl CrashLoops {
    pub(super) fn new(wiring: CrashLoopWiring, first: Duration) -> Self {
        CrashLoops {
            wiring,
            first,
            elected: Steps::default(),
            command: Steps::default(),
            command_started: None,
            reopen_at: None,
        }
    }

    fn publish(&self, backoff: Option<Backoff>) {
        if let Some(standing) = &self.wiring.standing {
            standing.send_if_modified(|standing| {
                let changed = standing.backoff != backoff;
                standing.backoff = backoff;
                changed
            });
        }
    }

    fn backoff(hook: HookKind, failures: u32, delay: Duration) -> Backoff {
        Backoff {
            hook,
            failures,
            delay,
            until: SystemTime::now() + delay,
        }
    }

    /// on_elected failed and the node steps down: no claim for the next step's delay.
    pub(super) fn elected_failed(&mut self, term: Option<i64>) {
        let delay = self.elected.failed(self.first);
        let failures = self.elected.failures;
        warn!(
            term,
            failures,
            "on_elected failed; stepping down, and claiming nothing for {} (hooks.on_elected_failure = \"step_down\")",
            humantime::format_duration(delay)
        );
        if let Some(gate) = &self.wiring.gate {
            gate.close();
            self.reopen_at = Some(Instant::now() + delay);
        }
        self.publish(Some(Self::backoff(HookKind::OnElected, failures, delay)));
    }

    /// on_elected succeeded: the loop, if any, is over.
    pub(super) fn elected_succeeded(&mut self) {
        self.elected = Steps::default();
    }

    /// The wait after an on_elected failure is over: the node may claim again.
    pub(super) fn reopen(&mut self) {
        self.reopen_at = None;
        if let Some(gate) = &self.wiring.gate {
            gate.open();
        }
        info!("on_elected back-off over; this node may claim again");
        self.clear(HookKind::OnElected);
    }

    fn clear(&self, hook: HookKind) {
        if let Some(standing) = &self.wiring.standing {
            standing.send_if_modified(|standing| {
                let ours = standing.backoff.is_some_and(|b| b.hook == hook);
                if ours {
                    standing.backoff = None;
                }
                ours
            });
        }
    }

    pub(super) fn command_started(&mut self) {
        self.command_started = Some(Instant::now());
        self.clear(HookKind::LeaderCommand);
    }

    /// The leader_command exited on its own and is to be restarted: how long to wait.
    pub(super) fn command_exited(&mut self, term: Option<i64>, status: &str) -> Duration {
        let ran = self
            .command_started
            .map_or(Duration::ZERO, |at| at.elapsed());
        if ran >= QUICK_EXIT {
            self.command = Steps::default();
        }
        let delay = self.command.failed(self.first);
        let failures = self.command.failures;
        if failures > 1 {
            warn!(
                term,
                failures,
                "leader_command ended ({status}) after {}; restarting in {} ({failures} quick exits in a row)",
                humantime::format_duration(Duration::from_millis(ran.as_millis() as u64)),
                humantime::format_duration(delay)
            );
        } else {
            info!(
                term,
                "leader_command ended ({status}); restarting in {}",
                humantime::format_duration(delay)
            );
        }
        self.publish(Some(Self::backoff(
            HookKind::LeaderCommand,
            failures,
            delay,
        )));
        delay
    }

    /// This node no longer leads: a leader_command loop ends with its term.
    pub(super) fn term_ended(&mut self) {
        self.command = Steps::default();
        self.command_started = None;
        self.clear(HookKind::LeaderCommand);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_doubles_the_wait_up_to_a_minute() {
        let mut steps = Steps::default();
        let waits: Vec<u64> = (0..9)
            .map(|_| steps.failed(Duration::from_secs(1)).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        for _ in 0..100 {
            steps.failed(Duration::from_secs(1));
        }
        assert_eq!(steps.failed(Duration::from_secs(1)), MAX_DELAY);
    }

    #[test]
    fn an_on_elected_failure_closes_the_gate_until_reopened() {
        let gate = CandidacyGate::default();
        let (standing, seen) = watch::channel(Standing::default());
        let wiring = CrashLoopWiring {
            gate: Some(gate.clone()),
            standing: Some(standing),
        };
        let mut loops = CrashLoops::new(wiring, Duration::from_millis(500));
        loops.elected_failed(Some(3));
        loops.elected_failed(Some(4));
        let backoff = seen.borrow().backoff.unwrap();
        assert_eq!((backoff.hook, backoff.failures), (HookKind::OnElected, 2));
        assert_eq!(backoff.delay, Duration::from_secs(1));
        assert!(loops.reopen_at.is_some());
        loops.reopen();
        assert!(seen.borrow().backoff.is_none());
        assert!(loops.reopen_at.is_none());
        loops.elected_succeeded();
        loops.elected_failed(Some(5));
        assert_eq!(seen.borrow().backoff.unwrap().failures, 1);
    }
}
