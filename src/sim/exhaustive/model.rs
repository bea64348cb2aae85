//! The exhaustive check's state: two nodes, the table as the database, one time for all
//! (the database clock runs [`DB_CLOCK_PPM`] faster), and the choices that lead on from
//! a state ([`Choice`]). Properties 1, 2, 3 and 6 are checked after every choice.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;
use tokio::time::Instant;

use super::node::{Awaited, BOOT_AT_START, Flight, Node, QUERY_TIMEOUT, TTL};
use crate::election::Role;
use crate::election::machine::{Reply, hash_debug};
use crate::sim::direct::check::row_backs;
use crate::sim::direct::statement::run_statement;
use crate::sim::world::ELECTION;
use crate::store::memory::Table;

/// How much faster the database clock runs than the nodes' (within the 2000 the safety
/// margin allows).
pub(super) const DB_CLOCK_PPM: u32 = 1500;
/// How far before and after a lease's end by the database clock time stops.
const AROUND: Duration = Duration::from_millis(1);

/// What happens next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Choice {
    /// The node's statement runs now and its answer arrives now.
    Roundtrip(usize),
    /// It runs now; its answer arrives later ([`Choice::Arrive`]).
    Run(usize),
    /// It runs now, and the node gets an error (the answer was lost).
    Lose(usize),
    /// It never runs, and the node gets an error.
    Fail(usize),
    /// The answer of a statement that ran arrives.
    Arrive(usize),
    /// A statement the node abandoned runs after all.
    Orphan(usize),
    /// SIGTERM.
    Stop(usize),
    /// SIGTERM handed over before the statement the node just sent has left: it never
    /// reaches the database (`Input::Unsent`, as the election loop says it).
    StopUnsent(usize),
    /// The leader work has stopped and asks to resign (after an operator's request).
    PassOn(usize),
    /// `leaderd resign`: written into the row of its live holder.
    Resign,
    /// `leaderd handover --to` the other node.
    Handover,
    /// Time moves on to the next instant that matters.
    Advance(Duration),
}

/// How far the check goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bound {
    /// Virtual time.
    pub(super) horizon: Duration,
    /// Faults along one path: an answer late, lost or never coming, a statement slow to
    /// run (time moves on before it runs, however far), a status file slow to answer, an
    /// abandoned statement that runs after all, a stop, an operator command.
    pub(super) faults: u8,
    /// Of those, stops and operator commands (resign, handover).
    pub(super) stops: u8,
    pub(super) commands: u8,
}

impl Flight {
    /// Whether it was sent now and has not run: a stop handed over first keeps it from
    /// leaving.
    fn unsent(&self, now: Duration) -> bool {
        self.ran.is_none() && self.sent_at == now && matches!(self.awaited, Awaited::Statement(_))
    }

    /// Whether it waits to run, or for the status file: time moving on makes it slow.
    fn waits(&self) -> bool {
        self.ran.is_none() || matches!(self.awaited, Awaited::Durable { .. })
    }
}

impl Choice {
    /// Whether the choice spends a fault: what the happy path does (a statement runs and
    /// answers at once, an answer that ran arrives, a leader work's resign, time moving on
    /// with nothing in flight) does not.
    fn fault(self, world: &World) -> bool {
        match self {
            Choice::Roundtrip(_) | Choice::Arrive(_) | Choice::PassOn(_) => false,
            Choice::Advance(_) => world.nodes.iter().any(|node| {
                node.flight
                    .as_ref()
                    .is_some_and(|flight| flight.waits() && !flight.slow)
            }),
            _ => true,
        }
    }
}

#[derive(Clone)]
pub(super) struct World {
    base: Instant,
    pub(super) now: Duration,
    table: Table,
    pub(super) nodes: [Node; 2],
    /// Which node acted in each term (property 3).
    acted: Vec<(i64, usize)>,
    faults_left: u8,
    stops_left: u8,
    commands_left: u8,
    horizon: Duration,
    pub(super) violation: Option<String>,
    /// Which of the milestones below this path has reached (not part of the state).
    pub(super) reached: u8,
}

/// Milestones, to show what the search reaches: a leader lost its lease unstopped, the
/// other node led after the first, a node finished its stop, an operator command took.
pub(super) const LOST_LEAD: u8 = 1;
pub(super) const TAKEOVER: u8 = 2;
pub(super) const STOPPED: u8 = 4;
pub(super) const COMMANDED: u8 = 8;
pub(super) const UNSENT: u8 = 16;

impl World {
    pub(super) fn faults_left(&self) -> u8 {
        self.faults_left
    }

    pub(super) fn new(bound: &Bound) -> World {
        let base = Instant::now();
        let mut world = World {
            base,
            now: Duration::ZERO,
            table: Table::default(),
            nodes: [Node::new("a", 1, base), Node::new("b", 2, base)],
            acted: Vec::new(),
            faults_left: bound.faults,
            stops_left: bound.stops,
            commands_left: bound.commands,
            horizon: bound.horizon,
            violation: None,
            reached: 0,
        };
        world.fire_timers();
        world
    }

    /// The database clock now.
    fn db_clock(&self) -> Instant {
        self.base + self.now + self.now * DB_CLOCK_PPM / 1_000_000
    }

    /// Database time `db` in the nodes' time (from the start).
    fn node_time(&self, db: Duration) -> Duration {
        db.mul_f64(1e6 / (1e6 + DB_CLOCK_PPM as f64))
    }

    /// When the answer to `flight` must have come: the client's timeout, or the bound of
    /// a wait for the status file.
    fn due_by(flight: &Flight) -> Duration {
        match flight.awaited {
            Awaited::Durable { within } => flight.sent_at + within,
            Awaited::Statement(_) => flight.sent_at + QUERY_TIMEOUT,
        }
    }

    /// Every choice from here, and whether it spends a fault.
    pub(super) fn choices(&self) -> Vec<(Choice, bool)> {
        let faults_left = self.faults_left > 0;
        self.all_choices()
            .into_iter()
            .map(|choice| (choice, choice.fault(self)))
            .filter(|&(_, fault)| faults_left || !fault)
            .collect()
    }

    fn all_choices(&self) -> Vec<Choice> {
        let mut choices = Vec::new();
        let mut held_up = false;
        for (i, node) in self.nodes.iter().enumerate() {
            match &node.flight {
                Some(flight) if flight.ran.is_none() => choices.extend([
                    Choice::Roundtrip(i),
                    Choice::Run(i),
                    Choice::Lose(i),
                    Choice::Fail(i),
                ]),
                Some(_) => choices.push(Choice::Arrive(i)),
                None => {}
            }
            if let Some(flight) = &node.flight {
                held_up |= Self::due_by(flight) <= self.now;
            }
            if node.orphan.is_some() {
                choices.push(Choice::Orphan(i));
            }
            if self.stops_left > 0 && !node.stop && !node.stopped && !node.finished {
                choices.push(Choice::Stop(i));
                if node.flight.as_ref().is_some_and(|f| f.unsent(self.now)) {
                    choices.push(Choice::StopUnsent(i));
                }
            }
            if node.passed_on.is_some() && !node.finished {
                choices.push(Choice::PassOn(i));
            }
        }
        if self.commands_left > 0 {
            for command in [Choice::Resign, Choice::Handover] {
                if self.command(&mut self.table.clone(), command) {
                    choices.push(command);
                }
            }
        }
        if !held_up {
            choices.extend(self.next_instant().map(Choice::Advance));
        }
        choices
    }

    /// The next instant that matters, within the horizon: a node's timer, an answer's
    /// last moment, the local deadline a statement in flight would grant (and just after
    /// it, for a late answer), and just before and after the lease's end by the database
    /// clock.
    fn next_instant(&self) -> Option<Duration> {
        let mut instants = Vec::new();
        let margin = self.nodes[0].machine.settings.safety_margin();
        for node in &self.nodes {
            instants.extend(node.wake().map(|wake| wake - self.base));
            if let Some(flight) = &node.flight {
                let deadline = flight.sent_at + TTL - margin;
                instants.extend([Self::due_by(flight), deadline, deadline + AROUND]);
            }
        }
        if let Some(row) = self.table.lease_row(ELECTION, self.db_clock()) {
            if row.live_holder().is_some() {
                let left = row.lease.saturating_sub(row.age);
                let end = self.now + self.node_time(left);
                instants.extend([end.saturating_sub(AROUND), end + AROUND]);
            }
        }
        instants
            .into_iter()
            .filter(|&at| at > self.now && at <= self.horizon)
            .min()
    }

    /// An operator command, if the row takes it.
    fn command(&self, table: &mut Table, command: Choice) -> bool {
        let db_now = self.db_clock();
        let Some(row) = table.lease_row(ELECTION, db_now) else {
            return false;
        };
        let Some(holder) = row.live_holder().map(str::to_owned) else {
            return false;
        };
        match command {
            Choice::Resign => table.request_resign(db_now, ELECTION, &holder, row.term),
            // The operator refuses a target that could not lead.
            _ => {
                let Some(to) = self.nodes.iter().find(|n| n.id != holder) else {
                    return false;
                };
                let (to, could_lead) = (to.id, !to.stopped && !to.stop && !to.finished);
                could_lead && table.request_handover(db_now, ELECTION, &holder, row.term, to, true)
            }
        }
    }

    /// Runs `flight` of node `index` at the database now.
    fn run(&mut self, index: usize, flight: &Flight) -> Reply {
        let db_now = self.db_clock();
        let machine = &self.nodes[index].machine;
        let (settings, token) = (std::sync::Arc::clone(&machine.settings), machine.token);
        let Awaited::Statement(statement) = flight.awaited else {
            unreachable!("the status file answers at once: nothing runs at the database")
        };
        run_statement(&mut self.table, db_now, &settings, token, statement).reply
    }

    /// Fires the timers due now. A node's timer touches that node alone, so its order
    /// against what happens to the other node or the table at the same instant does not
    /// matter: it fires at once rather than as a choice.
    fn fire_timers(&mut self) {
        let mono = self.base + self.now;
        for index in 0..2 {
            while self.violation.is_none()
                && self.nodes[index].wake().is_some_and(|wake| wake <= mono)
            {
                self.pump(index);
            }
        }
    }

    fn pump(&mut self, index: usize) {
        let effects = self.nodes[index].pump(self.base, self.now);
        if self.violation.is_none() {
            self.violation = effects.violation;
        }
        if effects.lost_lead {
            self.reached |= LOST_LEAD;
        }
    }

    /// Takes `choice`, then checks the properties.
    pub(super) fn take(&mut self, choice: Choice, fault: bool) {
        self.faults_left -= fault as u8;
        match choice {
            Choice::Roundtrip(i) | Choice::Run(i) | Choice::Lose(i) => {
                let mut flight = self.nodes[i].flight.take().expect("a statement in flight");
                let reply = self.run(i, &flight);
                match choice {
                    Choice::Run(_) => flight.ran = Some(reply),
                    Choice::Roundtrip(_) => self.nodes[i].arrive(Some(reply)),
                    _ => self.nodes[i].arrive(None),
                }
                self.nodes[i].flight = Some(flight);
                if !matches!(choice, Choice::Run(_)) {
                    self.pump(i);
                }
            }
            Choice::Fail(i) => {
                self.nodes[i].arrive(None);
                self.pump(i);
            }
            Choice::Arrive(i) => {
                let flight = self.nodes[i]
                    .flight
                    .as_mut()
                    .expect("a statement in flight");
                let reply = flight.ran.take();
                self.nodes[i].arrive(reply);
                self.pump(i);
            }
            Choice::Orphan(i) => {
                let orphan = self.nodes[i].orphan.take().expect("an orphan");
                self.run(i, &orphan);
            }
            Choice::Stop(i) => {
                self.stops_left -= 1;
                self.nodes[i].ask_to_stop();
                self.pump(i);
            }
            Choice::StopUnsent(i) => {
                self.stops_left -= 1;
                let effects = self.nodes[i].stop_before_sending(self.base, self.now);
                if self.violation.is_none() {
                    self.violation = effects.violation;
                }
                if effects.lost_lead {
                    self.reached |= LOST_LEAD;
                }
                self.reached |= UNSENT;
            }
            Choice::PassOn(i) => {
                let term = self.nodes[i].passed_on.take().expect("a resign passed on");
                self.nodes[i].ask_to_resign(term);
                self.pump(i);
            }
            Choice::Resign | Choice::Handover => {
                self.commands_left -= 1;
                let mut table = std::mem::take(&mut self.table);
                if self.command(&mut table, choice) {
                    self.reached |= COMMANDED;
                }
                self.table = table;
            }
            Choice::Advance(to) => {
                self.now = to;
                for flight in self.nodes.iter_mut().filter_map(|n| n.flight.as_mut()) {
                    flight.slow |= flight.waits();
                }
            }
        }
        self.fire_timers();
        if self.nodes.iter().any(|node| node.finished) {
            self.reached |= STOPPED;
        }
        self.check();
    }

    /// Properties 1, 2 and 3 (6 and 2 at its source are checked as the nodes act).
    fn check(&mut self) {
        if self.violation.is_some() {
            return;
        }
        let boot = BOOT_AT_START + self.now;
        let acting: Vec<usize> = (0..2)
            .filter(|&i| {
                let status = &self.nodes[i].status;
                !self.nodes[i].finished
                    && status.role == Role::Leader
                    && status.lease_deadline_boot.is_some_and(|d| boot < d)
            })
            .collect();
        if acting.len() > 1 {
            self.violation = Some("1: at no instant do two nodes act as leader".to_owned());
            return;
        }
        let Some(&index) = acting.first() else {
            return;
        };
        let node = &self.nodes[index];
        let term = node.status.term.expect("a leader has a term");
        let deadline = node
            .status
            .lease_deadline_boot
            .expect("a leader has a deadline");
        let row = self.table.lease_row(ELECTION, self.db_clock());
        let ppm = 1.0 + DB_CLOCK_PPM as f64 * 1e-6;
        if !row_backs(row.as_ref(), node.id, term, deadline, boot, ppm) {
            self.violation = Some(format!(
                "2: a node acts as leader only while the row names it, in its term, live: \
                 {} acts in term {term} until boot {deadline:?}, but the row is {row:?}",
                node.id
            ));
            return;
        }
        match self.acted.iter().find(|(t, _)| *t == term) {
            Some(&(_, first)) if first != index => {
                self.violation = Some(format!(
                    "3: no term is acted on by two processes: term {term}"
                ));
                return;
            }
            Some(_) => {}
            None => {
                if self.acted.iter().any(|&(_, other)| other != index) {
                    self.reached |= TAKEOVER;
                }
                self.acted.push((term, index));
            }
        }
        let node = &mut self.nodes[index];
        if node.last_term.is_some_and(|last| term < last) {
            self.violation = Some(format!(
                "3: terms only grow: {} acts in term {term} after {:?}",
                node.id, node.last_term
            ));
            return;
        }
        node.last_term = Some(term);
    }

    /// What decides the world's future (for merging states reached along different paths).
    pub(super) fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.now.hash(&mut hasher);
        hash_debug(&self.table, &mut hasher);
        for node in &self.nodes {
            node.fingerprint(&mut hasher);
        }
        (&self.acted, self.stops_left, self.commands_left).hash(&mut hasher);
        // Not the faults left: the search keeps the most a state was explored with.
        hasher.finish()
    }
}
