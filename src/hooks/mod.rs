//! Hooks: the leader-only work, run as processes that consume the election's role changes.
//!
//! The supervisor is a task of its own fed by the election's event channel and status watch;
//! nothing here can delay a renewal. Event hooks run one at a time in the order their
//! events happened. Leader-scoped processes (`on_elected`, `while_leader` runs and
//! `leader_command`) are *fenced*: each watches the lease deadline and gets SIGTERM shortly
//! before it, and SIGKILL early enough to be gone before the lease can lapse on the
//! database, whatever the election is doing at that moment.

pub mod config;
pub mod containment;
pub mod guard;
mod process;

use nix::sys::signal::Signal;
use std::collections::VecDeque;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tracing::{debug, info, warn};

pub use config::{HookCommand, HooksConfig, LeaderCommand, Restart};
pub use containment::{Containment, ContainmentError, ContainmentMode};
use process::{HookProcess, Io, WarmGuard};

use crate::election::{ResignHandle, Role, RoleEvent, Status};
use crate::metrics::Metrics;

/// Between SIGTERM on a timeout and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// After a fenced hook took the guard started ahead, when the next one starts: not while
/// that hook is starting, on a host with few cores.
const WARM_GUARD_AFTER: Duration = Duration::from_millis(100);

/// What every hook is told about where it runs.
#[derive(Debug, Clone)]
pub struct HookContext {
    pub election: String,
    pub node_id: String,
    pub interval: Duration,
    pub ttl: Duration,
    /// Where hook runs are counted, if anywhere.
    pub metrics: Option<Metrics>,
    /// How fenced hooks are held, as resolved at start.
    pub containment: Containment,
}

impl HookContext {
    /// How long before the local lease deadline a fenced process gets SIGKILL. The
    /// deadline itself is a safety margin ahead of the lapse on the database.
    fn kill_lead(&self) -> Duration {
        (self.ttl.saturating_sub(self.interval) / 4).min(Duration::from_millis(20))
    }

    /// How long before the SIGKILL a fenced process gets SIGTERM: a quarter of the renew
    /// window (50 ms with the defaults). It fires only once a renewal is late by more than
    /// the round trip leaderd already warns about (half the window), so a database that is
    /// merely slow does not stop the leader's work.
    fn term_lead(&self) -> Duration {
        self.ttl.saturating_sub(self.interval) / 4
    }

    fn count_run(&self, hook: &'static str, outcome: &'static str, took: Duration) {
        if let Some(metrics) = &self.metrics {
            metrics.hook_ran(hook, outcome, took);
        }
    }

    /// The instant a run leader-scoped in `term` must be dead by, per `status`: now, unless
    /// this node leads in that very term.
    fn fence(&self, term: i64, status: &Status) -> Instant {
        fence_at(
            term,
            status,
            self.kill_lead(),
            Duration::from_nanos(guard::boottime_ns()),
        )
    }
}

/// [`HookContext::fence`] at boot time `boot_now`. The lease is judged on CLOCK_BOOTTIME
/// as well as on the monotonic clock: after the host slept, the monotonic deadline is
/// still ahead although the lease has lapsed, and a hook due at that moment must neither
/// start nor get a fence a suspend further out.
fn fence_at(term: i64, status: &Status, kill_lead: Duration, boot_now: Duration) -> Instant {
    let now = Instant::now();
    match (status.lease_deadline, status.lease_deadline_boot) {
        (Some(deadline), Some(boot_deadline))
            if status.role == Role::Leader && status.term == Some(term) =>
        {
            let left = deadline
                .saturating_duration_since(now)
                .min(boot_deadline.saturating_sub(boot_now));
            (now + left).checked_sub(kill_lead).unwrap_or(now)
        }
        _ => now,
    }
}

/// Decides how fenced hooks are held (`hooks.containment`), and says so in the log: once,
/// at start.
pub fn resolve_containment(mode: ContainmentMode) -> Result<Containment, ContainmentError> {
    let (containment, no_cgroup) = Containment::resolve(mode)?;
    match (&containment, no_cgroup) {
        (Containment::Cgroup { parent }, _) => info!(
            containment = containment.as_str(),
            cgroup = %parent.display(),
            "hook containment: cgroup (each leader-scoped hook in a cgroup of its own, ended \
             with cgroup.kill; the guard's subreaper sweep besides)"
        ),
        (Containment::Subreaper, Some(reason)) => info!(
            containment = containment.as_str(),
            "hook containment: subreaper (the guard sweeps the hook's descendants; no \
             cgroup: {reason})"
        ),
        (Containment::Subreaper, None) => info!(
            containment = containment.as_str(),
            "hook containment: subreaper (the guard sweeps the hook's descendants; \
             hooks.containment = \"subreaper\")"
        ),
    }
    Ok(containment)
}

/// How a run of a hook ended.
#[derive(Debug)]
struct RunOutcome {
    status: Option<ExitStatus>,
    /// leaderd signalled it (timeout, fence or stop), rather than it ending on its own.
    stopped: bool,
}

impl RunOutcome {
    fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

fn describe(status: Option<ExitStatus>) -> String {
    match status {
        Some(s) if s.code().is_some() => format!("exit status {}", s.code().unwrap()),
        Some(s) => match s.signal() {
            Some(signal) => format!("killed by signal {signal}"),
            None => "ended".to_owned(),
        },
        None => "not started".to_owned(),
    }
}

/// One run of one hook.
struct RunSpec {
    hook: &'static str,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    timeout: Option<Duration>,
    /// Leader-scoped in this term: stopped with the lease (see the module comment).
    fence_term: Option<i64>,
    io: Io,
    /// Signals to pass on to the process group as they come.
    forward: Option<mpsc::UnboundedReceiver<Signal>>,
    /// A guard started ahead of time to run it through (fenced hooks only).
    warm: Option<WarmGuard>,
}

/// Runs one hook to its end, enforcing its timeout, explicit stop requests (`stop_by`:
/// SIGTERM now, SIGKILL by that instant) and, if leader-scoped, the lease fence.
async fn run(
    mut spec: RunSpec,
    context: HookContext,
    mut lease: watch::Receiver<Status>,
    mut stop_by: watch::Receiver<Option<Instant>>,
) -> RunOutcome {
    let not_run = RunOutcome {
        status: None,
        stopped: true,
    };
    // Leader work starts only with lease left to do it in (a tick or restart that fires
    // as a frozen process wakes must not fork anything).
    let first_fence = spec
        .fence_term
        .map(|term| context.fence(term, &lease.borrow_and_update()));
    if first_fence.is_some_and(|kill| {
        kill.checked_sub(context.term_lead())
            .is_none_or(|t| t <= Instant::now())
    }) {
        info!(
            hook = spec.hook,
            term = spec.fence_term,
            "not started: no lease left in its term"
        );
        context.count_run(spec.hook, "not_started", Duration::ZERO);
        return not_run;
    }
    let warm = match (spec.warm.take(), first_fence) {
        (Some(guard), Some(fence)) => guard
            .run(spec.hook, &spec.argv, &spec.env, fence)
            .await
            .inspect_err(|error| debug!(%error, "the guard started ahead is gone; starting one"))
            .ok(),
        _ => None,
    };
    let spawned = match warm {
        Some(process) => Ok(process),
        None => HookProcess::spawn(
            spec.hook,
            &spec.argv,
            &spec.env,
            first_fence,
            spec.io,
            &context.containment,
        ),
    };
    let mut process = match spawned {
        Ok(process) => process,
        Err(error) => {
            warn!(%error, "hook not run");
            context.count_run(spec.hook, "not_started", Duration::ZERO);
            return RunOutcome {
                status: None,
                stopped: false,
            };
        }
    };
    let timeout_at = spec.timeout.map(|t| process.started + t);
    let (mut term_sent, mut kill_sent) = (false, false);
    let (mut lease_open, mut stop_open) = (spec.fence_term.is_some(), true);
    let mut forward = spec.forward.take();
    let mut fence_sent = first_fence;
    let status = loop {
        let now = Instant::now();
        let fence_kill = spec
            .fence_term
            .map(|term| context.fence(term, &lease.borrow_and_update()));
        if let Some(kill) = fence_kill.filter(|k| Some(*k) != fence_sent) {
            // The guard enforces it too, in case this process is frozen.
            process.send_fence(kill).await;
            fence_sent = Some(kill);
        }
        let fence_term = fence_kill.map(|k| k.checked_sub(context.term_lead()).unwrap_or(now));
        let stop = *stop_by.borrow_and_update();
        let term_at = [timeout_at, fence_term, stop.map(|_| now)]
            .into_iter()
            .flatten()
            .min();
        let kill_at = [fence_kill, stop, timeout_at.map(|t| t + KILL_GRACE)]
            .into_iter()
            .flatten()
            .min();
        tokio::select! {
            biased;
            status = process.wait() => break status.ok(),
            _ = sleep_until(kill_at.unwrap_or(now)), if kill_at.is_some() && !kill_sent => {
                process.signal(Signal::SIGTERM);
                process.kill();
                (term_sent, kill_sent) = (true, true);
            }
            _ = sleep_until(term_at.unwrap_or(now)), if term_at.is_some() && !term_sent => {
                process.signal(Signal::SIGTERM);
                term_sent = true;
            }
            changed = lease.changed(), if lease_open => lease_open = changed.is_ok(),
            changed = stop_by.changed(), if stop_open => stop_open = changed.is_ok(),
            signal = next_signal(&mut forward) => match signal {
                Some(signal) => process.signal(signal),
                None => forward = None,
            },
        }
    };
    if spec.fence_term.is_some() {
        // Whatever the main process left behind goes with it (the guard has swept; this
        // covers a guard that was killed itself).
        process.kill();
    }
    let elapsed_ms = process.elapsed().as_millis() as u64;
    // Ended past its fence: the guard killed it (leaderd may have been frozen meanwhile).
    let fenced_off = fence_sent.is_some_and(|kill| Instant::now() >= kill);
    let outcome = RunOutcome {
        status,
        stopped: term_sent || fenced_off,
    };
    let result = describe(status);
    let counted = match () {
        _ if outcome.success() => "success",
        _ if outcome.stopped => "stopped",
        _ => "failure",
    };
    context.count_run(spec.hook, counted, process.elapsed());
    if outcome.success() {
        info!(hook = spec.hook, elapsed_ms, "hook finished: {result}");
    } else if outcome.stopped {
        info!(
            hook = spec.hook,
            elapsed_ms, "hook stopped by leaderd: {result}"
        );
    } else if spec.io == Io::Inherited {
        // A foreground command's status is its caller's to report.
        info!(hook = spec.hook, elapsed_ms, "command ended: {result}");
    } else {
        warn!(hook = spec.hook, elapsed_ms, "hook failed: {result}");
    }
    outcome
}

async fn next_signal(forward: &mut Option<mpsc::UnboundedReceiver<Signal>>) -> Option<Signal> {
    match forward {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// How a command run under a lease ended.
#[derive(Debug)]
pub struct LeasedRun {
    /// `None` if it was never started (or could not be).
    pub status: Option<ExitStatus>,
    /// Whether leaderd stopped it because the lease was ending.
    pub fenced: bool,
}

/// Runs `argv` in the foreground (leaderd's own stdin, stdout and stderr) as leader-scoped
/// work of `term`: fenced to the lease `status` reports exactly like `leader_command`,
/// and sent every signal that arrives on `forward`. For `leaderd lock`.
pub async fn run_leased(
    argv: Vec<String>,
    env: Vec<(String, String)>,
    context: HookContext,
    term: i64,
    status: watch::Receiver<Status>,
    forward: mpsc::UnboundedReceiver<Signal>,
) -> LeasedRun {
    let spec = RunSpec {
        hook: "command",
        argv,
        env,
        timeout: None,
        fence_term: Some(term),
        io: Io::Inherited,
        forward: Some(forward),
        warm: None,
    };
    // Nothing else stops it: signals are forwarded instead.
    let (_never, stop_by) = watch::channel(None);
    let outcome = run(spec, context, status, stop_by).await;
    LeasedRun {
        status: outcome.status,
        fenced: outcome.stopped,
    }
}

/// Controls the hook supervisor from the edge of the program.
pub struct Hooks {
    step_down: Option<oneshot::Sender<oneshot::Sender<()>>>,
    reloads: mpsc::UnboundedSender<HooksConfig>,
    task: JoinHandle<()>,
    shutdown_timeout: Duration,
}

impl Hooks {
    /// Starts the supervisor for `config` on the election's events and status.
    pub fn spawn(
        config: HooksConfig,
        context: HookContext,
        events: mpsc::UnboundedReceiver<RoleEvent>,
        status: watch::Receiver<Status>,
        resign: ResignHandle,
    ) -> Hooks {
        let (step_down, step_down_requests) = oneshot::channel();
        let (reloads, reloaded) = mpsc::unbounded_channel();
        let shutdown_timeout = config.shutdown_timeout;
        let supervisor = Supervisor::new(config, context, status, resign);
        let task = tokio::spawn(supervisor.run(events, step_down_requests, reloaded));
        Hooks {
            step_down: Some(step_down),
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

    /// Waits for the supervisor to end (after the election's event channel closed).
    pub async fn join(self) {
        let _ = self.task.await;
    }
}

/// Why this side gives leadership up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepDown {
    /// The node is stopping: every hook is stopped, and nothing but on_demoted starts.
    Shutdown,
    /// The leader_command exited under step_down_on_exit: the election resigns once
    /// leader work is stopped and on_demoted has run.
    Resign,
}

/// A queued event hook with the environment of its moment.
struct EventJob {
    hook: &'static str,
    command: HookCommand,
    env: Vec<(String, String)>,
    /// on_elected of this term: leader-scoped, and followed by the leader_command.
    elected_term: Option<i64>,
    /// on_demoted of this term: waits until that term's leader work is gone.
    demoted_term: Option<i64>,
}

struct Supervisor {
    config: HooksConfig,
    context: HookContext,
    status: watch::Receiver<Status>,
    resign: ResignHandle,
    /// SIGTERM now and SIGKILL by the instant, for every hook running (shutdown).
    stop_by: watch::Sender<Option<Instant>>,
    /// The same for leader-scoped processes only (shutdown and resign).
    stop_leader_work_by: watch::Sender<Option<Instant>>,
    /// The term this node is resigning from: its leader work is stopping, and the
    /// election resigns once that and on_demoted are done.
    resigning: Option<i64>,
    /// The last term whose on_demoted was queued: a term is demoted once, whichever of
    /// a resign, a shutdown and the election's own event says so first.
    demoted_queued: Option<i64>,
    /// The term this node leads, as the events tell.
    leading: Option<i64>,
    leader: Option<String>,
    previous_leader: Option<String>,
    term: Option<i64>,
    queue: VecDeque<EventJob>,
    /// The event hook running now, and the term it is on_elected of (if it is).
    event_run: Option<JoinHandle<RunOutcome>>,
    event_run_term: Option<i64>,
    while_run: Option<JoinHandle<RunOutcome>>,
    while_term: Option<i64>,
    next_while: Instant,
    command_run: Option<JoinHandle<RunOutcome>>,
    command_term: Option<i64>,
    /// When stepping down for shutdown must be over.
    step_down_deadline: Option<Instant>,
    command_restart_at: Option<Instant>,
    /// Stepping down for shutdown: no new leader work, events ignored.
    stopping: bool,
    /// A guard started ahead of time for the next fenced hook, and when to start the next.
    warm: Option<WarmGuard>,
    warm_due: Option<Instant>,
}

async fn join_opt<T>(handle: &mut Option<JoinHandle<T>>) -> Option<T> {
    match handle {
        Some(h) => {
            let result = h.await.ok();
            *handle = None;
            result
        }
        None => std::future::pending().await,
    }
}

impl Supervisor {
    fn new(
        config: HooksConfig,
        context: HookContext,
        status: watch::Receiver<Status>,
        resign: ResignHandle,
    ) -> Self {
        Supervisor {
            config,
            context,
            status,
            resign,
            stop_by: watch::channel(None).0,
            stop_leader_work_by: watch::channel(None).0,
            resigning: None,
            demoted_queued: None,
            leading: None,
            leader: None,
            previous_leader: None,
            term: None,
            queue: VecDeque::new(),
            event_run: None,
            event_run_term: None,
            while_run: None,
            while_term: None,
            next_while: Instant::now(),
            command_run: None,
            command_term: None,
            step_down_deadline: None,
            command_restart_at: None,
            stopping: false,
            warm: None,
            warm_due: Some(Instant::now()),
        }
    }

    /// Whether any hook configured now is fenced (and so can use a guard started ahead).
    fn runs_fenced_hooks(&self) -> bool {
        let c = &self.config;
        !self.stopping
            && (c.on_elected.is_some() || c.while_leader.is_some() || c.leader_command.is_some())
    }

    /// The guard started ahead, for a fenced hook starting now; the next one starts a
    /// little later, not while this hook is starting.
    fn take_warm_guard(&mut self) -> Option<WarmGuard> {
        self.warm_due
            .get_or_insert(Instant::now() + WARM_GUARD_AFTER);
        self.warm.take()
    }

    fn start_warm_guard(&mut self) {
        self.warm_due = None;
        if self.warm.is_some() || !self.runs_fenced_hooks() {
            return;
        }
        match WarmGuard::start(&self.context.containment) {
            Ok(guard) => self.warm = Some(guard),
            // Hooks start the usual way; try again later.
            Err(error) => {
                debug!(%error, "cannot start a guard ahead of time");
                self.warm_due = Some(Instant::now() + self.context.interval);
            }
        }
    }

    fn env(&self, event: &str, role: Role) -> Vec<(String, String)> {
        let c = &self.context;
        vec![
            ("LEADERD_EVENT".into(), event.into()),
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
        ]
    }

    fn start(
        &mut self,
        hook: &'static str,
        command: &HookCommand,
        env: Vec<(String, String)>,
        fence_term: Option<i64>,
    ) -> JoinHandle<RunOutcome> {
        let mut env = env;
        env.extend(command.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut timeout = command.timeout;
        if let Some(deadline) = self.step_down_deadline {
            // on_demoted at shutdown gets what is left of hooks.shutdown_timeout.
            timeout = timeout.min(deadline.saturating_duration_since(Instant::now()));
        }
        let spec = RunSpec {
            hook,
            argv: command.argv.clone(),
            env,
            timeout: Some(timeout),
            fence_term,
            io: Io::Logged,
            forward: None,
            warm: fence_term.and_then(|_| self.take_warm_guard()),
        };
        tokio::spawn(run(
            spec,
            self.context.clone(),
            self.status.clone(),
            self.stop_receiver(hook, fence_term.is_some()),
        ))
    }

    /// Runs started before a shutdown step-down are stopped by it; those started after
    /// are not. on_demoted never is: it is a step-down's own last act, bounded by its
    /// timeout. A resign stops leader-scoped runs only.
    fn stop_receiver(
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

    fn start_leader_command(&mut self) {
        let Some(command) = &self.config.leader_command else {
            return;
        };
        let Some(term) = self.leading else { return };
        // Not before this term's on_elected has finished.
        let elected_pending = self.event_run_term == Some(term)
            || self.queue.iter().any(|job| job.elected_term == Some(term));
        if self.stopping || self.command_run.is_some() || elected_pending {
            return;
        }
        let mut env = self.env("leader_command", Role::Leader);
        env.extend(command.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let spec = RunSpec {
            hook: "leader_command",
            argv: command.argv.clone(),
            env,
            timeout: None,
            fence_term: Some(term),
            io: Io::Logged,
            forward: None,
            warm: self.take_warm_guard(),
        };
        info!(term, "starting leader_command");
        self.command_term = Some(term);
        self.command_run = Some(tokio::spawn(run(
            spec,
            self.context.clone(),
            self.status.clone(),
            self.stop_receiver("leader_command", true),
        )));
    }

    fn on_event(&mut self, event: RoleEvent) {
        match event {
            RoleEvent::Elected { term } => {
                self.leading = Some(term);
                self.term = Some(term);
                self.stop_leader_work_by.send_replace(None);
                // A resign of an earlier term is moot: that term is over.
                self.resigning = None;
                self.next_while = Instant::now();
                match self.config.on_elected.clone() {
                    Some(command) => {
                        let env = self.env("elected", Role::Leader);
                        self.queue.push_back(EventJob {
                            hook: "on_elected",
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
                self.leading = None;
                self.command_restart_at = None;
                // Queued leader-only hooks of that term are moot now.
                self.queue.retain(|job| job.elected_term.is_none());
                // Running ones are stopped by their fence (the status no longer says
                // leader); on_demoted waits for them below.
                self.queue_on_demoted(term);
            }
            RoleEvent::LeaderChanged {
                previous,
                current,
                term,
            } => {
                self.previous_leader = previous;
                self.leader = current;
                self.term = term.or(self.term);
                if let Some(command) = self.config.on_leader_change.clone() {
                    let role = self.status.borrow().role;
                    let env = self.env("leader_change", role);
                    self.queue.push_back(EventJob {
                        hook: "on_leader_change",
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
        let of = |run: bool, run_term: Option<i64>| run && run_term.is_some_and(|t| t <= term);
        of(self.command_run.is_some(), self.command_term)
            || of(self.while_run.is_some(), self.while_term)
            || of(self.event_run.is_some(), self.event_run_term)
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
            let handle = self.start(job.hook, &job.command, job.env, job.elected_term);
            self.event_run = Some(handle);
            self.event_run_term = job.elected_term;
        }
    }

    async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<RoleEvent>,
        step_down: oneshot::Receiver<oneshot::Sender<()>>,
        mut reloads: mpsc::UnboundedReceiver<HooksConfig>,
    ) {
        tokio::pin!(step_down);
        let mut step_down_done: Option<oneshot::Sender<()>> = None;
        loop {
            self.start_next_event_hook();
            let while_due =
                self.leading.is_some() && !self.stopping && self.config.while_leader.is_some();
            tokio::select! {
                // A stop first: an event waiting beside it must not start leader work.
                biased;
                done = &mut step_down, if step_down_done.is_none() && !self.stopping => {
                    let Ok(done) = done else { continue };
                    self.begin_step_down(StepDown::Shutdown);
                    step_down_done = Some(done);
                }
                event = events.recv() => match event {
                    Some(_) if self.stopping => {}
                    Some(event) => self.on_event(event),
                    None => break,
                },
                Some(config) = reloads.recv() => {
                    info!("hooks reloaded");
                    self.config = config;
                    // A fenced hook the reload added gets a guard started ahead too.
                    self.warm_due.get_or_insert_with(Instant::now);
                    // A leader_command added by the reload starts now.
                    self.start_leader_command();
                }
                _ = join_opt(&mut self.event_run) => {
                    let elected_term = self.event_run_term.take();
                    if elected_term.is_some() && elected_term == self.leading {
                        // The leader's long-running work starts once on_elected is done.
                        self.start_leader_command();
                    }
                }
                _ = sleep_until(self.next_while), if while_due => {
                    self.next_while = Instant::now() + self.context.interval;
                    if self.while_run.is_some() {
                        info!("while_leader is still running; skipping this tick");
                    } else if let Some(command) = self.config.while_leader.clone() {
                        let env = self.env("while_leader", Role::Leader);
                        self.while_run = Some(self.start("while_leader", &command, env, self.leading));
                        self.while_term = self.leading;
                    }
                }
                _ = join_opt(&mut self.while_run) => {}
                outcome = join_opt(&mut self.command_run) => {
                    let term = self.command_term.take();
                    self.leader_command_ended(outcome, term);
                }
                _ = sleep_until(self.warm_due.unwrap_or_else(Instant::now)), if self.warm_due.is_some() => {
                    self.start_warm_guard();
                }
                _ = sleep_until(self.command_restart_at.unwrap_or_else(Instant::now)), if self.command_restart_at.is_some() => {
                    self.command_restart_at = None;
                    self.start_leader_command();
                }
            }
            self.start_next_event_hook();
            self.resign_when_stepped_down();
            if let Some(done) = step_down_done.take() {
                if self.leader_work_running(i64::MAX)
                    || self.event_run.is_some()
                    || !self.queue.is_empty()
                {
                    step_down_done = Some(done);
                } else {
                    let _ = done.send(());
                }
            }
        }
    }

    fn leader_command_ended(&mut self, outcome: Option<RunOutcome>, term: Option<i64>) {
        let Some(command) = self.config.leader_command.clone() else {
            return;
        };
        let Some(outcome) = outcome else { return };
        if self.leading.is_none() || self.stopping {
            return;
        }
        if self.leading != term {
            // That was an earlier term's; this term's starts now.
            self.start_leader_command();
            return;
        }
        if !outcome.stopped && command.step_down_on_exit {
            warn!(
                term = self.leading,
                "leader_command exited; stepping down (step_down_on_exit)"
            );
            self.begin_step_down(StepDown::Resign);
            return;
        }
        let restart = outcome.stopped
            || match command.restart {
                Restart::Always => true,
                Restart::OnFailure => !outcome.success(),
                Restart::Never => false,
            };
        if restart {
            // Not in a tight loop, and only once the lease is comfortably ahead again.
            self.command_restart_at = Some(Instant::now() + self.context.interval);
        }
    }

    fn queue_on_demoted(&mut self, term: i64) {
        if self.demoted_queued.is_some_and(|queued| queued >= term) {
            return;
        }
        if let Some(command) = self.config.on_demoted.clone() {
            self.demoted_queued = Some(term);
            let mut env = self.env("demoted", Role::Unknown);
            set(&mut env, "LEADERD_TERM", term.to_string());
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
    fn begin_step_down(&mut self, reason: StepDown) {
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
                self.warm = None;
                self.queue.retain(|job| job.demoted_term.is_some());
            }
            StepDown::Resign => self.resigning = self.leading,
        }
        if let Some(term) = self.leading.take() {
            self.queue_on_demoted(term);
        }
    }

    /// Passes a resign on to the election once its leader work and on_demoted are done.
    fn resign_when_stepped_down(&mut self) {
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

fn set(env: &mut [(String, String)], key: &str, value: String) {
    if let Some(entry) = env.iter_mut().find(|(k, _)| k == key) {
        entry.1 = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn leading(term: i64, deadline: Instant, deadline_boot: Duration) -> Status {
        let now = SystemTime::now();
        Status {
            role: Role::Leader,
            leader: Some("a".into()),
            term: Some(term),
            since: now,
            updated_at: now,
            valid_until: now,
            lease_deadline: Some(deadline),
            lease_deadline_boot: Some(deadline_boot),
            leader_lease_until: Some(deadline),
            error: None,
            version: 1,
        }
    }

    #[test]
    fn a_lease_that_lapsed_while_the_host_slept_leaves_no_fence() {
        let lead = Duration::from_millis(20);
        let boot_now = Duration::from_secs(100);
        let now = Instant::now();
        // Monotonic time says a second is left; boot time says the host slept past it.
        let slept = leading(
            3,
            now + Duration::from_secs(1),
            boot_now - Duration::from_millis(10),
        );
        assert!(fence_at(3, &slept, lead, boot_now) <= Instant::now());

        let awake = leading(
            3,
            now + Duration::from_secs(1),
            boot_now + Duration::from_secs(1),
        );
        let fence = fence_at(3, &awake, lead, boot_now);
        assert!(fence > now + Duration::from_millis(900), "{fence:?}");
        assert!(fence <= now + Duration::from_secs(1) - lead);
        assert!(
            fence_at(4, &awake, lead, boot_now) <= Instant::now(),
            "another term"
        );
    }
}
