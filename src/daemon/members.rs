//! The node's record in `leaderd_member` (what `leaderd status` lists and `handover`
//! checks), and preemption by priority. One task on a connection of its own, every
//! [`MEMBER_PERIOD`], at once when the node's standing changes, and once more as it stops
//! (recording itself `stopped`, so that `status` lists it as gone and `handover` refuses
//! it at once). It never shares the election's connection, so it cannot delay a renewal,
//! and it adds one statement per period to the election's one per round. The connection
//! is closed between records: an idle node holds its election's connection and its
//! wake-up channel, nothing more.
//!
//! Preemption: a candidate whose priority is above the leader's and that has been a
//! member (able to lead all along) for `election.preempt_after` asks the leader to hand
//! over to it, as `leaderd handover` would. It is the candidate that asks, when it
//! qualifies, rather than the leader at its next record: the lead moves within about one
//! interval of `preempt_after`, not up to a record period later. It first holds off the
//! leader's preemption for twice `preempt_after` (anti-flap: the node that lost cannot
//! take the lease back by preemption), and it does not preempt while its own record is
//! held off, whether by that rule or by an operator's `resign`/`handover --hold`. Equal
//! priorities never preempt.

use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::election::Status;
use crate::hooks::HookKind;
use crate::standing::Health;
use crate::standing::Standing;
use crate::store::{
    ControlStore, MEMBER_PERIOD, Member, MemberRecord, MemberStanding, RecordOrder, SqlStore,
    StepDownRequest,
};

/// After a failed record, the next try comes this soon (a first start may wait for the
/// election's connection to migrate the table).
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long a candidate that outranks the leader leaves the preemption to a better-ranked
/// one before it asks itself.
pub const DEFER_TO_BETTER: Duration = Duration::from_secs(20);
/// Prune gone members every this many records.
const PRUNE_EVERY: u32 = 30;
/// How often a candidate reads the members to judge preemption, when nothing wakes it
/// sooner (a new leader, or a time it may qualify at): every few records, not each one.
pub const PREEMPT_PERIOD: Duration = Duration::from_secs(10);

/// What a node of this standing records itself as: a candidate only while it would take
/// the lease (not an observer, its health check, if it has one, passes, and no failing
/// on_elected holds it off).
pub(crate) fn member_standing(standing: &Standing, stopping: bool) -> MemberStanding {
    let held_off = standing
        .backoff
        .is_some_and(|b| b.hook == HookKind::OnElected);
    match (stopping, standing.candidate, standing.health) {
        (true, _, _) => MemberStanding::Stopped,
        (false, false, _) => MemberStanding::Observer,
        (false, true, None | Some(Health::Healthy)) if held_off => MemberStanding::BackingOff,
        (false, true, None | Some(Health::Healthy)) => MemberStanding::Candidate,
        (false, true, Some(Health::Starting)) => MemberStanding::Starting,
        (false, true, Some(Health::Failing)) => MemberStanding::Unhealthy,
    }
}

/// Starts recording this node; the task ends once it has recorded the stop, or when
/// `status` closes.
pub fn spawn(
    config: &Config,
    store: SqlStore,
    status: watch::Receiver<Status>,
    standing: watch::Receiver<Standing>,
    stopping: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let record = MemberRecord {
        election: config.election.name.clone(),
        node_id: config.node.id.clone(),
        standing: member_standing(&standing.borrow(), false),
        priority: config.election.priority,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        host: hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
        order: RecordOrder {
            process: rand::random(),
            count: 0,
        },
    };
    let preempt_after = config.election.preempt_after;
    tokio::spawn(run(
        record,
        store,
        status,
        standing,
        stopping,
        preempt_after,
    ))
}

/// Records this node every [`MEMBER_PERIOD`] (at once when its standing changes, and
/// when it stops) and preempts a leader of lower priority; ends after recording the stop,
/// or with the election.
pub(crate) async fn run<S: ControlStore>(
    mut record: MemberRecord,
    mut store: S,
    mut status: watch::Receiver<Status>,
    mut standing: watch::Receiver<Standing>,
    mut stopping: watch::Receiver<bool>,
    preempt_after: Duration,
) {
    let mut fresh = true;
    let mut records = 0u32;
    // The leader last judged for preemption, and when to judge again.
    let mut judged: Option<String> = None;
    let mut preempt_at = tokio::time::Instant::now();
    loop {
        let stops = *stopping.borrow_and_update();
        let now = member_standing(&standing.borrow_and_update(), stops);
        // A node that becomes able to lead starts its membership anew (`fresh`), so that
        // preemption counts `preempt_after` from then.
        if now == MemberStanding::Candidate && record.standing != MemberStanding::Candidate {
            fresh = true;
        }
        record.standing = now;
        record.order.count += 1;
        let next = match store.record_member(&record, fresh).await {
            Ok(()) if stops => return,
            Ok(()) => {
                fresh = false;
                records = records.wrapping_add(1);
                if records % PRUNE_EVERY == 1 {
                    if let Err(error) = store.prune_members(&record.election).await {
                        debug!(%error, "could not prune gone members");
                    }
                }
                let preempting = !preempt_after.is_zero() && record.candidate();
                if preempting && tokio::time::Instant::now() >= preempt_at {
                    let again = preempt(&mut store, &record, &status, preempt_after).await;
                    let after = again.map_or(PREEMPT_PERIOD, |after| after.min(PREEMPT_PERIOD));
                    preempt_at = tokio::time::Instant::now() + after;
                }
                match preempting {
                    true => MEMBER_PERIOD
                        .min(preempt_at.saturating_duration_since(tokio::time::Instant::now())),
                    false => MEMBER_PERIOD,
                }
            }
            Err(error) => {
                debug!(%error, "could not record this node in leaderd_member");
                RETRY_AFTER
            }
        };
        store.disconnect();
        // A change of standing is recorded at once (a failing check, a stop), not a
        // period later.
        // A closed channel drops out of the wait (its branch is disabled), so that the
        // others are still heard. A new leader is judged for preemption at once, not a
        // period later.
        let preempting = !preempt_after.is_zero() && record.candidate();
        let leader = status.borrow_and_update().leader.clone();
        let judged = leader.clone().or(judged.take());
        tokio::select! {
            biased;
            Ok(()) = stopping.changed() => {}
            Ok(()) = standing.changed() => {}
            Ok(()) = new_leader(&mut status, judged.as_deref(), &record.node_id), if preempting => {
                preempt_at = tokio::time::Instant::now();
            }
            _ = tokio::time::sleep(next) => {}
        }
        if status.has_changed().is_err() && !*stopping.borrow() {
            // The election has ended.
            return;
        }
    }
}

/// Resolves when `status` names a leader other than `judged` (the one last judged for
/// preemption) and `me`, or when a pause ends (preemption waits while one lasts);
/// moments without a leader do not count, so a flapping election costs no records. An
/// error once the election has ended.
async fn new_leader(
    status: &mut watch::Receiver<Status>,
    judged: Option<&str>,
    me: &str,
) -> Result<(), watch::error::RecvError> {
    let mut paused = status.borrow().paused;
    loop {
        status.changed().await?;
        let now = status.borrow_and_update();
        if paused && !now.paused {
            return Ok(());
        }
        paused = now.paused;
        if let Some(leader) = now.leader.as_deref() {
            if Some(leader) != judged && leader != me {
                return Ok(());
            }
        }
    }
}

/// Whether `me`, a candidate of priority `priority`, should preempt the leader `leader`
/// now (`Ok`), or when it might (`Err(Some(after))`), or not (`Err(None)`): its priority
/// is above the leader's and above every other ready candidate's (a tie goes to the
/// smaller node id), it has been a member for `preempt_after`, and nothing holds its
/// preemption off. It defers to a better-ranked candidate only for [`DEFER_TO_BETTER`]
/// past `preempt_after`: that one may have preemption turned off (members do not record
/// their `preempt_after`), and would otherwise keep the lead with a lower-ranked leader.
pub fn should_preempt(
    members: &[Member],
    me: &str,
    leader: &str,
    preempt_after: Duration,
) -> Result<(), Option<Duration>> {
    let find = |id: &str| members.iter().find(|m| m.node_id == id && !m.gone());
    let (Some(mine), Some(led)) = (find(me), find(leader)) else {
        return Err(None);
    };
    if mine.priority <= led.priority || !mine.may_lead() {
        return Err(None);
    }
    if let Some(held) = mine.no_preempt_for {
        return Err(Some(held));
    }
    let outranked = members.iter().any(|m| {
        m.node_id != me
            && m.node_id != leader
            && m.may_lead()
            && m.member_for >= preempt_after
            && m.no_preempt_for.is_none()
            && (m.priority, std::cmp::Reverse(&m.node_id))
                > (mine.priority, std::cmp::Reverse(&mine.node_id))
    });
    let deferred_until = preempt_after + DEFER_TO_BETTER;
    if outranked && mine.member_for < deferred_until {
        return Err(Some(deferred_until - mine.member_for));
    }
    match preempt_after.checked_sub(mine.member_for) {
        Some(left) if !left.is_zero() => Err(Some(left)),
        _ => Ok(()),
    }
}

/// Hands the lead over to this node if it outranks the leader (see [`should_preempt`]);
/// how soon to look again, if it may qualify later.
async fn preempt<S: ControlStore>(
    store: &mut S,
    me: &MemberRecord,
    status: &watch::Receiver<Status>,
    preempt_after: Duration,
) -> Option<Duration> {
    let (leader, term) = {
        let now = status.borrow();
        if now.paused {
            // Nobody could take over.
            return None;
        }
        (now.leader.clone()?, now.term?)
    };
    if leader == me.node_id {
        return None;
    }
    let members = match store.members(&me.election).await {
        Ok(members) => members,
        Err(error) => {
            debug!(%error, "could not read the members for preemption");
            // Soon again, not a period later.
            return Some(RETRY_AFTER);
        }
    };
    if let Err(later) = should_preempt(&members, &me.node_id, &leader, preempt_after) {
        return later;
    }
    info!(
        election = %me.election,
        term,
        leader = %leader,
        priority = me.priority,
        "this candidate outranks the leader; asking it to hand over (preemption)"
    );
    // First: the leader that loses cannot take the lease back by preemption (anti-flap).
    if let Err(error) = store
        .hold_preemption(&me.election, &leader, preempt_after * 2)
        .await
    {
        warn!(%error, "could not hold off the leader's preemption; not preempting yet");
        return Some(RETRY_AFTER);
    }
    let to = StepDownRequest::Handover { to: &me.node_id };
    match store
        .request_step_down(&me.election, &leader, term, to)
        .await
    {
        Ok(true) => {}
        Ok(false) => debug!(term, "the term ended before the handover was asked"),
        Err(error) => {
            warn!(%error, "could not ask for the handover");
            return Some(RETRY_AFTER);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, priority: i64, member_for: u64) -> Member {
        Member {
            node_id: id.to_owned(),
            candidate: true,
            standing: Some(MemberStanding::Candidate),
            priority,
            version: String::new(),
            host: String::new(),
            member_for: Duration::from_secs(member_for),
            seen_ago: Duration::from_secs(1),
            no_preempt_for: None,
            recorded_every: MEMBER_PERIOD,
        }
    }

    /// A node of an older version records every 10 s: it is not taken for gone between
    /// its records during an upgrade.
    #[test]
    fn a_member_is_gone_after_three_of_its_own_periods() {
        let mut m = member("a", 0, 100);
        m.seen_ago = Duration::from_secs(7);
        assert!(m.gone());
        m.recorded_every = crate::store::LEGACY_MEMBER_PERIOD;
        assert!(!m.gone());
        m.seen_ago = Duration::from_secs(31);
        assert!(m.gone());
    }

    use crate::election::Status;
    use crate::store::memory::{Faults, MemoryStore};
    use crate::store::{LeaseStore, RecordOrder};

    const ELECTION: &str = "preempted";

    fn record(id: &str, priority: i64) -> MemberRecord {
        MemberRecord {
            election: ELECTION.to_owned(),
            node_id: id.to_owned(),
            standing: MemberStanding::Candidate,
            priority,
            version: String::new(),
            host: String::new(),
            order: RecordOrder::default(),
        }
    }

    /// Leader `a` (priority 1) holds the row and is a member; `b` (priority 9, preempting
    /// after 1 s) runs its members task with `status` saying what its election sees.
    async fn b_beside_leader_a(
        status: watch::Receiver<Status>,
        b_faults: Faults,
    ) -> (MemoryStore, watch::Sender<bool>, JoinHandle<()>) {
        let store = MemoryStore::new();
        let mut leader = store.handle();
        leader.ensure_row(ELECTION).await.unwrap();
        store.overwrite(ELECTION, "a", 7, Duration::from_secs(3600));
        leader.record_member(&record("a", 1), true).await.unwrap();
        let standing = watch::channel(Standing {
            candidate: true,
            ..Standing::default()
        });
        let stopping = watch::channel(false);
        let b = store.handle();
        b.set_faults(b_faults);
        let task = tokio::spawn(run(
            record("b", 9),
            b,
            status,
            standing.1,
            stopping.1,
            Duration::from_secs(1),
        ));
        std::mem::forget(standing.0);
        (store, stopping.0, task)
    }

    fn leads(leader: Option<&str>) -> Status {
        Status {
            leader: leader.map(str::to_owned),
            term: leader.map(|_| 7),
            ..Status::initial()
        }
    }

    /// Seed 6730 of the simulator: preemption was judged only every
    /// [`PREEMPT_PERIOD`], so a candidate that saw the leader only after its last judgement
    /// (the election had none then) waited up to 10 s. A new leader wakes the task.
    #[tokio::test(start_paused = true)]
    async fn a_new_leader_is_judged_for_preemption_at_once() {
        let (status_tx, status) = watch::channel(leads(None));
        let (store, _stopping, task) = b_beside_leader_a(status, Faults::default()).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(store.row(ELECTION).unwrap().pending.handover_to, None);
        status_tx.send_replace(leads(Some("a")));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let row = store.row(ELECTION).unwrap();
        assert_eq!(row.pending.handover_to.as_deref(), Some("b"), "{row:?}");
        task.abort();
    }

    /// Seed 3503: a preemption whose statement failed was judged again only a
    /// [`PREEMPT_PERIOD`] later; it is retried after [`RETRY_AFTER`]. Here the first
    /// hold's answer is lost (at 1 s, once `b` has been a member for `preempt_after`).
    #[tokio::test(start_paused = true)]
    async fn a_failed_preemption_is_retried_after_a_second() {
        let (_status_tx, status) = watch::channel(leads(Some("a")));
        let hold_lost = Faults {
            lose_next_write_answer: true,
            ..Faults::default()
        };
        let (store, _stopping, task) = b_beside_leader_a(status, hold_lost).await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let row = store.row(ELECTION).unwrap();
        assert_eq!(row.pending.handover_to.as_deref(), Some("b"), "{row:?}");
        task.abort();
    }

    #[test]
    fn only_a_higher_priority_member_of_long_enough_preempts() {
        let after = Duration::from_secs(10);
        let members = vec![member("a", 5, 100), member("b", 5, 100), member("c", 9, 5)];
        // Equal priority never preempts; c is too recent, and may in 5 s.
        assert_eq!(should_preempt(&members, "b", "a", after), Err(None));
        assert_eq!(
            should_preempt(&members, "c", "a", after),
            Err(Some(Duration::from_secs(5)))
        );
        let members = vec![member("a", 5, 100), member("c", 9, 10), member("d", 7, 50)];
        assert_eq!(should_preempt(&members, "c", "a", after), Ok(()));
        // d is outranked by c, which is ready: d leaves it to c for a while, then asks
        // itself (c may have preemption turned off).
        let d_left = after + DEFER_TO_BETTER - Duration::from_secs(15);
        let mut recent = members.clone();
        recent[2].member_for = Duration::from_secs(15);
        assert_eq!(should_preempt(&recent, "d", "a", after), Err(Some(d_left)));
        assert_eq!(should_preempt(&members, "d", "a", after), Ok(()));
        let mut held = members.clone();
        held[1].no_preempt_for = Some(Duration::from_secs(3));
        assert_eq!(
            should_preempt(&held, "c", "a", after),
            Err(Some(Duration::from_secs(3)))
        );
        assert_eq!(should_preempt(&held, "d", "a", after), Ok(()));
        assert_eq!(should_preempt(&recent, "c", "a", after), Ok(()));
        let mut unable = members.clone();
        unable[1].standing = Some(MemberStanding::Unhealthy);
        assert_eq!(should_preempt(&unable, "c", "a", after), Err(None));
        assert_eq!(should_preempt(&unable, "d", "a", after), Ok(()));
        let mut gone = members.clone();
        gone[0].standing = Some(MemberStanding::Stopped);
        assert_eq!(should_preempt(&gone, "c", "a", after), Err(None));
    }
}
