//! TLS to PostgreSQL and MySQL/MariaDB, with rustls (ring provider).
//!
//! Every `ssl*` parameter of a database URL is read here, and only here ([`split`]): the
//! rest of the URL goes to the driver unchanged, multi-host lists and
//! `target_session_attrs` included. One [`Mode`] covers both backends:
//!
//! | [`Mode`]     | PostgreSQL `sslmode` | MySQL `ssl-mode`  | encrypted | chain checked | host checked |
//! |--------------|----------------------|-------------------|-----------|---------------|--------------|
//! | `Disable`    | `disable`            | `DISABLED`        | no        | –             | –            |
//! | `Prefer`     | `prefer` (default)   | `PREFERRED` (def.)| if offered| no            | no           |
//! | `Require`    | `require`            | `REQUIRED`        | yes       | no (1)        | no           |
//! | `VerifyCa`   | `verify-ca`          | `VERIFY_CA`       | yes       | yes           | no           |
//! | `VerifyFull` | `verify-full`        | `VERIFY_IDENTITY` | yes       | yes           | yes          |
//!
//! (1) As in libpq: `require` with a root certificate file given checks the chain like
//! `verify-ca`. The roots are the system's unless `sslrootcert`/`ssl-ca` names a file.
//!
//! A connection that ends up unencrypted by default (`prefer`, and the server offers no
//! TLS) is logged once per host and process, as a warning that names the host (never the
//! URL, which may carry a password); an explicit `disable` draws no warning.

use diesel_async::{AsyncMysqlConnection, AsyncPgConnection};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres_rustls::MakeRustlsConnect;
use tracing::warn;

use super::{Backend, DatabaseUrl, StoreError, pooler};

/// How much TLS a connection insists on (see the module documentation for the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Which certificates a connection trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// The operating system's trust store (rustls-native-certs).
    System,
    /// The certificates in this PEM file only.
    File(PathBuf),
}

/// The TLS settings of one database URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsParams {
    pub mode: Mode,
    pub roots: Roots,
    /// A client certificate chain and its key (PEM files), for servers that ask for one.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// A TLS setting that cannot work, or a TLS connection that failed. Messages name the
/// parameter, file or host at fault and never the URL's password.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{param}={value:?} is not valid: expected {expected}")]
    BadParam {
        param: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("{0}")]
    Conflict(&'static str),
    #[error("cannot set up TLS: {0}")]
    Setup(String),
    #[error("cannot read {param} file {path}: {source}")]
    ReadFile {
        param: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{param} file {path} holds no PEM {what}")]
    EmptyFile {
        param: &'static str,
        path: PathBuf,
        what: &'static str,
    },
    #[error("the system trust store holds no usable certificate ({0}); name a CA file with {1}")]
    NoSystemRoots(String, &'static str),
    #[error("cannot use the client certificate {cert} with key {key}: {reason}")]
    ClientCert {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error(
        "the server at {host} offers no TLS, and {setting} refuses an unencrypted connection: \
         turn TLS on in the server, or lower {setting}"
    )]
    NotOffered { host: String, setting: &'static str },
    #[error(
        "the server at {host} presented a certificate that {roots} do not vouch for ({reason}): \
         name the CA that signed it with {param}"
    )]
    UnknownCertificate {
        host: String,
        roots: String,
        reason: String,
        param: &'static str,
    },
    #[error(
        "the certificate of the server at {host} is not valid for the name {host:?}: connect \
         by a name the certificate lists{hint}"
    )]
    HostMismatch { host: String, hint: &'static str },
    #[error("the certificate of the server at {host} is not acceptable: {reason}")]
    BadCertificate { host: String, reason: String },
    #[error(
        "the server at {host} refused the TLS handshake ({alert}); if it asks for a client \
         certificate, give one with {cert_param}"
    )]
    Refused {
        host: String,
        alert: String,
        cert_param: &'static str,
    },
    #[error("TLS with the server at {host} failed: {reason}")]
    Handshake { host: String, reason: String },
}

/// The parameter names of one backend, for parsing and for messages.
struct Names {
    mode: &'static str,
    root: &'static str,
    cert: &'static str,
    key: &'static str,
    /// Added to a host-name mismatch.
    mismatch_hint: &'static str,
}

const POSTGRES: Names = Names {
    mode: "sslmode",
    root: "sslrootcert",
    cert: "sslcert",
    key: "sslkey",
    mismatch_hint: ", or use sslmode=verify-ca to check the chain only",
};

const MYSQL: Names = Names {
    mode: "ssl-mode",
    root: "ssl-ca",
    cert: "ssl-cert",
    key: "ssl-key",
    // mysql_async 0.36 cannot skip the name check with rustls 0.23 (it looks for a
    // message text rustls no longer produces), so VERIFY_CA checks the name too.
    mismatch_hint: " (with mysql_async, VERIFY_CA checks the name as well)",
};

/// Splits the TLS parameters out of `url` (a postgres:// or mysql:// URL): the URL without
/// them, for the driver, and the settings they make.
///
/// PostgreSQL: `sslmode`, `sslrootcert` (a file, or `system`), `sslcert`, `sslkey`.
/// MySQL/MariaDB: `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key` (also with `_`), and
/// mysql_async's own `require_ssl`, `verify_ca`, `verify_identity`, `built_in_roots`.
pub fn split(url: &str, backend: Backend) -> Result<(String, TlsParams), TlsError> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, query),
        None => (url, ""),
    };
    let mut kept = Vec::new();
    let mut mode = None;
    let mut root = None;
    let (mut cert, mut key) = (None, None);
    // mysql_async's own switches, in its defaults.
    let (mut require_ssl, mut verify_ca, mut verify_identity) = (None, true, true);
    let mut built_in_roots = true;
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let Some((name, value)) = url::form_urlencoded::parse(pair.as_bytes()).next() else {
            continue;
        };
        let name = match backend {
            Backend::Mysql => name.replace('_', "-"),
            _ => name.into_owned(),
        };
        let value = value.into_owned();
        let flag = |param: &'static str| {
            bool::from_str(&value).map_err(|_| TlsError::BadParam {
                param,
                value: value.clone(),
                expected: "true or false",
            })
        };
        match (backend, name.as_str()) {
            (Backend::Postgres, "sslmode") => {
                mode = Some(match value.as_str() {
                    "disable" => Mode::Disable,
                    "allow" | "prefer" => Mode::Prefer,
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    _ => {
                        return Err(TlsError::BadParam {
                            param: "sslmode",
                            value,
                            expected: "disable, prefer, require, verify-ca or verify-full",
                        });
                    }
                })
            }
            (Backend::Mysql, "ssl-mode") => {
                mode = Some(match value.to_ascii_uppercase().as_str() {
                    "DISABLED" => Mode::Disable,
                    "PREFERRED" => Mode::Prefer,
                    "REQUIRED" => Mode::Require,
                    "VERIFY-CA" | "VERIFY_CA" => Mode::VerifyCa,
                    "VERIFY-IDENTITY" | "VERIFY_IDENTITY" => Mode::VerifyFull,
                    _ => {
                        return Err(TlsError::BadParam {
                            param: "ssl-mode",
                            value,
                            expected: "DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY",
                        });
                    }
                })
            }
            (Backend::Postgres, "sslrootcert") | (Backend::Mysql, "ssl-ca") => {
                root = Some(match value.as_str() {
                    "system" if backend == Backend::Postgres => Roots::System,
                    _ => Roots::File(PathBuf::from(value)),
                })
            }
            (Backend::Postgres, "sslcert") | (Backend::Mysql, "ssl-cert") => {
                cert = Some(PathBuf::from(value))
            }
            (Backend::Postgres, "sslkey") | (Backend::Mysql, "ssl-key") => {
                key = Some(PathBuf::from(value))
            }
            (Backend::Mysql, "require-ssl") => require_ssl = Some(flag("require_ssl")?),
            (Backend::Mysql, "verify-ca") => verify_ca = flag("verify_ca")?,
            (Backend::Mysql, "verify-identity") => verify_identity = flag("verify_identity")?,
            (Backend::Mysql, "built-in-roots") => built_in_roots = flag("built_in_roots")?,
            _ => kept.push(pair),
        }
    }
    if let Some(required) = require_ssl {
        if mode.is_some() {
            return Err(TlsError::Conflict(
                "give either ssl-mode or require_ssl, not both",
            ));
        }
        // mysql_async's meaning: require_ssl verifies everything unless told otherwise.
        mode = Some(match (required, verify_ca, verify_identity) {
            (false, ..) => Mode::Disable,
            (true, false, _) => Mode::Require,
            (true, true, false) => Mode::VerifyCa,
            (true, true, true) => Mode::VerifyFull,
        });
    }
    let mode = mode.unwrap_or(Mode::Prefer);
    let roots = match root {
        Some(roots) => roots,
        None if !built_in_roots && mode >= Mode::VerifyCa => {
            return Err(TlsError::Conflict(
                "built_in_roots=false leaves nothing to trust: name the CA file with ssl-ca",
            ));
        }
        None => Roots::System,
    };
    let client = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err(TlsError::Conflict(match backend {
                Backend::Mysql => "ssl-cert and ssl-key go together: give both or neither",
                _ => "sslcert and sslkey go together: give both or neither",
            }));
        }
    };
    let url = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Ok((
        url,
        TlsParams {
            mode,
            roots,
            client,
        },
    ))
}

impl TlsParams {
    /// Whether the server's certificate chain is checked: from verify-ca up, and under
    /// require too once a root file is given (libpq's rule).
    fn checks_chain(&self) -> bool {
        self.mode >= Mode::VerifyCa
            || (self.mode == Mode::Require && matches!(self.roots, Roots::File(_)))
    }

    fn roots_text(&self, names: &Names) -> String {
        match &self.roots {
            Roots::System => "the system's trusted CAs".to_owned(),
            Roots::File(path) => format!("the CAs in {} {}", names.root, path.display()),
        }
    }
}

fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            let provider = rustls::crypto::ring::default_provider();
            // mysql_async builds its configurations with the process default.
            let _ = provider.clone().install_default();
            Arc::new(provider)
        })
        .clone()
}

/// The system's trusted CAs, read once per process.
fn system_roots(names: &Names) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    static ROOTS: OnceLock<Result<Vec<CertificateDer<'static>>, String>> = OnceLock::new();
    let roots = ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        match (found.certs.is_empty(), found.errors.first()) {
            (false, _) => Ok(found.certs),
            (true, Some(error)) => Err(error.to_string()),
            (true, None) => Err("none found".to_owned()),
        }
    });
    roots
        .clone()
        .map_err(|reason| TlsError::NoSystemRoots(reason, names.root))
}

fn read_certs(param: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read_error = |source| TlsError::ReadFile {
        param,
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_error)?;
    if certs.is_empty() {
        return Err(TlsError::EmptyFile {
            param,
            path: path.to_owned(),
            what: "certificate",
        });
    }
    Ok(certs)
}

fn root_certs(params: &TlsParams, names: &Names) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    match &params.roots {
        Roots::System => system_roots(names),
        Roots::File(path) => read_certs(names.root, path),
    }
}

fn client_identity(
    params: &TlsParams,
    names: &Names,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, TlsError> {
    let Some((cert, key)) = &params.client else {
        return Ok(None);
    };
    let chain = read_certs(names.cert, cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::ReadFile {
        param: names.key,
        path: key.clone(),
        source,
    })?;
    Ok(Some((chain, key)))
}

/// The rustls configuration for a PostgreSQL connection under `params`.
fn postgres_client_config(params: &TlsParams) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::Setup(error.to_string()))?;
    let builder = if params.checks_chain() {
        let mut store = RootCertStore::empty();
        let (added, _ignored) = store.add_parsable_certificates(root_certs(params, &POSTGRES)?);
        if added == 0 {
            return Err(TlsError::Setup(format!(
                "{} include no usable CA certificate",
                params.roots_text(&POSTGRES)
            )));
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
            .build()
            .map_err(|error| TlsError::Setup(error.to_string()))?;
        match params.mode {
            Mode::VerifyFull => builder.with_webpki_verifier(webpki),
            _ => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki))),
        }
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
    };
    match client_identity(params, &POSTGRES)? {
        Some((chain, key)) => {
            let (cert, key_path) = params.client.clone().expect("identity implies paths");
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|error| TlsError::ClientCert {
                    cert,
                    key: key_path,
                    reason: error.to_string(),
                })
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// verify-ca: the chain must lead to a trusted CA; the name in the certificate is not
/// checked. rustls checks the chain before the name, so a name error means the chain
/// passed.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// prefer and require (libpq's meaning): encrypted, but any certificate is taken. The
/// handshake's signatures are still checked, so the session key belongs to whoever holds
/// the certificate's key.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

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

/// Logs, once per host and process, that the connection to `host` is not encrypted.
fn warn_unencrypted(host: &str, why: &str, names: &Names) {
    static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned.get_or_insert_default().insert(host.to_owned()) {
        warn!(
            host,
            "the database connection to {host} is not encrypted ({why}); set {}={} to refuse \
             unencrypted connections",
            names.mode,
            match names.mode {
                "sslmode" => "verify-full",
                _ => "VERIFY_IDENTITY",
            }
        );
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

fn connect_error(url: &DatabaseUrl, cause: diesel::ConnectionError) -> StoreError {
    StoreError::Connect {
        url: url.redacted(),
        cause,
    }
}

fn tls_error(url: &DatabaseUrl, cause: TlsError) -> StoreError {
    StoreError::Tls {
        url: url.redacted(),
        cause: Box::new(cause),
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
            None => super::error_text::chain(&error),
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

/// Tells the TLS failures apart, from the error chain of either driver; `None` for an
/// error that is not about TLS.
fn classify(
    error: &(dyn std::error::Error + 'static),
    host: &str,
    params: &TlsParams,
    names: &'static Names,
) -> Option<TlsError> {
    let host = host.to_owned();
    let mut next = Some(error);
    let mut innermost = None;
    while let Some(error) = next {
        let rustls = error.downcast_ref::<rustls::Error>().or_else(|| {
            error
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls) = rustls {
            return Some(from_rustls(rustls, host, params, names));
        }
        if let Some(mysql_async::Error::Driver(
            mysql_async::DriverError::NoClientSslFlagFromServer,
        )) = error.downcast_ref::<mysql_async::Error>()
        {
            return Some(not_offered(host, params, names));
        }
        innermost = Some(error);
        next = error.source();
    }
    let innermost = innermost?.to_string();
    if innermost.contains("server does not support TLS") {
        return Some(not_offered(host, params, names));
    }
    let tls_kind = error
        .to_string()
        .starts_with("error performing TLS handshake");
    tls_kind.then_some(TlsError::Handshake {
        host,
        reason: innermost,
    })
}

fn not_offered(host: String, params: &TlsParams, names: &Names) -> TlsError {
    let setting = match (names.mode, params.mode) {
        ("sslmode", Mode::Require) => "sslmode=require",
        ("sslmode", Mode::VerifyCa) => "sslmode=verify-ca",
        ("sslmode", _) => "sslmode=verify-full",
        (_, Mode::Require) => "ssl-mode=REQUIRED",
        (_, Mode::VerifyCa) => "ssl-mode=VERIFY_CA",
        _ => "ssl-mode=VERIFY_IDENTITY",
    };
    TlsError::NotOffered { host, setting }
}

fn from_rustls(
    error: &rustls::Error,
    host: String,
    params: &TlsParams,
    names: &'static Names,
) -> TlsError {
    match error {
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => TlsError::HostMismatch {
            host,
            hint: names.mismatch_hint,
        },
        rustls::Error::InvalidCertificate(
            reason @ (CertificateError::UnknownIssuer
            | CertificateError::BadSignature
            | CertificateError::UnknownRevocationStatus),
        ) => TlsError::UnknownCertificate {
            host,
            roots: params.roots_text(names),
            reason: format!("{reason:?}").to_lowercase(),
            param: names.root,
        },
        rustls::Error::InvalidCertificate(reason) => TlsError::BadCertificate {
            host,
            reason: reason.to_string(),
        },
        rustls::Error::AlertReceived(alert) => TlsError::Refused {
            host,
            alert: format!("{alert:?}"),
            cert_param: names.cert,
        },
        other => TlsError::Handshake {
            host,
            reason: other.to_string(),
        },
    }
}

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
            diesel::ConnectionError::BadConnection(super::error_text::chain(error)),
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
