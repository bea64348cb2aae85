//! Prometheus metrics: updated by the election's round observer, a task that follows the
//! status, and the hook runner. Every update is an atomic operation: nothing here can hold
//! up a renewal.
//!
//! Every per-election series carries an `election` label (the election's name), so that
//! one query over a fleet can group by election: `sum by (election)(leaderd_is_leader)`.
//! Only `log_lines_dropped` and `build_info`, which belong to the process, have none.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::election::{Role, RoundReport, Status};
use crate::hooks::HookKind;
use crate::standing::Health;
use crate::standing::Standing;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    /// `elected` or `demoted`.
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    /// The git commit built (`LEADERD_COMMIT` at build time, else `git rev-parse`; see
    /// build.rs), `unknown` without either.
    commit: &'static str,
}

/// leaderd's version and the commit it was built from.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const COMMIT: &str = env!("LEADERD_COMMIT");

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabels {
    hook: &'static str,
    /// `success`, `failure`, `stopped` (by leaderd: timeout, fence or shutdown) or
    /// `not_started`.
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackoffLabels {
    /// `on_elected` or `leader_command`.
    hook: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// 0.25 ms to about 8 s.
fn round_trip_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

/// 10 ms to about 160 s.
fn hook_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 15))
}

struct Inner {
    registry: Registry,
    is_leader: Gauge,
    paused: Gauge,
    term: Gauge,
    transitions: Family<TransitionLabels, Counter>,
    rounds: Counter,
    statements: Counter,
    renew_round_trip: Histogram,
    read_round_trip: Histogram,
    renew_margin: Histogram,
    clock_offset: Gauge<f64, AtomicU64>,
    db_errors: Family<ErrorLabels, Counter>,
    hook_runs: Family<HookLabels, Counter>,
    hook_duration: HistogramFamily<HookLabels>,
    candidate: Gauge,
    health_check_failing: Gauge,
    hook_backoff: Family<BackoffLabels, Gauge<f64, AtomicU64>>,
    lease_remaining: Gauge<f64, AtomicU64>,
    /// Until when the lease the node knows of lasts (its own while leader, else the
    /// leader's): `lease_remaining` is computed from it at each scrape.
    lease_until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

/// The node's metrics; cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// The metrics of the election named `election` (its `election` label).
    pub fn new(election: &str) -> Metrics {
        let mut root = Registry::with_prefix("leaderd");
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: VERSION,
                commit: COMMIT,
            })
            .set(1);
        root.register(
            "build_info",
            "Always 1; its labels say which version of leaderd runs, built from which commit",
            build_info,
        );
        root.register(
            "log_lines_dropped",
            "Log lines dropped because stderr did not take them in time (a stalled journald, \
             a pipe nobody reads); the election never waits for its log",
            crate::logging::lines_dropped_metric(),
        );
        let registry = root
            .sub_registry_with_label((Cow::Borrowed("election"), Cow::Owned(election.to_owned())));
        let inner = Inner {
            is_leader: Gauge::default(),
            paused: Gauge::default(),
            term: Gauge::default(),
            transitions: Family::default(),
            rounds: Counter::default(),
            statements: Counter::default(),
            renew_round_trip: round_trip_histogram(),
            read_round_trip: round_trip_histogram(),
            renew_margin: Histogram::new(exponential_buckets(0.01, 2.0, 12)),
            clock_offset: Gauge::default(),
            db_errors: Family::default(),
            hook_runs: Family::default(),
            hook_duration: Family::new_with_constructor(hook_histogram),
            candidate: Gauge::default(),
            health_check_failing: Gauge::default(),
            hook_backoff: Family::default(),
            lease_remaining: Gauge::default(),
            lease_until: std::sync::Mutex::new(None),
            registry: Registry::default(),
        };
        registry.register(
            "is_leader",
            "1 while this node acts as leader, else 0",
            inner.is_leader.clone(),
        );
        registry.register(
            "paused",
            "1 while the election is paused (leaderd pause): no node takes a free or lapsed lease",
            inner.paused.clone(),
        );
        registry.register(
            "term",
            "The current term (this node's own while leader, else the last one seen)",
            inner.term.clone(),
        );
        registry.register(
            "leadership_transitions",
            "Times this node became leader (elected) or stopped being leader (demoted)",
            inner.transitions.clone(),
        );
        registry.register(
            "rounds",
            "Election rounds completed, failed ones included",
            inner.rounds.clone(),
        );
        registry.register(
            "statements",
            "Statements sent to the database by election rounds (one per round in steady state)",
            inner.statements.clone(),
        );
        registry.register_with_unit(
            "renew_round_trip",
            "Round trip of the leader's renewal statement",
            Unit::Seconds,
            inner.renew_round_trip.clone(),
        );
        registry.register_with_unit(
            "read_round_trip",
            "Round trip of a follower's read of the election row",
            Unit::Seconds,
            inner.read_round_trip.clone(),
        );
        registry.register_with_unit(
            "renew_margin",
            "Time left before the local lease deadline when a renewal's answer arrived",
            Unit::Seconds,
            inner.renew_margin.clone(),
        );
        registry.register_with_unit(
            "database_clock_offset",
            "The database clock minus this host's clock, measured at the last read",
            Unit::Seconds,
            inner.clock_offset.clone(),
        );
        registry.register(
            "database_errors",
            "Failed election rounds by kind of error",
            inner.db_errors.clone(),
        );
        registry.register(
            "hook_runs",
            "Hook runs by hook and outcome",
            inner.hook_runs.clone(),
        );
        registry.register_with_unit(
            "hook_duration",
            "How long hook runs took, by hook and outcome",
            Unit::Seconds,
            inner.hook_duration.clone(),
        );
        registry.register(
            "candidate",
            "1 on a candidate, 0 on an observer (election.candidate = false), which never claims",
            inner.candidate.clone(),
        );
        registry.register(
            "health_check_failing",
            "1 while the health check fails (election.health_check.failures in a row and no \
             success since): the node does not claim, and a leader steps down",
            inner.health_check_failing.clone(),
        );
        registry.register_with_unit(
            "hook_backoff",
            "While a crash loop holds a hook off, how long this wait is: on_elected (the node \
             claims nothing meanwhile) or leader_command (restarted after it); else 0",
            Unit::Seconds,
            inner.hook_backoff.clone(),
        );
        registry.register_with_unit(
            "lease_remaining",
            "Time left on the lease as this node sees it at the scrape: while leader, until \
             its own local deadline (it stops acting then unless renewed); as follower, until \
             the leader's lease lapses unless renewed; 0 with no live lease",
            Unit::Seconds,
            inner.lease_remaining.clone(),
        );
        // Every kind from the start, at 0: rate() and increase() need the zero before the
        // first error, and an alert on the counter needs the series to exist.
        for kind in crate::store::StoreError::KINDS {
            let _ = inner.db_errors.get_or_create(&ErrorLabels { kind });
        }
        inner.candidate.set(1);
        Metrics(Arc::new(Inner {
            registry: root,
            ..inner
        }))
    }

    /// For [`crate::election::Election::observe`].
    pub fn observe_round(&self, report: &RoundReport) {
        let m = &self.0;
        m.rounds.inc();
        m.statements.inc_by(report.statements);
        if let Some(kind) = report.error_kind {
            m.db_errors.get_or_create(&ErrorLabels { kind }).inc();
        }
        if let Some(round_trip) = report.round_trip {
            match report.renewal_margin {
                Some(_) => m.renew_round_trip.observe(round_trip.as_secs_f64()),
                None => m.read_round_trip.observe(round_trip.as_secs_f64()),
            }
        }
        if let Some(margin) = report.renewal_margin {
            m.renew_margin.observe(margin.as_secs_f64());
        }
        if let Some(offset) = report.clock_offset_us {
            m.clock_offset.set(offset as f64 / 1e6);
        }
    }

    /// Follows the status for the leader gauge, the term and the transitions.
    pub fn follow_status(&self, mut status: watch::Receiver<Status>) -> JoinHandle<()> {
        let metrics = self.clone();
        tokio::spawn(async move {
            let mut was_leader = false;
            loop {
                let (leader, term, paused) = {
                    let current = status.borrow_and_update();
                    let until = match current.role {
                        Role::Leader => current.lease_deadline,
                        _ => current.leader_lease_until,
                    };
                    *metrics
                        .0
                        .lease_until
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = until;
                    (current.role == Role::Leader, current.term, current.paused)
                };
                let m = &metrics.0;
                m.is_leader.set(leader as i64);
                m.paused.set(paused as i64);
                if let Some(term) = term {
                    m.term.set(term);
                }
                if leader != was_leader {
                    let direction = if leader { "elected" } else { "demoted" };
                    m.transitions
                        .get_or_create(&TransitionLabels { direction })
                        .inc();
                    was_leader = leader;
                }
                if status.changed().await.is_err() {
                    return;
                }
            }
        })
    }

    /// Follows the node's standing: candidate or observer, health check failing or not, a
    /// crash loop's backoff.
    pub fn follow_standing(&self, mut standing: watch::Receiver<Standing>) -> JoinHandle<()> {
        let metrics = self.clone();
        tokio::spawn(async move {
            loop {
                let current = *standing.borrow_and_update();
                metrics.0.candidate.set(current.candidate as i64);
                let failing = current.health == Some(Health::Failing);
                metrics.0.health_check_failing.set(failing as i64);
                for kind in [HookKind::OnElected, HookKind::LeaderCommand] {
                    let wait = current.backoff.filter(|b| b.hook == kind);
                    let seconds = wait.map_or(0.0, |b| b.delay.as_secs_f64());
                    let hook = kind.as_str();
                    metrics
                        .0
                        .hook_backoff
                        .get_or_create(&BackoffLabels { hook })
                        .set(seconds);
                }
                if standing.changed().await.is_err() {
                    return;
                }
            }
        })
    }

    /// Serves the run counters of the hooks `config` sets (and the health check) at 0
    /// from the start, for every outcome: `increase()` over a counter that first appears
    /// at 1 misses that first failure.
    pub fn expect_hooks(&self, config: &crate::config::Config) {
        let hooks = &config.hooks;
        let configured = HookKind::ALL
            .map(|kind| (kind.as_str(), hooks.is_set(kind)))
            .into_iter()
            .chain([("health_check", config.election.health_check.is_some())]);
        for (hook, _) in configured.filter(|(_, set)| *set) {
            for outcome in ["success", "failure", "stopped", "not_started"] {
                let _ = self
                    .0
                    .hook_runs
                    .get_or_create(&HookLabels { hook, outcome });
            }
        }
    }

    /// Records a hook run: `outcome` as in the `hook_runs` help.
    pub fn hook_ran(&self, hook: &'static str, outcome: &'static str, took: Duration) {
        let labels = HookLabels { hook, outcome };
        self.0.hook_runs.get_or_create(&labels).inc();
        self.0
            .hook_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// The Prometheus text exposition (OpenMetrics flavour).
    pub fn encode(&self) -> String {
        let until = *self.0.lease_until.lock().unwrap_or_else(|e| e.into_inner());
        let left = until.map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(tokio::time::Instant::now())
        });
        self.0.lease_remaining.set(left.as_secs_f64());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.0.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

/// Hooks report their runs here (they know only the trait).
impl crate::hooks::HookRuns for Metrics {
    fn hook_ran(&self, hook: &'static str, outcome: &'static str, took: Duration) {
        Metrics::hook_ran(self, hook, outcome, took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node that ran a round of each kind, a hook, and followed a status.
    async fn exercised(election: &str) -> Metrics {
        let metrics = Metrics::new(election);
        metrics.observe_round(&RoundReport {
            completed: 1,
            round_trip: Some(Duration::from_millis(2)),
            renewal_margin: Some(Duration::from_millis(190)),
            error_kind: None,
            clock_offset_us: Some(-1500),
            statements: 1,
        });
        metrics.observe_round(&RoundReport {
            round_trip: Some(Duration::from_millis(3)),
            error_kind: Some("query_timeout"),
            ..RoundReport::default()
        });
        metrics.hook_ran("on_elected", "success", Duration::from_millis(30));
        let (tx, rx) = watch::channel(Status::initial());
        let follower = metrics.follow_status(rx);
        tx.send_modify(|status| {
            status.role = Role::Leader;
            status.term = Some(7);
        });
        let led = format!("leaderd_term{{election=\"{election}\"}} 7");
        while !metrics.encode().contains(&led) {
            tokio::task::yield_now().await;
        }
        follower.abort();
        metrics
    }

    #[tokio::test]
    async fn names_follow_prometheus_conventions() {
        let text = exercised("billing").await.encode();
        for line in [
            "leaderd_rounds_total{election=\"billing\"} 2",
            "leaderd_statements_total{election=\"billing\"} 1",
            "leaderd_renew_round_trip_seconds_count{election=\"billing\"} 1",
            "leaderd_read_round_trip_seconds_count{election=\"billing\"} 1",
            "leaderd_renew_margin_seconds_count{election=\"billing\"} 1",
            "leaderd_database_clock_offset_seconds{election=\"billing\"} -0.0015",
            "leaderd_database_errors_total{election=\"billing\",kind=\"query_timeout\"} 1",
            "leaderd_hook_runs_total{election=\"billing\",hook=\"on_elected\",outcome=\"success\"} 1",
            "leaderd_hook_duration_seconds_count{election=\"billing\",hook=\"on_elected\",outcome=\"success\"} 1",
            "leaderd_is_leader{election=\"billing\"} 1",
            "leaderd_candidate{election=\"billing\"} 1",
            "leaderd_health_check_failing{election=\"billing\"} 0",
            "leaderd_term{election=\"billing\"} 7",
            "leaderd_leadership_transitions_total{election=\"billing\",direction=\"elected\"} 1",
            "leaderd_database_errors_total{election=\"billing\",kind=\"connect\"} 0",
            "leaderd_database_errors_total{election=\"billing\",kind=\"schema_outdated\"} 0",
            "leaderd_lease_remaining_seconds{election=\"billing\"} ",
            "leaderd_build_info{version=\"",
            "# TYPE leaderd_log_lines_dropped counter",
            "leaderd_log_lines_dropped_total ",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
    }

    /// `sum by (election)(leaderd_is_leader)` needs the label on every per-election
    /// series; only the process's own `log_lines_dropped` goes without.
    #[tokio::test]
    async fn every_per_election_series_has_the_election_label() {
        let text = exercised("billing").await.encode();
        let samples: Vec<&str> = text.lines().filter(|line| !line.starts_with('#')).collect();
        assert!(samples.len() > 20, "{text}");
        for sample in samples {
            if sample.starts_with("leaderd_log_lines_dropped_total ")
                || sample.starts_with("leaderd_build_info{")
            {
                continue;
            }
            assert!(
                sample.contains("{election=\"billing\""),
                "no election label on {sample:?}"
            );
        }
    }

    /// The name is a label value as configured: quotes and backslashes escaped.
    #[test]
    fn the_election_name_is_escaped() {
        let metrics = Metrics::new(r#"a "b" \c"#);
        let text = metrics.encode();
        assert!(
            text.contains(r#"leaderd_is_leader{election="a \"b\" \\c"} 0"#),
            "{text}"
        );
    }
}
