//! Operator commands: `leaderd resign`, `handover`, `pause`, `resume` and `watch`. They
//! work from any host that reaches the database: each writes a command on the election's
//! row (and, on PostgreSQL, wakes the nodes with a notification), and the nodes' own
//! statements see it within one interval (see `store/dialect/`). Nothing here talks to a
//! node directly.

use crate::config::Config;
use crate::daemon::store;
use crate::store::{SqlStore, StoreError};

mod member_report;
mod pause;
mod step_down;
mod watch;

pub use member_report::{MemberReport, member_reports};
pub use pause::{pause, resume};
pub use step_down::{StepDownCommand, step_down};
// The simulator runs resign and handover on its own store.
#[cfg(test)]
pub use step_down::{StepDownOutcome, step_down_with};
pub use watch::watch;

/// `resign`, `handover`: no live leader to step down.
pub const EXIT_NO_LEADER: u8 = 4;
/// `resign`, `handover`: nobody (or, for a handover, not the named node) took over within
/// `--wait`.
pub const EXIT_NOT_TAKEN_OVER: u8 = 5;
/// `resign`, `handover`: refused while the election is paused (nobody could take over).
pub const EXIT_PAUSED: u8 = 6;
/// `handover`: the named node cannot take over (unknown, gone, an observer, unhealthy, or
/// it did not accept the handover).
pub const EXIT_BAD_TARGET: u8 = 2;
/// `resign`: no other live, healthy candidate could take over (without `--force`).
pub const EXIT_NO_CANDIDATE: u8 = 7;
/// `resign`, `handover` of a lock's row (`lock:NAME`): a usage error (`leaderd unlock` is
/// the command for it).
pub const EXIT_USAGE: u8 = 2;
/// `resign`, `handover`, `pause`, `resume`: the command was sent, but its answer was lost,
/// so it may or may not have been written.
pub const EXIT_IN_DOUBT: u8 = 8;

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("cannot read election {election:?}: {source}")]
    Read {
        election: String,
        #[source]
        source: StoreError,
    },
    #[error("cannot write the command to election {election:?}: {source}")]
    Write {
        election: String,
        #[source]
        source: StoreError,
    },
    #[error(
        "the answer to the command was lost, so it may or may not have been written to \
         election {election:?} ({source}); see `leaderd status`, and {retry}"
    )]
    InDoubt {
        election: String,
        /// How to repeat the command harmlessly.
        retry: String,
        #[source]
        source: StoreError,
    },
}

impl OperatorError {
    /// The exit status of the command that failed with it (`None`: the caller's default
    /// for a database that cannot be used).
    pub fn exit_status(&self) -> Option<u8> {
        match self {
            OperatorError::InDoubt { .. } => Some(EXIT_IN_DOUBT),
            _ => None,
        }
    }
}

/// Whether a write that failed with `error` may have committed all the same: the
/// statement was sent and its answer never came (a timeout, a connection lost while
/// waiting, a task that ended), or a later statement of the same command failed (the
/// wake-up after the write). A connection that could not be opened wrote nothing.
fn in_doubt(error: &StoreError) -> bool {
    !matches!(
        error,
        StoreError::Connect { .. }
            | StoreError::Tls { .. }
            | StoreError::ConnectTimeout { .. }
            | StoreError::SchemaOutdated { .. }
            | StoreError::Migration(_)
            | StoreError::MigrationLockTimeout { .. }
            | StoreError::TransactionPooler { .. }
    )
}

/// The error of a command's write: in doubt (see [`in_doubt`]), or not written.
fn write_failed(
    election: &str,
    retry: impl FnOnce() -> String,
    source: StoreError,
) -> OperatorError {
    let election = election.to_owned();
    match in_doubt(&source) {
        true => OperatorError::InDoubt {
            election,
            retry: retry(),
            source,
        },
        false => OperatorError::Write { election, source },
    }
}

fn commands_store(config: &Config) -> SqlStore {
    store(config, false)
}
