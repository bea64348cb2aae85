//! MariaDB servers of a test's own (the shared server's configuration is never changed):
//! one server with settings of the test's choosing ([`Mariadb::single`]), or a member of a
//! Galera cluster ([`Mariadb::galera_member`]). Each runs in a directory of its own on
//! ports below the ephemeral range, is killed and removed when dropped, and a watchdog
//! stops it if the test process dies without unwinding.

use super::unique;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Galera provider `galera-4` installs.
pub const GALERA_PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

fn run(command: &mut Command) -> String {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A port below the ephemeral range (32768 and up here), free right now: ports up there
/// get taken by other programs' outgoing connections, which breaks a Galera state
/// transfer now and then.
pub fn low_port() -> u16 {
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let port = 20000 + (nanos ^ std::process::id().wrapping_mul(2654435761)) % 12000;
        let port = port as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// One `mariadbd` of the test's own.
pub struct Mariadb {
    pub port: u16,
    pub root: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl Mariadb {
    /// A plain server with `extra` options (`--default-time-zone=+01:00`), database
    /// `test`, root without a password on TCP.
    pub fn single(extra: &[&str]) -> Mariadb {
        let root = std::env::temp_dir().join(unique("leaderd_mariadb"));
        std::fs::create_dir_all(&root).unwrap();
        install(&root, "root");
        let port = low_port();
        let mut args = base_args(&root, port, "root");
        args.extend(extra.iter().map(|a| a.to_string()));
        let mut server = Mariadb {
            port,
            root,
            args,
            child: None,
        };
        server.start(&[]);
        server.sql("CREATE DATABASE IF NOT EXISTS test");
        server
    }

    /// A Galera member's server, not started: `cluster` lists every member's group port,
    /// `group`, `ist` and `sst` are this member's. Only the first member's data directory
    /// is initialised; the others get theirs by state transfer. Runs as `mysql`, so that
    /// the rsync state transfer may write the data directory.
    pub fn galera_member(
        root: &Path,
        index: usize,
        cluster: &[u16],
        (group, ist, sst): (u16, u16, u16),
    ) -> Mariadb {
        let root = root.join(format!("m{index}"));
        std::fs::create_dir_all(root.join("data")).unwrap();
        if index == 0 {
            install(&root, "mysql");
        }
        run(Command::new("chown").args(["-R", "mysql:mysql"]).arg(&root));
        let port = low_port();
        let mut args = base_args(&root, port, "mysql");
        let members: Vec<String> = cluster.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        args.extend([
            "--wsrep-on=ON".to_owned(),
            format!("--wsrep-provider={GALERA_PROVIDER}"),
            format!("--wsrep-cluster-address=gcomm://{}", members.join(",")),
            format!(
                "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{group};ist.recv_addr=127.0.0.1:{ist}"
            ),
            format!("--wsrep-sst-receive-address=127.0.0.1:{sst}"),
            "--wsrep-sst-method=rsync".to_owned(),
            format!("--wsrep-node-name=m{index}"),
            "--wsrep-cluster-name=leaderd_test".to_owned(),
            "--binlog-format=ROW".to_owned(),
            "--innodb-autoinc-lock-mode=2".to_owned(),
        ]);
        Mariadb {
            port,
            root,
            args,
            child: None,
        }
    }

    /// Starts the server with `more` options for this start only, and waits until it
    /// answers queries.
    pub fn start(&mut self, more: &[&str]) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join("server.log"))
            .unwrap();
        let child = Command::new("mariadbd")
            .args(&self.args)
            .args(more)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("mariadbd starts");
        watchdog(child.id(), &self.root);
        self.child = Some(child);
        let give_up = Instant::now() + Duration::from_secs(90);
        loop {
            if self.try_sql("SELECT 1").is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("mariadbd exited ({status}):\n{}", self.log());
            }
            assert!(
                Instant::now() < give_up,
                "mariadbd did not answer:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `kill -9`, and waits for it to go.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// After a `kill -9` of a Galera member: the position it recovers (`UUID:SEQNO`),
    /// which the next start passes as `--wsrep-start-position`.
    pub fn recover_position(&self) -> String {
        let log = self.root.join("recover.log");
        let _ = std::fs::remove_file(&log);
        let mut args = self.args.clone();
        args.retain(|a| !a.starts_with("--log-error"));
        run(Command::new("mariadbd")
            .args(&args)
            .arg("--wsrep-recover")
            .arg(format!("--log-error={}", log.display())));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let line = text
            .lines()
            .rfind(|l| l.contains("Recovered position:"))
            .unwrap_or_else(|| panic!("no recovered position:\n{text}"));
        line.rsplit("Recovered position:")
            .next()
            .unwrap()
            .trim()
            .to_owned()
    }

    /// `mysql://` URL of database `test` on this server (over TCP).
    pub fn url(&self) -> String {
        format!(
            "mysql://root@127.0.0.1:{}/test?prefer_socket=false",
            self.port
        )
    }

    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        let output = Command::new("mariadb")
            .args(["--no-defaults", "-uroot", "-h127.0.0.1", "--protocol=tcp"])
            .arg(format!("-P{}", self.port))
            .args(["-N", "-B", "--connect-timeout=2", "-e", sql])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        match output.status.success() {
            true => Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned()),
            false => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
        }
    }

    /// Runs `sql` as root; its output (tab-separated, no headers).
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql)
            .unwrap_or_else(|e| panic!("{sql} on port {}: {e}", self.port))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("server.log")).unwrap_or_default()
    }
}

impl Drop for Mariadb {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        } else {
            eprintln!("MariaDB files kept in {}", self.root.display());
        }
    }
}

fn install(root: &Path, user: &str) {
    run(Command::new("mariadb-install-db")
        .args([
            "--no-defaults",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
            "--innodb-log-file-size=16M",
        ])
        .arg(format!("--user={user}"))
        .arg(format!("--datadir={}", root.join("data").display())));
}

fn base_args(root: &Path, port: u16, user: &str) -> Vec<String> {
    vec![
        "--no-defaults".to_owned(),
        format!("--user={user}"),
        "--bind-address=127.0.0.1".to_owned(),
        "--skip-name-resolve".to_owned(),
        format!("--port={port}"),
        format!("--datadir={}", root.join("data").display()),
        format!("--socket={}", root.join("mysqld.sock").display()),
        format!("--pid-file={}", root.join("mysqld.pid").display()),
        "--innodb-buffer-pool-size=32M".to_owned(),
        "--innodb-log-file-size=16M".to_owned(),
    ]
}

/// Kills `pid` and removes `root` once this test process is gone (a test killed
/// without unwinding would otherwise leave its servers behind).
// The watchdog outlives this process on purpose.
#[allow(clippy::zombie_processes)]
fn watchdog(pid: u32, root: &Path) {
    let script = format!(
        "while kill -0 {me} 2>/dev/null && kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         if kill -0 {pid} 2>/dev/null; then kill -9 {pid}; sleep 1; rm -rf {root}; fi",
        me = std::process::id(),
        root = root.display(),
    );
    Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
}
