//! Containment: hooks run under a guard, with /dev/null as stdin; a guard started ahead
//! goes with its daemon, and leader work that leaves the guard's process group still ends
//! with its fence.

use super::*;

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

/// Guards of this daemon (`leaderd hook-guard <daemon pid> …`) still running, by pid,
/// and the stubs they forked (which have the same command line until they exec).
fn guards_of(daemon: i32) -> Vec<String> {
    guards_and_parents(daemon)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// [`guards_of`] with each one's parent pid.
fn guards_and_parents(daemon: i32) -> Vec<(String, String)> {
    let daemon = daemon.to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let pid = entry.ok()?.file_name().into_string().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (_, rest) = stat.rsplit_once(") ")?;
            let zombie = rest.starts_with('Z');
            let parent = rest.split_whitespace().nth(1)?.to_owned();
            (args.get(1) == Some(&b"hook-guard".as_slice())
                && args.get(2) == Some(&daemon.as_bytes())
                && !zombie)
                .then_some((pid, parent))
        })
        .collect()
}

/// A follower keeps a guard started ahead of time, with its hook's process forked ahead
/// too (the stub), so that its on_elected waits neither for leaderd's binary to start nor
/// for a fork when it is elected; both go when the daemon goes, stopped or killed.
#[tokio::test(flavor = "multi_thread")]
async fn a_guard_started_ahead_runs_on_elected_and_goes_with_the_daemon() {
    let db = TestDb::new(Backend::Sqlite);
    // The guard's and the hook's process start times, in clock ticks since boot, and the
    // time since boot when the hook runs (seconds).
    let settings = hooks_config(
        &db,
        r#"
on_elected = ["sh", "-c", "echo $(cut -d' ' -f22 /proc/$PPID/stat) $(cut -d' ' -f22 /proc/$$/stat) $(getconf CLK_TCK) $(cut -d' ' -f1 /proc/uptime) > DIR/ages.tmp && mv DIR/ages.tmp DIR/ages.$LEADERD_NODE_ID"]
"#,
    );
    let mut a = start(&db, &settings, "a", &db.url);
    let mut sampler = Sampler::new();
    wait_agreed(&mut sampler, &[&a]).await;
    let mut b = start(&db, &settings, "b", &db.url);
    let (_, term) = wait_agreed(&mut sampler, &[&a, &b]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ready = guards_and_parents(b.pid().as_raw());
    let b_pid = b.pid().as_raw().to_string();
    let guards: Vec<&String> = ready
        .iter()
        .filter(|(_, parent)| *parent == b_pid)
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(guards.len(), 1, "b keeps one guard ready: {ready:?}");
    // The cgroup the guard made ahead for its hook (where leaderd has cgroups to give:
    // this test's own cgroup v2 is the daemon's), with the stub in it.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    let made = format!(
        "{}{}/leaderd-hook-{}",
        common::escape::cgroup2_mount(),
        own.trim_end_matches('/'),
        guards[0]
    );
    if b.log().contains("hook containment: cgroup") {
        let procs = std::fs::read_to_string(format!("{made}/cgroup.procs")).unwrap();
        assert_eq!(procs.lines().count(), 1, "the stub alone in {made}");
    }
    assert_eq!(ready.len(), 2, "and one stub, the guard's child: {ready:?}");

    let a_pid = a.pid().as_raw();
    a.signal(Signal::SIGTERM);
    a.wait_exit(Duration::from_secs(10)).await;
    wait_new_leader(&mut sampler, &[&b], term).await;
    let ages: Vec<f64> = written(&db.dir.join("ages.b"), "b's on_elected never ran")
        .await
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let (guard, hook, ticks, now) = (ages[0], ages[1], ages[2], ages[3] * ages[2]);
    assert!(
        now - guard >= ticks,
        "the guard started {} ticks before the hook ran",
        now - guard
    );
    assert!(
        now - hook >= ticks,
        "the hook's process was forked {} ticks before it ran",
        now - hook
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
    // Nor does the hook's cgroup.
    while std::path::Path::new(&made).exists() {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "{made} outlived b"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    // A renew margin of a second: the node must keep its term throughout on a loaded
    // machine, so that only the hook's own runs come and go.
    let settings = NodeSettings {
        ttl: Duration::from_secs(2),
        ..hooks_config(&db, &beat.hook_table(hook, Escape::LeftBehind))
    };
    let node = Node::start_with_env(
        &db,
        &settings,
        "a",
        &db.url,
        &[("LEADERD_HOOKS__CONTAINMENT", mode)],
    );
    beat.wait_beating(SETTLE).await;
    let term = node.status().unwrap().term;
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
    assert!(status.is_leader() && status.term == term, "{status:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn on_elected_leaves_nothing_behind_cgroup() {
    a_fenced_hook_leaves_nothing_behind("on_elected", "cgroup").await
}

#[tokio::test(flavor = "multi_thread")]
async fn while_leader_leaves_nothing_behind_subreaper() {
    a_fenced_hook_leaves_nothing_behind("while_leader", "subreaper").await
}
