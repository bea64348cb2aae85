//! The flags several commands share: `--election`, `--new`, and those of `resign` and
//! `handover`.

use crate::{duration, operator};

/// `--election NAME`: the operator commands act on this election instead of election.name.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct ElectionFlag {
    /// The election to act on [default: election.name].
    #[arg(long = "election", value_name = "NAME")]
    pub(super) name: Option<String>,
}

/// `--new`: the election may be one that no node has joined yet.
#[derive(Debug, Clone, Copy, clap::Args)]
pub(super) struct NewFlag {
    /// Accept an election that has no row and no member yet (one no node has joined);
    /// without it, such an election is refused (exit 67), as it is most often a typo.
    #[arg(long = "new")]
    pub(super) new: bool,
}

/// The flags `resign` and `handover` share.
#[derive(Debug, clap::Args)]
pub(super) struct StepDownFlags {
    /// How long to wait for another node to take over.
    #[arg(long, default_value = "30s", value_parser = duration::positive)]
    wait: std::time::Duration,
    /// How long the leader moved away from may not take the lead back by preemption
    /// (`election.priority`); `0` lets it at once.
    #[arg(long, default_value = "5m", value_parser = duration::zero_or_more)]
    hold: std::time::Duration,
    /// Step down even if no node could take over as far as the members table says
    /// (resign), or without the named node's answer (handover).
    #[arg(long)]
    force: bool,
    /// Only if N is the live term (exit 4 otherwise): repeats a command whose answer was
    /// lost (exit 8) without asking the next leader too.
    #[arg(long, value_name = "N")]
    pub(super) term: Option<i64>,
}

impl StepDownFlags {
    pub(super) fn command(self, to: Option<String>) -> operator::StepDownCommand {
        operator::StepDownCommand {
            to,
            wait: self.wait,
            hold: self.hold,
            force: self.force,
            poll: std::time::Duration::from_millis(20),
        }
    }
}
