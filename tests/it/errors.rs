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
    // An empty database: status creates none.
    std::fs::write(&path, "").unwrap();
    let (code, stderr) = status_error(&format!("sqlite://{}", path.display()));
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, Some(69), "{stderr}");
    assert!(stderr.contains("no such table"), "{stderr}");
    assert!(stderr.contains("run `leaderd migrate`"), "{stderr}");
    assert_said_once(&stderr);
}

/// Percent-encodes all but the unreserved characters.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn sql(backend: common::Backend, database: &str, statement: &str) {
    let mut command = match backend {
        common::Backend::Postgres => {
            let mut c = std::process::Command::new("psql");
            c.args(["-h", "127.0.0.1", "-U", "postgres", "-d", database, "-qAtc"]);
            c
        }
        _ => {
            let mut c = std::process::Command::new("mysql");
            c.args(["-h", "127.0.0.1", "-u", "root", "-e"]);
            c
        }
    };
    let output = command.arg(statement).output().unwrap();
    assert!(
        output.status.success(),
        "{statement}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A database user of the test's own, dropped at the end.
struct User {
    backend: common::Backend,
    database: String,
    drop: String,
}

impl Drop for User {
    fn drop(&mut self) {
        sql(self.backend, &self.database, &self.drop);
    }
}

fn user(backend: common::Backend, database: &str, name: &str, password: &str) -> User {
    match backend {
        common::Backend::Postgres => {
            let quoted = name.replace('"', "\"\"");
            sql(
                backend,
                "postgres",
                &format!(
                    "CREATE ROLE \"{quoted}\" LOGIN SUPERUSER PASSWORD '{}'",
                    password.replace('\'', "''")
                ),
            );
            User {
                backend,
                database: database.to_owned(),
                drop: format!("DROP OWNED BY \"{quoted}\"; DROP ROLE \"{quoted}\""),
            }
        }
        _ => {
            let account = format!("'{}'@'%'", name.replace('\'', "''"));
            sql(
                backend,
                database,
                &format!(
                    "CREATE USER {account} IDENTIFIED BY '{}'; GRANT ALL ON *.* TO {account}",
                    password.replace('\'', "''")
                ),
            );
            User {
                backend,
                database: database.to_owned(),
                drop: format!("DROP USER {account}"),
            }
        }
    }
}

/// A password with `@` used to pass `check-config` (which split the URL at the last `@`)
/// and then fail to connect (tokio-postgres split at the first). Now the URL is parsed
/// once and the driver gets the user and password as fields: `@ : / %` and spaces in
/// user names and passwords work alike in check-config, migrate and status, encoded in
/// the URL, raw where a URL allows it, and from database.password_file.
#[test]
fn user_names_and_passwords_with_url_characters_connect() {
    for backend in [common::Backend::Postgres, common::Backend::Mysql] {
        let db = common::TestDb::new(backend);
        let name = format!("u @:/%x {}", std::process::id());
        let password = "p@ss:w/rd %41x";
        let (scheme, address) = db.url.split_once("://").unwrap();
        let database = address.rsplit_once('/').unwrap().1;
        let _user = user(backend, database, &name, password);
        let address = address.split_once('@').unwrap().1;
        let password_file = db.dir.join("password");
        std::fs::write(&password_file, format!("{password}\n")).unwrap();
        let encoded = format!(
            "{scheme}://{}:{}@{address}",
            encode(&name),
            encode(password)
        );
        // `@` and `:` as they are: `/`, `%` and the space must be encoded in a URL.
        let raw_password = password
            .replace('%', "%25")
            .replace('/', "%2F")
            .replace(' ', "%20");
        let raw = format!("{scheme}://{}:{raw_password}@{address}", encode(&name));
        let bare = format!("{scheme}://{}@{address}", encode(&name));
        for (url, file) in [
            (&encoded, None),
            (&raw, None),
            (&bare, Some(&password_file)),
        ] {
            for args in [
                &["check-config"][..],
                &["migrate"],
                &["status", "--json", "--new"],
            ] {
                let mut command = leaderd();
                command
                    .args(args)
                    .current_dir(&db.dir)
                    .env("LEADERD_NODE__ID", "n1")
                    .env("LEADERD_DATABASE__URL", url);
                if let Some(file) = file {
                    command.env("LEADERD_DATABASE__PASSWORD_FILE", file);
                }
                let output = command.output().unwrap();
                let stderr = String::from_utf8_lossy(&output.stderr);
                assert_eq!(
                    output.status.code(),
                    Some(0),
                    "{backend:?} {url} {args:?}: {stderr}"
                );
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(
                    !stdout.contains("p@ss") && !stderr.contains("p@ss"),
                    "{stdout}{stderr}"
                );
            }
        }
    }
}

/// A database outage is logged while it lasts, at most once per 10 s, with the error of the
/// failing rounds and their count; before, a 20 s outage logged one warning and then
/// nothing until "database reachable again failures=23".
#[tokio::test(flavor = "multi_thread")]
async fn an_outage_is_logged_while_it_lasts_at_a_limited_rate() {
    use common::proxy::{Mode, Proxy};
    use common::{Backend, Node, NodeSettings, Sampler, StatusFile, TestDb};
    use std::time::{Duration, Instant};
    let db = TestDb::new(Backend::Postgres);
    let proxy = Proxy::start(db.server_addr()).await;
    let node = Node::start(&db, &NodeSettings::default(), "a", &db.url_via(proxy.addr));
    let mut sampler = Sampler::new();
    sampler
        .until(&[&node], Duration::from_secs(15), "a leads", |s| {
            s[0].as_ref().is_some_and(StatusFile::is_leader)
        })
        .await;
    proxy.set(Mode::Drop);
    let cut = Instant::now();
    node.wait_log("database round failed; retrying", Duration::from_secs(10))
        .await;
    node.wait_log("database still failing after", Duration::from_secs(15))
        .await;
    // Twelve seconds of outage in all: one line after the first, not one per round.
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(cut.elapsed())).await;
    proxy.set(Mode::Pass);
    node.wait_log("database reachable again", Duration::from_secs(10))
        .await;
    let log = node.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("database still failing after"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains("error=") && lines[0].contains("failures="),
        "{}",
        lines[0]
    );
    let failures: u64 = lines[0]
        .split("failures=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", lines[0]));
    assert!(failures >= 5, "{}", lines[0]);
}

/// The "not encrypted" warning is for connections that leave the host: none for the
/// shared MariaDB at 127.0.0.1 (nor for an explicit `ssl-mode=DISABLED` or `sslmode=disable`
/// anywhere); through an address of this host that is not a loopback one, the warning
/// comes (naming `ssl-mode=DISABLED`, which silences it), and `lock -q` still prints
/// nothing of leaderd's own unless it failed.
#[tokio::test(flavor = "multi_thread")]
async fn lock_q_is_quiet_and_loopback_or_an_explicit_disable_draws_no_warning() {
    use common::{Backend, TestDb};
    let mysql = TestDb::new(Backend::Mysql);
    let postgres = TestDb::new(Backend::Postgres);
    let lock = |url: String, quiet: bool| async move {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_leaderd"));
        command.arg("lock");
        if quiet {
            command.arg("-q");
        }
        let output = command
            .args(["job", "--", "echo", "ran"])
            .env("LEADERD_NODE__ID", "n1")
            .env("LEADERD_DATABASE__URL", &url)
            .output()
            .await
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{url}: {output:?}");
        assert_eq!(String::from_utf8_lossy(&output.stdout), "ran\n");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    // The shared MariaDB offers no TLS; it is reached over loopback.
    assert_eq!(lock(mysql.url.clone(), false).await, "", "loopback");
    let localhost = mysql.url.replace("127.0.0.1", "localhost");
    assert_eq!(lock(localhost, false).await, "", "localhost");
    for url in [
        format!("{}?ssl-mode=DISABLED", mysql.url),
        format!("{}?sslmode=disable", postgres.url),
    ] {
        assert_eq!(lock(url.clone(), false).await, "", "{url}");
    }
    let Some(ip) = common::proxy::non_loopback_ip() else {
        eprintln!("skipped the remote half: this host has no address but loopback");
        return;
    };
    let proxy = common::proxy::Proxy::start_on(ip, "127.0.0.1:3306".parse().unwrap()).await;
    let remote = mysql.url.replace("127.0.0.1:3306", &proxy.addr.to_string());
    let stderr = lock(remote.clone(), false).await;
    assert!(stderr.contains("not encrypted"), "{stderr}");
    assert!(stderr.contains("ssl-mode=DISABLED"), "{stderr}");
    assert_eq!(lock(remote, true).await, "");
}

/// `wait --until leader` with no status file used to wait in silence; now it says once
/// that there is none. A timeout names the condition as the flag does, not as the code
/// does (`gave up waiting for NoLeader`).
#[test]
fn wait_says_what_it_waits_for() {
    use common::{Backend, TestDb};
    let db = TestDb::new(Backend::Sqlite);
    let wait = |until: &[&str]| {
        let output = leaderd()
            .args(["wait", "--timeout", "1s", "--until"])
            .args(until)
            .current_dir(&db.dir)
            .env("LEADERD_NODE__ID", "n1")
            .env("LEADERD_DATABASE__URL", &db.url)
            .env("LEADERD_STATUS__PATH", db.dir.join("none.json"))
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = wait(&["leader"]);
    assert_eq!(code, Some(75), "{stderr}");
    assert!(stderr.contains("no status file at"), "{stderr}");
    assert_eq!(stderr.matches("no status file").count(), 1, "{stderr}");
    assert!(
        stderr.contains("gave up waiting for leader (this node leads) after 1s"),
        "{stderr}"
    );
    let migrated = leaderd()
        .arg("migrate")
        .env("LEADERD_DATABASE__URL", &db.url)
        .output()
        .unwrap();
    assert!(migrated.status.success());
    let (code, stderr) = wait(&["elected"]);
    assert_eq!(code, Some(67), "{stderr}");
    assert!(stderr.contains("is unknown"), "{stderr}");
    // `--new`: an election no node has joined yet.
    let (code, stderr) = wait(&["elected", "--new"]);
    assert_eq!(code, Some(75), "{stderr}");
    assert!(
        stderr.contains("gave up waiting for elected (someone leads)"),
        "{stderr}"
    );
}

/// Hooks see LEADERD_PREVIOUS_LEADER as the leader before the current one, across a
/// spell without a leader: an observer that sees a, then no one, then b, gives b's
/// previous leader as a (it was empty). And a passing health check is no INFO line.
#[tokio::test(flavor = "multi_thread")]
async fn previous_leader_survives_a_gap_and_passing_checks_are_quiet() {
    use common::{Backend, Node, NodeSettings, Sampler, StatusFile, TestDb};
    use std::time::Duration;
    let db = TestDb::new(Backend::Postgres);
    let file = db.dir.join("hooks.toml");
    std::fs::write(
        &file,
        format!(
            "[election.health_check]\ncommand = [\"true\"]\ninterval = \"200ms\"\n\
             [hooks]\non_leader_change = [\"sh\", \"-c\", \"echo \\\"$LEADERD_LEADER $LEADERD_PREVIOUS_LEADER\\\" >> {}/changes.$LEADERD_NODE_ID\"]\n",
            db.dir.display()
        ),
    )
    .unwrap();
    let settings = NodeSettings {
        config_file: Some(file),
        ..NodeSettings::default()
    };
    let info = [("RUST_LOG", "leaderd=info")];
    let a = Node::start_with_env(&db, &settings, "a", &db.url, &info);
    let mut sampler = Sampler::new();
    sampler
        .until(&[&a], Duration::from_secs(15), "a leads", |s| {
            s[0].as_ref().is_some_and(StatusFile::is_leader)
        })
        .await;
    let c = Node::start_with_env(
        &db,
        &settings,
        "c",
        &db.url,
        &[
            ("RUST_LOG", "leaderd=info"),
            ("LEADERD_ELECTION__CANDIDATE", "false"),
        ],
    );
    let changes = db.dir.join("changes.c");
    let lines = || std::fs::read_to_string(&changes).unwrap_or_default();
    let until = |what: &str, line: &str| {
        let start = std::time::Instant::now();
        while !lines().lines().any(|l| l == line) {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{what}: {}",
                lines()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    until("c sees a", "a ");
    a.signal(nix::sys::signal::Signal::SIGTERM);
    until("c sees no one", " a");
    let b = Node::start_with_env(&db, &settings, "b", &db.url, &info);
    until("c sees b, after a", "b a");
    let log = a.log() + &c.log() + &b.log();
    assert!(
        !log.lines()
            .any(|l| l.contains("hook finished") && l.contains("health_check")),
        "{log}"
    );
}
