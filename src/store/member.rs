//! The members table (`leaderd_member`) as the store reads and writes it: what a member
//! is, what a node records about itself, and what the table says about each member.

use std::time::Duration;

/// Members not seen for this long are deleted.
pub const MEMBER_PRUNE_AFTER: Duration = Duration::from_secs(100);

/// What a member of an election is, as it records itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberStanding {
    /// `election.candidate = false`: it follows and never claims.
    Observer,
    /// It may lead.
    Candidate,
    /// A candidate whose health check has not passed yet.
    Starting,
    /// A candidate whose health check fails.
    Unhealthy,
    /// A candidate whose `on_elected` keeps failing: it claims nothing for a while.
    BackingOff,
    /// It stepped down and left (a clean stop).
    Stopped,
}

impl MemberStanding {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberStanding::Observer => "observer",
            MemberStanding::Candidate => "candidate",
            MemberStanding::Starting => "starting",
            MemberStanding::Unhealthy => "unhealthy",
            MemberStanding::BackingOff => "backoff",
            MemberStanding::Stopped => "stopped",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            MemberStanding::Observer,
            MemberStanding::Candidate,
            MemberStanding::Starting,
            MemberStanding::Unhealthy,
            MemberStanding::BackingOff,
            MemberStanding::Stopped,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// What a running node records about itself in `leaderd_member` (see
/// [`ControlStore::record_member`](super::ControlStore::record_member)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    pub election: String,
    pub node_id: String,
    pub standing: MemberStanding,
    pub priority: i64,
    /// leaderd's version.
    pub version: String,
    pub host: String,
    /// Where it stands among the node's records.
    pub order: RecordOrder,
}

/// Where a record stands among its node's records: a late one (a statement that waited
/// behind a row lock after its client gave up on it) never overwrites a later one of the
/// same process, such as its `stopped`. A record of another process always applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordOrder {
    /// The recording process's token, random per process.
    pub process: i64,
    /// Which of the process's records this is (an equal one applies again).
    pub count: i64,
}

impl MemberRecord {
    /// Whether it may lead now (the `candidate` column, as nodes of the previous
    /// release read it).
    pub fn candidate(&self) -> bool {
        self.standing == MemberStanding::Candidate
    }
}

/// A member of an election as the table has it, times by the database clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub node_id: String,
    /// Whether it may lead now (as it last recorded itself).
    pub candidate: bool,
    /// What it is; `None` in a record of a version before standings.
    pub standing: Option<MemberStanding>,
    pub priority: i64,
    pub version: String,
    pub host: String,
    /// Since the running process first recorded itself.
    pub member_for: Duration,
    /// Since its last record.
    pub seen_ago: Duration,
    /// It lost leadership through preemption: it preempts nobody for this long yet.
    pub no_preempt_for: Option<Duration>,
    /// How often it records itself: [`MEMBER_PERIOD`], or [`LEGACY_MEMBER_PERIOD`] for
    /// a record without its order (a node of an older version, during an upgrade).
    pub recorded_every: Duration,
}

/// How often a node records itself in `leaderd_member`: often enough that a killed node
/// shows as gone within a few leases at the default ttl (three periods), at one statement
/// per node every two seconds beside the election's one per round.
pub const MEMBER_PERIOD: Duration = Duration::from_secs(2);

/// How often nodes of versions before the record order recorded themselves.
pub const LEGACY_MEMBER_PERIOD: Duration = Duration::from_secs(10);

impl Member {
    /// It stopped, or was not seen for three record periods: its process is gone (or cut
    /// off).
    pub fn gone(&self) -> bool {
        self.standing == Some(MemberStanding::Stopped) || self.seen_ago > self.recorded_every * 3
    }

    /// What it is now: its recorded standing, `Stopped` once gone.
    pub fn standing(&self) -> MemberStanding {
        match (self.gone(), self.standing) {
            (true, _) => MemberStanding::Stopped,
            (false, Some(standing)) => standing,
            (false, None) if self.candidate => MemberStanding::Candidate,
            (false, None) => MemberStanding::Observer,
        }
    }

    /// Whether it could take the lease now, as far as the table says.
    pub fn may_lead(&self) -> bool {
        self.standing() == MemberStanding::Candidate
    }
}
