//! `leaderd watch`: one JSON line per change of leader, term or pause.

use serde::Serialize;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use super::OperatorError;
use crate::config::Config;
use crate::store::LeaseStore;

/// One line of `leaderd watch`.
#[derive(Debug, Clone, Serialize, PartialEq)]
struct WatchLine {
    election: String,
    leader: Option<String>,
    term: Option<i64>,
    paused: bool,
    at: String,
}

/// `leaderd watch [--once]`: a JSON line per change of leader, term or pause, until
/// `stop` completes. PostgreSQL wakes it through notifications (a release or a command),
/// after which it reads a few times in quick succession to catch the next claim; it reads
/// every `election.interval` anyway.
pub async fn watch(
    config: &Config,
    once: bool,
    stop: impl std::future::Future<Output = ()>,
) -> Result<ExitCode, OperatorError> {
    let election = config.election.name.clone();
    let mut store = config.store(false).read_only();
    let mut notifications = store.release_notifications(&election);
    tokio::pin!(stop);
    let mut last: Option<(Option<String>, Option<i64>, bool)> = None;
    // Reads soon after a notification: the release comes first, the claim just after.
    let mut soon: Vec<Duration> = Vec::new();
    let mut failures = 0u32;
    loop {
        match store.get(&election).await {
            Ok(row) => {
                failures = 0;
                let state = (
                    row.as_ref()
                        .and_then(|r| r.live_holder())
                        .map(str::to_owned),
                    row.as_ref().map(|r| r.term),
                    row.as_ref().is_some_and(|r| r.paused()),
                );
                if last.as_ref() != Some(&state) {
                    let line = WatchLine {
                        election: election.clone(),
                        leader: state.0.clone(),
                        term: state.1,
                        paused: state.2,
                        at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
                    };
                    println!(
                        "{}",
                        serde_json::to_string(&line).expect("a watch line serializes")
                    );
                    last = Some(state);
                }
                if once {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            Err(source) if once || failures >= 10 => {
                return Err(OperatorError::Read { election, source });
            }
            Err(error) => {
                failures += 1;
                tracing::warn!(%error, "watch: read failed; retrying");
            }
        }
        let next = soon.pop().unwrap_or(config.election.interval);
        let woken = async {
            match notifications.as_mut() {
                Some(receiver) => {
                    if receiver.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut stop => return Ok(ExitCode::SUCCESS),
            _ = tokio::time::sleep(next) => {}
            _ = woken => {
                soon = vec![
                    Duration::from_millis(500),
                    Duration::from_millis(100),
                    Duration::from_millis(20),
                ];
            }
        }
    }
}
