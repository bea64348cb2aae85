//! Handing the lease over: release on stop, release notifications, resigning, the claim
//! gate, and a release held back until the status is durable.

use super::*;

/// A stops cleanly with B following; returns how long B took to lead after A released,
/// and the operations B sent meanwhile.
async fn handover_after_release(table: MemoryStore) -> (Duration, u64) {
    let mut a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    let b = Node::start(&table, "b");
    run_checked(Duration::from_millis(1500), &table, &[&a, &b]).await;

    let before = b.store.operations();
    let a_term = a.status().term;
    a.stop().await;
    assert_eq!(a.status().role, Role::Unknown);
    assert_eq!(a.status().valid_until, a.status().updated_at);
    // Released (and, if b was told, maybe taken already).
    assert_ne!(table.row(ELECTION).unwrap().live_holder(), Some("a"));
    let waited = until(INTERVAL + STEP * 5, &table, &[&a, &b], || b.is_leader()).await;
    assert!(
        b.status().term > a_term,
        "{:?} after {a_term:?}",
        b.status().term
    );
    (waited, b.store.operations() - before)
}

#[tokio::test(start_paused = true)]
async fn a_stopped_leader_releases_and_a_notified_follower_takes_over_at_once() {
    let (waited, operations) = handover_after_release(MemoryStore::new()).await;
    assert!(waited.is_zero(), "took {waited:?}");
    // The claim alone, in the term b last saw: no read first.
    assert_eq!(operations, 1);
}

/// A wake-up is acted on in the same instant: a round due now does not wait for the
/// timer's next millisecond tick (a sleep until an instant already past does).
#[tokio::test(start_paused = true)]
async fn a_notified_follower_claims_in_the_instant_of_the_release() {
    let table = MemoryStore::new();
    let mut a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    let mut b = Node::start(&table, "b");
    run_checked(Duration::from_millis(1500), &table, &[&a, &b]).await;
    // Mid-interval (b's next poll is far off, only the notification can wake it), and
    // between two of the timer's millisecond ticks, as a real release is.
    tokio::time::sleep(INTERVAL / 2).await;
    tokio::time::advance(Duration::from_micros(300)).await;
    a.stop().await;
    let released = Instant::now();
    b.status
        .wait_for(|status| status.role == Role::Leader)
        .await
        .unwrap();
    assert_eq!(Instant::now() - released, Duration::ZERO);
    b.stop().await;
}

/// A release announced after a term b never saw: the claim in b's stale term changes
/// nothing, and b reads the row and claims in the right one.
#[tokio::test(start_paused = true)]
async fn a_notified_follower_with_a_stale_term_reads_before_it_claims() {
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    let b = Node::start(&table, "b");
    run_checked(Duration::from_millis(1500), &table, &[&a, &b]).await;
    let a_term = a.status().term.unwrap();
    assert_eq!(b.status().term, Some(a_term));
    // Between two of b's polls, x takes over in a later term (a's renewals now fail) and
    // gives the lease up again at once.
    let x_term = a_term + 4;
    table.overwrite(ELECTION, "x", x_term, TTL);
    let before = b.store.operations();
    let mut x = table.handle();
    assert!(x.release(&lease("x", x_term)).await.unwrap());
    until(STEP * 5, &table, &[&b], || b.is_leader()).await;
    assert!(b.status().term > Some(x_term), "{:?}", b.status().term);
    // The claim in a's term, the read, the claim in x's.
    assert_eq!(b.store.operations() - before, 3);
}

#[tokio::test(start_paused = true)]
async fn without_notifications_a_follower_takes_over_at_its_next_poll() {
    let (waited, _) = handover_after_release(MemoryStore::without_release_notifications()).await;
    assert!(
        waited > STEP && waited <= INTERVAL + STEP * 5,
        "took {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_stopped_while_its_claim_is_in_flight_releases_what_the_claim_took() {
    let table = MemoryStore::new();
    // Its lease lapses and b claims it.
    let ghost_term = ghost_holds_a_term(&table).await;
    let mut b = Node::start(&table, "b");
    b.faults(Faults {
        latency: Duration::from_millis(100),
        ..Faults::default()
    });
    until(TTL * 2, &table, &[&b], || {
        b.store.last_operation() == "claim"
    })
    .await;
    // Stop while the claim is on its way: it still lands, and b must release it.
    b.stop().await;
    let row = table.row(ELECTION).unwrap();
    assert_eq!(
        (row.holder, row.term > ghost_term),
        (None, true),
        "the claim landed and was released"
    );
}

#[tokio::test(start_paused = true)]
async fn a_closed_claim_gate_takes_no_lease_but_keeps_the_one_held() {
    let table = MemoryStore::new();
    let settings = |id: &str| ElectionSettings::new(ELECTION, id, TTL, INTERVAL).unwrap();
    let (leader, leader_status) = Election::new(settings("a"), table.handle());
    let leader_gate = leader.claim_gate();
    let (follower, follower_status) = Election::new(settings("b"), table.handle());
    let follower_gate = follower.claim_gate();
    let (stop_a, stopped_a) = oneshot::channel::<()>();
    let a = tokio::spawn(leader.run(async move {
        let _ = stopped_a.await;
    }));
    tokio::time::sleep(Duration::from_millis(10)).await;
    tokio::spawn(follower.run(std::future::pending()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(leader_status.borrow().role, Role::Leader);
    let term = leader_status.borrow().term;

    // A stopping leader still renews; a stopping follower takes nothing.
    leader_gate.close();
    follower_gate.close();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(leader_status.borrow().term, term);
    assert_eq!(leader_status.borrow().role, Role::Leader);
    let _ = stop_a.send(());
    a.await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(follower_status.borrow().role, Role::Follower);
    assert_eq!(
        table.row(ELECTION).unwrap().holder,
        None,
        "released and not taken"
    );
}

#[tokio::test(start_paused = true)]
async fn a_gate_closed_while_a_read_is_on_its_way_stops_the_claim_after_it() {
    let table = MemoryStore::new();
    let store = table.handle();
    store.set_faults(Faults {
        latency: Duration::from_millis(50),
        ..Faults::default()
    });
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let (election, status) = Election::new(settings, store);
    let gate = election.claim_gate();
    tokio::spawn(election.run(std::future::pending()));
    // The first round reads the (missing) row for 50 ms; the gate closes meanwhile.
    tokio::time::sleep(Duration::from_millis(10)).await;
    gate.close();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_ne!(status.borrow().role, Role::Leader);
    assert_eq!(
        table.row(ELECTION).and_then(|row| row.holder),
        None,
        "claimed after the gate closed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_resigning_leader_releases_and_claims_nothing_for_one_ttl() {
    let table = MemoryStore::new();
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let (mut election, status) = Election::new(settings, table.handle());
    let resign = election.resign_handle();
    tokio::spawn(election.run(std::future::pending()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(status.borrow().role, Role::Leader);
    let resigned = status.borrow().term;

    resign.resign();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        table.row(ELECTION).unwrap().holder,
        None,
        "released at once"
    );
    // Alone, it could take the free row back at its next round; it leaves it to others
    // for a ttl first.
    tokio::time::sleep(TTL - Duration::from_millis(20)).await;
    assert_ne!(status.borrow().role, Role::Leader);
    assert_eq!(table.row(ELECTION).unwrap().holder, None);
    tokio::time::sleep(INTERVAL + Duration::from_millis(20)).await;
    let now = status.borrow().clone();
    assert_eq!(
        (now.role, now.term > resigned),
        (Role::Leader, true),
        "then it leads again, in a new term"
    );
}

#[tokio::test(start_paused = true)]
async fn a_resign_of_a_term_already_over_is_ignored() {
    let table = MemoryStore::new();
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let (mut election, status) = Election::new(settings, table.handle());
    let resign = election.resign_handle();
    tokio::spawn(election.run(std::future::pending()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let led = status.borrow().term.unwrap();

    resign.resign_term(led - 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let now = status.borrow().clone();
    assert_eq!((now.role, now.term), (Role::Leader, Some(led)));
    resign.resign_term(led);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_ne!(status.borrow().role, Role::Leader);
}

#[tokio::test(start_paused = true)]
async fn a_release_waits_until_the_status_is_durable() {
    let table = MemoryStore::new();
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let (mut election, status) = Election::new(settings, table.handle());
    let (durable, durable_versions) = watch::channel(0);
    election.release_after(durable_versions);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(election.run(async move {
        let _ = stopped.await;
    }));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status.borrow().role, Role::Leader);

    let _ = stop.send(());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_ne!(status.borrow().role, Role::Leader);
    assert_eq!(
        table.row(ELECTION).unwrap().holder.as_deref(),
        Some("a"),
        "released before the status file said non-leader"
    );
    durable.send_replace(status.borrow().version);
    let released = task.await.unwrap();
    assert!(matches!(released, Some(Ok(true))), "{released:?}");
    assert_eq!(table.row(ELECTION).unwrap().holder, None);
}

#[tokio::test(start_paused = true)]
async fn a_status_never_made_durable_lets_the_lease_lapse_unreleased() {
    let table = MemoryStore::new();
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let (mut election, status) = Election::new(settings, table.handle());
    let (_durable, durable_versions) = watch::channel(0);
    election.release_after(durable_versions);
    let resign = election.resign_handle();
    tokio::spawn(election.run(std::future::pending()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let led = status.borrow().term;

    resign.resign();
    tokio::time::sleep(TTL).await;
    let row = table.row(ELECTION).unwrap();
    assert_eq!(
        (row.holder.as_deref(), Some(row.term)),
        (Some("a"), led),
        "the release was sent although the status never became durable"
    );
    assert_eq!(row.live_holder(), None, "and the lease lapsed on its own");
}

/// `leaderd resign` on the row: the leader's next renewal fails over to a read, which
/// finds the request; it keeps renewing (stating it has seen it) and passes it on to the
/// consumer of its events, which resigns through the handle once its work is stopped.
#[tokio::test(start_paused = true)]
async fn a_resign_request_on_the_row_goes_to_the_events_and_renewals_go_on() {
    let table = MemoryStore::new();
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let store = table.handle();
    let (mut election, status) = Election::new(settings, store.clone());
    let resign = election.resign_handle();
    let mut events = election.events();
    tokio::spawn(election.run(std::future::pending()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let term = status.borrow().term.unwrap();
    assert_eq!(status.borrow().role, Role::Leader);

    let before = store.operations();
    assert!(table.request_resign(ELECTION));
    let requested = loop {
        match events.recv().await.unwrap() {
            RoleEvent::ResignRequested { term } => break term,
            _ => continue,
        }
    };
    assert_eq!(requested, term);
    // Renew refused, read, renew again: three statements, once.
    assert_eq!(store.operations() - before, 3);
    // Its work stops meanwhile (here: three rounds); it still leads, renewing.
    tokio::time::sleep(INTERVAL * 3 + Duration::from_millis(100)).await;
    assert_eq!(status.borrow().role, Role::Leader);
    assert_eq!(table.row(ELECTION).unwrap().live_holder(), Some("a"));
    assert_eq!(
        store.operations() - before,
        6,
        "one statement a round again"
    );
    resign.resign_term(term);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(table.row(ELECTION).unwrap().holder, None, "released");
    assert_ne!(status.borrow().role, Role::Leader);
}

/// Without a consumer of its events (a bare election, `leaderd lock`) nothing can stop
/// the leader's work before a release, so a resign request is refused: releasing at once
/// would let another node start while that work still runs.
#[tokio::test(start_paused = true)]
async fn a_resign_request_without_an_event_consumer_is_refused() {
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = Node::start(&table, "b");
    run_checked(Duration::from_millis(500), &table, &[&a, &b]).await;
    assert!(a.is_leader());
    let term = a.status().term;
    assert!(table.request_resign(ELECTION));
    run_checked(TTL * 3, &table, &[&a, &b]).await;
    assert!(a.is_leader(), "{:?}", a.status());
    assert_eq!(a.status().term, term, "and in the same term");
    assert!(!b.is_leader());
}

/// While paused, the leader keeps leading (and says paused); once its lease lapses
/// nobody takes it until the pause ends.
#[tokio::test(start_paused = true)]
async fn a_pause_keeps_the_leader_and_holds_a_lapsed_lease_free() {
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = Node::start(&table, "b");
    run_checked(Duration::from_millis(500), &table, &[&a, &b]).await;
    let term = a.status().term;
    table.pause(ELECTION, Duration::from_secs(10));
    run_checked(INTERVAL * 3, &table, &[&a, &b]).await;
    assert!(a.is_leader());
    assert_eq!(a.status().term, term);
    assert!(a.status().paused && b.status().paused);
    // The leader hangs: its lease lapses, and b leaves it be.
    a.faults(Faults {
        hang: true,
        ..Faults::default()
    });
    run_checked(Duration::from_secs(5), &table, &[&a, &b]).await;
    assert!(!b.is_leader() && !a.is_leader());
    assert_eq!(table.row(ELECTION).unwrap().live_holder(), None);
    // The pause ends (10 s after it began): b takes over.
    run_checked(Duration::from_secs(4), &table, &[&a, &b]).await;
    assert!(b.is_leader(), "{:?}", b.status());
    assert!(!b.status().paused);
}

/// A pause that begins just before the leader's renewal reaches the database and is over
/// before its read does (or a pause and a resume in quick succession): the read finds the
/// lease still ours, live and in its term, with the commands as the leader knew them. The
/// leader renews again rather than stepping down from a lease it holds.
#[tokio::test(start_paused = true)]
async fn a_pause_over_between_a_refused_renewal_and_its_read_keeps_the_leader() {
    let table = MemoryStore::new();
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let store = table.handle();
    let (election, status) = Election::new(settings, store.clone());
    tokio::spawn(election.run(std::future::pending()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status.borrow().role, Role::Leader);
    let term = status.borrow().term;
    let latency = Duration::from_millis(50);
    store.set_faults(Faults {
        latency,
        ..Faults::default()
    });
    // Wait for the next renewal to be sent, then pause for less than the time until the
    // read that follows a refusal reaches the table.
    let sent = store.operations();
    while store.operations() == sent {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    table.pause(ELECTION, latency + Duration::from_millis(10));
    tokio::time::sleep(INTERVAL * 2).await;
    assert_eq!(status.borrow().role, Role::Leader, "{:?}", status.borrow());
    assert_eq!(status.borrow().term, term);
}
