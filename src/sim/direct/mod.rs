//! The simulator's second driver: the election's state machine
//! ([`Machine::step`](crate::election::machine::Machine::step)) driven by a discrete-event
//! loop of its own, with no tokio, no tasks and no channels. Each node process is a
//! [`Machine`]; its statements meet the same per-statement faults as in the tokio-driven
//! runs ([`Dice`]) and run against the same database model ([`Db`], the store contract's
//! [`Table`](crate::store::memory::Table)), and the same seed draws the same
//! [`Scenario`]. What lies outside the election (hooks, the status file, the members
//! task, preemption) is modelled by what it promises the machine: a durable status after
//! a delay, a resign once the leader work has stopped, a claim gate.
//!
//! It checks properties 1 to 6 and 11 to 12 after every event, many times faster than the
//! tokio-driven runs: CI searches more seeds with it (see `tests.rs`).

pub(super) mod check;
mod failover;
mod lifecycle;
mod operator;
#[cfg(test)]
mod overlap;
mod process;
pub(super) mod statement;

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;
use tokio::time::Instant;

use super::database::Db;
use super::db::{CONNECT, Dice};
use super::failures::OPERATOR;
use super::schedule::{Fault, Scenario};
use super::world::{ELECTION, skipped};
use crate::election::machine::{Reply, Statement};
use crate::store::StoreError;
use process::{Process, Sent};

/// The last events a failure's report shows.
pub(crate) const TRACE_LINES: usize = 60;
/// How long after a release or a command its notification reaches a listener.
const NOTIFY: Duration = Duration::from_millis(1);

/// What happens at an instant of the run.
#[derive(Debug)]
enum Event {
    /// A process's timer, valid while its generation is current.
    Timer {
        process: usize,
        generation: u64,
    },
    /// A statement reaches the database.
    Execute(Sent),
    /// A statement's answer reaches its process.
    Arrive {
        process: usize,
        id: u64,
        answer: Result<Reply, StoreError>,
    },
    /// A schedule window opens (`true`) or closes.
    Window {
        index: usize,
        opens: bool,
    },
    /// A release notification, or a resign that a process's leader work asks for.
    Hint {
        process: usize,
    },
    Resign {
        process: usize,
        term: i64,
    },
    /// A node's process starts (a first start, or a restart with the same id).
    Start {
        node: usize,
    },
    /// An operator's statement reaches the database, on a connection of `epoch`.
    Operator {
        write: OperatorWrite,
        epoch: u64,
    },
}

/// What a direct run found.
pub(crate) struct DirectReport {
    pub(crate) seed: u64,
    /// The property that failed, what broke it, and the run's last events.
    pub(crate) violation: Option<(&'static str, String)>,
    pub(crate) trace: Vec<String>,
    pub(crate) statements: u64,
    pub(crate) steps: u64,
    /// The run's failovers, and the overlap each caused.
    pub(crate) failovers: Vec<crate::sim::failures::FailoverRecord>,
    /// The operators' writes: written, and lost to their connection's faults.
    pub(crate) operator_writes: (u64, u64),
    brief: String,
}

impl DirectReport {
    pub(crate) fn explain(&self) -> String {
        let Some((property, detail)) = &self.violation else {
            return format!("seed {}: every property held", self.seed);
        };
        format!(
            "seed {} (replay: LEADERD_SIM_DIRECT_SEED={}) broke property {property}\n  {detail}\nscenario: {}last events:\n{}",
            self.seed,
            self.seed,
            self.brief,
            self.trace.join("\n")
        )
    }
}

/// One run of `seed`, driving the machines directly. `trace`: how many of the last events
/// to keep (a failing seed is run again with them).
pub(crate) fn run(seed: u64, trace: usize) -> DirectReport {
    run_scenario(seed, Scenario::draw(seed), trace)
}

/// One run of `scenario`, with `seed` for every other random choice.
pub(super) fn run_scenario(seed: u64, scenario: Scenario, trace: usize) -> DirectReport {
    let mut world = World::new(seed, scenario, trace);
    world.run();
    let brief = world.scenario.brief();
    DirectReport {
        seed,
        violation: world.violation,
        trace: world.trace.into_iter().collect(),
        statements: world.statements,
        steps: world.steps,
        failovers: std::mem::take(&mut world.db.failures.failovers),
        operator_writes: world.operator_writes,
        brief,
    }
}

/// What an operator's statement writes when it reaches the database.
#[derive(Debug, Clone)]
enum OperatorWrite {
    Pause {
        length: Duration,
    },
    Resume,
    Resign {
        holder: String,
        term: i64,
    },
    Handover {
        holder: String,
        term: i64,
        to: String,
    },
}

/// The whole run: the database, the processes, and the events to come.
pub(super) struct World {
    scenario: Scenario,
    /// The instant the run starts at; everything else is an offset from it.
    base: Instant,
    now: Duration,
    db: Db,
    processes: Vec<Process>,
    queue: BinaryHeap<Reverse<(Duration, u64)>>,
    events: Vec<Option<Event>>,
    rng: SmallRng,
    /// The schedule's windows open now (by index).
    open: Vec<bool>,
    violation: Option<(&'static str, String)>,
    /// How many of the last events to keep.
    tracing: usize,
    trace: std::collections::VecDeque<String>,
    statements: u64,
    steps: u64,
    next_id: u64,
    /// When no process has acted as leader since (property 4).
    leaderless_since: Option<Duration>,
    /// Which process acted in each term (property 3).
    acted: std::collections::HashMap<i64, usize>,
    /// The operators' connection's faults.
    operators: Dice,
    /// The operators' writes that reached the database, and those lost on the way.
    operator_writes: (u64, u64),
}

impl World {
    fn new(seed: u64, scenario: Scenario, tracing: usize) -> World {
        let windows = scenario.events.len();
        let mut db = Db::new();
        db.failures.keeps_history = crate::sim::failures::keeps_history(scenario.most_lost());
        let base = Instant::now();
        let mut world = World {
            base,
            now: Duration::ZERO,
            db,
            processes: Vec::new(),
            queue: BinaryHeap::new(),
            events: Vec::new(),
            rng: SmallRng::seed_from_u64(seed ^ 0xd1ec7),
            open: vec![false; windows],
            violation: None,
            tracing,
            trace: Default::default(),
            statements: 0,
            steps: 0,
            next_id: 0,
            leaderless_since: None,
            acted: Default::default(),
            operators: Dice::new(
                SmallRng::seed_from_u64(seed ^ 0x09e7_a702),
                base,
                OPERATOR,
                &scenario.events,
            ),
            operator_writes: (0, 0),
            scenario,
        };
        for node in 0..world.scenario.nodes.len() {
            let at = Duration::from_millis(world.rng.random_range(0..50));
            world.at(at, Event::Start { node });
        }
        for index in 0..windows {
            let (from, until) = (
                world.scenario.events[index].from,
                world.scenario.events[index].until,
            );
            world.at(from, Event::Window { index, opens: true });
            world.at(
                until,
                Event::Window {
                    index,
                    opens: false,
                },
            );
        }
        world
    }

    /// Schedules `event` at `at` (offset from the start).
    fn at(&mut self, at: Duration, event: Event) {
        let seq = self.events.len() as u64;
        self.events.push(Some(event));
        self.queue.push(Reverse((at.max(self.now), seq)));
    }

    fn note(&mut self, who: &str, what: impl FnOnce() -> String) {
        if self.tracing > 0 {
            if self.trace.len() == self.tracing {
                self.trace.pop_front();
            }
            let line = format!("{:>9.4}s {who:>6} {}", self.now.as_secs_f64(), what());
            self.trace.push_back(line);
        }
    }

    fn fail(&mut self, property: &'static str, detail: String) {
        if self.violation.is_none() && !skipped(property) {
            let at = self.now;
            self.note("check", || format!("VIOLATED {property}: {detail}"));
            self.violation = Some((property, format!("at {at:?}: {detail}")));
        }
    }

    fn run(&mut self) {
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            if at > self.scenario.length || self.violation.is_some() {
                break;
            }
            self.now = at;
            let event = self.events[seq as usize]
                .take()
                .expect("each event runs once");
            self.handle(event);
            self.check();
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Timer {
                process,
                generation,
            } => {
                if self.processes[process].timer == generation {
                    self.pump(process);
                }
            }
            Event::Execute(sent) => self.execute(sent),
            Event::Arrive {
                process,
                id,
                answer,
            } => {
                let p = &mut self.processes[process];
                if p.alive && p.in_flight == Some(id) {
                    p.arrived = Some(answer);
                    self.pump(process);
                }
            }
            Event::Window { index, opens } => self.window(index, opens),
            Event::Hint { process } => {
                self.processes[process].hint = true;
                self.pump(process);
            }
            Event::Resign { process, term } => {
                self.processes[process].resign = Some(Some(term));
                self.pump(process);
            }
            Event::Start { node } => self.start(node),
            Event::Operator { write, epoch } => self.operator_write(write, epoch),
        }
    }

    /// A schedule window opens or closes: the faults that are not per statement.
    fn window(&mut self, index: usize, opens: bool) {
        self.open[index] = opens;
        let event = self.scenario.events[index].clone();
        let length = event.until.saturating_sub(event.from);
        let refuse_until = self.base + self.now + length;
        match (event.fault, opens) {
            (Fault::RefuseConnections, true) => self.db.refuse(refuse_until),
            (Fault::Restart, true) => {
                self.db.epoch += 1;
                self.db.refuse(refuse_until);
            }
            // Down for the window: the promotion delay, cut short where the faults end.
            (Fault::Failover { lost, clock_us, .. }, true) => {
                self.fail_over(lost, length, clock_us)
            }
            (Fault::ClockStep { by_us }, true) => self.db.failures.step_us += by_us,
            // Listeners connect again, and wake once (a release may have been missed).
            (Fault::Restart | Fault::Failover { .. }, false) => self.notify_all(),
            (Fault::Freeze { node } | Fault::Suspend { node }, true) => {
                self.freeze(node, event.until)
            }
            // The host wakes: its monotonic clock stood still while the boot clock ran.
            (Fault::Suspend { node }, false) => self.woke(node, length),
            (Fault::Crash { node, restart }, true) => {
                self.kill(node);
                if restart {
                    self.at(event.until, Event::Start { node });
                }
            }
            (Fault::Twin { node }, true) => self.start(node),
            (Fault::Twin { node }, false) => self.kill_twin(node),
            (Fault::Stop { node, restart }, true) => {
                self.stop(node);
                if restart {
                    self.at(event.until, Event::Start { node });
                }
            }
            (Fault::StopDuringReload { node, .. }, true) => self.stop(node),
            (Fault::Unhealthy { node }, healthy) => self.set_unhealthy(node, healthy),
            (Fault::Pause { .. }, true) => self.operator_send(OperatorWrite::Pause { length }),
            (Fault::Pause { resume: true }, false) => self.operator_send(OperatorWrite::Resume),
            (Fault::Resign, true) => self.operator(None),
            (Fault::Handover { to }, true) => self.operator(Some(to)),
            _ => {}
        }
    }

    /// A release notification to every listening process (PostgreSQL's NOTIFY).
    fn notify_all(&mut self) {
        if !self.scenario.notifies {
            return;
        }
        for process in 0..self.processes.len() {
            if self.processes[process].alive {
                self.at(self.now + NOTIFY, Event::Hint { process });
            }
        }
    }

    /// The database's clock now.
    fn db_clock(&self) -> Instant {
        self.db_clock_at(self.now)
    }

    /// The database's clock at `at` (offset from the start).
    fn db_clock_at(&self, at: Duration) -> Instant {
        let ppm = self.scenario.db_clock_ppm as f64 * 1e-6;
        let at = self.base + at + at.mul_f64(ppm);
        crate::sim::failures::stepped(at, self.db.failures.step_us)
    }

    /// Draws the fate of a statement sent now by `process`, and schedules it.
    fn send(&mut self, mut sent: Sent) {
        self.statements += 1;
        let p = &mut self.processes[sent.process];
        let fate = p.dice.fate(self.base + self.now);
        let connected = p.connected;
        let mut delay = fate.there;
        if connected.is_none() {
            delay += CONNECT;
            if self.db.refusing(self.base + self.now + CONNECT) {
                self.processes[sent.process].connected = None;
                let answer = Err(StoreError::ConnectTimeout {
                    url: "sim".into(),
                    after: CONNECT,
                });
                return self.answer(&sent, CONNECT, answer);
            }
            self.processes[sent.process].connected = Some(self.db.epoch);
        }
        if fate.fail_before_commit {
            let answer = Err(StoreError::QueryTimeout { after: delay });
            return self.answer(&sent, delay, answer);
        }
        sent.epoch = self.processes[sent.process].connected.unwrap_or_default();
        sent.back = fate.back;
        sent.lose_answer = fate.lose_answer;
        sent.sent_at = self.now;
        // MySQL reads its clock when the statement arrives, before any row lock wait;
        // PostgreSQL's clock_timestamp() when it writes.
        let arrives = self.now + delay;
        let runs = arrives + fate.lock_wait;
        sent.clock_at = match self.scenario.clock_at_arrival {
            true => arrives,
            false => runs,
        };
        self.at(runs, Event::Execute(sent));
    }

    /// Schedules the answer to `sent`, `after` from now, bounded by the client's timeout
    /// (and a release by the machine's own bound on it, as the election loop does).
    fn answer(&mut self, sent: &Sent, after: Duration, answer: Result<Reply, StoreError>) {
        let timeout = match sent.statement {
            Statement::Release { within, .. } => within.min(self.scenario.query_timeout),
            _ => self.scenario.query_timeout,
        };
        let elapsed = self.now.saturating_sub(sent.sent_at) + after;
        let (at, answer) = match elapsed > timeout {
            true => (
                sent.sent_at + timeout,
                Err(StoreError::QueryTimeout { after: timeout }),
            ),
            false => (self.now + after, answer),
        };
        let p = &mut self.processes[sent.process];
        if answer.is_err() {
            // As SqlStore does: a connection is never reused after an error.
            p.connected = None;
        }
        let (process, id) = (sent.process, sent.id);
        self.at(
            at,
            Event::Arrive {
                process,
                id,
                answer,
            },
        );
    }

    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn random_seed(&mut self) -> u64 {
        self.rng.next_u64()
    }
}

#[cfg(test)]
mod tests;
