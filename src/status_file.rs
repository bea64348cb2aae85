//! The status file: this node's [`Status`] as JSON, replaced atomically (temporary file,
//! fsync, rename) whenever it changes. It is a consumer of the election's watch channel
//! and can never hold up a renewal: a slow disk only means intermediate states are skipped.
//! It reports the [`Status::version`] it has made durable, and a stepping-down election
//! releases its lease only once the file no longer says it leads (see
//! [`crate::election::Election::release_after`]).

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

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

/// How soon a failed write is tried again.
const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Writes every status the election publishes until the election ends (its sender is
/// dropped), and the last one after that, with the node's `standing` as it is at each
/// write (statuses come every round). The receiver returned says which
/// [`Status::version`] the file durably holds.
pub fn spawn_writer(
    path: PathBuf,
    election: String,
    node_id: String,
    mut statuses: watch::Receiver<Status>,
    standing: watch::Receiver<Standing>,
) -> (JoinHandle<()>, watch::Receiver<u64>) {
    let (durable, durable_versions) = watch::channel(0);
    let task = tokio::spawn(async move {
        let mut failing = false;
        loop {
            let status = statuses.borrow_and_update().clone();
            let document = StatusDocument::new(&election, &node_id, &status, *standing.borrow());
            let mut json = serde_json::to_vec_pretty(&document).expect("status serializes");
            json.push(b'\n');
            let target = path.clone();
            let written = tokio::task::spawn_blocking(move || write_atomically(&target, &json))
                .await
                .expect("status writer task does not panic");
            match written {
                Err(error) if !failing => {
                    warn!(%error, "status file not written; retrying");
                    failing = true;
                }
                Err(_) => {}
                Ok(()) => {
                    failing = false;
                    durable.send_replace(status.version);
                }
            }
            if failing {
                // Again soon, changed or not: a stepping-down election waits for it.
                match tokio::time::timeout(RETRY_EVERY, statuses.changed()).await {
                    // The election ended, and its last word cannot be written.
                    Ok(Err(_)) => break,
                    _ => continue,
                }
            } else if statuses.changed().await.is_err() {
                // The election ended; write its final word if we have not yet.
                if statuses.has_changed().unwrap_or(false) {
                    continue;
                }
                break;
            }
        }
    });
    (task, durable_versions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_write_is_retried_until_it_is_durable() {
        let dir = std::env::temp_dir().join(format!("leaderd-status-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("status.json");
        let (statuses, receiver) = watch::channel(crate::election::Status::initial());
        let (_task, mut durable) = spawn_writer(
            path.clone(),
            "e".into(),
            "a".into(),
            receiver,
            watch::channel(Standing::default()).1,
        );
        statuses.send_modify(|status| status.version = 7);
        // The directory is missing at first; the status does not change again.
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        assert_eq!(*durable.borrow(), 0);
        std::fs::create_dir_all(&dir).unwrap();
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            durable.wait_for(|version| *version >= 7),
        )
        .await
        .expect("written once the directory exists")
        .unwrap();
        assert!(path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
