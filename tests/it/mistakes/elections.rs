//! An election that has no row and no member is refused by the commands that act on it
//! (exit 67), as patronictl refuses an unknown cluster: `pause --election nosuch` used to
//! print "paused for 1h", exit 0 and insert a row, and `status --election typo` printed
//! "leader: none". `--new` accepts an election no node has joined yet.

use super::{Dir, output_within, text};
use crate::support::leaderd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const UNKNOWN: i32 = 67;

fn command(dir: &Dir, args: &[&str]) -> Command {
    let mut command = leaderd();
    command
        .args(args)
        .current_dir(&dir.0)
        .env("LEADERD_NODE__ID", "n1")
        .env(
            "LEADERD_DATABASE__URL",
            format!("sqlite://{}/db.sqlite3", dir.0.display()),
        )
        .env("LEADERD_STATUS__PATH", dir.0.join("n1.status.json"));
    command
}

#[test]
fn operator_commands_refuse_an_unknown_election_unless_new() {
    let dir = Dir::new();
    assert!(command(&dir, &["migrate"]).status().unwrap().success());
    // A node leads "jobs" (`run` takes no --election: the variable names it).
    let mut node = command(&dir, &["run"])
        .env("LEADERD_ELECTION__NAME", "jobs")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !command(&dir, &["status", "--election", "jobs"])
        .output()
        .unwrap()
        .stdout
        .starts_with(b"election:  jobs\nleader:    n1")
    {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "n1 never led jobs"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for args in [
        &["pause"][..],
        &["resume"],
        &["resign"],
        &["handover", "--to", "b"],
        &["watch", "--once"],
        &["status"],
        &["wait", "--until", "elected", "--timeout", "2s"],
    ] {
        let output = output_within(
            command(&dir, args).args(["--election", "jbos"]),
            Duration::from_secs(10),
        );
        let (code, stdout, stderr) = text(&output);
        assert_eq!(code, Some(UNKNOWN), "{args:?}: {stdout}{stderr}");
        assert!(
            stderr.contains("election \"jbos\" is unknown")
                && stderr.contains("did you mean \"jobs\"?")
                && stderr.contains("db.sqlite3"),
            "{args:?}: {stderr}"
        );
        let offers_new = matches!(args[0], "pause" | "watch" | "status" | "wait");
        assert_eq!(stderr.contains("--new"), offers_new, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
    // Nothing was written: still unknown.
    let (code, _, _) = text(
        &command(&dir, &["status", "--election", "jbos"])
            .output()
            .unwrap(),
    );
    assert_eq!(code, Some(UNKNOWN));
    // --new: a pause before any node joins, which later nodes see.
    let (code, stdout, stderr) = text(
        &command(
            &dir,
            &["pause", "--new", "--for", "1m", "--election", "fresh"],
        )
        .output()
        .unwrap(),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("paused for 1m"), "{stdout}");
    let (code, stdout, stderr) = text(
        &command(&dir, &["status", "--election", "fresh"])
            .output()
            .unwrap(),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("paused:"), "{stdout}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(node.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(node.wait().unwrap().code(), Some(0));
}
