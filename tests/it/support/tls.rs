//! Database servers of the tests' own that speak TLS, with certificates the tests make:
//! a CA, a server certificate for `localhost` only (so that 127.0.0.1 is a host-name
//! mismatch), a client certificate, and a second CA that signed nothing the servers show.
//!
//! Each server starts once per test binary ([`servers`]) on a free port with a data
//! directory of its own, and a watchdog process stops it and removes its files once the
//! test process is gone. The shared servers' configuration is never touched.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The generated certificates and keys (PEM files).
pub struct Certs {
    pub dir: PathBuf,
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// A CA that signed nothing the servers present.
    pub other_ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// A client certificate with CN `certuser`, and its RSA key (PKCS#1).
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// The servers the TLS tests share.
pub struct Servers {
    pub certs: Certs,
    /// PostgreSQL with ssl=on; user `postgres` (trust), user `certuser` only with a
    /// client certificate (`hostssl … cert`); database `test`.
    pub pg_tls_port: u16,
    /// PostgreSQL with ssl=off (a copy of the same cluster).
    pub pg_plain_port: u16,
    /// MariaDB with TLS; user `leaderd` (no password), user `x509user` REQUIRE X509;
    /// database `test`.
    pub mysql_tls_port: u16,
}

/// Starts the servers on first use; later calls get the same ones.
pub fn servers() -> &'static Servers {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    SERVERS.get_or_init(start)
}

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

fn openssl(dir: &Path, args: &[&str]) {
    run(Command::new("openssl").current_dir(dir).args(args));
}

/// A CA, a server certificate for `localhost`, a client certificate for `certuser`, and
/// an unrelated CA. EC P-256 keys: quick to make.
fn make_certs(dir: &Path) -> Certs {
    std::fs::create_dir_all(dir).unwrap();
    let key = |name: &str| {
        openssl(
            dir,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                name,
            ],
        )
    };
    for (ca, cn) in [("ca", "leaderd test CA"), ("other-ca", "some other CA")] {
        key(&format!("{ca}.key"));
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                &format!("{ca}.key"),
                "-days",
                "2",
                "-subj",
                &format!("/CN={cn}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-out",
                &format!("{ca}.crt"),
            ],
        );
    }
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("client.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    key("server.key");
    // RSA in PKCS#1 form: the only client key mysql_async reads.
    openssl(
        dir,
        &["genrsa", "-traditional", "-out", "client.key", "2048"],
    );
    for (name, cn) in [("server", "localhost"), ("client", "certuser")] {
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-key",
                &format!("{name}.key"),
                "-subj",
                &format!("/CN={cn}"),
                "-out",
                &format!("{name}.csr"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.crt"),
            ],
        );
    }
    Certs {
        dir: dir.to_owned(),
        ca: dir.join("ca.crt"),
        other_ca: dir.join("other-ca.crt"),
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.crt"),
        client_key: dir.join("client.key"),
    }
}

fn postgres_bin(tool: &str) -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL server binaries in /usr/lib/postgresql")
        .map(|entry| entry.unwrap().path())
        .collect();
    versions.sort();
    versions.pop().unwrap().join("bin").join(tool)
}

/// Waits until `port` accepts connections.
fn wait_listening(port: u16, what: &str) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < give_up,
            "{what} did not listen on port {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// The watchdog outlives this process on purpose, and so does the server it stops.
#[allow(clippy::zombie_processes)]
fn start() -> Servers {
    let root = std::env::temp_dir().join(super::unique("leaderd_tls"));
    let certs = make_certs(&root.join("certs"));
    // PostgreSQL runs as `postgres` and wants its key private to it.
    run(Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(&root));
    run(Command::new("chmod").arg("0755").arg(&root).arg(&certs.dir));
    for file in std::fs::read_dir(&certs.dir).unwrap() {
        let path = file.unwrap().path();
        let mode = if path.extension().is_some_and(|e| e == "key") {
            "0600"
        } else {
            "0644"
        };
        run(Command::new("chmod").arg(mode).arg(&path));
    }
    let (pg_tls_port, pg_plain_port) = start_postgres(&root, &certs);
    let mysql_tls_port = start_mariadb(&root, &certs);
    // Stops the servers and removes their files once this test process is gone.
    let watchdog = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         for d in {root}/pg-tls {root}/pg-plain; do runuser -u postgres -- {pg_ctl} -D $d -m immediate stop; done; \
         kill $(cat {root}/mariadb.pid); sleep 1; rm -rf {root}",
        pid = std::process::id(),
        root = root.display(),
        pg_ctl = postgres_bin("pg_ctl").display(),
    );
    Command::new("setsid")
        .args(["sh", "-c", &watchdog])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Servers {
        certs,
        pg_tls_port,
        pg_plain_port,
        mysql_tls_port,
    }
}

/// One initdb, copied: the copy runs without TLS.
fn start_postgres(root: &Path, certs: &Certs) -> (u16, u16) {
    let tls_dir = root.join("pg-tls");
    let plain_dir = root.join("pg-plain");
    let as_postgres = |tool: &str| {
        let mut command = Command::new("runuser");
        command
            .args(["-u", "postgres", "--"])
            .arg(postgres_bin(tool));
        command
    };
    run(as_postgres("initdb")
        .args(["-U", "postgres", "--auth=trust", "--no-sync", "-D"])
        .arg(&tls_dir));
    std::fs::write(
        tls_dir.join("pg_hba.conf"),
        "local all all trust\n\
         hostssl all certuser 127.0.0.1/32 cert\n\
         hostssl all certuser ::1/128 cert\n\
         host all certuser 0.0.0.0/0 reject\n\
         host all all 127.0.0.1/32 trust\n\
         host all all ::1/128 trust\n",
    )
    .unwrap();
    run(Command::new("cp").arg("-a").arg(&tls_dir).arg(&plain_dir));
    let mut ports = Vec::new();
    for (dir, ssl) in [(&tls_dir, true), (&plain_dir, false)] {
        let port = super::free_port();
        let mut options = format!(
            "-p {port} -k {} -c listen_addresses=localhost -c fsync=off -c ssl={}",
            dir.display(),
            if ssl { "on" } else { "off" }
        );
        if ssl {
            options += &format!(
                " -c ssl_cert_file={} -c ssl_key_file={} -c ssl_ca_file={}",
                certs.server_cert.display(),
                certs.server_key.display(),
                certs.ca.display()
            );
        }
        run(as_postgres("pg_ctl")
            .arg("-D")
            .arg(dir)
            .args(["-w", "-l"])
            .arg(dir.join("log"))
            .args(["-o", &options, "start"]));
        let socket_dir = dir.display().to_string();
        run(as_postgres("psql")
            .args([
                "-h",
                &socket_dir,
                "-p",
                &port.to_string(),
                "-U",
                "postgres",
                "-c",
            ])
            .arg("CREATE DATABASE test")
            .args(["-c", "CREATE ROLE certuser LOGIN SUPERUSER"]));
        ports.push(port);
    }
    (ports[0], ports[1])
}

// The server outlives this process; the watchdog of `start` stops it.
#[allow(clippy::zombie_processes)]
fn start_mariadb(root: &Path, certs: &Certs) -> u16 {
    let dir = root.join("mariadb");
    let socket = root.join("mariadb.sock");
    run(Command::new("mariadb-install-db")
        .args([
            "--no-defaults",
            "--user=root",
            "--auth-root-authentication-method=normal",
        ])
        .args(["--skip-test-db", "--skip-name-resolve"])
        .arg(format!("--datadir={}", dir.display())));
    let port = super::free_port();
    Command::new("mariadbd")
        .args([
            "--no-defaults",
            "--user=root",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--datadir={}", dir.display()))
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--pid-file={}", root.join("mariadb.pid").display()))
        .arg(format!(
            "--log-error={}",
            root.join("mariadb.log").display()
        ))
        .arg(format!("--ssl-cert={}", certs.server_cert.display()))
        .arg(format!("--ssl-key={}", certs.server_key.display()))
        .arg(format!("--ssl-ca={}", certs.ca.display()))
        .args(["--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(port, "MariaDB");
    run(Command::new("mariadb")
        .args(["--no-defaults", "-uroot"])
        .arg(format!("--socket={}", socket.display()))
        .arg("-e")
        .arg(
            "CREATE DATABASE test; \
             CREATE USER 'leaderd'@'%'; GRANT ALL ON *.* TO 'leaderd'@'%'; \
             CREATE USER 'x509user'@'%' REQUIRE X509; GRANT ALL ON *.* TO 'x509user'@'%';",
        ));
    port
}
