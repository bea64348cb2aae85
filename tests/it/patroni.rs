//! leaderd on PostgreSQL managed by Patroni: three members and one etcd (apt's `patroni`
//! and `etcd-server`), synchronous mode, started by the test on loopback ports as the
//! `postgres` user. Three leaderd nodes on a multi-host URL with
//! `target_session_attrs=read-write`, through a switchover, a SIGTERM handover and a crash
//! of the primary's member (Patroni and its postmaster killed). Never two valid leaders,
//! terms in order, a leader back within Patroni's ttl plus a stated slack.

use crate::support as common;

use common::mariadb::low_port;
use common::{
    Backend, Node, NodeSettings, Sampler, TestDb, agreed_leader, unique, wait_agreed,
    wait_new_leader,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Patroni's leader key ttl (s), loop_wait and retry_timeout: loop_wait + 2 × retry_timeout
/// ≤ ttl, as Patroni wants.
const PATRONI_TTL: u64 = 10;
/// A leader is back within Patroni's ttl plus this after a crash of the primary's member
/// (the promotion, then leaderd's lease: ttl 1.2 s and a round of 1 s, on a loaded
/// machine).
const SLACK: Duration = Duration::from_secs(8);

fn pg_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    versions.sort();
    versions.pop().unwrap().join("bin")
}

/// A process run as `postgres` (setpriv execs it: the pid is the program's own).
fn as_postgres(program: &str, log: &Path) -> Command {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
            program,
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    command
}

struct Member {
    name: String,
    pg_port: u16,
    config: PathBuf,
    data: PathBuf,
    patroni: Option<Child>,
}

impl Member {
    /// The postmaster Patroni started, if one runs.
    fn postmaster(&self) -> Option<Pid> {
        let text = std::fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        let pid = Pid::from_raw(text.lines().next()?.trim().parse().ok()?);
        kill(pid, None).ok().map(|_| pid)
    }

    /// Kills Patroni and its postmaster at once (a crash of the member's host).
    fn crash(&mut self) {
        let postmaster = self.postmaster();
        if let Some(mut patroni) = self.patroni.take() {
            let _ = patroni.kill();
            let _ = patroni.wait();
        }
        if let Some(pid) = postmaster {
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
}

struct Cluster {
    root: PathBuf,
    etcd: Child,
    members: Vec<Member>,
}

impl Cluster {
    fn start() -> Cluster {
        let root = std::env::temp_dir().join(unique("leaderd_patroni"));
        std::fs::create_dir_all(&root).unwrap();
        let mut ports = BTreeSet::new();
        while ports.len() < 8 {
            ports.insert(low_port());
        }
        let ports: Vec<u16> = ports.into_iter().collect();
        let (etcd_client, etcd_peer) = (ports[0], ports[1]);
        let scope = unique("leaderd");
        let mut members = Vec::new();
        for i in 0..3 {
            let name = format!("pg{i}");
            let dir = root.join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            let (pg_port, api_port) = (ports[2 + i], ports[5 + i]);
            let config = dir.join("patroni.yml");
            std::fs::write(
                &config,
                format!(
                    r#"scope: {scope}
name: {name}
restapi:
  listen: 127.0.0.1:{api_port}
  connect_address: 127.0.0.1:{api_port}
etcd3:
  host: 127.0.0.1:{etcd_client}
bootstrap:
  dcs:
    ttl: {PATRONI_TTL}
    loop_wait: 2
    retry_timeout: 4
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
  initdb:
    - encoding: UTF8
postgresql:
  listen: 127.0.0.1:{pg_port}
  connect_address: 127.0.0.1:{pg_port}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {dir}/pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: {dir}
  pg_hba:
    - local all all trust
    - host replication postgres 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
"#,
                    data = dir.join("data").display(),
                    bin = pg_bin().display(),
                    dir = dir.display(),
                ),
            )
            .unwrap();
            members.push(Member {
                name,
                pg_port,
                config,
                data: dir.join("data"),
                patroni: None,
            });
        }
        Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&root)
            .status()
            .unwrap();
        let etcd = as_postgres("etcd", &root.join("etcd.log"))
            .args(["--name", "etcd0", "--data-dir"])
            .arg(root.join("etcd"))
            .arg(format!(
                "--listen-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!(
                "--advertise-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"
            ))
            .arg(format!(
                "--initial-cluster=etcd0=http://127.0.0.1:{etcd_peer}"
            ))
            .spawn()
            .unwrap();
        let mut cluster = Cluster {
            root,
            etcd,
            members,
        };
        cluster.watchdog();
        for i in 0..3 {
            cluster.start_member(i);
            if i == 0 {
                cluster.wait_list(|list| list.contains("Leader") && list.contains("running"));
            }
        }
        // A leader, a synchronous standby and a replica, all running (Patroni 3.0.2 has
        // no "streaming" state yet).
        cluster.wait_list(|list| {
            list.contains("Leader")
                && list.contains("Sync Standby")
                && list.matches("running").count() == 3
        });
        cluster
    }

    fn start_member(&mut self, i: usize) {
        let member = &mut self.members[i];
        let child = as_postgres("patroni", &self.root.join(format!("{}.log", member.name)))
            .arg(&member.config)
            .spawn()
            .unwrap();
        member.patroni = Some(child);
    }

    /// Kills etcd, the Patronis and their postmasters once this test process is gone
    /// (a test killed without unwinding would otherwise leave them behind).
    #[allow(clippy::zombie_processes)]
    fn watchdog(&self) {
        let datas: Vec<String> = self
            .members
            .iter()
            .map(|m| m.data.join("postmaster.pid").display().to_string())
            .collect();
        let script = format!(
            "while kill -0 {me} 2>/dev/null; do sleep 1; done; \
             for f in {files}; do [ -f \"$f\" ] && kill -9 $(head -n1 \"$f\") 2>/dev/null; done; \
             for p in $(cat {root}/pids 2>/dev/null); do kill -9 $p 2>/dev/null; done; \
             for f in {files}; do [ -f \"$f\" ] && kill -9 $(head -n1 \"$f\") 2>/dev/null; done; \
             sleep 1; rm -rf {root}",
            me = std::process::id(),
            files = datas.join(" "),
            root = self.root.display(),
        );
        Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.record_pids();
    }

    /// The pids the watchdog kills: etcd's and every running Patroni's.
    fn record_pids(&self) {
        let mut pids = vec![self.etcd.id().to_string()];
        for member in &self.members {
            if let Some(child) = &member.patroni {
                pids.push(child.id().to_string());
            }
        }
        let _ = std::fs::write(self.root.join("pids"), pids.join("\n"));
    }

    fn list(&self) -> String {
        let output = Command::new("patronictl")
            .arg("-c")
            .arg(&self.members[0].config)
            .arg("list")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn wait_list(&self, ready: impl Fn(&str) -> bool) {
        self.record_pids();
        let give_up = Instant::now() + Duration::from_secs(90);
        loop {
            let list = self.list();
            if ready(&list) {
                return;
            }
            assert!(
                Instant::now() < give_up,
                "the Patroni cluster did not get ready:\n{list}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The member Patroni calls the leader.
    fn primary(&self) -> usize {
        let list = self.list();
        let line = list
            .lines()
            .find(|l| l.contains("| Leader"))
            .unwrap_or_else(|| panic!("no leader:\n{list}"));
        self.members
            .iter()
            .position(|m| line.contains(&format!("| {} ", m.name)))
            .unwrap()
    }

    fn switchover(&self, from: usize, to: usize) {
        let output = Command::new("patronictl")
            .arg("-c")
            .arg(&self.members[0].config)
            .args(["switchover", "--force", "--leader"])
            .arg(&self.members[from].name)
            .arg("--candidate")
            .arg(&self.members[to].name)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The multi-host URL of the `postgres` database, asking for the primary.
    fn url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.pg_port))
            .collect();
        format!(
            "postgres://postgres@{}/postgres?target_session_attrs=read-write&connect_timeout=1",
            hosts.join(",")
        )
    }

    fn logs(&self) -> String {
        let mut text = String::new();
        for name in ["etcd", "pg0", "pg1", "pg2"] {
            let log =
                std::fs::read_to_string(self.root.join(format!("{name}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            text += &format!(
                "--- {name}:\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        text
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            member.crash();
        }
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        } else {
            eprintln!("Patroni files kept in {}", self.root.display());
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn three_nodes_on_a_patroni_cluster_in_synchronous_mode() {
    assert!(
        Path::new("/usr/bin/patroni").exists() && Path::new("/usr/bin/etcd").exists(),
        "patroni and etcd-server are installed (scripts/test.sh installs them)"
    );
    let started = Instant::now();
    let mut cluster = Cluster::start();
    let cluster_up = started.elapsed();
    let scratch = TestDb::new(Backend::Sqlite);
    let settings = NodeSettings::default();
    let url = cluster.url();
    let mut nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|id| Node::start(&scratch, &settings, id, &url))
        .collect();
    let mut sampler = Sampler::new();
    let (_, term) = wait_agreed(&mut sampler, &nodes.iter().collect::<Vec<_>>()).await;
    // Beside them, an election with a ttl longer than a switchover.
    let long = NodeSettings {
        election: unique("long"),
        ttl: Duration::from_secs(5),
        ..NodeSettings::default()
    };
    let long_nodes: Vec<Node> = ["la", "lb", "lc"]
        .iter()
        .map(|id| Node::start(&scratch, &long, id, &url))
        .collect();
    let long_all: Vec<&Node> = long_nodes.iter().collect();
    let mut long_sampler = Sampler::new();
    let (_, long_term) = wait_agreed(&mut long_sampler, &long_all).await;

    // A switchover: the old primary turns read-only, stops; the candidate is promoted.
    let from = cluster.primary();
    let to = (from + 1) % 3;
    let switched = Instant::now();
    cluster.switchover(from, to);
    // At leaderd's default ttl (1.2 s) the switchover ends the term, and a leader is back
    // in the next one; a ttl longer than the switchover would keep it.
    let (statuses, _) = sampler
        .until(
            &nodes.iter().collect::<Vec<_>>(),
            Duration::from_secs(PATRONI_TTL) + SLACK,
            "a leader after the switchover",
            |s| {
                agreed_leader(s).is_some_and(|(_, t)| t > term)
                    || (switched.elapsed() > Duration::from_secs(6)
                        && agreed_leader(s).is_some_and(|(_, t)| t == term))
            },
        )
        .await;
    let switchover_gap = switched.elapsed();
    let (_, after) = agreed_leader(&statuses).unwrap();
    let switchover_ended_term = after > term;
    let term = after;
    long_sampler.watch(&long_all, Duration::from_secs(1)).await;
    let (_, long_after) = wait_agreed(&mut long_sampler, &long_all).await;
    let long_kept_term = long_after == long_term;
    cluster.wait_list(|list| list.contains("Sync Standby") && list.matches("running").count() == 3);

    // A SIGTERM handover.
    let (leader, _) = wait_agreed(&mut sampler, &nodes.iter().collect::<Vec<_>>()).await;
    let index = nodes.iter().position(|n| n.id == leader).unwrap();
    let stopped = Instant::now();
    nodes[index].signal(Signal::SIGTERM);
    let others: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    let (_, term) = wait_new_leader(&mut sampler, &others, term).await;
    let handover_gap = stopped.elapsed();
    assert_eq!(
        nodes[index].wait_exit(Duration::from_secs(5)).await,
        Some(0)
    );
    sampler.sample(&nodes.iter().collect::<Vec<_>>());
    nodes[index] = Node::start(&scratch, &settings, &leader, &url);
    wait_agreed(&mut sampler, &nodes.iter().collect::<Vec<_>>()).await;

    // A crash of the primary's member: Patroni and its postmaster killed at once. The
    // leader key expires after Patroni's ttl, the synchronous standby is promoted, and
    // leaderd elects there.
    let primary = cluster.primary();
    let crashed = Instant::now();
    cluster.members[primary].crash();
    let (_, after_crash) = sampler
        .until(
            &nodes.iter().collect::<Vec<_>>(),
            Duration::from_secs(PATRONI_TTL) + SLACK,
            "a leader after the primary's member crashed",
            |s| agreed_leader(s).is_some_and(|(_, t)| t > term),
        )
        .await;
    let _ = after_crash;
    let failover_gap = crashed.elapsed();

    sampler.check_terms();
    long_sampler.sample(&long_all);
    long_sampler.check_terms();
    let mut holders: BTreeMap<i64, BTreeSet<&str>> = BTreeMap::new();
    for l in &sampler.leaderships {
        holders.entry(l.term).or_default().insert(&l.node_id);
    }
    assert!(
        holders.values().all(|ids| ids.len() == 1),
        "a term held by two nodes: {holders:?}"
    );
    let mut holders: BTreeMap<i64, BTreeSet<&str>> = BTreeMap::new();
    for l in &long_sampler.leaderships {
        holders.entry(l.term).or_default().insert(&l.node_id);
    }
    assert!(
        holders.values().all(|ids| ids.len() == 1),
        "a term held by two nodes: {holders:?}"
    );
    eprintln!(
        "[measured] patroni: cluster up in {cluster_up:?}; switchover: a leader (term ended: \
         {switchover_ended_term}) after {switchover_gap:?}, and at ttl 5 s the term kept: \
         {long_kept_term}; SIGTERM handover {handover_gap:?}; primary's member \
         crashed: leader back after {failover_gap:?} (Patroni ttl {PATRONI_TTL} s); \
         {} samples; whole test {:?}",
        sampler.samples,
        started.elapsed()
    );
    drop(nodes);
    drop(long_nodes);
    drop(cluster);
}
