//! The TLS parameters of a database URL, parsed into [`TlsParams`], and the rest of the
//! URL for the driver.

use std::path::PathBuf;

use super::{Mode, Names, Roots, TlsError, TlsParams};
use crate::store::backend::Backend;

/// Splits the TLS parameters out of `url` (a postgres:// or mysql:// URL): the URL without
/// them, for the driver, and the settings they make.
///
/// PostgreSQL: `sslmode`, `sslrootcert` (a file, or `system`), `sslcert`, `sslkey`.
/// MySQL/MariaDB: `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key` (also with `_`). mysql_async's
/// own switches (`require_ssl`, `verify_ca`, `verify_identity`, `built_in_roots`) stay in
/// the URL: `mysql_async::Opts::from_url` reads them (and refuses a bad value or an unknown
/// parameter), and the mode is taken from what it read (see [`mysql_native_mode`]).
pub fn split(url: &str, backend: Backend) -> Result<(String, TlsParams), TlsError> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, query),
        None => (url, ""),
    };
    let mut kept = Vec::new();
    let mut mode = None;
    let mut root = None;
    let (mut cert, mut key) = (None, None);
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let Some((name, value)) = url::form_urlencoded::parse(pair.as_bytes()).next() else {
            continue;
        };
        let name = match backend {
            Backend::Mysql => name.replace('_', "-"),
            _ => name.into_owned(),
        };
        let value = value.into_owned();
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
            _ => kept.push(pair),
        }
    }
    let url = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    let native = match backend {
        Backend::Mysql => mysql_native_mode(&url)?,
        _ => None,
    };
    let (mode, built_in_roots) = match (mode, native) {
        (Some(_), Some(_)) => {
            return Err(TlsError::Conflict(
                "give either ssl-mode or require_ssl, not both",
            ));
        }
        (Some(mode), None) => (mode, true),
        (None, Some((mode, built_in_roots))) => (mode, built_in_roots),
        (None, None) => (Mode::Prefer, true),
    };
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
    pub(super) fn checks_chain(&self) -> bool {
        self.mode >= Mode::VerifyCa
            || (self.mode == Mode::Require && matches!(self.roots, Roots::File(_)))
    }

    pub(super) fn roots_text(&self, names: &Names) -> String {
        match &self.roots {
            Roots::System => "the system's trusted CAs".to_owned(),
            Roots::File(path) => format!("the CAs in {} {}", names.root, path.display()),
        }
    }
}

/// The mode mysql_async's own switches ask for, as `Opts::from_url` read them from `url`
/// (the URL without the `ssl-*` parameters), and whether they let it trust the system's
/// CAs; `None` without `require_ssl=true`. With mysql_async's meaning: `require_ssl=true`
/// alone verifies everything, `verify_ca=false` lowers it to REQUIRED, and
/// `verify_identity=false` to VERIFY_CA. mysql_async reads the other switches only with
/// `require_ssl=true`, and cannot tell `require_ssl=false` from its absence: both leave
/// leaderd's default, PREFERRED (`ssl-mode=DISABLED` turns TLS off).
fn mysql_native_mode(url: &str) -> Result<Option<(Mode, bool)>, TlsError> {
    let opts =
        mysql_async::Opts::from_url(url).map_err(|error| TlsError::MysqlUrl(error.to_string()))?;
    Ok(opts.ssl_opts().map(|ssl| {
        let mode = match (ssl.accept_invalid_certs(), ssl.skip_domain_validation()) {
            (true, _) => Mode::Require,
            (false, true) => Mode::VerifyCa,
            (false, false) => Mode::VerifyFull,
        };
        (mode, !ssl.disable_built_in_roots())
    }))
}
