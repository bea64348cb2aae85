//! The TLS parameters of a database URL, parsed into [`TlsParams`], and the rest of the
//! URL for the driver.

use std::path::PathBuf;
use std::str::FromStr;

use super::{Mode, Names, Roots, TlsError, TlsParams};
use crate::store::Backend;

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
