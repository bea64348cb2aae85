//! `leaderd run`: the election wired to its consumers (hooks, status file, metrics,
//! systemd, HTTP), with signals turned into one shutdown future and reload requests.

use anyhow::Context;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::config::{Config, ConfigError};
use crate::election::{Election, ElectionSettings, Status};
use crate::hooks::{self, HookContext, Hooks};
use crate::logging::LogLevel;
use crate::metrics::Metrics;
use crate::store::{SqlStore, Timeouts};
use crate::{http, signals, status_file, systemd};

/// Where the configuration came from, to read it again on SIGHUP.
pub struct ConfigSource {
    pub file: Option<PathBuf>,
    pub node_id: Option<String>,
}

pub fn store(config: &Config, migrate: bool) -> SqlStore {
    SqlStore::new(
        config.database_url.clone(),
        Timeouts {
            connect: config.connect_timeout,
            query: config.query_timeout,
        },
        migrate,
    )
}

pub async fn run(config: Config, source: ConfigSource, log: LogLevel) -> anyhow::Result<()> {
    // Before anything slow, so that a stop during start-up is a clean one.
    let shutdown = signals::shutdown_signal().context("cannot install signal handlers")?;
    let mut reload_requests =
        signals::reload_requests().context("cannot install signal handlers")?;
    info!(
        election = %config.election,
        node = %config.node_id,
        database = %config.database_url,
        ttl = %humantime::format_duration(config.ttl),
        interval = %humantime::format_duration(config.interval),
        "leaderd starting"
    );
    let settings = ElectionSettings::new(
        &config.election,
        &config.node_id,
        config.ttl,
        config.interval,
    )
    .map_err(ConfigError::from)?;
    let (mut election, statuses) = Election::new(settings, store(&config, config.migrate));
    // A node told to stop never claims again, whatever its link does while its hooks
    // step down.
    let claims = election.claim_gate();
    let metrics = Metrics::new(&config.election);
    let (rounds_completed, rounds) = watch::channel(0u64);
    let observer_metrics = metrics.clone();
    election.observe(Arc::new(move |report| {
        observer_metrics.observe_round(report);
        rounds_completed.send_replace(report.completed);
    }));
    let http = match config.http_listen {
        Some(addr) => {
            let (bound, task) = http::serve(
                addr,
                config.election.clone(),
                config.node_id.clone(),
                statuses.clone(),
                metrics.clone(),
            )
            .await?;
            info!(%bound, "serving /leader, /status and /metrics");
            Some(task)
        }
        None => None,
    };
    let context = HookContext {
        election: config.election.clone(),
        node_id: config.node_id.clone(),
        interval: config.interval,
        ttl: config.ttl,
        metrics: Some(metrics.clone()),
        containment: hooks::resolve_containment(config.hooks.containment)?,
    };
    // Always running, so that a reload can add hooks to a node that had none.
    let events = election.events();
    let resign = election.resign_handle();
    let mut hooks = Hooks::spawn(
        config.hooks.clone(),
        context,
        events,
        statuses.clone(),
        resign,
    );
    let (writer, durable) = status_file::spawn_writer(
        config.status_path.clone(),
        config.election.clone(),
        config.node_id.clone(),
        statuses.clone(),
    );
    election.release_after(durable);
    let follower = metrics.follow_status(statuses.clone());
    let notifier = systemd::spawn_notifier(statuses.clone(), rounds);
    // On SIGTERM the hooks stop first, while the election still holds and renews the
    // lease; only then does the election step down and release.
    let mut running = config;
    let stop = async {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => {
                    claims.close();
                    break;
                }
                Some(()) = reload_requests.recv() => {
                    systemd::reloading();
                    let loaded = tokio::select! {
                        loaded = load_again(&source) => loaded,
                        _ = &mut shutdown => break,
                    };
                    reload(loaded, &mut running, &mut hooks, &log, &statuses);
                }
            }
        }
        systemd::stopping();
        hooks.step_down().await;
    };
    election.run(stop).await;
    hooks.join().await;
    writer.await.context("status file writer failed")?;
    notifier.abort();
    follower.abort();
    if let Some(http) = http {
        http.abort();
    }
    info!("leaderd stopped");
    Ok(())
}

/// SIGHUP: reads the configuration again, off the election loop (which polls the reload):
/// a file on a hung file system must not stall renewals.
async fn load_again(source: &ConfigSource) -> anyhow::Result<Config> {
    let (file, node_id) = (source.file.clone(), source.node_id.clone());
    off_the_loop(move || Config::load(file.as_deref(), node_id.as_deref())).await
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
            let needs_restart = [
                ("node.id", old.node_id != new.node_id),
                ("election.name", old.election != new.election),
                ("election.ttl", old.ttl != new.ttl),
                ("election.interval", old.interval != new.interval),
                ("database.url", old.database_url != new.database_url),
                (
                    "database.connect_timeout",
                    old.connect_timeout != new.connect_timeout,
                ),
                (
                    "database.query_timeout",
                    old.query_timeout != new.query_timeout,
                ),
                ("database.migrate", old.migrate != new.migrate),
                ("status.path", old.status_path != new.status_path),
                ("http.listen", old.http_listen != new.http_listen),
                ("log.format", old.log_format != new.log_format),
                (
                    "hooks.containment",
                    old.hooks.containment != new.hooks.containment,
                ),
            ];
            for (key, _) in needs_restart.iter().filter(|(_, changed)| *changed) {
                warn!(
                    key,
                    "changed in the configuration but applies only after a restart"
                );
            }
            if new.hooks != old.hooks {
                hooks.reload(new.hooks.clone());
            }
            if new.log_level != old.log_level {
                match log.set(&new.log_level) {
                    Ok(()) => info!(level = %new.log_level, "log level reloaded"),
                    Err(why) => warn!("log level not reloaded: {why}"),
                }
            }
            // The containment stays what it was at start (warned above if it changed).
            let containment = running.hooks.containment;
            running.hooks = new.hooks;
            running.hooks.containment = containment;
            running.log_level = new.log_level;
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
