//! Connecting to PostgreSQL with tokio-postgres under the URL's TLS settings, noting what
//! the TLS layer saw so that a failure can be told and a plain connection warned about.

use diesel_async::AsyncPgConnection;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::diagnosis::{classify, connect_error, tls_error, warn_unencrypted};
use super::setup::postgres_client_config;
use super::split;
use super::{Mode, POSTGRES};
use crate::store::{Backend, DatabaseUrl, StoreError, error_text, pooler};

/// What the TLS layer saw of the last host tokio-postgres tried: its name, and whether a
/// handshake started (the server answered the TLS request with yes).
#[derive(Default)]
struct Seen {
    host: Mutex<String>,
    encrypted: AtomicBool,
}

/// [`MakeRustlsConnect`], noting what it saw in a [`Seen`].
#[derive(Clone)]
struct Tracked {
    inner: MakeRustlsConnect,
    seen: Arc<Seen>,
}

struct TrackedConnect<T> {
    inner: T,
    seen: Arc<Seen>,
}

impl<S> MakeTlsConnect<S> for Tracked
where
    MakeRustlsConnect: MakeTlsConnect<S>,
{
    type Stream = <MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = TrackedConnect<<MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect>;
    type Error = <MakeRustlsConnect as MakeTlsConnect<S>>::Error;

    fn make_tls_connect(&mut self, hostname: &str) -> Result<Self::TlsConnect, Self::Error> {
        *self.seen.host.lock().unwrap_or_else(|e| e.into_inner()) = hostname.to_owned();
        self.seen.encrypted.store(false, Ordering::SeqCst);
        Ok(TrackedConnect {
            inner: self.inner.make_tls_connect(hostname)?,
            seen: Arc::clone(&self.seen),
        })
    }
}

impl<S, T: TlsConnect<S>> TlsConnect<S> for TrackedConnect<T> {
    type Stream = T::Stream;
    type Error = T::Error;
    type Future = T::Future;

    fn connect(self, stream: S) -> Self::Future {
        self.seen.encrypted.store(true, Ordering::SeqCst);
        self.inner.connect(stream)
    }
}

/// The hosts a PostgreSQL configuration names, for messages.
fn postgres_hosts(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    match hosts.is_empty() {
        true => "localhost".to_owned(),
        false => hosts.join(","),
    }
}

/// Opens a PostgreSQL connection with the URL's TLS settings. Hosts, ports and
/// `target_session_attrs` are tokio-postgres's own, so multi-host URLs work as they do
/// there.
pub async fn connect_postgres(url: &DatabaseUrl) -> Result<AsyncPgConnection, StoreError> {
    let (rest, params) = split(url.address(), Backend::Postgres).map_err(|e| tls_error(url, e))?;
    let mut config = tokio_postgres::Config::from_str(&rest).map_err(|error| {
        connect_error(
            url,
            diesel::ConnectionError::InvalidConnectionUrl(error.to_string()),
        )
    })?;
    // The credentials as fields, never through the URL text (see `DatabaseUrl`).
    if let Some(user) = url.user() {
        config.user(user);
    }
    if let Some(password) = url.password() {
        config.password(password);
    }
    // A server's refusal reads "db error" alone; its own message says what is wrong.
    let bad_connection = |error: tokio_postgres::Error| {
        let message = match error.as_db_error() {
            Some(db) => db.to_string(),
            // The root cause (refused, no such host, unreachable) is in the chain only.
            None => error_text::chain(&error),
        };
        connect_error(url, diesel::ConnectionError::BadConnection(message))
    };
    if params.mode == Mode::Disable {
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(bad_connection)?;
        // Asked for in so many words: no warning.
        return pooler::hand_over(client, connection, url.pooler())
            .await
            .map_err(|e| connect_error(url, e));
    }
    config.ssl_mode(match params.mode {
        Mode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => tokio_postgres::config::SslMode::Require,
    });
    let tls = Tracked {
        inner: MakeRustlsConnect::new(
            postgres_client_config(&params).map_err(|e| tls_error(url, e))?,
        ),
        seen: Arc::default(),
    };
    let seen = Arc::clone(&tls.seen);
    let (client, connection) = match config.connect(tls).await {
        Ok(opened) => opened,
        Err(error) => {
            let host = seen.host.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let host = if host.is_empty() {
                postgres_hosts(&config)
            } else {
                host
            };
            return Err(match classify(&error, &host, &params, &POSTGRES) {
                Some(tls) => tls_error(url, tls),
                None => bad_connection(error),
            });
        }
    };
    // An empty host name is a Unix socket, where TLS does not apply.
    let host = seen.host.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if !seen.encrypted.load(Ordering::SeqCst) && !host.is_empty() {
        warn_unencrypted(
            &host,
            "sslmode=prefer and the server offers no TLS",
            &POSTGRES,
        );
    }
    pooler::hand_over(client, connection, url.pooler())
        .await
        .map_err(|e| connect_error(url, e))
}
