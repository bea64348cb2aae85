//! The Prometheus alert rules shipped in config/prometheus/: valid for promtool, right in
//! their unit tests (series in, alerts out), and written against metrics leaderd serves.

use super::*;
use std::collections::BTreeSet;

const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/prometheus/leaderd-alerts.yml"
);
const RULE_TESTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/prometheus/leaderd-alerts.test.yml"
);

/// promtool, from Debian's `prometheus` package, which scripts/test.sh installs.
fn promtool(args: &[&str]) -> (bool, String) {
    let tool = std::env::var("LEADERD_PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let output = std::process::Command::new(&tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {tool}: {e}; scripts/test.sh installs it (apt-get install prometheus)"
            )
        });
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

const ALERTS: [&str; 11] = [
    "LeaderdNoLeader",
    "LeaderdMultipleLeaders",
    "LeaderdRenewalsFailing",
    "LeaderdClockOffsetLarge",
    "LeaderdLeadershipFlapping",
    "LeaderdMetricsAbsent",
    "LeaderdDown",
    "LeaderdPausedTooLong",
    "LeaderdHooksFailing",
    "LeaderdHealthCheckFailing",
    "LeaderdLockJobNotRun",
];

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/grafana/leaderd-dashboard.json"
);

/// The Grafana dashboard is valid JSON; every panel has queries, each naming a leaderd
/// metric (that leaderd serves them is `the_alert_rules_use_metrics_leaderd_serves`), and
/// each query parses as PromQL (promtool, as recording rules, with Grafana's variables
/// filled in); the panels the issue asks for are there.
#[test]
fn the_grafana_dashboard_is_valid_and_queries_leaderd_metrics() {
    let text = std::fs::read_to_string(DASHBOARD).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut exprs = Vec::new();
    let mut ids = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap();
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "duplicate id: {title}"
        );
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title} has no query");
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            assert!(expr.contains("leaderd_"), "{title}: {expr}");
            exprs.push(expr.to_owned());
        }
    }
    let titles: Vec<&str> = panels
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for wanted in [
        "Leader per election",
        "Term",
        "Renew margin",
        "Handovers",
        "Hook outcomes",
        "Database errors",
        "Lock jobs",
    ] {
        assert!(
            titles.iter().any(|t| t.starts_with(wanted)),
            "no {wanted} panel: {titles:?}"
        );
    }
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, expr) in exprs.iter().enumerate() {
        let expr = expr
            .replace("$__rate_interval", "5m")
            .replace("$election", ".*");
        rules.push_str(&format!(
            "      - record: dashboard_{i}\n        expr: {expr:?}\n"
        ));
    }
    let dir = std::env::temp_dir().join(format!("leaderd-dashboard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("queries.yml");
    std::fs::write(&file, &rules).unwrap();
    let (ok, report) = promtool(&["check", "rules", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(ok, "{report}\n{rules}");
}

/// Where the rules' runbook URLs point, before an operator replaces the base.
const RUNBOOK_BASE: &str = "https://leaderd.example/docs/operations.md#";

/// Every alert has a runbook_url into docs/operations.md, at a heading of its Runbooks
/// section (GitHub's anchor: the heading lower-cased).
#[test]
fn every_alert_has_a_runbook_in_docs_operations() {
    let rules = std::fs::read_to_string(RULES).unwrap();
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    let runbooks = docs
        .split("\n## Runbooks\n")
        .nth(1)
        .expect("docs/operations.md has a Runbooks section");
    let runbooks = runbooks.split("\n## ").next().unwrap();
    for block in rules.split("- alert: ").skip(1) {
        let alert = block.split_whitespace().next().unwrap();
        let url = block
            .lines()
            .find_map(|line| line.trim().strip_prefix("runbook_url: "))
            .unwrap_or_else(|| panic!("{alert} has no runbook_url"));
        let anchor = alert.to_lowercase();
        assert_eq!(url, format!("\"{RUNBOOK_BASE}{anchor}\""), "{alert}");
        assert!(
            runbooks.contains(&format!("\n### {alert}\n")),
            "no runbook heading for {alert} in docs/operations.md"
        );
    }
    assert_eq!(rules.matches("- alert: ").count(), ALERTS.len());
}

#[test]
fn the_alert_rules_pass_promtool_check_rules() {
    let (ok, text) = promtool(&["check", "rules", RULES]);
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", ALERTS.len())),
        "{text}"
    );
    let rules = std::fs::read_to_string(RULES).unwrap();
    for alert in ALERTS {
        assert!(rules.contains(&format!("- alert: {alert}\n")), "no {alert}");
    }
    // The one-leader rules count leaders per election.
    assert!(rules.contains("expr: sum by (election) (leaderd_is_leader) < 1"));
    assert!(rules.contains("expr: sum by (election) (leaderd_is_leader) > 1"));
}

/// Series in, alerts out: one leader is quiet, a handover's overlapping or missing scrape
/// is not an alert, no leader or two for a minute are, per election; failing rounds and
/// a large clock offset on the node concerned.
#[test]
fn the_alert_rules_pass_their_promtool_unit_tests() {
    let (ok, text) = promtool(&["test", "rules", RULE_TESTS]);
    assert!(ok && text.contains("SUCCESS"), "{text}");
    // Every rule has a test that expects it to fire.
    let tests = std::fs::read_to_string(RULE_TESTS).unwrap();
    for alert in ALERTS {
        let fires = tests
            .split("alertname: ")
            .skip(1)
            .any(|case| case.starts_with(alert) && case.contains("exp_labels:"));
        assert!(fires, "no test expects {alert} to fire");
    }
}

/// The metric names of a /metrics text: those of its samples, as Prometheus stores them,
/// and the declared ones (counters with `_total`).
fn served_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            match declared.split_once(' ') {
                Some((name, "counter")) => names.insert(format!("{name}_total")),
                // A histogram by its base name too, as the descriptions name it.
                Some((name, "gauge" | "histogram")) => names.insert(name.to_owned()),
                _ => false,
            };
        } else if line.starts_with("leaderd_") {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

/// /metrics of a node, once it has text containing `wanted`.
async fn metrics_with(port: u16, wanted: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let (code, body) = http_get(port, "/metrics");
            assert_eq!(code, 200, "{body}");
            if body.contains(wanted) {
                return body;
            }
        }
        assert!(Instant::now() < deadline, "no {wanted:?} in /metrics");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every `leaderd_` name in the rules and their tests is one the real binary serves, and
/// the per-election ones carry the `election` label the rules group by. A family nothing
/// has counted in is not served, so two nodes: one whose database refuses connections
/// (failed rounds, the error counter), one that leads (the transitions counter).
#[tokio::test(flavor = "multi_thread")]
async fn the_alert_rules_use_metrics_leaderd_serves() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = NodeSettings::default();
    let refused = format!("postgres://postgres@127.0.0.1:{}/test", common::free_port());
    let port = common::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _node = Node::start_with_env(
        &db,
        &settings,
        "a",
        &refused,
        &[("LEADERD_HTTP__LISTEN", &listen)],
    );
    let errors = format!(
        "leaderd_database_errors_total{{election=\"{}\",kind=",
        settings.election
    );
    let body = metrics_with(port, &errors).await;
    // With a hook, whose run counters are served from the start.
    let hooked = db.dir.join("hooked.toml");
    std::fs::write(&hooked, "[hooks]\non_demoted = [\"true\"]\n").unwrap();
    let leader_settings = NodeSettings {
        config_file: Some(hooked),
        ..settings.clone()
    };
    let (_leader, leader_ports) = Node::start_with_http(&db, &leader_settings, &["b"]);
    let elected = format!(
        "leaderd_leadership_transitions_total{{election=\"{}\",direction=\"elected\"}} 1",
        settings.election
    );
    let leader_body = metrics_with(leader_ports[0], &elected).await;
    // The lock metrics come from `leaderd lock --metrics-file` (the textfile collector).
    let textfile = db.dir.join("lock.prom");
    let locked = leaderd()
        .args([
            "lock",
            "--metrics-file",
            textfile.to_str().unwrap(),
            "job",
            "--",
            "true",
        ])
        .env("LEADERD_DATABASE__URL", &db.url)
        .output()
        .unwrap();
    assert!(locked.status.success(), "{locked:?}");
    let lock_text = std::fs::read_to_string(&textfile).unwrap();
    let served: BTreeSet<String> = served_names(&body)
        .into_iter()
        .chain(served_names(&leader_body))
        .chain(served_names(&lock_text))
        .collect();
    for sample in [
        format!("leaderd_is_leader{{election=\"{}\"}} 0", settings.election),
        format!(
            "leaderd_rounds_total{{election=\"{}\"}} ",
            settings.election
        ),
        format!(
            "leaderd_database_clock_offset_seconds{{election=\"{}\"}} ",
            settings.election
        ),
    ] {
        assert!(body.contains(&sample), "no {sample:?} in\n{body}");
    }

    for file in [RULES, RULE_TESTS, DASHBOARD] {
        let text = std::fs::read_to_string(file).unwrap();
        let used: BTreeSet<&str> = text
            .match_indices("leaderd_")
            .map(|(at, _)| {
                let rest = &text[at..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect();
        assert!(used.contains("leaderd_is_leader"), "{file}: {used:?}");
        for name in used {
            assert!(
                served.contains(name),
                "{file} uses {name}, which leaderd does not serve: {served:?}"
            );
        }
    }
}
