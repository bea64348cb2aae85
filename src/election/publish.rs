//! What a candidacy tells the rest of the program after each change: the new [`Status`]
//! on the watch channel, then the [`RoleEvent`]s that lead from the previous one to it.

use std::time::SystemTime;
use tracing::info;

use super::candidacy::Candidacy;
use super::clock::Instants;
use super::hold::Hold;
use super::status::{Role, RoleEvent, Status};

impl Candidacy {
    pub(super) fn publish(&mut self, role: Role, leader: Option<String>, term: Option<i64>) {
        let settings = &self.settings;
        let now_wall = SystemTime::now();
        let now = Instants::now(&self.boot);
        let lease = match self.hold {
            Hold::Leading { deadline, .. } if role == Role::Leader => Some(deadline),
            _ => None,
        };
        let valid_until = match lease {
            Some(deadline) => now_wall + deadline.left(now),
            None => now_wall + settings.interval + settings.ttl,
        };
        let previous = self.status.borrow().clone();
        let changed = previous.role != role || previous.leader != leader;
        if changed {
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
            now_wall
        } else {
            previous.since
        };
        let lease_deadline = lease.map(|deadline| deadline.at);
        let leader_lease_until = match role {
            Role::Leader => lease_deadline,
            _ => leader.as_ref().and(self.observed_lapse),
        };
        self.status.send_replace(Status {
            role,
            leader: leader.clone(),
            term,
            since,
            updated_at: now_wall,
            valid_until,
            lease_deadline,
            lease_deadline_boot: lease.map(|deadline| deadline.boot),
            leader_lease_until,
            error: self.error.clone(),
            paused: self.paused,
            version: previous.version + 1,
        });
        // After the status: whoever handles an event finds the status it describes.
        if let Some(events) = &self.events {
            let was_leading = previous.role == Role::Leader;
            let leading = role == Role::Leader;
            let send = |event| {
                let _ = events.send(event);
            };
            if was_leading && (!leading || previous.term != term) {
                send(RoleEvent::Demoted {
                    term: previous.term.unwrap_or_default(),
                });
            }
            if previous.leader != leader {
                send(RoleEvent::LeaderChanged {
                    previous: previous.leader.clone(),
                    current: leader.clone(),
                    term,
                });
            }
            if leading && (!was_leading || previous.term != term) {
                send(RoleEvent::Elected {
                    term: term.unwrap_or_default(),
                });
            }
        }
    }
}
