//! Running one hook: its process started through the guard, its timeout and stop requests
//! enforced, and, for leader-scoped work, the lease fence: SIGTERM shortly before the lease
//! deadline and SIGKILL early enough to be gone before the lease can lapse on the database,
//! whatever the election is doing at that moment.

use nix::sys::signal::Signal;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until};
use tracing::{debug, info, warn};

use super::containment::Containment;
use super::process::{HookProcess, Io, WarmGuard};
use crate::election::{Role, Status};
use crate::store::Backend;

/// Between SIGTERM on a timeout and SIGKILL.
pub(super) const KILL_GRACE: Duration = Duration::from_secs(2);

/// Where hooks report each run, and how it ended (the daemon's metrics count them): hooks
/// know nothing of who listens.
pub trait HookRuns: Send + Sync {
    fn hook_ran(&self, hook: &'static str, outcome: &'static str, took: Duration);
}

/// What every hook is told about where it runs.
#[derive(Clone)]
pub struct HookContext {
    pub election: String,
    pub node_id: String,
    pub interval: Duration,
    pub ttl: Duration,
    /// Where hook runs are counted, if anywhere.
    pub metrics: Option<std::sync::Arc<dyn HookRuns>>,
    /// How fenced hooks are held, as resolved at start.
    pub containment: Containment,
    /// The database the election is on: leader work's `LEADERD_FENCE` is written for it.
    pub backend: Backend,
}

impl std::fmt::Debug for HookContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookContext")
            .field("election", &self.election)
            .field("node_id", &self.node_id)
            .field("interval", &self.interval)
            .field("ttl", &self.ttl)
            .field("counted", &self.metrics.is_some())
            .field("containment", &self.containment)
            .field("backend", &self.backend)
            .finish()
    }
}

impl HookContext {
    /// How long before the local lease deadline a fenced process gets SIGKILL. The
    /// deadline itself is a safety margin ahead of the lapse on the database.
    fn kill_lead(&self) -> Duration {
        kill_lead(self.ttl, self.interval)
    }

    /// How long before the SIGKILL a fenced process gets SIGTERM: a quarter of the renew
    /// window (50 ms with the defaults). It fires only once a renewal is late by more than
    /// the round trip leaderd already warns about (half the window), so a database that is
    /// merely slow does not stop the leader's work.
    fn term_lead(&self) -> Duration {
        term_lead(self.ttl, self.interval)
    }

    fn count_run(&self, hook: &'static str, outcome: &'static str, took: Duration) {
        if let Some(metrics) = &self.metrics {
            metrics.hook_ran(hook, outcome, took);
        }
    }

    /// The instant a run leader-scoped in `term` must be dead by, per `status`: now, unless
    /// this node leads in that very term.
    fn fence(&self, term: i64, status: &Status) -> Instant {
        fence_at(term, status, self.kill_lead(), crate::election::boottime())
    }
}

/// [`HookContext::kill_lead`] for an election of `ttl` and `interval` (the simulator's
/// leader work is fenced by it too).
pub(crate) fn kill_lead(ttl: Duration, interval: Duration) -> Duration {
    term_lead(ttl, interval).min(Duration::from_millis(20))
}

/// [`HookContext::term_lead`] for an election of `ttl` and `interval`.
pub(crate) fn term_lead(ttl: Duration, interval: Duration) -> Duration {
    ttl.saturating_sub(interval) / 4
}

/// [`HookContext::fence`] at boot time `boot_now`. The lease is judged on CLOCK_BOOTTIME
/// as well as on the monotonic clock: after the host slept, the monotonic deadline is
/// still ahead although the lease has lapsed, and a hook due at that moment must neither
/// start nor get a fence a suspend further out.
pub(crate) fn fence_at(
    term: i64,
    status: &Status,
    kill_lead: Duration,
    boot_now: Duration,
) -> Instant {
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

/// How a run of a hook ended.
#[derive(Debug)]
pub(super) struct RunOutcome {
    pub(super) status: Option<ExitStatus>,
    /// leaderd signalled it (timeout, fence or stop), rather than it ending on its own.
    pub(super) stopped: bool,
}

impl RunOutcome {
    pub(super) fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

pub(super) fn describe(status: Option<ExitStatus>) -> String {
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
pub(super) struct RunSpec {
    pub(super) hook: &'static str,
    pub(super) argv: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) timeout: Option<Duration>,
    /// Leader-scoped in this term: stopped with the lease (see the module comment).
    pub(super) fence_term: Option<i64>,
    pub(super) io: Io,
    /// Signals to pass on to the process group as they come.
    pub(super) forward: Option<mpsc::UnboundedReceiver<Signal>>,
    /// A guard started ahead of time to run it through (fenced hooks only).
    pub(super) warm: Option<WarmGuard>,
}

/// Runs one hook to its end, enforcing its timeout, explicit stop requests (`stop_by`:
/// SIGTERM now, SIGKILL by that instant) and, if leader-scoped, the lease fence.
pub(super) async fn run(
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
    if outcome.success() && spec.hook == "health_check" {
        // Every few seconds while all is well: what changes is logged by the check.
        debug!(hook = spec.hook, elapsed_ms, "hook finished: {result}");
    } else if outcome.success() {
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
/// and sent every signal that arrives on `forward`. For `leaderd lock`. Once `stop_by`
/// holds an instant, it gets SIGTERM, and SIGKILL at that instant (`--hold-at-most`);
/// such a stop counts as `fenced` too.
pub async fn run_leased(
    argv: Vec<String>,
    env: Vec<(String, String)>,
    context: HookContext,
    term: i64,
    status: watch::Receiver<Status>,
    forward: mpsc::UnboundedReceiver<Signal>,
    stop_by: watch::Receiver<Option<Instant>>,
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
    let outcome = run(spec, context, status, stop_by).await;
    LeasedRun {
        status: outcome.status,
        fenced: outcome.stopped,
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
            paused: false,
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
