//! rustls set up for a connection: the crypto provider, the trusted roots, the client
//! identity, and the verifiers behind `verify-ca` and the modes that check no chain.

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use super::{Mode, Names, POSTGRES, Roots, TlsError, TlsParams};

pub(super) fn provider() -> Arc<CryptoProvider> {
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

pub(super) fn root_certs(
    params: &TlsParams,
    names: &Names,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    match &params.roots {
        Roots::System => system_roots(names),
        Roots::File(path) => read_certs(names.root, path),
    }
}

pub(super) fn client_identity(
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
pub(super) fn postgres_client_config(params: &TlsParams) -> Result<ClientConfig, TlsError> {
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
