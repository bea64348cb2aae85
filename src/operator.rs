//! Operator commands: `leaderd resign`, `handover`, `pause`, `resume` and `watch`. They
//! work from any host that reaches the database: each writes a command on the election's
//! row (and, on PostgreSQL, wakes the nodes with a notification), and the nodes' own
//! statements see it within one interval (see `dialect.rs`). Nothing here talks to a
//! node directly.

use serde::Serialize;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use crate::config::Config;
use crate::daemon::store;
use crate::store::{
    ControlStore, LeaseStore, Member, MemberStanding, SqlStore, StepDownRequest, StoreError,
};

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

/// `leaderd resign` and `handover`: what to ask, and how to wait.
#[derive(Debug, Clone)]
pub struct StepDownCommand {
    /// `handover --to`: the node to hand over to (`None`: resign).
    pub to: Option<String>,
    /// How long to wait for a new leader.
    pub wait: Duration,
    /// How long preemption may not take the lead back to the node it moved away from.
    pub hold: Duration,
    /// Skip the checks that a node could take over, and (handover) the target's answer.
    pub force: bool,
    /// How often the row is read while waiting.
    pub poll: Duration,
}

/// What a `resign` or `handover` came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepDownOutcome {
    /// No live leader to step down.
    NoLeader,
    /// Paused: nobody could take over.
    Paused,
    /// `handover --to` the node that leads already (a success).
    AlreadyLeads { node: String, term: i64 },
    /// The named node cannot take over.
    BadTarget { to: String, why: String },
    /// `resign`: no other live, healthy candidate could take over.
    NoCandidate { leader: String },
    /// The named node did not accept the handover within its window (it is not running,
    /// cannot lead, or runs a release without handover offers).
    NotAnswered { to: String, waited: Duration },
    /// The term ended before the request was written.
    Ended { leader: String, term: i64 },
    /// `--term N`: the live term is another one; nothing was asked.
    OtherTerm {
        named: i64,
        leader: String,
        term: i64,
    },
    /// The leader is already asked to step down (a resign, a handover or a preemption is
    /// under way); nothing was changed.
    SteppingDown { leader: String, term: i64 },
    /// The new leader, as asked.
    TookOver {
        new: String,
        term: i64,
        after: Duration,
    },
    /// Another node than the one named took over.
    OtherTookOver {
        new: String,
        term: i64,
        wanted: String,
    },
    /// Nobody else took over: the old leader leads again.
    LedAgain { leader: String, term: i64 },
    /// No node took over within the wait.
    NobodyTookOver { waited: Duration },
}

impl StepDownOutcome {
    pub fn exit_status(&self) -> u8 {
        match self {
            StepDownOutcome::AlreadyLeads { .. } | StepDownOutcome::TookOver { .. } => 0,
            StepDownOutcome::BadTarget { .. } | StepDownOutcome::NotAnswered { .. } => {
                EXIT_BAD_TARGET
            }
            StepDownOutcome::NoLeader
            | StepDownOutcome::Ended { .. }
            | StepDownOutcome::OtherTerm { .. }
            | StepDownOutcome::SteppingDown { .. } => EXIT_NO_LEADER,
            StepDownOutcome::OtherTookOver { .. }
            | StepDownOutcome::LedAgain { .. }
            | StepDownOutcome::NobodyTookOver { .. } => EXIT_NOT_TAKEN_OVER,
            StepDownOutcome::Paused => EXIT_PAUSED,
            StepDownOutcome::NoCandidate { .. } => EXIT_NO_CANDIDATE,
        }
    }

    /// What to tell the operator, on stderr (the new leader goes to stdout).
    pub fn message(&self, election: &str) -> String {
        match self {
            StepDownOutcome::NoLeader => {
                format!("election {election:?} has no leader now; nothing to step down")
            }
            StepDownOutcome::Paused => format!(
                "election {election:?} is paused, so no node could take over; run `leaderd \
                 resume` first"
            ),
            StepDownOutcome::AlreadyLeads { node, term } => {
                format!("{node:?} already leads election {election:?} (term {term})")
            }
            StepDownOutcome::BadTarget { to, why } => format!(
                "cannot hand election {election:?} over to {to:?}: {why} (`--force` hands \
                 over regardless)"
            ),
            StepDownOutcome::NoCandidate { leader } => format!(
                "no other live, healthy candidate could take election {election:?} over from \
                 {leader:?} (see `leaderd status`); `--force` resigns regardless, and {leader:?} \
                 leads again after one ttl if nobody takes over"
            ),
            StepDownOutcome::NotAnswered { to, waited } => format!(
                "{to:?} did not take the handover within {}: it is not running, cannot lead, \
                 or runs a release without handover offers; nothing changed (`--force` hands \
                 over without its answer)",
                humantime::format_duration(*waited)
            ),
            StepDownOutcome::Ended { leader, term } => format!(
                "the term {term} of {leader:?} ended before the request was written; see \
                 `leaderd status`"
            ),
            StepDownOutcome::OtherTerm {
                named,
                leader,
                term,
            } => format!(
                "term {named} is not the live term of election {election:?} ({leader:?} leads \
                 term {term}); nothing was asked"
            ),
            StepDownOutcome::SteppingDown { leader, term } => format!(
                "{leader:?} is already stepping down from term {term}, or its lead is offered \
                 to a node (a resign, a handover or a preemption is under way); nothing was \
                 changed: see `leaderd status`"
            ),
            StepDownOutcome::TookOver { new, term, after } => format!(
                "{new:?} leads (term {term}), {} ms after the request",
                after.as_millis()
            ),
            StepDownOutcome::OtherTookOver { new, term, wanted } => {
                format!("{new:?} took over (term {term}), not {wanted:?}")
            }
            StepDownOutcome::LedAgain { leader, term } => {
                format!("nobody else took over; {leader:?} leads again (term {term})")
            }
            StepDownOutcome::NobodyTookOver { waited } => format!(
                "no node took over within {}",
                humantime::format_duration(*waited)
            ),
        }
    }
}

/// `leaderd resign` (`to: None`) and `leaderd handover --to NODE`, on the CLI; with
/// `term` (`--term N`), only if N is the live term.
pub async fn step_down(
    config: &Config,
    command: StepDownCommand,
    term: Option<i64>,
) -> Result<ExitCode, OperatorError> {
    let election = config.election.name.as_str();
    let mut store = commands_store(config);
    let outcome = step_down_in_term(&mut store, election, &command, term, |said| {
        eprintln!("leaderd: {said}")
    })
    .await?;
    if let StepDownOutcome::TookOver { new, .. } | StepDownOutcome::AlreadyLeads { node: new, .. } =
        &outcome
    {
        println!("{new}");
    }
    eprintln!("leaderd: {}", outcome.message(election));
    Ok(ExitCode::from(outcome.exit_status()))
}

/// The steps of `resign` and `handover`, on any store (the simulator runs them too):
/// read the leader; check that a node could take over; ask (a handover is offered to its
/// target first, and asked of the leader once the target accepts, which proves it runs
/// and could lead), having held preemption back to the old leader off; wait for the new
/// leader.
/// `progress` hears what was asked, as it happens.
// The simulator (test builds) runs it.
#[cfg_attr(not(test), allow(dead_code))]
pub async fn step_down_with<S: ControlStore>(
    store: &mut S,
    election: &str,
    command: &StepDownCommand,
    progress: impl FnMut(String),
) -> Result<StepDownOutcome, OperatorError> {
    step_down_in_term(store, election, command, None, progress).await
}

/// [`step_down_with`], asking only the leader of term `named` (if given): a command
/// repeated after its answer was lost then never asks the next leader too.
pub async fn step_down_in_term<S: ControlStore>(
    store: &mut S,
    election: &str,
    command: &StepDownCommand,
    named: Option<i64>,
    mut progress: impl FnMut(String),
) -> Result<StepDownOutcome, OperatorError> {
    let read_error = |source| OperatorError::Read {
        election: election.to_owned(),
        source,
    };
    let row = store.get(election).await.map_err(read_error)?;
    let Some((row, leader)) = row.and_then(|r| {
        let leader = r.live_holder()?.to_owned();
        Some((r, leader))
    }) else {
        return Ok(StepDownOutcome::NoLeader);
    };
    let term = row.term;
    if let Some(named) = named.filter(|named| *named != term) {
        return Ok(StepDownOutcome::OtherTerm {
            named,
            leader,
            term,
        });
    }
    let write_error = |source| {
        let retry = || match &command.to {
            Some(to) => format!(
                "`leaderd handover --to {to} --term {term}` repeats it harmlessly (it asks \
                 nothing once term {term} has ended or is handing over)"
            ),
            None => format!(
                "`leaderd resign --term {term}` repeats it harmlessly (it asks nothing once \
                 term {term} has ended or is stepping down)"
            ),
        };
        write_failed(election, retry, source)
    };
    if let Some(to) = &command.to {
        if *to == leader {
            return Ok(StepDownOutcome::AlreadyLeads { node: leader, term });
        }
    }
    if row.paused() {
        return Ok(StepDownOutcome::Paused);
    }
    if row.pending.resign_term == Some(term) || row.pending.handover_to.is_some() {
        return Ok(StepDownOutcome::SteppingDown { leader, term });
    }
    let members = store.members(election).await.map_err(read_error)?;
    if !command.force {
        match &command.to {
            Some(to) => {
                if let Err(why) = check_target(&members, to) {
                    let to = to.clone();
                    return Ok(StepDownOutcome::BadTarget { to, why });
                }
            }
            None => {
                if !members.iter().any(|m| m.node_id != leader && m.may_lead()) {
                    return Ok(StepDownOutcome::NoCandidate { leader });
                }
            }
        }
    }
    let request = match (&command.to, command.force) {
        (None, _) => StepDownRequest::Resign,
        (Some(to), false) => StepDownRequest::Offer { to },
        (Some(to), true) => StepDownRequest::Handover { to },
    };
    // A manual move holds: preemption does not take the lead back to the old leader for
    // `--hold`. Written before the request: a preemption that sees the new leader must
    // already find it. The other nodes are held once the target accepted (below).
    hold_off(store, election, &leader, command.hold, &mut progress).await;
    let asked = store
        .request_step_down(election, &leader, term, request)
        .await
        .map_err(write_error)?;
    if !asked {
        let now = store.get(election).await.map_err(read_error)?;
        let stepping_down = now.as_ref().is_some_and(|r| {
            r.term == term
                && r.live_holder().is_some()
                && (r.pending.resign_term == Some(term) || r.pending.handover_to.is_some())
        });
        return Ok(match stepping_down {
            true => StepDownOutcome::SteppingDown { leader, term },
            false => StepDownOutcome::Ended { leader, term },
        });
    }
    let asked_at = Instant::now();
    if let StepDownRequest::Offer { to } = request {
        progress(format!(
            "offered {to:?} the lead of {leader:?} (term {term}); waiting for it to accept"
        ));
        // The offer lasts two lease lengths; the target sees it at its next read.
        let window = row.lease * 2 + command.poll;
        loop {
            tokio::time::sleep(command.poll).await;
            // A failing read is retried until the offer's window ends.
            let Ok(now) = store.get(election).await else {
                if asked_at.elapsed() > window {
                    let waited = asked_at.elapsed();
                    return Ok(StepDownOutcome::NotAnswered {
                        to: to.into(),
                        waited,
                    });
                }
                continue;
            };
            let Some(now) = now else { continue };
            if now.term != term {
                // The target took over already (it accepted, and the leader stepped down,
                // between two reads), or the term ended without the leader being asked
                // (it died, say).
                let Some(new) = now.live_holder().filter(|new| *new == to) else {
                    return Ok(StepDownOutcome::Ended { leader, term });
                };
                let new = new.to_owned();
                return Ok(StepDownOutcome::TookOver {
                    new,
                    term: now.term,
                    after: asked_at.elapsed(),
                });
            }
            let offered = now.pending.handover_to.as_deref() == Some(to);
            if offered && now.pending.resign_term == Some(term) {
                // Accepted: nor does preemption take the lead away from the target.
                for node in members.iter().map(|m| m.node_id.as_str()) {
                    if node != to && node != leader {
                        hold_off(store, election, node, command.hold, &mut progress).await;
                    }
                }
                break;
            }
            if !offered || asked_at.elapsed() > window {
                let waited = asked_at.elapsed();
                return Ok(StepDownOutcome::NotAnswered {
                    to: to.into(),
                    waited,
                });
            }
        }
        progress(format!("{to:?} accepted; {leader:?} steps down"));
    } else {
        match &command.to {
            Some(to) => progress(format!(
                "asked {leader:?} (term {term}) to hand over to {to:?}"
            )),
            None => progress(format!("asked {leader:?} (term {term}) to step down")),
        }
    }
    let give_up = asked_at + command.wait;
    loop {
        // A failing read is retried until the wait ends: the handover goes on regardless.
        if let Ok(Some(now)) = store.get(election).await {
            if let Some(new) = now.live_holder().filter(|_| now.term > term) {
                let new = new.to_owned();
                return Ok(match &command.to {
                    Some(to) if new != *to => StepDownOutcome::OtherTookOver {
                        new,
                        term: now.term,
                        wanted: to.clone(),
                    },
                    _ if new == leader => StepDownOutcome::LedAgain {
                        leader,
                        term: now.term,
                    },
                    _ => StepDownOutcome::TookOver {
                        new,
                        term: now.term,
                        after: asked_at.elapsed(),
                    },
                });
            }
        }
        if Instant::now() >= give_up {
            return Ok(StepDownOutcome::NobodyTookOver {
                waited: command.wait,
            });
        }
        tokio::time::sleep(command.poll).await;
    }
}

/// Keeps the node moved away from off preemption for `hold` (`--hold`), so that a manual
/// move holds.
async fn hold_off<S: ControlStore>(
    store: &mut S,
    election: &str,
    leader: &str,
    hold: Duration,
    progress: &mut impl FnMut(String),
) {
    if hold.is_zero() {
        return;
    }
    if let Err(error) = store.hold_preemption(election, leader, hold).await {
        progress(format!(
            "could not hold off preemption back to {leader:?}: {error}"
        ));
    }
}

/// Why `to` cannot take over, if it cannot.
pub(crate) fn check_target(members: &[Member], to: &str) -> Result<(), String> {
    let names = || {
        members
            .iter()
            .filter(|m| !m.gone())
            .map(|m| m.node_id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(m) = members.iter().find(|m| m.node_id == to) else {
        return Err(format!(
            "unknown node: no member of that id (members: {})",
            names()
        ));
    };
    let ago = humantime::format_duration(Duration::from_secs(m.seen_ago.as_secs()));
    match m.standing() {
        MemberStanding::Candidate => Ok(()),
        MemberStanding::Stopped if m.standing == Some(MemberStanding::Stopped) => {
            Err(format!("the node stopped (recorded {ago} ago)"))
        }
        MemberStanding::Stopped => Err(format!("the node is gone: last seen {ago} ago")),
        MemberStanding::Observer => {
            Err("the node is an observer (election.candidate = false)".to_owned())
        }
        MemberStanding::Starting => {
            Err("the node is unhealthy: its health check has not passed yet".to_owned())
        }
        MemberStanding::Unhealthy => {
            Err("the node is unhealthy: its health check fails".to_owned())
        }
    }
}

/// `leaderd pause [--for D]`.
pub async fn pause(config: &Config, duration: Duration) -> Result<ExitCode, OperatorError> {
    let election = config.election.name.as_str();
    let mut store = commands_store(config);
    store.pause(election, duration).await.map_err(|source| {
        let retry = || {
            format!(
                "`leaderd pause --for {}` repeats it (the pause then lasts from the repeat)",
                humantime::format_duration(duration)
            )
        };
        write_failed(election, retry, source)
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
    let election = config.election.name.as_str();
    let mut store = commands_store(config);
    let found = store.resume(election).await.map_err(|source| {
        let retry = || "`leaderd resume` repeats it harmlessly".to_owned();
        write_failed(election, retry, source)
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
    let election = config.election.name.clone();
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

/// One member as `leaderd status` shows it.
#[derive(Debug, Serialize)]
pub struct MemberReport {
    pub node_id: String,
    /// leader, follower, observer, unhealthy (its health check has not passed yet, or
    /// fails), or gone (it stopped, or was not seen for three record periods).
    pub role: &'static str,
    pub candidate: bool,
    pub priority: i64,
    pub version: String,
    pub host: String,
    pub member_for_ms: u64,
    pub seen_ms: u64,
    /// How long it may not take the lead by preemption yet (after losing it by
    /// preemption, or being moved away from by `resign`/`handover --hold`).
    pub preempt_hold_ms: Option<u64>,
}

pub fn member_reports(members: &[Member], leader: Option<&str>) -> Vec<MemberReport> {
    members
        .iter()
        .map(|m| MemberReport {
            node_id: m.node_id.clone(),
            role: match m.standing() {
                MemberStanding::Stopped => "gone",
                _ if Some(m.node_id.as_str()) == leader => "leader",
                MemberStanding::Candidate => "follower",
                MemberStanding::Observer => "observer",
                MemberStanding::Starting | MemberStanding::Unhealthy => "unhealthy",
            },
            candidate: m.candidate,
            priority: m.priority,
            version: m.version.clone(),
            host: m.host.clone(),
            member_for_ms: m.member_for.as_millis() as u64,
            seen_ms: m.seen_ago.as_millis() as u64,
            preempt_hold_ms: m.no_preempt_for.map(|d| d.as_millis() as u64),
        })
        .collect()
}
