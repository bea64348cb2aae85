//! How one backend's SQL reads its clock and keeps its times, for the model: [`Flavour`],
//! which [`Table`](super::Table) takes. The simulator draws one per run; the differential
//! test (`tests/it/differential.rs`) runs each backend's against its database, and
//! `tests/it/store/flavour.rs` checks each property of it against the real ones.

use std::time::Duration;
use tokio::time::Instant;

/// When a statement reads the database clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockPoint {
    /// When the statement starts, before any wait for a row lock (MySQL's `NOW(6)`): a
    /// statement that waited judges expiry by, and writes, an earlier instant.
    StatementStart,
    /// When it writes the row, after any wait for its lock (PostgreSQL's
    /// `clock_timestamp()`, SQLite's `'now'`, read once it holds the write lock).
    AfterRowLock,
}

/// How finely the database clock reads and the table keeps times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Times and durations as given (the model before flavours).
    Exact,
    /// Clock readings to the microsecond (PostgreSQL's `TIMESTAMPTZ`, MySQL's
    /// `DATETIME(6)`), durations in whole milliseconds (as the store binds them).
    Micros,
    /// Clock readings to the millisecond, truncated (SQLite's clock and its text
    /// timestamps), durations in whole milliseconds.
    Millis,
}

/// What a renewal writes as the lease's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewalStart {
    /// The later of the stored start and the clock reading (MySQL's `GREATEST`): a
    /// renewal that read the clock before a row lock wait never moves the start back.
    Greatest,
    /// The clock reading (PostgreSQL, SQLite): earlier than the stored start only if the
    /// database clock stepped back.
    Now,
}

/// One backend's clock point, precision and renewal rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flavour {
    pub clock_point: ClockPoint,
    pub precision: Precision,
    pub renewal: RenewalStart,
}

impl Flavour {
    pub const POSTGRES: Flavour = Flavour {
        clock_point: ClockPoint::AfterRowLock,
        precision: Precision::Micros,
        renewal: RenewalStart::Now,
    };
    pub const MYSQL: Flavour = Flavour {
        clock_point: ClockPoint::StatementStart,
        precision: Precision::Micros,
        renewal: RenewalStart::Greatest,
    };
    pub const SQLITE: Flavour = Flavour {
        clock_point: ClockPoint::AfterRowLock,
        precision: Precision::Millis,
        renewal: RenewalStart::Now,
    };

    /// The instant a statement that reached the database at `arrived` and wrote the row
    /// at `executed` (after any row lock wait) reads as its clock.
    pub fn clock_reading(self, arrived: Instant, executed: Instant) -> Instant {
        match self.clock_point {
            ClockPoint::StatementStart => arrived,
            ClockPoint::AfterRowLock => executed,
        }
    }

    /// A duration as a statement receives it.
    pub(super) fn duration(self, duration: Duration) -> Duration {
        match self.precision {
            Precision::Exact => duration,
            Precision::Micros | Precision::Millis => {
                Duration::from_millis(duration.as_millis() as u64)
            }
        }
    }

    /// How far below the clock reading `unix_us` (microseconds since 1970) the database
    /// keeps it.
    pub(super) fn cut(self, unix_us: i64) -> Duration {
        match self.precision {
            Precision::Exact | Precision::Micros => Duration::ZERO,
            Precision::Millis => Duration::from_micros(unix_us.rem_euclid(1000) as u64),
        }
    }
}

/// Today's model: MySQL's clock point and renewal rule, which are the stricter ones for
/// the election (a renewal that waited for a row lock), times as given.
impl Default for Flavour {
    fn default() -> Self {
        Flavour {
            clock_point: ClockPoint::StatementStart,
            precision: Precision::Exact,
            renewal: RenewalStart::Greatest,
        }
    }
}
