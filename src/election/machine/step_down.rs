//! Stepping down, in the one order that a stop and a resign both follow: stop acting,
//! publish that, wait until it is durable, then release the row.

use tracing::{debug, info, warn};

use super::publish::View;
use super::{Action, Awaiting, Machine, Moment, Reply, STOP_WAIT_IN_FLIGHT, State};
use crate::election::clock::Instants;
use crate::store::StoreError;

impl Machine {
    /// Gives leadership up, in the one order that a stop and a resign both follow: stop
    /// acting as leader and publish that, wait until the publication is durable (see
    /// [`Election::release_after`](super::Election::release_after)), and only then release
    /// the row, so that no successor can start while this node's last durable word still
    /// says it leads. If that takes until the lease would end, the release is withheld: the
    /// lease lapses on its own. `held`: the term to release and where its lease ends.
    pub(super) fn step_down(
        &mut self,
        now: Moment,
        held: Option<(i64, Instants)>,
        for_good: bool,
        actions: &mut Vec<Action>,
    ) {
        // A term a lost answer may have started stays in doubt through a resign: the next
        // read tells whether it is ours.
        let in_doubt = match self.state {
            State::Lapsed { in_doubt, .. } | State::Following { in_doubt, .. } => in_doubt,
            _ => None,
        };
        self.stop_acting(now, actions);
        self.answer_renewals(actions);
        if for_good {
            // Stopped: nothing this node said holds any longer.
            let mut stopped = self.published.clone();
            stopped.valid_until = stopped.updated_at;
            stopped.version += 1;
            self.published = stopped.clone();
            actions.push(Action::Publish(stopped));
        }
        let Some((term, lease_end)) = held else {
            self.state = State::Done;
            actions.push(Action::Finish(None));
            return;
        };
        self.state = State::SteppingDown {
            term,
            lease_end,
            for_good,
            stop_after: false,
            in_doubt,
        };
        if !self.release_waits_for_durable {
            return self.send(Awaiting::Release { term }, actions);
        }
        self.send(Awaiting::Durable, actions);
        actions.push(Action::AwaitDurable {
            version: self.published.version,
            within: lease_end.left(now.at),
        });
    }

    /// The step-down's statements answered: the status durable, then the release.
    pub(super) fn stepping_down(
        &mut self,
        now: Moment,
        awaiting: Awaiting,
        answer: Result<Reply, StoreError>,
        actions: &mut Vec<Action>,
    ) {
        let State::SteppingDown {
            term,
            for_good,
            stop_after,
            in_doubt,
            ..
        } = self.state
        else {
            return;
        };
        let released = match (awaiting, answer) {
            (Awaiting::Durable, Ok(Reply::Durable(true))) => {
                self.send(Awaiting::Release { term }, actions);
                return;
            }
            (Awaiting::Durable, _) => {
                warn!(
                    election = %self.settings.name,
                    term,
                    "the status file did not say this node stopped leading before its lease \
                     would end; not releasing the lease, which lapses on its own"
                );
                None
            }
            (_, Ok(reply)) => Some(Ok(matches!(reply, Reply::Done(true)))),
            (_, Err(error)) => Some(Err(error)),
        };
        let settings = &self.settings;
        match &released {
            Some(Ok(true)) => {
                info!(election = %settings.name, node = %settings.node_id, term, "released the lease")
            }
            Some(Ok(false)) => debug!(term, "nothing to release: the row is no longer ours"),
            Some(Err(error)) => {
                warn!(%error, term, "could not release the lease; it lapses by itself")
            }
            None => {}
        }
        if for_good {
            self.state = State::Done;
            actions.push(Action::Finish(released));
            return;
        }
        self.state = State::Following {
            in_doubt,
            released_in: None,
        };
        self.resigned_until = Some(now.at.at + self.settings.ttl);
        self.due = now.at.at;
        if stop_after {
            // Nothing is held any more: the stop publishes that this node's word is over.
            self.step_down(now, None, true, actions);
        }
    }

    /// Stops acting as leader if the deadline has passed by either clock.
    pub(super) fn look_at_deadline(&mut self, now: Moment, actions: &mut Vec<Action>) {
        if let State::Leading { term, deadline, .. } = self.state {
            if deadline.passed(now.at) {
                warn!(
                    election = %self.settings.name,
                    node = %self.settings.node_id,
                    term,
                    "no successful renewal before the lease deadline; no longer acting as leader"
                );
                self.state = State::Lapsed {
                    term,
                    in_doubt: None,
                };
                self.publish(now, View::unknown(Some(term)), actions);
                actions.push(Action::AnswerRenewals(None));
            }
        }
    }

    /// Stops acting as leader at once, keeping the term to release.
    pub(super) fn stop_acting(&mut self, now: Moment, actions: &mut Vec<Action>) {
        if let State::Leading { term, .. } = self.state {
            self.state = State::Lapsed {
                term,
                in_doubt: None,
            };
        }
        let term = self.published.term;
        self.publish(now, View::unknown(term), actions);
    }

    pub(super) fn stop(&mut self, now: Moment, actions: &mut Vec<Action>) {
        match self.state {
            _ if self.stopping() => {}
            State::SteppingDown {
                ref mut stop_after, ..
            } => *stop_after = true,
            _ if self.awaiting.is_some() => {
                let held = self.held(now);
                self.stop_acting(now, actions);
                self.state = State::Stopping {
                    held,
                    give_up: now.at.at + STOP_WAIT_IN_FLIGHT,
                };
            }
            _ => {
                let held = self.held(now);
                self.step_down(now, held, true, actions);
            }
        }
    }
}
