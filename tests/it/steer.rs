//! Steering candidacy from the node and waiting on the election, with real processes on
//! every backend: observers (`election.candidate = false`), health-gated candidacy
//! (`[election.health_check]`) and `leaderd wait`. The checks read status files, hook
//! records, the database (`leaderd status`) and exit statuses, not the logs.

use crate::support as common;

use common::records::{RECORD, records};
use common::{
    Backend, Node, NodeSettings, Sampler, StatusFile, TestDb, http_get, leaderd, script,
    status_json, wait_agreed, wait_new_leader,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod health;
mod wait;

/// A configuration file of `text` (RECORD: the recording script; DIR: the test's
/// directory), for nodes with `settings`' timing.
fn configured(db: &TestDb, name: &str, text: &str) -> NodeSettings {
    let record = script(&db.dir, "record.sh", RECORD);
    let text = text
        .replace("RECORD", record.to_str().unwrap())
        .replace("DIR", db.dir.to_str().unwrap());
    let file = db.dir.join(format!("{name}.toml"));
    std::fs::write(&file, text).unwrap();
    NodeSettings {
        config_file: Some(file),
        ..NodeSettings::roomy()
    }
}

fn start(db: &TestDb, settings: &NodeSettings, id: &str, env: &[(&str, &str)]) -> Node {
    let mut all = vec![("RECORD_DIR", db.dir.to_str().unwrap())];
    all.extend_from_slice(env);
    Node::start_with_env(db, settings, id, &db.url, &all)
}

fn status_document(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Polls `condition` every 20 ms until it holds, for up to `limit`.
async fn eventually(limit: Duration, what: &str, condition: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !condition() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An observer alone never takes the free lease; beside a candidate it follows it, runs
/// on_leader_change, answers /leader with 503 and says it is an observer in its status
/// file, /status and metrics; when the candidate stops, it still does not claim.
async fn an_observer_follows_and_never_claims(backend: Backend) {
    let db = TestDb::new(backend);
    let observer_settings = configured(
        &db,
        "observer",
        "[election]\ncandidate = false\n[hooks]\non_leader_change = [\"RECORD\", \"change\"]\n",
    );
    let settings = NodeSettings {
        config_file: None,
        ..observer_settings.clone()
    };
    let port = common::free_port();
    let listen = format!("127.0.0.1:{port}");
    let observer = start(
        &db,
        &observer_settings,
        "obs",
        &[("LEADERD_HTTP__LISTEN", &listen)],
    );
    let mut sampler = Sampler::new();
    // Alone, with the lease free for several ttls: reads only.
    sampler.watch(&[&observer], Duration::from_secs(3)).await;
    let alone = observer
        .status()
        .expect("the observer writes its status file");
    assert_eq!(
        (alone.role.as_str(), alone.leader.as_deref()),
        ("follower", None)
    );
    assert_eq!(
        status_json(&db, &settings.election)["leader"],
        serde_json::Value::Null
    );

    let candidate = start(&db, &settings, "cand", &[]);
    let nodes = [&observer, &candidate];
    let (leader, _) = wait_agreed(&mut sampler, &nodes).await;
    assert_eq!(leader, "cand");
    let document = status_document(&observer.status_path);
    assert_eq!(document["candidate"], false, "{document}");
    assert_eq!(status_document(&candidate.status_path)["candidate"], true);
    let (code, _) = http_get(port, "/leader");
    assert_eq!(code, 503);
    let (code, body) = http_get(port, "/status");
    assert_eq!(code, 200);
    assert!(body.contains("\"candidate\": false"), "{body}");
    let (_, metrics) = http_get(port, "/metrics");
    assert!(metrics.contains("leaderd_candidate{election="), "{metrics}");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("leaderd_candidate{") && l.ends_with(" 0")),
        "{metrics}"
    );
    // One statement (the read) per round, however long the lease was free.
    let counter = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {metrics}"))
    };
    let rounds = counter("leaderd_rounds_total{");
    let statements = counter("leaderd_statements_total{");
    assert!(rounds >= 5.0, "{metrics}");
    assert_eq!(statements, rounds, "an observer sends one read per round");

    candidate.signal(nix::sys::signal::Signal::SIGTERM);
    sampler
        .until(
            &[&observer],
            Duration::from_secs(10),
            "the observer sees no leader",
            |s| s[0].as_ref().is_some_and(|s| s.leader.is_none()),
        )
        .await;
    sampler.watch(&[&observer], Duration::from_secs(3)).await;
    assert!(
        sampler.leaderships.iter().all(|l| l.node_id != "obs"),
        "the observer led: {:?}",
        sampler.leaderships
    );
    assert_eq!(
        status_json(&db, &settings.election)["leader"],
        serde_json::Value::Null
    );
    // on_leader_change ran on the observer: to the candidate, then to nobody.
    let changes: Vec<String> = records(&db.dir)
        .into_iter()
        .filter(|r| r.node == "obs" && r.event == "change")
        .map(|r| r.rest)
        .collect();
    assert!(changes.len() >= 2, "{changes:?}");
    assert!(changes[0].ends_with("cand"), "{changes:?}");
    assert!(
        changes.last().unwrap().trim_end().ends_with("follower"),
        "{changes:?}"
    );
}

backend_tests!(postgres = Backend::Postgres => an_observer_follows_and_never_claims);
backend_tests!(mysql = Backend::Mysql => an_observer_follows_and_never_claims);
backend_tests!(sqlite = Backend::Sqlite => an_observer_follows_and_never_claims);
