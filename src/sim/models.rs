//! What a simulated process runs beside the election, modelled by what it promises it:
//! the status file and the health check; what the hook supervisor is asked from outside
//! the election (its model is `leader_work.rs`); and the freeze every task of a process
//! shares.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::sleep;

use super::world::World;
use crate::election::{CandidacyGate, Role, Status};
use crate::standing::{Health, Standing};

/// How the status file's writes go: each takes `delay` more, and fails while `fail`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FileFaults {
    pub(super) delay: Duration,
    pub(super) fail: bool,
}

/// The status file writer retries a failed write this often (as `daemon/status_writer.rs`).
pub(super) const FILE_RETRY: Duration = Duration::from_millis(100);

/// What the hook supervisor is asked from outside the election.
pub(super) enum HookRequest {
    /// A failing health check: step down through the resign sequence.
    Resign,
    /// The daemon stops: stop the leader work; answer when done.
    StepDown(oneshot::Sender<()>),
}

/// Whether a process is frozen (SIGSTOP), and the wake-up of its tasks when it is
/// continued (a `Notify` wakes its waiters in the order they came, unlike a watch).
#[derive(Default)]
pub(super) struct Freeze {
    pub(super) frozen: std::sync::atomic::AtomicBool,
    pub(super) thawed: Arc<tokio::sync::Notify>,
}

/// Polls `task` only while its process is not frozen: a frozen task's timers fire, and it
/// sees them when it is continued, as a stopped process does.
pub(super) fn freezable<T>(
    task: impl Future<Output = T>,
    freeze: Arc<Freeze>,
) -> impl Future<Output = T> {
    let mut task = Box::pin(task);
    let mut thawed: Option<std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>> = None;
    std::future::poll_fn(move |cx| {
        loop {
            if !freeze.frozen.load(Ordering::SeqCst) {
                thawed = None;
                return task.as_mut().poll(cx);
            }
            let waiting = thawed.get_or_insert_with(|| {
                let mut notified = Box::pin(Arc::clone(&freeze.thawed).notified_owned());
                notified.as_mut().enable();
                notified
            });
            // A thaw between the check and the registration is not missed.
            if !freeze.frozen.load(Ordering::SeqCst) {
                continue;
            }
            match waiting.as_mut().poll(cx) {
                std::task::Poll::Ready(()) => thawed = None,
                std::task::Poll::Pending => return std::task::Poll::Pending,
            }
        }
    })
}

/// The status file's promise: it reports each version durable once written; writes take
/// their time, and a failing one is retried every `FILE_RETRY`.
pub(super) async fn status_file_model(
    world: Arc<World>,
    index: usize,
    mut status: watch::Receiver<(Status, tokio::time::Instant)>,
    durable: watch::Sender<u64>,
    faults: Arc<Mutex<FileFaults>>,
) {
    loop {
        let (written, published) = status.borrow_and_update().clone();
        let version = written.version;
        loop {
            let FileFaults { delay, fail } = *faults.lock().unwrap();
            sleep(Duration::from_micros(500) + delay).await;
            if !fail {
                break;
            }
            sleep(FILE_RETRY).await;
        }
        {
            let mut state = world.state.lock().unwrap();
            state.processes[index].file = Some(written);
            state.processes[index].file_read = world.as_read(&state.processes[index], published);
        }
        world.check();
        durable.send_replace(version);
        if status.changed().await.is_err() && !status.has_changed().unwrap_or(false) {
            return;
        }
    }
}

/// The health check's promise: no claim until it first passes (after one check
/// interval), none while it fails, and a failing leader steps down through the hooks.
pub(super) async fn health_model(
    gate: CandidacyGate,
    standing: watch::Sender<Standing>,
    mut status: watch::Receiver<Status>,
    mut failing: watch::Receiver<bool>,
    hooks: mpsc::UnboundedSender<HookRequest>,
    check_every: Duration,
) {
    gate.close();
    sleep(check_every).await;
    let mut health = Health::Starting;
    loop {
        let now = match *failing.borrow_and_update() {
            true => Health::Failing,
            false => Health::Healthy,
        };
        if now != health {
            health = now;
            match now {
                Health::Healthy => gate.open(),
                _ => gate.close(),
            }
            standing.send_modify(|standing| standing.health = Some(now));
        }
        if health == Health::Failing && status.borrow_and_update().role == Role::Leader {
            let _ = hooks.send(HookRequest::Resign);
        }
        tokio::select! {
            biased;
            changed = failing.changed() => if changed.is_err() { return },
            changed = status.changed() => if changed.is_err() { return },
        }
    }
}
