//! Leader work in the simulation, and property 15.
//!
//! The hook supervisor is modelled by its step-down order (`hooks/supervisor/`), driven
//! through its own [`Phase`] (`hooks/supervisor/phase.rs`): one leader command per term, started on `Elected` with lease left, stopped on a step-down
//! (SIGTERM, SIGKILL after the stop time) before a resign is passed on or a shutdown's
//! step-down ends, and killed by its fence ([`crate::hooks::fence_at`], the real instants)
//! once the status no longer says this term. The work itself is a process of its own:
//! a daemon frozen or killed leaves it running, and its guard kills it at the last fence
//! deadline it was sent. While it runs it writes through the fence (`fenced.rs`).
//!
//! Property 15: leader work runs only while its node holds a live lease in its own term
//! by the database clock, judged at every event and when the work is gone (it runs until
//! reaped, a SIGKILL taking up to [`KILL_TAKES`]).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, sleep_until};

use super::fenced::{Work, write_loop};
use super::ledger::{LEADER_WORK, WorkView};
use super::models::{Freeze, HookRequest, freezable};
use super::world::{ELECTION, World};
use crate::election::{BootClock, ResignHandle, RoleEvent, Status};
use crate::hooks::{Phase, Shutdown, fence_at, kill_lead, term_lead};

/// The longest a SIGKILLed work takes to be gone (reaped, its process group swept by
/// its guard): within the fence's 20 ms kill lead on the deadline, which is what that
/// lead is for. Until then it may still write.
pub(super) const KILL_TAKES: Duration = Duration::from_millis(15);

/// What a run is told: the status, and the instant its stop must be done by.
type Told = (Status, Option<Instant>);

/// The signals a work process has had, and its guard's kill deadline.
#[derive(Default, Clone, Copy)]
struct Signals {
    term_at: Option<Instant>,
    kill_at: Option<Instant>,
    guard_kill: Option<Instant>,
}

/// A work process as its runner and its guard reach it.
struct WorkShared {
    signals: Mutex<Signals>,
    changed: Notify,
}

impl WorkShared {
    fn update(&self, change: impl FnOnce(&mut Signals)) {
        change(&mut self.signals.lock().unwrap());
        self.changed.notify_one();
    }
}

/// What a process's leader work is: fixed by its node and drawn from its seed.
pub(super) struct WorkSetting {
    pub(super) world: Arc<World>,
    pub(super) label: String,
    pub(super) node_id: String,
    /// The leader command's stop time (and the time it takes to exit on SIGTERM).
    pub(super) stop_time: Duration,
    pub(super) boot: BootClock,
    pub(super) freeze: Arc<Freeze>,
    pub(super) seed: u64,
    /// The work's own connection: its node's statement faults.
    pub(super) dice: Arc<Mutex<super::db::Dice>>,
}

/// The hook supervisor's step-down order, for a node whose hooks are one
/// `leader_command` (`hooks/supervisor.rs`, `step_down.rs`).
pub(super) async fn supervisor_model(
    setting: Arc<WorkSetting>,
    mut events: mpsc::UnboundedReceiver<RoleEvent>,
    mut requests: mpsc::UnboundedReceiver<HookRequest>,
    mut status: watch::Receiver<Status>,
    resign: ResignHandle,
) {
    let mut rng = SmallRng::seed_from_u64(setting.seed);
    let interval = setting.world.scenario.interval;
    // Leading, resigning and shutting down as the supervisor has them, and the leader
    // command's restart time, which lasts while the phase leads (the supervisor keeps it
    // in `Phase::Leading`).
    let mut phase = Phase::Following;
    let mut stop_work_by: Option<Instant> = None;
    let mut restart_at: Option<Instant> = None;
    // The runs, each with the channel that tells it the status and its stop instant.
    let mut runs: JoinSet<i64> = JoinSet::new();
    let mut running: Vec<(i64, watch::Sender<Told>)> = Vec::new();
    let mut requests_open = true;
    loop {
        // A restart time outlived by its leading phase would fire on every turn, and the
        // model would spin with the clock paused (fresh seed 455393252158 hung so).
        if phase.leading().is_none() {
            restart_at = None;
        }
        // The leader command starts once per term, when none runs.
        if let Some(term) = phase
            .leading()
            .filter(|_| running.is_empty() && restart_at.is_none_or(|at| at <= Instant::now()))
        {
            restart_at = None;
            let seen = (status.borrow().clone(), stop_work_by);
            let (tell, told) = watch::channel(seen);
            runs.spawn(freezable(
                run(Arc::clone(&setting), term, told, rng.random()),
                Arc::clone(&setting.freeze),
            ));
            running.push((term, tell));
        }
        // The leader work's stop, as the supervisor's `stop_leader_work` sends it.
        let stop_work = |stop_work_by: &mut Option<Instant>| {
            let at = Instant::now() + setting.stop_time;
            *stop_work_by = Some(stop_work_by.map_or(at, |by| by.min(at)));
        };
        tokio::select! {
            biased;
            request = requests.recv(), if requests_open => match request {
                None => requests_open = false,
                Some(HookRequest::StepDown(done)) => match &mut phase {
                    Phase::ShuttingDown(shutdown) => shutdown.done = Some(done),
                    _ => {
                        stop_work(&mut stop_work_by);
                        phase.begin_shutdown(Shutdown {
                            // No hook here reads it: the model runs no on_demoted.
                            deadline: Instant::now(),
                            resigning: None,
                            closing_warm: None,
                            done: Some(done),
                        });
                    }
                },
                Some(HookRequest::Resign) => {
                    if phase.leading().is_some() {
                        stop_work(&mut stop_work_by);
                        phase.begin_resign();
                    }
                }
            },
            event = events.recv() => match event {
                None => return,
                Some(_) if phase.is_shutting_down() => {}
                Some(RoleEvent::Elected { term }) => {
                    phase.elected(term);
                    stop_work_by = None;
                }
                Some(RoleEvent::Demoted { .. }) => {
                    phase.demoted();
                    restart_at = None;
                }
                Some(RoleEvent::ResignRequested { term }) => {
                    if phase.resigning().is_some() {
                    } else if phase.leading() == Some(term) {
                        stop_work(&mut stop_work_by);
                        phase.begin_resign();
                    } else {
                        resign.resign_term(term);
                    }
                }
                Some(RoleEvent::LeaderChanged { .. }) => {}
            },
            changed = status.changed() => if changed.is_err() { return },
            Some(ended) = runs.join_next() => {
                let term = ended.unwrap_or_default();
                running.retain(|(t, _)| *t != term);
                // Stopped (by its fence, say) while this node still leads in its term:
                // again after an interval, as `restart` says of a stopped command.
                if phase.leading() == Some(term) {
                    restart_at = Some(Instant::now() + interval);
                }
            }
            _ = sleep_until(restart_at.unwrap_or_else(Instant::now)), if restart_at.is_some() => {}
        }
        let seen = status.borrow().clone();
        for (_, tell) in &running {
            tell.send_replace((seen.clone(), stop_work_by));
        }
        // The supervisor's step-down order; the model's runs are all leader work.
        let work_running = |term| running.iter().any(|(r, _)| *r <= term);
        phase.advance_step_down(work_running, false, |term| resign.resign_term(term));
    }
}

/// One run of the leader command in `term`, as `hooks/run.rs` runs a fenced hook: it
/// starts only with lease left, hands its guard every new fence deadline, sends SIGTERM a
/// term lead before it and at a stop, SIGKILL at it and at the stop's instant; it ends
/// when the work is gone. It is the daemon's: frozen and killed with it.
async fn run(
    setting: Arc<WorkSetting>,
    term: i64,
    mut told: watch::Receiver<Told>,
    seed: u64,
) -> i64 {
    let scenario = &setting.world.scenario;
    let (kill_lead, term_lead) = (
        kill_lead(scenario.ttl, scenario.interval),
        term_lead(scenario.ttl, scenario.interval),
    );
    let fence = |status: &Status| fence_at(term, status, kill_lead, (setting.boot)());
    let first = fence(&told.borrow_and_update().0);
    if first
        .checked_sub(term_lead)
        .is_none_or(|t| t <= Instant::now())
    {
        setting.world.trace(
            &setting.label,
            format!("work of term {term} not started: no lease left"),
        );
        return term;
    }
    let shared = Arc::new(WorkShared {
        signals: Mutex::new(Signals {
            guard_kill: Some(first),
            ..Signals::default()
        }),
        changed: Notify::new(),
    });
    let (gone_sender, mut gone) = watch::channel(false);
    tokio::spawn(work(
        setting.to_work(term, seed),
        Arc::clone(&shared),
        gone_sender,
    ));
    let mut sent = first;
    let (mut term_sent, mut kill_sent) = (false, false);
    loop {
        let now = Instant::now();
        let (status, stop) = told.borrow_and_update().clone();
        let fence_kill = fence(&status);
        if fence_kill != sent {
            // The guard enforces it too, in case this process is frozen or killed.
            shared.update(|s| s.guard_kill = Some(fence_kill));
            sent = fence_kill;
        }
        let fence_term = fence_kill.checked_sub(term_lead).unwrap_or(now);
        let term_at = [Some(fence_term), stop.map(|_| now)]
            .into_iter()
            .flatten()
            .min();
        let kill_at = [Some(fence_kill), stop].into_iter().flatten().min();
        tokio::select! {
            biased;
            _ = async { drop(gone.wait_for(|gone| *gone).await) } => return term,
            _ = sleep_until(kill_at.unwrap_or(now)), if kill_at.is_some() && !kill_sent => {
                shared.update(|s| {
                    s.term_at.get_or_insert(Instant::now());
                    s.kill_at = Some(Instant::now());
                });
                (term_sent, kill_sent) = (true, true);
            }
            _ = sleep_until(term_at.unwrap_or(now)), if term_at.is_some() && !term_sent => {
                shared.update(|s| s.term_at = Some(Instant::now()));
                term_sent = true;
            }
            changed = told.changed() => if changed.is_err() { std::future::pending::<()>().await },
        }
    }
}

impl WorkSetting {
    fn to_work(&self, term: i64, seed: u64) -> Work {
        let mut rng = SmallRng::seed_from_u64(seed);
        let kill_takes = KILL_TAKES.mul_f64(rng.random_range(0.05..1.0));
        let label = format!("{}/work{term}", self.label);
        self.world
            .state
            .lock()
            .unwrap()
            .leader_work
            .works
            .push(WorkView {
                label: label.clone(),
                node_id: self.node_id.clone(),
                term,
                running: true,
            });
        self.world.trace(&label, "starts".to_owned());
        Work {
            world: Arc::clone(&self.world),
            label,
            term,
            exit_after: self.stop_time,
            kill_takes,
            rng,
            dice: Arc::clone(&self.dice),
        }
    }
}

/// The work process: it writes until it exits (`exit_after` past its SIGTERM) or is
/// gone (`kill_takes` past its SIGKILL, by its runner or by its guard's deadline).
async fn work(work: Work, shared: Arc<WorkShared>, gone: watch::Sender<bool>) {
    let (world, label, exit_after, kill_takes) = (
        Arc::clone(&work.world),
        work.label.clone(),
        work.exit_after,
        work.kill_takes,
    );
    let open = Arc::new(Mutex::new(None));
    let writes = write_loop(work, Arc::clone(&open));
    tokio::pin!(writes);
    loop {
        let signals = *shared.signals.lock().unwrap();
        let kill = [signals.kill_at, signals.guard_kill]
            .into_iter()
            .flatten()
            .min();
        let exit = signals.term_at.map(|at| at + exit_after);
        tokio::select! {
            biased;
            _ = sleep_until(kill.unwrap_or_else(Instant::now)), if kill.is_some() => {
                world.trace(&label, "SIGKILL".to_owned());
                sleep(kill_takes).await;
                break;
            }
            _ = sleep_until(exit.unwrap_or_else(Instant::now)), if exit.is_some() => break,
            _ = shared.changed.notified() => {}
            _ = &mut writes => {}
        }
    }
    // Gone: a transaction not yet committed ends with its session.
    let open = open.lock().unwrap().take();
    {
        let mut state = world.state.lock().unwrap();
        if let Some(transaction) = open {
            state.leader_work.transactions.abort(transaction);
            state.db.table.end_fenced(transaction);
        }
        if let Some(view) = state
            .leader_work
            .works
            .iter_mut()
            .find(|w| w.label == label && w.running)
        {
            view.running = false;
        }
    }
    world.trace(&label, "gone".to_owned());
    world.check_work_gone(&label);
    gone.send_replace(true);
}

impl World {
    /// Property 15 when a work is gone: it ran until now, so the lease must still be live.
    fn check_work_gone(&self, label: &str) {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        let row = state.db.table.lease_row(ELECTION, self.db_clock(now));
        let Some(view) = state.leader_work.works.iter().find(|w| w.label == label) else {
            return;
        };
        // A lease the database forgot is excused until its end, as in `World::check`.
        let forgotten = state
            .db
            .failures
            .forgotten_at(&view.node_id, view.term, now - self.start);
        if !view.held(row.as_ref()) && !forgotten {
            let detail = format!(
                "{label} ran in term {} until now, but the row is {row:?}",
                view.term
            );
            super::world::fail(&mut state, now - self.start, LEADER_WORK, detail);
        }
    }
}
