//! The status file's writer: every status the election publishes, written as the
//! [`StatusDocument`] with [`write_atomically`], and the version made durable reported
//! back (a stepping-down election releases only once the file no longer says it leads).

use std::path::PathBuf;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::election::Status;
use crate::standing::Standing;
use crate::status_file::{StatusDocument, write_atomically};

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
}
