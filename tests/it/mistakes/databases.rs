//! No silent local database. With nothing configured, `leaderd lock x -- echo ran` used to
//! run the job and exit 0, having created `leaderd.sqlite3` (and its side files) in the
//! current directory: cron on every host would each run the job. `status` and `locks`
//! created the file too. Now only `run` falls back to the embedded default, and says so;
//! every other command needs a database named, the operator commands never create one,
//! and errors name the database they were about.

use super::{Dir, output_within, text};
use crate::support::leaderd;
use std::process::Command;
use std::time::Duration;

/// `leaderd ARGS` in `dir`, reading no configuration file.
fn bare(dir: &Dir, args: &[&str]) -> Command {
    let mut command = leaderd();
    command
        .args(args)
        .current_dir(&dir.0)
        .env("LEADERD_DEFAULT_CONFIG", "")
        .env("LEADERD_NODE__ID", "n1");
    command
}

fn left_in(dir: &Dir) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect()
}

const NEEDING_A_DATABASE: &[&[&str]] = &[
    &["lock", "x", "--", "echo", "ran"],
    &["status"],
    &["locks"],
    &["migrate"],
    &["pause"],
    &["resume"],
    &["resign"],
    &["handover", "--to", "b"],
    &["watch", "--once"],
    &["wait", "--until", "elected", "--timeout", "1s"],
];

#[test]
fn only_run_takes_the_embedded_default_database() {
    let dir = Dir::new();
    for args in NEEDING_A_DATABASE {
        let output = output_within(&mut bare(&dir, args), Duration::from_secs(10));
        let (code, stdout, stderr) = text(&output);
        assert_eq!(code, Some(78), "{args:?}: {stderr}");
        assert!(!stdout.contains("ran"), "{args:?}: the job ran");
        assert!(
            stderr.contains("needs a database and none is configured")
                && stderr.contains("--database URL"),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(left_in(&dir).is_empty(), "{args:?}: {:?}", left_in(&dir));
    }
    // Commands that need no database still work; check-config says none is named.
    for args in [&["check-config"][..], &["status", "--local"]] {
        let (code, stdout, stderr) = text(&bare(&dir, args).output().unwrap());
        assert_ne!(code, Some(78), "{args:?}: {stderr}");
        if args[0] == "check-config" {
            assert!(stdout.contains("# no database named"), "{stdout}");
        }
    }
    // `run` keeps the default, and says so once.
    let output = output_within(&mut bare(&dir, &["run"]), Duration::from_secs(4));
    let (_, _, stderr) = text(&output);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("no database configured: using the embedded default"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(said[0].contains("sqlite://leaderd.sqlite3"), "{stderr}");
    assert!(dir.0.join("leaderd.sqlite3").exists());
}

/// Named explicitly, the default file is fine: by `--database`, or by its URL.
#[test]
fn a_database_named_explicitly_is_used_and_only_lock_and_migrate_create_one() {
    let dir = Dir::new();
    let path = dir.0.join("jobs.sqlite3");
    let url = format!("sqlite://{}", path.display());
    // An operator command does not create it, and says which database it looked for.
    let (code, _, stderr) = text(
        &bare(&dir, &["--database", &url, "status"])
            .output()
            .unwrap(),
    );
    assert_eq!(code, Some(69), "{stderr}");
    assert!(
        stderr.contains("does not exist") && stderr.contains(&url),
        "{stderr}"
    );
    assert!(!path.exists());
    // `lock` may: the file is named.
    let output = bare(
        &dir,
        &["--database", &url, "lock", "x", "--", "echo", "ran"],
    )
    .output()
    .unwrap();
    let (code, stdout, stderr) = text(&output);
    assert_eq!((code, stdout.as_str()), (Some(0), "ran\n"), "{stderr}");
    assert!(path.exists());
    let (code, stdout, stderr) = text(
        &bare(&dir, &["locks"])
            .env("LEADERD_DATABASE__URL", "sqlite://leaderd.sqlite3")
            .output()
            .unwrap(),
    );
    assert_eq!(code, Some(69), "{stdout}{stderr}");
    assert!(
        stderr.contains("sqlite://leaderd.sqlite3") && !dir.0.join("leaderd.sqlite3").exists(),
        "{stderr}"
    );
    let output = bare(&dir, &["lock", "x", "--", "echo", "ran"])
        .env("LEADERD_DATABASE__URL", "sqlite://leaderd.sqlite3")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    // A statement that fails names the database it ran on.
    let empty = dir.0.join("empty.sqlite3");
    std::fs::write(&empty, "").unwrap();
    let empty_url = format!("sqlite://{}", empty.display());
    let (code, _, stderr) = text(
        &bare(&dir, &["--database", &empty_url, "status"])
            .output()
            .unwrap(),
    );
    assert_eq!(code, Some(69), "{stderr}");
    assert!(
        stderr.contains("no such table") && stderr.contains(&format!("(database {empty_url})")),
        "{stderr}"
    );
}
