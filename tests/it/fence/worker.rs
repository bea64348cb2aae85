//! Leader work for `jepsen`, in a process of its own: this test binary run again with
//! `fence::worker::work_loop --exact --ignored` and the `FENCE_WORKER_*` variables. It is
//! told its term and fence by its node's hooks (the file `NODE.assignment`, which
//! `on_elected` writes from `LEADERD_TERM` and `LEADERD_FENCE`, and `on_demoted` and
//! `on_leader_change` empty), as an application's worker beside leaderd would be, and
//! writes a row (node, term, seq) per transaction, over its own connection, until killed:
//! BEGIN; INSERT; the fence (unless this run is the control); COMMIT. Before COMMIT it
//! stops itself (SIGSTOP) if the file `NODE.pause` is there: the fault "work frozen
//! after its fence". A term whose fence was refused is done with until the next one.

use super::WorkConnection;
use crate::support::Backend;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Pause between transactions: the machine is shared. Longer on SQLite, whose busy
/// handler backs off too far (up to 100 ms between tries) to win the one write lock from
/// a loop that hardly lets go of it: the nodes' statements would time out.
fn between(backend: Backend) -> Duration {
    match backend {
        Backend::Sqlite => Duration::from_millis(15),
        _ => Duration::from_millis(2),
    }
}

/// The variables that make this test binary a worker.
pub const BACKEND: &str = "FENCE_WORKER_BACKEND";
pub const URL: &str = "FENCE_WORKER_URL";
pub const NODE: &str = "FENCE_WORKER_NODE";
pub const DIR: &str = "FENCE_WORKER_DIR";
pub const TABLE: &str = "FENCE_WORKER_TABLE";
pub const FENCED: &str = "FENCE_WORKER_FENCED";

/// `on_elected`: the term and the fence for the node's worker; the others clear it.
pub const ASSIGN: &str = r#"#!/bin/sh
file="$ASSIGN_DIR/$LEADERD_NODE_ID.assignment"
if [ "$1" = elected ]; then
  printf '%s\n%s\n' "$LEADERD_TERM" "$LEADERD_FENCE" > "$file.tmp"
elif [ "$LEADERD_ROLE" != leader ]; then
  echo none > "$file.tmp"
else
  exit 0
fi
mv "$file.tmp" "$file"
"#;

pub fn assignment_file(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("{node}.assignment"))
}

pub fn pause_file(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("{node}.pause"))
}

fn assignment(dir: &Path, node: &str) -> Option<(i64, String)> {
    let text = std::fs::read_to_string(assignment_file(dir, node)).ok()?;
    let mut lines = text.lines();
    let term = lines.next()?.parse().ok()?;
    let fence = lines.next()?.to_owned();
    Some((term, fence))
}

#[test]
#[ignore = "the leader work fence::jepsen runs as a process of its own"]
fn work_loop() {
    let Ok(backend) = std::env::var(BACKEND) else {
        return;
    };
    let backend = match backend.as_str() {
        "postgres" => Backend::Postgres,
        "mysql" => Backend::Mysql,
        _ => Backend::Sqlite,
    };
    let var = |name| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let (url, node, table) = (var(URL), var(NODE), var(TABLE));
    let dir = PathBuf::from(var(DIR));
    let fenced = var(FENCED) == "1";
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(work(backend, &url, &node, &dir, &table, fenced));
}

async fn work(backend: Backend, url: &str, node: &str, dir: &Path, table: &str, fenced: bool) {
    let mut conn: Option<WorkConnection> = None;
    let mut refused_term = None;
    let mut seq: i64 = 0;
    loop {
        tokio::time::sleep(between(backend)).await;
        let Some((term, fence)) = assignment(dir, node).filter(|(t, _)| Some(*t) != refused_term)
        else {
            continue;
        };
        if conn.is_none() {
            match tokio::time::timeout(Duration::from_secs(2), WorkConnection::open(backend, url))
                .await
            {
                Ok(Ok(opened)) => conn = Some(opened),
                _ => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            }
        }
        let c = conn.as_mut().unwrap();
        let insert =
            format!("INSERT INTO {table} (node, term, seq) VALUES ('{node}', {term}, {seq})");
        let written = async {
            c.exec("BEGIN").await?;
            c.exec(&insert).await?;
            if fenced {
                c.exec(&fence).await?;
            }
            let pause = pause_file(dir, node);
            if pause.exists() {
                let _ = std::fs::remove_file(&pause);
                nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP).unwrap();
            }
            c.exec("COMMIT").await
        };
        match written.await {
            Ok(()) => seq += 1,
            Err(error) => {
                let message = error.to_string();
                if message.contains("leaderd fence:") || message.contains("could not serialize") {
                    refused_term = Some(term);
                }
                // Never reused in an unknown state.
                conn = None;
            }
        }
    }
}
