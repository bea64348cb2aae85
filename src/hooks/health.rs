//! Health-gated candidacy (`[election.health_check]`): a command run every `interval` as a
//! hook is run (its own process group, a timeout, no shell, leaderd's configuration
//! variables kept from it), on a task of its own, so that it can never delay a renewal.
//!
//! * Until its first success the node does not claim (a node whose dependency is down at
//!   start must not take the lease in the meantime); the first check runs at once.
//! * `failures` failures in a row (a non-zero status, a timeout, a command that cannot
//!   start) make it *failing*: the claim gate closes, and a leader steps down through the
//!   full sequence (leader work stopped, on_demoted, status file, release).
//! * One success makes it healthy again: the gate opens.

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tracing::{info, warn};

use super::config::health_check::HealthCheckConfig;
use super::process::Io;
use super::run::{HookContext, RunSpec, run};
use super::supervisor::HookResign;
use crate::election::{CandidacyGate, Role, Status};
use crate::standing::{Health, Standing};

/// What the check acts on: the gate it opens and closes (a gate of its own: a stopping
/// node's gate never reopens), the way a leader steps down, and where it reports.
pub struct HealthWiring {
    pub gate: CandidacyGate,
    pub resign: HookResign,
    pub status: watch::Receiver<Status>,
    /// The node's standing, whose `health` this check keeps.
    pub standing: watch::Sender<Standing>,
}

/// The counting, apart from the processes: what one check's result makes of the state.
#[derive(Debug)]
struct Tally {
    failures_in_a_row: u32,
    needed: u32,
    health: Health,
}

impl Tally {
    fn record(&mut self, success: bool) -> Health {
        if success {
            self.failures_in_a_row = 0;
            self.health = Health::Healthy;
        } else {
            self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
            if self.failures_in_a_row >= self.needed {
                self.health = Health::Failing;
            }
        }
        self.health
    }
}

/// Starts the check's task; it runs until aborted (the daemon aborts it as it stops).
pub fn spawn(
    config: HealthCheckConfig,
    context: HookContext,
    wiring: HealthWiring,
) -> JoinHandle<()> {
    wiring.gate.close();
    tokio::spawn(run_checks(config, context, wiring))
}

async fn run_checks(config: HealthCheckConfig, context: HookContext, wiring: HealthWiring) {
    let HealthWiring {
        gate,
        resign,
        mut status,
        standing,
    } = wiring;
    let mut tally = Tally {
        failures_in_a_row: 0,
        needed: config.failures,
        health: Health::Starting,
    };
    // Nothing ever stops a check but its timeout.
    let (_never, stop_by) = watch::channel(None);
    loop {
        let role = status.borrow().role;
        let mut env: Vec<(String, String)> = vec![
            ("LEADERD_EVENT".into(), "health_check".into()),
            ("LEADERD_ELECTION".into(), context.election.clone()),
            ("LEADERD_NODE_ID".into(), context.node_id.clone()),
            ("LEADERD_ROLE".into(), role.as_str().into()),
        ];
        env.extend(config.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let spec = RunSpec {
            hook: "health_check",
            argv: config.argv.clone(),
            env,
            timeout: Some(config.timeout),
            fence_term: None,
            io: Io::Logged,
            forward: None,
            warm: None,
        };
        let outcome = run(spec, context.clone(), status.clone(), stop_by.clone()).await;
        // A check stopped at its timeout failed, whatever it exited with then.
        let success = outcome.success() && !outcome.stopped;
        let before = tally.health;
        let now = tally.record(success);
        match now {
            Health::Healthy => gate.open(),
            Health::Failing | Health::Starting => gate.close(),
        }
        if now != before {
            match now {
                Health::Healthy => info!("health check passes; this node may claim the lease"),
                _ => warn!(
                    failures = tally.failures_in_a_row,
                    "health check failing; this node does not claim the lease, and steps down if it leads"
                ),
            }
            standing.send_modify(|standing| standing.health = Some(now));
        }
        let next = Instant::now() + config.interval;
        loop {
            if tally.health == Health::Failing && status.borrow_and_update().role == Role::Leader {
                resign.resign();
            }
            tokio::select! {
                _ = sleep_until(next) => break,
                changed = status.changed() => if changed.is_err() {
                    // The election ended.
                    return;
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_after_so_many_failures_in_a_row_and_healthy_after_one_success() {
        let mut tally = Tally {
            failures_in_a_row: 0,
            needed: 2,
            health: Health::Starting,
        };
        assert_eq!(tally.record(false), Health::Starting);
        assert_eq!(tally.record(false), Health::Failing);
        assert_eq!(tally.record(true), Health::Healthy);
        assert_eq!(tally.record(false), Health::Healthy);
        assert_eq!(tally.record(true), Health::Healthy);
        assert_eq!(tally.record(false), Health::Healthy);
        assert_eq!(tally.record(false), Health::Failing);
        assert_eq!(tally.record(false), Health::Failing);
    }
}
