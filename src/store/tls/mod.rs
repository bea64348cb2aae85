//! TLS to PostgreSQL and MySQL/MariaDB, with rustls (ring provider).
//!
//! Every `ssl*` parameter of a database URL is read here, and only here: the rest of the
//! URL goes to the driver unchanged, multi-host lists and `target_session_attrs` included.
//! One [`Mode`] covers both backends; what each mode checks, with its name on each backend,
//! is the table in the README ("TLS to the database").
//!
//! - `params.rs`: the parameters, parsed into [`TlsParams`].
//! - `setup.rs`: rustls's configuration, its roots and its verifiers.
//! - `postgres.rs`, `mysql.rs`: connecting with each driver; `diagnosis.rs`: what a failure
//!   was, in words that name the parameter, file or host at fault.
//!
//! A connection that ends up unencrypted by default (`prefer`, and the server offers no
//! TLS) is logged once per host and process, as a warning that names the host (never the
//! URL, which may carry a password); an explicit `disable` draws no warning.

mod diagnosis;
mod mysql;
mod params;
mod postgres;
mod setup;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use mysql::connect_mysql;
pub use params::split;
pub use postgres::connect_postgres;

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
    /// A MySQL URL that mysql_async refuses (a bad value of one of its own switches, or a
    /// parameter it does not know).
    #[error("{0}")]
    MysqlUrl(String),
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
