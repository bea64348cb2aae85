//! The election loop against the in-memory store, with tokio's clock paused: time only
//! moves when every task waits, so timings are exact and the tests fast.

use super::*;
use crate::store::memory::{Faults, MemoryStore};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const ELECTION: &str = "jobs";
const TTL: Duration = Duration::from_millis(1200);
const INTERVAL: Duration = Duration::from_secs(1);
const STEP: Duration = Duration::from_millis(1);

struct Node {
    id: &'static str,
    store: MemoryStore,
    status: watch::Receiver<Status>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Node {
    fn start(table: &MemoryStore, id: &'static str) -> Node {
        let store = table.handle();
        let settings = ElectionSettings::new(ELECTION, id, TTL, INTERVAL).unwrap();
        let (election, status) = Election::new(settings, store.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            election
                .run(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Node {
            id,
            store,
            status,
            stop: Some(stop),
            task,
        }
    }

    fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    fn is_leader(&self) -> bool {
        self.status().role == Role::Leader
    }

    fn faults(&self, faults: Faults) {
        self.store.set_faults(faults);
    }

    async fn stop(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        (&mut self.task).await.unwrap();
    }
}

/// The safety property: whoever acts as leader holds a live lease in the table, in the
/// term it reports; so at most one node acts as leader at any instant.
fn check_invariant(table: &MemoryStore, nodes: &[&Node]) {
    let leaders: Vec<_> = nodes.iter().filter(|n| n.is_leader()).collect();
    assert!(
        leaders.len() <= 1,
        "two leaders at {:?}: {:?}",
        Instant::now(),
        leaders.iter().map(|n| n.id).collect::<Vec<_>>()
    );
    if let Some(leader) = leaders.first() {
        let row = table.row(ELECTION).expect("a leader implies a row");
        let status = leader.status();
        assert_eq!(
            row.live_holder(),
            Some(leader.id),
            "{} acts as leader without a live lease: {row:?}",
            leader.id
        );
        assert_eq!(
            Some(row.term),
            status.term,
            "{} acts as leader in a stale term",
            leader.id
        );
        // Paused time moves tokio's clock only, so compare monotonic instants.
        let deadline = status.lease_deadline.expect("a leader has a deadline");
        assert!(
            deadline <= Instant::now() + row.remaining(),
            "{} may act as leader after its lease lapses",
            leader.id
        );
    }
}

/// Lets `duration` of virtual time pass, checking the invariant every millisecond.
async fn run_checked(duration: Duration, table: &MemoryStore, nodes: &[&Node]) {
    let end = Instant::now() + duration;
    while Instant::now() < end {
        tokio::time::sleep(STEP).await;
        check_invariant(table, nodes);
    }
}

/// Runs until `condition` holds (checking the invariant), and returns how long that took.
async fn until(
    limit: Duration,
    table: &MemoryStore,
    nodes: &[&Node],
    condition: impl Fn() -> bool,
) -> Duration {
    let start = Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < limit,
            "condition not reached within {limit:?}"
        );
        tokio::time::sleep(STEP).await;
        check_invariant(table, nodes);
    }
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn lone_node_leads_and_renews_in_one_term() {
    let table = MemoryStore::new();
    let a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    run_checked(Duration::from_secs(10), &table, &[&a]).await;
    let status = a.status();
    assert_eq!(
        (status.role, status.term, status.leader.as_deref()),
        (Role::Leader, Some(1), Some("a"))
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
        assert_eq!(status.term, Some(1), "{} disagrees on the term", node.id);
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
    assert_eq!(b.status().term, Some(2));

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

/// A stops cleanly with B following; returns how long B took to lead after A released,
/// and the operations B sent meanwhile.
async fn handover_after_release(table: MemoryStore) -> (Duration, u64) {
    let mut a = Node::start(&table, "a");
    until(Duration::from_millis(10), &table, &[&a], || a.is_leader()).await;
    let b = Node::start(&table, "b");
    run_checked(Duration::from_millis(1500), &table, &[&a, &b]).await;

    let before = b.store.operations();
    a.stop().await;
    assert_eq!(a.status().role, Role::Unknown);
    assert_eq!(a.status().valid_until, a.status().updated_at);
    // Released (and, if b was told, maybe taken already).
    assert_ne!(table.row(ELECTION).unwrap().live_holder(), Some("a"));
    let waited = until(INTERVAL + STEP * 5, &table, &[&a, &b], || b.is_leader()).await;
    assert_eq!(b.status().term, Some(2));
    (waited, b.store.operations() - before)
}

#[tokio::test(start_paused = true)]
async fn a_stopped_leader_releases_and_a_notified_follower_takes_over_at_once() {
    let (waited, operations) = handover_after_release(MemoryStore::new()).await;
    assert!(waited.is_zero(), "took {waited:?}");
    // The claim alone, in the term b last saw: no read first.
    assert_eq!(operations, 1);
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
    assert_eq!(b.status().term, Some(1));
    // Between two of b's polls, x takes over in term 5 (a's renewals now fail) and
    // gives the lease up again at once.
    table.overwrite(ELECTION, "x", 5, TTL);
    let before = b.store.operations();
    let mut x = table.handle();
    assert!(x.release(ELECTION, "x", 5).await.unwrap());
    until(STEP * 5, &table, &[&b], || b.is_leader()).await;
    assert_eq!(b.status().term, Some(6));
    // The claim in term 1, the read, the claim in term 5.
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

/// Creates the row and takes it in term 1 for "ghost", a holder that never renews.
async fn ghost_holds_term_one(table: &MemoryStore) {
    let mut ghost = table.handle();
    ghost.ensure_row(ELECTION).await.unwrap();
    let claimed = ghost.claim(ELECTION, "ghost", ProcessToken::random(), TTL, 0);
    assert!(claimed.await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_node_stopped_while_its_claim_is_in_flight_releases_what_the_claim_took() {
    let table = MemoryStore::new();
    // Its lease lapses and b claims it.
    ghost_holds_term_one(&table).await;
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
        (row.holder, row.term),
        (None, 2),
        "the claim landed and was released"
    );
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
    a.faults(Faults::default());
    // Retries start at 50 ms: a finds the row in the term it may have taken and starts
    // the next term, instead of waiting for "someone else's" lease to lapse.
    let waited = until(TTL, &table, &[&a], || a.is_leader()).await;
    assert!(waited < TTL / 2, "{waited:?}");
    assert_eq!(a.status().term, Some(2));
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
    // A lapsed lease, in term 1: both twins claim in that term.
    ghost_holds_term_one(&table).await;
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
    assert_eq!(first.status().term, Some(2));

    // check_invariant fails at once should both act as leader.
    run_checked(Duration::from_secs(5), &table, &twins).await;
    assert!(first.is_leader());
    assert_eq!(first.status().term, Some(2), "the first kept its term");
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
    assert_eq!(table.row(ELECTION).unwrap().term, 1);
    // ...and loses the answer to that.
    a.faults(Faults {
        lose_next_write_answer: true,
        ..Faults::default()
    });
    let waited = until(TTL, &table, &[&a], || a.is_leader()).await;
    assert!(waited < TTL / 4, "led again {waited:?} after the deadline");
    assert_eq!(
        a.status().term,
        Some(3),
        "the lost reacquire's term 2, then the next"
    );
    assert_eq!(logs.count("same node id"), 0);
}

/// Collects the log lines written on this thread (the paused-time runtime is
/// single-threaded, so the spawned election logs here too).
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn count(&self, text: &str) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .matches(text)
            .count()
    }
}

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
    assert_eq!(leader.status().term, Some(1));
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
    assert_eq!(
        first,
        RoleEvent::LeaderChanged {
            previous: None,
            current: Some("a".into()),
            term: Some(1)
        }
    );
    assert_eq!(events.recv().await.unwrap(), RoleEvent::Elected { term: 1 });

    store.set_faults(Faults {
        fail: true,
        ..Faults::default()
    });
    assert_eq!(events.recv().await.unwrap(), RoleEvent::Demoted { term: 1 });
    assert_eq!(
        events.recv().await.unwrap(),
        RoleEvent::LeaderChanged {
            previous: Some("a".into()),
            current: None,
            term: Some(1)
        }
    );
    assert_eq!(status.borrow().role, Role::Unknown);
    let _ = stop.send(());
    task.await.unwrap();
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

    // A stopping leader still renews; a stopping follower takes nothing.
    leader_gate.close();
    follower_gate.close();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(leader_status.borrow().term, Some(1));
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
async fn a_resigning_leader_releases_and_claims_nothing_for_one_ttl() {
    let table = MemoryStore::new();
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let (mut election, status) = Election::new(settings, table.handle());
    let resign = election.resign_handle();
    tokio::spawn(election.run(std::future::pending()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(status.borrow().role, Role::Leader);

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
        (now.role, now.term),
        (Role::Leader, Some(2)),
        "then it leads again"
    );
}

/// A boot clock that follows tokio's clock, plus the time a test says the host slept.
#[derive(Clone, Default)]
struct SleepingHost(Arc<std::sync::atomic::AtomicU64>);

impl SleepingHost {
    fn clock(&self) -> BootClock {
        let slept = Arc::clone(&self.0);
        Arc::new(move || {
            boottime_by_tokio()
                + Duration::from_nanos(slept.load(std::sync::atomic::Ordering::SeqCst))
        })
    }

    /// The host was suspended for `duration`: boot time moves, monotonic time does not.
    fn sleep(&self, duration: Duration) {
        self.0.fetch_add(
            duration.as_nanos() as u64,
            std::sync::atomic::Ordering::SeqCst,
        );
    }
}

fn start_on_sleeping_host(store: &MemoryStore, host: &SleepingHost) -> watch::Receiver<Status> {
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let (mut election, status) = Election::new(settings, store.clone());
    election.set_boot_clock(host.clock());
    tokio::spawn(election.run(std::future::pending()));
    status
}

#[tokio::test(start_paused = true)]
async fn a_leader_stops_acting_when_the_host_slept_past_its_deadline() {
    let table = MemoryStore::new();
    let host = SleepingHost::default();
    let status = start_on_sleeping_host(&table, &host);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(status.borrow().role, Role::Leader);

    // Right after a renewal the monotonic deadline is over a second away; the host
    // sleeps for two.
    tokio::time::sleep(INTERVAL).await;
    let before = status.borrow().clone();
    assert_eq!(before.role, Role::Leader);
    assert!(before.lease_deadline.unwrap() > Instant::now() + TTL - INTERVAL);
    host.sleep(Duration::from_secs(2));
    tokio::time::sleep(BOOT_LOOK_EVERY + STEP).await;
    let after = status.borrow().clone();
    assert_ne!(
        after.role,
        Role::Leader,
        "still leading after the host slept past the lease"
    );
    assert!(after.valid_until <= SystemTime::now() + INTERVAL + TTL);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_answered_after_the_host_slept_is_not_trusted() {
    let table = MemoryStore::new();
    let host = SleepingHost::default();
    let store = table.handle();
    let status = start_on_sleeping_host(&store, &host);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let led = status.borrow().term;
    // Every answer now takes 30 ms: the next renewal is sent, the host sleeps while it
    // is on its way, and its answer arrives after the wake.
    store.set_faults(Faults {
        answer_delay: Duration::from_millis(30),
        ..Faults::default()
    });
    let renewed = status.borrow().lease_deadline.unwrap() - (TTL - safety_margin(TTL));
    tokio::time::sleep_until(renewed + INTERVAL + Duration::from_millis(10)).await;
    host.sleep(Duration::from_secs(2));
    // The answer is in 20 ms later; the next look at the boot clock is 90 ms away.
    tokio::time::sleep(Duration::from_millis(40)).await;
    let seen = status.borrow().clone();
    assert!(
        !(seen.role == Role::Leader && seen.term == led),
        "a renewal sent before the host slept extended the lease: {seen:?}"
    );
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
