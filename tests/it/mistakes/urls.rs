//! A database URL the driver would refuse, or one that names no database, stops every
//! command with 78 at load: `check-config` used to pass `sslmod=require`, `status` then
//! exited 69 with "invalid connection string", and `run` retried forever, so the unit's
//! `RestartPreventExitStatus=78` never fired.

use super::{Dir, output_within, text};
use crate::support::leaderd;
use std::time::{Duration, Instant};

#[test]
fn a_bad_database_url_stops_check_config_status_and_run_with_78() {
    let dir = Dir::new();
    for (url, expected) in [
        (
            "postgres://u:s3cret@127.0.0.1:5432/test?sslmod=require",
            "unknown parameter \"sslmod\"; did you mean sslmode?",
        ),
        (
            "postgres://127.0.0.1:5432/test?ssl-mode=REQUIRED",
            "unknown parameter \"ssl-mode\"; did you mean sslmode?",
        ),
        (
            "mysql://root@127.0.0.1:3306/test?sslmode=REQUIRED",
            "unknown parameter \"sslmode\"; did you mean ssl-mode?",
        ),
        ("mysql://root@127.0.0.1:3306", "names no database"),
        ("postgres://postgres@127.0.0.1:5432", "names no database"),
    ] {
        for args in [&["check-config"][..], &["status"], &["run"]] {
            let started = Instant::now();
            let output = output_within(
                leaderd()
                    .args(args)
                    .current_dir(&dir.0)
                    .env("LEADERD_NODE__ID", "n1")
                    .env("LEADERD_DATABASE__URL", url),
                Duration::from_secs(20),
            );
            let (code, _, stderr) = text(&output);
            assert_eq!(code, Some(78), "{url} {args:?}: {stderr}");
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{url} {args:?}"
            );
            assert!(
                stderr.contains("database.url = ") && stderr.contains(expected),
                "{url} {args:?}: {stderr}"
            );
            assert!(!stderr.contains("s3cret"), "{stderr}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert!(left.is_empty(), "a command touched a database: {left:?}");
}
