//! What a failed connection was, in words that name the parameter, file or host at
//! fault, and the warning about an unencrypted one.

use rustls::CertificateError;
use std::collections::HashSet;
use std::sync::Mutex;
use tracing::warn;

use super::{Mode, Names, TlsError, TlsParams};
use crate::store::{DatabaseUrl, StoreError};

/// Logs, once per host and process, that the connection to `host` is not encrypted;
/// not for this host's own loopback (127.0.0.0/8, ::1, localhost), whose traffic never
/// leaves it.
pub(super) fn warn_unencrypted(host: &str, why: &str, names: &Names) {
    static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    if is_loopback(host) {
        return;
    }
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned.get_or_insert_default().insert(host.to_owned()) {
        let (require, plain) = match names.mode {
            "sslmode" => ("verify-full", "disable"),
            _ => ("VERIFY_IDENTITY", "DISABLED"),
        };
        warn!(
            host,
            "the database connection to {host} is not encrypted ({why}); if the server offers \
             TLS, set {mode}={require} to refuse unencrypted connections; if it does not and \
             plain text is meant, {mode}={plain} says so and silences this warning",
            mode = names.mode,
        );
    }
}

/// `localhost`, or an address of the loopback network, bracketed or not.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

pub(super) fn connect_error(url: &DatabaseUrl, cause: diesel::ConnectionError) -> StoreError {
    StoreError::Connect {
        url: url.redacted(),
        cause,
    }
}

pub(super) fn tls_error(url: &DatabaseUrl, cause: TlsError) -> StoreError {
    StoreError::Tls {
        url: url.redacted(),
        cause: Box::new(cause),
    }
}

/// Tells the TLS failures apart, from the error chain of either driver; `None` for an
/// error that is not about TLS.
pub(super) fn classify(
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

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_hosts_are_localhost_and_the_loopback_networks() {
        for host in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "127.3.2.1",
            "::1",
            "[::1]",
        ] {
            assert!(super::is_loopback(host), "{host}");
        }
        for host in ["192.0.2.2", "db.internal", "::2", "localhost.example"] {
            assert!(!super::is_loopback(host), "{host}");
        }
    }
}
