//! Leading and renewing: one leader, agreed on; a failed, silent, refused or late renewal
//! ends leadership before the lease can lapse; an unreachable database makes every role
//! unknown.

use super::*;

#[tokio::test(start_paused = true)]
async fn lone_node_leads_and_renews_in_one_term() {
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    run_checked(Duration::from_secs(10), &table, &[&a]).await;
    let status = a.status();
    assert_eq!(
        (status.role, status.term, status.leader.as_deref()),
        (
            Role::Leader,
            Some(table.row(ELECTION).unwrap().term),
            Some("a")
        )
    );
    assert!(status.lease_deadline.unwrap() > Instant::now() + TTL - INTERVAL - STEP * 5);
}

#[tokio::test(start_paused = true)]
async fn three_nodes_elect_one_leader_and_agree_on_it() {
    let table = MemoryStore::new();
    let nodes = [
        Node::start(&table, "a"),
        Node::start(&table, "b"),
        Node::start(&table, "c"),
    ];
    let all: Vec<&Node> = nodes.iter().collect();
    run_checked(Duration::from_secs(3), &table, &all).await;
    let leaders: Vec<_> = nodes
        .iter()
        .filter(|n| n.is_leader())
        .map(|n| n.id)
        .collect();
    assert_eq!(leaders.len(), 1, "{leaders:?}");
    for node in &nodes {
        let status = node.status();
        assert_eq!(
            status.leader.as_deref(),
            Some(leaders[0]),
            "{} disagrees",
            node.id
        );
        let term = table.row(ELECTION).unwrap().term;
        assert_eq!(status.term, Some(term), "{} disagrees on the term", node.id);
    }
}

#[tokio::test(start_paused = true)]
async fn failing_renewals_demote_before_the_lease_lapses_and_a_follower_takes_over() {
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    let b = Node::start(&table, "b");
    run_checked(Duration::from_millis(2500), &table, &[&a, &b]).await;
    let last_renewal = Instant::now() - table.row(ELECTION).unwrap().age;
    let a_term = a.status().term;

    a.faults(Faults {
        fail: true,
        ..Faults::default()
    });
    let nodes = [&a, &b];
    until(TTL, &table, &nodes, || !a.is_leader()).await;
    let demoted_after = last_renewal.elapsed();
    assert!(
        demoted_after <= TTL,
        "demoted {demoted_after:?} after its last renewal"
    );
    assert_eq!(a.status().role, Role::Unknown);

    // b polls at the moment the lease lapses (spread a little), not up to an interval
    // later.
    until(TTL, &table, &nodes, || b.is_leader()).await;
    let taken_after = last_renewal.elapsed();
    let spread = ElectionSettings::new(ELECTION, "b", TTL, INTERVAL)
        .unwrap()
        .lapse_spread();
    assert_eq!(spread, TTL / 64);
    assert!(
        taken_after >= TTL && taken_after <= TTL + spread + STEP * 5,
        "taken over {taken_after:?} after the last renewal"
    );
    assert!(b.status().term > a_term);

    // a comes back as a follower of b.
    a.faults(Faults::default());
    run_checked(Duration::from_secs(3), &table, &nodes).await;
    assert_eq!(
        (a.status().role, a.status().leader.as_deref()),
        (Role::Follower, Some("b"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_never_answers_demotes_at_the_deadline() {
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    let b = Node::start(&table, "b");
    run_checked(Duration::from_millis(1500), &table, &[&a, &b]).await;
    let (leader, follower) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    let deadline = leader.status().lease_deadline.unwrap();
    leader.faults(Faults {
        hang: true,
        ..Faults::default()
    });
    // Wait on the channel itself: paused time jumps straight to the next timer, so this
    // wakes at the instant the role changed.
    let mut status = leader.status.clone();
    tokio::time::timeout(TTL, status.wait_for(|s| s.role != Role::Leader))
        .await
        .expect("still leader a ttl after its renewal stalled")
        .unwrap();
    // tokio timers have millisecond resolution.
    assert!(
        Instant::now() <= deadline + STEP,
        "demoted {:?} after the deadline",
        Instant::now() - deadline
    );
    until(TTL, &table, &[&a, &b], || follower.is_leader()).await;
}

#[tokio::test(start_paused = true)]
async fn an_answer_after_the_deadline_does_not_restore_leadership_in_the_same_term() {
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    // Renewals still take effect, but their answers come back after the local deadline.
    a.faults(Faults {
        answer_delay: TTL - INTERVAL + Duration::from_millis(50),
        ..Faults::default()
    });
    let mut leader_terms = Vec::new();
    let end = Instant::now() + Duration::from_secs(6);
    while Instant::now() < end {
        tokio::time::sleep(STEP).await;
        check_invariant(&table, &[&a]);
        let status = a.status();
        if status.role == Role::Leader && leader_terms.last() != status.term.as_ref() {
            leader_terms.push(status.term.unwrap());
        }
    }
    assert!(leader_terms.len() >= 2, "{leader_terms:?}");
    assert!(
        leader_terms.windows(2).all(|w| w[0] < w[1]),
        "a term was led twice: {leader_terms:?}"
    );

    a.faults(Faults::default());
    run_checked(Duration::from_secs(2), &table, &[&a]).await;
    let term = a.status().term;
    run_checked(Duration::from_secs(5), &table, &[&a]).await;
    assert!(a.is_leader());
    assert_eq!(a.status().term, term, "a healthy leader keeps its term");
}

#[tokio::test(start_paused = true)]
async fn a_refused_renewal_demotes_at_once() {
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    run_checked(Duration::from_millis(500), &table, &[&a]).await;
    // An operator (or a stepped database clock) hands the row to someone else.
    table.overwrite(ELECTION, "intruder", 9, TTL);
    let mut status = a.status.clone();
    let deadline = a.status().lease_deadline.unwrap();
    tokio::time::timeout(INTERVAL, status.wait_for(|s| s.role != Role::Leader))
        .await
        .expect("demoted at the next renewal")
        .unwrap();
    assert!(
        Instant::now() < deadline - Duration::from_millis(100),
        "demoted by the answer, not the deadline"
    );
    until(Duration::from_millis(10), &table, &[&a], || {
        a.status().leader.as_deref() == Some("intruder")
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_database_makes_every_role_unknown_until_it_returns() {
    let table = MemoryStore::new();
    let nodes = [Node::start(&table, "a"), Node::start(&table, "b")];
    let all: Vec<&Node> = nodes.iter().collect();
    run_checked(Duration::from_secs(2), &table, &all).await;
    for node in &nodes {
        node.faults(Faults {
            fail: true,
            ..Faults::default()
        });
    }
    run_checked(TTL + INTERVAL, &table, &all).await;
    assert!(nodes.iter().all(|n| n.status().role == Role::Unknown));
    for node in &nodes {
        node.faults(Faults::default());
    }
    // Retries back off to one interval at most; the old lease has lapsed by now.
    until(INTERVAL + STEP * 10, &table, &all, || {
        nodes.iter().any(|n| n.is_leader())
    })
    .await;
    run_checked(Duration::from_secs(2), &table, &all).await;
    assert_eq!(nodes.iter().filter(|n| n.is_leader()).count(), 1);
    assert!(nodes.iter().all(|n| n.status().role != Role::Unknown));
}
