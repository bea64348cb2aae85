//! What an election tells the rest of the program: this node's [`Status`] (published on a
//! watch channel after every round), its [`RoleEvent`]s in order, and a [`RoundReport`]
//! per round for observers such as metrics and the systemd watchdog.

use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Before the first successful round, while the database is unreachable, after the
    /// lease deadline passed without a renewal, and once stopped.
    Unknown,
    Follower,
    Leader,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Unknown => "unknown",
            Role::Follower => "follower",
            Role::Leader => "leader",
        }
    }
}

/// This node's view of the election, as published after every round.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub role: Role,
    /// The current leader's id, if one holds a live lease as far as this node knows.
    pub leader: Option<String>,
    /// The current term: this node's own while leader, else the last one observed.
    pub term: Option<i64>,
    /// When the current role began.
    pub since: SystemTime,
    pub updated_at: SystemTime,
    /// Wall-clock instant after which nobody may trust this status (for a leader: the
    /// local lease deadline).
    pub valid_until: SystemTime,
    /// The monotonic lease deadline while leader, for in-process consumers.
    pub lease_deadline: Option<Instant>,
    /// The same deadline on CLOCK_BOOTTIME ([`boottime`](super::boottime)), which also counts time the host
    /// spent suspended: fences are derived from it.
    pub lease_deadline_boot: Option<Duration>,
    /// When the current leader's lease lapses unless renewed, as far as this node knows:
    /// its own deadline while leader, else the remaining time the database reported at the
    /// last read, counted from when the answer arrived.
    pub leader_lease_until: Option<Instant>,
    /// Why the last round failed, while the database keeps failing (`None` once it
    /// answers).
    pub error: Option<String>,
    /// The election is paused (`leaderd pause`): no node takes a free or lapsed lease.
    pub paused: bool,
    /// Grows with every publication, so a consumer can say which one it has made durable
    /// (see [`Election::release_after`](super::Election::release_after)).
    pub version: u64,
}

impl Status {
    pub(crate) fn initial() -> Self {
        let now = SystemTime::now();
        Status {
            role: Role::Unknown,
            leader: None,
            term: None,
            since: now,
            updated_at: now,
            valid_until: now,
            lease_deadline: None,
            lease_deadline_boot: None,
            leader_lease_until: None,
            error: None,
            paused: false,
            version: 0,
        }
    }
}

/// A change in this node's view, in the order it happened. Hooks consume these; sending
/// never blocks (the channel is unbounded and role changes are rare).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleEvent {
    /// This node started acting as leader in `term`.
    Elected { term: i64 },
    /// This node stopped acting as leader in `term`, for any reason.
    Demoted { term: i64 },
    /// An operator asked this node, leader in `term`, to step down (`leaderd resign` or
    /// `handover`): the consumer runs the step-down sequence and then resigns through
    /// its [`ResignHandle`](super::ResignHandle).
    ResignRequested { term: i64 },
    /// The leader this node sees changed (`None`: no live leader as far as it knows).
    LeaderChanged {
        previous: Option<String>,
        current: Option<String>,
        term: Option<i64>,
    },
}

/// What one completed round measured, for consumers such as metrics and the systemd
/// watchdog. Observers are called synchronously on the election's task: they must only
/// record (atomics, a watch channel), never wait.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundReport {
    /// Rounds completed so far, failed ones included: proof the loop is turning.
    pub completed: u64,
    /// The round's first statement, on a connection that was already open.
    pub round_trip: Option<Duration>,
    /// For a successful renewal: how much of the local deadline was left when its answer
    /// came back.
    pub renewal_margin: Option<Duration>,
    /// Why the round failed ([`StoreError::kind`](crate::store::StoreError::kind)).
    pub error_kind: Option<&'static str>,
    /// The database clock minus the local wall clock, from a read (microseconds).
    pub clock_offset_us: Option<i64>,
    /// Statements the round sent (1 in steady state, leader and follower alike).
    pub statements: u64,
}

/// A consumer of [`RoundReport`]s (see [`Election::observe`](super::Election::observe)).
pub type RoundObserver = Arc<dyn Fn(&RoundReport) + Send + Sync>;
