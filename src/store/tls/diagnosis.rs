//! What a failed connection was, in words that name the parameter, file or host at
//! fault, and the warning about an unencrypted one.

use rustls::CertificateError;
use std::collections::HashSet;
use std::sync::Mutex;
use tracing::warn;

use super::{Mode, Names, TlsError, TlsParams};
use crate::store::{DatabaseUrl, StoreError};

/// Logs, once per host and process, that the connection to `host` is not encrypted.
pub(super) fn warn_unencrypted(host: &str, why: &str, names: &Names) {
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
