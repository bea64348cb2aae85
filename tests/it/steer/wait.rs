//! `leaderd wait --until …` as a script runs it: from the status file for leader and
//! follower, from the database for elected and no-leader; 0 when the condition holds, 75
//! at --timeout.

use super::*;
use std::process::{Child, Stdio};

const TIMED_OUT: i32 = 75;

/// `leaderd wait --until UNTIL ARGS` for `settings`' election, with `status` as this
/// node's status file.
fn wait(db: &TestDb, settings: &NodeSettings, status: &Path, until: &str, args: &[&str]) -> Child {
    leaderd()
        .args(["wait", "--until", until])
        .args(args)
        .current_dir(&db.dir)
        .env("LEADERD_DATABASE__URL", &db.url)
        .env("LEADERD_ELECTION__NAME", &settings.election)
        .env("LEADERD_ELECTION__INTERVAL", "500ms")
        .env("LEADERD_STATUS__PATH", status)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

async fn exit_of(mut child: Child, limit: Duration) -> i32 {
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().expect("exited");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("leaderd wait did not exit within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn still_waiting(child: &mut Child) -> bool {
    child.try_wait().unwrap().is_none()
}

async fn wait_follows_the_election(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let a_status = db.dir.join("a.status.json");
    let b_status = db.dir.join("b.status.json");
    let migrated = leaderd()
        .arg("migrate")
        .env("LEADERD_DATABASE__URL", &db.url)
        .output()
        .unwrap();
    assert!(migrated.status.success());

    // No node has joined: the election is refused as unknown (67) without --new.
    let unknown = wait(&db, &settings, &a_status, "elected", &[]);
    assert_eq!(exit_of(unknown, Duration::from_secs(10)).await, 67);
    // Nobody yet: no-leader holds, elected times out (no sooner than asked).
    let no_leader = wait(&db, &settings, &a_status, "no-leader", &["--new"]);
    assert_eq!(exit_of(no_leader, Duration::from_secs(10)).await, 0);
    let started = std::time::Instant::now();
    let elected = wait(
        &db,
        &settings,
        &a_status,
        "elected",
        &["--new", "--timeout", "1s"],
    );
    assert_eq!(exit_of(elected, Duration::from_secs(10)).await, TIMED_OUT);
    assert!(started.elapsed() >= Duration::from_secs(1));

    // Waiting from before the node starts.
    let mut elected = wait(&db, &settings, &a_status, "elected", &["--new"]);
    let mut leader = wait(&db, &settings, &a_status, "leader", &[]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(still_waiting(&mut elected) && still_waiting(&mut leader));
    let a = Node::start(&db, &settings, "a", &db.url);
    assert_eq!(exit_of(elected, Duration::from_secs(15)).await, 0);
    assert_eq!(exit_of(leader, Duration::from_secs(15)).await, 0);
    assert!(a.status().unwrap().is_leader());
    let follower = wait(&db, &settings, &a_status, "follower", &["--timeout", "1s"]);
    assert_eq!(exit_of(follower, Duration::from_secs(10)).await, TIMED_OUT);

    let b_follower = wait(&db, &settings, &b_status, "follower", &[]);
    let b = Node::start(&db, &settings, "b", &db.url);
    assert_eq!(exit_of(b_follower, Duration::from_secs(15)).await, 0);

    // Both stop: nobody leads.
    let mut no_leader = wait(&db, &settings, &a_status, "no-leader", &[]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(still_waiting(&mut no_leader));
    b.signal(nix::sys::signal::Signal::SIGTERM);
    a.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(exit_of(no_leader, Duration::from_secs(15)).await, 0);
}

/// A crash failover: the leader is SIGKILLed and the follower claims the instant the
/// lease lapses, so no read need fall in a moment without a leader. `no-leader` holds all
/// the same (the lease changed hands, which it does only through such a moment), and
/// `changed` (a new term or leader) holds; neither holds before the kill, and `changed`
/// started after the failover waits for the next change.
async fn wait_sees_a_crash_failover(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let status = db.dir.join("unused.status.json");
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|id| Node::start(&db, &settings, id, &db.url))
        .collect();
    let all: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;
    let mut no_leader = wait(&db, &settings, &status, "no-leader", &["--timeout", "30s"]);
    let mut changed = wait(&db, &settings, &status, "changed", &["--timeout", "30s"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        still_waiting(&mut no_leader),
        "no-leader held under a live leader"
    );
    assert!(
        still_waiting(&mut changed),
        "changed held with nothing changed"
    );
    nodes
        .iter()
        .find(|n| n.id == leader)
        .unwrap()
        .signal(nix::sys::signal::Signal::SIGKILL);
    let survivors: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    wait_new_leader(&mut sampler, &survivors, term).await;
    assert_eq!(exit_of(no_leader, Duration::from_secs(20)).await, 0);
    assert_eq!(exit_of(changed, Duration::from_secs(20)).await, 0);
    let after = wait(&db, &settings, &status, "changed", &["--timeout", "1s"]);
    assert_eq!(exit_of(after, Duration::from_secs(10)).await, TIMED_OUT);
}

backend_tests!(postgres = Backend::Postgres => wait_follows_the_election, wait_sees_a_crash_failover);
backend_tests!(mysql = Backend::Mysql => wait_follows_the_election, wait_sees_a_crash_failover);
backend_tests!(sqlite = Backend::Sqlite => wait_follows_the_election, wait_sees_a_crash_failover);
