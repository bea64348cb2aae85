//! The members table (`leaderd_member`) of [`Table`], statement by statement.

use std::time::Duration;
use tokio::time::Instant;

use super::{MemberRow, Table};
use crate::store::{Member, MemberRecord};

impl Table {
    pub fn record_member(&mut self, now: Instant, record: &MemberRecord, fresh: bool) {
        let now = self.reading(now);
        let key = (record.election.clone(), record.node_id.clone());
        // A late record of the same process never overwrites a later one.
        if self.members.get(&key).is_some_and(|m| {
            m.order.process == record.order.process && m.order.count > record.order.count
        }) {
            return;
        }
        let member = self.members.entry(key).or_insert_with(|| MemberRow {
            candidate: record.candidate(),
            standing: record.standing,
            priority: record.priority,
            version: record.version.clone(),
            host: record.host.clone(),
            started: now,
            last_seen: now,
            no_preempt_until: None,
            order: record.order,
        });
        member.order = record.order;
        member.candidate = record.candidate();
        member.standing = record.standing;
        member.priority = record.priority;
        member.version = record.version.clone();
        member.host = record.host.clone();
        member.last_seen = now;
        if fresh {
            member.started = now;
        }
    }

    pub fn hold_preemption(&mut self, now: Instant, election: &str, node_id: &str, hold: Duration) {
        let now = self.reading(now);
        let hold = self.flavour.duration(hold);
        if let Some(member) = self
            .members
            .get_mut(&(election.to_owned(), node_id.to_owned()))
        {
            // A hold is never shortened: a preemption's short hold must not undo an
            // operator's longer one.
            member.no_preempt_until = member.no_preempt_until.max(Some(now + hold));
        }
    }

    /// The members of `election`, by node id.
    pub fn members(&self, now: Instant, election: &str) -> Vec<Member> {
        let now = self.reading(now);
        self.members
            .iter()
            .filter(|((e, _), _)| e == election)
            .map(|((_, node_id), m)| Member {
                node_id: node_id.clone(),
                candidate: m.candidate,
                standing: Some(m.standing),
                priority: m.priority,
                version: m.version.clone(),
                host: m.host.clone(),
                member_for: now.saturating_duration_since(m.started),
                seen_ago: now.saturating_duration_since(m.last_seen),
                no_preempt_for: m.no_preempt_until.filter(|u| now < *u).map(|u| u - now),
                // Every record here has its order.
                recorded_every: crate::store::MEMBER_PERIOD,
            })
            .collect()
    }

    pub fn prune_members(&mut self, now: Instant, election: &str, older_than: Duration) {
        let now = self.reading(now);
        let older_than = self.flavour.duration(older_than);
        self.members
            .retain(|(e, _), m| e != election || m.last_seen + older_than >= now);
    }
}
