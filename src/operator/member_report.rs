//! Each member of an election as `leaderd status` shows it.

use serde::Serialize;

use crate::store::{Member, MemberStanding};

/// One member as `leaderd status` shows it.
#[derive(Debug, Serialize)]
pub struct MemberReport {
    pub node_id: String,
    /// leader, follower, observer, unhealthy (its health check has not passed yet, or
    /// fails), backoff (its on_elected keeps failing: it claims nothing for a while), or
    /// gone (it stopped, or was not seen for three record periods).
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
                MemberStanding::BackingOff => "backoff",
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
