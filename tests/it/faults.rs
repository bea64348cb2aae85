//! Randomized fault injection: three to five daemons with recording hooks, each behind a
//! proxy of its own, driven through a seeded sequence of faults: SIGKILL and restart,
//! SIGSTOP past the ttl, a stalled or dropped database connection, latency around the renew
//! margin, and a database restart (every connection cut and refused for a while). The
//! checks read the hooks' records and the status files, never the logs:
//!
//! * no two nodes' leadership (status files) or leader work (`on_elected`,
//!   `leader_command`) overlaps, and terms grow with time;
//! * after every fault clears, a leader exists again within ttl + interval (plus slack for
//!   a loaded machine).
//!
//! Odd nodes run their leader_command in a session of its own (`setsid`), out of reach of
//! a signal to the hook's process group: the guard must end it all the same.
//!
//! The seed is printed; `LEADERD_FAULT_SEED=N cargo test --test it faults::` replays a run.

use crate::support as common;

use common::proxy::{Mode, Proxy};
use common::records::{check_no_overlap, hooks_config, records, runs, start};
use common::{Backend, Node, NodeSettings, Sampler, StatusFile, TestDb};
use nix::sys::signal::Signal;
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

const STEPS: usize = 14;
/// Slack on top of ttl + interval for a leader to be back, on a loaded 2-core machine.
const RECOVERY_SLACK: Duration = Duration::from_millis(1500);

/// splitmix64: small, seedable, and good enough to pick faults.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.next() % (high - low + 1))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillRestart,
    StopCont,
    Stall,
    Drop,
    Latency,
    DatabaseRestart,
    /// SIGTERM, and the node's link stalls at once: it steps down unable to release.
    TermWhileStalled,
    /// `leaderd resign` from outside, while faults may still be settling.
    Resign,
    /// `leaderd handover --to` a random other node (which may be stalled or restarting).
    Handover,
    /// `leaderd pause` with the leader killed or stalled meanwhile, then resumed or let run out.
    Pause,
}

const FAULTS: [Fault; 10] = [
    Fault::KillRestart,
    Fault::StopCont,
    Fault::Stall,
    Fault::Drop,
    Fault::Latency,
    Fault::DatabaseRestart,
    Fault::TermWhileStalled,
    Fault::Resign,
    Fault::Handover,
    Fault::Pause,
];

struct Cluster {
    db: TestDb,
    settings: NodeSettings,
    /// For odd nodes: the leader_command runs in a session of its own.
    own_session: NodeSettings,
    ids: Vec<String>,
    proxies: Vec<Proxy>,
    nodes: Vec<Node>,
    sampler: Sampler,
}

impl Cluster {
    fn start_node(&self, index: usize) -> Node {
        let url = self.db.url_via(self.proxies[index].addr);
        let settings = match index % 2 {
            0 => &self.settings,
            _ => &self.own_session,
        };
        start(&self.db, settings, &self.ids[index], &url)
    }

    /// The index of the node whose status file says it leads (validly), if any.
    fn leader(&mut self) -> Option<usize> {
        let now = SystemTime::now();
        let all: Vec<&Node> = self.nodes.iter().collect();
        let statuses = self.sampler.sample(&all);
        statuses.iter().position(|s| {
            s.as_ref()
                .is_some_and(|s: &StatusFile| s.is_leader() && s.valid_until > now)
        })
    }

    /// A victim: the leader three times in four (when there is one), else any node.
    fn victim(&mut self, rng: &mut Rng) -> usize {
        match self.leader() {
            Some(leader) if rng.below(4) != 0 => leader,
            _ => rng.below(self.nodes.len()),
        }
    }

    async fn watch(&mut self, duration: Duration) {
        let all: Vec<&Node> = self.nodes.iter().collect();
        self.sampler.watch(&all, duration).await;
    }

    /// Cuts every server-side connection of this test's database, as a restart would.
    fn kill_server_connections(&self) {
        let name = self.db.url.rsplit('/').next().unwrap().to_owned();
        let status = match self.db.backend {
            Backend::Postgres => std::process::Command::new("psql")
                .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-qAtc"])
                .arg(format!(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = '{name}' AND pid <> pg_backend_pid()"
                ))
                .output(),
            _ => std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "mariadb -uroot -h127.0.0.1 -N -e \"SELECT CONCAT('KILL ', id, ';') \
                     FROM information_schema.processlist WHERE db = '{name}'\" \
                     | mariadb -uroot -h127.0.0.1 --force"
                ))
                .output(),
        }
        .expect("database client runs");
        assert!(status.status.success(), "{status:?}");
    }

    /// Runs `leaderd ARGS` against the database directly (an operator's host), sampling
    /// meanwhile; its exit code.
    async fn operator(&mut self, args: &[&str]) -> Option<i32> {
        let mut child = common::leaderd()
            .args(args)
            .current_dir(&self.db.dir)
            .env("LEADERD_DATABASE__URL", &self.db.url)
            .env("LEADERD_ELECTION__NAME", &self.settings.election)
            .env("LEADERD_LOG__LEVEL", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let limit = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < limit, "leaderd {args:?} did not end");
            self.watch(Duration::from_millis(5)).await;
        }
    }

    /// Applies one fault and clears it again.
    async fn inject(&mut self, fault: Fault, rng: &mut Rng) {
        let ttl = self.settings.ttl;
        match fault {
            Fault::KillRestart => {
                let index = self.victim(rng);
                self.nodes[index].signal(Signal::SIGKILL);
                self.watch(rng.millis(100, 2000)).await;
                // Its last file, before the new process reuses it.
                self.leader();
                self.nodes[index] = self.start_node(index);
            }
            Fault::StopCont => {
                let index = self.victim(rng);
                self.nodes[index].signal(Signal::SIGSTOP);
                self.watch(ttl + rng.millis(0, 1500)).await;
                self.nodes[index].signal(Signal::SIGCONT);
            }
            Fault::Stall | Fault::Drop => {
                let index = self.victim(rng);
                let mode = if fault == Fault::Stall {
                    Mode::Stall
                } else {
                    Mode::Drop
                };
                self.proxies[index].set(mode);
                let length = match fault {
                    Fault::Stall => ttl + rng.millis(0, 1500),
                    _ => rng.millis(200, 2500),
                };
                self.watch(length).await;
                self.proxies[index].set(Mode::Pass);
            }
            Fault::Latency => {
                // Each direction: half the renew margin (ttl - interval), give or take,
                // so that round trips land on both sides of it.
                let index = self.victim(rng);
                let margin = ttl - self.settings.interval;
                let delay = margin / 2 - Duration::from_millis(40) + rng.millis(0, 80);
                self.proxies[index].set(Mode::Delay(delay));
                self.watch(rng.millis(1500, 3500)).await;
                self.proxies[index].set(Mode::Pass);
            }
            Fault::DatabaseRestart => {
                for proxy in &self.proxies {
                    proxy.set(Mode::Drop);
                }
                self.kill_server_connections();
                self.watch(rng.millis(500, 2500)).await;
                for proxy in &self.proxies {
                    proxy.set(Mode::Pass);
                }
            }
            Fault::TermWhileStalled => {
                let index = self.victim(rng);
                self.nodes[index].signal(Signal::SIGTERM);
                self.proxies[index].set(Mode::Stall);
                self.watch(ttl + rng.millis(0, 1500)).await;
                self.proxies[index].set(Mode::Pass);
                let limit = Instant::now() + Duration::from_secs(20);
                while self.nodes[index].try_exit().is_none() {
                    assert!(Instant::now() < limit, "a stopping node did not exit");
                    self.watch(Duration::from_millis(5)).await;
                }
                self.leader();
                self.nodes[index] = self.start_node(index);
            }
            Fault::Resign => {
                let code = self.operator(&["resign", "--wait", "5s"]).await;
                // 0 moved, 4 no leader (a fault still settling), 5 nobody else took over,
                // 7 no other live candidate recorded (the others down, stalled or just
                // restarted), 8 the answer was lost on the way.
                assert!(
                    matches!(code, Some(0 | 4 | 5 | 7 | 8)),
                    "resign exited {code:?}"
                );
            }
            Fault::Handover => {
                let to = self.ids[rng.below(self.ids.len())].clone();
                // Now and then the target is stalled as the leader steps down.
                let stalled = (rng.below(3) == 0).then(|| {
                    let index = self.ids.iter().position(|id| *id == to).unwrap();
                    self.proxies[index].set(Mode::Stall);
                    index
                });
                let code = self
                    .operator(&["handover", "--to", &to, "--wait", "5s"])
                    .await;
                if let Some(index) = stalled {
                    self.proxies[index].set(Mode::Pass);
                }
                assert!(
                    matches!(code, Some(0 | 2 | 4 | 5 | 8)),
                    "handover exited {code:?}"
                );
            }
            Fault::Pause => {
                let length = rng.millis(1000, 3000);
                let spec = format!("{}ms", length.as_millis());
                assert_eq!(self.operator(&["pause", "--for", &spec]).await, Some(0));
                // The leader dies or stalls while paused: its lease stays unclaimed.
                let index = self.victim(rng);
                match rng.below(2) {
                    0 => self.nodes[index].signal(Signal::SIGKILL),
                    _ => self.proxies[index].set(Mode::Stall),
                }
                self.watch(length / 2).await;
                if rng.below(2) == 0 {
                    assert_eq!(self.operator(&["resume"]).await, Some(0));
                } else {
                    self.watch(length / 2 + Duration::from_millis(100)).await;
                }
                self.proxies[index].set(Mode::Pass);
                if self.nodes[index].try_exit().is_some() {
                    self.leader();
                    self.nodes[index] = self.start_node(index);
                }
            }
        }
    }
}

async fn faults_never_make_two_leaders(backend: Backend) {
    let seed = std::env::var("LEADERD_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!(
        "[faults] {backend:?}: seed {seed} (replay: LEADERD_FAULT_SEED={seed} cargo test --test it faults::)"
    );
    let mut rng = Rng(seed);
    let db = TestDb::new(backend);
    let settings = hooks_config(
        &db,
        r#"on_elected = ["RECORD", "elected"]
on_demoted = ["RECORD", "demoted"]
leader_command = { command = ["COMMAND"], stop_timeout = "200ms" }
"#,
    );
    // Odd nodes start their leader_command through `setsid --fork --wait`: the beating
    // script runs in a session of its own, outside the guard's process group, and must
    // still end with the fence.
    let own_session = {
        let file = settings.config_file.clone().unwrap();
        let text = std::fs::read_to_string(&file).unwrap().replace(
            r#"command = [""#,
            r#"command = ["setsid", "--fork", "--wait", ""#,
        );
        let own = db.dir.join("hooks-own-session.toml");
        std::fs::write(&own, text).unwrap();
        NodeSettings {
            config_file: Some(own),
            ..settings.clone()
        }
    };
    let count = 3 + rng.below(3);
    let mut proxies = Vec::new();
    for _ in 0..count {
        proxies.push(Proxy::start(db.server_addr()).await);
    }
    let mut cluster = Cluster {
        ids: (0..count).map(|i| format!("n{i}")).collect(),
        settings,
        own_session,
        proxies,
        nodes: Vec::new(),
        sampler: Sampler::new(),
        db,
    };
    cluster.nodes = (0..count).map(|i| cluster.start_node(i)).collect();
    let bound = cluster.settings.ttl + cluster.settings.interval + RECOVERY_SLACK;

    // Every kind once in a shuffled order, then the rest at random.
    let mut plan = FAULTS.to_vec();
    for i in (1..plan.len()).rev() {
        plan.swap(i, rng.below(i + 1));
    }
    while plan.len() < STEPS {
        plan.push(FAULTS[rng.below(FAULTS.len())]);
    }
    // A first leader (so the table is migrated) before an operator command can come.
    let started = Instant::now();
    while cluster.leader().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no first leader"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut exercised: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut recoveries = Vec::new();
    for fault in plan {
        *exercised.entry(fault).or_default() += 1;
        cluster.inject(fault, &mut rng).await;
        let cleared = Instant::now();
        loop {
            if cluster.leader().is_some() {
                break;
            }
            assert!(
                cleared.elapsed() < bound,
                "seed {seed}: no leader {:?} after {fault:?} cleared",
                cleared.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        recoveries.push(cleared.elapsed());
        let settle = rng.millis(300, 1500);
        cluster.watch(settle).await;
    }
    // Let the last leader's work be recorded, then stop everyone cleanly.
    cluster.watch(Duration::from_millis(500)).await;
    for node in &cluster.nodes {
        node.signal(Signal::SIGTERM);
    }
    for node in cluster.nodes.iter_mut() {
        node.wait_exit(Duration::from_secs(20)).await;
    }

    // The checker: status files, then the hooks' own records.
    cluster.sampler.check_terms();
    let runs = runs(&cluster.db.dir);
    let (smallest_gap, _) = check_no_overlap(&runs);
    let records = records(&cluster.db.dir);
    let elected: Vec<_> = records.iter().filter(|r| r.event == "elected").collect();
    for pair in elected.windows(2) {
        assert!(
            pair[0].term < pair[1].term,
            "seed {seed}: on_elected terms do not grow: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    // Leader work of a term starts only after every earlier term's leader_command is gone.
    for start in &elected {
        for run in runs.iter().filter(|r| r.term < start.term) {
            assert!(
                run.last < start.at,
                "seed {seed}: on_elected of term {} on {} began while term {}'s \
                 leader_command on {} still beat",
                start.term,
                start.node,
                run.term,
                run.node
            );
        }
    }
    let terms: std::collections::BTreeSet<i64> =
        cluster.sampler.leaderships.iter().map(|l| l.term).collect();
    let slowest = recoveries.iter().max().unwrap();
    eprintln!(
        "[faults] {backend:?}: seed {seed}, {count} nodes, faults {exercised:?}, {} terms \
         ({} on_elected runs, {} leader_command runs), {} status samples, slowest recovery \
         {} ms (bound {} ms), closest leader_command handover {smallest_gap:.1} ms",
        terms.len(),
        elected.len(),
        runs.len(),
        cluster.sampler.samples,
        slowest.as_millis(),
        bound.as_millis()
    );
    assert!(
        terms.len() >= 3,
        "seed {seed}: too few transitions to mean much"
    );
}

backend_tests!(postgres = Backend::Postgres => faults_never_make_two_leaders);
backend_tests!(mysql = Backend::Mysql => faults_never_make_two_leaders);
