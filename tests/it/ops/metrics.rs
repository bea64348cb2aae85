//! What /metrics serves from the first scrape (build info, every database error kind at
//! 0, the lease's time left), and `leaderd lock --metrics-file` for the textfile
//! collector, which promtool lints (/metrics is OpenMetrics, which its lint does not
//! take).

use super::*;

/// promtool, as in `alerts`: `promtool check metrics` reads the text on stdin.
fn promtool_check_metrics(text: &str) -> (bool, String) {
    use std::io::Write;
    let tool = std::env::var("LEADERD_PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let mut child = std::process::Command::new(&tool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {tool}: {e}; scripts/test.sh installs it"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    )
}

fn sample(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// The first /metrics that shows `node` leading.
async fn first_scrape_as_leader(node: &Node, port: u16, settings: &NodeSettings) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    let led = format!("leaderd_is_leader{{election=\"{}\"}} 1", settings.election);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let (_, body) = http_get(port, "/metrics");
            if body.contains(&led) {
                return body;
            }
        }
        assert!(Instant::now() < deadline, "{}", node.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A node's first start on a new SQLite file (the embedded default) leads with no
/// database error. Its election and its member record open the file at once, and SQLite
/// answered the second switch to WAL "database is locked" without waiting: the first
/// round failed, with a warning and a query error: in 2 to 4 of 30 starts by hand, and in
/// every run of this test. Forty first starts, one after the other.
#[tokio::test(flavor = "multi_thread")]
async fn first_starts_on_a_new_sqlite_file_count_no_database_error() {
    for _ in 0..40 {
        let db = TestDb::new(Backend::Sqlite);
        let settings = NodeSettings::roomy();
        let (nodes, ports) = Node::start_with_http(&db, &settings, &["a"]);
        let text = first_scrape_as_leader(&nodes[0], ports[0], &settings).await;
        let errors = format!(
            "leaderd_database_errors_total{{election=\"{}\",kind=\"query\"}} 0",
            settings.election
        );
        assert!(
            text.contains(&errors),
            "a first start counted a query error:\n{}",
            nodes[0].log()
        );
    }
}

/// A healthy leader's first scrape: leaderd_build_info names the version and the commit,
/// every kind of database error is there at 0, and the lease's time left is within the
/// ttl and above the safety margin.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_carry_build_info_errors_at_zero_and_the_lease_left() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = NodeSettings::roomy();
    let (nodes, ports) = Node::start_with_http(&db, &settings, &["a"]);
    let text = first_scrape_as_leader(&nodes[0], ports[0], &settings).await;
    let version = env!("CARGO_PKG_VERSION");
    let build = text
        .lines()
        .find(|l| l.starts_with("leaderd_build_info{"))
        .unwrap_or_else(|| panic!("no build info in\n{text}"));
    assert!(build.contains(&format!("version=\"{version}\"")), "{build}");
    let commit = build
        .split("commit=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(
        commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "{build}"
    );
    assert!(build.ends_with(" 1"), "{build}");
    for kind in [
        "connect",
        "tls",
        "connect_timeout",
        "query",
        "schema_outdated",
        "permission",
        "query_timeout",
        "migration",
        "task",
        "pooler",
    ] {
        let line = format!(
            "leaderd_database_errors_total{{election=\"{}\",kind=\"{kind}\"}} 0",
            settings.election
        );
        assert!(text.contains(&line), "no {line:?} in\n{text}");
    }
    let left = sample(
        &text,
        &format!(
            "leaderd_lease_remaining_seconds{{election=\"{}\"}}",
            settings.election
        ),
    );
    assert!(left > 0.0 && left <= settings.ttl.as_secs_f64(), "{left}");
    // `--version` names the commit too.
    let version_line = leaderd().arg("--version").output().unwrap();
    let version_line = String::from_utf8_lossy(&version_line.stdout);
    assert!(
        version_line.contains(&format!("({commit})")),
        "{version_line}"
    );
}

/// `leaderd lock --metrics-file`: a run that ran, and one refused, each write the file
/// promtool accepts, with the outcome, exit status and the last success kept.
#[tokio::test(flavor = "multi_thread")]
async fn lock_writes_its_outcome_for_the_textfile_collector() {
    let db = TestDb::new(Backend::Sqlite);
    let file = db.dir.join("nightly.prom");
    let lock = |command: &[&str], extra: &[&str]| {
        leaderd()
            .arg("lock")
            .args(extra)
            .args(["--metrics-file", file.to_str().unwrap(), "nightly", "--"])
            .args(command)
            .env("LEADERD_DATABASE__URL", &db.url)
            .output()
            .unwrap()
    };
    let ran = lock(&["true"], &[]);
    assert!(ran.status.success(), "{ran:?}");
    let text = std::fs::read_to_string(&file).unwrap();
    let (ok, report) = promtool_check_metrics(&text);
    assert!(ok, "{report}\n{text}");
    assert!(
        text.contains("leaderd_lock_last_outcome{lock=\"nightly\",outcome=\"ran\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("leaderd_lock_last_exit_status{lock=\"nightly\"} 0"),
        "{text}"
    );
    let success = sample(
        &text,
        "leaderd_lock_last_success_timestamp_seconds{lock=\"nightly\"}",
    );

    // COMMAND's own status 75, the one leaderd gives a held lock: it ran all the same.
    let ran_75 = lock(&["sh", "-c", "exit 75"], &[]);
    assert_eq!(ran_75.status.code(), Some(75), "{ran_75:?}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("leaderd_lock_last_outcome{lock=\"nightly\",outcome=\"ran\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("leaderd_lock_last_exit_status{lock=\"nightly\"} 75"),
        "{text}"
    );

    // Held by a hold: refused, and the last success is kept.
    let held = lock(&["true"], &["--hold-at-least", "1h"]);
    assert!(held.status.success(), "{held:?}");
    let refused = lock(&["true"], &["-q"]);
    assert_eq!(refused.status.code(), Some(75));
    let text = std::fs::read_to_string(&file).unwrap();
    let (ok, report) = promtool_check_metrics(&text);
    assert!(ok, "{report}\n{text}");
    assert!(
        text.contains("leaderd_lock_last_outcome{lock=\"nightly\",outcome=\"held\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("leaderd_lock_last_outcome{lock=\"nightly\",outcome=\"ran\"} 0"),
        "{text}"
    );
    let kept = sample(
        &text,
        "leaderd_lock_last_success_timestamp_seconds{lock=\"nightly\"}",
    );
    assert!(kept >= success, "{text}");
}
