//! What the simulation knows of the whole world: the database, every process that ever
//! ran, the trace, and the properties, checked after every event (every commit, every
//! status a node publishes, every scheduled event) and at a regular tick.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

use super::database::Db;
use super::schedule::Scenario;
use super::trace::Trace;
use crate::election::{Role, Status};

/// The election every simulated node takes part in.
pub(super) const ELECTION: &str = "sim";

/// Statements one process may send in any one second on each of its connections
/// (property 5): the election's, where a round is one statement, two or three when the
/// row changed, and retries after failures start at 50 ms and double; and its members
/// task's, a record every two seconds and a preemption's few statements. An interval
/// under 200 ms (the ttl table's, `ttl_table.rs`) allows four statements per interval.
pub(super) const STATEMENTS_PER_SECOND: usize = 20;

/// A property that failed, and where.
#[derive(Debug, Clone)]
pub(crate) struct Violation {
    pub(crate) property: &'static str,
    pub(crate) at: Duration,
    pub(crate) detail: String,
}

/// One process, as the world sees it.
pub(super) struct ProcessView {
    /// `b#2`: node b's second process.
    pub(super) label: String,
    pub(super) node: usize,
    pub(super) status: watch::Receiver<Status>,
    /// Not killed and not ended.
    pub(super) alive: bool,
    /// When it was told to stop (SIGTERM).
    pub(super) stop_began: Option<Instant>,
    /// When its statements were sent, over the last second: the election's, and its
    /// members task's on a connection of its own (property 5 counts each on its own).
    pub(super) sent: VecDeque<Instant>,
    pub(super) sent_members: VecDeque<Instant>,
    /// The last term it acted as leader in.
    pub(super) last_term: Option<i64>,
    /// What its status file says, as far as it is durable (it outlives the process).
    pub(super) file: Option<Status>,
    /// A leader's file as its readers parse it, and when what it holds was published
    /// (`readers.rs`).
    pub(super) file_read: Option<(Instant, crate::status_file::StatusDocument)>,
}

/// What the driver knows of a node at an instant: the ground truth the operator-facing
/// properties judge `leaderd status`, `handover` and preemption by.
#[derive(Debug, Clone, Default)]
pub(super) struct NodeTruth {
    /// Since when one of its processes could lead (none: none can).
    pub(super) eligible_since: Option<Instant>,
    /// When its last process went away, and whether it stopped cleanly.
    pub(super) gone: Option<(Instant, bool)>,
    /// Since when the health check of its live process has failed.
    pub(super) failing_since: Option<Instant>,
    pub(super) priority: i64,
}

/// How long a manual move (`resign`, `handover`) keeps preemption from taking the lead
/// back to the node it moved away from (`--hold`'s default).
pub(super) const MANUAL_HOLD: Duration = Duration::from_secs(300);

pub(super) struct State {
    pub(super) db: Db,
    pub(super) truth: Vec<NodeTruth>,
    /// The nodes an operator moved the lead away from (or asked to), and when.
    pub(super) moved_away: BTreeMap<String, Instant>,
    /// The nodes preemption moved leadership away from, and when.
    pub(super) preempted: BTreeMap<usize, Instant>,
    /// When the members table last showed each node held off preemption.
    pub(super) held_seen: BTreeMap<usize, Instant>,
    /// The node that acts as leader, and since when.
    pub(super) leading: Option<(usize, Instant)>,
    pub(super) trace: Trace,
    pub(super) processes: Vec<ProcessView>,
    pub(super) violation: Option<Violation>,
    /// Which process acted as leader in each term.
    pub(super) acted: BTreeMap<i64, usize>,
    /// Since when no process acts as leader.
    leaderless_since: Option<Instant>,
    /// Statements sent in the run.
    pub(super) statements: u64,
    /// Leader work and its fenced writes (properties 15 and 16).
    pub(super) leader_work: super::ledger::Ledger,
    /// What the outcome properties follow (`outcomes.rs`).
    pub(super) outcomes: super::outcome_state::Outcomes,
}

pub(super) struct World {
    pub(super) start: Instant,
    pub(super) scenario: Scenario,
    pub(super) state: Mutex<State>,
    /// From when the election must have a leader whenever a live candidate could lead.
    pub(super) quiet_from: Instant,
    /// How far the database clock has been stepped, in microseconds (`failover.rs`).
    pub(super) clock_step_us: std::sync::atomic::AtomicI64,
}

impl World {
    pub(super) fn new(scenario: Scenario) -> World {
        let start = Instant::now();
        let nodes = scenario.nodes.len();
        let settle = scenario
            .nodes
            .iter()
            .map(|n| n.step_down)
            .max()
            .unwrap_or_default()
            + scenario.ttl * 2;
        let last = scenario
            .events
            .iter()
            .map(|e| e.until)
            .max()
            .unwrap_or_default();
        let mut db = Db::new();
        db.failures.keeps_history = super::failures::keeps_history(scenario.most_lost());
        World {
            start,
            quiet_from: start + last + settle,
            clock_step_us: Default::default(),
            scenario,
            state: Mutex::new(State {
                db,
                truth: vec![NodeTruth::default(); nodes],
                moved_away: BTreeMap::new(),
                preempted: BTreeMap::new(),
                held_seen: BTreeMap::new(),
                leading: None,
                trace: Trace::default(),
                processes: Vec::new(),
                violation: None,
                acted: BTreeMap::new(),
                leaderless_since: None,
                statements: 0,
                leader_work: Default::default(),
                outcomes: Default::default(),
            }),
        }
    }

    /// The database's clock at `now`: it runs `db_clock_ppm` faster than the nodes'.
    pub(super) fn db_clock(&self, now: Instant) -> Instant {
        let since = now.saturating_duration_since(self.start);
        let at = self.start + since + since.mul_f64(self.scenario.db_clock_ppm as f64 * 1e-6);
        let step = self
            .clock_step_us
            .load(std::sync::atomic::Ordering::Relaxed);
        super::failures::stepped(at, step)
    }

    /// A span of the database's clock, in the nodes' time.
    pub(super) fn in_node_time(&self, span: Duration) -> Duration {
        span.div_f64(1.0 + self.scenario.db_clock_ppm as f64 * 1e-6)
    }

    pub(super) fn elapsed(&self) -> Duration {
        Instant::now() - self.start
    }

    pub(super) fn trace(&self, who: &str, what: String) {
        let at = self.elapsed();
        self.state.lock().unwrap().trace.push(at, who, what);
    }

    /// A statement leaves a process: property 5 (no busy loop) and 6 (a stopping node
    /// starts no term).
    pub(super) fn on_send(&self, process: Option<usize>, who: &str, what: &str, starts_term: bool) {
        let now = Instant::now();
        let at = now - self.start;
        let mut state = self.state.lock().unwrap();
        state.statements += 1;
        state.trace.push(at, who, format!("sends {what}"));
        let Some(index) = process else { return };
        let view = &mut state.processes[index];
        let sent = match who.ends_with("/m") {
            true => &mut view.sent_members,
            false => &mut view.sent,
        };
        while sent
            .front()
            .is_some_and(|t| now - *t >= Duration::from_secs(1))
        {
            sent.pop_front();
        }
        sent.push_back(now);
        let (count, stopping) = (sent.len(), view.stop_began);
        let label = view.label.clone();
        let limit =
            STATEMENTS_PER_SECOND.max((4.0 / self.scenario.interval.as_secs_f64()) as usize);
        if count > limit {
            fail(
                &mut state,
                at,
                "5: no node sends more than 20 statements in a second",
                format!("{who} sent {count} statements in the last second (limit {limit})"),
            );
        }
        if let Some(began) = stopping.filter(|_| starts_term) {
            fail(
                &mut state,
                at,
                "6: a node that has begun to stop never starts a term",
                format!(
                    "{label} sends `{what}` {:?} after it was told to stop",
                    now - began
                ),
            );
        }
    }

    /// Properties 1 to 3, and the bookkeeping for liveness.
    pub(super) fn check(&self) {
        self.check_readers();
        let now = Instant::now();
        let at = now - self.start;
        let mut state = self.state.lock().unwrap();
        if state.violation.is_some() {
            return;
        }
        if let Some((property, detail)) = state.db.breaches.pop() {
            return fail(&mut state, at, property, detail);
        }
        self.watch_outcomes(&mut state, now);
        let row = state.db.table.lease_row(ELECTION, self.db_clock(now));
        // Work on a lease the database acknowledged and then forgot (a failover that lost
        // commits) is excused until that lease's end, as acting on it is (`failover.rs`).
        let since = now - self.start;
        let judged = state.leader_work.judge(row.as_ref(), |node, term| {
            state.db.failures.forgotten_at(node, term, since)
        });
        if let Some((property, detail)) = judged {
            return fail(&mut state, at, property, detail);
        }
        // A node acts as leader while it says so, and also while its status file still
        // says so: whoever reads the file (hooks, an operator) takes it at its word.
        let leads = |status: &Status| {
            status.role == Role::Leader && status.lease_deadline.is_some_and(|d| now < d)
        };
        // (process, status, whether it says so now rather than only in its file)
        let acting: Vec<(usize, Status, bool)> = state
            .processes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let status = p.status.borrow();
                if p.alive && leads(&status) {
                    return Some((i, status.clone(), true));
                }
                p.file
                    .as_ref()
                    .filter(|f| leads(f))
                    .map(|f| (i, f.clone(), false))
            })
            .collect();
        let acting = self.excuse_forgotten(&mut state, now, acting);
        if state.violation.is_some() {
            return;
        }
        if acting.len() > 1 {
            let who: Vec<String> = acting
                .iter()
                .map(|(i, s, says)| {
                    let how = if *says { "" } else { ", by its status file" };
                    format!("{} (term {:?}{how})", state.processes[*i].label, s.term)
                })
                .collect();
            return fail(
                &mut state,
                at,
                "1: at no instant do two nodes act as leader",
                who.join(" and "),
            );
        }
        // The rest judges what the process does now; a file lags its process by design.
        let acting = acting
            .into_iter()
            .filter(|(_, _, says)| *says)
            .map(|(i, status, _)| (i, status));
        let Some((index, status)) = acting.into_iter().next() else {
            state.leaderless_since.get_or_insert(now);
            state.leading = None;
            return;
        };
        state.leaderless_since = None;
        let node = state.processes[index].node;
        if state.leading.is_none_or(|(n, _)| n != node) {
            state.leading = Some((node, now));
        }
        let label = state.processes[index].label.clone();
        let node_id = self.scenario.nodes[state.processes[index].node].id.clone();
        let deadline = status.lease_deadline.expect("a leader has a deadline");
        let held = row.as_ref().is_some_and(|r| {
            r.holder.as_deref() == Some(node_id.as_str())
                && Some(r.term) == status.term
                && deadline <= now + self.in_node_time(r.remaining())
        });
        if !held {
            return fail(
                &mut state,
                at,
                "2: a node acts as leader only while the row names it, in its term, live",
                format!(
                    "{label} acts in term {:?} until {:?}, but the row is {row:?}",
                    status.term,
                    deadline - self.start
                ),
            );
        }
        let term = status.term.expect("a leader has a term");
        let first = *state.acted.entry(term).or_insert(index);
        if first != index {
            let other = state.processes[first].label.clone();
            return fail(
                &mut state,
                at,
                "3: no term is acted on by two processes",
                format!("term {term}: {other} and {label}"),
            );
        }
        let view = &mut state.processes[index];
        if view.last_term.is_some_and(|last| term < last) {
            let last = view.last_term;
            return fail(
                &mut state,
                at,
                "3: terms only grow",
                format!("{label} acts in term {term} after term {last:?}"),
            );
        }
        view.last_term = Some(term);
    }

    /// Property 4: once the faults are over, a candidate leads within ttl + interval +
    /// `LIVENESS_SLACK` whenever one could.
    pub(super) fn check_liveness(&self, someone_could_lead: bool) {
        let now = Instant::now();
        let bound = self.scenario.ttl + self.scenario.interval + LIVENESS_SLACK;
        let mut state = self.state.lock().unwrap();
        // A pause in force (one whose `resume` failed, say) excuses the election: count
        // from its end.
        if state
            .db
            .table
            .lease_row(ELECTION, self.db_clock(now))
            .is_some_and(|row| row.paused())
        {
            state.leaderless_since = None;
            return;
        }
        let Some(since) = state.leaderless_since else {
            return;
        };
        let since = since.max(self.quiet_from);
        if someone_could_lead && now > since + bound {
            let at = now - self.start;
            fail(
                &mut state,
                at,
                "4: once the faults are over, a candidate leads within ttl + interval + 1s",
                format!(
                    "no leader since {:?}, faults over at {:?}",
                    since - self.start,
                    self.quiet_from - self.start
                ),
            );
        }
    }
}

/// The slack of the liveness bound, on top of ttl + interval: a follower's poll lands up
/// to a spread after the lapse, and a claim needs its round trips.
pub(super) const LIVENESS_SLACK: Duration = Duration::from_secs(1);

/// Properties left out of a search (`LEADERD_SIM_SKIP=10,9`), to look for a second bug
/// behind a first one that is not fixed yet.
pub(super) fn skipped(property: &str) -> bool {
    static SKIPPED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let skipped = SKIPPED.get_or_init(|| {
        std::env::var("LEADERD_SIM_SKIP")
            .unwrap_or_default()
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect()
    });
    let number = property.split(':').next().unwrap_or_default();
    skipped.iter().any(|s| s == number)
}

pub(super) fn fail(state: &mut State, at: Duration, property: &'static str, detail: String) {
    if state.violation.is_none() && !skipped(property) {
        state
            .trace
            .push(at, "check", format!("VIOLATED {property}: {detail}"));
        state.trace.closed = true;
        state.violation = Some(Violation {
            property,
            at,
            detail,
        });
    }
}
