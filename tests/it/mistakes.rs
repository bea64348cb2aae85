//! Mistakes that must stop the node rather than run it wrongly, as a user meets them with
//! the binary: a misspelt `LEADERD_*` variable, and (below) paths and hooks that cannot
//! work.

use crate::support as common;

use common::leaderd;

mod databases;
mod elections;
mod messages;
mod permissions;
mod start;
mod urls;
use std::path::PathBuf;
use std::process::Output;

/// A directory of its own, removed at the end: a command run in it that fell back to the
/// default SQLite URL would leave `leaderd.sqlite3` there.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(common::unique("mistakes"));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(output: &Output) -> (Option<i32>, String, String) {
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Every command that reads the configuration, with what it needs to get that far.
const COMMANDS: &[&[&str]] = &[
    &["check-config"],
    &["run"],
    &["status"],
    &["status", "--local"],
    &["migrate"],
    &["resign"],
    &["handover", "--to", "b"],
    &["pause"],
    &["resume"],
    &["watch", "--once"],
    &["lock", "job", "--", "true"],
    &["wait", "--until", "elected", "--timeout", "1s"],
];

/// `LEADERD_DATABASE_URL` (one underscore) used to be ignored: the node ran on the default
/// SQLite file and elected itself. Now every command stops with 78 and names the variable
/// meant, before it touches any database.
#[test]
fn a_near_miss_of_a_configuration_variable_stops_every_command() {
    let dir = Dir::new();
    for (variable, meant) in [
        ("LEADERD_DATABASE_URL", "LEADERD_DATABASE__URL"),
        ("LEADERD_DATABSE__URL", "LEADERD_DATABASE__URL"),
        ("LEADERD_ELECTON__TTL", "LEADERD_ELECTION__TTL"),
        ("LEADERD_STATUS_PATH", "LEADERD_STATUS__PATH"),
    ] {
        for args in COMMANDS {
            let output = leaderd()
                .args(*args)
                .current_dir(&dir.0)
                .env("LEADERD_NODE__ID", "n1")
                .env(variable, "postgres://127.0.0.1:1/x")
                .output()
                .unwrap();
            let (code, _, stderr) = text(&output);
            assert_eq!(code, Some(78), "{variable} {args:?}: {stderr}");
            assert!(
                stderr.contains(variable) && stderr.contains(&format!("did you mean {meant}?")),
                "{variable} {args:?}: {stderr}"
            );
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert!(left.is_empty(), "a command touched a database: {left:?}");
}

/// A misspelt key or section, in the file or the environment: one suggestion, not the
/// list of every key.
#[test]
fn misspelt_keys_and_sections_draw_a_suggestion() {
    let dir = Dir::new();
    let file = dir.0.join("leaderd.toml");
    for (toml, env, expected) in [
        (
            "[election]\ntll = \"3s\"\n",
            None,
            "unknown configuration key `election.tll`",
        ),
        (
            "[electon]\nttl = \"3s\"\n",
            None,
            "did you mean `election.ttl`?",
        ),
        (
            "[election]\nurl = \"x\"\n",
            None,
            "did you mean `database.url`?",
        ),
        (
            "",
            Some(("LEADERD_ELECTION__INTERVALL", "1s")),
            "did you mean LEADERD_ELECTION__INTERVAL?",
        ),
    ] {
        std::fs::write(&file, toml).unwrap();
        let mut command = leaderd();
        command
            .args(["check-config", "--config"])
            .arg(&file)
            .env("LEADERD_NODE__ID", "n1");
        if let Some((name, value)) = env {
            command.env(name, value);
        }
        let (code, _, stderr) = text(&command.output().unwrap());
        assert_eq!(code, Some(78), "{toml:?} {env:?}: {stderr}");
        assert!(stderr.contains(expected), "{toml:?} {env:?}: {stderr}");
        assert!(!stderr.contains("known keys"), "{stderr}");
    }
}

/// The variables leaderd sets for hooks never trip the check; any other unknown `LEADERD_*`
/// name draws one warning and nothing else.
#[test]
fn hook_variables_pass_and_strangers_draw_one_warning() {
    let hook_variables = [
        ("LEADERD_EVENT", "elected"),
        ("LEADERD_ELECTION", "jobs"),
        ("LEADERD_NODE_ID", "n1"),
        ("LEADERD_ROLE", "leader"),
        ("LEADERD_LEADER", "n1"),
        ("LEADERD_PREVIOUS_LEADER", "n2"),
        ("LEADERD_TERM", "4"),
        ("LEADERD_LOCK", "job"),
        ("LEADERD_HOLDER", "n1:12"),
    ];
    let output = leaderd()
        .arg("check-config")
        .env("LEADERD_NODE__ID", "n1")
        .envs(hook_variables)
        .output()
        .unwrap();
    let (code, _, stderr) = text(&output);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("WARN"), "{stderr}");
    let output = leaderd()
        .arg("check-config")
        .env("LEADERD_NODE__ID", "n1")
        .env("LEADERD_FLAVOUR", "x")
        .env("LEADERD_COLOUR", "y")
        .output()
        .unwrap();
    let (code, _, stderr) = text(&output);
    assert_eq!(code, Some(0), "{stderr}");
    let warnings: Vec<_> = stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("LEADERD_COLOUR, LEADERD_FLAVOUR"),
        "{stderr}"
    );
}

/// Runs `command` to its end, or for `limit` at most (then kills it: a `run` that started).
fn output_within(command: &mut std::process::Command, limit: std::time::Duration) -> Output {
    use std::process::Stdio;
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

/// `run` and `check-config` with `env` in a directory of their own, SQLite there.
fn start(dir: &Dir, args: &[&str], env: &[(&str, String)]) -> (Option<i32>, String, String) {
    let output = output_within(
        leaderd()
            .args(args)
            .current_dir(&dir.0)
            .env("LEADERD_NODE__ID", "n1")
            .env(
                "LEADERD_DATABASE__URL",
                format!("sqlite://{}/db.sqlite3", dir.0.display()),
            )
            .envs(env.iter().map(|(k, v)| (*k, v))),
        std::time::Duration::from_secs(10),
    );
    text(&output)
}

/// A status directory that does not exist used to draw one warning while the node led,
/// withheld its release at stop and exited 0. Now `run` and `check-config` stop with 73
/// before joining.
#[test]
fn an_unwritable_status_directory_stops_run_and_check_config() {
    let dir = Dir::new();
    let file = dir.0.join("a-file");
    std::fs::write(&file, "").unwrap();
    for path in [dir.0.join("missing/status.json"), file.join("status.json")] {
        let path = path.display().to_string();
        for args in [&["run"][..], &["check-config"]] {
            let (code, _, stderr) = start(&dir, args, &[("LEADERD_STATUS__PATH", path.clone())]);
            assert_eq!(code, Some(73), "{args:?} {path}: {stderr}");
            assert!(
                stderr.contains("status.path") && stderr.contains(&path),
                "{stderr}"
            );
        }
    }
    assert!(
        !dir.0.join("db.sqlite3").exists(),
        "run joined the election before it stopped"
    );
}

/// A hook whose program is missing or not executable stops `run` and `check-config` with
/// 78, naming the hook, instead of failing with 127 once the node leads.
#[test]
fn a_hook_that_cannot_run_stops_run_and_check_config() {
    let dir = Dir::new();
    let script = dir.0.join("hook.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let script = script.display().to_string();
    let status = (
        "LEADERD_STATUS__PATH",
        dir.0.join("status.json").display().to_string(),
    );
    let config = dir.0.join("leaderd.toml");
    let cases = [
        (
            "on_elected = [\"/nonexistent/hook\"]".to_owned(),
            "hooks.on_elected",
            "No such file",
        ),
        (
            "leader_command = [\"no-such-program-leaderd\", \"x\"]".to_owned(),
            "hooks.leader_command",
            "not found in PATH",
        ),
        (
            format!("on_demoted = [\"{script}\"]"),
            "hooks.on_demoted",
            "not executable",
        ),
    ];
    for (hook, key, reason) in cases {
        std::fs::write(&config, format!("[hooks]\n{hook}\n")).unwrap();
        for args in [&["run", "--config"][..], &["check-config", "--config"]] {
            let args = [args, &[config.to_str().unwrap()]].concat();
            let (code, _, stderr) = start(&dir, &args, std::slice::from_ref(&status));
            assert_eq!(code, Some(78), "{args:?} {hook}: {stderr}");
            assert!(
                stderr.contains(key) && stderr.contains(reason),
                "{key}: {stderr}"
            );
        }
    }
    // Executable, and found in PATH: accepted.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        &config,
        format!("[hooks]\non_demoted = [\"{script}\"]\non_elected = [\"true\"]\n"),
    )
    .unwrap();
    let (code, _, stderr) = start(
        &dir,
        &["check-config", "--config", config.to_str().unwrap()],
        &[status],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!dir.0.join("db.sqlite3").exists());
}

/// Without `--config`, every command reads the default file if it exists
/// (`/etc/leaderd/leaderd.toml`; `LEADERD_DEFAULT_CONFIG` names another for this test), and
/// `check-config` says which file it read. Before, a bare `leaderd status` on a host with
/// the package created `./leaderd.sqlite3` and failed with "no such table".
#[test]
fn the_default_file_is_read_and_operator_commands_take_election() {
    let dir = Dir::new();
    let cwd = Dir::new();
    let file = dir.0.join("leaderd.toml");
    std::fs::write(
        &file,
        format!(
            "[node]\nid = \"n1\"\n[election]\nname = \"jobs\"\n[database]\nurl = \"sqlite://{}/db.sqlite3\"\n[status]\npath = \"{}/status.json\"\n",
            dir.0.display(),
            dir.0.display()
        ),
    )
    .unwrap();
    let run = |args: &[&str], default: &std::path::Path| {
        let output = leaderd()
            .args(args)
            .current_dir(&cwd.0)
            .env("LEADERD_DEFAULT_CONFIG", default)
            .output()
            .unwrap();
        text(&output)
    };
    let (code, stdout, stderr) = run(&["check-config"], &file);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with(&format!("# read {}\n", file.display())),
        "{stdout}"
    );
    assert!(stdout.contains("name = \"jobs\""), "{stdout}");
    let (code, _, stderr) = run(&["migrate"], &file);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stdout, stderr) = run(&["status", "--json", "--new"], &file);
    assert_eq!(code, Some(0), "{stderr}");
    let status: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(status["election"], "jobs", "{stdout}");
    // --election NAME, on each operator command.
    let (code, _, stderr) = run(
        &["pause", "--for", "1m", "--new", "--election", "other"],
        &file,
    );
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stdout, stderr) = run(&["status", "--json", "--election", "other"], &file);
    assert_eq!(code, Some(0), "{stderr}");
    let status: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (&status["election"], &status["paused"]),
        (&"other".into(), &true.into()),
        "{stdout}"
    );
    let (code, stdout, _) = run(&["status", "--json", "--new"], &file);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("\"paused\": false"), "{stdout}");
    let (code, _, stderr) = run(&["resume", "--election", "other"], &file);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stdout, stderr) = run(&["watch", "--once", "--election", "other"], &file);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("\"election\":\"other\""), "{stdout}");
    let (code, _, stderr) = run(&["status", "--election", ""], &file);
    assert_eq!(code, Some(78), "{stderr}");
    assert!(stderr.contains("--election = \"\""), "{stderr}");
    // No default file: said so, and nothing read.
    let missing = dir.0.join("missing.toml");
    let (code, stdout, stderr) = run(&["check-config"], &missing);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("# no configuration file"), "{stdout}");
    let left: Vec<_> = std::fs::read_dir(&cwd.0).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// One set of duration rules for every flag and key: above zero unless zero means
/// something, at most a day. `pause --for 400d` used to pause for a year and
/// `pause --for 0` to succeed, while `--hold-at-least 2d` was refused.
#[test]
fn every_duration_flag_and_key_has_the_same_bounds() {
    let dir = Dir::new();
    let sqlite = format!("sqlite://{}/db.sqlite3", dir.0.display());
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let output = leaderd()
            .args(args)
            .current_dir(&dir.0)
            .env("LEADERD_NODE__ID", "n1")
            .env("LEADERD_DATABASE__URL", &sqlite)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        text(&output)
    };
    for args in [
        &["pause", "--for", "400d"][..],
        &["pause", "--for", "0"],
        &["resign", "--wait", "0"],
        &["resign", "--hold", "2d"],
        &["handover", "--to", "b", "--wait", "25h"],
        &["wait", "--until", "elected", "--timeout", "0"],
        &["lock", "--ttl", "2d", "job", "--", "true"],
        &["lock", "--hold-at-least", "2d", "job", "--", "true"],
        &["lock", "-w", "2d", "job", "--", "true"],
    ] {
        let (code, _, stderr) = run(args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        let value = args
            .iter()
            .find(|a| a.ends_with('d') || a.ends_with('h') || **a == "0");
        assert!(
            stderr.contains("must be at most a day")
                || stderr.contains("must be greater than zero"),
            "{args:?} {value:?}: {stderr}"
        );
    }
    for (key, value) in [
        ("LEADERD_ELECTION__PREEMPT_AFTER", "400d"),
        ("LEADERD_DATABASE__CONNECT_TIMEOUT", "0"),
        ("LEADERD_DATABASE__QUERY_TIMEOUT", "2d"),
    ] {
        let (code, _, stderr) = run(&["check-config"], &[(key, value)]);
        assert_eq!(code, Some(78), "{key}: {stderr}");
        assert!(
            stderr.contains("must be at most a day")
                || stderr.contains("must be greater than zero"),
            "{key}: {stderr}"
        );
    }
    let file = dir.0.join("leaderd.toml");
    std::fs::write(&file, "[hooks]\nshutdown_timeout = \"400d\"\n").unwrap();
    let (code, _, stderr) = run(&["check-config", "--config", file.to_str().unwrap()], &[]);
    assert_eq!(code, Some(78), "{stderr}");
    assert!(
        stderr.contains("hooks.shutdown_timeout") && stderr.contains("must be at most a day"),
        "{stderr}"
    );
    // Zero where it means something.
    let (code, _, stderr) = run(
        &["check-config"],
        &[("LEADERD_ELECTION__PREEMPT_AFTER", "0")],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = run(
        &[
            "lock",
            "-w",
            "0",
            "--hold-at-least",
            "0",
            "job",
            "--",
            "true",
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
}

/// Waits until `what` holds of the records, or fails after 15 s.
async fn until_records(
    dir: &std::path::Path,
    what: &str,
    done: impl Fn(&[common::records::Record]) -> bool,
) -> Vec<common::records::Record> {
    let start = std::time::Instant::now();
    loop {
        let records = common::records::records(dir);
        if done(&records) {
            return records;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(15),
            "{what}: {records:#?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A failing on_elected used to be logged while the node stayed leader and started its
/// leader_command. With `hooks.on_elected_failure` at its default, "step_down", the node
/// steps down without starting it (running on_demoted), and a node whose on_elected works
/// takes over; with "ignore", the old behaviour.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_on_elected_steps_down_unless_ignored() {
    use common::records::{hooks_config, start};
    use common::{Backend, TestDb};
    let hooks = r#"
on_elected = ["sh", "-c", "RECORD elected; test \"$LEADERD_NODE_ID\" != a"]
on_demoted = ["RECORD", "demoted"]
leader_command = ["COMMAND"]
"#;
    let db = TestDb::new(Backend::Postgres);
    let settings = hooks_config(&db, hooks);
    let a = start(&db, &settings, "a", &db.url);
    until_records(&db.dir, "a is elected", |r| {
        r.iter().any(|r| r.node == "a" && r.event == "elected")
    })
    .await;
    let b = start(&db, &settings, "b", &db.url);
    let records = until_records(&db.dir, "b takes over and starts its command", |r| {
        r.iter().any(|r| r.node == "b" && r.event == "start")
    })
    .await;
    let of_a: Vec<&str> = records
        .iter()
        .filter(|r| r.node == "a")
        .map(|r| r.event.as_str())
        .collect();
    assert!(
        !of_a.contains(&"start"),
        "a started leader_command: {of_a:?}"
    );
    assert!(
        of_a.contains(&"demoted"),
        "a never ran on_demoted: {of_a:?}"
    );
    // The log goes out through a writer thread: the line may follow the records.
    a.wait_log(
        "on_elected failed; stepping down",
        std::time::Duration::from_secs(5),
    )
    .await;
    drop((a, b));

    let db = TestDb::new(Backend::Postgres);
    let settings = hooks_config(&db, &format!("on_elected_failure = \"ignore\"\n{hooks}"));
    let a = start(&db, &settings, "a", &db.url);
    until_records(&db.dir, "a leads anyway and starts its command", |r| {
        r.iter().any(|r| r.node == "a" && r.event == "start")
    })
    .await;
    a.wait_log(
        "on_elected failed; leading anyway",
        std::time::Duration::from_secs(5),
    )
    .await;
}
