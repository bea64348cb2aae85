//! What rounds cost and report: one statement in steady state, spread lapse polls, round
//! reports, role events, and a warning when round trips eat the renew margin.

use super::*;

#[tokio::test(start_paused = true)]
async fn round_trips_thin_against_the_renew_margin_are_warned_about_once() {
    let (logs, _guard) = Logs::capture();
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    run_checked(Duration::from_secs(2), &table, &[&a]).await;
    assert_eq!(logs.count("round trip is more than half"), 0);

    // 150 ms is more than half of the 200 ms between ttl and interval.
    a.faults(Faults {
        latency: Duration::from_millis(150),
        ..Faults::default()
    });
    run_checked(Duration::from_secs(5), &table, &[&a]).await;
    assert!(a.is_leader(), "thin, but still in time");
    assert_eq!(logs.count("round trip is more than half"), 1);

    a.faults(Faults::default());
    run_checked(Duration::from_secs(3), &table, &[&a]).await;
    assert_eq!(logs.count("back well inside the renew margin"), 1);
    assert_eq!(logs.count("round trip is more than half"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_steady_round_costs_one_operation_for_leader_and_follower() {
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    let b = Node::start(&table, "b");
    run_checked(Duration::from_millis(2500), &table, &[&a, &b]).await;
    let before = (a.store.operations(), b.store.operations());
    run_checked(Duration::from_secs(10), &table, &[&a, &b]).await;
    let rounds = (
        a.store.operations() - before.0,
        b.store.operations() - before.1,
    );
    // Ten intervals: ten renewals and ten reads (the follower's poll at the expected
    // lapse lands on its regular round, the lease being renewed meanwhile).
    assert!((10..=11).contains(&rounds.0), "leader: {rounds:?}");
    assert!((10..=11).contains(&rounds.1), "follower: {rounds:?}");
}

/// Starts 30 followers over one interval, as nodes on many hosts would start, each with
/// `faults` on its connection; returns when each round of theirs ended, and their stops.
async fn start_followers(
    table: &MemoryStore,
    faults: Faults,
) -> (
    Arc<std::sync::Mutex<Vec<Instant>>>,
    Vec<oneshot::Sender<()>>,
) {
    let reads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut stops = Vec::new();
    for follower in 0..30 {
        tokio::time::sleep(INTERVAL / 30).await;
        let settings =
            ElectionSettings::new(ELECTION, &format!("f{follower}"), TTL, INTERVAL).unwrap();
        let store = table.handle();
        store.set_faults(faults.clone());
        let (mut election, _status) = Election::new(settings, store);
        let seen = Arc::clone(&reads);
        election.observe(Arc::new(move |_| seen.lock().unwrap().push(Instant::now())));
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(election.run(async move {
            let _ = stopped.await;
        }));
        stops.push(stop);
    }
    (reads, stops)
}

/// Followers that expect the lease to lapse read within `lapse_spread` after the instant
/// it can lapse, each at its own moment: were they all to read at that instant, they would
/// all read together again right after each renewal.
#[tokio::test(start_paused = true)]
async fn followers_spread_their_polls_at_the_lapse() {
    let table = MemoryStore::new();
    let leader = Node::start(&table, "leader");
    until(Duration::from_millis(10), &table, &[&leader], || {
        leader.is_leader()
    })
    .await;
    let (reads, stops) = start_followers(&table, Faults::default()).await;
    // Long enough for spreads that shrink from round to round to have shrunk.
    run_checked(Duration::from_secs(20), &table, &[&leader]).await;
    reads.lock().unwrap().clear();
    run_checked(Duration::from_secs(3), &table, &[&leader]).await;
    let reads = reads.lock().unwrap().clone();
    assert!(reads.len() >= 90, "{} reads", reads.len());
    // Those that read after the lease had less than an interval left (most of them) would
    // otherwise all read at one instant after each renewal.
    let mut at_once = std::collections::HashMap::new();
    for read in &reads {
        *at_once.entry(*read).or_insert(0) += 1;
    }
    let most = at_once.values().max().copied().unwrap_or(0);
    assert!(most <= 8, "{most} followers read at one instant");
    assert_eq!(
        leader.status().term,
        Some(table.row(ELECTION).unwrap().term)
    );
    for stop in stops {
        let _ = stop.send(());
    }
}

/// While reads are slow, lapse polls spread wider: over four round trips (here 4 × 15 ms),
/// up to a quarter of the interval, instead of min(ttl/64, 20 ms).
#[tokio::test(start_paused = true)]
async fn slow_reads_spread_lapse_polls_wider() {
    let table = MemoryStore::new();
    let leader = Node::start(&table, "leader");
    until(Duration::from_millis(10), &table, &[&leader], || {
        leader.is_leader()
    })
    .await;
    let faults = Faults {
        latency: Duration::from_millis(15),
        ..Faults::default()
    };
    let (reads, stops) = start_followers(&table, faults).await;
    run_checked(Duration::from_secs(5), &table, &[&leader]).await;
    let renewed = Instant::now() - table.row(ELECTION).unwrap().age;
    reads.lock().unwrap().clear();
    run_checked(INTERVAL * 2, &table, &[&leader]).await;
    // Reads answered just after the lapse following `renewed`: at the lapse plus
    // the read's own 15 ms, plus the spread.
    let lapse = renewed + TTL;
    let offsets: Vec<Duration> = reads
        .lock()
        .unwrap()
        .iter()
        .filter(|r| **r >= lapse && **r < lapse + Duration::from_millis(100))
        .map(|r| *r - lapse)
        .collect();
    assert!(offsets.len() >= 15, "{offsets:?}");
    let widest = offsets.iter().max().unwrap();
    assert!(
        *widest > Duration::from_millis(15) + TTL / 64,
        "spread over {widest:?}"
    );
    assert!(
        *widest <= Duration::from_millis(15 + 60),
        "spread over {widest:?}"
    );
    for stop in stops {
        let _ = stop.send(());
    }
}

/// Round reports count the statements each round sent, matching what reached the store.
#[tokio::test(start_paused = true)]
async fn round_reports_count_the_statements_sent() {
    let table = MemoryStore::new();
    let store = table.handle();
    let (mut election, _status) = Election::new(
        ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap(),
        store.clone(),
    );
    let reports = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&reports);
    election.observe(Arc::new(move |report| {
        seen.lock().unwrap().push(report.clone())
    }));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(election.run(async move {
        let _ = stopped.await;
    }));
    tokio::time::sleep(INTERVAL * 5 + STEP).await;
    let counted: Vec<u64> = reports
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.statements)
        .collect();
    // An empty table: read, create the row, claim; then one renewal a round.
    assert_eq!(counted, [3, 1, 1, 1, 1, 1]);
    assert_eq!(counted.iter().sum::<u64>(), store.operations());
    let completed: Vec<u64> = reports
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.completed)
        .collect();
    assert_eq!(completed, [1, 2, 3, 4, 5, 6]);
    let _ = stop.send(());
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn role_changes_are_reported_as_events_in_order() {
    let table = MemoryStore::new();
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let store = table.handle();
    let (mut election, status) = Election::new(settings, store.clone());
    let mut events = election.events();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(election.run(async move {
        let _ = stopped.await;
    }));
    let first = events.recv().await.unwrap();
    let term = table.row(ELECTION).unwrap().term;
    assert_eq!(
        first,
        RoleEvent::LeaderChanged {
            previous: None,
            current: Some("a".into()),
            term: Some(term)
        }
    );
    assert_eq!(events.recv().await.unwrap(), RoleEvent::Elected { term });

    store.set_faults(Faults {
        fail: true,
        ..Faults::default()
    });
    assert_eq!(events.recv().await.unwrap(), RoleEvent::Demoted { term });
    assert_eq!(
        events.recv().await.unwrap(),
        RoleEvent::LeaderChanged {
            previous: Some("a".into()),
            current: None,
            term: Some(term)
        }
    );
    assert_eq!(status.borrow().role, Role::Unknown);
    let _ = stop.send(());
    task.await.unwrap();
}

/// A gate from `extra_claim_gate` keeps a node from claiming even a free lease while it
/// is closed (its reads go on), and lets it claim once opened again; the stop gate stays
/// in force whatever the extra gate does.
#[tokio::test(start_paused = true)]
async fn an_extra_claim_gate_closes_and_reopens_candidacy() {
    let table = MemoryStore::new();
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let (mut election, status) = Election::new(settings, table.handle());
    let health = election.extra_claim_gate();
    let stop_gate = election.claim_gate();
    health.close();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(election.run(async move {
        let _ = stopped.await;
    }));
    tokio::time::sleep(INTERVAL * 5).await;
    assert_eq!(status.borrow().role, Role::Follower);
    assert!(table.row(ELECTION).is_none_or(|row| row.holder.is_none()));
    health.open();
    tokio::time::sleep(INTERVAL * 2).await;
    assert_eq!(status.borrow().role, Role::Leader);
    assert_eq!(table.row(ELECTION).unwrap().holder.as_deref(), Some("a"));
    // The stop gate, once closed, is not reopened by the health gate.
    let _ = stop.send(());
    stop_gate.close();
    health.open();
    task.await.unwrap();
}
