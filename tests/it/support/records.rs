//! What recording hooks write, and how the tests read it back: scripts append
//! "NODE EVENT TERM NANOS …" lines for hook events and a heartbeat every few milliseconds
//! for the leader_command, so a run's lifetime can be read to within a beat.

use super::{Node, NodeSettings, TestDb, lines_of, script};
use std::collections::BTreeMap;
use std::path::Path;

/// Appends "NODE EVENT TERM NANOS" to events.NODE for the hook it is called from.
pub const RECORD: &str = r#"#!/bin/sh
echo "$LEADERD_NODE_ID $1 ${LEADERD_TERM:-0} $(date +%s%N) $LEADERD_ROLE $LEADERD_LEADER" >> "$RECORD_DIR/events.$LEADERD_NODE_ID"
"#;

/// A leader_command that records its start and then beats every few milliseconds until
/// it is stopped, so that its lifetime can be read back to within a beat.
pub const LEADER_COMMAND: &str = r#"#!/bin/sh
echo "$LEADERD_NODE_ID start $LEADERD_TERM $(date +%s%N)" >> "$RECORD_DIR/events.$LEADERD_NODE_ID"
trap 'echo "$LEADERD_NODE_ID stop $LEADERD_TERM $(date +%s%N)" >> "$RECORD_DIR/events.$LEADERD_NODE_ID"; exit 0' TERM
while :; do
  echo "$LEADERD_NODE_ID $LEADERD_TERM $(date +%s%N)" >> "$RECORD_DIR/beats.$LEADERD_NODE_ID"
  sleep 0.005
done
"#;

/// Writes the recording scripts and a config whose `[hooks]` section is `hooks`
/// (with RECORD and COMMAND standing for the scripts' paths).
pub fn hooks_config(db: &TestDb, hooks: &str) -> NodeSettings {
    let record = script(&db.dir, "record.sh", RECORD);
    let command = script(&db.dir, "leader_command.sh", LEADER_COMMAND);
    let text = hooks
        .replace("RECORD", record.to_str().unwrap())
        .replace("COMMAND", command.to_str().unwrap())
        .replace("DIR", db.dir.to_str().unwrap());
    let file = db.dir.join("hooks.toml");
    std::fs::write(&file, format!("[hooks]\n{text}")).unwrap();
    // SAFETY of the environment: RECORD_DIR is read by the scripts through leaderd's env.
    NodeSettings {
        config_file: Some(file),
        ..NodeSettings::default()
    }
}

pub fn start(db: &TestDb, settings: &NodeSettings, id: &str, url: &str) -> Node {
    Node::start_with_env(
        db,
        settings,
        id,
        url,
        &[("RECORD_DIR", db.dir.to_str().unwrap())],
    )
}

#[derive(Debug, Clone)]
pub struct Record {
    pub node: String,
    pub event: String,
    pub term: i64,
    pub at: u128,
    pub rest: String,
}

pub fn records(dir: &Path) -> Vec<Record> {
    let mut all = Vec::new();
    for line in lines_of(dir, "events.") {
        let mut parts = line.splitn(5, ' ');
        let mut next = || parts.next().unwrap_or_default().to_owned();
        let (node, event, term, at, rest) = (next(), next(), next(), next(), next());
        // A script killed mid-record (its `date` died first) leaves a torn line.
        let (Ok(term), Ok(at)) = (term.parse(), at.parse()) else {
            continue;
        };
        all.push(Record {
            node,
            event,
            term,
            at,
            rest,
        });
    }
    all.sort_by_key(|r| r.at);
    all
}

/// One leader_command run: node, term, first and last beat.
#[derive(Debug, Clone)]
pub struct Run {
    pub node: String,
    pub term: i64,
    pub first: u128,
    pub last: u128,
}

pub fn runs(dir: &Path) -> Vec<Run> {
    let mut by_run: BTreeMap<(String, i64), Run> = BTreeMap::new();
    for line in lines_of(dir, "beats.") {
        let parts: Vec<&str> = line.split(' ').collect();
        let (Some(node), Some(Ok(term)), Some(Ok(at))) = (
            parts.first().map(|n| n.to_string()),
            parts.get(1).map(|t| t.parse::<i64>()),
            parts.get(2).map(|a| a.parse::<u128>()),
        ) else {
            continue; // torn by a kill
        };
        by_run
            .entry((node.clone(), term))
            .and_modify(|r| {
                r.first = r.first.min(at);
                r.last = r.last.max(at);
            })
            .or_insert(Run {
                node,
                term,
                first: at,
                last: at,
            });
    }
    let mut runs: Vec<Run> = by_run.into_values().collect();
    runs.sort_by_key(|r| r.first);
    runs
}

/// No two nodes' leader_command runs overlap; returns the smallest and largest gap between
/// one run's last beat and the next run's first (ms).
pub fn check_no_overlap(runs: &[Run]) -> (f64, f64) {
    let mut largest: f64 = 0.0;
    let mut smallest = f64::MAX;
    for pair in runs.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.node == b.node && a.term == b.term {
            continue;
        }
        assert!(
            b.first > a.last,
            "leader_command runs overlap: {a:?} and {b:?}\nall: {runs:#?}"
        );
        let gap = (b.first - a.last) as f64 / 1e6;
        largest = largest.max(gap);
        smallest = smallest.min(gap);
    }
    (smallest, largest)
}
