//! The rules every election and lock setting must meet, in one place: the configuration,
//! `leaderd lock` and library callers all go through [`ElectionSettings::new`] or the
//! checks below, so a value the table cannot hold never reaches the database.

use std::fmt;
use std::time::Duration;

use super::{ElectionSettings, safety_margin};

/// The longest election name or node id: both go into VARCHAR(100) columns (see the
/// migrations). MySQL's `INSERT IGNORE` would cut a longer name short, and the row it
/// made would never be found again.
pub const MAX_NAME_CHARS: usize = 100;

/// The least time a renewal's round trip can be given between `interval` and `ttl`.
pub const MIN_RENEW_WINDOW: Duration = Duration::from_millis(10);

/// Durations beyond this are mistakes (and would overflow deadlines).
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

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

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn names_and_node_ids_must_fit_the_table() {
        let ok = |name: &str| ElectionSettings::new(name, "node-a", ms(1200), ms(1000));
        assert!(ok(&"x".repeat(MAX_NAME_CHARS)).is_ok());
        assert!(
            ok("é".repeat(MAX_NAME_CHARS).as_str()).is_ok(),
            "characters, not bytes"
        );
        let long = "x".repeat(MAX_NAME_CHARS + 1);
        let error = ok(&long).unwrap_err();
        assert_eq!(
            error,
            SettingsError::TooLong {
                setting: Setting::Name,
                value: long.clone()
            }
        );
        assert!(
            error
                .to_string()
                .starts_with(&format!("election name {long:?}: is 101 characters long")),
            "{error}"
        );
        assert_eq!(
            ok("").unwrap_err(),
            SettingsError::Empty {
                setting: Setting::Name
            }
        );
        assert!(matches!(ok(" jobs"), Err(SettingsError::Padded { .. })));
        assert!(matches!(ok("jobs "), Err(SettingsError::Padded { .. })));
        assert!(matches!(
            ok("jo\nbs"),
            Err(SettingsError::ControlCharacter { .. })
        ));
        let id = ElectionSettings::new("jobs", &long, ms(1200), ms(1000)).unwrap_err();
        assert_eq!(id.setting(), Setting::NodeId);
        assert_eq!(id.value(), long);
    }

    #[test]
    fn timing_leaves_a_renewal_room() {
        let timing = |ttl, interval| ElectionSettings::new("jobs", "a", ms(ttl), ms(interval));
        assert!(timing(1200, 1000).is_ok());
        assert!(timing(1020, 1000).is_ok());
        assert_eq!(
            timing(1000, 1000).unwrap_err(),
            SettingsError::TtlNotAboveInterval {
                ttl: ms(1000),
                interval: ms(1000)
            }
        );
        let tight = timing(1003, 1000).unwrap_err();
        assert!(
            tight
                .to_string()
                .starts_with("ttl \"1s 3ms\": leaves 3ms after interval (1s) for a renewal"),
            "{tight}"
        );
        assert_eq!(
            timing(0, 1000).unwrap_err(),
            SettingsError::Zero {
                setting: Setting::Ttl
            }
        );
        assert_eq!(timing(1200, 0).unwrap_err().setting(), Setting::Interval);
        assert!(matches!(
            timing(25 * 3600 * 1000, 1000),
            Err(SettingsError::OverADay { .. })
        ));
    }

    #[test]
    fn poll_is_at_most_the_interval() {
        let settings = ElectionSettings::new("jobs", "a", ms(1200), ms(1000)).unwrap();
        assert_eq!(settings.clone().with_poll(ms(300)).unwrap().poll(), ms(300));
        assert!(settings.clone().with_poll(ms(1001)).is_err());
        let error = settings.with_poll(Duration::ZERO).unwrap_err();
        assert_eq!(
            error.to_string(),
            "poll \"0s\": must be above zero and at most interval (1s)"
        );
    }

    #[test]
    fn reasons_can_name_settings_the_caller_s_way() {
        let error = check_timing(ms(1000), ms(1000)).unwrap_err();
        let key = |setting| match setting {
            Setting::Interval => "election.interval",
            _ => "election.ttl",
        };
        assert!(
            error
                .reason(key)
                .starts_with("must be greater than election.interval (1s)"),
            "{error}"
        );
    }

    #[test]
    fn a_suffixed_id_keeps_its_suffix() {
        let id = id_with_suffix(&"h".repeat(200), ":4711");
        assert_eq!(id.chars().count(), MAX_NAME_CHARS);
        assert!(id.ends_with(":4711"));
        assert!(check_name(Setting::NodeId, &id).is_ok());
        assert_eq!(id_with_suffix("web-1", ":4711"), "web-1:4711");
    }
}
