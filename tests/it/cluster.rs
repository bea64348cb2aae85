//! The real `leaderd` binary as several processes on each backend, broken on purpose:
//! SIGTERM, SIGKILL, SIGSTOP, and a cut database connection. Every test samples the
//! nodes' status files throughout and fails if two nodes ever claim valid leadership at
//! once, or if a term began before the previous one stopped being valid.
//!
//! Lines starting with `[measured]` report timings for the closing notes and benchmarks;
//! the assertions only check the documented bounds, with room for a loaded machine.

use crate::support as common;

use common::proxy::{Mode, Proxy};
use common::{
    Backend, Node, NodeSettings, Sampler, StatusFile, TestDb, agreed_leader, wait_agreed,
    wait_new_leader,
};
use nix::sys::signal::Signal;
use std::time::{Duration, Instant, SystemTime};

const SETTLE: Duration = Duration::from_secs(15);

fn start_nodes(db: &TestDb, settings: &NodeSettings, ids: &[&str]) -> Vec<Node> {
    ids.iter()
        .map(|id| Node::start(db, settings, id, &db.url))
        .collect()
}

fn by_id<'a>(nodes: &'a [Node], id: &str) -> &'a Node {
    nodes.iter().find(|n| n.id == id).unwrap()
}

async fn three_nodes_elect_one_leader(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let nodes = start_nodes(&db, &settings, &["a", "b", "c"]);
    let all: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let elected = wait_agreed(&mut sampler, &all).await;
    // The first term is the database clock's (microseconds since 1970), not 1.
    assert!(elected.1 > 1_700_000_000_000_000, "term {}", elected.1);
    sampler.watch(&all, Duration::from_secs(3)).await;
    assert_eq!(
        agreed_leader(&sampler.sample(&all)),
        Some(elected),
        "a healthy leader keeps its term"
    );
    sampler.check_terms();
}

async fn sigterm_hands_over_with_a_higher_term(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::default();
    let mut nodes = start_nodes(&db, &settings, &["a", "b", "c"]);
    let mut sampler = Sampler::new();
    let all: Vec<&Node> = nodes.iter().collect();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;

    let stopped = Instant::now();
    by_id(&nodes, &leader).signal(Signal::SIGTERM);
    let others: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    wait_new_leader(&mut sampler, &others, term).await;
    let handover = stopped.elapsed();
    eprintln!(
        "[measured] {backend:?}: SIGTERM to new leader's status file: {} ms",
        handover.as_millis()
    );
    assert!(
        handover <= settings.interval + Duration::from_millis(500),
        "handover took {handover:?}"
    );

    let old = nodes.iter_mut().find(|n| n.id == leader).unwrap();
    let exit = old.wait_exit(Duration::from_secs(1)).await;
    assert_eq!(exit, Some(0), "a clean stop exits 0 within a second");
    let last = old.status().unwrap();
    assert_eq!(last.role, "unknown");
    assert!(last.valid_until <= SystemTime::now());
    let all: Vec<&Node> = nodes.iter().collect();
    sampler.sample(&all);
    sampler.check_terms();
}

async fn sigkill_fails_over_within_ttl_plus_interval(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::default();
    let nodes = start_nodes(&db, &settings, &["a", "b", "c"]);
    let mut sampler = Sampler::new();
    let all: Vec<&Node> = nodes.iter().collect();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;
    // Kill at a random point of the renewal cycle, not right after an election.
    tokio::time::sleep(Duration::from_millis(
        1000 + u64::from(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .subsec_millis(),
        ),
    ))
    .await;

    let killed = Instant::now();
    by_id(&nodes, &leader).signal(Signal::SIGKILL);
    let others: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    wait_new_leader(&mut sampler, &others, term).await;
    let failover = killed.elapsed();
    eprintln!(
        "[measured] {backend:?}: SIGKILL to new leader's status file: {} ms",
        failover.as_millis()
    );
    assert!(
        failover <= settings.ttl + settings.interval,
        "failover took {failover:?}"
    );
    sampler.watch(&all, Duration::from_millis(200)).await;
    sampler.check_terms();
    // How soon after the dead leader's lease could lapse the next one took over (the
    // followers poll at the moment they expect the lapse).
    let old = sampler.leaderships.iter().find(|l| l.term == term).unwrap();
    let new = sampler
        .leaderships
        .iter()
        .filter(|l| l.term > term)
        .min_by_key(|l| l.term)
        .unwrap();
    eprintln!(
        "[measured] {backend:?}: dead leader's deadline to new leader: {} ms",
        new.since.duration_since(old.end()).unwrap().as_millis()
    );
}

/// The leader reaches the database through a proxy that then stalls: it must stop acting
/// as leader by the time its last renewal can lapse, and the others take over after that.
async fn a_cut_off_leader_demotes_before_its_lease_lapses(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::default();
    let proxy = Proxy::start(db.server_addr()).await;
    let mut nodes = vec![Node::start(&db, &settings, "cut", &db.url_via(proxy.addr))];
    let mut sampler = Sampler::new();
    sampler
        .until(&[&nodes[0]], SETTLE, "the proxied node leads", |s| {
            s[0].as_ref().is_some_and(StatusFile::is_leader)
        })
        .await;
    nodes.extend(start_nodes(&db, &settings, &["b", "c"]));
    let all: Vec<&Node> = nodes.iter().collect();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;
    assert_eq!(leader, "cut");

    proxy.set(Mode::Stall);
    let cut = Instant::now();
    let cut_wall = SystemTime::now();
    let (statuses, demoted) = sampler
        .until(
            &all,
            settings.ttl + Duration::from_millis(500),
            "the cut-off leader demotes",
            |s| s[0].as_ref().is_some_and(|s| !s.is_leader()),
        )
        .await;
    eprintln!(
        "[measured] {backend:?}: connection stalled to leader demoted (status file): {} ms",
        demoted.as_millis()
    );
    assert_eq!(statuses[0].as_ref().unwrap().role, "unknown");
    // No renewal got through after the cut, so its leadership ended within a ttl of it.
    let last_valid = sampler
        .leaderships
        .iter()
        .filter(|l| l.node_id == "cut")
        .map(|l| l.end())
        .max()
        .unwrap();
    assert!(
        last_valid <= cut_wall + settings.ttl,
        "valid {:?} past the cut",
        last_valid.duration_since(cut_wall)
    );

    let others: Vec<&Node> = all[1..].to_vec();
    wait_new_leader(&mut sampler, &others, term).await;
    eprintln!(
        "[measured] {backend:?}: connection stalled to new leader: {} ms",
        cut.elapsed().as_millis()
    );

    // Back on the network, the old leader follows.
    proxy.set(Mode::Pass);
    sampler
        .until(&all, SETTLE, "the old leader rejoins as follower", |s| {
            agreed_leader(s).is_some()
        })
        .await;
    sampler.check_terms();
}

/// A leader frozen for longer than its lease (SIGSTOP, like a VM pause) must not act as
/// leader when it wakes, although its timers and in-flight renewal all fire at once.
async fn a_paused_leader_does_not_lead_on_waking(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::default();
    let nodes = start_nodes(&db, &settings, &["a", "b", "c"]);
    let mut sampler = Sampler::new();
    let all: Vec<&Node> = nodes.iter().collect();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;
    let paused = by_id(&nodes, &leader);
    // Each node's members record, every 10 s, is a write too: past the first ones (which
    // retry each second until the table exists), none comes near the freeze.
    common::wait_members(&db, &settings.election, 3).await;

    // Freeze it just after a renewal was written, not in the middle of one: a SQLite
    // process frozen inside its commit would hold the database's write lock throughout.
    let written = paused.status().unwrap().updated_at;
    sampler
        .until(&all, SETTLE, "the leader writes its next renewal", |s| {
            s.iter()
                .flatten()
                .any(|s| s.node_id == leader && s.updated_at > written)
        })
        .await;
    paused.signal(Signal::SIGSTOP);
    let others: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    let (_, new_term) = wait_new_leader(&mut sampler, &others, term).await;
    tokio::time::sleep(settings.ttl).await;
    paused.signal(Signal::SIGCONT);

    let woke = Instant::now();
    while woke.elapsed() < Duration::from_secs(3) {
        let statuses = sampler.sample(&all);
        let status = statuses
            .iter()
            .flatten()
            .find(|s| s.node_id == leader)
            .unwrap();
        assert!(
            !(status.is_leader() && status.valid_until > SystemTime::now()),
            "the woken node claims valid leadership: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    // The woken node took no term. (The new leader may have had to start another on a
    // loaded machine, or, on SQLite, because the frozen process held up its writes.)
    let (after, _) = sampler
        .until(&all, SETTLE, "one agreed leader after the wake", |s| {
            agreed_leader(s).is_some()
        })
        .await;
    let after = agreed_leader(&after).unwrap();
    assert!(after.0 != leader && after.1 >= new_term, "{after:?}");
    let retaken: Vec<_> = sampler
        .leaderships
        .iter()
        .filter(|l| l.node_id == leader && l.term > term)
        .collect();
    assert!(retaken.is_empty(), "the woken node led again: {retaken:?}");
    sampler.check_terms();
}

// Handovers that do not wait for the poll: see `wakeup.rs`.

every_backend!(
    three_nodes_elect_one_leader,
    sigterm_hands_over_with_a_higher_term,
    sigkill_fails_over_within_ttl_plus_interval,
    a_paused_leader_does_not_lead_on_waking;
    // SQLite has no connection to cut (the unit tests cover a store that hangs), and its
    // clock is the host's, shared by all nodes.
    servers:
    a_cut_off_leader_demotes_before_its_lease_lapses,
    skewed_clocks_do_not_steal_a_live_lease,
);

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Nodes whose wall clocks are an hour ahead or behind must not take a live lease: expiry
/// is judged by the database clock only. (Not on SQLite, whose "database clock" is each
/// process's own; SQLite nodes share one host and so one clock.)
async fn skewed_clocks_do_not_steal_a_live_lease(backend: Backend) {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} missing: apt-get install faketime (.ci/run does)"
    );
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let mut nodes = vec![Node::start(&db, &settings, "honest", &db.url)];
    let mut sampler = Sampler::new();
    sampler
        .until(&[&nodes[0]], SETTLE, "the honest node leads", |s| {
            s[0].as_ref().is_some_and(StatusFile::is_leader)
        })
        .await;
    for (id, offset) in [("ahead", "+1h"), ("behind", "-1h")] {
        nodes.push(Node::start_with_env(
            &db,
            &settings,
            id,
            &db.url,
            &[
                ("LD_PRELOAD", LIBFAKETIME),
                ("FAKETIME", offset),
                // Skew the wall clock only; the monotonic clock is not what is tested.
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ],
        ));
    }
    let all: Vec<&Node> = nodes.iter().collect();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;
    assert_eq!(leader, "honest");
    sampler.watch(&all, Duration::from_secs(4)).await;
    assert_eq!(
        agreed_leader(&sampler.sample(&all)),
        Some(("honest".to_owned(), term))
    );
    // The skewed nodes really run skewed: their status files are stamped an hour off.
    let ahead = nodes[1].status().unwrap();
    assert!(ahead.valid_until > SystemTime::now() + Duration::from_secs(1800));
    // And they still take over normally when the lease does lapse.
    nodes[0].signal(Signal::SIGKILL);
    let others: Vec<&Node> = nodes[1..].iter().collect();
    sampler
        .until(
            &others,
            SETTLE,
            "a skewed node takes over after the lapse",
            |s| agreed_leader(s).is_some_and(|(_, t)| t > term),
        )
        .await;
}

/// Slows every fsync of `node` by `delay` (its status file is written with two).
fn slow_fsyncs(node: &Node, delay: &str) -> std::process::Child {
    let child = std::process::Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=fsync"])
        .arg(format!("--inject=fsync:delay_enter={delay}"))
        .args(["-o", "/dev/null", "-p"])
        .arg(node.pid().to_string())
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("strace runs (scripts/test.sh installs it)");
    // strace attaches before it traces; a moment for it to attach every thread.
    std::thread::sleep(Duration::from_millis(200));
    let mut child = child;
    assert!(
        child.try_wait().unwrap().is_none(),
        "strace could not attach to {} (ptrace not allowed here?)",
        node.id
    );
    child
}

/// Traces the fsyncs of `node` into `out`, with the path of each descriptor (`-y`).
fn trace_fsyncs(node: &Node, out: &std::path::Path) -> std::process::Child {
    let mut child = std::process::Command::new("strace")
        .args(["-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(out)
        .arg("-p")
        .arg(node.pid().to_string())
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("strace runs (scripts/test.sh installs it)");
    // strace attaches before it traces; a moment for it to attach every thread.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        child.try_wait().unwrap().is_none(),
        "strace could not attach"
    );
    child
}

/// Stops a trace and returns the fsyncs it saw of the database's write-ahead log.
fn wal_syncs(mut strace: std::process::Child, out: &std::path::Path) -> usize {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(strace.id() as i32),
        Signal::SIGTERM,
    )
    .unwrap();
    let _ = strace.wait();
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains(".sqlite3-wal>"))
        .count()
}

/// On SQLite a renewal commits without waiting for the disk (every contender shares the
/// database's host, so a power loss that undoes it ends them all), but a claim waits:
/// a term is never handed out twice to hooks that use it as a fencing token.
#[tokio::test(flavor = "multi_thread")]
async fn sqlite_syncs_the_claim_of_a_term_and_not_the_renewals() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = NodeSettings::default();
    let mut sampler = Sampler::new();
    let first = Node::start(&db, &settings, "first", &db.url);
    wait_agreed(&mut sampler, &[&first]).await;
    let second = Node::start(&db, &settings, "second", &db.url);
    wait_agreed(&mut sampler, &[&first, &second]).await;
    common::wait_members(&db, &settings.election, 2).await;

    let renewals = db.dir.join("renewals.trace");
    let strace = trace_fsyncs(&first, &renewals);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        wal_syncs(strace, &renewals),
        0,
        "three seconds of renewals synced the log"
    );

    let claim = db.dir.join("claim.trace");
    let strace = trace_fsyncs(&second, &claim);
    first.signal(Signal::SIGKILL);
    sampler
        .until(&[&second], SETTLE, "second takes over", |s| {
            s[0].as_ref().is_some_and(StatusFile::is_leader)
        })
        .await;
    assert!(wal_syncs(strace, &claim) >= 1, "the claim was not synced");
    sampler.check_terms();
}

/// A graceful handover never leaves two status files saying "leader" with time left,
/// even when the old leader's disk is slow: it releases the lease only once its status
/// file durably says it stopped leading. PostgreSQL hands over in milliseconds, far
/// sooner than the slowed file is written.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_disk_never_lets_two_status_files_say_leader() {
    let db = TestDb::new(Backend::Postgres);
    let settings = NodeSettings::default();
    let mut sampler = Sampler::new();
    let mut slow = Node::start(&db, &settings, "slow", &db.url);
    wait_agreed(&mut sampler, &[&slow]).await;
    let mut strace = slow_fsyncs(&slow, "300ms");
    let mut quick = Node::start(&db, &settings, "quick", &db.url);
    let mut handovers = 0;
    for _ in 0..4 {
        sampler
            .until(&[&slow, &quick], SETTLE, "slow leads, quick follows", |s| {
                agreed_leader(s).is_some_and(|(leader, _)| leader == "slow")
            })
            .await;
        // The handover under test: the slowed leader stops.
        slow.signal(Signal::SIGTERM);
        sampler
            .until(&[&slow, &quick], SETTLE, "quick takes over", |s| {
                s[1].as_ref().is_some_and(StatusFile::is_leader)
            })
            .await;
        sampler
            .watch(&[&slow, &quick], Duration::from_millis(700))
            .await;
        assert!(slow.wait_exit(SETTLE).await.is_some());
        let _ = strace.wait();
        handovers += 1;
        // Back to the start: slow follows again, then leads once quick stops.
        slow = Node::start(&db, &settings, "slow", &db.url);
        strace = slow_fsyncs(&slow, "300ms");
        sampler
            .until(&[&slow, &quick], SETTLE, "slow follows", |s| {
                agreed_leader(s).is_some_and(|(leader, _)| leader == "quick")
            })
            .await;
        quick.signal(Signal::SIGTERM);
        assert!(quick.wait_exit(SETTLE).await.is_some());
        quick = Node::start(&db, &settings, "quick", &db.url);
    }
    let _ = strace.kill();
    sampler.check_terms();
    eprintln!(
        "[measured] {handovers} handovers from a leader with 300 ms fsyncs, {} status samples, no overlap",
        sampler.samples
    );
}
