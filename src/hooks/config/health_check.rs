//! `[election.health_check]`, parsed: what to run and how often (running it is
//! `hooks/health.rs`'s).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{HookConfigError, argv, duration, duration_value, env, env_value, error, table};

pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_FAILURES: u32 = 3;

/// `[election.health_check]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckConfig {
    pub argv: Vec<String>,
    /// From the end of one check to the start of the next.
    pub interval: Duration,
    /// Bound on one check; a check that takes longer is stopped and counts as a failure.
    pub timeout: Duration,
    /// Failures in a row that make the node failing.
    pub failures: u32,
    pub env: BTreeMap<String, String>,
}

const KEY: &str = "election.health_check";

impl HealthCheckConfig {
    /// Parses `[election.health_check]`: `command` (an argv array), `interval`,
    /// `timeout`, `failures`, `env`.
    pub fn parse(value: &toml::Value) -> Result<Self, HookConfigError> {
        let t = table(
            KEY,
            value,
            &["command", "interval", "timeout", "failures", "env"],
        )?;
        let key = |name: &str| format!("{KEY}.{name}");
        let failures = match t.get("failures") {
            None => DEFAULT_FAILURES,
            // An integer, or its text from an environment variable.
            Some(v) => v
                .as_integer()
                .or_else(|| v.as_str().and_then(|text| text.trim().parse().ok()))
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| {
                    error(&key("failures"), v, "must be a whole number from 1 to 1000")
                })?,
        };
        Ok(HealthCheckConfig {
            argv: argv(&key("command"), &t["command"])?,
            interval: t
                .get("interval")
                .map(|v| duration(&key("interval"), v))
                .transpose()?
                .unwrap_or(DEFAULT_INTERVAL),
            timeout: t
                .get("timeout")
                .map(|v| duration(&key("timeout"), v))
                .transpose()?
                .unwrap_or(DEFAULT_TIMEOUT),
            failures,
            env: t
                .get("env")
                .map(|v| env(&key("env"), v))
                .transpose()?
                .unwrap_or_default(),
        })
    }

    fn to_toml(&self) -> toml::Table {
        let mut entry = toml::Table::new();
        entry.insert("command".into(), self.argv.clone().into());
        entry.insert("interval".into(), duration_value(self.interval));
        entry.insert("timeout".into(), duration_value(self.timeout));
        entry.insert("failures".into(), i64::from(self.failures).into());
        if !self.env.is_empty() {
            entry.insert("env".into(), env_value(&self.env));
        }
        entry
    }
}

/// `[election.health_check]` as the configuration reads and prints it.
impl<'de> serde::Deserialize<'de> for HealthCheckConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = toml::Value::deserialize(deserializer)?;
        HealthCheckConfig::parse(&value).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for HealthCheckConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_toml().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml: &str) -> Result<HealthCheckConfig, HookConfigError> {
        let mut file: toml::Table = toml.parse().unwrap();
        HealthCheckConfig::parse(&file.remove("health_check").unwrap())
    }

    #[test]
    fn parses_with_defaults_and_names_bad_keys() {
        let c = parse("[health_check]\ncommand = [\"true\"]\n").unwrap();
        assert_eq!(c.argv, ["true"]);
        assert_eq!(
            (c.interval, c.timeout, c.failures),
            (DEFAULT_INTERVAL, DEFAULT_TIMEOUT, DEFAULT_FAILURES)
        );
        let c = parse("[health_check]\ncommand = [\"x\"]\ninterval = \"200ms\"\nfailures = 1\n")
            .unwrap();
        assert_eq!((c.interval, c.failures), (Duration::from_millis(200), 1));
        let e = parse("[health_check]\ncommand = [\"x\"]\nfailures = 0\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("election.health_check.failures = 0"),
            "{e}"
        );
        let e = parse("[health_check]\ncommand = [\"x\"]\nintervall = \"1s\"\n").unwrap_err();
        assert!(
            e.to_string().contains("election.health_check.intervall"),
            "{e}"
        );
        let e = parse("[health_check]\ninterval = \"1s\"\n").unwrap_err();
        assert!(e.to_string().contains("needs `command`"), "{e}");
    }
}
