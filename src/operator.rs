//! Operator commands: `leaderd resign`, `handover`, `pause`, `resume` and `watch`. They
//! work from any host that reaches the database: each writes a command on the election's
//! row (and, on PostgreSQL, wakes the nodes with a notification), and the nodes' own
//! statements see it within one interval (see `dialect.rs`). Nothing here talks to a
//! node directly.

use serde::Serialize;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use crate::config::Config;
use crate::daemon::store;
use crate::store::{ControlStore, LeaseRow, LeaseStore, Member, SqlStore, StoreError};

/// `resign`, `handover`: no live leader to step down.
pub const EXIT_NO_LEADER: u8 = 4;
/// `resign`, `handover`: nobody (or, for a handover, not the named node) took over within
/// `--wait`.
pub const EXIT_NOT_TAKEN_OVER: u8 = 5;
/// `resign`, `handover`: refused while the election is paused (nobody could take over).
pub const EXIT_PAUSED: u8 = 6;
/// `handover`: the named node cannot take over (unknown, gone, not a candidate, leads).
pub const EXIT_BAD_TARGET: u8 = 2;

/// How often a command that waits for the new leader reads the row.
const WAIT_POLL: Duration = Duration::from_millis(20);

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("cannot read election {election:?} (has `leaderd migrate` run?): {source}")]
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
}

fn commands_store(config: &Config) -> SqlStore {
    store(config, false)
}

async fn read(store: &mut SqlStore, election: &str) -> Result<Option<LeaseRow>, OperatorError> {
    store
        .get(election)
        .await
        .map_err(|source| OperatorError::Read {
            election: election.to_owned(),
            source,
        })
}

/// `leaderd resign` (`to: None`) and `leaderd handover --to NODE`.
pub async fn step_down(
    config: &Config,
    to: Option<&str>,
    wait: Duration,
) -> Result<ExitCode, OperatorError> {
    let election = config.election.as_str();
    let mut store = commands_store(config);
    let row = read(&mut store, election).await?;
    let Some((row, leader)) = row.and_then(|r| {
        let leader = r.live_holder()?.to_owned();
        Some((r, leader))
    }) else {
        eprintln!("leaderd: election {election:?} has no leader now; nothing to step down");
        return Ok(ExitCode::from(EXIT_NO_LEADER));
    };
    if row.paused() {
        eprintln!(
            "leaderd: election {election:?} is paused, so no node could take over; \
             run `leaderd resume` first"
        );
        return Ok(ExitCode::from(EXIT_PAUSED));
    }
    if let Some(to) = to {
        let members = store
            .members(election)
            .await
            .map_err(|source| OperatorError::Read {
                election: election.to_owned(),
                source,
            })?;
        if let Err(why) = check_target(&members, to, &leader) {
            eprintln!("leaderd: cannot hand election {election:?} over to {to:?}: {why}");
            return Ok(ExitCode::from(EXIT_BAD_TARGET));
        }
    }
    let asked = store
        .request_step_down(election, &leader, row.term, to)
        .await
        .map_err(|source| OperatorError::Write {
            election: election.to_owned(),
            source,
        })?;
    if !asked {
        eprintln!(
            "leaderd: the term {} of {leader:?} ended before the request was written; \
             see `leaderd status`",
            row.term
        );
        return Ok(ExitCode::from(EXIT_NO_LEADER));
    }
    let asked_at = Instant::now();
    match to {
        Some(to) => eprintln!(
            "leaderd: asked {leader:?} (term {}) to hand over to {to:?}",
            row.term
        ),
        None => eprintln!("leaderd: asked {leader:?} (term {}) to step down", row.term),
    }
    let give_up = asked_at + wait;
    loop {
        // A failing read is retried until the wait ends: the handover goes on regardless.
        if let Ok(Some(now)) = store.get(election).await {
            if let Some(new) = now.live_holder().filter(|_| now.term > row.term) {
                let took = asked_at.elapsed();
                match to {
                    Some(to) if new != to => {
                        eprintln!("leaderd: {new:?} took over (term {}), not {to:?}", now.term);
                        return Ok(ExitCode::from(EXIT_NOT_TAKEN_OVER));
                    }
                    _ if new == leader => {
                        eprintln!(
                            "leaderd: nobody else took over; {new:?} leads again (term {})",
                            now.term
                        );
                        return Ok(ExitCode::from(EXIT_NOT_TAKEN_OVER));
                    }
                    _ => {
                        println!("{new}");
                        eprintln!(
                            "leaderd: {new:?} leads (term {}), {} ms after the request",
                            now.term,
                            took.as_millis()
                        );
                        return Ok(ExitCode::SUCCESS);
                    }
                }
            }
        }
        if Instant::now() >= give_up {
            eprintln!(
                "leaderd: no node took over within {}",
                humantime::format_duration(wait)
            );
            return Ok(ExitCode::from(EXIT_NOT_TAKEN_OVER));
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
}

/// Why `to` cannot take over from `leader`, if it cannot.
pub(crate) fn check_target(members: &[Member], to: &str, leader: &str) -> Result<(), String> {
    if to == leader {
        return Err(format!("{to:?} already leads"));
    }
    let names = || {
        members
            .iter()
            .filter(|m| !m.gone())
            .map(|m| m.node_id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match members.iter().find(|m| m.node_id == to) {
        None => Err(format!(
            "unknown node: no member of that id (members: {})",
            names()
        )),
        Some(m) if m.gone() => Err(format!(
            "the node is gone: last seen {} ago",
            humantime::format_duration(Duration::from_secs(m.seen_ago.as_secs()))
        )),
        Some(m) if !m.candidate => Err("the node is not a candidate (an observer)".to_owned()),
        Some(_) => Ok(()),
    }
}

/// `leaderd pause [--for D]`.
pub async fn pause(config: &Config, duration: Duration) -> Result<ExitCode, OperatorError> {
    let election = config.election.as_str();
    let mut store = commands_store(config);
    store
        .pause(election, duration)
        .await
        .map_err(|source| OperatorError::Write {
            election: election.to_owned(),
            source,
        })?;
    println!(
        "election {election:?} paused for {}: the leader keeps leading, and no node takes a \
         free or lapsed lease; `leaderd resume` ends it sooner",
        humantime::format_duration(duration)
    );
    Ok(ExitCode::SUCCESS)
}

/// `leaderd resume`.
pub async fn resume(config: &Config) -> Result<ExitCode, OperatorError> {
    let election = config.election.as_str();
    let mut store = commands_store(config);
    let found = store
        .resume(election)
        .await
        .map_err(|source| OperatorError::Write {
            election: election.to_owned(),
            source,
        })?;
    match found {
        true => println!("election {election:?} resumed"),
        false => println!("election {election:?} has no row yet; nothing to resume"),
    }
    Ok(ExitCode::SUCCESS)
}

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
    let election = config.election.clone();
    let mut store = store(config, false).read_only();
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
        let next = soon.pop().unwrap_or(config.interval);
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

/// One member as `leaderd status` shows it.
#[derive(Debug, Serialize)]
pub struct MemberReport {
    pub node_id: String,
    /// leader, follower, observer, or gone (not seen for three record periods).
    pub role: &'static str,
    pub candidate: bool,
    pub priority: i64,
    pub version: String,
    pub host: String,
    pub member_for_ms: u64,
    pub seen_ms: u64,
}

pub fn member_reports(members: &[Member], leader: Option<&str>) -> Vec<MemberReport> {
    members
        .iter()
        .map(|m| MemberReport {
            node_id: m.node_id.clone(),
            role: if m.gone() {
                "gone"
            } else if Some(m.node_id.as_str()) == leader {
                "leader"
            } else if m.candidate {
                "follower"
            } else {
                "observer"
            },
            candidate: m.candidate,
            priority: m.priority,
            version: m.version.clone(),
            host: m.host.clone(),
            member_for_ms: m.member_for.as_millis() as u64,
            seen_ms: m.seen_ago.as_millis() as u64,
        })
        .collect()
}
