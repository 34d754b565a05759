//! The TLS path (hyper-rustls + rustls) against a loopback TLS server that
//! uses the committed test CA in `crates/sim/tls/` (test-only keys).

use std::sync::Arc;

use bytes::Bytes;
use canon_transport::client::{CanonClient, ClientConfig};
use canon_wire::{ApiKey, FailureKind};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

const CA: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../sim/tls/ca.pem"));
const SERVER_CERT: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../sim/tls/server.pem"
));
const SERVER_KEY: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../sim/tls/server.key"
));

/// Starts an HTTPS server on 127.0.0.1:0 answering `{"agentId":"tls-agent"}`.
async fn tls_server() -> (String, tokio::task::JoinHandle<()>) {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(SERVER_CERT)
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = service_fn(|_req: hyper::Request<hyper::body::Incoming>| async {
                    Ok::<_, std::io::Error>(hyper::Response::new(Full::new(Bytes::from_static(
                        br#"{"agentId":"tls-agent"}"#,
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (url, task)
}

#[tokio::test]
async fn https_works_when_the_test_ca_is_trusted() {
    let (url, server) = tls_server().await;
    let mut config = ClientConfig::new(url.clone(), url, ApiKey::new("sk-tls"));
    assert_eq!(config.trust_test_ca_pem(CA).unwrap(), 1);
    let me = CanonClient::new(config).unwrap().get_me().await.unwrap();
    assert_eq!(me.agent_id.as_deref(), Some("tls-agent"));
    server.abort();
}

#[tokio::test]
async fn https_to_an_untrusted_certificate_fails_to_connect() {
    let (url, server) = tls_server().await;
    let client =
        CanonClient::new(ClientConfig::new(url.clone(), url, ApiKey::new("sk-tls"))).unwrap();
    let err = client.get_me().await.unwrap_err();
    assert_eq!(err.kind(), FailureKind::Connect, "{err:?}");
    server.abort();
}

#[test]
fn invalid_test_ca_pem_is_refused() {
    let mut config = ClientConfig::new("https://a", "https://a", ApiKey::new("k"));
    assert_eq!(config.trust_test_ca_pem(b"no pem here").unwrap(), 0);
    assert!(config
        .trust_test_ca_pem(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n")
        .is_err());
}
