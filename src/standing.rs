//! What a node is in the election besides its role, set by the daemon rather than the
//! election: its [`Standing`] (candidate or observer) and where its health check stands
//! ([`Health`]). A leaf: the status file, metrics, `/status`, the members task and the
//! health check all read it.

use serde::{Deserialize, Serialize};

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

/// What this node is in the election besides its role, set by the daemon rather than the
/// election: a candidate or an observer (`election.candidate = false`), and where its
/// health check stands, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub candidate: bool,
    pub health: Option<Health>,
}

impl Default for Standing {
    fn default() -> Self {
        Standing {
            candidate: true,
            health: None,
        }
    }
}
