//! What a node is in the election besides its role, set by the daemon rather than the
//! election: its [`Standing`] (candidate or observer), where its health check stands
//! ([`Health`]) and a crash loop's [`Backoff`]. A leaf: the status file, metrics, `/status`, the members task and the
//! health check all read it.

use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

use crate::hooks::HookKind;

/// Where the health check stands, for the status file, `/status` and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// No check has succeeded yet: the node does not claim.
    Starting,
    /// The last check succeeded.
    Healthy,
    /// `failures` checks failed in a row and none succeeded since: the node does not
    /// claim, and a leader steps down.
    Failing,
}

/// A hook in a crash loop, held off before its next try (the hook supervisor sets it): an
/// `on_elected` that keeps failing keeps the node from claiming until `until`; a
/// `leader_command` that keeps exiting is restarted then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// `on_elected` or `leader_command`.
    pub hook: HookKind,
    /// Failures (quick exits) in a row, this one included.
    pub failures: u32,
    /// How long this wait is.
    pub delay: Duration,
    /// When the wait ends, on the wall clock (for the status file).
    pub until: SystemTime,
}

/// What this node is in the election besides its role, set by the daemon rather than the
/// election: a candidate or an observer (`election.candidate = false`), where its health
/// check stands, if it has one, and a crash loop's backoff, while one holds it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub candidate: bool,
    pub health: Option<Health>,
    pub backoff: Option<Backoff>,
}

impl Default for Standing {
    fn default() -> Self {
        Standing {
            candidate: true,
            health: None,
            backoff: None,
        }
    }
}
