//! The command line as users and scripts meet it: configuration errors and their exit
//! status, redaction, `status` and `migrate` on every backend, a database that is
//! unreachable when the daemon starts, and hook containment without a cgroup.

use crate::support as common;

use common::proxy::{Mode, Proxy};
use common::{Backend, Node, NodeSettings, Sampler, StatusFile, TestDb, leaderd, status_json};
use std::time::Duration;

mod environment;
mod messages;

fn check_config(env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let output = leaderd()
        .arg("check-config")
        .env("LEADERD_NODE__ID", "n1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn bad_configuration_exits_78_naming_key_and_value() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("LEADERD_ELECTION__TTL", "12OOms")],
            "election.ttl = \"12OOms\": not a duration",
        ),
        (
            &[
                ("LEADERD_ELECTION__TTL", "1s"),
                ("LEADERD_ELECTION__INTERVAL", "1s"),
            ],
            "election.ttl = \"1s\": must be greater than election.interval (1s)",
        ),
        (
            &[("LEADERD_DATABASE__URL", "redis://127.0.0.1/0")],
            "database.url = \"redis://127.0.0.1/0\": unknown scheme \"redis\"",
        ),
        (
            &[("LEADERD_NODE__ID", "")],
            "node.id = \"\": must not be empty",
        ),
        (
            &[("LEADERD_NODE__ID", &"n".repeat(101))],
            "node.id = \"nnnn",
        ),
        (
            &[("LEADERD_ELECTION__TLL", "2s")],
            "unknown configuration key `election.tll` (from environment variable LEADERD_ELECTION__TLL)",
        ),
    ];
    for (env, expected) in cases {
        let (code, _, stderr) = check_config(env);
        assert_eq!(code, Some(78), "{env:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.contains(expected),
            "{env:?}: expected {expected:?} in {stderr:?}"
        );
    }
}

#[test]
fn unknown_keys_in_a_file_name_the_file() {
    let path = std::env::temp_dir().join(common::unique("config") + ".toml");
    std::fs::write(&path, "[election]\nname = \"jobs\"\nintervall = \"1s\"\n").unwrap();
    let output = leaderd()
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(78));
    assert!(
        stderr.contains("`election.intervall`") && stderr.contains(path.to_str().unwrap()),
        "{stderr}"
    );
}

#[test]
fn check_config_prints_the_effective_configuration_without_secrets() {
    let (code, stdout, stderr) = check_config(&[
        (
            "LEADERD_DATABASE__URL",
            "postgres://app:hunter2@db.internal:5432/app",
        ),
        ("LEADERD_ELECTION__NAME", "billing"),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.contains("hunter2") && !stderr.contains("hunter2"));
    let config: toml::Table = stdout.parse().unwrap();
    assert_eq!(
        config["database"]["url"].as_str(),
        Some("postgres://app:***@db.internal:5432/app")
    );
    assert_eq!(config["election"]["name"].as_str(), Some("billing"));
    assert_eq!(config["node"]["id"].as_str(), Some("n1"));
    assert_eq!(config["election"]["ttl"].as_str(), Some("1s 200ms"));
}

async fn migrate_then_status_shows_the_leader(backend: Backend) {
    let db = TestDb::new(backend);
    let output = leaderd()
        .arg("migrate")
        .current_dir(&db.dir)
        .env("LEADERD_DATABASE__URL", &db.url)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let settings = NodeSettings::default();
    assert_eq!(
        status_json(&db, &settings.election)["leader"],
        serde_json::Value::Null
    );

    let node = Node::start(&db, &settings, "solo", &db.url);
    let mut sampler = Sampler::new();
    sampler
        .until(&[&node], Duration::from_secs(10), "solo leads", |s| {
            s[0].as_ref().is_some_and(StatusFile::is_leader)
        })
        .await;
    let status = status_json(&db, &settings.election);
    assert_eq!(status["leader"], "solo");
    assert_eq!(status["term"].as_i64(), node.status().unwrap().term);
    assert!(status["remaining_ms"].as_u64().unwrap() > 0);
    assert!(status["remaining_ms"].as_u64().unwrap() <= 1200);
}

/// Start-up with the database away is not fatal: the node waits, says so once, and leads
/// when the database comes back.
async fn an_unreachable_database_at_start_is_waited_for(backend: Backend) {
    let db = TestDb::new(backend);
    let proxy = Proxy::start(db.server_addr()).await;
    proxy.set(Mode::Drop);
    let node = Node::start(
        &db,
        &NodeSettings::default(),
        "patient",
        &db.url_via(proxy.addr),
    );
    let mut sampler = Sampler::new();
    sampler
        .until(&[&node], Duration::from_secs(10), "a status file", |s| {
            s[0].is_some()
        })
        .await;
    sampler.watch(&[&node], Duration::from_secs(3)).await;
    assert_eq!(node.status().unwrap().role, "unknown");
    let warnings = node
        .log()
        .matches("database round failed; retrying")
        .count();
    assert_eq!(warnings, 1, "logged once, not every retry:\n{}", node.log());

    proxy.set(Mode::Pass);
    let (_, waited) = sampler
        .until(
            &[&node],
            Duration::from_secs(5),
            "leads once the database is back",
            |s| s[0].as_ref().is_some_and(StatusFile::is_leader),
        )
        .await;
    assert!(
        waited <= Duration::from_millis(1500),
        "retries are at most an interval apart: {waited:?}"
    );
    node.wait_log("database reachable again", Duration::from_secs(5))
        .await;
}

/// `leaderd status` only reads: a monitoring role with nothing but SELECT on the table gets
/// the leader (on PostgreSQL, connecting used to prepare the claim and the release, which
/// are UPDATEs, and such a role got exit 69).
#[tokio::test(flavor = "multi_thread")]
async fn status_needs_nothing_but_select() {
    use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
    let db = TestDb::new(Backend::Postgres);
    let election = common::unique("watched");
    // The row to read: a lock run on the election's row leaves it released in its term.
    let locked = leaderd()
        .args(["lock", "--election-row", &election, "--", "true"])
        .env("LEADERD_DATABASE__URL", &db.url)
        .output()
        .unwrap();
    assert!(locked.status.success(), "{locked:?}");
    let role = common::unique("monitor");
    let admin = |sql: String| {
        let url = db.url.clone();
        async move {
            let mut c = AsyncPgConnection::establish(&url).await.unwrap();
            c.batch_execute(&sql).await.unwrap();
        }
    };
    admin(format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT ON service_leader_lock TO {role}"
    ))
    .await;
    let as_monitor = db
        .url
        .replace("postgres://postgres@", &format!("postgres://{role}@"));
    let output = leaderd()
        .args(["status", "--json"])
        .env("LEADERD_DATABASE__URL", &as_monitor)
        .env("LEADERD_ELECTION__NAME", &election)
        .output()
        .unwrap();
    // The role goes before any assertion can fail.
    admin(format!("DROP OWNED BY {role}; DROP ROLE {role}")).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(status["term"].as_i64() > Some(0), "{status}");
    assert_eq!(status["leader"], serde_json::Value::Null, "{status}");
}

/// Exit 69, naming the server and the election, and nothing else of the configuration: a
/// health check's environment may hold a secret.
#[tokio::test(flavor = "multi_thread")]
async fn status_of_an_unreachable_database_exits_69() {
    let dir = std::env::temp_dir().join(common::unique("status"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("leaderd.toml");
    std::fs::write(
        &config,
        "[election]\nname = \"nightly\"\n\n[election.health_check]\n\
         command = [\"true\"]\nenv = { API_TOKEN = \"s3cret-token\" }\n",
    )
    .unwrap();
    let output = leaderd()
        .args(["status", "--config"])
        .arg(&config)
        .env(
            "LEADERD_DATABASE__URL",
            "postgres://postgres@127.0.0.1:1/test",
        )
        .env("LEADERD_DATABASE__CONNECT_TIMEOUT", "500ms")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(output.status.code(), Some(69));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
    assert!(stderr.contains("\"nightly\""), "{stderr}");
    assert!(!stderr.contains("s3cret-token"), "{stderr}");
}

backend_tests!(postgres = Backend::Postgres => migrate_then_status_shows_the_leader, an_unreachable_database_at_start_is_waited_for);
backend_tests!(mysql = Backend::Mysql => migrate_then_status_shows_the_leader, an_unreachable_database_at_start_is_waited_for);
// SQLite has no connection that could be unreachable.
backend_tests!(sqlite = Backend::Sqlite => migrate_then_status_shows_the_leader);

/// JSON logs: every line parses, the role change carries election, node, term and leader,
/// and the database password appears nowhere (PostgreSQL here trusts any password).
#[tokio::test(flavor = "multi_thread")]
async fn json_logs_carry_role_changes_and_never_the_password() {
    let db = TestDb::new(Backend::Postgres);
    let url = db.url.replace("postgres@", "postgres:hunter2@");
    let status_path = db.dir.join("json.status.json");
    let child = leaderd()
        .args(["--log-format", "json", "run", "--id", "json-node"])
        .env("LEADERD_DATABASE__URL", &url)
        .env("LEADERD_ELECTION__NAME", "json")
        .env("LEADERD_STATUS__PATH", &status_path)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !StatusFile::read(&status_path).is_some_and(|s| s.is_leader()) {
        assert!(start.elapsed() < Duration::from_secs(10), "never led");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!stderr.contains("hunter2"), "{stderr}");
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let elected = lines
        .iter()
        .find(|l| l["message"] == "role is now leader")
        .unwrap_or_else(|| panic!("{stderr}"));
    assert_eq!(elected["level"], "INFO");
    assert_eq!(elected["election"], "json");
    assert_eq!(elected["node"], "json-node");
    // The database clock's microseconds, as a number.
    assert!(elected["term"].as_i64() > Some(1_700_000_000_000_000));
    assert_eq!(elected["leader"], "json-node");
    assert!(lines.iter().any(|l| l["message"] == "released the lease"));
}

/// Where the cgroup tree is read-only (as in most containers), `hooks.containment =
/// "cgroup"` stops leaderd at start (78, saying why), and "auto" logs that it holds hooks
/// as a subreaper. `unshare` gives the command a mount namespace of its own to do that in.
#[test]
fn without_a_writable_cgroup_cgroup_containment_is_refused_and_auto_falls_back() {
    let db = TestDb::new(Backend::Sqlite);
    let read_only = format!(
        "mount -o remount,bind,ro {} && exec \"$@\"",
        common::escape::cgroup2_mount()
    );
    let lock = |mode: &str| {
        std::process::Command::new("unshare")
            .args(["-m", "sh", "-c", &read_only, "sh"])
            .arg(env!("CARGO_BIN_EXE_leaderd"))
            .args(["lock", "-v", "containment", "--", "true"])
            .env("LEADERD_DATABASE__URL", &db.url)
            .env("LEADERD_HOOKS__CONTAINMENT", mode)
            .output()
            .expect("unshare (util-linux) runs")
    };
    let refused = lock("cgroup");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("hooks.containment = \"cgroup\", but leaderd has no cgroup v2")
            && stderr.contains("Read-only file system"),
        "{stderr}"
    );
    let fell_back = lock("auto");
    let stderr = String::from_utf8_lossy(&fell_back.stderr);
    assert_eq!(fell_back.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("hook containment: subreaper").count(),
        1,
        "logged once, with the reason: {stderr}"
    );
    assert!(
        stderr.contains("no cgroup: cannot create a cgroup in"),
        "{stderr}"
    );
}
