//! The lease as the store reads and writes it: the row as read ([`LeaseRow`], and
//! [`HeldRow`] for `leaderd locks`), the commands pending on it, the lease a node's writes
//! state ([`Lease`]) and the token that marks the terms a process starts.

use std::time::Duration;

/// The election's row as the database saw it at the moment it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// Who holds the row; `None` once it was released.
    pub holder: Option<String>,
    /// The fencing token: grows whenever a node starts holding the row.
    pub term: i64,
    /// The lease length the holder promised at its last renewal.
    pub lease: Duration,
    /// Time since the last renewal, by the database clock.
    pub age: Duration,
    /// The database clock minus this host's wall clock, in microseconds, estimated at the
    /// middle of the read (`None` where it cannot be measured).
    pub clock_offset_us: Option<i64>,
    /// Which process started the current term (see [`LeaseRow::started_by`]); `None`
    /// until a node that writes it starts a term (older versions do not).
    pub term_token: Option<i64>,
    /// Since the current term started, by the database clock; `None` for a term started
    /// before the table had `taken_at`, or by a node of an older version (which does not
    /// write it).
    pub held_for: Option<Duration>,
    /// Operator commands pending on the row (see [`Pending`]).
    pub pending: Pending,
}

/// One node's lease on a row, as every write of the node's own lease states it: which row,
/// who holds it, the token that marks the terms it starts, how long each write makes it
/// last, and the term the write expects to find on the row. Built once per statement by
/// the election (or a test) and handed to [`LeaseStore`](super::LeaseStore)'s writes: a claim reads `term` as
/// the term of the free lease it takes and starts `term + 1`; a reacquire, renewal,
/// release or hold as the term the node leads in. A write reads only the fields it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The election's (or lock's) row.
    pub name: String,
    /// The node that holds (or claims) the row.
    pub holder: String,
    /// Marks the terms this node starts (see [`LeaseRow::started_by`]).
    pub token: ProcessToken,
    /// The lease length a claim, reacquire or renewal asks for.
    pub ttl: Duration,
    /// The term the write expects on the row.
    pub term: i64,
}

impl Lease {
    /// The same lease, expecting `term` on the row.
    pub fn in_term(&self, term: i64) -> Lease {
        Lease {
            term,
            ..self.clone()
        }
    }
}

/// A live lease as `leaderd locks` lists it: an election's or a lock's row, times by the
/// database clock at the read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRow {
    pub name: String,
    pub holder: String,
    pub term: i64,
    /// The lease length the holder last promised (or held for, see [`LeaseStore::hold`](super::LeaseStore::hold)).
    pub lease: Duration,
    /// Since its last renewal.
    pub age: Duration,
    /// Since its term started (see [`LeaseRow::held_for`]).
    pub held: Option<Duration>,
}

impl HeldRow {
    /// How long the lease has left.
    pub fn remaining(&self) -> Duration {
        self.lease.saturating_sub(self.age)
    }
}

/// Operator commands pending on an election's row (`leaderd pause`, `handover`, `resign`),
/// as the database saw them at the read: times left are by the database clock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pending {
    /// How long the pause lasts yet (`None`: not paused).
    pub paused_for: Option<Duration>,
    /// The node a handover is for, while its window lasts (`None` once it is over).
    pub handover_to: Option<String>,
    /// How long the handover's window lasts yet.
    pub handover_for: Option<Duration>,
    /// The term whose leader was asked to step down.
    pub resign_term: Option<i64>,
}

/// The commands a leader has seen on its row, which its renewals state: a renewal stating
/// other commands than the row has matches nothing, and the leader reads the row (a read
/// only when a command changed, so the steady state stays one statement a round).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Commands {
    /// The leader was asked to step down from the term it renews.
    pub resign: bool,
    /// The election is paused.
    pub paused: bool,
}

impl LeaseRow {
    /// The commands pending on this row, as its leader in its term sees them.
    pub fn commands(&self) -> Commands {
        Commands {
            resign: self.pending.resign_term == Some(self.term),
            paused: self.paused(),
        }
    }

    /// Whether the election is paused: no node takes a free or lapsed lease.
    pub fn paused(&self) -> bool {
        self.pending.paused_for.is_some()
    }

    /// Whether `node` may not claim because the row is handed over to another node.
    pub fn handed_over_away_from(&self, node: &str) -> bool {
        self.pending.handover_for.is_some()
            && self
                .pending
                .handover_to
                .as_deref()
                .is_some_and(|to| to != node)
    }

    /// Whether the live lease is offered to `node` by a handover it has not accepted yet
    /// (see [`StepDownRequest::Offer`](super::StepDownRequest::Offer)).
    pub fn offered_to(&self, node: &str) -> bool {
        self.pending.handover_to.as_deref() == Some(node)
            && self.pending.handover_for.is_some()
            && self.pending.resign_term != Some(self.term)
            && self.live_holder().is_some_and(|holder| holder != node)
    }

    /// The holder, if its lease is still live by the database clock.
    pub fn live_holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|_| self.age < self.lease)
    }

    /// Whether the process with `token` started the current term. The holder id alone
    /// cannot tell: another process may run with the same node id. The token is bound to
    /// the term by `taken_term`, which every statement that starts a term writes with it
    /// (`held_for` is known only while `taken_term` is the row's term): a node of an older
    /// version that starts a term without writing either leaves a token that does not count.
    /// (Versions before `taken_term` wrote the token xor-ed with the term, which no token
    /// of this version matches but by a 2^-64 chance.)
    pub fn started_by(&self, token: ProcessToken) -> bool {
        self.term_token == Some(token.value()) && self.held_for.is_some()
    }

    /// Whether `node`, which held the row in `term`, could start the next term on it now
    /// (what the reacquire statement checks).
    pub fn reacquirable_by(&self, node: &str, term: i64) -> bool {
        self.term == term
            && self.holder.as_deref() == Some(node)
            && self.pending.resign_term != Some(term)
            && !self.handed_over_away_from(node)
            && (!self.paused() || self.live_holder().is_some())
    }

    /// How long until `node` could claim the lease, by the database clock, as far as this
    /// read tells: until it lapses, and any pause or handover to another node is over.
    pub fn claimable_in(&self, node: &str) -> Duration {
        let paused = self.pending.paused_for.unwrap_or_default();
        let handed_over = match self.handed_over_away_from(node) {
            true => self.pending.handover_for.unwrap_or_default(),
            false => Duration::ZERO,
        };
        self.remaining().max(paused).max(handed_over)
    }

    /// How long the lease has left by the database clock (zero once lapsed or released).
    pub fn remaining(&self) -> Duration {
        if self.holder.is_some() {
            self.lease.saturating_sub(self.age)
        } else {
            Duration::ZERO
        }
    }
}

/// Marks the terms one election starts; drawn at random once per election. A node whose
/// claim's answer was lost must find out from the row whether that claim started the term
/// it shows, and the node id cannot tell: two processes may (wrongly) run with the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessToken(i64);

impl ProcessToken {
    pub fn random() -> Self {
        ProcessToken(rand::random())
    }

    /// A token drawn from `rng` (the simulator's runs replay from a seed).
    pub fn from_rng(rng: &mut impl rand::Rng) -> Self {
        ProcessToken(rng.random())
    }

    /// What a claim or reacquire by this process writes into the row's `term_token` (see
    /// [`LeaseRow::started_by`]).
    pub fn value(self) -> i64 {
        self.0
    }
}
