//! Nodes that run the real `leaderd` binary, and the status files they write.

use super::{TestDb, free_port, unique};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

/// What a node's status file said when it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusFile {
    pub node_id: String,
    pub role: String,
    pub leader: Option<String>,
    pub term: Option<i64>,
    pub since: SystemTime,
    pub updated_at: SystemTime,
    pub valid_until: SystemTime,
}

impl StatusFile {
    pub fn read(path: &Path) -> Option<StatusFile> {
        let text = std::fs::read_to_string(path).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).expect("status file is JSON");
        let time = |key: &str| humantime::parse_rfc3339(json[key].as_str().unwrap()).unwrap();
        Some(StatusFile {
            node_id: json["node_id"].as_str().unwrap().to_owned(),
            role: json["role"].as_str().unwrap().to_owned(),
            leader: json["leader"].as_str().map(str::to_owned),
            term: json["term"].as_i64(),
            since: time("since"),
            updated_at: time("updated_at"),
            valid_until: time("valid_until"),
        })
    }

    pub fn is_leader(&self) -> bool {
        self.role == "leader"
    }
}

/// The `leaderd` binary under test.
pub fn leaderd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_leaderd"))
}

/// `leaderd status --json` for `election`: the election as the database sees it (`--new`:
/// also before any node joined it).
pub fn status_json(db: &TestDb, election: &str) -> serde_json::Value {
    let output = leaderd()
        .args(["status", "--json", "--new"])
        .current_dir(&db.dir)
        .env("LEADERD_DATABASE__URL", &db.url)
        .env("LEADERD_ELECTION__NAME", election)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// One `leaderd run` process.
pub struct Node {
    pub id: String,
    pub status_path: PathBuf,
    pub log_path: PathBuf,
    child: Child,
}

/// Timing and identity shared by the nodes of one test.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub election: String,
    pub ttl: Duration,
    pub interval: Duration,
    /// A configuration file (for hooks), passed with --config.
    pub config_file: Option<PathBuf>,
    /// Where the status files go, if not in the test's directory (the benchmark puts
    /// them on tmpfs, where the systemd unit and the Kubernetes manifest do).
    pub status_dir: Option<PathBuf>,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            election: unique("election"),
            ttl: Duration::from_millis(1200),
            interval: Duration::from_secs(1),
            config_file: None,
            status_dir: None,
        }
    }
}

impl NodeSettings {
    /// Renewals with 700 ms to spare instead of 200 ms, for tests that assert a healthy
    /// leader keeps its term on a loaded machine.
    pub fn roomy() -> Self {
        NodeSettings {
            interval: Duration::from_millis(500),
            ..NodeSettings::default()
        }
    }
}

impl Node {
    pub fn start(db: &TestDb, settings: &NodeSettings, id: &str, url: &str) -> Node {
        Self::start_with_env(db, settings, id, url, &[])
    }

    /// [`Node::start`] with extra environment variables for the process.
    pub fn start_with_env(
        db: &TestDb,
        settings: &NodeSettings,
        id: &str,
        url: &str,
        env: &[(&str, &str)],
    ) -> Node {
        Self::start_program(leaderd(), db, settings, id, url, env)
    }

    /// [`Node::start_with_env`] running `program` (another build of leaderd).
    pub fn start_program(
        mut command: Command,
        db: &TestDb,
        settings: &NodeSettings,
        id: &str,
        url: &str,
        env: &[(&str, &str)],
    ) -> Node {
        let status_path = settings
            .status_dir
            .as_ref()
            .unwrap_or(&db.dir)
            .join(format!("{id}.status.json"));
        let log_path = db.dir.join(format!("{id}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        if let Some(file) = &settings.config_file {
            command.arg("--config").arg(file);
        }
        let child = command
            .args(["run", "--id", id])
            .current_dir(&db.dir)
            .env("LEADERD_DATABASE__URL", url)
            .env("LEADERD_ELECTION__NAME", &settings.election)
            .env(
                "LEADERD_ELECTION__TTL",
                format!("{}ms", settings.ttl.as_millis()),
            )
            .env(
                "LEADERD_ELECTION__INTERVAL",
                format!("{}ms", settings.interval.as_millis()),
            )
            .env("LEADERD_STATUS__PATH", &status_path)
            .env("RUST_LOG", "leaderd=debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("leaderd starts");
        Node {
            id: id.to_owned(),
            status_path,
            log_path,
            child,
        }
    }

    /// Nodes `ids`, each serving HTTP on a port of its own (returned alongside).
    pub fn start_with_http(
        db: &TestDb,
        settings: &NodeSettings,
        ids: &[&str],
    ) -> (Vec<Node>, Vec<u16>) {
        let ports: Vec<u16> = ids.iter().map(|_| free_port()).collect();
        let nodes = ids
            .iter()
            .zip(&ports)
            .map(|(id, port)| {
                let listen = format!("127.0.0.1:{port}");
                Node::start_with_env(
                    db,
                    settings,
                    id,
                    &db.url,
                    &[("LEADERD_HTTP__LISTEN", &listen)],
                )
            })
            .collect();
        (nodes, ports)
    }

    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.id() as i32)
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(self.pid(), signal).unwrap();
    }

    pub fn status(&self) -> Option<StatusFile> {
        StatusFile::read(&self.status_path)
    }

    /// Waits for the process to exit and returns its exit code.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                start.elapsed() < limit,
                "{} did not exit within {limit:?}",
                self.id
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The exit code if the process has exited (`Some(None)`: killed by a signal).
    pub fn try_exit(&mut self) -> Option<Option<i32>> {
        self.child.try_wait().unwrap().map(|status| status.code())
    }

    /// The TCP connections this process holds open to `server` (from /proc: its socket
    /// descriptors, matched against the host's TCP table).
    pub fn connections_to(&self, server: std::net::SocketAddr) -> usize {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fd", self.pid())) else {
            return 0;
        };
        let sockets: std::collections::HashSet<String> = fds
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter_map(|link| {
                let link = link.to_string_lossy().into_owned();
                Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
            })
            .collect();
        // "sl local_address rem_address st ... inode": the remote port in hex, st 01 for
        // an established connection.
        let port = format!(":{:04X}", server.port());
        ["tcp", "tcp6"]
            .iter()
            .filter_map(|table| {
                std::fs::read_to_string(format!("/proc/{}/net/{table}", self.pid())).ok()
            })
            .flat_map(|text| {
                text.lines()
                    .skip(1)
                    .map(|line| line.split_whitespace().map(str::to_owned).collect())
                    .collect::<Vec<Vec<String>>>()
            })
            .filter(|fields| {
                fields.len() > 9
                    && fields[2].ends_with(&port)
                    && fields[3] == "01"
                    && sockets.contains(&fields[9])
            })
            .count()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The log once it contains `needle`. The daemon writes its log from a thread of its
    /// own, so a line logged before a role change can reach the file after the status
    /// file shows that role.
    pub async fn wait_log(&self, needle: &str, limit: Duration) -> String {
        let start = std::time::Instant::now();
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            assert!(
                start.elapsed() < limit,
                "{} never logged {needle:?} within {limit:?}:\n{log}",
                self.id
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until every node has recorded itself in the members table.
pub async fn wait_members(db: &TestDb, election: &str, count: usize) {
    let start = std::time::Instant::now();
    loop {
        let status = status_json(db, election);
        let seen = status["members"].as_array().map_or(0, Vec::len);
        if seen >= count {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "members: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
