//! Locks and elections apart: `leaderd lock NAME` takes the row `lock:NAME`, so a lock
//! named like a running election neither waits for its leader nor stops it;
//! `--election-row` takes the election's own row on purpose, and an election cannot be
//! named `lock:…`.

use super::*;
use common::{Node, NodeSettings};

async fn wait_for_leader(node: &Node) -> i64 {
    let limit = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = node.status().filter(|s| s.is_leader()) {
            return status.term.unwrap();
        }
        assert!(std::time::Instant::now() < limit, "{}", node.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A node leads election NAME; `leaderd lock NAME` runs anyway (its row is `lock:NAME`),
/// and the leader keeps its term; `--election-row NAME` is refused with 75, naming the
/// leader.
async fn a_lock_named_like_an_election_runs_apart_from_it(backend: Backend) {
    let setup = Setup::new(backend);
    let settings = NodeSettings {
        election: setup.name.clone(),
        ..NodeSettings::roomy()
    };
    let node = Node::start(&setup.db, &settings, "leader-1", &setup.db.url);
    let term = wait_for_leader(&node).await;
    let ran = setup.db.dir.join("ran");
    let touch = format!("touch {}", ran.display());
    let mut apart = setup.lock(&setup.db.url, &["-n"], &["sh", "-c", &touch]);
    assert_eq!(
        exit_code(&mut apart, Duration::from_secs(10)).await,
        0,
        "{}",
        setup.stderr()
    );
    assert!(ran.exists());
    let mut on_purpose = setup.lock(
        &setup.db.url,
        &["-n", "--election-row"],
        &["sh", "-c", "exit 9"],
    );
    assert_eq!(
        exit_code(&mut on_purpose, Duration::from_secs(10)).await,
        HELD
    );
    let stderr = setup.stderr();
    assert!(
        stderr.contains(&format!("lock {:?} is held by leader-1", setup.name)),
        "{stderr}"
    );
    let status = node.status().unwrap();
    assert!(status.is_leader(), "{status:?}");
    assert_eq!(status.term, Some(term), "the lock disturbed the election");
}

fn locks_json(setup: &Setup) -> Vec<serde_json::Value> {
    let output = leaderd()
        .args(["locks", "--json"])
        .env("LEADERD_DATABASE__URL", &setup.db.url)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// `leaderd locks` lists the held leases: a running lock, a lock left held by
/// `--hold-at-least` after its process exited (with the hold's time left), and an
/// election's leader, each with its kind, holder, term and time held (since its term
/// started, not since its last renewal); released ones are not listed.
async fn locks_lists_held_locks_and_elections(backend: Backend) {
    let setup = Setup::new(backend);
    let settings = NodeSettings {
        election: unique("election"),
        ..NodeSettings::roomy()
    };
    let node = Node::start(&setup.db, &settings, "leader-1", &setup.db.url);
    let started = std::time::Instant::now();
    let term = wait_for_leader(&node).await;
    let leading = std::time::Instant::now();
    let mut running = setup.lock(&setup.db.url, &[], &setup.job("30"));
    let start = wait_for_record(&setup.db.dir, "start").await;
    let held_name = unique("held");
    let held = leaderd()
        .args(["lock", "--hold-at-least", "1h", &held_name, "--", "true"])
        .env("LEADERD_DATABASE__URL", &setup.db.url)
        .output()
        .unwrap();
    assert!(held.status.success(), "{held:?}");
    let released_name = unique("released");
    let released = leaderd()
        .args(["lock", &released_name, "--", "true"])
        .env("LEADERD_DATABASE__URL", &setup.db.url)
        .output()
        .unwrap();
    assert!(released.status.success(), "{released:?}");

    let listing = std::time::Instant::now();
    let listed = locks_json(&setup);
    let listed_at = std::time::Instant::now();
    let find = |name: &str| {
        listed
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {listed:?}"))
            .clone()
    };
    let lock = find(&setup.name);
    assert_eq!(lock["kind"], "lock");
    assert_eq!(lock["row"], format!("lock:{}", setup.name));
    assert_eq!(lock["holder"], start.holder.as_str());
    assert_eq!(lock["term"], start.term);
    assert!(lock["left_ms"].as_u64().unwrap() <= 30_000, "{lock}");
    let hold = find(&held_name);
    let left = hold["left_ms"].as_u64().unwrap();
    assert!((3_500_000..=3_600_000).contains(&left), "{hold}");
    let election = find(&settings.election);
    assert_eq!(election["kind"], "election");
    assert_eq!(election["holder"], "leader-1");
    assert_eq!(election["term"], term);
    // By the database clock, which agrees with this host's to well within the margin.
    let margin = 100;
    let held = election["held_ms"].as_u64().expect("the time held");
    let ms = |d: Duration| d.as_millis() as u64;
    assert!(
        held + margin >= ms(listing - leading) && held <= ms(listed_at - started) + margin,
        "{election}"
    );
    assert!(
        election["renewed_ms"].as_u64().unwrap() <= held,
        "held since the term started, not since the last renewal: {election}"
    );
    assert!(
        !listed.iter().any(|l| l["name"] == released_name.as_str()),
        "{listed:?}"
    );
    let text = leaderd()
        .arg("locks")
        .env("LEADERD_DATABASE__URL", &setup.db.url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.starts_with("NAME") && text.contains(" HELD "),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with(held_name.as_str()) && l.contains(" lock ")),
        "{text}"
    );
    running.start_kill().unwrap();
    running.wait().await.unwrap();
}

/// `election.name = "lock:…"` is a configuration error (78) that names the key, for the
/// daemon and for `check-config`.
#[test]
fn an_election_named_lock_colon_is_refused() {
    for command in [&["check-config"][..], &["run"][..]] {
        let output = leaderd()
            .args(command)
            .env("LEADERD_ELECTION__NAME", "lock:nightly")
            .env("LEADERD_DATABASE__URL", "sqlite::memory:")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(78), "{command:?}: {stderr}");
        assert!(
            stderr.contains("election.name = \"lock:nightly\"") && stderr.contains("leaderd lock"),
            "{stderr}"
        );
    }
}

backend_tests!(postgres = Backend::Postgres =>
    a_lock_named_like_an_election_runs_apart_from_it,
    locks_lists_held_locks_and_elections,
);
backend_tests!(mysql = Backend::Mysql =>
    a_lock_named_like_an_election_runs_apart_from_it,
    locks_lists_held_locks_and_elections,
);
backend_tests!(sqlite = Backend::Sqlite =>
    a_lock_named_like_an_election_runs_apart_from_it,
    locks_lists_held_locks_and_elections,
);
