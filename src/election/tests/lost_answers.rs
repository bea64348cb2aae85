//! Answers lost on the way back, and two processes with one node id: the term in doubt is
//! told apart by its process token.

use super::*;

#[tokio::test(start_paused = true)]
async fn two_processes_with_one_node_id_never_lead_together() {
    let table = MemoryStore::new();
    let mut first = Node::start(&table, "twin");
    let second = Node::start(&table, "twin");
    run_checked(Duration::from_secs(5), &table, &[&first, &second]).await;
    assert_eq!(
        [&first, &second].iter().filter(|n| n.is_leader()).count(),
        1
    );
    let (mut leader, other) = if first.is_leader() {
        (first, second)
    } else {
        (second, first)
    };
    leader.stop().await;
    until(INTERVAL + STEP * 5, &table, &[&leader, &other], || {
        other.is_leader()
    })
    .await;
    first = leader;
    assert!(!first.is_leader());
}

#[tokio::test(start_paused = true)]
async fn a_claim_whose_answer_was_lost_is_picked_up_without_waiting_for_a_lapse() {
    let (logs, _guard) = Logs::capture();
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    a.faults(Faults {
        lose_write_answers: true,
        ..Faults::default()
    });
    until(Duration::from_millis(50), &table, &[&a], || {
        table
            .row(ELECTION)
            .is_some_and(|r| r.holder.as_deref() == Some("a"))
    })
    .await;
    assert!(!a.is_leader(), "never heard back");
    let lost = table.row(ELECTION).unwrap().term;
    a.faults(Faults::default());
    // Retries start at 50 ms: a finds the row in the term it may have taken and starts
    // the next term, instead of waiting for "someone else's" lease to lapse.
    let waited = until(TTL, &table, &[&a], || a.is_leader()).await;
    assert!(waited < TTL / 2, "{waited:?}");
    assert!(a.status().term > Some(lost), "the next term after {lost}");
    assert_eq!(logs.count("same node id"), 0);
}

/// Two processes run with one node id. The second one's claim reaches the table just after
/// the first one's, and its answer is lost: the row then names "its" id in the very term
/// that claim would have started, but shows the first process's token for it, so the
/// second leaves the live lease alone instead of starting a new term over it.
#[tokio::test(start_paused = true)]
async fn a_twin_whose_claim_answer_was_lost_leaves_the_live_lease_alone() {
    let (logs, _guard) = Logs::capture();
    let table = MemoryStore::new();
    // A lapsed lease: both twins claim in its term.
    let ghost_term = ghost_holds_a_term(&table).await;
    tokio::time::sleep(TTL).await;
    // The second reads the free row at once, but hears back only 100 ms later; by then
    // the first has taken the lease.
    let second = Node::start(&table, "twin");
    second.faults(Faults {
        answer_delay: Duration::from_millis(100),
        lose_next_write_answer: true,
        ..Faults::default()
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let first = Node::start(&table, "twin");
    let twins = [&first, &second];
    until(Duration::from_millis(10), &table, &twins, || {
        first.is_leader()
    })
    .await;
    let taken = first.status().term;
    assert!(taken > Some(ghost_term));

    // check_invariant fails at once should both act as leader.
    run_checked(Duration::from_secs(5), &table, &twins).await;
    assert!(first.is_leader());
    assert_eq!(first.status().term, taken, "the first kept its term");
    assert_eq!(
        (second.status().role, second.status().leader.as_deref()),
        (Role::Follower, Some("twin"))
    );
    assert_eq!(
        logs.count("same node id"),
        1,
        "the second saw a foreign term"
    );
}

/// A node that stopped acting as leader starts a new term (reacquire), and that answer is
/// lost. Its next read shows the in-doubt term with its own token: it takes that term up at
/// once, rather than taking it for another process's and waiting a ttl with no leader.
#[tokio::test(start_paused = true)]
async fn a_reacquire_whose_answer_was_lost_leads_again_at_once() {
    let (logs, _guard) = Logs::capture();
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    run_checked(Duration::from_millis(500), &table, &[&a]).await;
    // A renewal that takes effect but answers after the deadline: a stops acting as
    // leader, and then reacquires...
    a.faults(Faults {
        answer_delay: TTL - INTERVAL + Duration::from_millis(50),
        ..Faults::default()
    });
    let mut status = a.status.clone();
    tokio::time::timeout(TTL * 2, status.wait_for(|s| s.role != Role::Leader))
        .await
        .expect("the late answer ends leadership at the deadline")
        .unwrap();
    let lapsed = table.row(ELECTION).unwrap().term;
    assert_eq!(Some(lapsed), a.status().term, "no new term yet");
    // ...and loses the answer to that.
    a.faults(Faults {
        lose_next_write_answer: true,
        ..Faults::default()
    });
    let waited = until(TTL, &table, &[&a], || a.is_leader()).await;
    assert!(waited < TTL / 4, "led again {waited:?} after the deadline");
    assert!(
        a.status().term >= Some(lapsed + 2),
        "the lost reacquire's term, then the next: {:?} after {lapsed}",
        a.status().term
    );
    assert_eq!(logs.count("same node id"), 0);
}
