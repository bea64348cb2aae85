//! Configuration from the environment and from secret files: the hook variables that
//! stand in for keys, log.format, database secrets, and what `leaderd lock` passes on.

use super::*;

/// `leaderd lock -- env`: the command sees LEADERD_LOCK, LEADERD_TERM and LEADERD_HOLDER,
/// the rest of the environment, and none of leaderd's `LEADERD_<SECTION>__<KEY>` variables.
#[test]
fn lock_commands_never_see_leaderds_configuration_variables() {
    let db = TestDb::new(Backend::Postgres);
    let url = db.url.replace("postgres@", "postgres:hunter2@");
    let output = leaderd()
        .args(["lock", "env-lock", "--", "env"])
        .current_dir(&db.dir)
        .env("LEADERD_DATABASE__URL", &url)
        .env("LEADERD_NODE__ID", "locker")
        .env("LEADERD_LOG__LEVEL", "debug")
        .env("SOMETHING_ELSE", "kept")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!stdout.contains("hunter2"), "{stdout}");
    let names: Vec<&str> = stdout.lines().filter_map(|l| l.split('=').next()).collect();
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("LEADERD_") && n.contains("__")),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l
            .strip_prefix("LEADERD_TERM=")
            .is_some_and(|term| term.parse::<i64>().is_ok_and(|t| t > 0))),
        "LEADERD_TERM: {stdout}"
    );
    for expected in ["LEADERD_LOCK=env-lock", "SOMETHING_ELSE=kept"] {
        assert!(
            stdout.lines().any(|l| l == expected),
            "{expected}: {stdout}"
        );
    }
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("LEADERD_HOLDER=locker:")),
        "{stdout}"
    );
}

/// `LEADERD_NODE_ID` and `LEADERD_ELECTION` (the hook variables, one underscore) stand in
/// for node.id and election.name when those are set nowhere: with a warning naming the
/// real variable when set by hand, quietly under a hook (`LEADERD_EVENT` set), and never
/// over the real variables.
#[test]
fn hook_variables_stand_in_for_node_id_and_election_with_a_warning() {
    let run = |env: &[(&str, &str)]| {
        let output = leaderd()
            .arg("check-config")
            .env_remove("LEADERD_NODE__ID")
            .env_remove("LEADERD_ELECTION__NAME")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        (
            String::from_utf8(output.stdout).unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };
    let (stdout, stderr) = run(&[("LEADERD_NODE_ID", "web-1"), ("LEADERD_ELECTION", "jobs")]);
    assert!(stdout.contains("id = \"web-1\""), "{stdout}");
    assert!(stdout.contains("name = \"jobs\""), "{stdout}");
    assert!(stderr.contains("WARN"), "{stderr}");
    assert!(stderr.contains("LEADERD_NODE__ID"), "{stderr}");
    assert!(stderr.contains("LEADERD_ELECTION__NAME"), "{stderr}");
    // A leaderd started from a hook: the same values, no warning.
    let (stdout, stderr) = run(&[
        ("LEADERD_NODE_ID", "web-1"),
        ("LEADERD_ELECTION", "jobs"),
        ("LEADERD_EVENT", "elected"),
    ]);
    assert!(stdout.contains("id = \"web-1\""), "{stdout}");
    assert!(stdout.contains("name = \"jobs\""), "{stdout}");
    assert!(!stderr.contains("WARN"), "{stderr}");
    // The real variables win, silently.
    let (stdout, stderr) = run(&[
        ("LEADERD_NODE_ID", "web-1"),
        ("LEADERD_NODE__ID", "web-2"),
        ("LEADERD_ELECTION", "jobs"),
        ("LEADERD_ELECTION__NAME", "mail"),
    ]);
    assert!(stdout.contains("id = \"web-2\""), "{stdout}");
    assert!(stdout.contains("name = \"mail\""), "{stdout}");
    assert!(!stderr.contains("WARN"), "{stderr}");
}

/// log.format from the file or LEADERD_LOG__FORMAT makes the log JSON lines, and
/// --log-format wins over both. The line logged is the LEADERD_NODE_ID warning.
#[test]
fn log_format_comes_from_file_and_environment_and_the_flag_wins() {
    let db = TestDb::new(Backend::Sqlite);
    let file = db.dir.join("json.toml");
    std::fs::write(&file, "[log]\nformat = \"json\"\n").unwrap();
    let stderr_of = |args: &[&str], env: &[(&str, &str)]| {
        let output = leaderd()
            .args(args)
            .arg("check-config")
            .env_remove("LEADERD_NODE__ID")
            .env("LEADERD_NODE_ID", "web-1")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        String::from_utf8(output.stderr).unwrap()
    };
    let is_json = |stderr: &str| {
        assert!(stderr.contains("LEADERD_NODE__ID"), "{stderr}");
        stderr
            .lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
    };
    let file_arg = ["--config", file.to_str().unwrap()];
    assert!(!is_json(&stderr_of(&[], &[])));
    assert!(is_json(&stderr_of(&[], &[("LEADERD_LOG__FORMAT", "json")])));
    assert!(is_json(&stderr_of(&file_arg, &[])));
    assert!(!is_json(&stderr_of(
        &["--log-format", "text"],
        &[("LEADERD_LOG__FORMAT", "json")]
    )));
    assert!(!is_json(&stderr_of(
        &[&file_arg[..], &["--log-format", "text"]].concat(),
        &[]
    )));
    let (code, _, stderr) = check_config(&[("LEADERD_LOG__FORMAT", "xml")]);
    assert_eq!(code, Some(78));
    assert!(stderr.contains("log.format = \"xml\""), "{stderr}");
}

/// `check-config` and `migrate` (a real connection to PostgreSQL, which trusts any
/// password here) with the database secret from `env`: the password never shows, the
/// redacted URL has `***` where it goes, and the connection works.
fn uses_secret(db: &TestDb, env: &[(&str, &str)]) {
    for command in ["check-config", "migrate"] {
        let output = leaderd()
            .arg(command)
            .current_dir(&db.dir)
            .env_remove("LEADERD_DATABASE__URL")
            .env("LEADERD_NODE__ID", "n1")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8(output.stdout).unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        );
        assert_eq!(output.status.code(), Some(0), "{command}: {stdout}{stderr}");
        assert!(!stdout.contains("hunter2") && !stderr.contains("hunter2"));
        assert!(
            stdout.contains("postgres:***@127.0.0.1"),
            "{command}: {stdout}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn database_secrets_come_from_files_and_systemd_credentials() {
    let db = TestDb::new(Backend::Postgres);
    let with_password = db.url.replace("postgres@", "postgres:hunter2@");
    assert_ne!(with_password, db.url);
    let file = |name: &str, text: &str| {
        let path = db.dir.join(name);
        std::fs::write(&path, format!("{text}\n")).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let password = file("password", "hunter2");
    let url = file("url", &with_password);
    uses_secret(
        &db,
        &[
            ("LEADERD_DATABASE__URL", &db.url),
            ("LEADERD_DATABASE__PASSWORD_FILE", &password),
        ],
    );
    uses_secret(&db, &[("LEADERD_DATABASE__URL_FILE", &url)]);
    // systemd credentials: the whole URL, or the password for the configured URL.
    let credentials = db.dir.join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::write(credentials.join("database-url"), &with_password).unwrap();
    let credentials = credentials.to_str().unwrap();
    uses_secret(&db, &[("CREDENTIALS_DIRECTORY", credentials)]);
    let only_password = db.dir.join("only-password");
    std::fs::create_dir(&only_password).unwrap();
    std::fs::write(only_password.join("database-password"), "hunter2").unwrap();
    uses_secret(
        &db,
        &[
            ("CREDENTIALS_DIRECTORY", only_password.to_str().unwrap()),
            ("LEADERD_DATABASE__URL", &db.url),
        ],
    );
    // A URL in a file that does not parse: the key and the file, not the secret.
    let bad = file("bad", "postgres://postgres:hunter2@127.0.0.1:port/test");
    let (code, stdout, stderr) = check_config(&[("LEADERD_DATABASE__URL_FILE", &bad)]);
    assert_eq!(code, Some(78), "{stdout}{stderr}");
    assert!(
        stderr.contains("database.url_file") && stderr.contains("/bad"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("hunter2") && !stdout.contains("hunter2"),
        "{stderr}"
    );
}
