//! What `run` and `check-config` refuse at start, and how they say it: a status path that
//! is a directory (73), timing settings below their floors (78) or unwise (a warning),
//! an HTTP address in the forms people write and one that is taken (73), and any fatal
//! error as a JSON line under `--log-format json`.

use super::{Dir, output_within, start, text};
use crate::support::{free_port, leaderd};
use std::time::Duration;

/// A status path that is a directory used to be accepted: the node led while logging
/// "Is a directory", and at SIGTERM did not release (the release waits for the file), so
/// failover waited a ttl. Now 73 at start.
#[test]
fn a_status_path_that_is_a_directory_stops_run_and_check_config() {
    let dir = Dir::new();
    let status = dir.0.join("status.d");
    std::fs::create_dir(&status).unwrap();
    let path = status.display().to_string();
    for args in [&["run"][..], &["check-config"]] {
        let (code, _, stderr) = start(&dir, args, &[("LEADERD_STATUS__PATH", path.clone())]);
        assert_eq!(code, Some(73), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("status.path = {path:?} is a directory")),
            "{stderr}"
        );
    }
    assert!(
        !dir.0.join("db.sqlite3").exists(),
        "run joined the election"
    );
}

/// `interval = "1us"` sent 635 statements in 2 s, and `connect_timeout = "1ms"` could never
/// connect: both are refused now. A 20 ms renewal window and a query timeout above the ttl
/// are legal but unwise: one warning each, at start and from check-config.
#[test]
fn timing_settings_have_floors_and_unwise_ones_draw_a_warning() {
    let dir = Dir::new();
    for (key, value, expected) in [
        (
            "LEADERD_ELECTION__INTERVAL",
            "1us",
            "election.interval = \"1us\": must be at least 50ms",
        ),
        (
            "LEADERD_DATABASE__CONNECT_TIMEOUT",
            "1ms",
            "database.connect_timeout = \"1ms\": must be at least 100ms",
        ),
    ] {
        for args in [&["run"][..], &["check-config"]] {
            let (code, _, stderr) = start(&dir, args, &[(key, value.to_owned())]);
            assert_eq!(code, Some(78), "{key} {args:?}: {stderr}");
            assert!(stderr.contains(expected), "{stderr}");
        }
    }
    for (key, value, expected) in [
        (
            "LEADERD_ELECTION__TTL",
            "1020ms",
            "leaves a renewal 20ms after election.interval",
        ),
        (
            "LEADERD_DATABASE__QUERY_TIMEOUT",
            "5s",
            "is above election.ttl",
        ),
    ] {
        let (code, _, stderr) = start(&dir, &["check-config"], &[(key, value.to_owned())]);
        assert_eq!(code, Some(0), "{stderr}");
        let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warnings.len(), 1, "{stderr}");
        assert!(warnings[0].contains(expected), "{stderr}");
    }
}

/// `http.listen` refused ":9090" and "localhost:9090", and a port in use exited 1. Both
/// forms are taken now (":9090" is every IPv4 address), and a port in use exits 73.
#[test]
fn http_listen_takes_the_usual_forms_and_a_taken_port_exits_73() {
    let dir = Dir::new();
    let port = free_port();
    for (listen, bound) in [
        (format!(":{port}"), format!("0.0.0.0:{port}")),
        (format!("localhost:{port}"), format!("127.0.0.1:{port}")),
    ] {
        let (code, stdout, stderr) = start(
            &dir,
            &["check-config"],
            &[("LEADERD_HTTP__LISTEN", listen.clone())],
        );
        assert_eq!(code, Some(0), "{listen}: {stderr}");
        assert!(
            stdout.contains(&format!("listen = \"{bound}\"")),
            "{stdout}"
        );
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let (code, _, stderr) = start(&dir, &["run"], &[("LEADERD_HTTP__LISTEN", address.clone())]);
    assert_eq!(code, Some(73), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on http.listen = {address}")),
        "{stderr}"
    );
}

/// Fatal errors ignored `--log-format json`: a configuration that does not load, a status
/// path that cannot be used and a database that cannot be read each end in one JSON line
/// now, with the exit status in it.
#[test]
fn fatal_errors_honour_log_format_json() {
    let dir = Dir::new();
    let status = dir.0.join("status.d");
    std::fs::create_dir(&status).unwrap();
    let missing = format!("sqlite://{}/none.sqlite3", dir.0.display());
    for (args, env, code) in [
        (
            &["check-config"][..],
            ("LEADERD_ELECTION__TLL", "3s".to_owned()),
            78,
        ),
        (
            &["check-config"],
            ("LEADERD_STATUS__PATH", status.display().to_string()),
            73,
        ),
        (&["status"], ("LEADERD_DATABASE__URL", missing), 69),
    ] {
        let output = output_within(
            leaderd()
                .args(["--log-format", "json"])
                .args(args)
                .current_dir(&dir.0)
                .env("LEADERD_NODE__ID", "n1")
                .env(env.0, &env.1),
            Duration::from_secs(10),
        );
        let (status_code, _, stderr) = text(&output);
        assert_eq!(status_code, Some(code), "{args:?}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        let line: serde_json::Value = serde_json::from_str(last)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {stderr}"));
        assert_eq!(line["level"], "ERROR", "{line}");
        assert_eq!(line["exit_status"], code, "{line}");
        for other in stderr.lines() {
            assert!(
                other.starts_with('{'),
                "{args:?}: a line not JSON: {stderr}"
            );
        }
    }
}

/// The cgroup2 mount (the unified part of a hybrid layout too).
fn cgroup2_mount() -> std::path::PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mounts
        .lines()
        .find(|line| line.contains(" - cgroup2 "))
        .and_then(|line| line.split(' ').nth(4))
        .map(std::path::PathBuf::from)
        .expect("a cgroup2 mount")
}

/// `hooks.shutdown_timeout = "1h"` against the unit's `TimeoutStopSec=15s` passed without a
/// word: systemd would kill the node before its release. `run` asks systemd for the unit's
/// stop timeout (here a `systemctl` of the test's, in a cgroup named like a unit) and warns
/// when the stop sequence does not fit; the defaults fit the shipped 15 s.
#[test]
fn a_shutdown_timeout_beyond_the_units_stop_timeout_draws_a_warning() {
    use std::os::unix::process::CommandExt;
    let dir = Dir::new();
    let bin = dir.0.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let asked = dir.0.join("asked");
    crate::support::script(
        &bin,
        "systemctl",
        &format!("#!/bin/sh\necho \"$@\" >>{}\necho 15s\n", asked.display()),
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    for (shutdown, warned) in [("1h", true), ("10s", false)] {
        let unit = crate::support::unique("leaderd-test") + ".service";
        let cgroup = cgroup2_mount().join(&unit);
        std::fs::create_dir(&cgroup).unwrap();
        let procs = cgroup.join("cgroup.procs");
        let log = dir.0.join(format!("{shutdown}.log"));
        let mut command = leaderd();
        command
            .args(["run", "--id", "n1"])
            .current_dir(&dir.0)
            .env("PATH", &path)
            .env("INVOCATION_ID", "0123456789abcdef")
            .env(
                "LEADERD_DATABASE__URL",
                format!("sqlite://{}/db.sqlite3", dir.0.display()),
            )
            .env("LEADERD_STATUS__PATH", dir.0.join("n1.status.json"))
            .env("LEADERD_HOOKS__SHUTDOWN_TIMEOUT", shutdown)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        // SAFETY: only a write(2) to a file between fork and exec.
        unsafe {
            command.pre_exec(move || std::fs::write(&procs, "0"));
        }
        let mut child = command.spawn().unwrap();
        let started = std::time::Instant::now();
        while !std::fs::read_to_string(&asked)
            .unwrap_or_default()
            .contains(&unit)
        {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "systemctl never asked"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(0));
        let _ = std::fs::remove_dir(&cgroup);
        let text = std::fs::read_to_string(&log).unwrap();
        let asked = std::fs::read_to_string(&asked).unwrap();
        assert!(
            asked.contains(&format!("show --property=TimeoutStopUSec --value {unit}")),
            "{asked}"
        );
        let warning = "more than this unit's TimeoutStopSec (15s)";
        assert_eq!(
            text.matches(warning).count(),
            usize::from(warned),
            "{shutdown}: {text}"
        );
    }
}
