//! One set of rules for every duration leaderd reads, from a flag or a configuration key:
//! the text form ("1200ms", "30s", "1m 30s", "0" where zero has a meaning), and the bounds
//! (above zero unless zero has a meaning, at most a day: the election's own bound). A pause
//! of a year or a hold of two days is a typo, refused wherever it is written.

use std::time::Duration;

pub use crate::election::settings::MAX_DURATION as MAX;

/// What a duration may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// What zero means where it is allowed ("turns preemption off"); `None`: refused.
    pub zero: Option<&'static str>,
}

/// Above zero, at most a day: most durations.
pub const POSITIVE: Rule = Rule { zero: None };

impl Rule {
    /// Zero allowed, meaning `what`.
    pub const fn zero_means(what: &'static str) -> Self {
        Rule { zero: Some(what) }
    }

    /// Whether `value` is within the bounds; the reason if not.
    pub fn check(self, value: Duration) -> Result<Duration, String> {
        if value.is_zero() && self.zero.is_none() {
            return Err("must be greater than zero".to_owned());
        }
        if value > MAX {
            return Err(format!(
                "must be at most a day ({})",
                humantime::format_duration(MAX)
            ));
        }
        Ok(value)
    }

    /// `text` read as a duration and checked.
    pub fn parse(self, text: &str) -> Result<Duration, String> {
        self.check(parse(text)?)
    }
}

/// The text form alone: humantime's, trimmed ("0" is zero).
pub fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("not a duration ({e}); write it like \"1200ms\", \"30s\" or \"1m 30s\"")
    })
}

/// A flag's value parser: above zero, at most a day.
pub fn positive(text: &str) -> Result<Duration, String> {
    POSITIVE.parse(text)
}

/// A flag's value parser: zero or more, at most a day.
pub fn zero_or_more(text: &str) -> Result<Duration, String> {
    Rule::zero_means("none").parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_forms() {
        assert_eq!(positive(" 1m 30s "), Ok(Duration::from_secs(90)));
        assert_eq!(positive("24h"), Ok(MAX));
        assert_eq!(zero_or_more("0"), Ok(Duration::ZERO));
        assert_eq!(zero_or_more("0s"), Ok(Duration::ZERO));
        assert_eq!(positive("0").unwrap_err(), "must be greater than zero");
        assert!(positive("400d").unwrap_err().contains("at most a day"));
        assert!(zero_or_more("2d").unwrap_err().contains("at most a day"));
        assert!(positive("5").unwrap_err().starts_with("not a duration"));
        assert!(positive("soon").unwrap_err().contains("write it like"));
    }
}
