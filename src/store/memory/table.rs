//! The tables of `dialect/`, statement by statement, in memory: each method of
//! [`Table`] is one statement, run at the database time it is given.

use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

use crate::store::{Commands, Lease, LeaseRow, Member, MemberRecord, MemberStanding, Pending};

/// One election's row (`service_leader_lock`).
#[derive(Debug, Clone)]
struct Row {
    holder: Option<String>,
    term: i64,
    lease: Duration,
    /// The database time of the last claim, renewal or release (`"timestamp"`).
    renewed_at: Instant,
    /// When the current term started (`taken_at`; `None` until a claim).
    taken_at: Option<Instant>,
    term_token: Option<i64>,
    resign_term: Option<i64>,
    paused_until: Option<Instant>,
    handover_to: Option<String>,
    handover_until: Option<Instant>,
}

impl Row {
    fn unheld(now: Instant) -> Row {
        Row {
            holder: None,
            term: 0,
            lease: Duration::ZERO,
            renewed_at: now,
            taken_at: None,
            term_token: None,
            resign_term: None,
            paused_until: None,
            handover_to: None,
            handover_until: None,
        }
    }

    /// Held, and the lease not lapsed by the database clock.
    fn live(&self, now: Instant) -> bool {
        self.holder.is_some() && now < self.renewed_at + self.lease
    }

    fn paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|until| now < until)
    }

    /// `handover_to IS NULL OR handover_until <= now OR handover_to = node`.
    fn open_to(&self, node: &str, now: Instant) -> bool {
        match (&self.handover_to, self.handover_until) {
            (Some(to), Some(until)) => until <= now || to == node,
            _ => true,
        }
    }

    /// A handover's window is open: `handover_to IS NOT NULL AND handover_until > now`.
    fn offered(&self, now: Instant) -> bool {
        self.handover_to.is_some() && self.handover_until.is_some_and(|until| now < until)
    }

    /// The row shows `lease`'s holder in `lease.term`.
    fn held_by(&self, lease: &Lease) -> bool {
        self.term == lease.term && self.holder.as_deref() == Some(lease.holder.as_str())
    }

    /// What a new term starts with: the commands of the old one are done. The term is the
    /// next one, or the clock in microseconds if that is higher (`GREATEST(term + 1, ..)`).
    fn start_term(&mut self, lease: &Lease, now: Instant, clock_us: i64) -> i64 {
        self.term = (self.term + 1).max(clock_us);
        self.holder = Some(lease.holder.clone());
        self.term_token = Some(lease.token.value());
        self.lease = lease.ttl;
        self.renewed_at = now;
        self.taken_at = Some(now);
        self.handover_to = None;
        self.handover_until = None;
        self.resign_term = None;
        self.term
    }

    fn to_lease_row(&self, now: Instant) -> LeaseRow {
        let left = |until: Option<Instant>| until.filter(|u| now < *u).map(|u| u - now);
        LeaseRow {
            holder: self.holder.clone(),
            term: self.term,
            lease: self.lease,
            age: now.saturating_duration_since(self.renewed_at),
            // One clock for everything here.
            clock_offset_us: Some(0),
            term_token: self.term_token,
            held_for: self
                .taken_at
                .map(|taken| now.saturating_duration_since(taken)),
            pending: Pending {
                paused_for: left(self.paused_until),
                // As the SQL reads it: only while its window lasts.
                handover_to: self.handover_to.clone().filter(|_| self.offered(now)),
                handover_for: left(self.handover_until),
                resign_term: self.resign_term,
            },
        }
    }
}

/// One node's row in `leaderd_member`.
#[derive(Debug, Clone)]
struct MemberRow {
    candidate: bool,
    standing: MemberStanding,
    priority: i64,
    version: String,
    host: String,
    started: Instant,
    last_seen: Instant,
    no_preempt_until: Option<Instant>,
}

/// The tables, statement by statement. Every method is one statement of `dialect/`, run
/// at database time `now`, and answers what the SQL answers (for a write: whether it
/// matched the row; for a claim or reacquire, the term it started).
#[derive(Debug, Default, Clone)]
pub struct Table {
    rows: BTreeMap<String, Row>,
    members: BTreeMap<(String, String), MemberRow>,
    /// What the database clock reads, in microseconds since 1970, at an instant: set by
    /// [`Table::set_clock`], or at the first term started.
    clock: Option<(Instant, i64)>,
}

/// What the clock of a table nobody set reads at the first term it starts (2023-11-14).
const DEFAULT_CLOCK_US: i64 = 1_700_000_000_000_000;

impl Table {
    /// Says what the database clock reads at `at`, in microseconds since 1970 (the term
    /// floor of [`Table::claim`] and [`Table::reacquire`] follows it from there).
    pub fn set_clock(&mut self, at: Instant, unix_us: i64) {
        self.clock = Some((at, unix_us));
    }

    /// The database clock at `now`, in microseconds since 1970.
    pub fn clock_us(&mut self, now: Instant) -> i64 {
        let (at, unix_us) = *self.clock.get_or_insert((now, DEFAULT_CLOCK_US));
        match now.checked_duration_since(at) {
            Some(after) => unix_us + after.as_micros() as i64,
            None => unix_us - at.duration_since(now).as_micros() as i64,
        }
    }

    pub fn lease_row(&self, name: &str, now: Instant) -> Option<LeaseRow> {
        self.rows.get(name).map(|row| row.to_lease_row(now))
    }

    pub fn ensure_row(&mut self, name: &str, now: Instant) {
        self.rows
            .entry(name.to_owned())
            .or_insert_with(|| Row::unheld(now));
    }

    /// Takes a released or lapsed lease in `lease.term`, unless paused or handed over to
    /// another node; the term it started.
    pub fn claim(&mut self, now: Instant, lease: &Lease) -> Option<i64> {
        let clock_us = self.clock_us(now);
        match self.rows.get_mut(&lease.name) {
            Some(row)
                if row.term == lease.term
                    && !row.live(now)
                    && !row.paused(now)
                    && row.open_to(&lease.holder, now) =>
            {
                Some(row.start_term(lease, now, clock_us))
            }
            _ => None,
        }
    }

    /// Starts the next term on a row the holder still holds in `lease.term`, unless asked
    /// to resign it, handed over to another node, or paused with the lease lapsed; the
    /// term it started.
    pub fn reacquire(&mut self, now: Instant, lease: &Lease) -> Option<i64> {
        let clock_us = self.clock_us(now);
        match self.rows.get_mut(&lease.name) {
            Some(row)
                if row.held_by(lease)
                    && row.resign_term != Some(lease.term)
                    && row.open_to(&lease.holder, now)
                    && (!row.paused(now) || row.live(now)) =>
            {
                Some(row.start_term(lease, now, clock_us))
            }
            _ => None,
        }
    }

    /// Extends a live lease of the holder in `lease.term` if the commands pending on the
    /// row are the ones it has seen. The lease never starts earlier than it did (MySQL's
    /// `GREATEST`: a renewal that waited for the row lock reads an earlier clock).
    pub fn renew(&mut self, now: Instant, lease: &Lease, seen: Commands) -> bool {
        match self.rows.get_mut(&lease.name) {
            Some(row)
                if row.held_by(lease)
                    && row.live(now)
                    && (row.resign_term == Some(lease.term)) == seen.resign
                    && row.paused(now) == seen.paused =>
            {
                row.lease = lease.ttl;
                row.renewed_at = row.renewed_at.max(now);
                true
            }
            _ => false,
        }
    }

    /// Gives the row up; a handover its leader was asked for gets its window anew.
    pub fn release(&mut self, now: Instant, lease: &Lease) -> bool {
        match self.rows.get_mut(&lease.name) {
            Some(row) if row.held_by(lease) => {
                row.holder = None;
                row.renewed_at = now;
                if row.handover_to.is_some() && row.resign_term == Some(lease.term) {
                    row.handover_until = Some(now + row.lease * 2);
                }
                true
            }
            _ => false,
        }
    }

    /// `leaderd pause`: creates the row if needed, as the command does.
    pub fn pause(&mut self, now: Instant, name: &str, duration: Duration) {
        self.ensure_row(name, now);
        if let Some(row) = self.rows.get_mut(name) {
            row.paused_until = Some(now + duration);
        }
    }

    /// `leaderd resume`; whether the row exists.
    pub fn resume(&mut self, name: &str) -> bool {
        match self.rows.get_mut(name) {
            Some(row) => {
                row.paused_until = None;
                true
            }
            None => false,
        }
    }

    /// `leaderd resign`: asks the leader of a live term to step down.
    pub fn request_resign(&mut self, now: Instant, name: &str, holder: &str, term: i64) -> bool {
        match self.rows.get_mut(name) {
            Some(row)
                if row.term == term
                    && row.holder.as_deref() == Some(holder)
                    && row.resign_term != Some(term)
                    && !row.offered(now)
                    && row.live(now) =>
            {
                row.resign_term = Some(term);
                true
            }
            _ => false,
        }
    }

    /// `leaderd handover --to`: only `to` may claim for two lease lengths; the leader is
    /// asked to step down at once (`offer` false), or once `to` accepts.
    pub fn request_handover(
        &mut self,
        now: Instant,
        name: &str,
        holder: &str,
        term: i64,
        to: &str,
        offer: bool,
    ) -> bool {
        match self.rows.get_mut(name) {
            Some(row)
                if row.term == term
                    && row.holder.as_deref() == Some(holder)
                    && row.resign_term != Some(term)
                    && !row.offered(now)
                    && row.live(now) =>
            {
                if !offer {
                    row.resign_term = Some(term);
                }
                row.handover_to = Some(to.to_owned());
                row.handover_until = Some(now + row.lease * 2);
                true
            }
            _ => false,
        }
    }

    /// `node` accepts the handover offered to it of a live lease in `term`.
    pub fn accept_handover(&mut self, now: Instant, name: &str, node: &str, term: i64) -> bool {
        match self.rows.get_mut(name) {
            Some(row)
                if row.handover_to.as_deref() == Some(node)
                    && row.holder.as_deref().is_some_and(|h| h != node)
                    && row.term == term
                    && row.handover_until.is_some_and(|until| now < until)
                    && row.live(now) =>
            {
                row.resign_term = Some(term);
                true
            }
            _ => false,
        }
    }

    pub fn record_member(&mut self, now: Instant, record: &MemberRecord, fresh: bool) {
        let key = (record.election.clone(), record.node_id.clone());
        let member = self.members.entry(key).or_insert_with(|| MemberRow {
            candidate: record.candidate(),
            standing: record.standing,
            priority: record.priority,
            version: record.version.clone(),
            host: record.host.clone(),
            started: now,
            last_seen: now,
            no_preempt_until: None,
        });
        member.candidate = record.candidate();
        member.standing = record.standing;
        member.priority = record.priority;
        member.version = record.version.clone();
        member.host = record.host.clone();
        member.last_seen = now;
        if fresh {
            member.started = now;
        }
    }

    pub fn hold_preemption(&mut self, now: Instant, election: &str, node_id: &str, hold: Duration) {
        if let Some(member) = self
            .members
            .get_mut(&(election.to_owned(), node_id.to_owned()))
        {
            // A hold is never shortened: a preemption's short hold must not undo an
            // operator's longer one.
            member.no_preempt_until = member.no_preempt_until.max(Some(now + hold));
        }
    }

    /// The members of `election`, by node id.
    pub fn members(&self, now: Instant, election: &str) -> Vec<Member> {
        self.members
            .iter()
            .filter(|((e, _), _)| e == election)
            .map(|((_, node_id), m)| Member {
                node_id: node_id.clone(),
                candidate: m.candidate,
                standing: Some(m.standing),
                priority: m.priority,
                version: m.version.clone(),
                host: m.host.clone(),
                member_for: now.saturating_duration_since(m.started),
                seen_ago: now.saturating_duration_since(m.last_seen),
                no_preempt_for: m.no_preempt_until.filter(|u| now < *u).map(|u| u - now),
            })
            .collect()
    }

    pub fn prune_members(&mut self, now: Instant, election: &str, older_than: Duration) {
        self.members
            .retain(|(e, _), m| e != election || m.last_seen + older_than >= now);
    }

    /// Replaces the row, as an operator, a stepped database clock or a node of a version
    /// that does not write term tokens might.
    pub fn overwrite(
        &mut self,
        now: Instant,
        name: &str,
        holder: &str,
        term: i64,
        lease: Duration,
    ) {
        let row = self
            .rows
            .entry(name.to_owned())
            .or_insert_with(|| Row::unheld(now));
        *row = Row {
            holder: Some(holder.to_owned()),
            term,
            lease,
            renewed_at: now,
            ..Row::unheld(now)
        };
    }
}
