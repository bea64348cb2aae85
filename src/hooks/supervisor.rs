//! Supervising the hooks: a task of its own, fed by the election's event channel and status
//! watch, so nothing here can delay a renewal. Event hooks run one at a time in the order
//! their events happened; `while_leader` ticks and the `leader_command` run beside them
//! while this node leads; and a step-down (shutdown or resign) stops the leader work
//! before `on_demoted` runs and the lease is given up.
//!
//! This file holds the task and its loop; `phase` where it stands ([`Phase`]: following,
//! leading, resigning, shutting down) and the step-down order, `handle` is how the rest of
//! leaderd drives it ([`Hooks`]), `step_down` the step-down sequence, `warm` the guard
//! started ahead of a fenced hook, and `running` a run in progress. What the
//! [`Supervisor`] keeps beside its phase, and why, `phase.rs` says.

use std::collections::VecDeque;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until};
use tracing::{info, warn};

use super::config::{ElectedFailure, HookCommand, HooksConfig, Restart};
use super::kind::HookKind;
use super::process::{Io, WarmGuard};
use super::run::{HookContext, RunOutcome, RunSpec, run};
use crate::election::{ResignHandle, Role, RoleEvent, Status};
use crate::store::Fence;

mod backoff;
mod handle;
mod phase;
mod running;
mod step_down;
mod warm;
pub use backoff::CrashLoopWiring;
use backoff::CrashLoops;
pub use handle::{HookResign, Hooks};
pub(crate) use phase::{Phase, Shutdown};
use running::{RunningHook, join_running, leader_work_running};

/// A queued event hook with the environment of its moment.
struct EventJob {
    hook: HookKind,
    command: HookCommand,
    env: Vec<(String, String)>,
    /// on_elected of this term: leader-scoped, and followed by the leader_command.
    elected_term: Option<i64>,
    /// on_demoted of this term: waits until that term's leader work is gone.
    demoted_term: Option<i64>,
}

/// The supervisor task's state: what runs now, what is queued, and where a step-down is.
struct Supervisor {
    config: HooksConfig,
    context: HookContext,
    status: watch::Receiver<Status>,
    resign: ResignHandle,
    /// SIGTERM now and SIGKILL by the instant, for every hook running (shutdown).
    stop_by: watch::Sender<Option<Instant>>,
    /// The same for leader-scoped processes only (shutdown and resign).
    stop_leader_work_by: watch::Sender<Option<Instant>>,
    /// Following, leading, resigning or shutting down, with what each has.
    phase: Phase,
    /// The last term whose on_demoted was queued: a term is demoted once, whichever of
    /// a resign, a shutdown and the election's own event says so first.
    demoted_queued: Option<i64>,
    /// The leader, the one before it and the term, as the events tell: for the hooks'
    /// `LEADERD_*` environment.
    leader: Option<String>,
    previous_leader: Option<String>,
    term: Option<i64>,
    /// Event hooks waiting for the one running now, in the order their events happened.
    queue: VecDeque<EventJob>,
    /// The event hook running now (its term is set if it is on_elected).
    event_run: Option<RunningHook>,
    /// The while_leader run of the last tick, if still running.
    while_run: Option<RunningHook>,
    command_run: Option<RunningHook>,
    /// A guard started ahead of time for the next fenced hook, and when to start the next.
    warm: Option<WarmGuard>,
    warm_due: Option<Instant>,
    /// Hooks that keep failing, and how long each is held off (`backoff.rs`).
    crash_loops: CrashLoops,
}

impl Supervisor {
    fn new(
        config: HooksConfig,
        context: HookContext,
        status: watch::Receiver<Status>,
        resign: ResignHandle,
        crash_loops: CrashLoopWiring,
    ) -> Self {
        let crash_loops = CrashLoops::new(crash_loops, context.interval);
        Supervisor {
            crash_loops,
            config,
            context,
            status,
            resign,
            stop_by: watch::channel(None).0,
            stop_leader_work_by: watch::channel(None).0,
            phase: Phase::Following,
            demoted_queued: None,
            leader: None,
            previous_leader: None,
            term: None,
            queue: VecDeque::new(),
            event_run: None,
            while_run: None,
            command_run: None,
            warm: None,
            warm_due: Some(Instant::now()),
        }
    }

    fn env(&self, hook: HookKind, role: Role) -> Vec<(String, String)> {
        let c = &self.context;
        vec![
            ("LEADERD_EVENT".into(), hook.event().into()),
            ("LEADERD_ELECTION".into(), c.election.clone()),
            ("LEADERD_NODE_ID".into(), c.node_id.clone()),
            ("LEADERD_ROLE".into(), role.as_str().into()),
            (
                "LEADERD_LEADER".into(),
                self.leader.clone().unwrap_or_default(),
            ),
            (
                "LEADERD_PREVIOUS_LEADER".into(),
                self.previous_leader.clone().unwrap_or_default(),
            ),
            (
                "LEADERD_TERM".into(),
                self.term.map(|t| t.to_string()).unwrap_or_default(),
            ),
            // Leader work's only (the hooks fenced to the term): no other hook may pass
            // for the leader's.
            (
                "LEADERD_FENCE".into(),
                match (hook.is_leader_work(), role, self.term) {
                    (true, Role::Leader, Some(term)) => {
                        Fence::new(&c.election, term).statement(c.backend)
                    }
                    _ => String::new(),
                },
            ),
        ]
    }

    fn start(
        &mut self,
        hook: HookKind,
        command: &HookCommand,
        env: Vec<(String, String)>,
        fence_term: Option<i64>,
    ) -> RunningHook {
        let mut env = env;
        env.extend(command.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut timeout = command.timeout;
        if let Phase::ShuttingDown(shutdown) = &self.phase {
            // on_demoted at shutdown gets what is left of hooks.shutdown_timeout.
            timeout = timeout.min(shutdown.deadline.saturating_duration_since(Instant::now()));
        }
        let spec = RunSpec {
            hook: hook.as_str(),
            argv: command.argv.clone(),
            env,
            timeout: Some(timeout),
            fence_term,
            io: Io::Logged,
            forward: None,
            warm: fence_term.and_then(|_| self.take_warm_guard()),
        };
        self.spawn(hook, spec)
    }

    /// Starts `spec` (a run of `hook`) on a task of its own, stoppable as
    /// [`Self::stop_receiver`] says.
    fn spawn(&self, hook: HookKind, spec: RunSpec) -> RunningHook {
        let term = spec.fence_term;
        let stop_by = self.stop_receiver(hook, term.is_some());
        RunningHook {
            handle: tokio::spawn(run(
                spec,
                self.context.clone(),
                self.status.clone(),
                stop_by,
            )),
            term,
        }
    }

    fn start_leader_command(&mut self) {
        let Some(command) = &self.config.leader_command else {
            return;
        };
        // Only while leading (so never while shutting down).
        let Some(term) = self.phase.leading() else {
            return;
        };
        // Not before this term's on_elected has finished.
        let elected_pending = self
            .event_run
            .as_ref()
            .is_some_and(|run| run.term == Some(term))
            || self.queue.iter().any(|job| job.elected_term == Some(term));
        if self.command_run.is_some() || elected_pending {
            return;
        }
        let hook = HookKind::LeaderCommand;
        let mut env = self.env(hook, Role::Leader);
        env.extend(command.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let spec = RunSpec {
            hook: hook.as_str(),
            argv: command.argv.clone(),
            env,
            timeout: None,
            fence_term: Some(term),
            io: Io::Logged,
            forward: None,
            warm: self.take_warm_guard(),
        };
        info!(term, "starting leader_command");
        self.command_run = Some(self.spawn(hook, spec));
        self.crash_loops.command_started();
    }

    fn on_event(&mut self, event: RoleEvent) {
        match event {
            RoleEvent::Elected { term } => {
                // A resign of an earlier term is moot: that term is over.
                self.phase.elected(term);
                self.term = Some(term);
                self.stop_leader_work_by.send_replace(None);
                match self.config.on_elected.clone() {
                    Some(command) => {
                        let hook = HookKind::OnElected;
                        let env = self.env(hook, Role::Leader);
                        self.queue.push_back(EventJob {
                            hook,
                            command,
                            env,
                            elected_term: Some(term),
                            demoted_term: None,
                        });
                    }
                    None => self.start_leader_command(),
                }
            }
            RoleEvent::Demoted { term } => {
                // A pending leader_command restart ends with the term.
                self.phase.demoted();
                self.crash_loops.term_ended();
                // Queued leader-only hooks of that term are moot now.
                self.queue.retain(|job| job.elected_term.is_none());
                // Running ones are stopped by their fence (the status no longer says
                // leader); on_demoted waits for them below.
                self.queue_on_demoted(term);
            }
            RoleEvent::ResignRequested { term } => {
                if self.phase.is_shutting_down() || self.phase.resigning().is_some() {
                    // A step-down is already under way.
                } else if self.phase.leading() == Some(term) {
                    info!(term, "asked to step down; stopping leader work");
                    self.begin_resign();
                } else {
                    // No leader work of that term here: nothing to stop first.
                    self.resign.resign_term(term);
                }
            }
            RoleEvent::LeaderChanged {
                previous,
                current,
                term,
            } => {
                // The leader before the current one, over a spell without one: followers
                // that see b, then no one, then a, keep b as a's previous leader.
                if previous.is_some() {
                    self.previous_leader = previous;
                }
                self.leader = current;
                self.term = term.or(self.term);
                if let Some(command) = self.config.on_leader_change.clone() {
                    let role = self.status.borrow().role;
                    let hook = HookKind::OnLeaderChange;
                    let env = self.env(hook, role);
                    self.queue.push_back(EventJob {
                        hook,
                        command,
                        env,
                        elected_term: None,
                        demoted_term: None,
                    });
                }
            }
        }
    }

    /// Whether leader-scoped processes of `term` or earlier are still running.
    fn leader_work_running(&self, term: i64) -> bool {
        let runs = [&self.command_run, &self.while_run, &self.event_run];
        leader_work_running(runs, term)
    }

    fn start_next_event_hook(&mut self) {
        if self.event_run.is_some() {
            return;
        }
        // on_demoted of a term (and whatever follows it) waits until that term's leader
        // work is gone.
        let front = self.queue.front();
        if front
            .and_then(|job| job.demoted_term)
            .is_some_and(|t| self.leader_work_running(t))
        {
            return;
        }
        if let Some(job) = self.queue.pop_front() {
            self.event_run = Some(self.start(job.hook, &job.command, job.env, job.elected_term));
        }
    }

    async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<RoleEvent>,
        step_down: oneshot::Receiver<oneshot::Sender<()>>,
        mut reloads: mpsc::UnboundedReceiver<HooksConfig>,
        mut resigns: mpsc::Receiver<()>,
    ) {
        tokio::pin!(step_down);
        loop {
            self.start_next_event_hook();
            let (next_while, command_restart_at) = self.phase.timers();
            let while_due = next_while.is_some() && self.config.while_leader.is_some();
            let shutting_down = self.phase.is_shutting_down();
            let closing_warm = self.phase.closing_warm();
            tokio::select! {
                // A stop first: an event waiting beside it must not start leader work.
                biased;
                done = &mut step_down, if !shutting_down => {
                    let Ok(done) = done else { continue };
                    self.begin_shutdown(done);
                }
                event = events.recv() => match event {
                    Some(_) if shutting_down => {}
                    Some(event) => self.on_event(event),
                    None => break,
                },
                Some(()) = resigns.recv() => {
                    // Once: the first request ended `Leading`.
                    if let Some(term) = self.phase.leading() {
                        info!(term, "stepping down on request");
                        self.begin_resign();
                    }
                }
                Some(config) = reloads.recv() => {
                    info!("hooks reloaded");
                    self.config = config;
                    // A fenced hook the reload added gets a guard started ahead too.
                    self.warm_due.get_or_insert_with(Instant::now);
                    // A leader_command added by the reload starts now.
                    self.start_leader_command();
                }
                (outcome, elected_term) = join_running(&mut self.event_run) => {
                    if elected_term.is_some() && elected_term == self.phase.leading() {
                        self.on_elected_ended(outcome);
                    }
                }
                _ = sleep_until(next_while.unwrap_or_else(Instant::now)), if while_due => {
                    self.while_leader_tick();
                }
                _ = join_running(&mut self.while_run) => {}
                (outcome, term) = join_running(&mut self.command_run) => {
                    self.leader_command_ended(outcome, term);
                }
                _ = sleep_until(self.warm_due.unwrap_or_else(Instant::now)), if self.warm_due.is_some() => {
                    self.start_warm_guard();
                }
                _ = self.phase.warm_guard_closed(), if closing_warm => {}
                _ = sleep_until(command_restart_at.unwrap_or_else(Instant::now)), if command_restart_at.is_some() => {
                    self.phase.restart_command_at(None);
                    self.start_leader_command();
                }
                _ = sleep_until(self.crash_loops.reopen_at.unwrap_or_else(Instant::now)), if self.crash_loops.reopen_at.is_some() => {
                    self.crash_loops.reopen();
                }
            }
            self.advance_step_down();
        }
    }

    /// A `while_leader` tick: the next is due an interval on; this one starts unless the
    /// last is still running.
    fn while_leader_tick(&mut self) {
        let Phase::Leading {
            term, next_while, ..
        } = &mut self.phase
        else {
            return;
        };
        *next_while = Instant::now() + self.context.interval;
        let term = *term;
        if self.while_run.is_some() {
            info!("while_leader is still running; skipping this tick");
        } else if let Some(command) = self.config.while_leader.clone() {
            let hook = HookKind::WhileLeader;
            let env = self.env(hook, Role::Leader);
            self.while_run = Some(self.start(hook, &command, env, Some(term)));
        }
    }

    /// This term's on_elected ended while this node still leads: the leader's long-running
    /// work starts, unless the hook failed and `on_elected_failure` says to step down.
    fn on_elected_ended(&mut self, outcome: Option<RunOutcome>) {
        let failed = outcome.as_ref().is_none_or(|o| !o.success());
        let term = self.phase.leading();
        // Called while leading only: neither resigning nor shutting down.
        if failed && self.config.on_elected_failure == ElectedFailure::StepDown {
            // Stepping down, and (backoff.rs) out of claims for a while.
            self.crash_loops.elected_failed(term);
            self.begin_resign();
            return;
        }
        if !failed {
            self.crash_loops.elected_succeeded();
        } else {
            warn!(
                term,
                "on_elected failed; leading anyway (hooks.on_elected_failure = \"ignore\")"
            );
        }
        self.start_leader_command();
    }

    fn leader_command_ended(&mut self, outcome: Option<RunOutcome>, term: Option<i64>) {
        let Some(command) = self.config.leader_command.clone() else {
            return;
        };
        let Some(outcome) = outcome else { return };
        // Only while leading (so never while shutting down).
        let Some(leading) = self.phase.leading() else {
            return;
        };
        if Some(leading) != term {
            // That was an earlier term's; this term's starts now.
            self.start_leader_command();
            return;
        }
        if !outcome.stopped && command.step_down_on_exit {
            warn!(
                term = leading,
                "leader_command exited; stepping down (step_down_on_exit)"
            );
            self.begin_resign();
            return;
        }
        let restart = outcome.stopped
            || match command.restart {
                Restart::Always => true,
                Restart::OnFailure => !outcome.success(),
                Restart::Never => false,
            };
        if restart {
            // Not in a tight loop, and only once the lease is comfortably ahead again; a
            // command that keeps exiting waits longer each time (backoff.rs).
            let delay = match outcome.stopped {
                true => self.context.interval,
                false => self
                    .crash_loops
                    .command_exited(term, &super::run::describe(outcome.status)),
            };
            self.phase.restart_command_at(Some(Instant::now() + delay));
        }
    }
}
