//! Hooks on real `leaderd` processes: scripts record what they saw (node, event, term,
//! nanosecond timestamps) to files, and the checks read those records, not the logs.

use crate::support as common;

use common::escape::{Ending, Escape, Heartbeat};
use common::proxy::{Mode, Proxy};
use common::records::{Record, check_no_overlap, hooks_config, records, runs, start};
use common::{
    Backend, Node, Sampler, StatusFile, TestDb, now_ns, script, status_json, wait_agreed,
    wait_new_leader,
};
use nix::sys::signal::Signal;
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(15);

fn alive(nodes: &[Node]) -> Vec<&Node> {
    nodes.iter().collect()
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Term,
    Kill,
    Stop,
}

/// Failovers of every kind with all hooks configured: on_elected once per term, terms
/// growing, and leader_command runs of different nodes never overlapping.
async fn failovers_keep_leader_commands_apart(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = hooks_config(
        &db,
        r#"
on_elected = ["RECORD", "elected"]
on_demoted = ["RECORD", "demoted"]
on_leader_change = ["RECORD", "leader_change"]
while_leader = ["RECORD", "tick"]
[hooks.leader_command]
command = ["COMMAND"]
stop_timeout = "2s"
"#,
    );
    let ids = ["a", "b", "c"];
    let mut nodes: Vec<Node> = ids
        .iter()
        .map(|id| start(&db, &settings, id, &db.url))
        .collect();
    let mut sampler = Sampler::new();
    let mut killed_at = Vec::new();
    for fault in [
        Fault::Term,
        Fault::Kill,
        Fault::Stop,
        Fault::Term,
        Fault::Kill,
    ] {
        let (leader, term) = wait_agreed(&mut sampler, &alive(&nodes)).await;
        // Let the leader_command of this term run a little.
        sampler
            .watch(&alive(&nodes), Duration::from_millis(300))
            .await;
        let index = nodes.iter().position(|n| n.id == leader).unwrap();
        let others: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
        match fault {
            Fault::Term => {
                nodes[index].signal(Signal::SIGTERM);
                wait_new_leader(&mut sampler, &others, term).await;
                assert_eq!(
                    nodes[index].wait_exit(Duration::from_secs(5)).await,
                    Some(0)
                );
                // Its last word ("unknown") marks when its term ended.
                sampler.sample(&alive(&nodes));
            }
            Fault::Kill => {
                nodes[index].signal(Signal::SIGKILL);
                killed_at.push((leader.clone(), term, now_ns()));
                wait_new_leader(&mut sampler, &others, term).await;
            }
            Fault::Stop => {
                nodes[index].signal(Signal::SIGSTOP);
                wait_new_leader(&mut sampler, &others, term).await;
                nodes[index].signal(Signal::SIGCONT);
                sampler
                    .watch(&alive(&nodes), Duration::from_millis(500))
                    .await;
                continue;
            }
        }
        // Restart it, and wait until it is up (its fresh status file) before going on: a
        // signal in its first milliseconds would find no handler yet.
        let _ = std::fs::remove_file(&nodes[index].status_path);
        nodes[index] = start(&db, &settings, &leader, &db.url);
        let restarted = &nodes[index];
        sampler
            .until(&[restarted], SETTLE, "the restarted node is up", |s| {
                s[0].is_some()
            })
            .await;
    }
    // The last term's on_elected, before everything stops (a stop drops queued hooks).
    let (_, last_term) = wait_agreed(&mut sampler, &alive(&nodes)).await;
    sampler
        .until(&alive(&nodes), SETTLE, "the last term's on_elected", |_| {
            records(&db.dir)
                .iter()
                .any(|r| r.event == "elected" && r.term == last_term)
        })
        .await;
    for node in &nodes {
        node.signal(Signal::SIGTERM);
    }
    for node in nodes.iter_mut() {
        assert_eq!(
            node.wait_exit(Duration::from_secs(5)).await,
            Some(0),
            "{}",
            node.id
        );
    }
    sampler.check_terms();

    let records = records(&db.dir);
    let elected: Vec<&Record> = records.iter().filter(|r| r.event == "elected").collect();
    let terms: Vec<i64> = elected.iter().map(|r| r.term).collect();
    assert!(terms.len() >= 6, "{terms:?}");
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "on_elected once per term, in order: {terms:?}"
    );
    assert!(
        elected.iter().all(|r| r.rest.starts_with("leader")),
        "LEADERD_ROLE=leader"
    );
    // Every term that was elected started its leader_command, on that node.
    for e in &elected {
        let started = records
            .iter()
            .any(|r| r.event == "start" && r.node == e.node && r.term == e.term && r.at > e.at);
        let stopped_early = records
            .iter()
            .any(|r| r.event == "demoted" && r.term == e.term);
        assert!(
            started || stopped_early,
            "term {} of {} never started its leader_command",
            e.term,
            e.node
        );
    }
    // No leader work started in a term that had already passed (a frozen node waking with
    // its timers due must not fork anything): every tick and leader_command start of term
    // T began before term T+1 was elected anywhere.
    for work in records
        .iter()
        .filter(|r| r.event == "tick" || r.event == "start")
    {
        if let Some(next) = elected.iter().find(|e| e.term > work.term) {
            assert!(
                work.at < next.at,
                "{} of term {} on {} started after term {} began: {work:?} {next:?}",
                work.event,
                work.term,
                work.node,
                next.term
            );
        }
    }
    assert!(
        records.iter().any(|r| r.event == "tick"),
        "while_leader ran"
    );

    // on_demoted of a term ran only after that term's leader_command was gone (its last
    // beat), whether it stopped on SIGTERM or was killed.
    let runs = runs(&db.dir);
    let demoted: Vec<&Record> = records.iter().filter(|r| r.event == "demoted").collect();
    assert!(demoted.len() >= 2, "{demoted:?}");
    for d in &demoted {
        if let Some(run) = runs.iter().find(|r| r.node == d.node && r.term == d.term) {
            assert!(
                run.last < d.at,
                "on_demoted ran while the leader_command beat: {d:?} {run:?}"
            );
        }
    }

    let (smallest_gap, largest_gap) = check_no_overlap(&runs);
    eprintln!(
        "[measured] {backend:?}: {} leader_command runs, no overlap; gap between one stopping and the next starting: smallest {smallest_gap:.1} ms, largest {largest_gap:.1} ms",
        runs.len()
    );
    // A SIGKILLed daemon's leader_command dies with it (the guard kills the group).
    for (node, term, at) in killed_at {
        let run = runs
            .iter()
            .find(|r| r.node == node && r.term == term)
            .unwrap();
        let after_ms = (run.last as i128 - at as i128) as f64 / 1e6;
        assert!(
            after_ms < 100.0,
            "{node}'s leader_command beat {after_ms:.1} ms after its daemon was killed"
        );
    }
}

/// A leader cut off from its database runs on_demoted, and its leader_command is gone
/// before the next leader's starts.
async fn losing_the_database_runs_on_demoted(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = hooks_config(
        &db,
        r#"
on_demoted = ["RECORD", "demoted"]
leader_command = ["COMMAND"]
"#,
    );
    let proxy = Proxy::start(db.server_addr()).await;
    let mut nodes = vec![start(&db, &settings, "cut", &db.url_via(proxy.addr))];
    let mut sampler = Sampler::new();
    sampler
        .until(&alive(&nodes), SETTLE, "the proxied node leads", |s| {
            s[0].as_ref().is_some_and(StatusFile::is_leader)
        })
        .await;
    nodes.push(start(&db, &settings, "b", &db.url));
    sampler
        .watch(&alive(&nodes), Duration::from_millis(500))
        .await;
    let cut = now_ns();
    proxy.set(Mode::Stall);
    wait_new_leader(&mut sampler, &[&nodes[1]], 1).await;
    sampler
        .watch(&alive(&nodes), Duration::from_millis(500))
        .await;
    let records = records(&db.dir);
    let demoted = records
        .iter()
        .find(|r| r.node == "cut" && r.event == "demoted")
        .expect("on_demoted ran on the cut-off node");
    let after_ms = (demoted.at - cut) as f64 / 1e6;
    eprintln!(
        "[measured] {backend:?}: connection stalled to on_demoted on the cut-off node: {after_ms:.0} ms"
    );
    assert!(after_ms < 1200.0 + 500.0, "{after_ms} ms");
    let runs = runs(&db.dir);
    check_no_overlap(&runs);
    assert!(
        runs.iter().any(|r| r.node == "b"),
        "b's leader_command ran: {runs:?}"
    );
    sampler.check_terms();
}

/// An event hook that ignores SIGTERM and hangs, with a child of its own, is killed with
/// that child at its timeout, while the election carries on.
#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_hook_is_killed_with_its_child_at_its_timeout() {
    let db = TestDb::new(Backend::Sqlite);
    let hang = script(
        &db.dir,
        "hang.sh",
        r#"#!/bin/sh
trap '' TERM
sleep 1000 &
echo $! > "$RECORD_DIR/child.pid"
echo $$ > "$RECORD_DIR/hook.pid"
wait
"#,
    );
    let settings = hooks_config(
        &db,
        &format!(
            "on_leader_change = {{ command = [\"{}\"], timeout = \"1s\" }}\n",
            hang.display()
        ),
    );
    let node = start(&db, &settings, "solo", &db.url);
    let mut sampler = Sampler::new();
    sampler
        .until(&[&node], SETTLE, "solo leads", |s| {
            s[0].as_ref().is_some_and(StatusFile::is_leader)
        })
        .await;
    let read_pid = |name: &str| -> i32 {
        std::fs::read_to_string(db.dir.join(name))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    };
    sampler
        .until(&[&node], Duration::from_secs(5), "the hook started", |_| {
            read_pid("child.pid") > 0 && read_pid("hook.pid") > 0
        })
        .await;
    // Running, as opposed to gone or a zombie waiting for its new parent to reap it.
    let exists = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| !rest.starts_with('Z'))
            })
            .unwrap_or(false)
    };
    let (hook, child) = (read_pid("hook.pid"), read_pid("child.pid"));
    assert!(exists(hook) && exists(child));
    // Timeout 1 s, then SIGTERM (ignored), then SIGKILL 2 s later.
    let before = node.status().unwrap().updated_at;
    let (_, waited) = sampler
        .until(
            &[&node],
            Duration::from_secs(6),
            "hook and child killed",
            |_| !exists(hook) && !exists(child),
        )
        .await;
    eprintln!(
        "[measured] hanging hook and its child gone {} ms after it started",
        waited.as_millis()
    );
    let status = node.status().unwrap();
    assert!(
        status.is_leader() && status.updated_at > before,
        "the election carried on: {status:?}"
    );
    // Its end is logged with how it ended (right after the daemon reaps it).
    sampler
        .until(
            &[&node],
            Duration::from_secs(2),
            "the kill is logged",
            |_| {
                node.log().lines().any(|line| {
                    line.contains("hook=\"on_leader_change\"")
                        && line.contains("killed by signal 9")
                })
            },
        )
        .await;
}

/// while_leader runs on the leader only, about once per interval, never twice at once: a
/// run that takes 1.5 s makes the next tick skip.
#[tokio::test(flavor = "multi_thread")]
async fn while_leader_runs_on_the_leader_only_and_never_twice_at_once() {
    let db = TestDb::new(Backend::Postgres);
    let slow = script(
        &db.dir,
        "slow.sh",
        r#"#!/bin/sh
echo "$LEADERD_NODE_ID begin ${LEADERD_TERM} $(date +%s%N)" >> "$RECORD_DIR/events.$LEADERD_NODE_ID"
sleep 1.5
echo "$LEADERD_NODE_ID end ${LEADERD_TERM} $(date +%s%N)" >> "$RECORD_DIR/events.$LEADERD_NODE_ID"
"#,
    );
    let settings = hooks_config(&db, &format!("while_leader = [\"{}\"]\n", slow.display()));
    let nodes = [
        start(&db, &settings, "a", &db.url),
        start(&db, &settings, "b", &db.url),
    ];
    let mut sampler = Sampler::new();
    let (leader, _) = wait_agreed(&mut sampler, &alive(&nodes)).await;
    sampler.watch(&alive(&nodes), Duration::from_secs(6)).await;
    let records = records(&db.dir);
    assert!(
        records.iter().all(|r| r.node == leader),
        "only the leader runs it: {records:?}"
    );
    let begins: Vec<u128> = records
        .iter()
        .filter(|r| r.event == "begin")
        .map(|r| r.at)
        .collect();
    let ends: Vec<u128> = records
        .iter()
        .filter(|r| r.event == "end")
        .map(|r| r.at)
        .collect();
    for (i, begin) in begins.iter().enumerate().skip(1) {
        assert!(
            *begin > ends[i - 1],
            "run {i} began before run {} ended",
            i - 1
        );
    }
    // Ticks at 0, 1, 2, … s with runs of 1.5 s: every other tick is skipped.
    assert!(
        (3..=5).contains(&begins.len()),
        "{} runs in 6 s: {records:?}",
        begins.len()
    );
    assert!(nodes.iter().any(|n| {
        n.log()
            .contains("while_leader is still running; skipping this tick")
    }));
}

/// With step_down_on_exit, a leader whose leader_command exits gives up leadership and
/// another node takes over.
#[tokio::test(flavor = "multi_thread")]
async fn step_down_on_exit_hands_leadership_over() {
    let db = TestDb::new(Backend::Postgres);
    let settings = hooks_config(
        &db,
        r#"
[hooks.leader_command]
command = ["sh", "-c", "sleep 1"]
step_down_on_exit = true
"#,
    );
    let nodes = [
        start(&db, &settings, "a", &db.url),
        start(&db, &settings, "b", &db.url),
    ];
    let mut sampler = Sampler::new();
    let (first, term) = wait_agreed(&mut sampler, &alive(&nodes)).await;
    // Who holds the next term (the nodes need not agree on it for long: its own
    // leader_command exits a second later too, and the resigned node polls once a second).
    let next_leader = |statuses: &[Option<StatusFile>]| {
        statuses
            .iter()
            .flatten()
            .find(|s| s.is_leader() && s.term == Some(term + 1))
            .map(|s| s.node_id.clone())
    };
    let (statuses, _) = sampler
        .until(&alive(&nodes), SETTLE, "the next term begins", |s| {
            next_leader(s).is_some()
        })
        .await;
    assert_ne!(
        Some(first),
        next_leader(&statuses),
        "the other node took over"
    );
    sampler.check_terms();
}

/// A resign (step_down_on_exit) goes through the whole step-down before the release: the
/// resigning node's on_demoted has finished before the next term's on_elected starts,
/// although a PostgreSQL successor claims within milliseconds of a release.
#[tokio::test(flavor = "multi_thread")]
async fn a_resign_runs_on_demoted_before_anyone_else_is_elected() {
    let db = TestDb::new(Backend::Postgres);
    let settings = hooks_config(
        &db,
        r#"
on_elected = ["RECORD", "elected"]
on_demoted = ["sh", "-c", "sleep 0.3; RECORD demoted"]
[hooks.leader_command]
command = ["sh", "-c", "sleep 0.5"]
step_down_on_exit = true
"#,
    );
    let nodes = [
        start(&db, &settings, "a", &db.url),
        start(&db, &settings, "b", &db.url),
    ];
    let mut sampler = Sampler::new();
    sampler
        .until(&alive(&nodes), SETTLE, "three terms have begun", |_| {
            records(&db.dir)
                .iter()
                .any(|r| r.event == "elected" && r.term >= 3)
        })
        .await;
    let records = records(&db.dir);
    let at = |event: &str, term: i64| {
        records
            .iter()
            .find(|r| r.event == event && r.term == term)
            .map(|r| r.at)
    };
    for term in 1..3 {
        let demoted = at("demoted", term).expect("on_demoted ran for every resigned term");
        let next = at("elected", term + 1).unwrap();
        assert!(
            demoted < next,
            "term {}'s on_elected began {} ms before term {term}'s on_demoted ended: {records:#?}",
            term + 1,
            (demoted - next) / 1_000_000
        );
    }
    sampler.check_terms();
}

/// A node told to stop never claims again. Its leader_command ignores SIGTERM, so it
/// steps down slowly; meanwhile its database link stalls past its deadline (it demotes)
/// and comes back while its on_demoted still runs: the lease it held must not be taken
/// anew.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopping_node_whose_link_comes_back_takes_no_new_term() {
    let db = TestDb::new(Backend::Postgres);
    let proxy = Proxy::start(db.server_addr()).await;
    let settings = hooks_config(
        &db,
        r#"
shutdown_timeout = "6s"
on_demoted = ["sleep", "2"]
[hooks.leader_command]
command = ["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"]
stop_timeout = "4s"
"#,
    );
    let mut node = start(&db, &settings, "a", &db.url_via(proxy.addr));
    let mut sampler = Sampler::new();
    let (_, term) = wait_agreed(&mut sampler, &[&node]).await;
    node.signal(Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set(Mode::Stall);
    sampler
        .until(&[&node], SETTLE, "the stopping node demotes", |s| {
            s[0].as_ref().is_some_and(|s| !s.is_leader())
        })
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    proxy.set(Mode::Pass);
    // It may not lead again meanwhile, and no new term may have begun once it is gone.
    let limit = std::time::Instant::now() + Duration::from_secs(12);
    while node.try_exit().is_none() {
        assert!(std::time::Instant::now() < limit, "the node did not exit");
        let statuses = sampler.sample(&[&node]);
        assert!(
            !statuses[0].as_ref().is_some_and(StatusFile::is_leader),
            "a stopping node leads again: {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        status_json(&db, &settings.election)["term"].as_i64(),
        Some(term),
        "the stopping node began a new term"
    );
}

/// A hook's stdin is /dev/null, not the pipe the guard reads its fence deadlines from (a
/// hook reading its stdin would take them).
#[tokio::test(flavor = "multi_thread")]
async fn a_fenced_hook_reads_dev_null_not_the_fence() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = hooks_config(
        &db,
        r#"
on_elected = ["sh", "-c", "readlink /proc/self/fd/0 > DIR/stdin.tmp && mv DIR/stdin.tmp DIR/stdin"]
"#,
    );
    let node = start(&db, &settings, "a", &db.url);
    let mut sampler = Sampler::new();
    wait_agreed(&mut sampler, &[&node]).await;
    let stdin = written(&db.dir.join("stdin"), "on_elected never ran").await;
    assert_eq!(stdin.trim(), "/dev/null");
}

/// The contents of the file at `path` once a hook has written it (within SETTLE).
async fn written(path: &std::path::Path, never: &str) -> String {
    let started = std::time::Instant::now();
    while !path.exists() {
        assert!(started.elapsed() < SETTLE, "{never}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::read_to_string(path).unwrap()
}

/// Guards of this daemon (`leaderd hook-guard <daemon pid> …`) still running, by pid.
fn guards_of(daemon: i32) -> Vec<String> {
    let daemon = daemon.to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let pid = entry.ok()?.file_name().into_string().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let zombie = stat
                .rsplit_once(") ")
                .is_some_and(|(_, r)| r.starts_with('Z'));
            (args.get(1) == Some(&b"hook-guard".as_slice())
                && args.get(2) == Some(&daemon.as_bytes())
                && !zombie)
                .then_some(pid)
        })
        .collect()
}

/// A follower keeps a guard started ahead of time, so that its on_elected does not wait
/// for leaderd's binary to start when it is elected; that guard goes when the daemon
/// goes, stopped or killed.
#[tokio::test(flavor = "multi_thread")]
async fn a_guard_started_ahead_runs_on_elected_and_goes_with_the_daemon() {
    let db = TestDb::new(Backend::Sqlite);
    // The guard's and the hook's start times, in clock ticks since boot.
    let settings = hooks_config(
        &db,
        r#"
on_elected = ["sh", "-c", "echo $(cut -d' ' -f22 /proc/$PPID/stat) $(cut -d' ' -f22 /proc/$$/stat) $(getconf CLK_TCK) > DIR/ages.tmp && mv DIR/ages.tmp DIR/ages.$LEADERD_NODE_ID"]
"#,
    );
    let mut a = start(&db, &settings, "a", &db.url);
    let mut sampler = Sampler::new();
    wait_agreed(&mut sampler, &[&a]).await;
    let mut b = start(&db, &settings, "b", &db.url);
    let (_, term) = wait_agreed(&mut sampler, &[&a, &b]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        guards_of(b.pid().as_raw()).len(),
        1,
        "b keeps one guard ready"
    );

    let a_pid = a.pid().as_raw();
    a.signal(Signal::SIGTERM);
    a.wait_exit(Duration::from_secs(10)).await;
    wait_new_leader(&mut sampler, &[&b], term).await;
    let ages: Vec<u64> = written(&db.dir.join("ages.b"), "b's on_elected never ran")
        .await
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let (guard, hook, ticks) = (ages[0], ages[1], ages[2]);
    assert!(
        hook - guard >= ticks,
        "the guard started {} ticks before the hook",
        hook - guard
    );
    assert_eq!(guards_of(a_pid), Vec::<String>::new(), "a stopped");

    let b_pid = b.pid().as_raw();
    b.signal(Signal::SIGKILL);
    b.wait_exit(Duration::from_secs(10)).await;
    let killed = std::time::Instant::now();
    while !guards_of(b_pid).is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(3),
            "b's guards outlived it: {:?}",
            guards_of(b_pid)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

backend_tests!(postgres = Backend::Postgres => failovers_keep_leader_commands_apart, losing_the_database_runs_on_demoted);
backend_tests!(mysql = Backend::Mysql => failovers_keep_leader_commands_apart, losing_the_database_runs_on_demoted);
backend_tests!(sqlite = Backend::Sqlite => failovers_keep_leader_commands_apart);

/// A quick while_leader runs about once per interval; a leader_command that floods its
/// output (`yes`) changes nothing in the election: the leader keeps its term.
#[tokio::test(flavor = "multi_thread")]
async fn while_leader_keeps_time_and_a_flooding_hook_changes_nothing() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = hooks_config(
        &db,
        r#"
while_leader = ["RECORD", "tick"]
leader_command = ["yes", "flooding the log"]
"#,
    );
    let node = start(&db, &settings, "solo", &db.url);
    let mut sampler = Sampler::new();
    sampler
        .until(&[&node], SETTLE, "solo leads", |s| {
            s[0].as_ref().is_some_and(StatusFile::is_leader)
        })
        .await;
    let first_tick = now_ns();
    sampler.watch(&[&node], Duration::from_secs(5)).await;
    let status = node.status().unwrap();
    assert!(
        status.is_leader() && status.term == Some(1),
        "the flood cost leadership: {status:?}"
    );
    let ticks = records(&db.dir)
        .iter()
        .filter(|r| r.event == "tick" && r.at >= first_tick)
        .count();
    assert!(
        (4..=6).contains(&ticks),
        "{ticks} while_leader runs in 5 s at a 1 s interval"
    );
    let log = node.log();
    assert!(
        log.contains("throttled"),
        "the flood is rate-limited in the log"
    );
    assert!(log.len() < 5_000_000, "log grew to {} bytes", log.len());
}

/// A leader_command whose loop leaves the guard's process group (`escape`) still ends with
/// its fence, when its daemon is SIGKILLed and when its lease is lost while the daemon
/// lives, in containment `mode` (given by the environment).
async fn escaped_leader_work_ends_with_its_fence(escape: Escape, ending: Ending, mode: &str) {
    let db = TestDb::new(Backend::Postgres);
    let beat = Heartbeat::new(&db.dir);
    let settings = hooks_config(&db, &beat.hook_table("leader_command", escape));
    let proxy = Proxy::start(db.server_addr()).await;
    let url = match ending {
        Ending::DaemonKilled => db.url.clone(),
        Ending::LeaseLost => db.url_via(proxy.addr),
    };
    let node = Node::start_with_env(
        &db,
        &settings,
        "a",
        &url,
        &[("LEADERD_HOOKS__CONTAINMENT", mode)],
    );
    beat.wait_beating(SETTLE).await;
    let cgroups = beat.check_held(mode);
    let fault_at = now_ns();
    match ending {
        Ending::DaemonKilled => node.signal(Signal::SIGKILL),
        Ending::LeaseLost => proxy.set(Mode::Stall),
    }
    let what = format!("leader_command, {escape:?}, {ending:?}, {mode}");
    // The leader's local lease deadline as its last renewal set it: final once the daemon
    // is dead, or once its status says it no longer leads.
    let mut valid_until = std::time::UNIX_EPOCH;
    let watching = std::time::Instant::now();
    while let Some(status) = node.status().filter(StatusFile::is_leader) {
        valid_until = valid_until.max(status.valid_until);
        if matches!(ending, Ending::DaemonKilled) || watching.elapsed() > SETTLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lease_end = valid_until
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    beat.assert_ended(&what, fault_at, lease_end, &cgroups)
        .await;
    let log = node.log();
    assert_eq!(
        log.matches(&format!("hook containment: {mode}")).count(),
        1,
        "the mode is logged once, at start: {log}"
    );
}

escape_tests!(
    escaped_leader_work_ends_with_its_fence,
    "subreaper",
    "cgroup"
);

/// A leader-scoped hook that exits leaves nothing running behind it, while the node still
/// leads: what `on_elected` detached (`setsid -f`) goes with it, and so does what each
/// `while_leader` run (one a second) detached, so that such loops never pile up.
async fn a_fenced_hook_leaves_nothing_behind(hook: &str, mode: &str) {
    let db = TestDb::new(Backend::Sqlite);
    let beat = Heartbeat::new(&db.dir);
    let settings = hooks_config(&db, &beat.hook_table(hook, Escape::LeftBehind));
    let node = Node::start_with_env(
        &db,
        &settings,
        "a",
        &db.url,
        &[("LEADERD_HOOKS__CONTAINMENT", mode)],
    );
    beat.wait_beating(SETTLE).await;
    // Each run's main process exits 0.3 s after it started its loop.
    let mut most = 0;
    for _ in 0..50 {
        most = most.max(beat.loops());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(most, 1, "{hook}'s loops outlived their runs");
    if hook == "on_elected" {
        let count = beat.beats().len();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            beat.beats().len(),
            count,
            "{hook}'s loop beats on after it exited"
        );
        let left = beat.processes();
        assert!(left.is_empty(), "{hook} left processes behind: {left:?}");
    }
    let status = node.status().unwrap();
    assert!(status.is_leader() && status.term == Some(1), "{status:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn on_elected_leaves_nothing_behind_cgroup() {
    a_fenced_hook_leaves_nothing_behind("on_elected", "cgroup").await
}

#[tokio::test(flavor = "multi_thread")]
async fn while_leader_leaves_nothing_behind_subreaper() {
    a_fenced_hook_leaves_nothing_behind("while_leader", "subreaper").await
}
