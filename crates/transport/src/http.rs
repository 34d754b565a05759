//! The HTTP engine shared by the REST client, the event stream and media
//! downloads: a pooled hyper-util client over hyper-rustls over our
//! [`Connector`](crate::net), with the timeouts of canon-wire.md §2.2 and the
//! mapping of hyper's failures onto the canon-wire.md §2.6 error kinds.
//!
//! TLS uses rustls with the `ring` provider and the platform's native roots
//! (rustls-native-certs, loaded once per process). When the platform store
//! cannot be read the client still builds (plain-HTTP loopback keeps working)
//! and HTTPS fails certificate verification. With the `testing` feature a
//! client may trust one more CA (the simulator's test CA).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{HeaderMap, Request, Response};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;

use crate::error::{BoxError, TransportError};
use crate::net::{AddressPolicy, BlockedAddress, ConnectTimedOut, Connector, Resolver};
use canon_wire::retry::RetryClass;

/// Timeouts of one client (canon-wire.md §2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP (+ name resolution) connect timeout.
    pub connect: Duration,
    /// Time allowed for sending the request and receiving the response head,
    /// and between two body chunks.
    pub read: Duration,
}

impl Default for Timeouts {
    /// 30 s each, as the reference (canon-wire.md §2.2).
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(30),
            read: Duration::from_secs(30),
        }
    }
}

/// A fully read response.
#[derive(Debug, Clone)]
pub(crate) struct RawResponse {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl RawResponse {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// What to do when a body exceeds its cap.
#[derive(Debug, Clone, Copy)]
pub(crate) enum BodyCap {
    /// REST: an oversize body is a protocol error.
    Protocol(usize),
    /// Media: an oversize body is [`TransportError::TooLarge`].
    Media(usize),
}

impl BodyCap {
    fn limit(self) -> usize {
        match self {
            BodyCap::Protocol(n) | BodyCap::Media(n) => n,
        }
    }

    fn error(self) -> TransportError {
        match self {
            BodyCap::Protocol(n) => {
                TransportError::protocol(format!("response body exceeds {n} bytes"))
            }
            BodyCap::Media(n) => TransportError::TooLarge {
                limit: n as u64,
                upload: false,
            },
        }
    }
}

/// One pooled HTTP client.
#[derive(Clone)]
pub(crate) struct HttpEngine {
    client: Client<HttpsConnector<Connector>, Full<Bytes>>,
    connector: Connector,
    pub(crate) timeouts: Timeouts,
}

/// The platform's root certificates, loaded once per process.
fn native_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let loaded = rustls_native_certs::load_native_certs();
        for err in &loaded.errors {
            tracing::warn!(error = %err, "could not read part of the platform's root certificates");
        }
        loaded.certs
    })
}

fn tls_config(extra_roots: &[CertificateDer<'static>]) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(native_roots().iter().cloned());
    roots.add_parsable_certificates(extra_roots.iter().cloned());
    if roots.is_empty() {
        tracing::warn!("no trusted root certificates: https connections will fail");
    }
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

impl HttpEngine {
    pub(crate) fn new(
        resolver: Arc<dyn Resolver>,
        policy: Option<AddressPolicy>,
        timeouts: Timeouts,
        extra_roots: &[CertificateDer<'static>],
    ) -> HttpEngine {
        let connector = Connector::new(resolver, policy, timeouts.connect);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(extra_roots))
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector.clone());
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(https);
        HttpEngine {
            client,
            connector,
            timeouts,
        }
    }

    pub(crate) fn connect_attempts(&self) -> Vec<std::net::SocketAddr> {
        self.connector.attempts()
    }

    /// Sends `request` and waits for the response head within `head_timeout`.
    pub(crate) async fn send_head(
        &self,
        request: Request<Full<Bytes>>,
        head_timeout: Duration,
    ) -> Result<Response<Incoming>, TransportError> {
        match tokio::time::timeout(head_timeout, self.client.request(request)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(err)) => Err(map_client_error(err)),
            Err(_) => Err(TransportError::ReadTimeout {
                retry: RetryClass::Retryable,
            }),
        }
    }

    /// Sends `request` and reads the whole body (each chunk, and the body as a whole, within
    /// the read timeout once the head arrived; at most `cap` bytes).
    pub(crate) async fn send(
        &self,
        request: Request<Full<Bytes>>,
        timeout: Duration,
        cap: BodyCap,
    ) -> Result<RawResponse, TransportError> {
        let response = self.send_head(request, timeout).await?;
        let status = response.status().as_u16();
        let (parts, body) = response.into_parts();
        let deadline = tokio::time::Instant::now() + timeout;
        let body = read_body(body, timeout, Some(deadline), cap).await?;
        Ok(RawResponse {
            status,
            headers: parts.headers,
            body,
        })
    }
}

/// Reads a body with a per-chunk timeout, an optional deadline for the whole body and a size
/// cap. The deadline matters against a peer that drips: one byte a little faster than the chunk
/// timeout would otherwise hold the caller for as long as the peer likes.
pub(crate) async fn read_body(
    mut body: Incoming,
    chunk_timeout: Duration,
    deadline: Option<tokio::time::Instant>,
    cap: BodyCap,
) -> Result<Bytes, TransportError> {
    let mut buf = BytesMut::new();
    loop {
        let wait = match deadline {
            Some(deadline) => {
                chunk_timeout.min(deadline.saturating_duration_since(tokio::time::Instant::now()))
            }
            None => chunk_timeout,
        };
        let frame = match tokio::time::timeout(wait, body.frame()).await {
            Err(_) => {
                return Err(TransportError::ReadTimeout {
                    retry: RetryClass::Retryable,
                })
            }
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(err))) => {
                let text = Box::new(ErrorText(err.to_string()));
                return Err(map_hyper_error(&err, text));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > cap.limit() {
                return Err(cap.error());
            }
            buf.extend_from_slice(&data);
        }
    }
}

/// Walks an error's source chain looking for a `T`.
fn find_in_chain<'a, T: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        current = e.source();
    }
    None
}

/// Whether the client error was a guard refusal (the caller builds
/// [`TransportError::Blocked`] with the safe URL).
pub(crate) fn blocked_in_chain(err: &TransportError) -> bool {
    match err {
        TransportError::Connect { source, .. } => {
            find_in_chain::<BlockedAddress>(source.as_ref()).is_some()
        }
        _ => false,
    }
}

fn map_client_error(err: hyper_util::client::legacy::Error) -> TransportError {
    if find_in_chain::<ConnectTimedOut>(&err).is_some() {
        return TransportError::ConnectTimeout {
            retry: RetryClass::Retryable,
        };
    }
    if err.is_connect() {
        return TransportError::Connect {
            retry: RetryClass::Retryable,
            source: Box::new(err),
        };
    }
    match find_in_chain::<hyper::Error>(&err) {
        Some(hyper_err) => {
            let detail = hyper_err.to_string();
            map_hyper_error(hyper_err, Box::new(ErrorText(format!("{err}: {detail}"))))
        }
        None => TransportError::Reset {
            retry: RetryClass::NotRetryable,
            source: Box::new(err),
        },
    }
}

/// An error that is only its text (hyper's errors are not `Clone`).
#[derive(Debug)]
struct ErrorText(String);

impl std::fmt::Display for ErrorText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ErrorText {}

fn map_hyper_error(err: &hyper::Error, source: BoxError) -> TransportError {
    if err.is_parse() || err.is_parse_status() || err.is_user() {
        return TransportError::protocol(err.to_string());
    }
    if err.is_timeout() {
        return TransportError::ReadTimeout {
            retry: RetryClass::Retryable,
        };
    }
    if err.is_body_write_aborted() {
        return TransportError::WriteFailed {
            retry: RetryClass::NotRetryable,
            source,
        };
    }
    if let Some(io) = find_in_chain::<std::io::Error>(err) {
        if matches!(io.kind(), std::io::ErrorKind::BrokenPipe) {
            return TransportError::WriteFailed {
                retry: RetryClass::NotRetryable,
                source,
            };
        }
    }
    TransportError::Reset {
        retry: RetryClass::NotRetryable,
        source,
    }
}
