//! Prometheus metrics: updated by the election's round observer, a task that follows the
//! status, and the hook runner. Every update is an atomic operation: nothing here can hold
//! up a renewal.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::election::{Role, RoundReport, Status};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    /// `elected` or `demoted`.
    direction: &'static str,
}

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
}

/// The node's metrics; cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("leaderd");
        let inner = Inner {
            is_leader: Gauge::default(),
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
            registry: Registry::default(),
        };
        registry.register(
            "is_leader",
            "1 while this node acts as leader, else 0",
            inner.is_leader.clone(),
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
            "log_lines_dropped",
            "Log lines dropped because stderr did not take them in time (a stalled journald, \
             a pipe nobody reads); the election never waits for its log",
            crate::logging::lines_dropped_metric(),
        );
        Metrics(Arc::new(Inner { registry, ..inner }))
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
                let (leader, term) = {
                    let current = status.borrow_and_update();
                    (current.role == Role::Leader, current.term)
                };
                let m = &metrics.0;
                m.is_leader.set(leader as i64);
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
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.0.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        let metrics = Metrics::new();
        metrics.observe_round(&RoundReport {
            completed: 1,
            round_trip: Some(Duration::from_millis(2)),
            renewal_margin: Some(Duration::from_millis(190)),
            error_kind: None,
            clock_offset_us: Some(-1500),
            statements: 1,
        });
        metrics.observe_round(&RoundReport {
            error_kind: Some("query_timeout"),
            ..RoundReport::default()
        });
        metrics.hook_ran("on_elected", "success", Duration::from_millis(30));
        let text = metrics.encode();
        for line in [
            "leaderd_rounds_total 2",
            "leaderd_statements_total 1",
            "leaderd_renew_round_trip_seconds_count 1",
            "leaderd_renew_margin_seconds_count 1",
            "leaderd_database_clock_offset_seconds -0.0015",
            "leaderd_database_errors_total{kind=\"query_timeout\"} 1",
            "leaderd_hook_runs_total{hook=\"on_elected\",outcome=\"success\"} 1",
            "leaderd_hook_duration_seconds_count{hook=\"on_elected\",outcome=\"success\"} 1",
            "leaderd_is_leader 0",
            "# TYPE leaderd_log_lines_dropped counter",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
    }
}
