//! The fence handed to leader work: a node's leader hooks get `LEADERD_FENCE` for their
//! term, which passes (a `leader_command` writes through it with the `sqlite3` shell);
//! other hooks get it empty; an election in a Rust program hands out its term's fence
//! while it leads. (`leaderd lock`'s COMMAND: the shell example in `docs`; `LockGuard`:
//! the doctest of `leaderd::Fence`.)

use super::store_backend;
use crate::support::{Backend, Node, NodeSettings, TestDb, lines_of, script};
use leaderd::store::Fence;
use std::time::{Duration, Instant};

/// Records each hook's event, term and fence; the leader_command also writes a row
/// through its fence.
const RECORD: &str = r#"#!/bin/sh
printf '%s\t%s\t%s\n' "$LEADERD_EVENT" "$LEADERD_TERM" "$LEADERD_FENCE" >> "$RECORD_DIR/fences.$LEADERD_NODE_ID"
if [ "$LEADERD_EVENT" = leader_command ]; then
  sqlite3 -cmd ".timeout 5000" "$RECORD_DIR/leaderd.sqlite3" \
    "BEGIN IMMEDIATE; INSERT INTO work (term) VALUES ($LEADERD_TERM); $LEADERD_FENCE; COMMIT" \
    && echo written >> "$RECORD_DIR/fences.$LEADERD_NODE_ID"
  sleep 60
fi
"#;

#[tokio::test(flavor = "multi_thread")]
async fn leader_hooks_get_the_fence_of_their_term() {
    let db = TestDb::new(Backend::Sqlite);
    let path = db.url.strip_prefix("sqlite://").unwrap().to_owned();
    let record = script(&db.dir, "record.sh", RECORD);
    let record = record.to_str().unwrap();
    let config = db.dir.join("hooks.toml");
    std::fs::write(
        &config,
        format!(
            "[hooks]\non_elected = [{record:?}]\non_leader_change = [{record:?}]\n\
             leader_command = [{record:?}]\n"
        ),
    )
    .unwrap();
    let settings = NodeSettings {
        config_file: Some(config),
        ..NodeSettings::default()
    };
    let sqlite = std::process::Command::new("sqlite3")
        .arg(&path)
        .arg("CREATE TABLE work (term INTEGER NOT NULL)")
        .status()
        .unwrap();
    assert!(sqlite.success());
    let node = Node::start_with_env(
        &db,
        &settings,
        "n1",
        &db.url,
        &[("RECORD_DIR", db.dir.to_str().unwrap())],
    );
    let give_up = Instant::now() + Duration::from_secs(20);
    let lines = loop {
        let lines = lines_of(&db.dir, "fences.");
        if lines.iter().any(|l| l == "written") {
            break lines;
        }
        assert!(
            Instant::now() < give_up,
            "no write through the fence: {lines:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(node);
    let term = node_term(&lines);
    let fence = Fence::new(&settings.election, term).statement(store_backend(Backend::Sqlite));
    for line in &lines {
        let fields: Vec<&str> = line.split('\t').collect();
        match fields.as_slice() {
            ["elected" | "leader_command", t, given] => {
                assert_eq!(t.parse::<i64>().unwrap(), term);
                assert_eq!(*given, fence, "{line}");
            }
            ["leader_change", _, given] => assert_eq!(*given, "", "{line}"),
            ["written"] => {}
            other => panic!("unexpected record {other:?}"),
        }
    }
    assert!(
        lines.iter().any(|l| l.starts_with("elected\t")),
        "{lines:?}"
    );
}

fn node_term(lines: &[String]) -> i64 {
    lines
        .iter()
        .find_map(|l| l.strip_prefix("elected\t"))
        .and_then(|rest| rest.split('\t').next())
        .expect("an on_elected record")
        .parse()
        .unwrap()
}

/// An election in this program hands its leader work the fence of the term it leads in
/// (`Election::fence_handle`), which passes; none once it stops leading, and the last
/// one is refused then.
#[tokio::test(flavor = "multi_thread")]
async fn an_election_hands_out_the_fence_of_the_term_it_leads_in() {
    use leaderd::store::{DatabaseUrl, FenceError, SqlStore, Timeouts};
    use leaderd::{Election, ElectionSettings};
    let db = TestDb::new(Backend::Sqlite);
    let store = SqlStore::new(
        DatabaseUrl::parse(&db.url).unwrap(),
        Timeouts {
            connect: Duration::from_secs(2),
            query: Duration::from_secs(2),
        },
        true,
    );
    let settings = ElectionSettings::new(
        "in-process",
        "n1",
        Duration::from_millis(1200),
        Duration::from_millis(400),
    )
    .unwrap();
    let (election, _status) = Election::new(settings, store);
    let fences = election.fence_handle();
    assert_eq!(fences.current(), None, "not leading yet");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(election.run(async {
        let _ = stopped.await;
    }));
    let give_up = Instant::now() + Duration::from_secs(10);
    let fence = loop {
        if let Some(fence) = fences.current() {
            break fence;
        }
        assert!(Instant::now() < give_up, "never led");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(fence.election(), "in-process");
    let mut work = super::work_connection(&db).await;
    work.exec("CREATE TABLE work (term INTEGER NOT NULL)")
        .await
        .unwrap();
    work.exec("BEGIN IMMEDIATE").await.unwrap();
    work.exec(&format!(
        "INSERT INTO work (term) VALUES ({})",
        fence.term()
    ))
    .await
    .unwrap();
    work.fence(&fence).await.unwrap();
    work.exec("COMMIT").await.unwrap();

    let _ = stop.send(());
    running.await.unwrap();
    assert_eq!(fences.current(), None, "stopped: no fence");
    work.exec("BEGIN IMMEDIATE").await.unwrap();
    let refused = work.fence(&fence).await;
    assert!(
        matches!(refused, Err(FenceError::Refused { .. })),
        "{refused:?}"
    );
    let _ = work.exec("ROLLBACK").await;
}
