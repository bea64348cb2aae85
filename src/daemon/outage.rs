//! A database outage, logged while it lasts. The election logs its first failed round
//! ("database round failed; retrying") and the first good one after ("database reachable
//! again"); in between, rounds retry quietly. This logs the failures meanwhile, at most
//! once per [`PERIOD`]: a warning with the latest error (its root cause: refused, no such
//! host, timed out, TLS, authentication) and how many rounds failed.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::warn;

use crate::store::StoreError;

/// At most one line per this long while the failures go on.
pub const PERIOD: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct State {
    /// When this outage's first failure came (`None`: no outage).
    since: Option<Instant>,
    /// When its last line was logged (the election logs the first).
    last_line: Option<Instant>,
    /// Rounds failed in this outage, and since the last line.
    failures: u64,
    since_last_line: u64,
}

/// Shared between the task that reads the election's round errors and the round observer
/// that says when a round went well.
#[derive(Debug, Clone, Default)]
pub struct OutageLog {
    state: Arc<Mutex<State>>,
}

impl OutageLog {
    /// A round that went well ends the outage.
    pub fn round_ok(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *state = State::default();
    }

    fn failed(&self, error: &StoreError, now: Instant) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.failures += 1;
        state.since_last_line += 1;
        let since = *state.since.get_or_insert(now);
        let last = *state.last_line.get_or_insert(now);
        if now.duration_since(last) >= PERIOD {
            let lasting = Duration::from_secs(now.duration_since(since).as_secs());
            warn!(
                %error,
                kind = error.kind(),
                failures = state.failures,
                failures_since_last = state.since_last_line,
                "database still failing after {}; retrying",
                humantime::format_duration(lasting)
            );
            state.last_line = Some(now);
            state.since_last_line = 0;
        }
    }

    /// Reads `errors` (the election's round errors) until the election ends.
    pub fn spawn(&self, mut errors: mpsc::UnboundedReceiver<StoreError>) -> JoinHandle<()> {
        let log = self.clone();
        tokio::spawn(async move {
            while let Some(error) = errors.recv().await {
                log.failed(&error, Instant::now());
            }
        })
    }
}
