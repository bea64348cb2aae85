//! Operator commands: `leaderd resign`, `handover`, `pause`, `resume` and `watch`. They
//! work from any host that reaches the database: each writes a command on the election's
//! row (and, on PostgreSQL, wakes the nodes with a notification), and the nodes' own
//! statements see it within one interval (see `store/dialect/`). Nothing here talks to a
//! node directly.

use crate::config::Config;
use crate::lock::LOCK_ROW_PREFIX;
use crate::store::{ControlStore, LeaseStore, SqlStore, StoreError};

mod member_report;
mod pause;
mod step_down;
mod watch;

pub use member_report::{MemberReport, member_reports};
pub use pause::{pause, resume};
pub use step_down::{StepDownCommand, step_down};
// The simulator runs resign and handover on its own store.
#[cfg(test)]
pub use step_down::{HOLD_NOT_WRITTEN, StepDownOutcome, step_down_with};
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
/// Every command on an election: it has no row and no member (sysexits.h EX_NOUSER,
/// "addressee unknown"), and `--new` was not given.
pub const EXIT_UNKNOWN_ELECTION: u8 = 67;

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
        "election {election:?} is unknown: the database ({database}) has no row and no \
         member for it{hint}"
    )]
    UnknownElection {
        election: String,
        /// Redacted.
        database: String,
        /// The election meant, the live ones, and `--new` where the command takes it.
        hint: String,
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
            OperatorError::UnknownElection { .. } => Some(EXIT_UNKNOWN_ELECTION),
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
            | StoreError::PermissionDenied { .. }
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
    config.store(false)
}

/// Refuses an election that has no row and no member (a typo, most often: patronictl
/// refuses an unknown cluster too), naming the live elections and the one probably meant.
/// `new_flag` is the flag that accepts a new election, where the command has one.
pub async fn refuse_unknown(config: &Config, new_flag: Option<&str>) -> Result<(), OperatorError> {
    let election = config.election.name.as_str();
    let read = |source| OperatorError::Read {
        election: election.to_owned(),
        source,
    };
    let mut store = config.store(false).read_only();
    if store.get(election).await.map_err(read)?.is_some()
        || !store.members(election).await.map_err(read)?.is_empty()
    {
        return Ok(());
    }
    // A hint only: a role that may not list the table gets none.
    let live: Vec<String> = match store.held_rows().await {
        Ok(rows) => rows
            .into_iter()
            .map(|row| row.name)
            .filter(|name| !name.starts_with(LOCK_ROW_PREFIX))
            .collect(),
        Err(_) => Vec::new(),
    };
    let mut hint = String::new();
    let meant = live
        .iter()
        .map(|name| (strsim::damerau_levenshtein(election, name), name))
        .filter(|(distance, name)| *distance <= (name.len() / 4).clamp(1, 3))
        .min_by_key(|(distance, _)| *distance);
    if let Some((_, meant)) = meant {
        hint.push_str(&format!("; did you mean {meant:?}?"));
    }
    if !live.is_empty() {
        hint.push_str(&format!(
            " (elections with a leader now: {})",
            live.join(", ")
        ));
    }
    if let Some(flag) = new_flag {
        hint.push_str(&format!(
            "; {flag} acts on an election that no node has joined yet"
        ));
    }
    Err(OperatorError::UnknownElection {
        election: election.to_owned(),
        database: config.database.url.redacted(),
        hint,
    })
}
