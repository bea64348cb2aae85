//! What the commands say, read as a user reads it: one-shot commands without the daemon's
//! INFO lines, `status` that reads at a glance, `migrate` that says when it did nothing,
//! a missing table counted as such, and release notifications that say they are back.

use super::*;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `leaderd ARGS…` on `db` for `election`, to completion.
fn run(db: &TestDb, election: &str, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    leaderd()
        .args(args)
        .current_dir(&db.dir)
        .env("LEADERD_DATABASE__URL", &db.url)
        .env("LEADERD_ELECTION__NAME", election)
        .env("LEADERD_STATUS__PATH", db.dir.join("one-shot.status.json"))
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The commands that answer and exit print their answer and, on stderr, their own
/// `leaderd:` lines and warnings, not the daemon's INFO lines (such as which wake-ups a
/// database has); `log.level = "debug"` asked for on purpose still logs.
#[tokio::test(flavor = "multi_thread")]
async fn one_shot_commands_print_no_info_lines() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = NodeSettings::default();
    let node = Node::start(&db, &settings, "a", &db.url);
    let mut sampler = Sampler::new();
    common::wait_agreed(&mut sampler, &[&node]).await;
    let commands: [&[&str]; 9] = [
        &["status"],
        &["locks"],
        &["watch", "--once"],
        &["wait", "--until", "elected", "--timeout", "5s"],
        &["resign", "--wait", "1s"],
        &["pause", "--for", "1s"],
        &["resume"],
        &["unlock", "nothing-here"],
        &["migrate"],
    ];
    for args in commands {
        let output = run(&db, &settings.election, &[], args);
        let stderr = text(&output.stderr);
        assert!(!stderr.contains(" INFO "), "{args:?}: {stderr}");
    }
    let debug = run(
        &db,
        &settings.election,
        &[("LEADERD_LOG__LEVEL", "debug")],
        &["watch", "--once"],
    );
    assert!(text(&debug.stderr).contains(" INFO "), "{debug:?}");
}

/// A row renewed 81.6 s ago (the test moves its renewal back) shows as "1m 22s", not to
/// the millisecond; the lease's other times likewise. An election nobody has joined as a
/// member says so instead of an empty `members:` header.
#[test]
fn status_reads_at_a_glance() {
    use diesel::{Connection, RunQueryDsl};
    let db = TestDb::new(Backend::Sqlite);
    let election = common::unique("glance");
    // A lock on the election's row: a holder that is no member.
    let held = run(
        &db,
        &election,
        &[],
        &[
            "lock",
            "--election-row",
            "--hold-at-least",
            "1h",
            &election,
            "true",
        ],
    );
    assert_eq!(held.status.code(), Some(0), "{held:?}");
    let path = db.url.strip_prefix("sqlite://").unwrap();
    let mut conn = diesel::SqliteConnection::establish(path).unwrap();
    diesel::sql_query(
        "UPDATE service_leader_lock SET \"timestamp\" = strftime('%Y-%m-%d %H:%M:%f', 'now', \
         '-81.6 seconds'), lease_ms = lease_ms + 81600 WHERE name = ?",
    )
    .bind::<diesel::sql_types::Text, _>(&election)
    .execute(&mut conn)
    .unwrap();
    let output = run(&db, &election, &[], &["status"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let said = text(&output.stdout);
    let lease = said.lines().find(|l| l.starts_with("lease:")).unwrap();
    assert!(lease.contains("renewed 1m 22s ago"), "{said}");
    assert!(!lease.contains("ms"), "{said}");
    assert!(
        said.contains("members:   none recorded"),
        "an empty members: header\n{said}"
    );
}

/// `migrate` says what it did: migrations applied the first time, and that the database
/// is up to date the second.
#[test]
fn migrate_run_twice_says_it_had_nothing_to_do() {
    for backend in [Backend::Sqlite, Backend::Postgres, Backend::Mysql] {
        let db = TestDb::new(backend);
        let first = run(&db, "default", &[], &["migrate"]);
        assert_eq!(first.status.code(), Some(0), "{first:?}");
        assert!(
            text(&first.stdout).contains("migrations applied to"),
            "{first:?}"
        );
        let second = run(&db, "default", &[], &["migrate"]);
        assert_eq!(second.status.code(), Some(0), "{second:?}");
        let said = text(&second.stdout);
        assert!(said.contains("up to date: no migration to apply"), "{said}");
        assert!(!said.contains("applied"), "{said}");
    }
}

/// A node told not to migrate, on a database nobody migrated, fails every round for a
/// missing table: counted as `kind="missing_table"`, not as any failed query.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_table_is_its_own_error_kind() {
    let db = TestDb::new(Backend::Sqlite);
    let port = common::free_port();
    let listen = format!("127.0.0.1:{port}");
    let settings = NodeSettings::default();
    let _node = Node::start_with_env(
        &db,
        &settings,
        "a",
        &db.url,
        &[
            ("LEADERD_HTTP__LISTEN", &listen),
            ("LEADERD_DATABASE__MIGRATE", "false"),
        ],
    );
    let counted = |body: &str, kind: &str| -> u64 {
        let prefix = format!(
            "leaderd_database_errors_total{{election=\"{}\",kind=\"{kind}\"}} ",
            settings.election
        );
        body.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |n| n.trim().parse().unwrap())
    };
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let (_, body) = common::http_get(port, "/metrics");
            if counted(&body, "missing_table") >= 2 {
                assert_eq!(counted(&body, "query"), 0, "{body}");
                return;
            }
        }
        assert!(
            std::time::Instant::now() < give_up,
            "no missing_table errors counted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// PostgreSQL's release notifications: the node says when they become unavailable (its
/// listening connection cut) and, once it listens again, that they are back.
#[tokio::test(flavor = "multi_thread")]
async fn release_notifications_say_when_they_are_back() {
    let db = TestDb::new(Backend::Postgres);
    let proxy = Proxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let settings = NodeSettings::default();
    let node = Node::start(&db, &settings, "a", &db.url_via(proxy.addr));
    let mut sampler = Sampler::new();
    common::wait_agreed(&mut sampler, &[&node]).await;
    proxy.set(Mode::Drop);
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    while !node.log().contains("release notifications unavailable") {
        assert!(std::time::Instant::now() < give_up, "{}", node.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.set(Mode::Pass);
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let log = node.log();
        let lost = log.find("release notifications unavailable").unwrap();
        if log[lost..].contains("release notifications available again") {
            break;
        }
        assert!(std::time::Instant::now() < give_up, "{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `man` and `completions` are in `--help`, since the docs use them.
#[test]
fn help_lists_man_and_completions() {
    let output = leaderd().arg("--help").output().unwrap();
    let help = text(&output.stdout);
    for command in ["man", "completions", "unlock"] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "{command} not in\n{help}"
        );
    }
}
