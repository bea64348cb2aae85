//! Crash loops back off: a `leader_command` that exits at once is restarted after longer
//! and longer waits, and a lone node whose `on_elected` fails is elected less and less
//! often, instead of every second or two for ever. The state shows in the status file,
//! `/metrics` and `leaderd status`.

use super::*;

/// The nanosecond instants of `event` records of `node`.
fn instants(dir: &std::path::Path, node: &str, event: &str) -> Vec<u128> {
    records(dir)
        .into_iter()
        .filter(|r| r.node == node && r.event == event)
        .map(|r| r.at)
        .collect()
}

fn gaps_s(at: &[u128]) -> Vec<f64> {
    at.windows(2).map(|w| (w[1] - w[0]) as f64 / 1e9).collect()
}

/// Waits until `node` has recorded `count` `event`s; returns their instants.
async fn until_count(dir: &std::path::Path, node: &str, event: &str, count: usize) -> Vec<u128> {
    let give_up = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        let at = instants(dir, node, event);
        if at.len() >= count {
            return at;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "{node}: {} {event} records: {:?}",
            at.len(),
            gaps_s(&at)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn status_document(node: &Node) -> serde_json::Value {
    let text = std::fs::read_to_string(&node.status_path).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
}

/// A leader_command with `restart = "always"` that exits at once: each restart waits
/// twice as long as the one before (from `interval`, 300 ms here), where it used to be
/// restarted every interval. Meanwhile the status file shows the backoff, and so does
/// `leaderd_hook_backoff_seconds`.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_command_that_keeps_exiting_is_restarted_less_and_less_often() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = NodeSettings {
        ttl: Duration::from_secs(1),
        interval: Duration::from_millis(300),
        ..hooks_config(
            &db,
            r#"
[hooks.leader_command]
command = ["sh", "-c", "RECORD ran; exit 1"]
restart = "always"
"#,
        )
    };
    let port = common::free_port();
    let listen = format!("127.0.0.1:{port}");
    let node = Node::start_with_env(
        &db,
        &settings,
        "a",
        &db.url,
        &[
            ("RECORD_DIR", db.dir.to_str().unwrap()),
            ("LEADERD_HTTP__LISTEN", &listen),
        ],
    );
    // Runs at about 0, 0.3, 0.9, 2.1 and 4.5 s (and 9.3): every 0.3 s without the backoff.
    let mut seen_in_file = None;
    let mut seen_in_metrics = 0.0f64;
    let give_up = std::time::Instant::now() + Duration::from_secs(40);
    let ran = loop {
        let document = status_document(&node);
        if document["backoff"]["hook"] == "leader_command" {
            seen_in_file = Some(document["backoff"].clone());
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let (_, body) = common::http_get(port, "/metrics");
            let prefix = "leaderd_hook_backoff_seconds{election=\"";
            for line in body.lines().filter(|l| l.starts_with(prefix)) {
                if line.contains("hook=\"leader_command\"") {
                    let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
                    seen_in_metrics = seen_in_metrics.max(value);
                }
            }
        }
        let ran = instants(&db.dir, "a", "ran");
        if ran.len() >= 5 {
            break ran;
        }
        assert!(std::time::Instant::now() < give_up, "{:?}", gaps_s(&ran));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let gaps = gaps_s(&ran);
    eprintln!("[measured] leader_command crash loop, gaps between runs (s): {gaps:?}");
    assert!(
        gaps[3] >= 1.8,
        "the fourth restart waited {:.2}s (2.4 s due): {gaps:?}",
        gaps[3]
    );
    assert!(gaps[3] > gaps[0] * 3.0, "{gaps:?}");
    let backoff = seen_in_file.expect("the status file never showed the backoff");
    assert!(backoff["failures"].as_u64().unwrap() >= 2, "{backoff}");
    assert!(backoff["delay_ms"].as_u64().unwrap() >= 600, "{backoff}");
    assert!(seen_in_metrics >= 0.6, "{seen_in_metrics}");
    assert!(node.status().unwrap().is_leader(), "it still leads");
}

/// A lone node whose on_elected fails steps down, as before, and then stays out of claims
/// for longer each time (from `interval`, 200 ms here, doubling): its elections come
/// further and further apart, where they used to come every ttl or so. While it waits,
/// `leaderd status` lists it as `backoff`.
#[tokio::test(flavor = "multi_thread")]
async fn a_lone_node_whose_on_elected_fails_is_elected_less_and_less_often() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = NodeSettings {
        ttl: Duration::from_millis(600),
        interval: Duration::from_millis(200),
        ..hooks_config(
            &db,
            r#"
on_elected = ["sh", "-c", "RECORD elected; exit 1"]
on_demoted = ["RECORD", "demoted"]
"#,
        )
    };
    let node = start(&db, &settings, "a", &db.url);
    // Out of claims for 0.2, 0.4, 0.8, 1.6 and 3.2 s after each failure (the first two
    // hidden by the ttl a resign waits anyway): about 0.75 s apart without the backoff.
    let mut listed_as_backoff = false;
    let give_up = std::time::Instant::now() + Duration::from_secs(40);
    let elected = loop {
        // Once the node has migrated the table.
        if !listed_as_backoff && !instants(&db.dir, "a", "elected").is_empty() {
            let status = common::status_json(&db, &settings.election);
            listed_as_backoff = status["members"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "backoff"));
        }
        let elected = instants(&db.dir, "a", "elected");
        if elected.len() >= 6 {
            break elected;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "{:?}",
            gaps_s(&elected)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let gaps = gaps_s(&elected);
    eprintln!("[measured] lone node, on_elected failing: gaps between elections (s): {gaps:?}");
    assert!(
        gaps[4] >= 2.5,
        "the fifth wait was {:.2}s (3.2 s due): {gaps:?}",
        gaps[4]
    );
    assert!(gaps[4] > gaps[0] * 2.5, "{gaps:?}");
    assert!(
        listed_as_backoff,
        "leaderd status never listed it as backoff"
    );
    let demoted = until_count(&db.dir, "a", "demoted", 5).await;
    assert!(demoted.len() >= 5);
    let log = node.log();
    assert!(log.contains("claiming nothing for"), "{log}");
}
