//! Shared test support: a database of its own per test on each backend, a TCP proxy that
//! breaks connections on demand, and nodes that run the real `leaderd` binary.
#![allow(dead_code)]

/// Instantiates `async fn test(backend: Backend)` functions as tests in a module named
/// after the backend: `backend_tests!(postgres = Backend::Postgres => test_a, test_b);`
macro_rules! backend_tests {
    ($module:ident = $backend:expr => $($test:ident),* $(,)?) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $test() {
                    super::$test($backend).await
                }
            )*
        }
    };
}

/// Instantiates `async fn check(escape: Escape, ending: Ending, mode: &str)` as one test
/// per way of escaping the process group and per ending: `escape_tests!(check, "cgroup",
/// "subreaper")` runs half of them in the first containment mode, half in the second, so
/// that each mode sees every escape and every ending.
#[allow(unused_macros)]
macro_rules! escape_tests {
    ($check:ident, $one:literal, $other:literal) => {
        escape_tests!(@each $check:
            escape_by_timeout_ends_when_leaderd_is_killed: Timeout, DaemonKilled, $one;
            escape_by_timeout_ends_when_the_lease_is_lost: Timeout, LeaseLost, $other;
            escape_by_setsid_ends_when_leaderd_is_killed: Setsid, DaemonKilled, $other;
            escape_by_setsid_ends_when_the_lease_is_lost: Setsid, LeaseLost, $one;
            escape_by_daemonizing_ends_when_leaderd_is_killed: Daemonize, DaemonKilled, $one;
            escape_by_daemonizing_ends_when_the_lease_is_lost: Daemonize, LeaseLost, $other;
        );
    };
    (@each $check:ident: $($name:ident: $escape:ident, $ending:ident, $mode:literal;)*) => {$(
        #[tokio::test(flavor = "multi_thread")]
        async fn $name() {
            use crate::common::escape::{Ending, Escape};
            $check(Escape::$escape, Ending::$ending, $mode).await
        }
    )*};
}

pub mod escape;
pub mod proxy;
pub mod records;

use diesel_async::{
    AsyncConnection, AsyncMysqlConnection, AsyncPgConnection, SimpleAsyncConnection,
};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

pub const POSTGRES_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/test";
pub const MYSQL_ADMIN: &str = "mysql://root@127.0.0.1:3306/test";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Mysql,
    Sqlite,
}

/// A name no other test (or test process) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The wall clock in nanoseconds, as the recording scripts' `date +%s%N` writes it.
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Writes an executable script `name` into `dir`.
pub fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Every line of the files in `dir` whose names start with `prefix`.
pub fn lines_of(dir: &Path, prefix: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if name.starts_with(prefix) {
            let text = std::fs::read_to_string(&path).unwrap();
            lines.extend(text.lines().map(str::to_owned));
        }
    }
    lines
}

/// A port free right now (bound and let go).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One plain HTTP/1.0 GET: the status code and the whole response (headers and body).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {response:?}"));
    (code, response)
}

/// Runs `future` to completion on a runtime of its own (usable from `Drop`).
fn block_on<F: std::future::Future + Send + 'static>(future: F) -> F::Output
where
    F::Output: Send,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    })
    .join()
    .unwrap()
}

/// A database created for one test and dropped after it, plus a scratch directory.
pub struct TestDb {
    pub backend: Backend,
    /// The URL nodes use (directly, not through a proxy).
    pub url: String,
    pub dir: PathBuf,
    name: String,
}

impl TestDb {
    pub fn new(backend: Backend) -> TestDb {
        let name = unique("leaderd");
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let url = match backend {
            Backend::Postgres => {
                let statement = format!("CREATE DATABASE {name}");
                block_on(async move {
                    let mut c = AsyncPgConnection::establish(POSTGRES_ADMIN).await.unwrap();
                    c.batch_execute(&statement).await.unwrap();
                });
                format!("postgres://postgres@127.0.0.1:5432/{name}")
            }
            Backend::Mysql => {
                let statement = format!("CREATE DATABASE {name}");
                block_on(async move {
                    let mut c = AsyncMysqlConnection::establish(MYSQL_ADMIN).await.unwrap();
                    c.batch_execute(&statement).await.unwrap();
                });
                format!("mysql://root@127.0.0.1:3306/{name}")
            }
            Backend::Sqlite => format!("sqlite://{}", dir.join("leaderd.sqlite3").display()),
        };
        TestDb {
            backend,
            url,
            dir,
            name,
        }
    }

    /// The URL with its host and port replaced by `addr` (for a proxy).
    pub fn url_via(&self, addr: std::net::SocketAddr) -> String {
        let port = match self.backend {
            Backend::Postgres => "127.0.0.1:5432",
            Backend::Mysql => "127.0.0.1:3306",
            Backend::Sqlite => panic!("SQLite has no connection to proxy"),
        };
        let url = self.url.replace(port, &addr.to_string());
        match self.backend {
            // mysql_async otherwise switches to the server's Unix socket on a local host,
            // around the proxy.
            Backend::Mysql => format!("{url}?prefer_socket=false"),
            _ => url,
        }
    }

    /// The upstream address a proxy forwards to.
    pub fn server_addr(&self) -> std::net::SocketAddr {
        match self.backend {
            Backend::Postgres => "127.0.0.1:5432".parse().unwrap(),
            Backend::Mysql => "127.0.0.1:3306".parse().unwrap(),
            Backend::Sqlite => panic!("SQLite has no server"),
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let statement = format!("DROP DATABASE IF EXISTS {}", self.name);
        match self.backend {
            Backend::Postgres => block_on(async move {
                let mut c = AsyncPgConnection::establish(POSTGRES_ADMIN).await.unwrap();
                c.batch_execute(&format!("{statement} WITH (FORCE)"))
                    .await
                    .unwrap();
            }),
            Backend::Mysql => block_on(async move {
                let mut c = AsyncMysqlConnection::establish(MYSQL_ADMIN).await.unwrap();
                c.batch_execute(&statement).await.unwrap();
            }),
            Backend::Sqlite => {}
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("test files kept in {}", self.dir.display());
        }
    }
}

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

/// `leaderd status --json` for `election`: the election as the database sees it.
pub fn status_json(db: &TestDb, election: &str) -> serde_json::Value {
    let output = leaderd()
        .args(["status", "--json"])
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
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            election: unique("election"),
            ttl: Duration::from_millis(1200),
            interval: Duration::from_secs(1),
            config_file: None,
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
        let status_path = db.dir.join(format!("{id}.status.json"));
        let log_path = db.dir.join(format!("{id}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let mut command = leaderd();
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Samples the status files of a set of nodes and asserts, at every sample, that no two
/// nodes claim leadership that is still valid. Sound despite the files being read one
/// after another: a node can only become leader after every earlier leader's
/// `valid_until` has passed, so comparing against the time *after* reading all files never
/// flags a legitimate handover.
pub struct Sampler {
    pub samples: u64,
    /// Every leadership seen.
    pub leaderships: Vec<Leadership>,
}

/// One node's leadership in one term, as its status file showed it.
#[derive(Debug, Clone)]
pub struct Leadership {
    pub node_id: String,
    pub term: i64,
    pub since: SystemTime,
    /// The latest `valid_until` it claimed.
    pub valid_until: SystemTime,
    /// When its file first said it no longer led (a clean step-down ends before
    /// `valid_until`).
    pub ended_at: Option<SystemTime>,
}

impl Leadership {
    /// The last instant this leadership could have been acted on.
    pub fn end(&self) -> SystemTime {
        self.ended_at
            .map_or(self.valid_until, |e| e.min(self.valid_until))
    }
}

impl Sampler {
    pub fn new() -> Sampler {
        Sampler {
            samples: 0,
            leaderships: Vec::new(),
        }
    }

    /// Reads every node's file once, checks the invariant and returns what was read.
    pub fn sample(&mut self, nodes: &[&Node]) -> Vec<Option<StatusFile>> {
        let statuses: Vec<_> = nodes.iter().map(|n| n.status()).collect();
        let read_done = SystemTime::now();
        let valid_leaders: Vec<_> = statuses
            .iter()
            .flatten()
            .filter(|s| s.is_leader() && s.valid_until > read_done)
            .collect();
        let ids: std::collections::BTreeSet<_> = valid_leaders.iter().map(|s| &s.node_id).collect();
        assert!(
            ids.len() <= 1,
            "two valid leaders at once: {valid_leaders:#?}"
        );
        for status in statuses.iter().flatten() {
            let term = status.term.unwrap_or(-1);
            let known = self
                .leaderships
                .iter_mut()
                .find(|l| l.node_id == status.node_id && l.term == term);
            match (status.is_leader(), known) {
                (true, Some(known)) => {
                    known.valid_until = known.valid_until.max(status.valid_until)
                }
                (true, None) => self.leaderships.push(Leadership {
                    node_id: status.node_id.clone(),
                    term,
                    since: status.since,
                    valid_until: status.valid_until,
                    ended_at: None,
                }),
                (false, _) => {
                    for open in self.leaderships.iter_mut().filter(|l| {
                        l.node_id == status.node_id
                            && l.ended_at.is_none()
                            && l.since <= status.updated_at
                    }) {
                        open.ended_at = Some(status.updated_at);
                    }
                }
            }
        }
        self.samples += 1;
        statuses
    }

    /// Leaderships seen must not overlap in time, and terms must grow with time.
    pub fn check_terms(&self) {
        let mut terms = self.leaderships.clone();
        terms.sort_by_key(|l| l.term);
        for pair in terms.windows(2) {
            let (earlier, later) = (&pair[0], &pair[1]);
            assert!(
                later.since >= earlier.end(),
                "term {} of {} began before term {} of {} ended: {terms:#?}",
                later.term,
                later.node_id,
                earlier.term,
                earlier.node_id
            );
        }
    }

    /// Samples every few milliseconds until `condition` holds for what was read; returns
    /// the statuses then and the time it took.
    pub async fn until(
        &mut self,
        nodes: &[&Node],
        limit: Duration,
        what: &str,
        condition: impl Fn(&[Option<StatusFile>]) -> bool,
    ) -> (Vec<Option<StatusFile>>, Duration) {
        let start = std::time::Instant::now();
        loop {
            let statuses = self.sample(nodes);
            if condition(&statuses) {
                return (statuses, start.elapsed());
            }
            if start.elapsed() > limit {
                for node in nodes {
                    eprintln!("--- {} log:\n{}", node.id, node.log());
                }
                panic!("{what}: not within {limit:?}; last statuses: {statuses:#?}");
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }

    /// Samples for `duration`, only checking the invariant.
    pub async fn watch(&mut self, nodes: &[&Node], duration: Duration) {
        let end = std::time::Instant::now() + duration;
        while std::time::Instant::now() < end {
            self.sample(nodes);
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
}

/// Waits until every node has a status file and all agree on one leader and term.
pub async fn wait_agreed(sampler: &mut Sampler, nodes: &[&Node]) -> (String, i64) {
    let (statuses, _) = sampler
        .until(
            nodes,
            Duration::from_secs(15),
            "all nodes agree on one leader",
            |s| s.iter().all(Option::is_some) && agreed_leader(s).is_some(),
        )
        .await;
    agreed_leader(&statuses).unwrap()
}

/// Waits until `nodes` agree on a leader in a term after `term`; returns it.
pub async fn wait_new_leader(sampler: &mut Sampler, nodes: &[&Node], term: i64) -> (String, i64) {
    let (statuses, _) = sampler
        .until(
            nodes,
            Duration::from_secs(15),
            "the nodes agree on a new leader",
            |s| agreed_leader(s).is_some_and(|(_, t)| t > term),
        )
        .await;
    agreed_leader(&statuses).unwrap()
}

/// The one node whose status says leader, if exactly one does and all others follow it.
pub fn agreed_leader(statuses: &[Option<StatusFile>]) -> Option<(String, i64)> {
    let statuses: Vec<&StatusFile> = statuses.iter().flatten().collect();
    let leaders: Vec<_> = statuses.iter().filter(|s| s.is_leader()).collect();
    let [leader] = leaders.as_slice() else {
        return None;
    };
    let agreed = statuses
        .iter()
        .all(|s| s.leader.as_deref() == Some(&leader.node_id) && s.term == leader.term);
    agreed.then(|| (leader.node_id.clone(), leader.term.unwrap()))
}
