//! What leaderd says about a configuration: the keys a reload cannot apply, named once; a
//! TOML error in one line; a conflict that names each key with its own value.

use super::{Dir, text};
use crate::support::leaderd;
use nix::sys::signal::Signal;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A `run` node with `file`, logging to `log` in `dir`.
fn run_node(dir: &Dir, file: &std::path::Path, log: &std::path::Path) -> Child {
    leaderd()
        .args(["--config", file.to_str().unwrap(), "run", "--id", "a"])
        .current_dir(&dir.0)
        .env(
            "LEADERD_DATABASE__URL",
            format!("sqlite://{}/db.sqlite3", dir.0.display()),
        )
        .env("LEADERD_STATUS__PATH", dir.0.join("a.status.json"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

fn wait_log(log: &std::path::Path, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "never logged {needle:?}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// After a change of `election.ttl` alone, the reload used to warn for `election` and for
/// `database` (whose query timeout follows the ttl), a line each. Now one line names the
/// key that changed. A file that is not TOML is rejected in one line, where toml draws
/// the line with a caret under it.
#[test]
fn a_reload_names_the_changed_keys_once_and_a_toml_error_in_one_line() {
    let dir = Dir::new();
    let file = dir.0.join("leaderd.toml");
    let log = dir.0.join("a.log");
    std::fs::write(&file, "[election]\nttl = \"1200ms\"\n").unwrap();
    let mut child = run_node(&dir, &file, &log);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    wait_log(&log, "leaderd starting");
    std::fs::write(&file, "[election]\nttl = \"2s\"\n").unwrap();
    nix::sys::signal::kill(pid, Signal::SIGHUP).unwrap();
    let text = wait_log(&log, "configuration reloaded");
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("only after a restart"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("only after a restart: election.ttl")
            && !warnings[0].contains("database"),
        "{text}"
    );

    std::fs::write(&file, "[election\nttl = \"2s\"\n").unwrap();
    nix::sys::signal::kill(pid, Signal::SIGHUP).unwrap();
    let text = wait_log(&log, "configuration reload rejected");
    let (at, line) = text
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("configuration reload rejected"))
        .unwrap();
    assert!(line.contains("is not valid TOML: line 1, column"), "{line}");
    // Nothing of the error on the lines after it (toml's drawing starts with " |").
    let rest: Vec<&str> = text.lines().skip(at + 1).collect();
    assert!(
        rest.iter()
            .all(|l| !l.trim_start().starts_with('|') && !l.contains('^')),
        "{text}"
    );
    nix::sys::signal::kill(pid, Signal::SIGTERM).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// `database.url` and `database.url_file` both set: the message used to print the URL
/// under `database.url_file`'s name. Each key is named with its own value now, the URL
/// redacted.
#[test]
fn the_url_and_url_file_conflict_names_each_with_its_value() {
    let dir = Dir::new();
    let url_file = dir.0.join("url");
    std::fs::write(&url_file, "postgres://u:s3cret@db/app\n").unwrap();
    let output = leaderd()
        .arg("check-config")
        .current_dir(&dir.0)
        .env("LEADERD_NODE__ID", "n1")
        .env("LEADERD_DATABASE__URL", "postgres://u:hunter2@db/app")
        .env("LEADERD_DATABASE__URL_FILE", &url_file)
        .output()
        .unwrap();
    let (code, _, stderr) = text(&output);
    assert_eq!(code, Some(78), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "leaderd: database.url_file = {:?}: database.url is set too \
             (postgres://u:***@db/app); set one of them",
            url_file.display().to_string()
        )
    );
}
