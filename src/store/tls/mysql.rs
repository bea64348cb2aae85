//! Connecting to MySQL/MariaDB with mysql_async under the URL's TLS settings.

use diesel_async::AsyncMysqlConnection;
use rustls::pki_types::PrivateKeyDer;
use std::collections::HashSet;
use std::sync::Mutex;

use super::diagnosis::{classify, connect_error, tls_error, warn_unencrypted};
use super::setup::{client_identity, provider, root_certs};
use super::split;
use super::{MYSQL, Mode, TlsError, TlsParams};
use crate::store::{Backend, DatabaseUrl, StoreError, error_text};

/// Hosts known to offer no TLS under `PREFERRED`: later connections skip the attempt.
static MYSQL_PLAIN: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Opens a MySQL/MariaDB connection with the URL's TLS settings, set up as diesel-async
/// sets up its own (CLIENT_FOUND_ROWS, no driver statement cache).
pub async fn connect_mysql(url: &DatabaseUrl) -> Result<AsyncMysqlConnection, StoreError> {
    let (rest, params) = split(url.address(), Backend::Mysql).map_err(|e| tls_error(url, e))?;
    let opts = mysql_async::Opts::from_url(&rest).map_err(|error| {
        connect_error(
            url,
            diesel::ConnectionError::InvalidConnectionUrl(error.to_string()),
        )
    })?;
    let host = opts.ip_or_hostname().to_owned();
    let local = opts.socket().is_some();
    // The credentials as fields, never through the URL text (see `DatabaseUrl`).
    let builder = mysql_async::OptsBuilder::from_opts(opts)
        .user(url.user())
        .pass(url.password())
        .stmt_cache_size(0)
        .client_found_rows(true);
    let known_plain = MYSQL_PLAIN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_default()
        .contains(&host);
    let ssl = match params.mode {
        Mode::Disable => None,
        Mode::Prefer if known_plain => None,
        _ => Some(mysql_ssl_opts(&params).map_err(|e| tls_error(url, e))?),
    };
    let tried_tls = ssl.is_some();
    let (conn, encrypted) = match mysql_async::Conn::new(builder.clone().ssl_opts(ssl)).await {
        Ok(conn) => (conn, tried_tls),
        Err(mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer))
            if params.mode == Mode::Prefer =>
        {
            MYSQL_PLAIN
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_default()
                .insert(host.clone());
            let conn = mysql_async::Conn::new(builder.ssl_opts(None))
                .await
                .map_err(|error| mysql_failure(url, &error, &host, &params))?;
            (conn, false)
        }
        Err(error) => return Err(mysql_failure(url, &error, &host, &params)),
    };
    // An explicit ssl-mode=DISABLED asked for it in so many words: no warning.
    if !encrypted && !local && params.mode != Mode::Disable {
        warn_unencrypted(
            &host,
            "ssl-mode=PREFERRED and the server offers no TLS",
            &MYSQL,
        );
    }
    AsyncMysqlConnection::try_from(conn)
        .await
        .map_err(|e| connect_error(url, e))
}

fn mysql_failure(
    url: &DatabaseUrl,
    error: &mysql_async::Error,
    host: &str,
    params: &TlsParams,
) -> StoreError {
    match classify(error, host, params, &MYSQL) {
        Some(tls) => tls_error(url, tls),
        None => connect_error(
            url,
            diesel::ConnectionError::BadConnection(error_text::chain(error)),
        ),
    }
}

fn mysql_ssl_opts(params: &TlsParams) -> Result<mysql_async::SslOpts, TlsError> {
    provider();
    let check_chain = params.checks_chain();
    let mut opts = mysql_async::SslOpts::default()
        // Without a chain to check, the driver still wants roots to build its verifier.
        .with_disable_built_in_roots(check_chain)
        .with_danger_accept_invalid_certs(!check_chain)
        .with_danger_skip_domain_validation(params.mode != Mode::VerifyFull);
    if check_chain {
        let roots = root_certs(params, &MYSQL)?
            .into_iter()
            .map(|der| der.to_vec().into())
            .collect();
        opts = opts.with_root_certs(roots);
    }
    if let Some((cert, key)) = &params.client {
        // Read here first, so that a bad file is named in the message. mysql_async reads
        // RSA keys in PKCS#1 form only.
        if let Some((_, parsed)) = client_identity(params, &MYSQL)? {
            if !matches!(parsed, PrivateKeyDer::Pkcs1(_)) {
                return Err(TlsError::ClientCert {
                    cert: cert.clone(),
                    key: key.clone(),
                    reason: format!(
                        "the MySQL driver takes only RSA keys in PKCS#1 form (BEGIN RSA \
                         PRIVATE KEY); convert an RSA key with `openssl rsa -in {} \
                         -traditional -out NEW`",
                        key.display()
                    ),
                });
            }
        }
        opts = opts.with_client_identity(Some(mysql_async::ClientIdentity::new(
            cert.clone().into(),
            key.clone().into(),
        )));
    }
    Ok(opts)
}
