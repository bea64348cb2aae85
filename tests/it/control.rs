//! Operators steering leadership through the database (issue 14), with real processes on
//! every backend: `leaderd resign`, `handover`, `pause`/`resume`, `watch`, and preemption
//! by priority. Every test samples the nodes' status files throughout the commands and
//! fails on two valid leaders at once or overlapping terms.

use crate::support as common;

use common::{
    Backend, Node, NodeSettings, Sampler, TestDb, agreed_leader, leaderd, status_json, wait_agreed,
    wait_members, wait_new_leader,
};
use nix::sys::signal::Signal;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

mod stop;

fn start_nodes(db: &TestDb, settings: &NodeSettings, ids: &[&str]) -> Vec<Node> {
    ids.iter()
        .map(|id| Node::start(db, settings, id, &db.url))
        .collect()
}

fn by_id<'a>(nodes: &'a [Node], id: &str) -> &'a Node {
    nodes.iter().find(|n| n.id == id).unwrap()
}

/// `leaderd ARGS` for the test's election, from "another host" (no node's config).
fn command(db: &TestDb, election: &str, args: &[&str]) -> Child {
    leaderd()
        .args(args)
        .current_dir(&db.dir)
        .env("LEADERD_DATABASE__URL", &db.url)
        .env("LEADERD_ELECTION__NAME", election)
        .env("LEADERD_LOG__LEVEL", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Samples `nodes` until `child` exits (at most `limit`).
async fn finish(mut child: Child, sampler: &mut Sampler, nodes: &[&Node], limit: Duration) -> Ran {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < limit,
            "the command ran for over {limit:?}"
        );
        sampler.sample(nodes);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let output = child.wait_with_output().unwrap();
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

async fn resign_moves_leadership_and_the_old_leader_waits(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let nodes = start_nodes(&db, &settings, &["a", "b", "c"]);
    let all: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let (old, term) = wait_agreed(&mut sampler, &all).await;
    // resign refuses until another live candidate is recorded (see below).
    wait_members(&db, &settings.election, 3).await;

    let child = command(&db, &settings.election, &["resign", "--wait", "20s"]);
    let ran = finish(child, &mut sampler, &all, Duration::from_secs(30)).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let new = ran.stdout.trim().to_owned();
    assert!(new != old && !new.is_empty(), "new leader {new:?}");
    let (agreed, new_term) = wait_new_leader(&mut sampler, &all, term).await;
    assert_eq!(agreed, new);
    // The old leader ran its step-down: its status said so before the release.
    by_id(&nodes, &old)
        .wait_log("asked to step down", Duration::from_secs(5))
        .await;
    // It does not take the lease back: the new leader keeps it.
    sampler.watch(&all, settings.ttl * 2).await;
    assert_eq!(agreed_leader(&sampler.sample(&all)), Some((new, new_term)));
    sampler.check_terms();

    // With no leader (every node stopped), resign says so.
    drop(nodes);
    tokio::time::sleep(settings.ttl + Duration::from_millis(200)).await;
    let ran = finish(
        command(&db, &settings.election, &["resign", "--wait", "1s"]),
        &mut sampler,
        &[],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ran.code, Some(4), "{}", ran.stderr);
}

async fn handover_goes_to_the_named_node(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let nodes = start_nodes(&db, &settings, &["a", "b", "c"]);
    let all: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;
    wait_members(&db, &settings.election, 3).await;

    // Refused: an unknown node. The leader itself: nothing to do, a success.
    for (to, code, why) in [
        ("nobody", 2, "unknown node"),
        (leader.as_str(), 0, "already leads"),
    ] {
        let ran = finish(
            command(&db, &settings.election, &["handover", "--to", to]),
            &mut sampler,
            &all,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(ran.code, Some(code), "{}", ran.stderr);
        assert!(ran.stderr.contains(why), "{}", ran.stderr);
        // Forcing a handover to a node that does not exist only leaves the election
        // leaderless: not suggested.
        assert!(!ran.stderr.contains("`--force`"), "{}", ran.stderr);
    }
    assert_eq!(
        agreed_leader(&sampler.sample(&all)),
        Some((leader.clone(), term))
    );

    // To the follower that sorts last (not the one a race would favour).
    let mut followers: Vec<&str> = ["a", "b", "c"]
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    followers.sort();
    let target = followers[1].to_owned();
    let asked = Instant::now();
    let child = command(&db, &settings.election, &["handover", "--to", &target]);
    let ran = finish(child, &mut sampler, &all, Duration::from_secs(30)).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert_eq!(ran.stdout.trim(), target);
    let (new, _) = wait_new_leader(&mut sampler, &all, term).await;
    eprintln!(
        "[measured] {backend:?}: handover to a named node, command to its status file: {} ms ({})",
        asked.elapsed().as_millis(),
        ran.stderr.trim().lines().last().unwrap_or_default()
    );
    assert_eq!(new, target);
    sampler.watch(&all, Duration::from_millis(500)).await;
    sampler.check_terms();
}

/// A handover is an offer the target must take: to a node that died (its member record
/// still fresh), nothing changes and the leader keeps its term. `--force` hands over
/// without the target's answer: the lease then waits for the target through the window
/// (about two lease lengths) and falls back to anyone.
async fn a_handover_to_a_node_that_died_is_not_taken(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let nodes = start_nodes(&db, &settings, &["a", "b", "c"]);
    let all: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;
    wait_members(&db, &settings.election, 3).await;
    let mut others = ["a", "b", "c"].into_iter().filter(|id| *id != leader);
    let (target, third) = (others.next().unwrap(), others.next().unwrap());
    // Dies before it can accept; still a member (its record is fresh).
    by_id(&nodes, target).signal(Signal::SIGKILL);
    let living: Vec<&Node> = nodes.iter().filter(|n| n.id != target).collect();

    let child = command(
        &db,
        &settings.election,
        &["handover", "--to", target, "--wait", "20s"],
    );
    let ran = finish(child, &mut sampler, &living, Duration::from_secs(30)).await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("did not take the handover"),
        "{}",
        ran.stderr
    );
    assert_eq!(
        agreed_leader(&sampler.sample(&living)),
        Some((leader.clone(), term)),
        "an offer nobody took changed the leader"
    );

    let asked = Instant::now();
    let child = command(
        &db,
        &settings.election,
        &["handover", "--to", target, "--force", "--wait", "20s"],
    );
    let ran = finish(child, &mut sampler, &living, Duration::from_secs(30)).await;
    assert_eq!(ran.code, Some(5), "not the named node: {}", ran.stderr);
    let (new, _) = wait_new_leader(&mut sampler, &living, term).await;
    let took = asked.elapsed();
    assert!(new == third || new == leader, "{new}");
    // Nobody but the target for about two lease lengths.
    assert!(
        took >= settings.ttl * 2 - Duration::from_millis(300),
        "{took:?}"
    );
    sampler.check_terms();
}

async fn pause_holds_until_resumed_or_over(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let mut nodes = start_nodes(&db, &settings, &["a", "b", "c"]);
    let mut sampler = Sampler::new();
    let all: Vec<&Node> = nodes.iter().collect();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;

    let ran = finish(
        command(&db, &settings.election, &["pause", "--for", "1h"]),
        &mut sampler,
        &all,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    // Every node reports the pause; the leader keeps leading.
    sampler
        .until(
            &all,
            Duration::from_secs(5),
            "every node says paused",
            |_| all.iter().all(|n| paused(n)),
        )
        .await;
    assert!(
        status_json(&db, &settings.election)["paused"]
            .as_bool()
            .unwrap()
    );
    sampler.watch(&all, settings.ttl * 2).await;
    assert_eq!(
        agreed_leader(&sampler.sample(&all)),
        Some((leader.clone(), term))
    );

    // The leader dies: nobody takes its lapsed lease while paused.
    by_id(&nodes, &leader).signal(Signal::SIGKILL);
    let others: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    sampler.watch(&others, settings.ttl * 3).await;
    assert!(
        sampler
            .sample(&others)
            .iter()
            .flatten()
            .all(|s| !s.is_leader()),
        "a node claimed while paused"
    );
    assert!(status_json(&db, &settings.election)["leader"].is_null());

    // Resumed: one takes over.
    let ran = finish(
        command(&db, &settings.election, &["resume"]),
        &mut sampler,
        &others,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let (second, term) = wait_new_leader(&mut sampler, &others, term).await;

    // A short pause ends by itself.
    let ran = finish(
        command(&db, &settings.election, &["pause", "--for", "3s"]),
        &mut sampler,
        &others,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let paused_at = Instant::now();
    sampler
        .until(
            &others,
            Duration::from_secs(5),
            "the leader says paused",
            |_| others.iter().all(|n| paused(n)),
        )
        .await;
    nodes.retain(|n| n.id != leader);
    nodes
        .iter()
        .find(|n| n.id == second)
        .unwrap()
        .signal(Signal::SIGKILL);
    let last: Vec<&Node> = nodes.iter().filter(|n| n.id != second).collect();
    let (_, _) = wait_new_leader(&mut sampler, &last, term).await;
    assert!(
        paused_at.elapsed() >= Duration::from_millis(2500),
        "taken over {:?} into a 3 s pause",
        paused_at.elapsed()
    );
    sampler.check_terms();
}

fn paused(node: &Node) -> bool {
    let text = std::fs::read_to_string(&node.status_path).unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|json| json["paused"].as_bool())
        .unwrap_or(false)
}

async fn watch_prints_a_line_per_change(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let nodes = start_nodes(&db, &settings, &["a", "b"]);
    let all: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;

    let once = finish(
        command(&db, &settings.election, &["watch", "--once"]),
        &mut sampler,
        &all,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(once.code, Some(0), "{}", once.stderr);
    let line: serde_json::Value = serde_json::from_str(once.stdout.trim()).unwrap();
    assert_eq!(line["leader"], leader.as_str());
    assert_eq!(line["term"], term);
    assert_eq!(line["paused"], false);
    assert!(line["at"].as_str().is_some());

    let watcher = command(&db, &settings.election, &["watch"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    for args in [&["pause", "--for", "1m"][..], &["resume"], &["resign"]] {
        let ran = finish(
            command(&db, &settings.election, args),
            &mut sampler,
            &all,
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(ran.code, Some(0), "{args:?}: {}", ran.stderr);
        // Each change is seen before the next (at most an interval apart).
        sampler.watch(&all, settings.interval * 3).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watcher.id() as i32),
        Signal::SIGTERM,
    )
    .unwrap();
    let output = watcher.wait_with_output().unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let states: Vec<(bool, i64)> = lines
        .iter()
        .filter(|l| !l["leader"].is_null())
        .map(|l| (l["paused"].as_bool().unwrap(), l["term"].as_i64().unwrap()))
        .collect();
    assert!(states.contains(&(false, term)), "{lines:#?}");
    assert!(states.contains(&(true, term)), "{lines:#?}");
    assert!(
        states.iter().any(|(paused, t)| !paused && *t > term),
        "{lines:#?}"
    );
    sampler.check_terms();
}

async fn priority_preempts_once_and_equal_never(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let mut nodes = start_nodes(&db, &settings, &["a", "b"]);
    let mut sampler = Sampler::new();
    let all: Vec<&Node> = nodes.iter().collect();
    let (_, term) = wait_agreed(&mut sampler, &all).await;
    nodes.push(Node::start_with_env(
        &db,
        &settings,
        "high",
        &db.url,
        &[
            ("LEADERD_ELECTION__PRIORITY", "10"),
            ("LEADERD_ELECTION__PREEMPT_AFTER", "1s"),
        ],
    ));
    let all: Vec<&Node> = nodes.iter().collect();
    // The leader looks every 10 s (when it records itself).
    let (statuses, took) = sampler
        .until(
            &all,
            Duration::from_secs(30),
            "the high-priority node leads",
            |s| agreed_leader(s).is_some_and(|(id, _)| id == "high"),
        )
        .await;
    let (_, high_term) = agreed_leader(&statuses).unwrap();
    eprintln!(
        "[measured] {backend:?}: preempted after {} ms",
        took.as_millis()
    );
    let terms: Vec<i64> = sampler
        .leaderships
        .iter()
        .map(|l| l.term)
        .filter(|&t| t > term)
        .collect();
    assert_eq!(terms, [high_term], "one handover, straight to it");
    // No flapping: it keeps the lease through the next checks.
    sampler.watch(&all, Duration::from_secs(12)).await;
    assert_eq!(
        agreed_leader(&sampler.sample(&all)),
        Some(("high".to_owned(), high_term))
    );
    sampler.check_terms();
}

/// An observer (or a node whose health check fails) is no candidate: a handover to it is
/// refused, and a leader never preempts in its favour, whatever its priority. Otherwise
/// the election would sit without a leader through each handover window, over and over.
async fn a_node_that_cannot_claim_is_never_handed_the_lease(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let quick = [("LEADERD_ELECTION__PREEMPT_AFTER", "1s")];
    let mut nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|id| Node::start_with_env(&db, &settings, id, &db.url, &quick))
        .collect();
    nodes.push(Node::start_with_env(
        &db,
        &settings,
        "watcher",
        &db.url,
        &[
            ("LEADERD_ELECTION__CANDIDATE", "false"),
            ("LEADERD_ELECTION__PRIORITY", "10"),
        ],
    ));
    let all: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let (_, term) = wait_agreed(&mut sampler, &all[..2]).await;
    wait_members(&db, &settings.election, 3).await;

    let ran = finish(
        command(&db, &settings.election, &["handover", "--to", "watcher"]),
        &mut sampler,
        &all,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(ran.stderr.contains("an observer"), "{}", ran.stderr);
    // An observer never claims: forcing would leave the election leaderless for two
    // lease lengths, so --force is not suggested.
    assert!(!ran.stderr.contains("`--force`"), "{}", ran.stderr);
    assert!(ran.stderr.contains("two lease lengths"), "{}", ran.stderr);

    // Past a member record of the leader's (every 10 s) with preempt_after long over.
    sampler.watch(&all, Duration::from_secs(13)).await;
    let (_, now) = wait_agreed(&mut sampler, &all[..2]).await;
    assert_eq!(
        now, term,
        "the leader handed over to a node that cannot claim"
    );
    sampler.check_terms();
}

every_backend!(
    resign_moves_leadership_and_the_old_leader_waits,
    handover_goes_to_the_named_node,
    a_handover_to_a_node_that_died_is_not_taken,
    pause_holds_until_resumed_or_over,
    watch_prints_a_line_per_change,
    priority_preempts_once_and_equal_never,
    a_node_that_cannot_claim_is_never_handed_the_lease,
);
