//! What the outcome properties (`outcomes.rs`) follow through a run, kept apart so that
//! the world's state can hold it without the two files importing each other.

use tokio::time::Instant;

/// What the outcome properties follow through a run.
#[derive(Debug, Default)]
pub(super) struct Outcomes {
    /// When each process (by its index in the world's list) started.
    pub(super) started: Vec<Option<Instant>>,
    /// The last instant a check saw a process act as leader.
    pub(super) leader_seen: Option<Instant>,
    /// The process acting as leader at the last check, and its term.
    pub(super) leading: Option<(usize, i64)>,
    /// Clean stops of a leader under way.
    pub(super) stops: Vec<Stop>,
    /// The pauses (by schedule event) already judged.
    pub(super) pauses_judged: Vec<usize>,
}

/// A leader told to stop (SIGTERM), followed until another node leads.
#[derive(Debug)]
pub(super) struct Stop {
    pub(super) process: usize,
    pub(super) node: usize,
    pub(super) term: i64,
    pub(super) told: Instant,
    /// When the row showed its term released (not lapsed).
    pub(super) released: Option<Instant>,
}
