//! The examples of docs/fencing.md, each run as written: the SQL transaction (PostgreSQL,
//! with psql), the shell script (each backend's client, as `leaderd lock`'s COMMAND), the
//! fencing token for other systems (PostgreSQL), and the Rust example, which must be the
//! doctest of `leaderd::Fence` (run by `cargo test --doc`).

use super::{store_backend, work_connection};
use crate::support::{Backend, TestDb, leaderd, lease, script, unique};
use leaderd::store::{DatabaseUrl, Fence, LeaseStore, SqlStore, Timeouts};
use std::process::{Command, Output};
use std::time::Duration;

fn docs() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fencing.md")).unwrap()
}

/// The body of the first ```` ```lang ```` block after `heading`.
fn block(heading: &str, lang: &str) -> String {
    let docs = docs();
    let after = docs
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("{heading:?} in docs/fencing.md"));
    let body = after
        .split(&format!("```{lang}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("a {lang} block after {heading:?}"));
    body.split("```").next().unwrap().to_owned()
}

fn psql(db: &TestDb, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new("psql")
        .arg(&db.url)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn store(db: &TestDb) -> SqlStore {
    SqlStore::new(
        DatabaseUrl::parse(&db.url).unwrap(),
        Timeouts {
            connect: Duration::from_secs(2),
            query: Duration::from_secs(5),
        },
        true,
    )
}

/// `holder` leads `name`; its term.
async fn elect(db: &TestDb, name: &str) -> i64 {
    let mut store = store(db);
    store.ensure_row(name).await.unwrap();
    let before = store.get(name).await.unwrap().unwrap().term;
    assert!(
        store
            .claim(&lease(name, "a", Duration::from_secs(60), before))
            .await
            .unwrap()
            .is_some()
    );
    store.get(name).await.unwrap().unwrap().term
}

async fn attempts(db: &TestDb) -> i64 {
    let bigint = match db.backend {
        Backend::Mysql => "SIGNED",
        _ => "BIGINT",
    };
    work_connection(db)
        .await
        .number(&format!(
            "SELECT CAST(attempts AS {bigint}) AS n FROM outbox WHERE id = 42"
        ))
        .await
        .unwrap()
}

async fn create_outbox(db: &TestDb) {
    let mut conn = work_connection(db).await;
    let term = match db.backend {
        Backend::Sqlite => "INTEGER",
        _ => "BIGINT",
    };
    for sql in [
        "CREATE TABLE outbox (id INTEGER PRIMARY KEY, attempts INTEGER NOT NULL DEFAULT 0)"
            .to_owned(),
        "INSERT INTO outbox (id) VALUES (42)".to_owned(),
        format!("CREATE TABLE delivery_log (message_id INTEGER NOT NULL, term {term} NOT NULL)"),
    ] {
        conn.exec(&sql).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sql_example_runs_as_written() {
    let db = TestDb::new(Backend::Postgres);
    create_outbox(&db).await;
    let name = unique("orders");
    let term = elect(&db, &name).await;
    let example = block("### In SQL", "sql");
    assert!(
        example.contains("leaderd_fence('orders', 1764000000123456)"),
        "{example}"
    );
    let live = example
        .replace("'orders'", &format!("'{name}'"))
        .replace("1764000000123456", &term.to_string());
    let ran = psql(&db, &[], &live);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(attempts(&db).await, 1);
    // The same with a term that does not hold: refused, nothing commits.
    let stale = example.replace("'orders'", &format!("'{name}'"));
    let refused = psql(&db, &[], &stale);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("leaderd fence:"), "{said}");
    assert_eq!(attempts(&db).await, 1);
}

/// The shell example's line for `backend`, run as `leaderd lock`'s COMMAND: it commits
/// under the lock; run again with the fence of the lock's term once the lock is released,
/// it fails and commits nothing.
async fn the_shell_example_runs_under_leaderd_lock(backend: Backend) {
    let db = TestDb::new(backend);
    create_outbox(&db).await;
    let label = match backend {
        Backend::Postgres => "# PostgreSQL\n",
        Backend::Mysql => "# MySQL/MariaDB\n",
        Backend::Sqlite => "# SQLite\n",
    };
    let example = block("### In a shell script", "sh");
    let line = example
        .split(label)
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("a line after {label:?} in {example}"));
    let relay = script(
        &db.dir,
        "relay-outbox",
        &format!("#!/bin/sh\nset -e\n{line}\n"),
    );
    let database = db.url.rsplit('/').next().unwrap().to_owned();
    let file = db
        .url
        .strip_prefix("sqlite://")
        .unwrap_or_default()
        .to_owned();
    let client_env = |command: &mut Command| {
        command
            .env("APP_DATABASE_URL", &db.url)
            .env("APP_DATABASE", &database)
            .env("APP_DATABASE_FILE", &file)
            .env("MYSQL_HOST", "127.0.0.1");
    };
    let name = unique("outbox");
    let mut lock = leaderd();
    lock.args(["lock", &name, "--"])
        .arg(&relay)
        .current_dir(&db.dir)
        .env("LEADERD_DATABASE__URL", &db.url);
    client_env(&mut lock);
    let ran = lock.output().unwrap();
    assert!(
        ran.status.success(),
        "{}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(attempts(&db).await, 1);

    // The lock is released now: the fence of its last term refuses.
    let term = store(&db)
        .get(&format!("lock:{name}"))
        .await
        .unwrap()
        .unwrap()
        .term;
    let fence = Fence::new(&format!("lock:{name}"), term).statement(store_backend(backend));
    let mut late = Command::new(&relay);
    late.env("LEADERD_FENCE", &fence);
    client_env(&mut late);
    let late = late.output().unwrap();
    assert!(
        !late.status.success(),
        "{}",
        String::from_utf8_lossy(&late.stdout)
    );
    assert!(String::from_utf8_lossy(&late.stderr).contains("leaderd fence:"));
    assert_eq!(attempts(&db).await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_example_refuses_an_older_term() {
    let db = TestDb::new(Backend::Postgres);
    let example = block("### Writes to other systems", "sql");
    let (once, write) = example.split_once("-- with each write").unwrap();
    let created = psql(&db, &[], once);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let write = format!("-- with each write{write}");
    for (term, accepted) in [
        (1_764_000_000_000_005_i64, true),
        (1_764_000_000_000_003, false),
        (1_764_000_000_000_007, true),
    ] {
        let ran = psql(&db, &["-At", "-v", &format!("term={term}")], &write);
        assert!(
            ran.status.success(),
            "{}",
            String::from_utf8_lossy(&ran.stderr)
        );
        let returned = String::from_utf8_lossy(&ran.stdout).trim().to_owned();
        assert_eq!(
            returned == term.to_string(),
            accepted,
            "term {term}: {returned:?}"
        );
    }
}

/// The Rust example of docs/fencing.md is the heart of the doctest of `leaderd::Fence`,
/// which `cargo test --doc` runs on SQLite.
#[test]
fn the_rust_example_is_the_doctest() {
    let example = block("### In Rust", "rust");
    let source =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/fence.rs"))
            .unwrap();
    let doctest: Vec<&str> = source
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("///"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let doctest = doctest.join("\n");
    assert!(
        doctest.contains(example.trim_end()),
        "docs/fencing.md's Rust example is not in the doctest of src/store/fence.rs:\n{example}"
    );
}

backend_tests!(postgres = Backend::Postgres => the_shell_example_runs_under_leaderd_lock);
backend_tests!(mysql = Backend::Mysql => the_shell_example_runs_under_leaderd_lock);
backend_tests!(sqlite = Backend::Sqlite => the_shell_example_runs_under_leaderd_lock);
