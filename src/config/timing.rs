//! Floors and warnings for the timing keys: a value that cannot work is refused (exit 78),
//! one that is legal but unwise draws a warning at start. The rules, as
//! docs/configuration.md states them:
//!
//! - `election.interval` at least 50 ms: every node sends a statement each interval (a
//!   microsecond sent 635 statements in 2 s);
//! - `database.connect_timeout` at least 100 ms: TCP, TLS and authentication take more;
//! - a warning where `election.ttl` leaves a renewal less than 100 ms after the interval
//!   (the election's own floor is the safety margin plus 10 ms): an answer slower than
//!   that moves leadership and runs the hooks;
//! - a warning where `database.query_timeout` is above the ttl: a statement that outlives
//!   the lease is of no use, the leader's deadline has passed by then.
//!
//! `hooks.shutdown_timeout` against systemd's stop timeout is checked by `run` (it asks
//! systemd for the unit's value: `daemon/systemd.rs`).

use std::time::Duration;

use super::{Config, ConfigError, invalid};

/// The least `election.interval`.
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);
/// The least `database.connect_timeout`.
pub const MIN_CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// Below this time for a renewal (`ttl - interval`), a warning.
pub const WARN_RENEW_WINDOW: Duration = Duration::from_millis(100);

fn human(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

impl Config {
    /// The floors; `query_timeout_set` says whether the query timeout was given (it
    /// follows the ttl otherwise).
    pub(super) fn check_timing(&mut self, query_timeout_set: bool) -> Result<(), ConfigError> {
        let (e, d) = (&self.election, &self.database);
        if e.interval < MIN_INTERVAL {
            return Err(invalid(
                "election.interval",
                human(e.interval),
                format!(
                    "must be at least {}: every node sends a statement each interval",
                    human(MIN_INTERVAL)
                ),
            ));
        }
        if d.connect_timeout < MIN_CONNECT_TIMEOUT {
            return Err(invalid(
                "database.connect_timeout",
                human(d.connect_timeout),
                format!(
                    "must be at least {}: a connection's TCP, TLS and authentication take \
                     longer, even on the same host",
                    human(MIN_CONNECT_TIMEOUT)
                ),
            ));
        }
        let window = e.ttl.saturating_sub(e.interval);
        if window < WARN_RENEW_WINDOW {
            self.warnings.push(format!(
                "election.ttl = {:?} leaves a renewal {} after election.interval ({}): a \
                 database answer slower than that moves leadership and runs the hooks; leave \
                 it at least {} (the defaults leave 200ms)",
                human(e.ttl),
                human(window),
                human(e.interval),
                human(WARN_RENEW_WINDOW)
            ));
        }
        if query_timeout_set && d.query_timeout > e.ttl {
            self.warnings.push(format!(
                "database.query_timeout = {:?} is above election.ttl ({}): a statement that \
                 outlives the lease is of no use, the leader's deadline has passed by then; \
                 leave it unset (it follows the ttl) or at most the ttl",
                human(d.query_timeout),
                human(e.ttl)
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::collections::HashMap;

    fn load(env: &[(&str, &str)]) -> Result<Config, String> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load_from(None, &env, Some("n1")).map_err(|e| e.to_string())
    }

    #[test]
    fn floors_refuse_and_unwise_values_warn() {
        let e = load(&[("LEADERD_ELECTION__INTERVAL", "1us")]).unwrap_err();
        assert!(
            e.starts_with("election.interval = \"1us\": must be at least 50ms"),
            "{e}"
        );
        let e = load(&[("LEADERD_DATABASE__CONNECT_TIMEOUT", "1ms")]).unwrap_err();
        assert!(e.starts_with("database.connect_timeout = \"1ms\""), "{e}");
        let c = load(&[("LEADERD_ELECTION__TTL", "1020ms")]).unwrap();
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(
            c.warnings[0].contains("leaves a renewal 20ms"),
            "{:?}",
            c.warnings
        );
        let c = load(&[("LEADERD_DATABASE__QUERY_TIMEOUT", "5s")]).unwrap();
        assert!(
            c.warnings[0].contains("above election.ttl"),
            "{:?}",
            c.warnings
        );
        assert!(load(&[]).unwrap().warnings.is_empty());
        let c = load(&[
            ("LEADERD_ELECTION__TTL", "300ms"),
            ("LEADERD_ELECTION__INTERVAL", "100ms"),
        ])
        .unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }
}
