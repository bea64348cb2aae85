//! `[election.health_check]`: a failing check keeps a node from claiming; a leader whose
//! check starts failing steps down and another node takes over, never two leaders at once;
//! a check that hangs is stopped at its timeout and counts as a failure.

use super::*;

/// A health check `test ! -e DIR/NODE.sick`: fails while that file exists.
fn sick_check(db: &TestDb, extra: &str) -> NodeSettings {
    configured(
        db,
        "health",
        &format!(
            "[election.health_check]\ncommand = [\"sh\", \"-c\", \"test ! -e DIR/$LEADERD_NODE_ID.sick\"]\n\
             interval = \"200ms\"\ntimeout = \"2s\"\nfailures = 2\n{extra}\
             [hooks]\non_elected = [\"RECORD\", \"elected\"]\non_demoted = [\"RECORD\", \"demoted\"]\n"
        ),
    )
}

fn sick_file(db: &TestDb, node: &str) -> PathBuf {
    db.dir.join(format!("{node}.sick"))
}

fn health_of(node: &Node) -> Option<String> {
    let text = std::fs::read_to_string(&node.status_path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["health"].as_str().map(str::to_owned)
}

/// A node whose check fails from the start never takes the free lease, and says it is
/// failing; once the check passes it claims.
async fn a_failing_check_keeps_a_node_from_claiming(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = sick_check(&db, "");
    std::fs::write(sick_file(&db, "a"), "").unwrap();
    let node = start(&db, &settings, "a", &[]);
    let mut sampler = Sampler::new();
    sampler.watch(&[&node], Duration::from_secs(3)).await;
    assert!(sampler.leaderships.is_empty(), "{:?}", sampler.leaderships);
    assert_eq!(health_of(&node).as_deref(), Some("failing"));
    assert_eq!(
        status_json(&db, &settings.election)["leader"],
        serde_json::Value::Null
    );
    std::fs::remove_file(sick_file(&db, "a")).unwrap();
    sampler
        .until(
            &[&node],
            Duration::from_secs(10),
            "the healthy node leads",
            |s| s[0].as_ref().is_some_and(StatusFile::is_leader),
        )
        .await;
    assert_eq!(health_of(&node).as_deref(), Some("healthy"));
}

/// The leader's check starts failing: it steps down (on_demoted runs, then another node
/// is elected), no two nodes ever lead at once, and it does not take the lease back while
/// its check fails, even when the new leader stops.
async fn a_leader_whose_check_fails_hands_over(backend: Backend) {
    let db = TestDb::new(backend);
    let settings = sick_check(&db, "");
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|id| start(&db, &settings, id, &[]))
        .collect();
    let all: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let (first, term) = wait_agreed(&mut sampler, &all).await;
    std::fs::write(sick_file(&db, &first), "").unwrap();
    let sick_at = std::time::Instant::now();
    let (second, _) = wait_new_leader(&mut sampler, &all, term).await;
    eprintln!(
        "[measured] {backend:?}: check failing to new leader: {} ms (interval 200ms, failures 2)",
        sick_at.elapsed().as_millis()
    );
    assert_ne!(first, second);
    sampler.watch(&all, Duration::from_secs(2)).await;
    sampler.check_terms();
    let events = records(&db.dir);
    let demoted = events
        .iter()
        .find(|r| r.node == first && r.event == "demoted" && r.term == term)
        .unwrap_or_else(|| panic!("no on_demoted of term {term}: {events:?}"));
    let elected = events
        .iter()
        .find(|r| r.node == second && r.event == "elected")
        .unwrap_or_else(|| panic!("no on_elected on {second}: {events:?}"));
    assert!(demoted.at < elected.at, "{events:?}");
    // The sick node stays out, even with the lease free.
    let second_node = nodes.iter().find(|n| n.id == second).unwrap();
    second_node.signal(nix::sys::signal::Signal::SIGTERM);
    let first_node = nodes.iter().find(|n| n.id == first).unwrap();
    sampler.watch(&[first_node], Duration::from_secs(3)).await;
    let led_again = sampler
        .leaderships
        .iter()
        .filter(|l| l.node_id == first && l.term > term)
        .count();
    assert_eq!(
        led_again, 0,
        "the sick node claimed: {:?}",
        sampler.leaderships
    );
    assert_eq!(health_of(first_node).as_deref(), Some("failing"));
}

/// A check that hangs is stopped at its timeout and counts as a failure: the node never
/// claims, and reports failing.
#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_check_times_out_and_fails() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = configured(
        &db,
        "hang",
        "[election.health_check]\ncommand = [\"sleep\", \"60\"]\ninterval = \"100ms\"\n\
         timeout = \"300ms\"\nfailures = 2\n",
    );
    let port = common::free_port();
    let listen = format!("127.0.0.1:{port}");
    let node = start(&db, &settings, "a", &[("LEADERD_HTTP__LISTEN", &listen)]);
    let mut sampler = Sampler::new();
    let started = std::time::Instant::now();
    eventually(
        Duration::from_secs(15),
        "the hanging check counts as failing",
        || health_of(&node).as_deref() == Some("failing"),
    )
    .await;
    // Two timeouts, not sixty seconds.
    assert!(started.elapsed() < Duration::from_secs(15));
    sampler.watch(&[&node], Duration::from_secs(1)).await;
    assert!(sampler.leaderships.is_empty());
    let (_, metrics) = http_get(port, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("leaderd_health_check_failing{") && l.ends_with(" 1")),
        "{metrics}"
    );
    assert!(
        metrics.contains("hook=\"health_check\",outcome=\"stopped\""),
        "{metrics}"
    );
}

backend_tests!(postgres = Backend::Postgres =>
    a_failing_check_keeps_a_node_from_claiming,
    a_leader_whose_check_fails_hands_over,
);
backend_tests!(mysql = Backend::Mysql =>
    a_failing_check_keeps_a_node_from_claiming,
    a_leader_whose_check_fails_hands_over,
);
backend_tests!(sqlite = Backend::Sqlite =>
    a_failing_check_keeps_a_node_from_claiming,
    a_leader_whose_check_fails_hands_over,
);
