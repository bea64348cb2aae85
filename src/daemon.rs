//! `leaderd run`: the election wired to its consumers (hooks, status file, metrics,
//! systemd, HTTP), with signals turned into one shutdown future and reload requests. The
//! consumers of its own are its modules; `stop` is how it stops.

use anyhow::Context;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;
use tracing::{error, info, warn};

mod http;
mod kubernetes;
pub(crate) mod members;
mod metrics;
mod outage;
mod status_writer;
mod stop;
mod systemd;

/// Why the HTTP server could not start (the CLI's exit status for it).
pub(crate) use http::HttpError;
/// The stop sequence, which the simulator drives too (with its model of the hooks).
pub(crate) use stop::stop_sequence;
#[cfg(test)]
pub(crate) use stop::{MEMBER_STOP_WAIT, StepDown};

use crate::config::{Config, ConfigError, UrlSource};
use crate::election::{Election, ElectionSettings, Status};
use crate::hooks::health::{self, HealthWiring};
use crate::hooks::{self, HookContext, Hooks};
use crate::logging::LogLevel;
use crate::signals;
use crate::standing::Health;
use crate::standing::Standing;
use metrics::Metrics;
use stop::{Consumers, DaemonHooks};

/// What a stop may take besides `hooks.shutdown_timeout` and the release: the grace
/// between a hook's SIGTERM and its SIGKILL.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Where the configuration came from, to read it again on SIGHUP.
pub struct ConfigSource {
    pub file: Option<PathBuf>,
    pub node_id: Option<String>,
    /// `--database URL`.
    pub database: Option<String>,
}

pub async fn run(config: Config, source: ConfigSource, log: LogLevel) -> anyhow::Result<()> {
    // Before anything slow, so that a stop during start-up is a clean one.
    let (shutdown, mut reload_requests) =
        signals::daemon_signals().context("cannot install signal handlers")?;
    info!(
        election = %config.election.name,
        node = %config.node.id,
        database = %config.database.url,
        ttl = %humantime::format_duration(config.election.ttl),
        interval = %humantime::format_duration(config.election.interval),
        "leaderd starting"
    );
    warn_of_risky_settings(&config);
    let settings = ElectionSettings::new(
        &config.election.name,
        &config.node.id,
        config.election.ttl,
        config.election.interval,
    )
    .map_err(ConfigError::from)?;
    let (mut election, statuses) = Election::new(settings, config.store(config.database.migrate));
    // A node told to stop never claims again, whatever its link does while its hooks
    // step down.
    let claims = election.claim_gate();
    // An observer follows the election and never claims: its rounds are reads.
    if !config.election.candidate {
        claims.close();
    }
    let health_gate = config
        .election
        .health_check
        .as_ref()
        .filter(|_| config.election.candidate)
        .map(|_| election.extra_claim_gate());
    if config.election.health_check.is_some() && !config.election.candidate {
        warn!("election.health_check is not run on an observer (election.candidate = false)");
    }
    let (standing_sender, standing) = watch::channel(Standing {
        candidate: config.election.candidate,
        health: health_gate.as_ref().map(|_| Health::Starting),
        backoff: None,
    });
    let metrics = Metrics::new(&config.election.name);
    metrics.expect_hooks(&config);
    let (rounds_completed, rounds) = watch::channel(0u64);
    // When the last round completed, for /healthz.
    let (round_times, last_round) = watch::channel(None);
    let observer_metrics = metrics.clone();
    // A database outage, logged while it lasts (at most every 10 s, with its cause).
    let outage = outage::OutageLog::default();
    let outage_log = outage.spawn(election.round_errors());
    // A database clock that steps by more than the safety margin, warned of (a log line).
    let clock_jumps = std::sync::Mutex::new(crate::election::ClockJumps::new(
        crate::election::safety_margin(config.election.ttl),
    ));
    election.observe(Arc::new(move |report| {
        if report.error_kind.is_none() {
            outage.round_ok();
        }
        let mut jumps = clock_jumps.lock().unwrap_or_else(|e| e.into_inner());
        jumps.observe(report, tokio::time::Instant::now());
        observer_metrics.observe_round(report);
        rounds_completed.send_replace(report.completed);
        round_times.send_replace(Some(std::time::Instant::now()));
    }));
    let http = serve_http(&config, &statuses, &standing, &metrics, last_round).await?;
    let context = HookContext {
        election: config.election.name.clone(),
        node_id: config.node.id.clone(),
        interval: config.election.interval,
        ttl: config.election.ttl,
        metrics: Some(std::sync::Arc::new(metrics.clone())),
        containment: hooks::resolve_containment(config.hooks.containment)?,
        backend: config.database.url.backend(),
    };
    // Always running, so that a reload can add hooks to a node that had none.
    let events = election.events();
    let resign = election.resign_handle();
    // A node whose on_elected keeps failing stays out of claims for a while.
    let crash_loops = hooks::CrashLoopWiring {
        gate: Some(election.extra_claim_gate()),
        standing: Some(standing_sender.clone()),
    };
    let hooks = Hooks::spawn(
        config.hooks.clone(),
        context.clone(),
        events,
        statuses.clone(),
        resign,
        crash_loops,
    );
    let health = match (&config.election.health_check, health_gate) {
        (Some(check), Some(gate)) => Some(health::spawn(
            check.clone(),
            context,
            HealthWiring {
                gate,
                resign: hooks.resigner(),
                status: statuses.clone(),
                standing: standing_sender,
            },
        )),
        _ => None,
    };
    let (writer, durable) = status_writer::spawn_writer(
        config.status.path.clone(),
        config.election.name.clone(),
        config.node.id.clone(),
        statuses.clone(),
        standing.clone(),
    );
    election.release_after(durable);
    let follower = metrics.follow_status(statuses.clone());
    let standing_follower = metrics.follow_standing(standing.clone());
    // Set as a stop begins: the pod's role label goes back to `follower`, and the member
    // record says `stopped`.
    let (stopping, stopping_seen) = watch::channel(false);
    // On a connection of its own, so it never delays a renewal.
    let member = members::spawn(
        &config,
        config.store(false),
        statuses.clone(),
        standing.clone(),
        stopping_seen.clone(),
    );
    let notifier = systemd::spawn_notifier(statuses.clone(), rounds);
    // The pod's role label: `follower` now, and again as soon as a stop begins.
    let labeling = kubernetes::start(&config.kubernetes, statuses.clone(), stopping_seen)?;
    // Everything started beside the election, stopped in one call once it has.
    let mut consumers = Consumers {
        hooks: DaemonHooks(hooks),
        stopping,
        labeling,
        writer,
        notifier,
        outage_log,
        follower,
        standing_follower,
        health,
        member,
        http,
    };
    // On SIGTERM the hooks stop first, while the election still holds and renews the
    // lease; only then does the election step down and release.
    let mut running = config;
    let stop = stop_sequence(
        shutdown,
        &mut reload_requests,
        || {
            systemd::reloading();
            load_again(&source)
        },
        |loaded, hooks: &mut DaemonHooks| {
            reload(loaded, &mut running, &mut hooks.0, &log, &statuses)
        },
        &claims,
        &consumers.stopping,
        &mut consumers.hooks,
    );
    election.run(stop).await;
    consumers.stop().await?;
    info!("leaderd stopped");
    Ok(())
}

/// Warns, at start, of settings that work but carry a risk the operator may not see: a
/// stop sequence longer than systemd's stop timeout, and the embedded default database.
fn warn_of_risky_settings(config: &Config) {
    // The stop sequence (the hooks, then the release) must fit in systemd's stop timeout,
    // or systemd kills the node before it released and failover waits a ttl.
    let stop_needs = config.hooks.shutdown_timeout + config.database.query_timeout + STOP_GRACE;
    tokio::spawn(async move {
        if let Some(limit) = systemd::unit_stop_timeout()
            .await
            .filter(|l| *l < stop_needs)
        {
            warn!(
                "hooks.shutdown_timeout, the release (database.query_timeout) and the hooks' \
                 kill grace take up to {} at a stop, more than this unit's TimeoutStopSec ({}): \
                 systemd would kill leaderd before it released; raise TimeoutStopSec in a \
                 drop-in, or lower hooks.shutdown_timeout",
                humantime::format_duration(stop_needs),
                humantime::format_duration(limit)
            );
        }
    });
    if config.database.source == UrlSource::Default {
        let here = std::env::current_dir().unwrap_or_default();
        warn!(
            "no database configured: using the embedded default {} in {}, a database of \
             this host alone; set database.url (LEADERD_DATABASE__URL) for an election \
             among hosts",
            config.database.url,
            here.display()
        );
    }
}

/// Serves /healthz, /leader, /status and /metrics if `http.listen` is set.
async fn serve_http(
    config: &Config,
    statuses: &watch::Receiver<Status>,
    standing: &watch::Receiver<Standing>,
    metrics: &Metrics,
    last_round: watch::Receiver<Option<std::time::Instant>>,
) -> Result<Option<tokio::task::JoinHandle<()>>, http::HttpError> {
    let Some(addr) = config.http.listen else {
        return Ok(None);
    };
    let liveness = http::Liveness {
        last_round,
        stale_after: http::stale_after(config),
    };
    let (bound, task) = http::serve(
        addr,
        config.election.name.clone(),
        config.node.id.clone(),
        statuses.clone(),
        standing.clone(),
        metrics.clone(),
        liveness,
    )
    .await?;
    info!(%bound, "serving /healthz, /leader, /status and /metrics");
    Ok(Some(task))
}

/// SIGHUP: reads the configuration again, off the election loop (which polls the reload):
/// a file on a hung file system must not stall renewals.
async fn load_again(source: &ConfigSource) -> anyhow::Result<Config> {
    let (file, node_id) = (source.file.clone(), source.node_id.clone());
    let database = source.database.clone();
    off_the_loop(move || {
        let config = Config::load(file.as_deref(), node_id.as_deref())?;
        match &database {
            Some(url) => config.with_database(url),
            None => Ok(config),
        }
    })
    .await
}

/// Runs a blocking `load` on tokio's blocking threads.
async fn off_the_loop<T: Send + 'static>(
    load: impl FnOnce() -> Result<T, ConfigError> + Send + 'static,
) -> anyhow::Result<T> {
    Ok(tokio::task::spawn_blocking(load).await??)
}

/// Applies what can change at run time (hooks, log level) from the configuration read
/// again. A file that does not load is rejected as a whole.
fn reload(
    loaded: anyhow::Result<Config>,
    running: &mut Config,
    hooks: &mut Hooks,
    log: &LogLevel,
    status: &watch::Receiver<Status>,
) {
    match loaded {
        Err(rejected) => error!(
            "configuration reload rejected, the running configuration stays in force: {rejected}"
        ),
        Ok(new) => {
            let old = &*running;
            let keys = old.needs_restart(&new).join(", ");
            if !keys.is_empty() {
                warn!(
                    keys = %keys,
                    "changed in the configuration but applied only after a restart: {keys}"
                );
            }
            if new.hooks != old.hooks {
                hooks.reload(new.hooks.clone());
            }
            if new.log.level != old.log.level {
                match log.set(&new.log.level) {
                    Ok(()) => info!(level = %new.log.level, "log level reloaded"),
                    Err(why) => warn!("log level not reloaded: {why}"),
                }
            }
            // The containment stays what it was at start (warned above if it changed).
            let containment = running.hooks.containment;
            running.hooks = new.hooks;
            running.hooks.containment = containment;
            running.log.level = new.log.level;
            info!("configuration reloaded");
        }
    }
    systemd::reloaded(&status.borrow());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    /// The reload is polled by the election loop: a read that hangs (a hung file system)
    /// must leave the loop's thread free. One thread here, as the loop has.
    #[tokio::test(flavor = "current_thread")]
    async fn a_slow_configuration_read_leaves_the_loop_running() {
        let ticks = Arc::new(AtomicU32::new(0));
        let ticking = Arc::clone(&ticks);
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                ticking.fetch_add(1, Ordering::Relaxed);
            }
        });
        let loaded = off_the_loop(|| {
            std::thread::sleep(Duration::from_millis(500));
            Ok(7)
        })
        .await
        .unwrap();
        ticker.abort();
        assert_eq!(loaded, 7);
        let ticks = ticks.load(Ordering::Relaxed);
        assert!(
            ticks >= 20,
            "the loop's thread ticked {ticks} times in 500 ms"
        );
    }
}
