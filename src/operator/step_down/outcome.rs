//! What a `resign` or `handover` came to: the outcome, the line that tells the operator,
//! and the exit status scripts read.

use std::time::Duration;

use crate::operator::{
    EXIT_BAD_TARGET, EXIT_NO_CANDIDATE, EXIT_NO_LEADER, EXIT_NOT_TAKEN_OVER, EXIT_PAUSED,
};

/// What a `resign` or `handover` came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepDownOutcome {
    /// No live leader to step down.
    NoLeader,
    /// Paused: nobody could take over.
    Paused,
    /// `handover --to` the node that leads already (a success).
    AlreadyLeads { node: String, term: i64 },
    /// The named node cannot take over; `force_helps`: it may yet, as far as the table
    /// can tell (its record is missing or stale), so `--force` is worth suggesting.
    BadTarget {
        to: String,
        why: String,
        force_helps: bool,
    },
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
            StepDownOutcome::BadTarget {
                to,
                why,
                force_helps: true,
            } => format!(
                "cannot hand election {election:?} over to {to:?}: {why} (if it does run, \
                 `--force` hands over regardless; if not, nobody leads for two lease lengths)"
            ),
            StepDownOutcome::BadTarget { to, why, .. } => format!(
                "cannot hand election {election:?} over to {to:?}: {why}; it would not claim, \
                 so forcing it would only leave the election without a leader for two lease \
                 lengths"
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
