//! A node process in a direct run: its [`Machine`], and the inputs waiting for it; and
//! a statement on its way to the database ([`Sent`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::election::machine::{Machine, Reply, Statement};
use crate::election::{ElectionSettings, Status};
use crate::sim::db::Dice;
use crate::store::{ProcessToken, StoreError};

/// A statement on its way.
#[derive(Debug)]
pub(super) struct Sent {
    pub(super) process: usize,
    pub(super) id: u64,
    pub(super) statement: Statement,
    pub(super) sent_at: Duration,
    /// When the database reads its clock for it.
    pub(super) clock_at: Duration,
    /// The connection's restart epoch: a restart cuts it.
    pub(super) epoch: u64,
    pub(super) back: Duration,
    pub(super) lose_answer: bool,
    /// Whose statement it is: the node's settings and its process token.
    pub(super) settings: Arc<ElectionSettings>,
    pub(super) token: ProcessToken,
}

/// One process.
pub(super) struct Process {
    pub(super) node: usize,
    pub(super) label: String,
    pub(super) machine: Machine,
    pub(super) alive: bool,
    /// The stop is waiting to be taken; `stopped`: it was (the claim gate is closed).
    pub(super) stop: bool,
    pub(super) stopped: bool,
    pub(super) unhealthy: bool,
    pub(super) in_flight: Option<u64>,
    pub(super) arrived: Option<Result<Reply, StoreError>>,
    pub(super) hint: bool,
    pub(super) resign: Option<Option<i64>>,
    /// Frozen (SIGSTOP, or the host asleep) until then.
    pub(super) frozen_until: Duration,
    /// How far its monotonic clock lags the run's: time the host slept.
    pub(super) slept: Duration,
    /// When it started (run time): a host's sleep counts only from here.
    pub(super) started: Duration,
    /// The generation of its pending timer.
    pub(super) timer: u64,
    /// When its leader looks at the deadline next (the loop's deadline timer).
    pub(super) look_at: Option<tokio::time::Instant>,
    pub(super) connected: Option<u64>,
    pub(super) dice: Dice,
    /// When its last statements were sent (property 5).
    pub(super) sent: VecDeque<Duration>,
    pub(super) status: Status,
    pub(super) last_term: Option<i64>,
    /// A second process with the node's id (killed when its window closes).
    pub(super) twin: bool,
}
