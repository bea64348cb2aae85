//! Rolling upgrade: nodes of the release before the operator commands (built from git by
//! `scripts/build-old-release.sh` into a cache outside the clone, once) run beside nodes
//! of this version on the migrated schema, through SIGKILL, SIGTERM, resign, handover and
//! pause. The old nodes ignore the command columns (they may claim during a pause or a
//! handover, and do not heed a resign), but the term and the lease still fence every
//! write: the status files must never show two leaders, nor overlapping terms.

use crate::support as common;

use common::{Backend, Node, NodeSettings, Sampler, TestDb, leaderd, wait_agreed, wait_new_leader};
use nix::sys::signal::Signal;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The previous release's binary, built once per cache (the script holds a lock).
fn old_binary() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script =
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/build-old-release.sh");
            let mut command = Command::new("bash");
            command.arg(script);
            if let Ok(commit) = std::env::var("LEADERD_OLD_RELEASE") {
                command.arg(commit);
            }
            let output = command
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| e.to_string())?;
            if !output.status.success() {
                return Err(format!("building the old release failed: {output:?}"));
            }
            Ok(PathBuf::from(
                String::from_utf8_lossy(&output.stdout).trim(),
            ))
        })
        .clone()
        .unwrap()
}

struct Mixed {
    db: TestDb,
    settings: NodeSettings,
    /// (id, runs the old release)
    kinds: Vec<(String, bool)>,
    nodes: Vec<Node>,
    sampler: Sampler,
}

impl Mixed {
    fn start(&self, index: usize) -> Node {
        let (id, old) = &self.kinds[index];
        let program = match old {
            true => Command::new(old_binary()),
            false => leaderd(),
        };
        Node::start_program(program, &self.db, &self.settings, id, &self.db.url, &[])
    }

    async fn agreed(&mut self) -> (String, i64) {
        let all: Vec<&Node> = self.nodes.iter().collect();
        wait_agreed(&mut self.sampler, &all).await
    }

    /// A leader in a later term, agreed by every node but `except` (killed: its file is
    /// stale).
    async fn new_leader(&mut self, term: i64, except: usize) -> (String, i64) {
        let others: Vec<&Node> = (self.nodes.iter().enumerate())
            .filter(|(i, _)| *i != except)
            .map(|(_, n)| n)
            .collect();
        wait_new_leader(&mut self.sampler, &others, term).await
    }

    fn index(&self, id: &str) -> usize {
        self.kinds.iter().position(|(k, _)| k == id).unwrap()
    }

    /// `leaderd ARGS` (this version) from outside, sampling meanwhile; its exit code.
    async fn operator(&mut self, args: &[&str]) -> Option<i32> {
        let mut child = leaderd()
            .args(args)
            .current_dir(&self.db.dir)
            .env("LEADERD_DATABASE__URL", &self.db.url)
            .env("LEADERD_ELECTION__NAME", &self.settings.election)
            .env("LEADERD_LOG__LEVEL", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let limit = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < limit, "leaderd {args:?} did not end");
            let all: Vec<&Node> = self.nodes.iter().collect();
            self.sampler.watch(&all, Duration::from_millis(5)).await;
        }
    }
}

async fn old_and_new_nodes_never_make_two_leaders(backend: Backend) {
    let old = old_binary();
    assert!(old.exists(), "{}", old.display());
    let db = TestDb::new(backend);
    let settings = NodeSettings::roomy();
    let kinds = [
        ("new1", false),
        ("old1", true),
        ("new2", false),
        ("old2", true),
    ];
    let mut mixed = Mixed {
        db,
        settings,
        kinds: kinds
            .iter()
            .map(|(id, old)| (id.to_string(), *old))
            .collect(),
        nodes: Vec::new(),
        sampler: Sampler::new(),
    };
    // A new node first: it migrates, and the old ones find the schema migrated further
    // than they know.
    mixed.nodes.push(mixed.start(0));
    mixed.agreed().await;
    for index in 1..kinds.len() {
        let node = mixed.start(index);
        mixed.nodes.push(node);
    }
    let (mut leader, mut term) = mixed.agreed().await;
    let mut led_by_old = false;
    let mut led_by_new = false;
    for step in 0..10 {
        led_by_old |= leader.starts_with("old");
        led_by_new |= leader.starts_with("new");
        let index = mixed.index(&leader);
        match step % 5 {
            0 => {
                mixed.nodes[index].signal(Signal::SIGKILL);
                (leader, term) = mixed.new_leader(term, index).await;
                mixed.nodes[index] = mixed.start(index);
            }
            1 => {
                mixed.nodes[index].signal(Signal::SIGTERM);
                (leader, term) = mixed.new_leader(term, index).await;
                mixed.nodes[index]
                    .wait_exit(Duration::from_secs(10))
                    .await
                    .unwrap();
                mixed.nodes[index] = mixed.start(index);
            }
            2 => {
                // An old leader does not heed it: nobody takes over (5). Its request
                // stays in the row for the term, so a later one is told that a step-down
                // is under way (4).
                let code = mixed.operator(&["resign", "--wait", "3s"]).await;
                assert!(matches!(code, Some(0 | 4 | 5)), "resign exited {code:?}");
                (leader, term) = mixed.agreed().await;
            }
            3 => {
                // To a new node (old ones are not members); an old leader ignores it.
                let to = if leader == "new1" { "new2" } else { "new1" };
                let code = mixed
                    .operator(&["handover", "--to", to, "--wait", "3s"])
                    .await;
                assert!(matches!(code, Some(0 | 4 | 5)), "handover exited {code:?}");
                (leader, term) = mixed.agreed().await;
            }
            _ => {
                // Paused, the leader killed: new nodes wait, old ones may claim at once.
                assert_eq!(mixed.operator(&["pause", "--for", "2s"]).await, Some(0));
                mixed.nodes[index].signal(Signal::SIGKILL);
                (leader, term) = mixed.new_leader(term, index).await;
                mixed.nodes[index] = mixed.start(index);
                assert_eq!(mixed.operator(&["resume"]).await, Some(0));
            }
        }
        let all: Vec<&Node> = mixed.nodes.iter().collect();
        mixed.sampler.watch(&all, Duration::from_millis(300)).await;
    }
    mixed.sampler.check_terms();
    eprintln!(
        "[upgrade] {backend:?}: {} leaderships, led by an old node: {led_by_old}, by a new \
         one: {led_by_new}, {} samples",
        mixed.sampler.leaderships.len(),
        mixed.sampler.samples
    );
    assert!(mixed.sampler.leaderships.len() >= 6);
}

backend_tests!(postgres = Backend::Postgres => old_and_new_nodes_never_make_two_leaders);
backend_tests!(mysql = Backend::Mysql => old_and_new_nodes_never_make_two_leaders);
backend_tests!(sqlite = Backend::Sqlite => old_and_new_nodes_never_make_two_leaders);
