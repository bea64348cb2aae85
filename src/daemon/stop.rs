//! How `leaderd run` stops: the stop sequence the election stops on (reloads served until
//! the shutdown, then no more claims, then the hooks step down while the lease is still
//! renewed), and [`Consumers::stop`], which stops everything started beside the election
//! once the election has stepped down and released.

use anyhow::Context;
use std::future::Future;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::warn;

use super::{kubernetes, systemd};
use crate::election::ClaimGate;
use crate::hooks::Hooks;

/// How long a stopping node waits for its member record to say `stopped`.
pub(crate) const MEMBER_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// What `leaderd run` started beside the election, each stopped by [`Consumers::stop`].
pub(super) struct Consumers {
    /// The hook supervisor; the stop sequence steps it down before the election does.
    pub(super) hooks: DaemonHooks,
    /// True once a stop has begun (the pod label and the member record follow it).
    pub(super) stopping: watch::Sender<bool>,
    pub(super) labeling: kubernetes::Labeling,
    /// The status file's writer: it ends once it has written the election's last word.
    pub(super) writer: JoinHandle<()>,
    /// systemd's notifier and watchdog.
    pub(super) notifier: JoinHandle<()>,
    pub(super) outage_log: JoinHandle<()>,
    /// The metrics' followers of the status and of the standing.
    pub(super) follower: JoinHandle<()>,
    pub(super) standing_follower: JoinHandle<()>,
    pub(super) health: Option<JoinHandle<()>>,
    /// The members task, which records the stop.
    pub(super) member: JoinHandle<()>,
    pub(super) http: Option<JoinHandle<()>>,
}

impl Consumers {
    /// Once the election has stopped: waits for the hooks, says the node is stopping (if
    /// the stop sequence has not already), waits for the pod's last label and the status
    /// file's last write, stops the followers, gives the member record a moment to say
    /// `stopped`, and stops serving HTTP last.
    pub(super) async fn stop(self) -> anyhow::Result<()> {
        let DaemonHooks(hooks) = self.hooks;
        hooks.join().await;
        // Said once: as the stop began (`serve_until_shutdown`), else here.
        self.stopping
            .send_if_modified(|stopping| !std::mem::replace(stopping, true));
        self.labeling.finish().await;
        self.writer.await.context("status file writer failed")?;
        self.notifier.abort();
        self.outage_log.abort();
        self.follower.abort();
        self.standing_follower.abort();
        if let Some(health) = self.health {
            health.abort();
        }
        // It records the stop (one statement, begun as the stop began); not waited for long.
        let mut member = self.member;
        if tokio::time::timeout(MEMBER_STOP_WAIT, &mut member)
            .await
            .is_err()
        {
            member.abort();
            warn!("could not record this node as stopped in leaderd_member");
        }
        if let Some(http) = self.http {
            http.abort();
        }
        Ok(())
    }
}

/// What stops the leader work at a stop (the hook supervisor in the daemon, its model in
/// the simulator): done once the leader work is gone.
pub(crate) trait StepDown {
    fn step_down(&mut self) -> impl Future<Output = ()>;
}

/// The daemon's hooks: systemd hears of the stop as the step-down begins.
pub(super) struct DaemonHooks(pub(super) Hooks);

impl StepDown for DaemonHooks {
    async fn step_down(&mut self) {
        systemd::stopping();
        self.0.step_down().await;
    }
}

/// The stop sequence, the future `Election::run` stops on: serve reloads until `shutdown`
/// ([`serve_until_shutdown`]), then stop the leader work while the election still holds
/// and renews the lease. Only once `hooks` have stepped down does the election step down
/// and release. The simulator drives it too.
pub(crate) async fn stop_sequence<T, L: Future<Output = T>, H: StepDown>(
    shutdown: impl Future<Output = ()>,
    reload_requests: &mut mpsc::UnboundedReceiver<()>,
    load: impl FnMut() -> L,
    mut apply: impl FnMut(T, &mut H),
    claims: &ClaimGate,
    stopping: &watch::Sender<bool>,
    hooks: &mut H,
) {
    serve_until_shutdown(
        shutdown,
        reload_requests,
        load,
        |loaded| apply(loaded, hooks),
        claims,
        stopping,
    )
    .await;
    hooks.step_down().await;
}

/// Serves reload requests (`load` reads the configuration again, `apply` puts it in force)
/// until `shutdown` completes; then this node claims nothing more (`claims`) and says that
/// it is stopping (`stopping`). The simulator drives it too.
async fn serve_until_shutdown<T, L: Future<Output = T>>(
    shutdown: impl Future<Output = ()>,
    reload_requests: &mut mpsc::UnboundedReceiver<()>,
    mut load: impl FnMut() -> L,
    mut apply: impl FnMut(T),
    claims: &ClaimGate,
    stopping: &watch::Sender<bool>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            Some(()) = reload_requests.recv() => {
                let loaded = tokio::select! {
                    biased;
                    _ = &mut shutdown => break,
                    loaded = load() => loaded,
                };
                apply(loaded);
            }
        }
    }
    // The one rule of a stop, whatever it interrupted (a reload, say): claim nothing more.
    claims.close();
    stopping.send_replace(true);
}
