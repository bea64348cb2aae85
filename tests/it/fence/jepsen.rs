//! The fence proven the way Jepsen would: leader work that writes rows (node, term, seq)
//! as fast as it can over its own connection (`worker`), beside two real `leaderd run`
//! nodes whose hooks tell it its term and fence, while a schedule of faults hits the
//! leader's node, its work and its connection: handovers, the work frozen after its fence
//! (shorter than the lease, and longer), the daemon frozen, the daemon killed, the work's
//! connection cut, the database restarted. Afterwards, from the table alone: no row of
//! a term may have committed after the first row of a later term, judged by commit order
//! (PostgreSQL: commit timestamps, `track_commit_timestamp` on a server of the test's own;
//! MariaDB: the commit order of its transaction registry, a system-versioned table on a
//! server of the test's own; SQLite: row order, as its writers take turns). The same
//! schedule runs at once on a second election whose work leaves the fence out (the
//! control): it must show stale commits, or the test proves nothing.

use super::WorkConnection;
use super::worker::{self, ASSIGN, pause_file};
use crate::support::mariadb::Mariadb;
use crate::support::proxy::{Mode, Proxy};
use crate::support::servers::{PgInstance, psql};
use crate::support::{Backend, Node, NodeSettings, TestDb, leaderd, script, unique};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The election's timing: a renewal every 0.5 s, so that a fence always finds between
/// 1 s and 1.5 s of lease left (the bound on a fenced transaction's quiet client), longer
/// than the short freeze.
const TTL: Duration = Duration::from_millis(1500);
const INTERVAL: Duration = Duration::from_millis(500);
/// Longer than the lease: a fault that lasts this long ends a term.
const OVER_THE_LEASE: Duration = Duration::from_millis(2500);

/// The database, of the test's own where a fault restarts it.
enum Server {
    Postgres(PgInstance),
    Mysql(Mariadb),
    Sqlite(TestDb),
}

impl Server {
    fn start(backend: Backend) -> Server {
        match backend {
            Backend::Postgres => {
                let instance = PgInstance::with_settings("track_commit_timestamp = on");
                psql(instance.port, "CREATE DATABASE fence");
                Server::Postgres(instance)
            }
            Backend::Mysql => Server::Mysql(Mariadb::single(&[])),
            Backend::Sqlite => Server::Sqlite(TestDb::new(Backend::Sqlite)),
        }
    }

    fn backend(&self) -> Backend {
        match self {
            Server::Postgres(_) => Backend::Postgres,
            Server::Mysql(_) => Backend::Mysql,
            Server::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// The URL, through `proxy` if given.
    fn url(&self, proxy: Option<&Proxy>) -> String {
        let port = |own: u16| proxy.map_or(own, |p| p.addr.port());
        match self {
            Server::Postgres(pg) => {
                format!("postgres://postgres@127.0.0.1:{}/fence", port(pg.port))
            }
            Server::Mysql(m) => format!(
                "mysql://root@127.0.0.1:{}/test?prefer_socket=false",
                port(m.port)
            ),
            Server::Sqlite(db) => db.url.clone(),
        }
    }

    fn addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Server::Postgres(pg) => Some(([127, 0, 0, 1], pg.port).into()),
            Server::Mysql(m) => Some(([127, 0, 0, 1], m.port).into()),
            Server::Sqlite(_) => None,
        }
    }

    /// A crash and a start: every session ends, nothing uncommitted survives.
    fn restart(&mut self) {
        match self {
            Server::Postgres(pg) => {
                pg.stop("immediate");
                pg.start();
            }
            Server::Mysql(m) => {
                m.kill();
                m.start(&[]);
            }
            Server::Sqlite(_) => {}
        }
    }

    fn create_table(&self, table: &str) -> String {
        match self.backend() {
            Backend::Mysql => format!(
                "CREATE TABLE {table} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                 node VARCHAR(40) NOT NULL, term BIGINT NOT NULL, seq BIGINT NOT NULL, \
                 trx_start BIGINT UNSIGNED GENERATED ALWAYS AS ROW START INVISIBLE, \
                 trx_end BIGINT UNSIGNED GENERATED ALWAYS AS ROW END INVISIBLE, \
                 PERIOD FOR SYSTEM_TIME(trx_start, trx_end)) ENGINE = InnoDB WITH SYSTEM VERSIONING"
            ),
            Backend::Sqlite => format!(
                "CREATE TABLE {table} (id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, \
                 term INTEGER NOT NULL, seq INTEGER NOT NULL, \
                 at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')))"
            ),
            Backend::Postgres => super::create_work_table(Backend::Postgres, table),
        }
    }

    /// Every row with its commit time (µs since 1970) and position (`ord`), in commit order.
    fn in_commit_order(&self, table: &str) -> String {
        match self.backend() {
            Backend::Postgres => format!(
                "SELECT node, term, seq, id AS ord, \
                 (EXTRACT(EPOCH FROM pg_xact_commit_timestamp(xmin)) * 1000000)::BIGINT AS us \
                 FROM {table} ORDER BY us, id"
            ),
            Backend::Mysql => format!(
                "SELECT w.node, w.term, w.seq, CAST(r.commit_id AS SIGNED) AS ord, \
                 CAST(UNIX_TIMESTAMP(r.commit_timestamp) * 1000000 AS SIGNED) AS us \
                 FROM {table} w JOIN mysql.transaction_registry r ON r.transaction_id = w.trx_start \
                 ORDER BY r.commit_id"
            ),
            Backend::Sqlite => format!(
                "SELECT node, term, seq, id AS ord, \
                 CAST(ROUND((julianday(at) - 2440587.5) * 86400000000.0) AS INTEGER) AS us \
                 FROM {table} ORDER BY id"
            ),
        }
    }
}

#[derive(diesel::QueryableByName, Debug)]
struct Committed {
    #[diesel(sql_type = diesel::sql_types::Text)]
    node: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    term: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    seq: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    ord: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    us: i64,
}

/// Two nodes of one election and their workers, fenced or not.
struct Cluster {
    fenced: bool,
    election: String,
    table: String,
    dir: PathBuf,
    settings: NodeSettings,
    ids: [String; 2],
    nodes: Vec<Node>,
    workers: Vec<Child>,
    proxies: Vec<Option<Proxy>>,
}

impl Cluster {
    async fn start(server: &Server, scratch: &TestDb, fenced: bool) -> Cluster {
        let prefix = if fenced { "f" } else { "c" };
        let ids = [format!("{prefix}a"), format!("{prefix}b")];
        let dir = scratch.dir.clone();
        let assign = script(&dir, "assign.sh", ASSIGN);
        let config = dir.join(format!("{prefix}.toml"));
        let hook = |event: &str| format!("[{:?}, {event:?}]", assign.to_str().unwrap());
        std::fs::write(
            &config,
            format!(
                "[hooks]\non_elected = {}\non_demoted = {}\non_leader_change = {}\n",
                hook("elected"),
                hook("demoted"),
                hook("change")
            ),
        )
        .unwrap();
        let settings = NodeSettings {
            election: unique("fence"),
            ttl: TTL,
            interval: INTERVAL,
            config_file: Some(config),
            status_dir: None,
        };
        let table = unique(&format!("work_{prefix}"));
        let mut setup = WorkConnection::open(server.backend(), &server.url(None))
            .await
            .unwrap();
        setup.exec(&server.create_table(&table)).await.unwrap();
        let mut cluster = Cluster {
            fenced,
            election: settings.election.clone(),
            table,
            dir,
            settings,
            ids,
            nodes: Vec::new(),
            workers: Vec::new(),
            proxies: Vec::new(),
        };
        for i in 0..2 {
            let proxy = match server.addr() {
                Some(addr) => Some(Proxy::start(addr).await),
                None => None,
            };
            cluster
                .workers
                .push(cluster.worker(server, i, proxy.as_ref()));
            cluster.proxies.push(proxy);
            let node = cluster.node(server, scratch, i);
            cluster.nodes.push(node);
        }
        cluster
    }

    fn node(&self, server: &Server, scratch: &TestDb, i: usize) -> Node {
        Node::start_with_env(
            scratch,
            &self.settings,
            &self.ids[i],
            &server.url(None),
            &[("ASSIGN_DIR", self.dir.to_str().unwrap())],
        )
    }

    fn worker(&self, server: &Server, i: usize, proxy: Option<&Proxy>) -> Child {
        let log =
            std::fs::File::create(self.dir.join(format!("{}.worker.log", self.ids[i]))).unwrap();
        let backend = match server.backend() {
            Backend::Postgres => "postgres",
            Backend::Mysql => "mysql",
            Backend::Sqlite => "sqlite",
        };
        Command::new(std::env::current_exe().unwrap())
            .args([
                "fence::worker::work_loop",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .args(["--test-threads", "1"])
            .env(worker::BACKEND, backend)
            .env(worker::URL, server.url(proxy))
            .env(worker::NODE, &self.ids[i])
            .env(worker::DIR, &self.dir)
            .env(worker::TABLE, &self.table)
            .env(worker::FENCED, if self.fenced { "1" } else { "0" })
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// The node that leads now, once one does (by its status file).
    async fn leader(&self) -> usize {
        let give_up = Instant::now() + Duration::from_secs(20);
        loop {
            let now = SystemTime::now();
            let leading = self.nodes.iter().position(|n| {
                n.status()
                    .is_some_and(|s| s.is_leader() && s.valid_until > now)
            });
            if let Some(i) = leading {
                return i;
            }
            assert!(Instant::now() < give_up, "{}: no leader", self.election);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `leaderd resign` for this election: the leader steps down and another node takes
    /// over at once. Where the fence's lock holds back every write of the row (MySQL: a
    /// shared lock; SQLite: the one write lock, which frozen work holds as soon as it has
    /// written, fenced or not), the resign can time out while the work is frozen or cut
    /// off: then the leader's lease lapses instead, its renewals held back too.
    async fn handover(&self, server: &Server, scratch: &TestDb) -> Result<(), String> {
        let mut resign = leaderd();
        resign
            .args(["resign"])
            .current_dir(&scratch.dir)
            .env("LEADERD_DATABASE__URL", server.url(None))
            .env("LEADERD_ELECTION__NAME", &self.election)
            .env("LEADERD_LOG__LEVEL", "warn");
        let output = tokio::task::spawn_blocking(move || resign.output().unwrap())
            .await
            .unwrap();
        match output.status.success() {
            true => Ok(()),
            false => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
        }
    }

    /// [`Cluster::handover`], which only PostgreSQL's lock never holds back.
    async fn handover_unless_held_back(&self, server: &Server, scratch: &TestDb) {
        let handover = self.handover(server, scratch).await;
        let held_back = server.backend() != Backend::Postgres || !self.fenced;
        assert!(handover.is_ok() || held_back, "{handover:?}");
    }

    fn worker_pid(&self, i: usize) -> Pid {
        Pid::from_raw(self.workers[i].id() as i32)
    }

    /// Freezes node `i`'s worker after its next fence (before its COMMIT); false if it
    /// did not get there (it has no term to work in).
    async fn freeze_worker_after_its_fence(&self, i: usize) -> bool {
        let pause = pause_file(&self.dir, &self.ids[i]);
        std::fs::write(&pause, "").unwrap();
        let give_up = Instant::now() + Duration::from_secs(3);
        while Instant::now() < give_up {
            if stopped(self.worker_pid(i)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let _ = std::fs::remove_file(&pause);
        false
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.kill();
            let _ = worker.wait();
        }
    }
}

/// Whether `pid` is stopped (state T in /proc).
fn stopped(pid: Pid) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .is_some_and(|rest| rest.trim_start().starts_with('T'))
}

fn signal(pid: Pid, signal: Signal) {
    nix::sys::signal::kill(pid, signal).unwrap();
}

/// The faults, in order; `servers` only where there is a connection and a server.
const FAULTS: [(&str, bool); 7] = [
    ("handover", false),
    (
        "work frozen after its fence 0.5 s, across a handover",
        false,
    ),
    (
        "work frozen after its fence 2.5 s, across a handover",
        false,
    ),
    ("daemon frozen (SIGSTOP) 2.5 s", false),
    ("daemon killed (SIGKILL), restarted after 2.5 s", false),
    ("work's connection cut 2.5 s, across a handover", true),
    ("database restarted (crash)", true),
];

/// One fault on one cluster, at its leader.
async fn inflict(fault: &str, cluster: &mut Cluster, server: &Server, scratch: &TestDb) {
    let leader = cluster.leader().await;
    match fault {
        "handover" => cluster.handover(server, scratch).await.unwrap(),
        f if f.starts_with("work frozen") => {
            let frozen = if f.contains("0.5 s") {
                Duration::from_millis(500)
            } else {
                OVER_THE_LEASE
            };
            let pid = cluster.worker_pid(leader);
            assert!(
                cluster.freeze_worker_after_its_fence(leader).await,
                "{}: the leader's work never reached its fence",
                cluster.election
            );
            cluster.handover_unless_held_back(server, scratch).await;
            tokio::time::sleep(frozen).await;
            signal(pid, Signal::SIGCONT);
        }
        f if f.starts_with("daemon frozen") => {
            cluster.nodes[leader].signal(Signal::SIGSTOP);
            tokio::time::sleep(OVER_THE_LEASE).await;
            cluster.nodes[leader].signal(Signal::SIGCONT);
        }
        f if f.starts_with("daemon killed") => {
            cluster.nodes[leader].signal(Signal::SIGKILL);
            tokio::time::sleep(OVER_THE_LEASE).await;
            cluster.nodes[leader] = cluster.node(server, scratch, leader);
        }
        f if f.starts_with("work's connection cut") => {
            let proxy = cluster.proxies[leader].as_ref().expect("a proxy");
            proxy.set(Mode::Stall);
            cluster.handover_unless_held_back(server, scratch).await;
            tokio::time::sleep(OVER_THE_LEASE).await;
            proxy.set(Mode::Pass);
        }
        other => panic!("no fault {other:?}"),
    }
}

/// Rows of a later term committed before rows of an earlier one: for each row in commit
/// order, whether a row of a higher term committed before it.
fn stale_rows(rows: &[Committed]) -> Vec<&Committed> {
    let mut highest = i64::MIN;
    let mut stale = Vec::new();
    for row in rows {
        if row.term < highest {
            stale.push(row);
        }
        highest = highest.max(row.term);
    }
    stale
}

/// What one cluster committed: rows and stale rows per phase, and the terms it wrote in.
struct Outcome {
    per_phase: Vec<(usize, usize)>,
    terms: usize,
    stale: Vec<String>,
    last_phase_rows: usize,
}

async fn judge(server: &Server, cluster: &Cluster, phases: &[(String, SystemTime)]) -> Outcome {
    use diesel_async::RunQueryDsl;
    let query = diesel::sql_query(server.in_commit_order(&cluster.table));
    let rows: Vec<Committed> = match WorkConnection::open(server.backend(), &server.url(None))
        .await
        .unwrap()
    {
        WorkConnection::Postgres(mut c) => query.load(&mut c).await,
        WorkConnection::Mysql(mut c) => query.load(&mut c).await,
        WorkConnection::Sqlite(mut c) => query.load(&mut c).await,
    }
    .unwrap();
    // Every row is judged (none lacks a commit time or position).
    let mut count = WorkConnection::open(server.backend(), &server.url(None))
        .await
        .unwrap();
    let all = count
        .number(&format!("SELECT COUNT(*) AS n FROM {}", cluster.table))
        .await
        .unwrap();
    assert_eq!(all, rows.len() as i64, "rows without a commit order");
    let phase_of = |us: i64| {
        let at = SystemTime::UNIX_EPOCH + Duration::from_micros(us.max(0) as u64);
        phases
            .iter()
            .rposition(|(_, start)| *start <= at)
            .unwrap_or(0)
    };
    let mut per_phase = vec![(0, 0); phases.len()];
    for row in &rows {
        per_phase[phase_of(row.us)].0 += 1;
    }
    let stale = stale_rows(&rows);
    for row in &stale {
        per_phase[phase_of(row.us)].1 += 1;
    }
    let terms: std::collections::BTreeSet<i64> = rows.iter().map(|r| r.term).collect();
    Outcome {
        last_phase_rows: per_phase.last().map_or(0, |p| p.0),
        per_phase,
        terms: terms.len(),
        stale: stale
            .iter()
            .map(|r| {
                format!(
                    "{} term {} seq {} (commit #{} at {} µs)",
                    r.node, r.term, r.seq, r.ord, r.us
                )
            })
            .collect(),
    }
}

async fn stale_commits_with_and_without_the_fence(backend: Backend) {
    let started = Instant::now();
    // One server for both elections; on SQLite a file each, since frozen work holds the
    // one write lock of its file.
    let mut servers = vec![tokio::task::block_in_place(|| Server::start(backend))];
    if backend == Backend::Sqlite {
        servers.push(Server::start(backend));
    }
    let control_server = servers.len() - 1;
    let scratch = TestDb::new(Backend::Sqlite);
    let mut fenced = Cluster::start(&servers[0], &scratch, true).await;
    let mut control = Cluster::start(&servers[control_server], &scratch, false).await;
    let mut phases = vec![("start".to_owned(), SystemTime::UNIX_EPOCH)];
    tokio::join!(fenced.leader(), control.leader());
    tokio::time::sleep(Duration::from_millis(800)).await;
    for (fault, needs_server) in FAULTS {
        if needs_server && backend == Backend::Sqlite {
            continue;
        }
        phases.push((fault.to_owned(), SystemTime::now()));
        if fault.starts_with("database restarted") {
            tokio::task::block_in_place(|| servers[0].restart());
        } else {
            tokio::join!(
                inflict(fault, &mut fenced, &servers[0], &scratch),
                inflict(fault, &mut control, &servers[control_server], &scratch)
            );
        }
        // A leader again, and its work under way in its term.
        tokio::join!(fenced.leader(), control.leader());
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    phases.push(("after the last fault".to_owned(), SystemTime::now()));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    for worker in fenced.workers.drain(..).chain(control.workers.drain(..)) {
        kill(worker);
    }

    let with = judge(&servers[0], &fenced, &phases).await;
    let without = judge(&servers[control_server], &control, &phases).await;
    let mut table = format!(
        "{backend:?}, {:.0?}: | fault | fenced: stale / rows | unfenced: stale / rows |\n",
        started.elapsed()
    );
    for (i, (phase, _)) in phases.iter().enumerate() {
        let ((rows_f, stale_f), (rows_c, stale_c)) = (with.per_phase[i], without.per_phase[i]);
        table.push_str(&format!(
            "| {phase} | {stale_f} / {rows_f} | {stale_c} / {rows_c} |\n"
        ));
    }
    eprintln!("{table}");
    assert!(
        with.stale.is_empty(),
        "stale commits through the fence:\n{}\n{table}",
        with.stale.join("\n")
    );
    assert!(
        !without.stale.is_empty(),
        "the control shows no stale commit: the test proves nothing\n{table}"
    );
    assert!(
        with.terms >= 5,
        "the faults ended terms and the work went on in the next: {} terms\n{table}",
        with.terms
    );
    assert!(
        with.last_phase_rows > 0,
        "the work goes on after the last fault\n{table}"
    );
}

fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

backend_tests!(postgres = Backend::Postgres => stale_commits_with_and_without_the_fence);
backend_tests!(mysql = Backend::Mysql => stale_commits_with_and_without_the_fence);
backend_tests!(sqlite = Backend::Sqlite => stale_commits_with_and_without_the_fence);
