//! What the machine tells the rest of the program after each change: the new [`Status`],
//! then the [`RoleEvent`]s that lead from the previous one to it.

use tokio::time::Instant;
use tracing::info;

use super::{Action, Machine, Moment, State};
use crate::election::status::{Role, RoleEvent, Status};

/// What a node publishes of the election: its role, the leader it sees, the term.
pub(super) struct View {
    role: Role,
    leader: Option<String>,
    term: Option<i64>,
    /// When the leader a follower sees loses its lease unless renewed.
    lapse: Option<Instant>,
}

impl View {
    /// Neither leader nor sure who is: the database did not say, or this node stopped
    /// acting as leader.
    pub(super) fn unknown(term: Option<i64>) -> View {
        View {
            role: Role::Unknown,
            leader: None,
            term,
            lapse: None,
        }
    }

    /// This node leads in `term`.
    pub(super) fn leader(me: &str, term: i64) -> View {
        View {
            role: Role::Leader,
            leader: Some(me.to_owned()),
            term: Some(term),
            lapse: None,
        }
    }

    /// Another node, or none, leads, as the row read says.
    pub(super) fn follower(
        leader: Option<String>,
        term: Option<i64>,
        lapse: Option<Instant>,
    ) -> View {
        View {
            role: Role::Follower,
            leader,
            term,
            lapse,
        }
    }
}

impl Machine {
    /// Publishes this node's view: the new [`Status`], then the [`RoleEvent`]s that lead
    /// from the previous one to it.
    pub(super) fn publish(&mut self, now: Moment, view: View, actions: &mut Vec<Action>) {
        let View {
            role,
            leader,
            term,
            lapse,
        } = view;
        let settings = &self.settings;
        let lease = match self.state {
            State::Leading { deadline, .. } if role == Role::Leader => Some(deadline),
            _ => None,
        };
        let valid_until = match lease {
            Some(deadline) => now.wall + deadline.left(now.at),
            None => now.wall + settings.interval + settings.ttl,
        };
        let previous = &self.published;
        if previous.role != role || previous.leader != leader {
            let leader_text = leader.as_deref().unwrap_or("none");
            info!(
                election = %settings.name,
                node = %settings.node_id,
                role = role.as_str(),
                term,
                leader = leader_text,
                "role is now {}", role.as_str()
            );
        }
        let since = if previous.role != role || (role == Role::Leader && previous.term != term) {
            now.wall
        } else {
            previous.since
        };
        let lease_deadline = lease.map(|deadline| deadline.at);
        let leader_lease_until = match role {
            Role::Leader => lease_deadline,
            _ => leader.as_ref().and(lapse),
        };
        let status = Status {
            role,
            leader: leader.clone(),
            term,
            since,
            updated_at: now.wall,
            valid_until,
            lease_deadline,
            lease_deadline_boot: lease.map(|deadline| deadline.boot),
            leader_lease_until,
            error: self.link.error.clone(),
            paused: previous.paused,
            version: previous.version + 1,
        };
        let previous = std::mem::replace(&mut self.published, status.clone());
        actions.push(Action::Publish(status));
        // After the status: whoever handles an event finds the status it describes.
        let was_leading = previous.role == Role::Leader;
        let leading = role == Role::Leader;
        if was_leading && (!leading || previous.term != term) {
            actions.push(Action::Event(RoleEvent::Demoted {
                term: previous.term.unwrap_or_default(),
            }));
        }
        if previous.leader != leader {
            actions.push(Action::Event(RoleEvent::LeaderChanged {
                previous: previous.leader.clone(),
                current: leader.clone(),
                term,
            }));
        }
        if leading && (!was_leading || previous.term != term) {
            actions.push(Action::Event(RoleEvent::Elected {
                term: term.unwrap_or_default(),
            }));
        }
    }
}
