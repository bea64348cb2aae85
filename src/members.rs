//! The node's record in `leaderd_member` (what `leaderd status` lists and `handover`
//! checks), and preemption by priority. One task on a connection of its own, every
//! [`MEMBER_PERIOD`]: it never shares the election's connection, so it cannot delay a
//! renewal, and it adds one statement per period to the election's one per round. The
//! connection is closed between records: an idle node holds its election's connection
//! and its wake-up channel, nothing more.
//!
//! Preemption: a leader that sees, when it records itself, a candidate of higher priority
//! that has been a member (seen all along) for `election.preempt_after`, hands over to
//! it as `leaderd handover` would. It marks itself first so that it cannot take the lease
//! back by preemption for twice `preempt_after` (anti-flap); equal priorities never
//! preempt.

use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::election::{Role, Status};
use crate::hooks::health::Health;
use crate::status_file::Standing;
use crate::store::{ControlStore, MEMBER_PERIOD, Member, MemberRecord, SqlStore};

/// After a failed record, the next try comes this soon (a first start may wait for the
/// election's connection to migrate the table).
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Prune gone members every this many records.
const PRUNE_EVERY: u32 = 6;

/// Whether a node of this standing would take the lease now: a candidate (not an
/// observer) whose health check, if it has one, passes. Only such a node is offered to
/// `handover` and to preemption, which would otherwise hand over to a node that cannot
/// claim, again and again.
fn may_lead(standing: &Standing) -> bool {
    standing.candidate && matches!(standing.health, None | Some(Health::Healthy))
}

/// Starts recording this node; the task ends when `status` closes.
pub fn spawn(
    config: &Config,
    store: SqlStore,
    status: watch::Receiver<Status>,
    standing: watch::Receiver<Standing>,
) -> JoinHandle<()> {
    let record = MemberRecord {
        election: config.election.clone(),
        node_id: config.node_id.clone(),
        candidate: may_lead(&standing.borrow()),
        priority: config.priority,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        host: hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let preempt_after = config.preempt_after;
    tokio::spawn(run(record, store, status, standing, preempt_after))
}

/// Records this node every [`MEMBER_PERIOD`] (at once when its standing changes) and,
/// while it leads, hands over to a candidate of higher priority; ends with the election.
pub(crate) async fn run<S: ControlStore>(
    mut record: MemberRecord,
    mut store: S,
    status: watch::Receiver<Status>,
    mut standing: watch::Receiver<Standing>,
    preempt_after: Duration,
) {
    let mut fresh = true;
    let mut records = 0u32;
    loop {
        // A node that becomes able to lead starts its membership anew (`fresh`), so that
        // preemption counts `preempt_after` from then.
        let may_lead_now = may_lead(&standing.borrow_and_update());
        if may_lead_now && !record.candidate {
            fresh = true;
        }
        record.candidate = may_lead_now;
        let next = match store.record_member(&record, fresh).await {
            Ok(()) => {
                fresh = false;
                records = records.wrapping_add(1);
                if records % PRUNE_EVERY == 1 {
                    if let Err(error) = store.prune_members(&record.election).await {
                        debug!(%error, "could not prune gone members");
                    }
                }
                if !preempt_after.is_zero() {
                    // Not while paused: nobody could take over.
                    let leading = {
                        let now = status.borrow();
                        (now.role == Role::Leader && !now.paused)
                            .then_some(now.term)
                            .flatten()
                    };
                    if let Some(term) = leading {
                        preempt(&mut store, &record, term, preempt_after).await;
                    }
                }
                MEMBER_PERIOD
            }
            Err(error) => {
                debug!(%error, "could not record this node in leaderd_member");
                RETRY_AFTER
            }
        };
        store.disconnect();
        // A change of standing is recorded at once (a failing check, say), not a period
        // later.
        tokio::select! {
            _ = tokio::time::sleep(next) => {}
            changed = standing.changed() => {
                if changed.is_err() {
                    tokio::time::sleep(next).await;
                }
            }
        }
        if status.has_changed().is_err() {
            // The election has ended.
            return;
        }
    }
}

/// The candidate a leader of `priority` should hand over to, if any: the highest priority
/// above its own among live candidates that have been members for `preempt_after` and do
/// not hold off preemption (a tie goes to the smaller node id).
pub fn preemptor<'a>(
    members: &'a [Member],
    me: &str,
    priority: i64,
    preempt_after: Duration,
) -> Option<&'a Member> {
    members
        .iter()
        .filter(|m| {
            m.node_id != me
                && m.candidate
                && !m.gone()
                && m.seen_ago <= MEMBER_PERIOD * 2
                && m.priority > priority
                && m.member_for >= preempt_after
                && m.no_preempt_for.is_none()
        })
        .max_by(|a, b| {
            a.priority
                .cmp(&b.priority)
                .then_with(|| b.node_id.cmp(&a.node_id))
        })
}

async fn preempt<S: ControlStore>(
    store: &mut S,
    me: &MemberRecord,
    term: i64,
    preempt_after: Duration,
) {
    let members = match store.members(&me.election).await {
        Ok(members) => members,
        Err(error) => {
            debug!(%error, "could not read the members for preemption");
            return;
        }
    };
    let Some(to) = preemptor(&members, &me.node_id, me.priority, preempt_after) else {
        return;
    };
    info!(
        election = %me.election,
        term,
        to = %to.node_id,
        priority = to.priority,
        own_priority = me.priority,
        "a candidate of higher priority is ready; handing over (preemption)"
    );
    // First: this node cannot take it back by preemption for a while (anti-flap).
    if let Err(error) = store
        .hold_preemption(&me.election, &me.node_id, preempt_after * 2)
        .await
    {
        warn!(%error, "could not hold off preemption; not handing over");
        return;
    }
    match store
        .request_step_down(&me.election, &me.node_id, term, Some(&to.node_id))
        .await
    {
        Ok(true) => {}
        Ok(false) => debug!(term, "the term ended before the handover was asked"),
        Err(error) => warn!(%error, "could not ask for the handover"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, priority: i64, member_for: u64) -> Member {
        Member {
            node_id: id.to_owned(),
            candidate: true,
            priority,
            version: String::new(),
            host: String::new(),
            member_for: Duration::from_secs(member_for),
            seen_ago: Duration::from_secs(1),
            no_preempt_for: None,
        }
    }

    #[test]
    fn only_a_higher_priority_member_of_long_enough_preempts() {
        let after = Duration::from_secs(10);
        let members = vec![member("a", 5, 100), member("b", 5, 100), member("c", 9, 5)];
        // Equal priority never preempts; c is too recent.
        assert_eq!(preemptor(&members, "a", 5, after), None);
        let members = vec![member("a", 5, 100), member("c", 9, 10), member("d", 7, 50)];
        assert_eq!(preemptor(&members, "a", 5, after).unwrap().node_id, "c");
        let mut held = members.clone();
        held[1].no_preempt_for = Some(Duration::from_secs(3));
        assert_eq!(preemptor(&held, "a", 5, after).unwrap().node_id, "d");
        let mut gone = members.clone();
        gone[1].seen_ago = Duration::from_secs(31);
        gone[2].candidate = false;
        assert_eq!(preemptor(&gone, "a", 5, after), None);
    }
}
