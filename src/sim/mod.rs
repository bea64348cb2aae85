//! The simulator: many seeded runs of the real election code in virtual time, each with a
//! schedule of faults and operator commands drawn from its seed, and the properties
//! checked after every event.
//!
//! A run is 3 to 5 nodes for 60 virtual seconds in one thread, on tokio's paused clock:
//! every node is the daemon's own [`Election`](crate::election::Election), stop sequence
//! and members task over a simulated database (`db.rs`), steered by a driver that plays
//! the schedule (`schedule.rs`). A seed fixes everything, so the same seed gives the same
//! trace. On a failure it prints the seed, the property and the last events; run
//! `LEADERD_SIM_SEED=N cargo test --lib sim::replay -- --nocapture` to replay one.
//!
//! - `schedule`: a run's scenario, drawn from its seed.
//! - `database`: the simulated database (the table, restarts, listeners).
//! - `db`: connections onto it, with per-statement faults.
//! - `node`: one `leaderd run` process and the models of what it runs beside the election.
//! - `leader_work`, `fenced`: its leader work, and the work's writes through the fence.
//! - `world`: what the simulation knows, and the properties.
//! - `wall`: the nodes' wall clocks and their steps.
//! - `readers`: the status file as its readers see it (property 14).
//! - `failures`: rollbacks, clock steps, the new primary's clock and the operators'
//!   connection's faults, drawn and kept; `failover` plays them.
//! - `trace`: the record of a run.
//! - `seeds`: each CI run's fresh seeds, beside the fixed ones.

mod database;
mod db;
mod direct;
mod exhaustive;
mod failover;
mod failures;
mod fenced;
mod leader_work;
mod ledger;
mod models;
mod node;
mod operator_checks;
mod operators;
mod outcome_state;
mod outcomes;
mod readers;
mod schedule;
#[cfg(test)]
mod seeds;
mod trace;
mod ttl_table;
mod wall;
mod world;

#[cfg(test)]
mod fence_tests;
#[cfg(test)]
mod tests;

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, sleep, sleep_until};

use node::Process;
use operators::{operator, step_down};
use schedule::{Fault, Scenario};
use world::{ELECTION, World};

pub(crate) use world::Violation;

/// How often the driver looks at liveness.
const TICK: Duration = Duration::from_millis(250);

/// What one run found.
#[derive(Debug, Clone)]
pub(crate) struct RunReport {
    pub(crate) seed: u64,
    pub(crate) violation: Option<Violation>,
    /// The last events, for a failure's report.
    pub(crate) tail: Vec<String>,
    /// A digest of every event: equal for two runs that did the same.
    pub(crate) digest: u64,
    pub(crate) events: u64,
    pub(crate) statements: u64,
    /// The scenario, in brief.
    pub(crate) scenario: String,
}

impl RunReport {
    /// The report of a failing seed: the property, and the last events.
    pub(crate) fn explain(&self) -> String {
        let Some(violation) = &self.violation else {
            return format!("seed {} passed", self.seed);
        };
        let mut text = format!(
            "seed {} violated property {} at {:.3}s: {}\nreplay: LEADERD_SIM_SEED={} cargo test --lib sim::tests::replay -- --nocapture\nlast events:\n",
            self.seed,
            violation.property,
            violation.at.as_secs_f64(),
            violation.detail,
            self.seed,
        );
        for line in &self.tail {
            text.push_str(line);
            text.push('\n');
        }
        text.push_str(&format!("the scenario: {}\n", self.scenario));
        text
    }
}

/// Runs one seed's scenario to its end (or its first violation).
pub(crate) fn run(seed: u64) -> RunReport {
    run_scenario(seed, Scenario::draw(seed))
}

/// Runs `scenario`, with `seed` for every other random choice.
fn run_scenario(seed: u64, scenario: Scenario) -> RunReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime for the simulation");
    runtime.block_on(drive(seed, scenario))
}

/// One node's driver-side state: its current process and the rest.
struct Slot {
    processes: Vec<Process>,
    priority: i64,
    incarnations: u32,
}

impl Slot {
    /// The node's current process (the last one started; a twin is started apart).
    fn current(&mut self) -> Option<&mut Process> {
        self.processes.last_mut()
    }
}

/// What the driver does at an instant.
#[derive(Debug, Clone)]
enum Action {
    Begin(usize),
    End(usize),
    /// SIGTERM in the middle of a slow reload.
    TermDuringReload(usize),
}

async fn drive(seed: u64, scenario: Scenario) -> RunReport {
    let world = Arc::new(World::new(scenario));
    let scenario = &world.scenario;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut slots: Vec<Slot> = scenario
        .nodes
        .iter()
        .map(|n| Slot {
            processes: Vec::new(),
            priority: n.priority,
            incarnations: 0,
        })
        .collect();
    // The nodes start within the first 200 ms.
    let mut actions: Vec<(Instant, usize, Action)> = Vec::new();
    for (i, event) in scenario.events.iter().enumerate() {
        actions.push((world.start + event.from, 0, Action::Begin(i)));
        actions.push((world.start + event.until, 2, Action::End(i)));
        if matches!(event.fault, Fault::StopDuringReload { .. }) {
            let middle = event.from + (event.until - event.from) / 2;
            actions.push((world.start + middle, 1, Action::TermDuringReload(i)));
        }
    }
    actions.sort_by_key(|(at, order, _)| (*at, *order));
    let mut actions = std::collections::VecDeque::from(actions);
    for (node, slot) in slots.iter_mut().enumerate() {
        sleep(Duration::from_millis(rng.next_u64() % 200)).await;
        start(&world, node, slot, &mut rng);
    }
    let end = world.start + scenario.length;
    let mut next_tick = Instant::now() + TICK;
    loop {
        if world.state.lock().unwrap().violation.is_some() {
            break;
        }
        let next_action = actions.front().map(|(at, _, _)| *at);
        let next = next_action.unwrap_or(end).min(next_tick).min(end);
        sleep_until(next).await;
        if Instant::now() >= end {
            break;
        }
        if next_action == Some(next) {
            let (_, _, action) = actions.pop_front().expect("an action is due");
            act(&world, &mut slots, &action, &mut rng);
        } else {
            next_tick += TICK;
        }
        world.check();
        update_truth(&world, &slots);
        let someone_could_lead = slots
            .iter()
            .any(|slot| slot.processes.iter().any(|p| p.could_lead(&world)));
        world.check_liveness(someone_could_lead);
        world.check_preemption_lag();
        world.check_member_report();
        world.check_pause_outcomes();
    }
    for slot in &mut slots {
        for process in &mut slot.processes {
            process.kill(&world);
        }
    }
    let state = world.state.lock().unwrap();
    RunReport {
        seed,
        violation: state.violation.clone(),
        tail: state.trace.tail().map(|e| e.to_string()).collect(),
        digest: state.trace.digest(),
        events: state.trace.events,
        statements: state.statements,
        scenario: world.scenario.brief(),
    }
}

/// Tells the world what each node is now (see [`world::NodeTruth`]).
fn update_truth(world: &World, slots: &[Slot]) {
    let now = Instant::now();
    // Per node: could lead, gone (since, cleanly), failing its check, priority.
    type Truth = (bool, Option<(Instant, bool)>, bool, i64);
    let truths: Vec<Truth> = slots
        .iter()
        .map(|slot| {
            let eligible = slot.processes.iter().any(|p| p.could_lead(world));
            let running: Vec<&Process> = slot
                .processes
                .iter()
                .filter(|p| p.alive(world) && !p.stopping())
                .collect();
            let gone = match running.is_empty() {
                false => None,
                true => slot
                    .processes
                    .iter()
                    .filter_map(|p| match (p.killed_at, p.stopped_at) {
                        // Killed while it stopped: it may not have recorded its stop.
                        (Some(killed), Some(stopped)) => Some((killed.min(stopped), false)),
                        (None, Some(stopped)) => Some((stopped, true)),
                        (Some(killed), None) => Some((killed, false)),
                        (None, None) => None,
                    })
                    .max_by_key(|(at, _)| *at),
            };
            let failing = running.iter().any(|p| p.has_health_check && p.failing());
            (eligible, gone, failing, slot.priority)
        })
        .collect();
    let mut state = world.state.lock().unwrap();
    for (truth, (eligible, gone, failing, priority)) in state.truth.iter_mut().zip(truths) {
        truth.eligible_since = match eligible {
            true => Some(truth.eligible_since.unwrap_or(now)),
            false => None,
        };
        truth.gone = gone;
        truth.failing_since = match failing {
            true => Some(truth.failing_since.unwrap_or(now)),
            false => None,
        };
        truth.priority = priority;
    }
}

fn start(world: &Arc<World>, node: usize, slot: &mut Slot, rng: &mut SmallRng) {
    slot.incarnations += 1;
    let process = Process::start(
        world,
        node,
        slot.incarnations,
        slot.priority,
        rng.next_u64(),
    );
    slot.processes.push(process);
    world.outcome_started();
}

fn act(world: &Arc<World>, slots: &mut [Slot], action: &Action, rng: &mut SmallRng) {
    let scenario = &world.scenario;
    let (index, begin) = match action {
        Action::Begin(i) => (*i, true),
        Action::End(i) => (*i, false),
        Action::TermDuringReload(i) => {
            if let Fault::StopDuringReload { node, .. } = scenario.events[*i].fault {
                world.trace("driver", format!("SIGTERM to {node} during its reload"));
                if let Some(process) = slots[node].current() {
                    process.terminate(world);
                }
            }
            return;
        }
    };
    let event = &scenario.events[index];
    let length = event.until - event.from;
    world.trace(
        "driver",
        format!(
            "{} {:?} for {:.3}s",
            if begin { "begins" } else { "ends" },
            event.fault,
            length.as_secs_f64()
        ),
    );
    match (&event.fault, begin) {
        (Fault::SlowStatements { .. }, _)
        | (Fault::RowLockWaits { .. }, _)
        | (Fault::LostAnswers { .. }, _)
        | (Fault::FailedStatements { .. }, _) => {}
        (Fault::RefuseConnections, true) => {
            world
                .state
                .lock()
                .unwrap()
                .db
                .refuse(Instant::now() + length);
        }
        (Fault::Restart, true) => {
            let mut state = world.state.lock().unwrap();
            state.db.epoch += 1;
            state.db.table.end_every_fenced();
            state.db.refuse(Instant::now() + length);
        }
        // Down for the window: the promotion delay, cut short where the faults end.
        (Fault::Failover { lost, clock_us, .. }, true) => world.fail_over(*lost, length, *clock_us),
        (Fault::ClockStep { by_us }, true) => world.step_clock(*by_us),
        (Fault::Restart | Fault::Failover { .. }, false) => {
            // Listeners connect again, and wake once (a release may have been missed).
            let mut state = world.state.lock().unwrap();
            state.db.listeners.retain(|(_, l)| !l.is_closed());
            for (_, listener) in &state.db.listeners {
                let _ = listener.try_send(());
            }
        }
        (Fault::Freeze { node }, frozen) => {
            if let Some(process) = slots[*node].current() {
                process.freeze(frozen);
            }
        }
        (Fault::Suspend { node }, true) => {
            if let Some(process) = slots[*node].current() {
                process.suspend(length);
            }
        }
        (Fault::Crash { node, .. }, true) => {
            if let Some(process) = slots[*node].current() {
                process.kill(world);
            }
        }
        (
            Fault::Crash {
                node,
                restart: true,
            },
            false,
        )
        | (
            Fault::Stop {
                node,
                restart: true,
            },
            false,
        ) => {
            restart_node(world, &mut slots[*node], *node, rng);
        }
        (Fault::Twin { node }, true) => {
            let slot = &mut slots[*node];
            slot.incarnations += 1;
            let twin = Process::start(
                world,
                *node,
                slot.incarnations,
                slot.priority,
                rng.next_u64(),
            );
            // Before the current process, so that the node's own process stays current.
            let at = slot.processes.len().saturating_sub(1);
            slot.processes.insert(at, twin);
            world.outcome_started();
        }
        (Fault::Twin { node }, false) => {
            let slot = &mut slots[*node];
            if slot.processes.len() > 1 {
                let at = slot.processes.len() - 2;
                slot.processes[at].kill(world);
            }
        }
        (Fault::Stop { node, .. }, true) => {
            if let Some(process) = slots[*node].current() {
                process.terminate(world);
            }
        }
        (Fault::StopDuringReload { node, reload }, true) => {
            if let Some(process) = slots[*node].current() {
                *process.reload_delay.lock().unwrap() = *reload;
                process.hang_up();
            }
        }
        (Fault::SlowStatusFile { node, delay, fail }, on) => {
            if let Some(process) = slots[*node].current() {
                *process.file.lock().unwrap() = match on {
                    true => models::FileFaults {
                        delay: *delay,
                        fail: *fail,
                    },
                    false => models::FileFaults::default(),
                };
            }
        }
        (Fault::Unhealthy { node }, failing) => {
            for process in &slots[*node].processes {
                process.set_failing(failing);
            }
        }
        (Fault::Pause { resume }, true) => {
            let duration = match resume {
                true => Duration::from_secs(3600),
                false => length,
            };
            operator(world, rng, move |mut store| async move {
                // As a script would: again after a failure.
                for _ in 0..10 {
                    match crate::store::ControlStore::pause(&mut store, ELECTION, duration).await {
                        Ok(()) => return,
                        Err(_) => sleep(Duration::from_millis(500)).await,
                    }
                }
            });
        }
        (Fault::Pause { resume: true }, false) => {
            operator(world, rng, |mut store| async move {
                for _ in 0..10 {
                    match crate::store::ControlStore::resume(&mut store, ELECTION).await {
                        Ok(_) => return,
                        Err(_) => sleep(Duration::from_millis(500)).await,
                    }
                }
            });
        }
        (Fault::Resign, true) => {
            let world_ = Arc::clone(world);
            operator(world, rng, move |store| {
                step_down(world_, store, index, None)
            });
        }
        (Fault::Handover { to }, true) => {
            let world_ = Arc::clone(world);
            let to = scenario.nodes[*to].id.clone();
            operator(world, rng, move |store| {
                step_down(world_, store, index, Some(to))
            });
        }
        (Fault::Priority { node, priority }, true) => {
            slots[*node].priority = *priority;
            restart_node(world, &mut slots[*node], *node, rng);
        }
        _ => {}
    }
}

/// Stops the node's current process if it still runs (SIGKILL, as systemd does after
/// its stop timeout), and starts a new one.
fn restart_node(world: &Arc<World>, slot: &mut Slot, node: usize, rng: &mut SmallRng) {
    if let Some(process) = slot.current() {
        if process.alive(world) {
            process.kill(world);
        }
    }
    start(world, node, slot, rng);
}
