//! TLS to PostgreSQL and MariaDB, against servers of the tests' own (support::tls) with
//! certificates made for the run: the server certificate names `localhost` only, so
//! `localhost` verifies in full and `127.0.0.1` is a host-name mismatch.

use super::*;
use crate::support::tls::{Servers, servers};
use crate::support::{Node, NodeSettings};
use diesel_async::RunQueryDsl;

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(10),
        query: Duration::from_secs(5),
    }
}

fn pg_url(port: u16, host: &str, user: &str, params: &str) -> String {
    format!("postgres://{user}@{host}:{port}/test?{params}")
}

/// mysql_async would otherwise move a connection to 127.0.0.1 onto the server's Unix
/// socket, where there is no TLS to test.
fn mysql_url(port: u16, host: &str, user: &str, params: &str) -> String {
    format!("mysql://{user}@{host}:{port}/test?prefer_socket=false&{params}")
}

fn verify_pg(s: &Servers, host: &str, mode: &str) -> String {
    pg_url(
        s.pg_tls_port,
        host,
        "postgres",
        &format!("sslmode={mode}&sslrootcert={}", s.certs.ca.display()),
    )
}

fn verify_mysql(s: &Servers, host: &str, mode: &str) -> String {
    mysql_url(
        s.mysql_tls_port,
        host,
        "leaderd",
        &format!("ssl-mode={mode}&ssl-ca={}", s.certs.ca.display()),
    )
}

/// A whole round on a new store: connect (migrating), create the row, claim, read back.
async fn round(url: &str) -> Result<(), StoreError> {
    let mut store = SqlStore::new(DatabaseUrl::parse(url).unwrap(), timeouts(), true);
    let name = crate::support::unique("tls");
    store.ensure_row(&name).await?;
    assert!(store.claim(&lease(&name, "n1", TTL, 0)).await?.is_some());
    let row = store.get(&name).await?.unwrap();
    assert_eq!(row.live_holder(), Some("n1"));
    Ok(())
}

/// Whether the session a connection of ours opened is encrypted, as the server sees it.
async fn encrypted(url: &str) -> bool {
    #[derive(diesel::QueryableByName)]
    struct Answer {
        #[diesel(sql_type = diesel::sql_types::Text)]
        answer: String,
    }
    let mut conn = DbConnection::connect(&DatabaseUrl::parse(url).unwrap(), TTL)
        .await
        .unwrap();
    let answer: Vec<Answer> = match &mut conn {
        DbConnection::Postgres(c) => diesel::sql_query(
            "SELECT ssl::text AS answer FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        )
        .load(c)
        .await
        .unwrap(),
        DbConnection::Mysql(c) => {
            diesel::sql_query("SELECT variable_value AS answer FROM information_schema.session_status WHERE variable_name = 'Ssl_cipher'")
                .load(c)
                .await
                .unwrap()
        }
        DbConnection::Sqlite(_) => unreachable!(),
    };
    let answer = answer
        .into_iter()
        .next()
        .map(|a| a.answer)
        .unwrap_or_default();
    answer == "true" || (!answer.is_empty() && answer != "false")
}

/// The message of a round that must fail, checked to be one clear sentence: no message
/// repeated inside itself, and no password.
async fn failure(url: &str) -> String {
    let error = round(url).await.expect_err("the connection must fail");
    let message = error.to_string();
    assert!(
        !message.contains("handshake: error performing TLS handshake"),
        "{message}"
    );
    message
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_verify_full_by_name_runs_a_round_encrypted() {
    let s = servers();
    let url = verify_pg(s, "localhost", "verify-full");
    round(&url).await.unwrap();
    assert!(encrypted(&url).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_verify_ca_checks_the_chain_but_not_the_name() {
    let s = servers();
    round(&verify_pg(s, "127.0.0.1", "verify-ca"))
        .await
        .unwrap();
    // require without a root file checks nothing, but still encrypts.
    let require = pg_url(s.pg_tls_port, "127.0.0.1", "postgres", "sslmode=require");
    round(&require).await.unwrap();
    assert!(encrypted(&require).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_host_name_mismatch_names_the_host() {
    let s = servers();
    let message = failure(&verify_pg(s, "127.0.0.1", "verify-full")).await;
    assert!(
        message.contains("not valid for the name \"127.0.0.1\""),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_wrong_ca_names_the_ca_file() {
    let s = servers();
    let other = s.certs.other_ca.display().to_string();
    for mode in ["verify-full", "verify-ca", "require"] {
        let url = pg_url(
            s.pg_tls_port,
            "localhost",
            "postgres",
            &format!("sslmode={mode}&sslrootcert={other}"),
        );
        let message = failure(&url).await;
        assert!(message.contains("do not vouch for"), "{mode}: {message}");
        assert!(message.contains(&other), "{mode}: {message}");
    }
    // Without a root file, the system's CAs do not know the test CA either.
    let url = pg_url(
        s.pg_tls_port,
        "localhost",
        "postgres",
        "sslmode=verify-full",
    );
    let message = failure(&url).await;
    assert!(message.contains("the system's trusted CAs"), "{message}");
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_require_refuses_a_server_without_tls() {
    let s = servers();
    for mode in ["require", "verify-full"] {
        let url = pg_url(
            s.pg_plain_port,
            "localhost",
            "postgres",
            &format!("sslmode={mode}"),
        );
        let message = failure(&url).await;
        assert!(message.contains("offers no TLS"), "{mode}: {message}");
        assert!(message.contains(&format!("sslmode={mode}")), "{message}");
    }
    // prefer (the default) falls back to plain text, as libpq does.
    let prefer = pg_url(s.pg_plain_port, "localhost", "postgres", "sslmode=prefer");
    round(&prefer).await.unwrap();
    assert!(!encrypted(&prefer).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_client_certificate_logs_in_where_the_server_asks_for_one() {
    let s = servers();
    let with_cert = format!(
        "{}&sslcert={}&sslkey={}",
        pg_url(
            s.pg_tls_port,
            "localhost",
            "certuser",
            "sslmode=verify-full"
        ),
        s.certs.client_cert.display(),
        s.certs.client_key.display()
    );
    let with_cert = format!("{with_cert}&sslrootcert={}", s.certs.ca.display());
    round(&with_cert).await.unwrap();
    let without = pg_url(
        s.pg_tls_port,
        "localhost",
        "certuser",
        &format!("sslmode=verify-full&sslrootcert={}", s.certs.ca.display()),
    );
    let message = failure(&without).await;
    assert!(
        message.contains("requires a valid client certificate"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_verify_identity_by_name_runs_a_round_encrypted() {
    let s = servers();
    let url = verify_mysql(s, "localhost", "VERIFY_IDENTITY");
    round(&url).await.unwrap();
    assert!(encrypted(&url).await);
    // mysql_async's own spelling means the same.
    let native = mysql_url(
        s.mysql_tls_port,
        "localhost",
        "leaderd",
        &format!("require_ssl=true&ssl_ca={}", s.certs.ca.display()),
    );
    round(&native).await.unwrap();
}

/// mysql_async 0.36 checks the name under VERIFY_CA too (see `store::tls`); REQUIRED
/// checks nothing but encrypts.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_verify_ca_checks_the_chain_and_required_encrypts() {
    let s = servers();
    round(&verify_mysql(s, "localhost", "VERIFY_CA"))
        .await
        .unwrap();
    let message = failure(&verify_mysql(s, "127.0.0.1", "VERIFY_CA")).await;
    assert!(
        message.contains("VERIFY_CA checks the name as well"),
        "{message}"
    );
    let required = mysql_url(
        s.mysql_tls_port,
        "127.0.0.1",
        "leaderd",
        "ssl-mode=REQUIRED",
    );
    round(&required).await.unwrap();
    assert!(encrypted(&required).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_host_name_mismatch_names_the_host() {
    let s = servers();
    let message = failure(&verify_mysql(s, "127.0.0.1", "VERIFY_IDENTITY")).await;
    assert!(
        message.contains("not valid for the name \"127.0.0.1\""),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_wrong_ca_names_the_ca_file() {
    let s = servers();
    let other = s.certs.other_ca.display().to_string();
    let url = mysql_url(
        s.mysql_tls_port,
        "localhost",
        "leaderd",
        &format!("ssl-mode=VERIFY_CA&ssl-ca={other}"),
    );
    let message = failure(&url).await;
    assert!(message.contains("do not vouch for"), "{message}");
    assert!(message.contains(&other), "{message}");
}

/// The shared MariaDB on 3306 runs without TLS (have_ssl = DISABLED): a server without
/// TLS to be refused.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_required_refuses_a_server_without_tls() {
    let message = failure(&format!(
        "{}?prefer_socket=false&ssl-mode=REQUIRED",
        crate::support::db::MYSQL_ADMIN
    ))
    .await;
    assert!(message.contains("offers no TLS"), "{message}");
    assert!(message.contains("ssl-mode=REQUIRED"), "{message}");
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_client_certificate_logs_in_where_the_server_asks_for_one() {
    let s = servers();
    let params = format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", s.certs.ca.display());
    let with_cert = format!(
        "{}&ssl-cert={}&ssl-key={}",
        mysql_url(s.mysql_tls_port, "localhost", "x509user", &params),
        s.certs.client_cert.display(),
        s.certs.client_key.display()
    );
    round(&with_cert).await.unwrap();
    let message = failure(&mysql_url(
        s.mysql_tls_port,
        "localhost",
        "x509user",
        &params,
    ))
    .await;
    assert!(message.contains("Access denied"), "{message}");
}

/// Waits until `node` reports itself leader.
fn wait_leader(node: &Node) {
    let give_up = Instant::now() + Duration::from_secs(30);
    while !node.status().is_some_and(|s| s.is_leader()) {
        assert!(
            Instant::now() < give_up,
            "{} never led:\n{}",
            node.id,
            node.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The real binary over verified TLS on both backends becomes leader; on a plain
/// connection (prefer, server without TLS) it says so once, naming the host, unless the
/// host is a loopback one.
#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_leads_over_verified_tls_and_warns_once_about_plain_text() {
    let s = servers();
    let scratch = TestDb::new(Backend::Sqlite);
    for (id, url) in [
        ("pg", verify_pg(s, "localhost", "verify-full")),
        ("my", verify_mysql(s, "localhost", "VERIFY_IDENTITY")),
    ] {
        let mut node = Node::start(&scratch, &NodeSettings::default(), id, &url);
        wait_leader(&node);
        assert!(!node.log().contains("not encrypted"), "{}", node.log());
        node.signal(nix::sys::signal::Signal::SIGTERM);
        while node.try_exit().is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Plain text over loopback never leaves the host: no warning.
    let plain = pg_url(s.pg_plain_port, "localhost", "postgres", "");
    let mut node = Node::start(&scratch, &NodeSettings::default(), "plain", &plain);
    wait_leader(&node);
    // Past a few renewals and the listener's connection.
    std::thread::sleep(Duration::from_secs(2));
    assert!(!node.log().contains("not encrypted"), "{}", node.log());
    node.signal(nix::sys::signal::Signal::SIGTERM);
    while node.try_exit().is_none() {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Through an address of this host that is not a loopback one: said once.
    let Some(ip) = crate::support::proxy::non_loopback_ip() else {
        eprintln!("skipped the remote half: this host has no address but loopback");
        return;
    };
    let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], s.pg_plain_port));
    let proxy = crate::support::proxy::Proxy::start_on(ip, upstream).await;
    let remote = pg_url(proxy.addr.port(), &ip.to_string(), "postgres", "");
    let mut node = Node::start(&scratch, &NodeSettings::default(), "remote", &remote);
    wait_leader(&node);
    std::thread::sleep(Duration::from_secs(2));
    let log = node.log();
    assert_eq!(log.matches("is not encrypted").count(), 1, "{log}");
    assert!(
        log.contains(&format!("database connection to {ip}")),
        "{log}"
    );
    assert!(log.contains("sslmode=disable"), "{log}");
    node.signal(nix::sys::signal::Signal::SIGTERM);
    while node.try_exit().is_none() {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Time from a new store to its first claim, TLS against plain text, on both backends.
/// Not an assertion: `cargo test --test it tls_handshake_cost -- --ignored --nocapture`
/// prints the figures.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn tls_handshake_cost() {
    let s = servers();
    let cases = [
        (
            "postgres plain",
            pg_url(s.pg_plain_port, "127.0.0.1", "postgres", "sslmode=disable"),
        ),
        (
            "postgres verify-full",
            verify_pg(s, "localhost", "verify-full"),
        ),
        (
            "postgres require",
            pg_url(s.pg_tls_port, "127.0.0.1", "postgres", "sslmode=require"),
        ),
        (
            "mariadb plain",
            mysql_url(
                s.mysql_tls_port,
                "127.0.0.1",
                "leaderd",
                "ssl-mode=DISABLED",
            ),
        ),
        (
            "mariadb verify-identity",
            verify_mysql(s, "localhost", "VERIFY_IDENTITY"),
        ),
        (
            "mariadb required",
            mysql_url(
                s.mysql_tls_port,
                "127.0.0.1",
                "leaderd",
                "ssl-mode=REQUIRED",
            ),
        ),
    ];
    for (what, url) in &cases {
        round(url).await.unwrap(); // migrated, warmed up
        let mut times = Vec::new();
        for _ in 0..30 {
            let mut store = SqlStore::new(DatabaseUrl::parse(url).unwrap(), timeouts(), false);
            let name = crate::support::unique("cost");
            let started = Instant::now();
            store.ensure_row(&name).await.unwrap();
            let taken = store.claim(&lease(&name, "n1", TTL, 0)).await.unwrap();
            assert!(taken.is_some());
            times.push(started.elapsed());
        }
        times.sort();
        println!(
            "{what:26} first round: median {:.2} ms, p90 {:.2} ms",
            times[15].as_secs_f64() * 1e3,
            times[27].as_secs_f64() * 1e3
        );
    }
}
