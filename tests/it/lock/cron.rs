//! `leaderd lock` under cron: `--hold-at-least` keeps a late run on another host out from
//! the row, and the flock(1) flags (`-w` in bare seconds, `-n`, `-E`, `-q`) behave as
//! flock's do.

use super::*;

/// A command that finishes at once under `--hold-at-least 4s --ttl 2s`: leaderd exits at
/// once with COMMAND's status, and the hold lives in the row: past a ttl after the exit
/// (so no lease renewed before it is left), a second run (the late cron of another
/// host) is refused with the -E code and prints nothing with -q; a waiting run starts
/// once the 4 s are over, not before. A command that outlasts its hold releases the lock
/// as it ends.
async fn a_hold_lives_in_the_row_and_leaderd_exits_with_the_command_s_status(backend: Backend) {
    let setup = Setup::new(backend);
    let url = &setup.db.url;
    let ran = setup.db.dir.join("ran");
    let command = format!("touch {}; exit 3", ran.display());
    let started = std::time::Instant::now();
    let started_ns = now_ns();
    let mut first = setup.lock(
        url,
        &["--hold-at-least", "4s", "--ttl", "2s"],
        &["sh", "-c", &command],
    );
    assert_eq!(
        exit_code(&mut first, Duration::from_secs(20)).await,
        3,
        "{}",
        setup.stderr()
    );
    let exited_after = started.elapsed();
    eprintln!(
        "[measured] {backend:?}: --hold-at-least 4s, quick command: exit after {exited_after:?}"
    );
    assert!(
        exited_after < Duration::from_millis(3000),
        "exited after {exited_after:?}: it waited for the hold"
    );
    assert!(ran.exists());
    // Past a ttl after leaderd exited: only the row's hold keeps the lock taken.
    tokio::time::sleep_until((started + exited_after + Duration::from_millis(2200)).into()).await;
    assert!(
        started.elapsed() < Duration::from_millis(3800),
        "the machine is too slow for this test"
    );
    let late = setup.db.dir.join("late");
    let late_command = format!("date +%s%N > {}", late.display());
    let quiet_err = setup.db.dir.join("quiet.err");
    let quiet = Command::new(env!("CARGO_BIN_EXE_leaderd"))
        .args([
            "lock",
            "-n",
            "-q",
            "-E",
            "42",
            &setup.name,
            "--",
            "sh",
            "-c",
            &late_command,
        ])
        .env("LEADERD_DATABASE__URL", url)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&quiet_err).unwrap())
        .output()
        .await
        .unwrap();
    assert_eq!(quiet.status.code(), Some(42), "{}", setup.stderr());
    assert_eq!(
        std::fs::read_to_string(&quiet_err).unwrap(),
        "",
        "-q prints nothing"
    );
    assert!(quiet.stdout.is_empty());
    assert!(!late.exists(), "the late run ran during the hold");

    // A waiting run starts once the hold is over (it counts from the claim's answer,
    // after `started`), and soon after.
    let mut waiting = setup.lock(url, &["-w", "20"], &["sh", "-c", &late_command]);
    assert_eq!(
        exit_code(&mut waiting, Duration::from_secs(20)).await,
        0,
        "{}",
        setup.stderr()
    );
    let late_ns: u128 = std::fs::read_to_string(&late)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let late_at = Duration::from_nanos(late_ns.saturating_sub(started_ns) as u64);
    eprintln!("[measured] {backend:?}: the next run started {late_at:?} after the first (hold 4s)");
    assert!(
        late_at >= Duration::from_secs(4),
        "ran {late_at:?} after the first"
    );
    assert!(
        late_at < Duration::from_secs(7),
        "ran {late_at:?} after the first"
    );

    // Outlasted: released at once.
    let mut long = setup.lock(url, &["--hold-at-least", "1s"], &setup.job("1.3"));
    assert_eq!(exit_code(&mut long, Duration::from_secs(20)).await, 0);
    let mut next = setup.lock(url, &["-n"], &["true"]);
    assert_eq!(
        exit_code(&mut next, Duration::from_secs(10)).await,
        0,
        "{}",
        setup.stderr()
    );
}

/// `-w` takes flock's bare seconds: `-w 0.5` gives up (75, with who holds it) after about
/// half a second; `-w 30` waits for the holder and runs.
async fn wait_takes_bare_seconds(backend: Backend) {
    let setup = Setup::new(backend);
    let url = &setup.db.url;
    let mut holder = setup.lock(url, &[], &setup.job("3"));
    wait_for_record(&setup.db.dir, "start").await;
    let asked = std::time::Instant::now();
    let mut short = setup.lock(url, &["-w", "0.5"], &["true"]);
    assert_eq!(exit_code(&mut short, Duration::from_secs(10)).await, HELD);
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_millis(500),
        "gave up after {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(2900),
        "gave up after {waited:?}: no wait"
    );
    assert!(
        setup.stderr().contains("gave up after waiting"),
        "{}",
        setup.stderr()
    );
    let mut long = setup.lock(url, &["-w", "30"], &setup.job("0"));
    assert_eq!(
        exit_code(&mut long, Duration::from_secs(30)).await,
        0,
        "{}",
        setup.stderr()
    );
    assert_eq!(exit_code(&mut holder, Duration::from_secs(10)).await, 0);
    let runs = records(&setup.db.dir, "lock.");
    assert_eq!(
        runs.iter().filter(|r| r.event == "end").count(),
        2,
        "{runs:?}"
    );
}

/// `--hold-at-most 1s`: a job that runs on gets SIGTERM about a second after the lock was
/// taken (the job records it and ends), leaderd exits 124 and the lock is free at once;
/// a command that ignores SIGTERM is SIGKILLed --stop-timeout later.
async fn hold_at_most_stops_the_command_and_exits_124(backend: Backend) {
    let setup = Setup::new(backend);
    let url = &setup.db.url;
    let started = std::time::Instant::now();
    let mut limited = setup.lock(url, &["--hold-at-most", "1s"], &setup.job("30"));
    assert_eq!(
        exit_code(&mut limited, Duration::from_secs(20)).await,
        124,
        "{}",
        setup.stderr()
    );
    let took = started.elapsed();
    eprintln!("[measured] {backend:?}: --hold-at-most 1s: exit 124 after {took:?}");
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(
        records(&setup.db.dir, "lock.")
            .iter()
            .any(|r| r.event == "term"),
        "the job got SIGTERM"
    );
    assert!(
        setup.stderr().contains("ran past --hold-at-most 1s"),
        "{}",
        setup.stderr()
    );
    let mut next = setup.lock(url, &["-n"], &["true"]);
    assert_eq!(exit_code(&mut next, Duration::from_secs(10)).await, 0);

    let stubborn = "trap '' TERM; while :; do sleep 0.05; done";
    let started = std::time::Instant::now();
    let mut killed = setup.lock(
        url,
        &["--hold-at-most", "1s", "--stop-timeout", "1s"],
        &["sh", "-c", stubborn],
    );
    assert_eq!(exit_code(&mut killed, Duration::from_secs(20)).await, 124);
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(2), "SIGKILLed after {took:?}");
    assert!(took < Duration::from_secs(6), "SIGKILLed after {took:?}");

    let refused = leaderd()
        .args([
            "lock",
            "--hold-at-least",
            "2s",
            "--hold-at-most",
            "1s",
            "x",
            "--",
            "true",
        ])
        .env("LEADERD_DATABASE__URL", url)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
}

/// `-n` with `-w` is a usage error, as in flock.
#[tokio::test(flavor = "multi_thread")]
async fn nonblock_and_wait_conflict() {
    let output = leaderd()
        .args(["lock", "-n", "-w", "5", "x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

backend_tests!(postgres = Backend::Postgres =>
    a_hold_lives_in_the_row_and_leaderd_exits_with_the_command_s_status,
    wait_takes_bare_seconds,
    hold_at_most_stops_the_command_and_exits_124,
);
backend_tests!(mysql = Backend::Mysql =>
    a_hold_lives_in_the_row_and_leaderd_exits_with_the_command_s_status,
    wait_takes_bare_seconds,
    hold_at_most_stops_the_command_and_exits_124,
);
backend_tests!(sqlite = Backend::Sqlite =>
    a_hold_lives_in_the_row_and_leaderd_exits_with_the_command_s_status,
    wait_takes_bare_seconds,
    hold_at_most_stops_the_command_and_exits_124,
);
