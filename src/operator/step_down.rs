//! `leaderd resign` and `handover`: read the leader, check that a node could take over,
//! ask, hold preemption off the node moved away from, and wait for the new leader.

use std::process::ExitCode;
use std::time::Duration;
use tokio::time::Instant;

mod outcome;

pub use outcome::StepDownOutcome;

use super::{EXIT_USAGE, OperatorError, commands_store, write_failed};
use crate::config::Config;
use crate::store::{ControlStore, Member, MemberStanding, StepDownRequest};

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

/// `leaderd resign` (`to: None`) and `leaderd handover --to NODE`, on the CLI; with
/// `term` (`--term N`), only if N is the live term.
pub async fn step_down(
    config: &Config,
    command: StepDownCommand,
    term: Option<i64>,
) -> Result<ExitCode, OperatorError> {
    let election = config.election.name.as_str();
    if let Some(lock) = election.strip_prefix(crate::lock::LOCK_ROW_PREFIX) {
        eprintln!(
            "leaderd: {election:?} is the row of `leaderd lock {lock}`, not an election: no \
             node could take it over; `leaderd unlock {lock}` releases it if its holder is \
             gone (`--force`: whoever holds it)"
        );
        return Ok(ExitCode::from(EXIT_USAGE));
    }
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
#[cfg(test)]
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
async fn step_down_in_term<S: ControlStore>(
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
                if let Err((why, force_helps)) = check_target(&members, to) {
                    let to = to.clone();
                    return Ok(StepDownOutcome::BadTarget {
                        to,
                        why,
                        force_helps,
                    });
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

/// How a step-down says that its hold on the node moved away may not have been written
/// (the simulator judges a manual move's hold only where it was).
pub const HOLD_NOT_WRITTEN: &str = "could not hold off preemption back to";

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
        progress(format!("{HOLD_NOT_WRITTEN} {leader:?}: {error}"));
    }
}

/// Why `to` cannot take over, if it cannot, and whether it may all the same (a node
/// that runs but whose record is missing or stale): only then can `--force` help.
fn check_target(members: &[Member], to: &str) -> Result<(), (String, bool)> {
    check_target_record(members, to).map_err(|why| {
        let unknown_where_none_is_known = members.is_empty();
        let stale = members
            .iter()
            .any(|m| m.node_id == to && m.gone() && m.standing != Some(MemberStanding::Stopped));
        (why, unknown_where_none_is_known || stale)
    })
}

fn check_target_record(members: &[Member], to: &str) -> Result<(), String> {
    let names = || {
        members
            .iter()
            .filter(|m| !m.gone())
            .map(|m| m.node_id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(m) = members.iter().find(|m| m.node_id == to) else {
        return Err(match members.is_empty() {
            true => "unknown node: no node has recorded itself in leaderd_member".to_owned(),
            false => format!("unknown node: no member of that id (members: {})", names()),
        });
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
        MemberStanding::BackingOff => Err(
            "the node is backing off: its on_elected keeps failing, so it claims nothing for \
             a while"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::{Faults, MemoryStore};
    use crate::store::{LeaseStore, MemberRecord, RecordOrder};

    fn candidate(id: &str) -> MemberRecord {
        MemberRecord {
            election: "moved".to_owned(),
            node_id: id.to_owned(),
            standing: MemberStanding::Candidate,
            priority: 0,
            version: String::new(),
            host: String::new(),
            order: RecordOrder::default(),
        }
    }

    /// Seed 1871 of the simulator: the operator's hold on the old leader went in after
    /// the handover request, so a preemption woken by the new leader could find none and
    /// take the lead back. At the first instant the request is in the row, the hold is
    /// already in the members table.
    #[tokio::test(start_paused = true)]
    async fn a_handover_holds_the_old_leader_off_before_it_asks() {
        let store = MemoryStore::new();
        let mut setup = store.handle();
        setup.ensure_row("moved").await.unwrap();
        store.overwrite("moved", "a", 7, Duration::from_secs(3600));
        for id in ["a", "b"] {
            setup.record_member(&candidate(id), true).await.unwrap();
        }
        let mut operator = store.handle();
        operator.set_faults(Faults {
            latency: Duration::from_millis(100),
            ..Faults::default()
        });
        let command = StepDownCommand {
            to: Some("b".to_owned()),
            wait: Duration::from_secs(1),
            hold: Duration::from_secs(60),
            force: true,
            poll: Duration::from_millis(50),
        };
        let asking =
            tokio::spawn(
                async move { step_down_with(&mut operator, "moved", &command, |_| {}).await },
            );
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let row = store.row("moved").unwrap();
            if row.pending.handover_to.is_none() {
                continue;
            }
            let members = setup.members("moved").await.unwrap();
            let a = members.iter().find(|m| m.node_id == "a").unwrap();
            assert!(a.no_preempt_for.is_some(), "asked before the hold: {a:?}");
            break;
        }
        asking.abort();
    }
}
