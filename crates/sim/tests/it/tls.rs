//! The optional TLS mode (canon-wire.md §11.1 S3): REST and SSE over rustls with the committed
//! test CA of `crates/sim/tls/`; a client that trusts the CA gets answers, one that does not fails
//! the handshake. The client is tokio-rustls over raw TCP, so the tests see the real bytes.

use std::process::{Command, Stdio};
use std::sync::Arc;

use canon_sim::control::Injection;
use canon_sim::{SimHandle, TlsIdentity};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::support::{sim_with, WAIT};

const CA: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tls/ca.pem"));

async fn tls_sim() -> SimHandle {
    sim_with(|c| c.tls = Some(TlsIdentity::TestFixture)).await
}

/// A rustls client that trusts `ca_pem` only (empty = trusts nothing).
fn connector(ca_pem: &[u8]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.expect("valid CA PEM")).expect("CA accepted");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

async fn connect(
    sim: &SimHandle,
    ca_pem: &[u8],
    name: &str,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(sim.addr()).await?;
    let name = ServerName::try_from(name.to_owned()).expect("valid server name");
    tokio::time::timeout(WAIT, connector(ca_pem).connect(name, tcp))
        .await
        .expect("handshake in time")
}

fn request(path: &str, key: &str, accept: &str) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {key}\r\n\
         accept: {accept}\r\nconnection: close\r\n\r\n"
    )
    .into_bytes()
}

/// Status line and body of one `connection: close` GET (bodies here are not chunked).
async fn get(sim: &SimHandle, name: &str, path: &str) -> (String, Value) {
    let mut tls = connect(sim, CA, name).await.expect("TLS handshake");
    tls.write_all(&request(path, &sim.api_key(), "application/json"))
        .await
        .expect("write");
    let mut data = Vec::new();
    tokio::time::timeout(WAIT, tls.read_to_end(&mut data))
        .await
        .expect("response in time")
        .expect("read");
    let text = String::from_utf8_lossy(&data).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("response head");
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn tls_sim_answers_healthz_over_https_to_a_client_trusting_the_test_ca() {
    let sim = tls_sim().await;
    assert!(sim.base_url().starts_with("https://127.0.0.1:"));
    assert_eq!(sim.stream_url(), sim.base_url());
    // The server certificate covers both the loopback IP and `localhost`.
    for name in ["127.0.0.1", "localhost"] {
        let (status, body) = get(&sim, name, "/healthz/").await;
        assert_eq!(status, "HTTP/1.1 200 OK", "{name}");
        assert_eq!(body["environmentId"], "canon-dev-v1", "{name}");
    }
    let (status, me) = get(&sim, "127.0.0.1", "/agents/me").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(me["agentId"], "a-hermes");
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_test_ca_fails_the_handshake() {
    let sim = tls_sim().await;
    let err = connect(&sim, b"", "127.0.0.1")
        .await
        .expect_err("an untrusted certificate must fail the handshake");
    let rustls_error = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    assert!(
        matches!(rustls_error, Some(rustls::Error::InvalidCertificate(_))),
        "{err:?}"
    );
    // The failed handshake ends only that connection: the next trusted client is served.
    let (status, _) = get(&sim, "127.0.0.1", "/healthz/").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn plain_http_to_the_tls_port_gets_no_http_answer() {
    let sim = tls_sim().await;
    let got = super::support::raw(sim.addr(), "GET", "/healthz/", &[], None).await;
    assert!(
        got.as_ref().map_or(true, |r| r.status != 200),
        "plain HTTP must not be served on the TLS port: {got:?}"
    );
}

#[tokio::test]
async fn sse_streams_over_tls() {
    let sim = tls_sim().await;
    let mut tls = connect(&sim, CA, "127.0.0.1").await.expect("TLS handshake");
    let req = request(
        "/agents/stream?events=messages",
        &sim.api_key(),
        "text/event-stream",
    );
    tls.write_all(&req).await.expect("write");
    sim.wait_for("stream open", WAIT, |s| !s.open_streams.is_empty())
        .await
        .expect("stream opens");
    sim.inject_message(&Injection {
        text: Some("hello over tls".into()),
        ..Default::default()
    })
    .expect("inject");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("hello over tls") {
        let n = tokio::time::timeout(WAIT, tls.read(&mut buf))
            .await
            .expect("stream data in time")
            .expect("read");
        assert!(
            n > 0,
            "stream closed early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&seen);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text
        .to_ascii_lowercase()
        .contains("content-type: text/event-stream"));
    assert!(text.contains("event: message.created"), "{text}");
}

#[tokio::test]
async fn the_committed_files_load_through_tls_cert_and_key_paths() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tls");
    let sim = sim_with(|c| {
        c.tls = Some(TlsIdentity::Files {
            cert: format!("{dir}/server.pem").into(),
            key: format!("{dir}/server.key").into(),
        });
    })
    .await;
    let (status, _) = get(&sim, "localhost", "/healthz/").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn a_missing_tls_file_is_an_error_not_a_panic() {
    let mut config = canon_sim::SimConfig::for_tests();
    config.tls = Some(TlsIdentity::Files {
        cert: "/nonexistent/canon-sim/server.pem".into(),
        key: "/nonexistent/canon-sim/server.key".into(),
    });
    let err = canon_sim::Sim::start(config).await.expect_err("refused");
    assert!(matches!(err, canon_sim::SimError::Io { .. }), "{err:?}");
}

#[tokio::test]
async fn serve_tls_print_env_prints_https_urls() {
    let mut child = Killed(
        Command::new(env!("CARGO_BIN_EXE_canon-sim"))
            .args(["serve", "--tls", "--print-env", "--exit-after", "60"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("canon-sim starts"),
    );
    let stdout = child.0.stdout.take().expect("stdout piped");
    let lines = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut env = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.expect("utf-8 line");
            let last = line.starts_with("CANON_SIM_CONTROL_URL=");
            env.push(line);
            if last {
                break;
            }
        }
        env
    });
    let lines = tokio::time::timeout(WAIT, lines)
        .await
        .expect("env printed in time")
        .expect("reader");
    let value = |key: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_default()
            .to_owned()
    };
    for key in [
        "CANON_BASE_URL",
        "CANON_STREAM_URL",
        "CANON_SIM_CONTROL_URL",
    ] {
        assert!(
            value(key).starts_with("https://127.0.0.1:"),
            "{key}: {lines:?}"
        );
    }
    // The printed URL answers over TLS with the committed CA.
    let base = value("CANON_BASE_URL");
    let addr: std::net::SocketAddr = base
        .trim_start_matches("https://")
        .parse()
        .expect("loopback address");
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = connector(CA).connect(name, tcp).await.expect("handshake");
    tls.write_all(&request("/healthz/", "none", "application/json"))
        .await
        .expect("write");
    let mut data = Vec::new();
    tokio::time::timeout(WAIT, tls.read_to_end(&mut data))
        .await
        .expect("in time")
        .expect("read");
    assert!(data.starts_with(b"HTTP/1.1 200"));
}

#[test]
fn tls_cert_without_tls_key_exits_with_status_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_canon-sim"))
        .args(["serve", "--tls-cert", "server.pem", "--exit-after", "1"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
}

/// Kills the child when the test ends, whatever happens.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
