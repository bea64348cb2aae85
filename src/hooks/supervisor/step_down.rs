//! The step-down sequence, for a shutdown and a resign alike: stop the leader work (every
//! hook, for a shutdown), run `on_demoted` once per term, and only then let the lease go
//! (a resign is passed on to the election here; for a shutdown the daemon awaits
//! [`super::Hooks::step_down`] before the election stops).
//!
//! Fence-critical: a run is stopped through `stop_by` (every hook, shutdown only) or
//! `stop_leader_work_by` (leader-scoped runs, shutdown and resign), and on_demoted and the
//! release wait until the leader work of the term is gone.

use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::info;

use super::{EventJob, StepDown, Supervisor};
use crate::election::Role;

impl Supervisor {
    /// Runs started before a shutdown step-down are stopped by it; those started after
    /// are not. on_demoted never is: it is a step-down's own last act, bounded by its
    /// timeout. A resign stops leader-scoped runs only.
    pub(super) fn stop_receiver(
        &self,
        hook: &'static str,
        leader_scoped: bool,
    ) -> watch::Receiver<Option<Instant>> {
        if self.stopping || hook == "on_demoted" {
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
            let mut env = self.env("demoted", Role::Unknown);
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
                hook: "on_demoted",
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
    /// releases the row only after this (the daemon awaits [`Hooks::step_down`] before
    /// the election stops; a resign is passed on when done) and after the status file
    /// says so.
    pub(super) fn begin_step_down(&mut self, reason: StepDown) {
        let grace = self
            .config
            .leader_command
            .as_ref()
            .map_or(Duration::ZERO, |c| c.stop_timeout)
            .min(self.config.shutdown_timeout);
        let stop_at = Some(Instant::now() + grace);
        // A stop already under way keeps its earlier SIGKILL.
        let sooner = |current: &mut Option<Instant>| {
            *current = (*current).min(stop_at).or(stop_at);
            true
        };
        self.stop_leader_work_by.send_if_modified(sooner);
        self.command_restart_at = None;
        // Queued leader-only hooks are moot now.
        self.queue.retain(|job| job.elected_term.is_none());
        match reason {
            StepDown::Shutdown => {
                self.step_down_deadline = Some(Instant::now() + self.config.shutdown_timeout);
                // Event hooks running now are stopped too (on_demoted excepted), and none
                // but on_demoted runs.
                self.stop_by.send_if_modified(sooner);
                self.stopping = true;
                // Closed, and waited for before the step-down is done (see the loop).
                self.warm_due = None;
                if let Some(guard) = self.warm.take() {
                    self.closing_warm = Some(tokio::spawn(guard.close()));
                }
                self.queue.retain(|job| job.demoted_term.is_some());
            }
            StepDown::Resign => self.resigning = self.leading,
        }
        if let Some(term) = self.leading.take() {
            self.queue_on_demoted(term);
        }
    }

    /// Passes a resign on to the election once its leader work and on_demoted are done.
    pub(super) fn resign_when_stepped_down(&mut self) {
        let Some(term) = self.resigning else { return };
        if self.leader_work_running(term) || self.event_run.is_some() || !self.queue.is_empty() {
            return;
        }
        self.resigning = None;
        info!(
            term,
            "leader work stopped and on_demoted done; releasing the lease"
        );
        self.resign.resign_term(term);
    }
}

/// Sets `key` in an environment that has it (every hook gets every `LEADERD_*` name).
fn set(env: &mut [(String, String)], key: &str, value: String) {
    if let Some(entry) = env.iter_mut().find(|(k, _)| k == key) {
        entry.1 = value;
    }
}
