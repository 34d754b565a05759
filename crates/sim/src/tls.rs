//! Optional TLS for the simulator (canon-wire.md §11.1 S3): builds the rustls server
//! configuration (ring provider) from a [`TlsIdentity`] and exposes the committed test CA of
//! `tls/` beside this crate's manifest (test-only keys, see its README) so tests can trust it.
//!
//! The listener stays on loopback; TLS only wraps each accepted connection. A handshake that does
//! not finish within [`HANDSHAKE_TIMEOUT`] is dropped, so a stalled client holds no task.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsIdentity;
use crate::error::SimError;

/// The test CA (PEM) that signed [`TEST_SERVER_CERT_PEM`]. Test-only: trust it in tests, never
/// in a product configuration.
pub const TEST_CA_PEM: &[u8] = include_bytes!("../tls/ca.pem");

/// The committed test server certificate (PEM; `DNS:localhost`, `IP:127.0.0.1`).
pub const TEST_SERVER_CERT_PEM: &[u8] = include_bytes!("../tls/server.pem");

/// The committed test server key (PEM). Public and test-only.
pub const TEST_SERVER_KEY_PEM: &[u8] = include_bytes!("../tls/server.key");

/// How long a client may take to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds the acceptor for `identity` (reads the files of [`TlsIdentity::Files`]).
pub fn acceptor(identity: &TlsIdentity) -> Result<TlsAcceptor, SimError> {
    let (cert_pem, key_pem) = match identity {
        TlsIdentity::TestFixture => (TEST_SERVER_CERT_PEM.to_vec(), TEST_SERVER_KEY_PEM.to_vec()),
        TlsIdentity::Files { cert, key } => (read(cert)?, read(key)?),
    };
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SimError::Tls(format!("invalid certificate PEM: {e}")))?;
    if certs.is_empty() {
        return Err(SimError::Tls(
            "no certificate in the certificate PEM".to_owned(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| SimError::Tls(format!("invalid private key PEM: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SimError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| SimError::Tls(format!("certificate and key rejected: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, SimError> {
    std::fs::read(path).map_err(|source| SimError::Io {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_fixture_builds_an_acceptor() {
        assert!(acceptor(&TlsIdentity::TestFixture).is_ok());
    }

    #[test]
    fn a_missing_file_is_an_io_error() {
        let identity = TlsIdentity::Files {
            cert: "/nonexistent/canon-sim/cert.pem".into(),
            key: "/nonexistent/canon-sim/key.pem".into(),
        };
        assert!(matches!(acceptor(&identity), Err(SimError::Io { .. })));
    }

    #[test]
    fn garbage_pem_is_a_tls_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, "not a certificate").expect("write cert");
        std::fs::write(&key, "not a key").expect("write key");
        let identity = TlsIdentity::Files { cert, key };
        assert!(matches!(acceptor(&identity), Err(SimError::Tls(_))));
    }

    #[test]
    fn a_key_that_does_not_match_the_certificate_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        // The CA certificate with the server's key: a mismatched pair.
        std::fs::write(&cert, TEST_CA_PEM).expect("write cert");
        std::fs::write(&key, TEST_SERVER_KEY_PEM).expect("write key");
        let identity = TlsIdentity::Files { cert, key };
        assert!(matches!(acceptor(&identity), Err(SimError::Tls(_))));
    }
}
