//! The status file: this node's [`Status`] as JSON, replaced atomically (temporary file,
//! fsync, rename) whenever it changes. The daemon writes it (`daemon/status_writer.rs`, a
//! consumer of the election's watch channel that can never hold up a renewal); `leaderd
//! status --local`, `leaderd wait` and `/status` read the same [`StatusDocument`]. A
//! stepping-down election releases its lease only once the file no longer says it leads
//! (see [`crate::election::Election::release_after`]).

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::election::{Role, Status};
use crate::standing::{Health, Standing};

fn candidate_by_default() -> bool {
    true
}

#[derive(Debug, thiserror::Error)]
pub enum StatusFileError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The file's JSON document (schema documented in docs/operations.md), as written by the daemon
/// and read back by `leaderd status --local`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusDocument {
    pub election: String,
    pub node_id: String,
    pub role: Role,
    pub leader: Option<String>,
    pub term: Option<i64>,
    pub since: String,
    pub updated_at: String,
    pub valid_until: String,
    pub pid: u32,
    /// `false` on an observer, which never claims the lease.
    #[serde(default = "candidate_by_default")]
    pub candidate: bool,
    /// `starting`, `healthy` or `failing`; absent without `[election.health_check]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// The election is paused (`leaderd pause`); absent in files of older versions.
    #[serde(default)]
    pub paused: bool,
    /// A crash loop holding a hook off; absent while none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<BackoffDocument>,
}

/// A crash loop's backoff as the status file has it: which hook, how many failures in a
/// row, how long this wait is and when it ends (RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackoffDocument {
    pub hook: String,
    pub failures: u32,
    pub delay_ms: u64,
    pub until: String,
}

fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

impl StatusDocument {
    pub fn new(election: &str, node_id: &str, status: &Status, standing: Standing) -> Self {
        StatusDocument {
            election: election.to_owned(),
            node_id: node_id.to_owned(),
            role: status.role,
            leader: status.leader.clone(),
            term: status.term,
            since: rfc3339(status.since),
            updated_at: rfc3339(status.updated_at),
            valid_until: rfc3339(status.valid_until),
            pid: std::process::id(),
            candidate: standing.candidate,
            health: standing.health,
            paused: status.paused,
            backoff: standing.backoff.map(|b| BackoffDocument {
                hook: b.hook.to_string(),
                failures: b.failures,
                delay_ms: b.delay.as_millis() as u64,
                until: rfc3339(b.until),
            }),
        }
    }
}

impl StatusDocument {
    /// Whether a reader whose wall clock says `now` may take the file at its word:
    /// `valid_until` is still ahead (a frozen or dead daemon's file goes stale). What
    /// `status --local` and `wait` read, and what the simulator's readers judge.
    pub fn valid_at(&self, now: SystemTime) -> bool {
        humantime::parse_rfc3339(&self.valid_until).is_ok_and(|until| until > now)
    }

    /// The role a reader whose wall clock says `now` takes from the file: none once stale.
    pub fn role_at(&self, now: SystemTime) -> Option<Role> {
        self.valid_at(now).then_some(self.role)
    }
}

/// Replaces `path` with `contents` so that readers see either the old or the new file.
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), StatusFileError> {
    let error = |source| StatusFileError::Write {
        path: path.to_owned(),
        source,
    };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".tmp.{}", std::process::id()));
    let temporary = PathBuf::from(temporary);
    let mut file = std::fs::File::create(&temporary).map_err(error)?;
    file.write_all(contents).map_err(error)?;
    file.sync_all().map_err(error)?;
    drop(file);
    std::fs::rename(&temporary, path).map_err(error)?;
    // Make the rename itself durable.
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::File::open(directory)
        .and_then(|d| d.sync_all())
        .map_err(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_reads_back_as_written() {
        let mut status = crate::election::Status::initial();
        status.role = Role::Leader;
        status.leader = Some("node \"a\"".to_owned());
        status.term = Some(7);
        let standing = Standing {
            candidate: false,
            health: Some(Health::Failing),
            backoff: Some(crate::standing::Backoff {
                hook: crate::hooks::HookKind::OnElected,
                failures: 3,
                delay: std::time::Duration::from_secs(4),
                until: SystemTime::now(),
            }),
        };
        let written = StatusDocument::new("jobs", "node \"a\"", &status, standing);
        let json = serde_json::to_string_pretty(&written).unwrap();
        let read: StatusDocument = serde_json::from_str(&json).unwrap();
        assert_eq!(read, written);
    }
}
