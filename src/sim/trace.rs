//! What happened in a run, for the report of a failing seed: the last events in full, and a
//! hash over all of them, so that a replay can be shown to be the same run.

use std::collections::VecDeque;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::Duration;

/// Events kept for a failure's report (`LEADERD_SIM_KEEP` keeps more, for a replay).
fn kept() -> usize {
    static KEPT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *KEPT.get_or_init(|| {
        std::env::var("LEADERD_SIM_KEEP")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(80)
    })
}

/// One thing that happened, at a virtual time since the run began.
#[derive(Debug, Clone, Hash)]
pub(super) struct Entry {
    pub(super) at: Duration,
    /// Who: a node process (`b#2`: node b's second process), `db` or `operator`.
    pub(super) who: String,
    pub(super) what: String,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>9.3}s  {:<10} {}",
            self.at.as_secs_f64(),
            self.who,
            self.what
        )
    }
}

#[derive(Default)]
pub(super) struct Trace {
    tail: VecDeque<Entry>,
    hasher: std::collections::hash_map::DefaultHasher,
    pub(super) events: u64,
    /// Closed at the first violation, so that the tail ends with it.
    pub(super) closed: bool,
}

impl Trace {
    pub(super) fn push(&mut self, at: Duration, who: &str, what: String) {
        if self.closed {
            return;
        }
        let entry = Entry {
            at,
            who: who.to_owned(),
            what,
        };
        entry.hash(&mut self.hasher);
        self.events += 1;
        if self.tail.len() == kept() {
            self.tail.pop_front();
        }
        self.tail.push_back(entry);
    }

    /// A digest of every event so far: equal for two runs that did the same.
    pub(super) fn digest(&self) -> u64 {
        self.hasher.finish()
    }

    pub(super) fn tail(&self) -> impl Iterator<Item = &Entry> {
        self.tail.iter()
    }
}
