//! Errors as the user reads them from the binary: one cause chain, each part once, with
//! the root cause kept, and the `leaderd migrate` hint only where a table is missing.

use crate::support as common;

use common::leaderd;

/// `leaderd status` against `url`: the exit status and stderr.
fn status_error(url: &str) -> (Option<i32>, String) {
    let dir = std::env::temp_dir();
    let output = leaderd()
        .arg("status")
        .current_dir(&dir)
        .env("LEADERD_NODE__ID", "n1")
        .env("LEADERD_DATABASE__URL", url)
        .env("LEADERD_DATABASE__CONNECT_TIMEOUT", "5s")
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// No part of the message is said twice.
fn assert_said_once(stderr: &str) {
    let parts: Vec<&str> = stderr.trim().split(": ").collect();
    for (i, part) in parts.iter().enumerate() {
        assert!(
            !parts[..i].iter().any(|p| p.contains(part)),
            "{part:?} said twice: {stderr}"
        );
    }
}

#[test]
fn connection_errors_keep_their_root_cause_once_without_the_migrate_hint() {
    let closed = common::free_port();
    let cases = [
        (
            format!("postgres://postgres@127.0.0.1:{closed}/test"),
            "Connection refused",
        ),
        (
            format!("mysql://root@127.0.0.1:{closed}/test"),
            "Connection refused",
        ),
        (
            "postgres://postgres@no-such-host.invalid/test".to_owned(),
            "lookup address information",
        ),
        (
            "mysql://root@no-such-host.invalid/test".to_owned(),
            "lookup address information",
        ),
        (
            "postgres://nobody@127.0.0.1:5432/test".to_owned(),
            "role \"nobody\" does not exist",
        ),
        (
            "mysql://nobody:pw@127.0.0.1:3306/test".to_owned(),
            "Access denied for user 'nobody'",
        ),
        (
            "postgres://postgres@127.0.0.1:5432/test?sslmode=verify-full".to_owned(),
            "not valid for the name \"127.0.0.1\"",
        ),
    ];
    for (url, cause) in cases {
        let (code, stderr) = status_error(&url);
        assert_eq!(code, Some(69), "{url}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{url}: {stderr}");
        assert!(
            stderr.contains(cause),
            "{url}: expected {cause:?} in {stderr}"
        );
        assert!(!stderr.contains("migrate"), "{url}: {stderr}");
        assert!(!stderr.contains("pw"), "{url}: {stderr}");
        assert_said_once(&stderr);
    }
}

#[test]
fn a_missing_table_says_to_migrate() {
    let path = std::env::temp_dir().join(common::unique("errors") + ".sqlite3");
    let (code, stderr) = status_error(&format!("sqlite://{}", path.display()));
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, Some(69), "{stderr}");
    assert!(stderr.contains("no such table"), "{stderr}");
    assert!(stderr.contains("run `leaderd migrate`"), "{stderr}");
    assert_said_once(&stderr);
}
