//! One simulated `leaderd run` process: the real [`Election`] on a [`SimStore`], the real
//! members task ([`crate::daemon::members::run`]) on a second connection, and the daemon's real
//! stop sequence ([`crate::daemon::stop_sequence`]), wired as `daemon.rs` wires
//! them. The hook supervisor is modelled by its step-down order, with leader work that
//! writes through the fence (`leader_work.rs`); what else runs processes or touches the
//! disk is modelled by what it promises the election: the status file (durable versions,
//! slow or failing writes) and the health check (a claim gate and the resigns of a
//! failing leader).
//! Every task of the process can be frozen (SIGSTOP) or killed (SIGKILL) at once.

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;
use tokio::time::{Instant, sleep};

use super::db::{Dice, SimStore};
use super::leader_work::{WorkSetting, supervisor_model};
use super::models::{FileFaults, Freeze, HookRequest, freezable, health_model, status_file_model};
use super::world::{ELECTION, ProcessView, World};
use crate::daemon::{StepDown, stop_sequence};
use crate::election::{Election, ElectionSettings, Status};
use crate::standing::Health;
use crate::standing::Standing;
use crate::store::MemberRecord;

/// A running (or ended) process, as the driver steers it.
pub(super) struct Process {
    /// Its index in the world's process list.
    pub(super) index: usize,
    freeze: Arc<Freeze>,
    term: Option<oneshot::Sender<()>>,
    hup: mpsc::UnboundedSender<()>,
    pub(super) reload_delay: Arc<Mutex<Duration>>,
    pub(super) file: Arc<Mutex<FileFaults>>,
    failing: watch::Sender<bool>,
    /// Nanoseconds the host slept (its boot clock is that far ahead).
    slept: Arc<AtomicU64>,
    tasks: Vec<AbortHandle>,
    pub(super) has_health_check: bool,
    pub(super) candidate: bool,
    pub(super) started: Instant,
    /// When it was told to stop, or killed.
    pub(super) stopped_at: Option<Instant>,
    pub(super) killed_at: Option<Instant>,
}

impl Process {
    /// Starts node `node`'s process number `incarnation` with `priority`.
    pub(super) fn start(
        world: &Arc<World>,
        node: usize,
        incarnation: u32,
        priority: i64,
        seed: u64,
    ) -> Process {
        let scenario = &world.scenario;
        let spec = scenario.nodes[node].clone();
        let label = format!("{}#{}", spec.id, incarnation);
        let mut rng = SmallRng::seed_from_u64(seed);
        let settings =
            ElectionSettings::new(ELECTION, &spec.id, scenario.ttl, scenario.interval).unwrap();
        let dice = Arc::new(Mutex::new(Dice::new(
            SmallRng::seed_from_u64(rng.next_u64()),
            world.start,
            node,
            &scenario.events,
        )));
        let index = world.state.lock().unwrap().processes.len();
        let store = SimStore::new(world, Some(index), &label, Arc::clone(&dice));
        let (mut election, status) = Election::new(settings, store);
        election.seed_randomness(rng.next_u64());
        // Drawn after the others, so that a seed's election draws what it drew before.
        let work_seed = rng.next_u64();
        let slept = Arc::new(AtomicU64::new(0));
        let boot_slept = Arc::clone(&slept);
        let start = world.start;
        // A boot clock that follows the virtual clock, plus the time the host slept.
        let boot: crate::election::BootClock = Arc::new(move || {
            Duration::from_secs(1000)
                + (Instant::now() - start)
                + Duration::from_nanos(boot_slept.load(Ordering::SeqCst))
        });
        election.set_boot_clock(Arc::clone(&boot));
        let clock = Arc::clone(world);
        election.set_wall_clock(Arc::new(move || clock.wall(node, Instant::now())));
        world.state.lock().unwrap().processes.push(ProcessView {
            label: label.clone(),
            node,
            status: status.clone(),
            alive: true,
            stop_began: None,
            sent: VecDeque::new(),
            sent_members: VecDeque::new(),
            last_term: None,
            file: None,
            file_read: None,
        });
        world.trace(&label, format!("starts (priority {priority})"));

        let claims = election.claim_gate();
        if !spec.candidate {
            claims.close();
        }
        let health_gate =
            (spec.health_check && spec.candidate).then(|| election.extra_claim_gate());
        let (standing_sender, standing) = watch::channel(Standing {
            candidate: spec.candidate,
            health: health_gate.as_ref().map(|_| Health::Starting),
            backoff: None,
        });
        let events = election.events();
        let resign = election.resign_handle();
        let (hooks, hook_requests) = mpsc::unbounded_channel();
        let (durable_sender, durable) = watch::channel(0u64);
        election.release_after(durable);
        let file = Arc::new(Mutex::new(FileFaults::default()));
        let freeze = Arc::new(Freeze::default());
        let (failing, failing_seen) = watch::channel(false);
        let (term, term_received) = oneshot::channel::<()>();
        let (hup, mut hup_received) = mpsc::unbounded_channel();
        let reload_delay = Arc::new(Mutex::new(Duration::ZERO));

        let mut tasks = Vec::new();
        let mut spawn = |task: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>| {
            tasks.push(tokio::spawn(freezable(task, Arc::clone(&freeze))).abort_handle());
        };
        // Every task that waits for a new status hears of it from the world's eyes below,
        // in a fixed order: receivers of one watch wake in a random order (tokio spreads
        // them over notifiers at random), which would make a seed's runs differ.
        // The file's statuses come with the instant each was published (`readers.rs`).
        let (file_status, file_status_seen) =
            watch::channel((status.borrow().clone(), Instant::now()));
        let (health_status, health_status_seen) = watch::channel(status.borrow().clone());
        let (member_status, member_status_seen) = watch::channel(status.borrow().clone());
        let (work_status, work_status_seen) = watch::channel(status.borrow().clone());
        let work = WorkSetting {
            world: Arc::clone(world),
            label: label.clone(),
            node_id: spec.id.clone(),
            stop_time: spec.step_down,
            boot,
            freeze: Arc::clone(&freeze),
            seed: work_seed,
            dice: Arc::new(Mutex::new(Dice::new(
                SmallRng::seed_from_u64(work_seed),
                world.start,
                node,
                &scenario.events,
            ))),
        };
        spawn(Box::pin(supervisor_model(
            Arc::new(work),
            events,
            hook_requests,
            work_status_seen,
            resign,
        )));
        spawn(Box::pin(status_file_model(
            Arc::clone(world),
            index,
            file_status_seen,
            durable_sender,
            Arc::clone(&file),
        )));
        let (stopping, stopping_seen) = watch::channel(false);
        let record = MemberRecord {
            election: ELECTION.to_owned(),
            node_id: spec.id.clone(),
            standing: crate::daemon::members::member_standing(&standing.borrow(), false),
            priority,
            version: "sim".to_owned(),
            host: label.clone(),
            order: crate::store::RecordOrder {
                process: rng.next_u64() as i64,
                count: 0,
            },
        };
        let members_store = SimStore::new(world, Some(index), &format!("{label}/m"), dice);
        // As in the daemon, the process waits a while for its members task to record it
        // stopped before it ends.
        let member = tokio::spawn(freezable(
            Box::pin(crate::daemon::members::run(
                record,
                members_store,
                member_status_seen,
                standing.clone(),
                stopping_seen,
                spec.preempt_after,
            )),
            Arc::clone(&freeze),
        ));
        let member_abort = member.abort_handle();
        if let Some(gate) = health_gate {
            spawn(Box::pin(health_model(
                gate,
                standing_sender,
                health_status_seen,
                failing_seen,
                hooks.clone(),
                scenario.interval,
            )));
        }
        let delay = Arc::clone(&reload_delay);
        let ended = Arc::clone(world);
        let ended_label = label.clone();
        spawn(Box::pin(async move {
            let mut hooks = SimHooks(hooks);
            let stop = stop_sequence(
                async {
                    let _ = term_received.await;
                },
                &mut hup_received,
                || sleep(*delay.lock().unwrap()),
                |(), _| {},
                &claims,
                &stopping,
                &mut hooks,
            );
            election.run(stop).await;
            let _ = tokio::time::timeout(crate::daemon::MEMBER_STOP_WAIT, member).await;
            ended.trace(&ended_label, "ends".to_owned());
            ended.state.lock().unwrap().processes[index].alive = false;
            ended.check();
        }));
        tasks.push(member_abort);
        // The world's eyes: not part of the process, never frozen.
        let watcher = Arc::clone(world);
        let mut published = status;
        tasks.push(
            tokio::spawn(async move {
                while published.changed().await.is_ok() {
                    let now = published.borrow().clone();
                    watcher.trace(&label, describe(&now, watcher.start));
                    watcher.check();
                    file_status.send_replace((now.clone(), Instant::now()));
                    health_status.send_replace(now.clone());
                    work_status.send_replace(now.clone());
                    member_status.send_replace(now);
                }
            })
            .abort_handle(),
        );
        Process {
            index,
            freeze,
            term: Some(term),
            hup,
            reload_delay,
            file,
            failing,
            slept,
            tasks,
            has_health_check: spec.health_check && spec.candidate,
            candidate: spec.candidate,
            started: Instant::now(),
            stopped_at: None,
            killed_at: None,
        }
    }

    pub(super) fn freeze(&self, frozen: bool) {
        self.freeze.frozen.store(frozen, Ordering::SeqCst);
        if !frozen {
            self.freeze.thawed.notify_waiters();
        }
    }

    pub(super) fn frozen(&self) -> bool {
        self.freeze.frozen.load(Ordering::SeqCst)
    }

    pub(super) fn suspend(&self, slept: Duration) {
        self.slept
            .fetch_add(slept.as_nanos() as u64, Ordering::SeqCst);
    }

    /// SIGTERM.
    pub(super) fn terminate(&mut self, world: &World) {
        if let Some(term) = self.term.take() {
            self.stopped_at = Some(Instant::now());
            let _ = term.send(());
            let mut state = world.state.lock().unwrap();
            state.processes[self.index]
                .stop_began
                .get_or_insert(Instant::now());
        }
    }

    /// SIGHUP.
    pub(super) fn hang_up(&self) {
        let _ = self.hup.send(());
    }

    /// SIGKILL: every task ends now; its statements on their way go on in the database.
    pub(super) fn kill(&mut self, world: &World) {
        if self.killed_at.is_none() && self.alive(world) {
            self.killed_at = Some(Instant::now());
        }
        for task in self.tasks.drain(..) {
            task.abort();
        }
        world.state.lock().unwrap().processes[self.index].alive = false;
    }

    pub(super) fn set_failing(&self, failing: bool) {
        self.failing.send_replace(failing);
    }

    pub(super) fn failing(&self) -> bool {
        *self.failing.borrow()
    }

    pub(super) fn alive(&self, world: &World) -> bool {
        world.state.lock().unwrap().processes[self.index].alive
    }

    pub(super) fn stopping(&self) -> bool {
        self.term.is_none()
    }
}

/// The hooks as the daemon's stop sequence steps them down: through the model.
struct SimHooks(mpsc::UnboundedSender<HookRequest>);

impl StepDown for SimHooks {
    async fn step_down(&mut self) {
        let (done, stepped_down) = oneshot::channel();
        let _ = self.0.send(HookRequest::StepDown(done));
        let _ = stepped_down.await;
    }
}

fn describe(status: &Status, start: Instant) -> String {
    let deadline = status
        .lease_deadline
        .map(|d| format!(" until {:.3}s", (d - start).as_secs_f64()))
        .unwrap_or_default();
    format!(
        "publishes {} term {:?} leader {:?}{deadline}{}",
        status.role.as_str(),
        status.term,
        status.leader,
        if status.paused { " paused" } else { "" }
    )
}

impl Process {
    /// Whether it could lead now: a live candidate, not stopping or frozen, whose health
    /// check (if any) has passed and passes.
    pub(super) fn could_lead(&self, world: &World) -> bool {
        let checked = !self.has_health_check
            || (!self.failing() && Instant::now() >= self.started + world.scenario.interval);
        self.candidate && self.alive(world) && !self.stopping() && !self.frozen() && checked
    }
}
