use super::*;
use crate::store::Backend;
use std::str::FromStr;

#[test]
fn postgres_parameters_are_taken_out_of_the_url() {
    let (rest, params) = split(
        "postgres://u:pw@h1:5432,h2:5433/db?sslmode=verify-full&target_session_attrs=read-write&sslrootcert=%2Fetc%2Fca.pem",
        Backend::Postgres,
    )
    .unwrap();
    assert_eq!(
        rest,
        "postgres://u:pw@h1:5432,h2:5433/db?target_session_attrs=read-write"
    );
    assert_eq!(params.mode, Mode::VerifyFull);
    assert_eq!(params.roots, Roots::File("/etc/ca.pem".into()));
    let (_, default) = split("postgres://h/db", Backend::Postgres).unwrap();
    assert_eq!(default.mode, Mode::Prefer);
    assert_eq!(default.roots, Roots::System);
    let error = split("postgres://h/db?sslmode=verify", Backend::Postgres).unwrap_err();
    assert!(error.to_string().contains("sslmode=\"verify\""), "{error}");
    assert!(split("postgres://h/db?sslcert=a", Backend::Postgres).is_err());
}

/// What is left after the TLS parameters is tokio-postgres's to read: several hosts
/// and target_session_attrs included.
#[test]
fn a_multi_host_url_keeps_its_hosts_and_session_attributes() {
    let (rest, _) = split(
        "postgres://u@h1:5432,h2:5433/db?sslmode=require&target_session_attrs=read-write",
        Backend::Postgres,
    )
    .unwrap();
    let config = tokio_postgres::Config::from_str(&rest).unwrap();
    assert_eq!(config.get_hosts().len(), 2);
    assert_eq!(config.get_ports(), &[5432, 5433]);
    assert_eq!(
        config.get_target_session_attrs(),
        tokio_postgres::config::TargetSessionAttrs::ReadWrite
    );
}

#[test]
fn require_with_a_root_file_checks_the_chain_as_libpq_does() {
    let (_, plain) = split("postgres://h/db?sslmode=require", Backend::Postgres).unwrap();
    assert!(!plain.checks_chain());
    let (_, rooted) = split(
        "postgres://h/db?sslmode=require&sslrootcert=ca.pem",
        Backend::Postgres,
    )
    .unwrap();
    assert!(rooted.checks_chain());
}

#[test]
fn mysql_parameters_in_both_spellings() {
    let (rest, params) = split(
        "mysql://root@h:3306/db?ssl-mode=VERIFY_CA&ssl_ca=ca.pem&prefer_socket=false",
        Backend::Mysql,
    )
    .unwrap();
    assert_eq!(rest, "mysql://root@h:3306/db?prefer_socket=false");
    assert_eq!(params.mode, Mode::VerifyCa);
    let (_, native) = split(
        "mysql://h/db?require_ssl=true&verify_identity=false",
        Backend::Mysql,
    )
    .unwrap();
    assert_eq!(native.mode, Mode::VerifyCa);
    assert!(
        split(
            "mysql://h/db?require_ssl=true&ssl-mode=REQUIRED",
            Backend::Mysql
        )
        .is_err()
    );
    let (_, default) = split("mysql://h/db", Backend::Mysql).unwrap();
    assert_eq!(default.mode, Mode::Prefer);
}

/// mysql_async's own switches are read by mysql_async (`Opts::from_url`), with its
/// meaning: leaderd takes the mode from what it read, and its refusals of a bad value.
#[test]
fn mysql_async_switches_are_read_by_the_driver() {
    let mode = |query: &str| split(&format!("mysql://h/db?{query}"), Backend::Mysql);
    let (rest, required) = mode("require_ssl=true&verify_ca=false").unwrap();
    assert_eq!(rest, "mysql://h/db?require_ssl=true&verify_ca=false");
    assert_eq!(required.mode, Mode::Require);
    assert_eq!(mode("require_ssl=true").unwrap().1.mode, Mode::VerifyFull);
    assert_eq!(mode("require_ssl=false").unwrap().1.mode, Mode::Prefer);
    let error = mode("require_ssl=maybe").unwrap_err().to_string();
    assert!(
        error.contains("require_ssl") && error.contains("maybe"),
        "{error}"
    );
    assert!(
        mode("require_ssl=true&built_in_roots=false")
            .unwrap_err()
            .to_string()
            .contains("ssl-ca")
    );
    let (_, rooted) = mode("require_ssl=true&built_in_roots=false&ssl-ca=ca.pem").unwrap();
    assert_eq!(rooted.roots, Roots::File("ca.pem".into()));
}
