//! The step-down sequence, for a shutdown and a resign alike: stop the leader work (every
//! hook, for a shutdown), run `on_demoted` once per term, and only then let the lease go
//! (a resign is passed on to the election here; for a shutdown the daemon awaits
//! [`super::Hooks::step_down`] before the election stops). It begins in
//! [`Supervisor::begin_resign`] or [`Supervisor::begin_shutdown`], and goes on in
//! [`Supervisor::advance_step_down`] after each turn of the loop ([`Phase`] holds the
//! order, for the simulator's model too).
//!
//! Fence-critical: a run is stopped through `stop_by` (every hook, shutdown only) or
//! `stop_leader_work_by` (leader-scoped runs, shutdown and resign), and on_demoted and the
//! release wait until the leader work of the term is gone.

use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::running::leader_work_running;
use super::{EventJob, Shutdown, Supervisor};
use crate::election::Role;
use crate::hooks::kind::HookKind;

impl Supervisor {
    /// Runs started before a shutdown step-down are stopped by it; those started after
    /// are not. on_demoted never is: it is a step-down's own last act, bounded by its
    /// timeout. A resign stops leader-scoped runs only.
    pub(super) fn stop_receiver(
        &self,
        hook: HookKind,
        leader_scoped: bool,
    ) -> watch::Receiver<Option<Instant>> {
        if self.phase.is_shutting_down() || hook == HookKind::OnDemoted {
            watch::channel(None).1
        } else if leader_scoped {
            self.stop_leader_work_by.subscribe()
        } else {
            self.stop_by.subscribe()
        }
    }

    pub(super) fn queue_on_demoted(&mut self, term: i64) {
        if self.demoted_queued.is_some_and(|queued| queued >= term) {
            return;
        }
        if let Some(command) = self.config.on_demoted.clone() {
            self.demoted_queued = Some(term);
            let hook = HookKind::OnDemoted;
            let mut env = self.env(hook, Role::Unknown);
            set(&mut env, "LEADERD_TERM", term.to_string());
            // This node no longer leads: whoever leads next is not known yet, and the
            // leader before that is this node.
            if self.leader.as_deref() == Some(self.context.node_id.as_str()) {
                set(&mut env, "LEADERD_LEADER", String::new());
                set(
                    &mut env,
                    "LEADERD_PREVIOUS_LEADER",
                    self.context.node_id.clone(),
                );
            }
            self.queue.push_back(EventJob {
                hook,
                command,
                env,
                elected_term: None,
                demoted_term: Some(term),
            });
        }
    }

    /// The one way this side gives leadership up, for a shutdown and a resign alike: stop
    /// every leader-scoped process (SIGTERM, then SIGKILL after the leader_command's stop
    /// timeout), then run on_demoted. The election goes on renewing meanwhile, and
    /// releases the row only after this (the daemon awaits [`super::Hooks::step_down`]
    /// before the election stops; a resign is passed on when done) and after the status
    /// file says so. Returns the instant leader work is stopped by.
    fn stop_leader_work(&mut self) -> Option<Instant> {
        let grace = self
            .config
            .leader_command
            .as_ref()
            .map_or(Duration::ZERO, |c| c.stop_timeout)
            .min(self.config.shutdown_timeout);
        let stop_at = Some(Instant::now() + grace);
        self.stop_leader_work_by.send_if_modified(sooner(stop_at));
        // Queued leader-only hooks are moot now.
        self.queue.retain(|job| job.elected_term.is_none());
        stop_at
    }

    /// A resign (step_down_on_exit, a failed on_elected, a request) while leading: the
    /// leader work stops, on_demoted is queued, and the election resigns once both are
    /// done ([`Self::advance_step_down`]).
    pub(super) fn begin_resign(&mut self) {
        self.stop_leader_work();
        if let Some(term) = self.phase.begin_resign() {
            self.queue_on_demoted(term);
        }
    }

    /// A shutdown's step-down, `done` told when it is over: as a resign, and every event
    /// hook running is stopped too, nothing but on_demoted starts, and the warm guard is
    /// closed (and waited for).
    pub(super) fn begin_shutdown(&mut self, done: oneshot::Sender<()>) {
        let stop_at = self.stop_leader_work();
        let deadline = Instant::now() + self.config.shutdown_timeout;
        // Event hooks running now are stopped too (on_demoted excepted).
        self.stop_by.send_if_modified(sooner(stop_at));
        self.warm_due = None;
        let closing_warm = self.warm.take().map(|guard| tokio::spawn(guard.close()));
        self.queue.retain(|job| job.demoted_term.is_some());
        let led = self.phase.begin_shutdown(Shutdown {
            deadline,
            resigning: None,
            closing_warm,
            done: Some(done),
        });
        if let Some(term) = led {
            self.queue_on_demoted(term);
        }
    }

    /// The step-down order after each turn of the loop: on_demoted starts once its term's
    /// leader work is gone, then a resign is passed on to the election once on_demoted is
    /// done too, then a shutdown is answered once every hook is gone.
    pub(super) fn advance_step_down(&mut self) {
        self.start_next_event_hook();
        let runs = [&self.command_run, &self.while_run, &self.event_run];
        let event_hooks_busy = self.event_run.is_some() || !self.queue.is_empty();
        self.phase.advance_step_down(
            |term| leader_work_running(runs, term),
            event_hooks_busy,
            |term| self.resign.resign_term(term),
        );
    }
}

/// Moves a stop instant earlier, never later: a stop already under way keeps its earlier
/// SIGKILL.
fn sooner(stop_at: Option<Instant>) -> impl FnOnce(&mut Option<Instant>) -> bool {
    move |current| {
        *current = (*current).min(stop_at).or(stop_at);
        true
    }
}

/// Sets `key` in an environment that has it (every hook gets every `LEADERD_*` name).
fn set(env: &mut [(String, String)], key: &str, value: String) {
    if let Some(entry) = env.iter_mut().find(|(k, _)| k == key) {
        entry.1 = value;
    }
}
