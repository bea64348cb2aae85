//! The tables of `dialect/`, statement by statement, in memory: each method of
//! [`Table`] is one statement, run at the database time it is given.

use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

use super::flavour::{Flavour, Precision, RenewalStart};
use crate::store::{Commands, HeldRow, Lease, LeaseRow, MemberStanding, Pending};

mod fence;
mod members;
mod outside;

pub use fence::FenceRefusal;

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

    /// When the lease lapses (`timestamp + lease_ms`).
    fn lease_end(&self) -> Instant {
        self.renewed_at + self.lease
    }

    /// Held, and the lease not lapsed by the database clock.
    fn live(&self, now: Instant) -> bool {
        self.holder.is_some() && now < self.lease_end()
    }

    fn paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|until| now < until)
    }

    /// `handover_to IS NULL OR handover_until IS NULL OR handover_until <= now OR
    /// handover_to = node`: a handover without a window is none.
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
    fn start_term(&mut self, lease: &Lease, ttl: Duration, now: Instant, clock_us: i64) -> i64 {
        self.term = (self.term + 1).max(clock_us);
        self.holder = Some(lease.holder.clone());
        self.term_token = Some(lease.token.value());
        self.lease = ttl;
        self.renewed_at = now;
        self.taken_at = Some(now);
        self.handover_to = None;
        self.handover_until = None;
        self.resign_term = None;
        self.term
    }

    fn to_lease_row(&self, now: Instant, clock_offset_us: i64) -> LeaseRow {
        let left = |until: Option<Instant>| until.filter(|u| now < *u).map(|u| u - now);
        LeaseRow {
            holder: self.holder.clone(),
            term: self.term,
            lease: self.lease,
            age: now.saturating_duration_since(self.renewed_at),
            clock_offset_us: Some(clock_offset_us),
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
    /// The last record's order (`record_process`, `record_count`).
    order: crate::store::RecordOrder,
}

/// The tables, statement by statement. Every method is one statement of `dialect/`, run
/// at database time `now`, and answers what the SQL answers (for a write: whether it
/// matched the row; for a claim or reacquire, the term it started). How the database
/// reads its clock and keeps its times is its [`Flavour`] (today's model by default).
#[derive(Debug, Default, Clone)]
pub struct Table {
    rows: BTreeMap<String, Row>,
    members: BTreeMap<(String, String), MemberRow>,
    /// What the database clock reads, in microseconds since 1970, at an instant: set by
    /// [`Table::set_clock`], or at the first term started.
    clock: Option<(Instant, i64)>,
    flavour: Flavour,
    /// Fenced transactions open now, and the row each holds against a new term.
    fences: BTreeMap<u64, String>,
}

/// What the clock of a table nobody set reads at the first term it starts (2023-11-14).
const DEFAULT_CLOCK_US: i64 = 1_700_000_000_000_000;

impl Table {
    /// A table whose database reads its clock and keeps its times as `flavour` says.
    pub fn with_flavour(flavour: Flavour) -> Table {
        Table {
            flavour,
            ..Table::default()
        }
    }

    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// Says what the database clock reads at `at`, in microseconds since 1970 (the term
    /// floor of [`Table::claim`] and [`Table::reacquire`] follows it from there).
    pub fn set_clock(&mut self, at: Instant, unix_us: i64) {
        self.clock = Some((at, unix_us));
    }

    /// The database clock at `now`, in microseconds since 1970 (as its flavour reads it).
    pub fn clock_us(&mut self, now: Instant) -> i64 {
        self.clock.get_or_insert((now, DEFAULT_CLOCK_US));
        let now = self.reading(now);
        self.clock_at(now)
    }

    /// The clock at `now`, from where it was set (or would be set now).
    fn clock_at(&self, now: Instant) -> i64 {
        let (at, unix_us) = self.clock.unwrap_or((now, DEFAULT_CLOCK_US));
        match now.checked_duration_since(at) {
            Some(after) => unix_us + after.as_micros() as i64,
            None => unix_us - at.duration_since(now).as_micros() as i64,
        }
    }

    /// What a statement run at `now` reads as its clock: `now`, cut to the flavour's
    /// precision (from the clock [`Table::set_clock`] set: a table whose clock nobody set
    /// cuts nothing before its first term).
    fn reading(&self, now: Instant) -> Instant {
        let cut = self.flavour.cut(self.clock_at(now));
        now.checked_sub(cut).unwrap_or(now)
    }

    /// The row as a read at `now` sees it; its clock offset is 0 (see
    /// [`Table::lease_row_against`]).
    pub fn lease_row(&self, name: &str, now: Instant) -> Option<LeaseRow> {
        let now = self.reading(now);
        self.rows.get(name).map(|row| row.to_lease_row(now, 0))
    }

    /// [`Table::lease_row`] read by a node whose wall clock reads `reader_unix_us` at
    /// `now`: the clock offset is the database clock's lead on it, as the SQL store
    /// measures it at the middle of its read.
    pub fn lease_row_against(
        &self,
        name: &str,
        now: Instant,
        reader_unix_us: i64,
    ) -> Option<LeaseRow> {
        let now = self.reading(now);
        let offset = self.clock_at(now) - reader_unix_us;
        self.rows.get(name).map(|row| row.to_lease_row(now, offset))
    }

    pub fn ensure_row(&mut self, name: &str, now: Instant) {
        let now = self.reading(now);
        self.rows
            .entry(name.to_owned())
            .or_insert_with(|| Row::unheld(now));
    }

    /// Takes a released or lapsed lease in `lease.term`, unless paused or handed over to
    /// another node; the term it started.
    pub fn claim(&mut self, now: Instant, lease: &Lease) -> Option<i64> {
        let now = self.reading(now);
        let clock_us = self.clock_us(now);
        let ttl = self.flavour.duration(lease.ttl);
        match self.rows.get_mut(&lease.name) {
            Some(row)
                if row.term == lease.term
                    && !row.live(now)
                    && !row.paused(now)
                    && row.open_to(&lease.holder, now) =>
            {
                Some(row.start_term(lease, ttl, now, clock_us))
            }
            _ => None,
        }
    }

    /// Starts the next term on a row the holder still holds in `lease.term`, unless asked
    /// to resign it, handed over to another node, or paused with the lease lapsed; the
    /// term it started.
    pub fn reacquire(&mut self, now: Instant, lease: &Lease) -> Option<i64> {
        let now = self.reading(now);
        let clock_us = self.clock_us(now);
        let ttl = self.flavour.duration(lease.ttl);
        match self.rows.get_mut(&lease.name) {
            Some(row)
                if row.held_by(lease)
                    && row.resign_term != Some(lease.term)
                    && row.open_to(&lease.holder, now)
                    && (!row.paused(now) || row.live(now)) =>
            {
                Some(row.start_term(lease, ttl, now, clock_us))
            }
            _ => None,
        }
    }

    /// Extends a live lease of the holder in `lease.term` if the commands pending on the
    /// row are the ones it has seen. Where the flavour says so (MySQL's `GREATEST`: a
    /// renewal that waited for the row lock reads an earlier clock), the lease never
    /// starts earlier than it did.
    pub fn renew(&mut self, now: Instant, lease: &Lease, seen: Commands) -> bool {
        let now = self.reading(now);
        let ttl = self.flavour.duration(lease.ttl);
        let renewal = self.flavour.renewal;
        match self.rows.get_mut(&lease.name) {
            Some(row)
                if row.held_by(lease)
                    && row.live(now)
                    && (row.resign_term == Some(lease.term)) == seen.resign
                    && row.paused(now) == seen.paused =>
            {
                row.lease = ttl;
                row.renewed_at = match renewal {
                    RenewalStart::Greatest => row.renewed_at.max(now),
                    RenewalStart::Now => now,
                };
                true
            }
            _ => false,
        }
    }

    /// Gives the row up; a handover its leader was asked for gets its window anew.
    pub fn release(&mut self, now: Instant, lease: &Lease) -> bool {
        let now = self.reading(now);
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

    /// Keeps the holder's live lease in `lease.term` for `left` more and renews it no
    /// more (`leaderd lock --hold-at-least`): the lease now ends `left` after `now`, its
    /// length counted from the last renewal and rounded up to the millisecond (a
    /// millisecond more with SQLite's precision, as its SQL does); whether it was live.
    /// After the clock stepped back past the last renewal, it ends `left` after the
    /// renewal (a length never below zero).
    pub fn hold(&mut self, now: Instant, lease: &Lease, left: Duration) -> bool {
        let now = self.reading(now);
        let left = self.flavour.duration(left);
        let flavour = self.flavour;
        match self.rows.get_mut(&lease.name) {
            Some(row) if row.held_by(lease) && row.live(now) => {
                let since = now.saturating_duration_since(row.renewed_at);
                let whole_ms = Duration::from_millis(since.as_millis() as u64);
                // Rounded up; SQLite's float difference of whole milliseconds, cut to an
                // integer, and a millisecond more.
                let up = match (flavour.precision, since == whole_ms) {
                    (Precision::Millis, _) | (_, false) => Duration::from_millis(1),
                    (_, true) => Duration::ZERO,
                };
                row.lease = whole_ms + up + left;
                true
            }
            _ => false,
        }
    }

    /// Every held lease that is live at `now`, elections' and locks', by name (`leaderd
    /// locks`).
    pub fn held_rows(&self, now: Instant) -> Vec<HeldRow> {
        let now = self.reading(now);
        self.rows
            .iter()
            .filter(|(_, row)| row.live(now))
            .map(|(name, row)| HeldRow {
                name: name.clone(),
                holder: row.holder.clone().unwrap_or_default(),
                term: row.term,
                lease: row.lease,
                age: now.saturating_duration_since(row.renewed_at),
                held: row
                    .taken_at
                    .map(|taken| now.saturating_duration_since(taken)),
            })
            .collect()
    }

    /// `leaderd pause`: creates the row if needed, in the same statement.
    pub fn pause(&mut self, now: Instant, name: &str, duration: Duration) {
        let now = self.reading(now);
        let duration = self.flavour.duration(duration);
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
        let now = self.reading(now);
        match self.rows.get_mut(name) {
            Some(row)
                if row.term == term
                    && row.holder.as_deref() == Some(holder)
                    && row.resign_term != Some(term)
                    && !row.offered(now)
                    && row.live(now) =>
            {
                row.resign_term = Some(term);
                // An offer whose window passed unanswered is over: the release must not
                // give its target a window again (seed 4749).
                row.handover_to = None;
                row.handover_until = None;
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
        let now = self.reading(now);
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
        let now = self.reading(now);
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
}
