//! What COMMAND's processes get: the terminal it was run from, a SIGTERM even outside
//! its process group, and an end with the lock when they escape that group.

use super::*;

/// Run by hand from a terminal, COMMAND gets the terminal's foreground: it can read from
/// it (a background group would be stopped by SIGTTIN and hang), and its status comes
/// through. `script` provides the terminal.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_run_from_a_terminal_can_read_it() {
    let setup = Setup::new(Backend::Sqlite);
    let line = format!(
        "{} lock {} -- sh -c 'read answer; echo got $answer; exit 4'",
        env!("CARGO_BIN_EXE_leaderd"),
        setup.name
    );
    let mut script = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .current_dir(&setup.db.dir)
        .env("LEADERD_DATABASE__URL", &setup.db.url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("script (util-linux) runs");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stdin = script.stdin.take().unwrap();
    stdin.write_all(b"hello\n").await.unwrap();
    let mut stdout = script.stdout.take().unwrap();
    let mut output = String::new();
    let read = stdout.read_to_string(&mut output);
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .unwrap_or_else(|_| panic!("the command hung at the terminal"))
        .unwrap();
    assert_eq!(exit_code(&mut script, Duration::from_secs(5)).await, 4);
    assert!(output.contains("got hello"), "{output:?}");
}

/// A SIGTERM for COMMAND also reaches what it started outside its process group (from
/// the guard), once: here a loop in a session of its own records every SIGTERM it gets.
#[tokio::test(flavor = "multi_thread")]
async fn a_sigterm_reaches_a_command_s_processes_outside_its_group_once() {
    let setup = Setup::new(Backend::Sqlite);
    let terms = setup.db.dir.join("terms");
    let running = setup.db.dir.join("running");
    let detached = format!(
        "trap \\\"echo term >> {}\\\" TERM; touch {}; while :; do sleep 0.01; done",
        terms.display(),
        running.display()
    );
    // The main process outlives the SIGTERM a little, so that the detached loop is not
    // swept away before it has recorded its own.
    let command = format!(
        "setsid -f sh -c \"{detached}\"; trap 'sleep 0.5; exit 0' TERM; while :; do sleep 0.01; done"
    );
    let mut job = setup.lock(&setup.db.url, &[], &["sh", "-c", &command]);
    let started = std::time::Instant::now();
    while !running.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{}",
            setup.stderr()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = nix::unistd::Pid::from_raw(job.id().unwrap() as i32);
    nix::sys::signal::kill(pid, Signal::SIGTERM).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    nix::sys::signal::kill(pid, Signal::SIGTERM).unwrap();
    assert_eq!(exit_code(&mut job, Duration::from_secs(10)).await, 0);
    let recorded = std::fs::read_to_string(&terms).unwrap_or_default();
    assert_eq!(
        recorded.lines().count(),
        1,
        "SIGTERMs recorded: {recorded:?}"
    );
}

/// A command whose loop leaves the guard's process group (`escape`) still ends with the
/// lock: when `leaderd lock` is SIGKILLed, and when the lock is lost while it lives (it
/// exits 76), in containment `mode` (given by the environment).
async fn an_escaped_command_ends_with_the_lock(escape: Escape, ending: Ending, mode: &str) {
    let setup = Setup::new(Backend::Postgres);
    let beat = Heartbeat::new(&setup.db.dir);
    let proxy = Proxy::start(setup.db.server_addr()).await;
    let url = match ending {
        Ending::DaemonKilled => setup.db.url.clone(),
        Ending::LeaseLost => setup.db.url_via(proxy.addr),
    };
    let argv = beat.argv(escape);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let ttl = Duration::from_millis(1200);
    let mut lock = setup.lock_with_env(
        &url,
        &["--ttl", "1200ms", "--verbose"],
        &argv,
        &[(MARK, &beat.marker), ("LEADERD_HOOKS__CONTAINMENT", mode)],
    );
    beat.wait_beating(Duration::from_secs(20)).await;
    let cgroups = beat.check_held(mode);
    let fault_at = now_ns();
    match ending {
        Ending::DaemonKilled => {
            lock.start_kill().unwrap();
            lock.wait().await.unwrap();
        }
        Ending::LeaseLost => {
            proxy.set(Mode::Stall);
            assert_eq!(
                exit_code(&mut lock, Duration::from_secs(10)).await,
                LOST,
                "{}",
                setup.stderr()
            );
        }
    }
    let what = format!("leaderd lock, {escape:?}, {ending:?}, {mode}");
    // The lease ends at most a ttl after its last renewal, which came before the fault.
    let lease_end = fault_at + ttl.as_nanos();
    beat.assert_ended(&what, fault_at, lease_end, &cgroups)
        .await;
    let stderr = setup.stderr();
    assert_eq!(
        stderr.matches(&format!("hook containment: {mode}")).count(),
        1,
        "the mode is logged once, at start: {stderr}"
    );
}

escape_tests!(an_escaped_command_ends_with_the_lock, "cgroup", "subreaper");
