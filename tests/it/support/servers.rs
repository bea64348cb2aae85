//! Database servers of a test's own, on free ports with their own directories (the shared
//! servers' configuration is never changed): a PostgreSQL primary and its streaming
//! standby ([`PgInstance`]), and a PgBouncer in transaction mode ([`PgBouncer`]).
//! PostgreSQL and PgBouncer refuse to run as root, so under root they run as `postgres`.

use super::{free_port, unique};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The newest PostgreSQL server binaries installed.
fn pg_bin(name: &str) -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL server binaries in /usr/lib/postgresql")
        .map(|e| e.unwrap().path())
        .collect();
    versions.sort_by_key(|p| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .parse::<u32>()
            .unwrap_or(0)
    });
    versions.pop().unwrap().join("bin").join(name)
}

fn running_as_root() -> bool {
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ROOT.get_or_init(|| {
        let id = Command::new("id").arg("-u").output().expect("id runs");
        String::from_utf8_lossy(&id.stdout).trim() == "0"
    })
}

/// `program` run as the `postgres` user when this process is root, else as itself.
fn as_server_user(program: impl AsRef<std::ffi::OsStr>) -> Command {
    if running_as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// A directory the server user owns.
fn server_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(name));
    std::fs::create_dir_all(&dir).unwrap();
    if running_as_root() {
        run(Command::new("chown").arg("postgres:").arg(&dir));
    }
    dir
}

fn run(command: &mut Command) {
    let output = command.output().expect("command runs");
    assert!(
        output.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs `sql` as postgres on the server at `port` (psql, no transaction around it).
pub fn psql(port: u16, sql: &str) -> String {
    let output = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-qAtc", sql])
        .output()
        .expect("psql runs");
    assert!(
        output.status.success(),
        "psql {sql:?} on port {port}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// One PostgreSQL server of a test's own.
pub struct PgInstance {
    pub port: u16,
    pub dir: PathBuf,
    running: bool,
}

impl PgInstance {
    /// A primary that standbys can replicate from (trust for everyone from 127.0.0.1).
    pub fn primary() -> PgInstance {
        Self::with_settings("")
    }

    /// [`PgInstance::primary`] with `extra` lines in its postgresql.conf.
    pub fn with_settings(extra: &str) -> PgInstance {
        let dir = server_dir("leaderd-pg");
        let data = dir.join("data");
        run(as_server_user(pg_bin("initdb")).arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
        ]));
        let mut instance = PgInstance {
            port: free_port(),
            dir,
            running: false,
        };
        instance.configure(&format!(
            "wal_level = replica\nmax_wal_senders = 10\nhot_standby = on\n{extra}\n"
        ));
        instance.start();
        instance
    }

    /// A streaming standby of `primary`, made with `pg_basebackup -R`.
    pub fn standby_of(primary: &PgInstance) -> PgInstance {
        Self::standby_via(primary.port)
    }

    /// A streaming standby of the primary reached at `port` on 127.0.0.1: its own, or a
    /// proxy in front of it that the test can stall (asynchronous replication that loses
    /// what it had not sent).
    pub fn standby_via(port: u16) -> PgInstance {
        let dir = server_dir("leaderd-pg-standby");
        run(as_server_user(pg_bin("pg_basebackup"))
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-U", "postgres", "-R", "-X", "stream", "--no-sync", "-D"])
            .arg(dir.join("data")));
        let mut instance = PgInstance {
            port: free_port(),
            dir,
            running: false,
        };
        instance.configure("");
        instance.start();
        instance
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Appends this instance's port and socket directory, then `extra`, to its settings.
    fn configure(&mut self, extra: &str) {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(self.data().join("postgresql.conf"))
            .unwrap();
        write!(
            file,
            "\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\n{extra}",
            self.port,
            self.dir.display()
        )
        .unwrap();
    }

    fn pg_ctl(&self, args: &[&str]) {
        run(as_server_user(pg_bin("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(args)
            .stdout(Stdio::null()));
    }

    pub fn start(&mut self) {
        let log = self.dir.join("server.log");
        self.pg_ctl(&["-w", "-t", "60", "-l", log.to_str().unwrap(), "start"]);
        self.running = true;
    }

    /// Stops the server: `mode` is pg_ctl's (`fast`: clients are cut and the rest of
    /// the WAL is sent to standbys; `immediate`: as a crash).
    pub fn stop(&mut self, mode: &str) {
        self.pg_ctl(&["-w", "-m", mode, "stop"]);
        self.running = false;
    }

    /// Promotes this standby, waiting until it accepts writes.
    pub fn promote(&self) {
        self.pg_ctl(&["-w", "promote"]);
    }

    /// Waits until the standby has replayed everything up to `primary`'s current WAL.
    pub fn wait_caught_up(&self, primary: &PgInstance) {
        let lsn = psql(primary.port, "SELECT pg_current_wal_lsn()");
        let start = Instant::now();
        let query = format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn");
        while psql(self.port, &query) != "t" {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the standby did not catch up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PgInstance {
    fn drop(&mut self) {
        if self.running {
            let _ = as_server_user(pg_bin("pg_ctl"))
                .arg("-D")
                .arg(self.data())
                .args(["-w", "-m", "immediate", "stop"])
                .output();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("server files kept in {}", self.dir.display());
        }
    }
}

/// A PgBouncer of a test's own in front of a PostgreSQL server, in `pool_mode`, with at
/// most `pool_size` server connections per database and user (fewer than the clients, so
/// that they share them).
pub struct PgBouncer {
    pub port: u16,
    pub dir: PathBuf,
    child: Child,
}

impl PgBouncer {
    pub fn start(upstream_port: u16, pool_mode: &str, pool_size: u32) -> PgBouncer {
        let dir = server_dir("leaderd-pgbouncer");
        let port = free_port();
        let auth_file = dir.join("userlist.txt");
        std::fs::write(&auth_file, "\"postgres\" \"\"\n").unwrap();
        let config = dir.join("pgbouncer.ini");
        std::fs::write(
            &config,
            format!(
                "[databases]\n* = host=127.0.0.1 port={upstream_port}\n\n[pgbouncer]\n\
                 listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                 auth_type = trust\nauth_file = {auth}\npool_mode = {pool_mode}\n\
                 default_pool_size = {pool_size}\nmax_client_conn = 100\n\
                 logfile = {log}\nserver_reset_query =\n",
                auth = auth_file.display(),
                log = dir.join("pgbouncer.log").display(),
            ),
        )
        .unwrap();
        let child = as_server_user(pgbouncer_bin())
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer starts");
        let bouncer = PgBouncer { port, dir, child };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "pgbouncer is not listening: {}",
                bouncer.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        bouncer
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

fn pgbouncer_bin() -> &'static Path {
    [
        Path::new("/usr/sbin/pgbouncer"),
        Path::new("/usr/bin/pgbouncer"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("pgbouncer is installed (scripts/test.sh installs it)")
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // runuser forwards the signal to pgbouncer.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
