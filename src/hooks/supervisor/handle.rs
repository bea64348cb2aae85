//! [`Hooks`]: the supervisor as the rest of leaderd sees it. The daemon starts it, hands it
//! a reloaded `[hooks]` section, and awaits its step-down before the election stops; all of
//! it goes to the supervisor's task through channels.

use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::warn;

use super::{CrashLoopWiring, Supervisor};
use crate::election::{ResignHandle, RoleEvent, Status};
use crate::hooks::config::HooksConfig;
use crate::hooks::run::{HookContext, KILL_GRACE};

/// Controls the hook supervisor from the edge of the program.
pub struct Hooks {
    step_down: Option<oneshot::Sender<oneshot::Sender<()>>>,
    resigns: mpsc::Sender<()>,
    reloads: mpsc::UnboundedSender<HooksConfig>,
    task: JoinHandle<()>,
    shutdown_timeout: Duration,
}

impl Hooks {
    /// Starts the supervisor for `config` on the election's events and status; a crash loop
    /// shows and acts through `crash_loops`.
    pub fn spawn(
        config: HooksConfig,
        context: HookContext,
        events: mpsc::UnboundedReceiver<RoleEvent>,
        status: watch::Receiver<Status>,
        resign: ResignHandle,
        crash_loops: CrashLoopWiring,
    ) -> Hooks {
        let (step_down, step_down_requests) = oneshot::channel();
        let (reloads, reloaded) = mpsc::unbounded_channel();
        let (resigns, resign_requests) = mpsc::channel(1);
        let shutdown_timeout = config.shutdown_timeout;
        let supervisor = Supervisor::new(config, context, status, resign, crash_loops);
        let task =
            tokio::spawn(supervisor.run(events, step_down_requests, reloaded, resign_requests));
        Hooks {
            step_down: Some(step_down),
            resigns,
            reloads,
            task,
            shutdown_timeout,
        }
    }

    /// Replaces the hook configuration. Runs from now on use the new one; processes
    /// already running (a `leader_command` included) go on until they end or are stopped.
    pub fn reload(&mut self, config: HooksConfig) {
        self.shutdown_timeout = config.shutdown_timeout;
        let _ = self.reloads.send(config);
    }

    /// For a stopping node: stops every leader-scoped process (SIGTERM, then SIGKILL after
    /// its stop timeout, or sooner if the lease requires it) and, if this node was leading,
    /// runs `on_demoted`. Returns when done, at most `hooks.shutdown_timeout` later. The
    /// election keeps renewing meanwhile, so the next leader's work cannot overlap.
    pub async fn step_down(&mut self) {
        let Some(request) = self.step_down.take() else {
            return;
        };
        let (done, finished) = oneshot::channel();
        if request.send(done).is_ok() {
            // A hook past its timeout gets KILL_GRACE more before SIGKILL.
            let bound = self.shutdown_timeout + KILL_GRACE + Duration::from_millis(500);
            if tokio::time::timeout(bound, finished).await.is_err() {
                warn!("hooks did not finish stepping down within hooks.shutdown_timeout");
            }
        }
    }

    /// A handle that makes this node, if it leads, step down through the full sequence
    /// (leader work stopped, on_demoted, then the election resigns), as a leader_command
    /// with step_down_on_exit does.
    pub fn resigner(&self) -> HookResign {
        HookResign(self.resigns.clone())
    }

    /// Waits for the supervisor to end (after the election's event channel closed).
    pub async fn join(self) {
        let _ = self.task.await;
    }
}

/// See [`Hooks::resigner`].
#[derive(Debug, Clone)]
pub struct HookResign(mpsc::Sender<()>);

impl HookResign {
    /// Steps down if this node leads; nothing otherwise. Never waits.
    pub fn resign(&self) {
        // One pending request is enough.
        let _ = self.0.try_send(());
    }
}
