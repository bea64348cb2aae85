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

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tracing::{info, warn};

use super::config::{
    HookConfigError, argv, duration, duration_value, env, env_value, error, table,
};
use super::process::Io;
use super::run::{HookContext, RunSpec, run};
use super::supervisor::HookResign;
use crate::election::{CandidacyGate, Role, Status};
use crate::status_file::Standing;

pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_FAILURES: u32 = 3;

/// `[election.health_check]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckConfig {
    pub argv: Vec<String>,
    /// From the end of one check to the start of the next.
    pub interval: Duration,
    /// Bound on one check; a check that takes longer is stopped and counts as a failure.
    pub timeout: Duration,
    /// Failures in a row that make the node failing.
    pub failures: u32,
    pub env: BTreeMap<String, String>,
}

/// Where the health check stands, for the status file, `/status` and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// No check has succeeded yet: the node does not claim.
    Starting,
    /// The last check succeeded.
    Healthy,
    /// `failures` checks failed in a row and none succeeded since: the node does not
    /// claim, and a leader steps down.
    Failing,
}

const KEY: &str = "election.health_check";

impl HealthCheckConfig {
    /// Parses `[election.health_check]`: `command` (an argv array), `interval`,
    /// `timeout`, `failures`, `env`.
    pub fn parse(value: &config::Value) -> Result<Self, HookConfigError> {
        let t = table(
            KEY,
            value,
            &["command", "interval", "timeout", "failures", "env"],
        )?;
        let key = |name: &str| format!("{KEY}.{name}");
        let failures = match t.get("failures") {
            None => DEFAULT_FAILURES,
            Some(v) => v
                .clone()
                .into_uint()
                .ok()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| {
                    error(&key("failures"), v, "must be a whole number from 1 to 1000")
                })?,
        };
        Ok(HealthCheckConfig {
            argv: argv(&key("command"), &t["command"])?,
            interval: t
                .get("interval")
                .map(|v| duration(&key("interval"), v))
                .transpose()?
                .unwrap_or(DEFAULT_INTERVAL),
            timeout: t
                .get("timeout")
                .map(|v| duration(&key("timeout"), v))
                .transpose()?
                .unwrap_or(DEFAULT_TIMEOUT),
            failures,
            env: t
                .get("env")
                .map(|v| env(&key("env"), v))
                .transpose()?
                .unwrap_or_default(),
        })
    }

    pub fn to_toml(&self) -> toml::Table {
        let mut entry = toml::Table::new();
        entry.insert("command".into(), self.argv.clone().into());
        entry.insert("interval".into(), duration_value(self.interval));
        entry.insert("timeout".into(), duration_value(self.timeout));
        entry.insert("failures".into(), i64::from(self.failures).into());
        if !self.env.is_empty() {
            entry.insert("env".into(), env_value(&self.env));
        }
        entry
    }
}

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

    fn parse(toml: &str) -> Result<HealthCheckConfig, HookConfigError> {
        let value = config::Config::builder()
            .add_source(config::File::from_str(toml, config::FileFormat::Toml))
            .build()
            .unwrap()
            .get::<config::Value>("health_check")
            .unwrap();
        HealthCheckConfig::parse(&value)
    }

    #[test]
    fn parses_with_defaults_and_names_bad_keys() {
        let c = parse("[health_check]\ncommand = [\"true\"]\n").unwrap();
        assert_eq!(c.argv, ["true"]);
        assert_eq!(
            (c.interval, c.timeout, c.failures),
            (DEFAULT_INTERVAL, DEFAULT_TIMEOUT, DEFAULT_FAILURES)
        );
        let c = parse("[health_check]\ncommand = [\"x\"]\ninterval = \"200ms\"\nfailures = 1\n")
            .unwrap();
        assert_eq!((c.interval, c.failures), (Duration::from_millis(200), 1));
        let e = parse("[health_check]\ncommand = [\"x\"]\nfailures = 0\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("election.health_check.failures = 0"),
            "{e}"
        );
        let e = parse("[health_check]\ncommand = [\"x\"]\nintervall = \"1s\"\n").unwrap_err();
        assert!(
            e.to_string().contains("election.health_check.intervall"),
            "{e}"
        );
        let e = parse("[health_check]\ninterval = \"1s\"\n").unwrap_err();
        assert!(e.to_string().contains("needs `command`"), "{e}");
    }
}
