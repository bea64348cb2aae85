//! `leaderd lock` under cron: `--hold-at-least` keeps a late run on another host out, and
//! the flock(1) flags (`-w` in bare seconds, `-n`, `-E`, `-q`) behave as flock's do.

use super::*;

/// Waits until `path` exists (COMMAND ran).
async fn wait_for_file(path: &Path) {
    let limit = std::time::Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < limit,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A command that finishes at once under `--hold-at-least 4s`: while the hold lasts, a
/// second run (the late cron of another host) is refused with the -E code and prints
/// nothing with -q; the first exits with COMMAND's own status once the hold is over, no
/// sooner, and releases the lock then.
async fn a_hold_keeps_a_late_run_out_and_ends_with_the_command_s_status(backend: Backend) {
    let setup = Setup::new(backend);
    let url = &setup.db.url;
    let ran = setup.db.dir.join("ran");
    let command = format!("touch {}; exit 3", ran.display());
    let started = std::time::Instant::now();
    let mut first = setup.lock(
        url,
        &["--hold-at-least", "4s", "--ttl", "2s"],
        &["sh", "-c", &command],
    );
    wait_for_file(&ran).await;
    // Past a ttl after COMMAND ended: held by renewals, not by a lease left over.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        first.try_wait().unwrap().is_none(),
        "leaderd exited during the hold"
    );
    let late = setup.db.dir.join("late");
    let late_command = format!("touch {}", late.display());
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

    assert_eq!(
        exit_code(&mut first, Duration::from_secs(20)).await,
        3,
        "{}",
        setup.stderr()
    );
    let held_for = started.elapsed();
    assert!(
        held_for >= Duration::from_secs(4),
        "exited after {held_for:?}, before the hold"
    );
    // Released at the end of the hold: the next run starts at once.
    let mut next = setup.lock(url, &["-n"], &["sh", "-c", &late_command]);
    assert_eq!(
        exit_code(&mut next, Duration::from_secs(10)).await,
        0,
        "{}",
        setup.stderr()
    );
    assert!(late.exists());
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

/// A SIGTERM during the hold does not end it (the lock stays held, the late run is
/// refused); a second one does, and releases the lock.
#[tokio::test(flavor = "multi_thread")]
async fn one_sigterm_keeps_the_hold_and_a_second_ends_it() {
    let setup = Setup::new(Backend::Sqlite);
    let url = &setup.db.url;
    let ran = setup.db.dir.join("ran");
    let command = format!("touch {}", ran.display());
    let mut first = setup.lock(url, &["--hold-at-least", "1h"], &["sh", "-c", &command]);
    wait_for_file(&ran).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = nix::unistd::Pid::from_raw(first.id().unwrap() as i32);
    nix::sys::signal::kill(pid, Signal::SIGTERM).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        first.try_wait().unwrap().is_none(),
        "one SIGTERM ended the hold"
    );
    let mut refused = setup.lock(url, &["-n"], &["true"]);
    assert_eq!(exit_code(&mut refused, Duration::from_secs(10)).await, HELD);
    nix::sys::signal::kill(pid, Signal::SIGTERM).unwrap();
    assert_eq!(
        exit_code(&mut first, Duration::from_secs(10)).await,
        0,
        "{}",
        setup.stderr()
    );
    let mut next = setup.lock(url, &["-n"], &["true"]);
    assert_eq!(
        exit_code(&mut next, Duration::from_secs(10)).await,
        0,
        "released"
    );
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
    a_hold_keeps_a_late_run_out_and_ends_with_the_command_s_status,
    wait_takes_bare_seconds,
);
backend_tests!(mysql = Backend::Mysql =>
    a_hold_keeps_a_late_run_out_and_ends_with_the_command_s_status,
    wait_takes_bare_seconds,
);
backend_tests!(sqlite = Backend::Sqlite =>
    a_hold_keeps_a_late_run_out_and_ends_with_the_command_s_status,
    wait_takes_bare_seconds,
);
