//! [`HookKind`]: each hook the `[hooks]` section knows. Its name is the key in the
//! configuration, the `hook` label in metrics, the `hook` of the status file's backoff
//! and the `hook` field of the logs; this file is the one place that spells it.
//!
//! A leaf: `standing.rs` (a crash loop's hook), the status file, metrics and the CLI read
//! it without reaching into the rest of `hooks/`.

use std::fmt;
use std::str::FromStr;

/// A hook the `[hooks]` section knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookKind {
    /// Run when this node is elected, before its leader work starts (fenced).
    OnElected,
    /// Run when this node stops leading, once its leader work is gone.
    OnDemoted,
    /// Run on every node when the leader changes.
    OnLeaderChange,
    /// Run every election interval while this node leads (fenced).
    WhileLeader,
    /// The long-running leader-only process (fenced).
    LeaderCommand,
}

impl HookKind {
    /// Every kind, in the order the configuration and metrics list them.
    pub const ALL: [HookKind; 5] = [
        HookKind::OnElected,
        HookKind::OnDemoted,
        HookKind::OnLeaderChange,
        HookKind::WhileLeader,
        HookKind::LeaderCommand,
    ];

    /// The name: the `[hooks]` key, the metrics label, the status file's and the logs'.
    pub const fn as_str(self) -> &'static str {
        match self {
            HookKind::OnElected => "on_elected",
            HookKind::OnDemoted => "on_demoted",
            HookKind::OnLeaderChange => "on_leader_change",
            HookKind::WhileLeader => "while_leader",
            HookKind::LeaderCommand => "leader_command",
        }
    }

    /// The kind named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        HookKind::ALL.into_iter().find(|kind| kind.as_str() == name)
    }

    /// What the hook is told in `LEADERD_EVENT`.
    pub fn event(self) -> &'static str {
        match self {
            HookKind::OnElected => "elected",
            HookKind::OnDemoted => "demoted",
            HookKind::OnLeaderChange => "leader_change",
            HookKind::WhileLeader | HookKind::LeaderCommand => self.as_str(),
        }
    }

    /// Whether it is leader work: fenced to the term, and told `LEADERD_FENCE`.
    pub fn is_leader_work(self) -> bool {
        matches!(
            self,
            HookKind::OnElected | HookKind::WhileLeader | HookKind::LeaderCommand
        )
    }
}

impl fmt::Display for HookKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no hook's.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not a hook (one of on_elected, on_demoted, on_leader_change, while_leader, leader_command)"
)]
pub struct UnknownHook(pub String);

impl FromStr for HookKind {
    type Err = UnknownHook;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        HookKind::parse(name).ok_or_else(|| UnknownHook(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_parses_back_to_its_kind() {
        for kind in HookKind::ALL {
            assert_eq!(kind.as_str().parse::<HookKind>().unwrap(), kind);
            assert_eq!(kind.to_string(), kind.as_str());
        }
        assert!("health_check".parse::<HookKind>().is_err());
        assert_eq!(HookKind::OnElected.as_str(), "on_elected");
        assert_eq!(HookKind::LeaderCommand.as_str(), "leader_command");
    }

    #[test]
    fn the_fence_goes_to_leader_work_only() {
        let fenced: Vec<_> = HookKind::ALL
            .into_iter()
            .filter(|kind| kind.is_leader_work())
            .collect();
        assert_eq!(
            fenced,
            [
                HookKind::OnElected,
                HookKind::WhileLeader,
                HookKind::LeaderCommand
            ]
        );
    }
}
