//! What a PostgreSQL or MySQL/MariaDB URL is checked for when it is read, by the driver's
//! own parser, so that a mistake stops `check-config` and `run` (exit 78) instead of
//! failing every connection: an unknown parameter (named, with the one meant) and a
//! missing database name. A server's answer (an unknown database, a refused login) is the
//! server's state, which can change: that is retried as an outage.

use std::str::FromStr;

use crate::store::backend::Backend;

/// tokio-postgres 0.7's URL parameters, and the TLS ones leaderd reads itself.
const POSTGRES_PARAMETERS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "sslnegotiation",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// mysql_async 0.36's URL parameters, and the TLS ones leaderd reads itself (also written
/// with `_`).
const MYSQL_PARAMETERS: &[&str] = &[
    "ssl-mode",
    "ssl-ca",
    "ssl-cert",
    "ssl-key",
    "require_ssl",
    "verify_ca",
    "verify_identity",
    "built_in_roots",
    "socket",
    "prefer_socket",
    "compression",
    "tcp_keepalive",
    "tcp_nodelay",
    "max_allowed_packet",
    "wait_timeout",
    "enable_cleartext_plugin",
    "reset_connection",
    "stmt_cache_size",
    "secure_auth",
    "client_found_rows",
    "pool_min",
    "pool_max",
    "inactive_connection_ttl",
    "ttl_check_interval",
    "conn_ttl",
    "abs_conn_ttl",
    "abs_conn_ttl_jitter",
];

/// The parameter names of `url`'s query, percent-decoded.
fn parameter_names(url: &str) -> Vec<String> {
    let query = url.split_once('?').map_or("", |(_, query)| query);
    let query = query.split_once('#').map_or(query, |(query, _)| query);
    url::form_urlencoded::parse(query.as_bytes())
        .map(|(name, _)| name.into_owned())
        .collect()
}

/// The first parameter of `url` that `backend` does not take, said with the one meant.
fn unknown_parameter(url: &str, backend: Backend) -> Option<String> {
    let (known, name_of_backend) = match backend {
        Backend::Mysql => (MYSQL_PARAMETERS, "MySQL/MariaDB"),
        _ => (POSTGRES_PARAMETERS, "PostgreSQL"),
    };
    let spelt = |name: &str| match backend {
        // leaderd's own TLS parameters are also taken with `_`.
        Backend::Mysql if name.starts_with("ssl_") => name.replace('_', "-"),
        _ => name.to_owned(),
    };
    let name = parameter_names(url)
        .into_iter()
        .find(|name| !known.contains(&spelt(name).as_str()))?;
    let meant = known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&name.to_lowercase(), k), k))
        .filter(|(distance, k)| *distance <= (k.len() / 4).clamp(1, 3))
        .min_by_key(|(distance, _)| *distance);
    Some(match meant {
        Some((_, meant)) => format!("unknown parameter {name:?}; did you mean {meant}?"),
        None => format!(
            "unknown parameter {name:?}; {name_of_backend} URLs take {}",
            known.join(", ")
        ),
    })
}

const NO_DATABASE: &str = "names no database: give it as the path";

/// A PostgreSQL URL (its TLS parameters taken out: `rest`) as tokio-postgres reads it,
/// libpq's multi-host form included; `url` is the whole, for the parameter names.
pub(super) fn postgres(url: &str, rest: &str) -> Result<(), String> {
    let config = tokio_postgres::Config::from_str(rest).map_err(|error| {
        unknown_parameter(url, Backend::Postgres)
            .unwrap_or_else(|| format!("not a valid URL: {error}"))
    })?;
    match config.get_dbname() {
        Some(name) if !name.is_empty() => Ok(()),
        _ => Err(format!(
            "{NO_DATABASE}, postgres://HOST/DATABASE (libpq would take the user name; \
             leaderd wants it said)"
        )),
    }
}

/// A MySQL/MariaDB URL before leaderd takes its TLS parameters out: the parameter names.
pub(super) fn mysql_parameters(url: &str) -> Result<(), String> {
    match unknown_parameter(url, Backend::Mysql) {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// A MySQL/MariaDB URL (its TLS parameters taken out: `rest`) as mysql_async reads it.
pub(super) fn mysql(rest: &str) -> Result<(), String> {
    let opts =
        mysql_async::Opts::from_url(rest).map_err(|error| format!("not a valid URL: {error}"))?;
    match opts.db_name() {
        Some(_) => Ok(()),
        // The server would answer "No database selected" to every statement.
        None => Err(format!("{NO_DATABASE}, mysql://HOST/DATABASE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_parameters_draw_the_one_meant() {
        let url = "postgres://db/app?sslmod=require";
        let r = postgres(url, url).unwrap_err();
        assert_eq!(r, "unknown parameter \"sslmod\"; did you mean sslmode?");
        // MySQL's spelling on a PostgreSQL URL.
        let url = "postgres://db/app?ssl-mode=REQUIRED";
        let r = postgres(url, url).unwrap_err();
        assert!(r.contains("\"ssl-mode\"; did you mean sslmode?"), "{r}");
        let r = mysql_parameters("mysql://db/app?sslmode=REQUIRED").unwrap_err();
        assert!(r.contains("\"sslmode\"; did you mean ssl-mode?"), "{r}");
        let url = "postgres://h1,h2/app?flavour=x";
        let r = postgres(url, url).unwrap_err();
        assert!(r.contains("PostgreSQL URLs take user, password"), "{r}");
        assert!(mysql_parameters("mysql://db/app?ssl_mode=DISABLED&tcp_nodelay=true").is_ok());
        let url = "postgres://db/app?application_name=x&connect_timeout=3";
        assert!(postgres(url, url).is_ok());
    }

    #[test]
    fn a_database_name_is_needed() {
        for url in [
            "postgres://u@db",
            "postgres://db/",
            "postgres://h1,h2/?target_session_attrs=read-write",
        ] {
            assert!(
                postgres(url, url).unwrap_err().starts_with(NO_DATABASE),
                "{url}"
            );
        }
        for url in ["mysql://root@db:3306", "mysql://db/"] {
            assert!(mysql(url).unwrap_err().starts_with(NO_DATABASE), "{url}");
        }
        let url = "postgres:///app?host=/run/postgresql";
        assert!(postgres(url, url).is_ok());
        let url = "postgres://db/?dbname=app";
        assert!(postgres(url, url).is_ok());
    }
}
