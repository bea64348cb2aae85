//! [`ElectionSettings`], and the rules every election and lock setting must meet, in one
//! place: the configuration, `leaderd lock` and library callers all go through
//! [`ElectionSettings::new`] or the checks below, so a value the table cannot hold never
//! reaches the database.

use std::fmt;
use std::time::Duration;

use crate::store::{Lease, ProcessToken};

/// The longest election name or node id: both go into VARCHAR(100) columns (see the
/// migrations). MySQL's `INSERT IGNORE` would cut a longer name short, and the row it
/// made would never be found again.
pub const MAX_NAME_CHARS: usize = 100;

/// The least time a renewal's round trip can be given between `interval` and `ttl`.
pub const MIN_RENEW_WINDOW: Duration = Duration::from_millis(10);

/// Durations beyond this are mistakes (and would overflow deadlines).
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// What an election needs to know about itself: only built through
/// [`ElectionSettings::new`], which refuses what the table or the timing cannot take.
#[derive(Debug, Clone)]
pub struct ElectionSettings {
    /// The row this election competes for.
    pub(crate) name: String,
    /// This node's id in the row.
    pub(crate) node_id: String,
    /// Lease length each renewal asks for.
    pub(crate) ttl: Duration,
    /// Time between renewals while holding the lease.
    pub(crate) interval: Duration,
    /// Most time between reads while not holding it (a follower also reads at the moment
    /// it expects the lease to lapse, spread by up to [`ElectionSettings::lapse_spread`]
    /// or more while the database is slow, which may come that much after the regular
    /// read). At most `interval` (see [`ElectionSettings::with_poll`]).
    pub(crate) poll: Duration,
}

/// See [`ElectionSettings::safety_margin`].
pub fn safety_margin(ttl: Duration) -> Duration {
    ttl / 500 + Duration::from_millis(2)
}

impl ElectionSettings {
    /// Settings that renew and poll once per `interval`, if the name and node id fit the
    /// table and the ttl leaves a renewal room after the interval.
    pub fn new(
        name: &str,
        node_id: &str,
        ttl: Duration,
        interval: Duration,
    ) -> Result<Self, SettingsError> {
        check_name(Setting::Name, name)?;
        check_name(Setting::NodeId, node_id)?;
        check_timing(ttl, interval)?;
        Ok(ElectionSettings {
            name: name.to_owned(),
            node_id: node_id.to_owned(),
            ttl,
            interval,
            poll: interval,
        })
    }

    /// This node's lease on the election's row in `term`, its terms marked with `token`:
    /// what each write of the election states.
    pub(crate) fn lease(&self, token: ProcessToken, term: i64) -> Lease {
        Lease {
            name: self.name.clone(),
            holder: self.node_id.clone(),
            token,
            ttl: self.ttl,
            term,
        }
    }

    /// How much earlier than `sent + ttl` this node stops acting as leader. It covers the
    /// rate difference between this node's monotonic clock and the database clock (NTP
    /// slews by at most 500 ppm; this allows 2000 ppm) and SQLite's millisecond timestamps.
    pub fn safety_margin(&self) -> Duration {
        safety_margin(self.ttl)
    }

    /// How long after a lease can lapse a follower that expects the lapse polls: a random
    /// instant within this, at most ttl/64 and 20 ms. Every follower reads the renewed lease
    /// at about the same moment, so without it they would all read again together right
    /// after each renewal (a thousand followers at once, in the scale benchmark).
    pub fn lapse_spread(&self) -> Duration {
        (self.ttl / 64).min(Duration::from_millis(20))
    }

    /// [`ElectionSettings::lapse_spread`], widened to four times the last read's round
    /// trip while the database is slow to answer (as when many followers read together),
    /// up to a quarter of the interval.
    pub(super) fn lapse_spread_after(&self, round_trip: Duration) -> Duration {
        self.lapse_spread()
            .max(round_trip.saturating_mul(4))
            .min(self.interval / 4)
    }

    /// The margin a leader has to complete a renewal before its lease can lapse.
    pub(super) fn renew_margin(&self) -> Duration {
        self.ttl.saturating_sub(self.interval)
    }
}

/// Which setting a [`SettingsError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Name,
    NodeId,
    Ttl,
    Interval,
    Poll,
}

impl Setting {
    fn label(self) -> &'static str {
        match self {
            Setting::Name => "election name",
            Setting::NodeId => "node id",
            Setting::Ttl => "ttl",
            Setting::Interval => "interval",
            Setting::Poll => "poll",
        }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A setting the election cannot run with. `Display` names the setting and its value;
/// [`SettingsError::reason`] lets a caller name the settings its own way (configuration
/// keys, command-line options).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    Empty { setting: Setting },
    TooLong { setting: Setting, value: String },
    Padded { setting: Setting, value: String },
    ControlCharacter { setting: Setting, value: String },
    Zero { setting: Setting },
    OverADay { setting: Setting, value: Duration },
    TtlNotAboveInterval { ttl: Duration, interval: Duration },
    NoRoomToRenew { ttl: Duration, interval: Duration },
    PollAboveInterval { poll: Duration, interval: Duration },
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(Setting::label))
    }
}

fn human(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

impl SettingsError {
    pub fn setting(&self) -> Setting {
        match self {
            SettingsError::Empty { setting }
            | SettingsError::TooLong { setting, .. }
            | SettingsError::Padded { setting, .. }
            | SettingsError::ControlCharacter { setting, .. }
            | SettingsError::Zero { setting }
            | SettingsError::OverADay { setting, .. } => *setting,
            SettingsError::TtlNotAboveInterval { .. } | SettingsError::NoRoomToRenew { .. } => {
                Setting::Ttl
            }
            SettingsError::PollAboveInterval { .. } => Setting::Poll,
        }
    }

    /// The offending value, as text.
    pub fn value(&self) -> String {
        match self {
            SettingsError::Empty { .. } => String::new(),
            SettingsError::TooLong { value, .. }
            | SettingsError::Padded { value, .. }
            | SettingsError::ControlCharacter { value, .. } => value.clone(),
            SettingsError::Zero { .. } => "0s".to_owned(),
            SettingsError::OverADay { value, .. } => human(*value),
            SettingsError::TtlNotAboveInterval { ttl, .. }
            | SettingsError::NoRoomToRenew { ttl, .. } => human(*ttl),
            SettingsError::PollAboveInterval { poll, .. } => human(*poll),
        }
    }

    /// What is wrong and what to do, naming other settings with `name`.
    pub fn reason(&self, name: impl Fn(Setting) -> &'static str) -> String {
        match self {
            SettingsError::Empty { .. } => "must not be empty".to_owned(),
            SettingsError::TooLong { value, .. } => format!(
                "is {} characters long; the table holds at most {MAX_NAME_CHARS}",
                value.chars().count()
            ),
            SettingsError::Padded { .. } => "must not begin or end with white space".to_owned(),
            SettingsError::ControlCharacter { .. } => {
                "must not contain control characters".to_owned()
            }
            SettingsError::Zero { .. } => "must be greater than zero".to_owned(),
            SettingsError::OverADay { .. } => "must be at most a day".to_owned(),
            SettingsError::TtlNotAboveInterval { interval, .. } => format!(
                "must be greater than {} ({}): the leader renews once per interval and needs \
                 the difference to do so before its lease lapses",
                name(Setting::Interval),
                human(*interval)
            ),
            SettingsError::NoRoomToRenew { ttl, interval } => {
                let margin = safety_margin(*ttl);
                format!(
                    "leaves {} after {} ({}) for a renewal, less than the {} this needs (a \
                     safety margin of {} and at least {} for the round trip): raise {} or \
                     lower {}",
                    human(ttl.saturating_sub(*interval)),
                    name(Setting::Interval),
                    human(*interval),
                    human(margin + MIN_RENEW_WINDOW),
                    human(margin),
                    human(MIN_RENEW_WINDOW),
                    name(Setting::Ttl),
                    name(Setting::Interval),
                )
            }
            SettingsError::PollAboveInterval { interval, .. } => format!(
                "must be above zero and at most {} ({})",
                name(Setting::Interval),
                human(*interval)
            ),
        }
    }

    fn describe(&self, name: impl Fn(Setting) -> &'static str + Copy) -> String {
        format!(
            "{} {:?}: {}",
            name(self.setting()),
            self.value(),
            self.reason(name)
        )
    }
}

/// An election name or node id: 1 to [`MAX_NAME_CHARS`] characters, compared exactly.
/// MySQL ignores trailing spaces in comparisons, so padding is refused everywhere.
pub fn check_name(setting: Setting, value: &str) -> Result<(), SettingsError> {
    let value = value.to_owned();
    if value.is_empty() {
        Err(SettingsError::Empty { setting })
    } else if value.chars().count() > MAX_NAME_CHARS {
        Err(SettingsError::TooLong { setting, value })
    } else if value.trim() != value {
        Err(SettingsError::Padded { setting, value })
    } else if value.chars().any(char::is_control) {
        Err(SettingsError::ControlCharacter { setting, value })
    } else {
        Ok(())
    }
}

/// A duration above zero and at most a day.
pub fn check_duration(setting: Setting, value: Duration) -> Result<(), SettingsError> {
    if value.is_zero() {
        return Err(SettingsError::Zero { setting });
    }
    if value > MAX_DURATION {
        return Err(SettingsError::OverADay { setting, value });
    }
    Ok(())
}

/// `ttl` and `interval` each valid, and the renewal sent once per interval has time to
/// complete: the deadline is sent + ttl − margin, and what is left between it and the
/// next renewal is all a round trip may take.
pub fn check_timing(ttl: Duration, interval: Duration) -> Result<(), SettingsError> {
    check_duration(Setting::Ttl, ttl)?;
    check_duration(Setting::Interval, interval)?;
    if ttl <= interval {
        return Err(SettingsError::TtlNotAboveInterval { ttl, interval });
    }
    if ttl.saturating_sub(interval) < safety_margin(ttl) + MIN_RENEW_WINDOW {
        return Err(SettingsError::NoRoomToRenew { ttl, interval });
    }
    Ok(())
}

/// `base` cut short so that `base` + `suffix` fits in [`MAX_NAME_CHARS`]: a holder id
/// made unique by a suffix (a pid) keeps the suffix.
pub fn id_with_suffix(base: &str, suffix: &str) -> String {
    let keep = MAX_NAME_CHARS.saturating_sub(suffix.chars().count());
    format!("{}{suffix}", base.chars().take(keep).collect::<String>())
}

impl ElectionSettings {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    pub fn poll(&self) -> Duration {
        self.poll
    }

    /// Polls this often while not holding the lease instead of once per interval.
    pub fn with_poll(mut self, poll: Duration) -> Result<Self, SettingsError> {
        if poll.is_zero() || poll > self.interval {
            return Err(SettingsError::PollAboveInterval {
                poll,
                interval: self.interval,
            });
        }
        self.poll = poll;
        Ok(self)
    }
}
