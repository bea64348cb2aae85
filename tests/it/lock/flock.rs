//! flock(1)'s habits: a crontab line written for flock runs with only its lock file made a
//! lock name (COMMAND without `--`, `-c 'command line'`, `--timeout`, `-x`, `-o`, 126 for
//! a COMMAND that cannot be executed); the flags flock has and leaderd has not are
//! refused; lock names follow one rule, in the lock's own terms; and what `lock` can find
//! wrong before it runs COMMAND it finds then.

use super::*;

/// `leaderd lock ARGS…` on `url` (run in `dir`), to completion.
fn lock_output(dir: &Path, url: &str, args: &[&str]) -> std::process::Output {
    leaderd()
        .arg("lock")
        .args(args)
        .current_dir(dir)
        .env("LEADERD_DATABASE__URL", url)
        .env("SHELL", "/bin/sh")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// flock's forms, each run for real: COMMAND straight after the name, `-c` (before or
/// after the name), `--timeout` as `-w`, `-x`/`-e` and `-o` taken and meaning nothing.
#[test]
fn a_crontab_line_written_for_flock_runs_with_only_the_name_changed() {
    let db = TestDb::new(Backend::Sqlite);
    let name = unique("flock");
    let cases: [(&[&str], &str); 6] = [
        (&["-n", &name, "/bin/echo", "hi", "-n"], "hi -n\n"),
        (&["-n", &name, "-c", "echo $((2 + 3))"], "5\n"),
        (&["-c", "echo one two", "-w", "5", &name], "one two\n"),
        (&["--timeout", "5", &name, "echo", "waited"], "waited\n"),
        (&["-x", "-o", &name, "echo", "exclusive"], "exclusive\n"),
        (
            &["-e", "-E", "0", &name, "--", "echo", "dashes"],
            "dashes\n",
        ),
    ];
    for (args, out) in cases {
        let output = lock_output(&db.dir, &db.url, args);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
        assert_eq!(text(&output.stdout), out, "{args:?}");
    }
}

/// As flock and every shell: 127 for a COMMAND that is not there, 126 for one that is
/// but cannot be executed (no execute permission; a directory).
#[test]
fn a_command_that_cannot_be_executed_exits_126_and_one_not_found_127() {
    let db = TestDb::new(Backend::Sqlite);
    let name = unique("flock");
    let plain = db.dir.join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\necho ran\n").unwrap();
    let missing = db.dir.join("missing");
    let dir = db.dir.to_str().unwrap();
    for (command, status) in [
        (plain.to_str().unwrap(), 126),
        (dir, 126),
        (missing.to_str().unwrap(), 127),
        ("no-such-program-anywhere", 127),
    ] {
        let output = lock_output(&db.dir, &db.url, &["-n", &name, command]);
        assert_eq!(output.status.code(), Some(status), "{command}: {output:?}");
        assert!(output.stdout.is_empty());
    }
}

/// flock's -s, -u and -F have no meaning for a leaderd lock: refused (2) with a line that
/// says why, and nothing run.
#[test]
fn flock_flags_that_leaderd_has_not_are_refused_with_the_reason() {
    let db = TestDb::new(Backend::Sqlite);
    let name = unique("flock");
    for (flag, says) in [
        ("-s", "exclusive only"),
        ("-u", "leaderd unlock"),
        ("-F", "guard"),
    ] {
        let output = lock_output(&db.dir, &db.url, &[flag, &name, "echo", "ran"]);
        assert_eq!(output.status.code(), Some(2), "{flag}: {output:?}");
        assert!(output.stdout.is_empty(), "{flag} ran the command");
        assert!(text(&output.stderr).contains(says), "{flag}: {output:?}");
    }
}

/// A lock name follows an election name's rules, counted without the hidden `lock:`: 95
/// characters are taken, 96 refused as 96; an empty name and a leading space refused.
#[test]
fn a_lock_name_follows_one_rule_in_its_own_terms() {
    let db = TestDb::new(Backend::Sqlite);
    let longest = "n".repeat(95);
    let output = lock_output(&db.dir, &db.url, &["-n", &longest, "echo", "ran"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let too_long = "n".repeat(96);
    for (name, says) in [
        (
            too_long.as_str(),
            "is 96 characters long; a lock name has at most 95",
        ),
        ("", "lock name \"\": must not be empty"),
        (
            " x",
            "lock name \" x\": must not begin or end with white space",
        ),
        ("x\t", "must not begin or end with white space"),
    ] {
        let output = lock_output(&db.dir, &db.url, &["-n", name, "echo", "ran"]);
        assert_eq!(output.status.code(), Some(2), "{name:?}: {output:?}");
        assert!(output.stdout.is_empty(), "{name:?} ran the command");
        let stderr = text(&output.stderr);
        assert!(stderr.contains(says), "{name:?}: {stderr}");
        assert!(!stderr.contains("lock:"), "{name:?}: {stderr}");
    }
}

/// `--stop-timeout` means something only with `--hold-at-most`: alone it is refused (2),
/// not silently ignored.
#[test]
fn stop_timeout_without_hold_at_most_is_refused() {
    let db = TestDb::new(Backend::Sqlite);
    let name = unique("flock");
    let output = lock_output(
        &db.dir,
        &db.url,
        &["--stop-timeout", "1s", &name, "echo", "ran"],
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(output.stdout.is_empty());
    assert!(
        text(&output.stderr).contains("--hold-at-most"),
        "{output:?}"
    );
}

/// `--metrics-file` in a directory that is not there is found before the lock is taken:
/// 73 (EX_CANTCREAT), the directory named, COMMAND not run.
#[test]
fn a_metrics_file_in_a_missing_directory_stops_the_run_before_the_command() {
    let db = TestDb::new(Backend::Sqlite);
    let name = unique("flock");
    let ran = db.dir.join("ran");
    let metrics = db.dir.join("no-such-dir/lock.prom");
    let touch = format!("touch {}", ran.display());
    let output = lock_output(
        &db.dir,
        &db.url,
        &[
            "--metrics-file",
            metrics.to_str().unwrap(),
            &name,
            "-c",
            &touch,
        ],
    );
    assert_eq!(output.status.code(), Some(73), "{output:?}");
    assert!(!ran.exists(), "the command ran");
    assert!(text(&output.stderr).contains("no-such-dir"), "{output:?}");
}

/// A hook cgroup that is gone by the time the guard removes it (systemd's doing on a
/// hybrid host, or an earlier sweep's after a `kill -9` of leaderd) counts as removed:
/// `lock -q` prints nothing. Here COMMAND itself moves to its parent cgroup and removes
/// its own (this host is a hybrid one: cgroup v1, with v2 at /sys/fs/cgroup/unified).
#[test]
fn a_cgroup_already_removed_is_no_error() {
    let db = TestDb::new(Backend::Sqlite);
    let name = unique("flock");
    let mount = common::escape::cgroup2_mount();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let parent = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup v2 line");
    let parent = format!("{mount}{}", parent.trim_end_matches('/'));
    let escape = format!(
        "hook=$(sed -n 's/^0:://p' /proc/self/cgroup); echo $$ > {parent}/cgroup.procs && \
         rmdir {mount}$hook && echo moved"
    );
    let output = leaderd()
        .args(["lock", "-q", &name, "-c", &escape])
        .current_dir(&db.dir)
        .env("LEADERD_DATABASE__URL", &db.url)
        .env("LEADERD_HOOKS__CONTAINMENT", "cgroup")
        .env("SHELL", "/bin/sh")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(text(&output.stdout), "moved\n", "{output:?}");
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("cannot remove cgroup"), "{stderr}");
    assert_eq!(stderr, "", "-q printed something of leaderd's own");
}
