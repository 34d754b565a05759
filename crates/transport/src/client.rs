//! The typed REST client for the REST operations of canon-wire.md §3, with
//! the headers of canon-wire.md §2.1, the timeouts of §2.2, the decoding
//! rules of canon-wire.md §2.3 and the durable send of §2.5/§2.7.
//!
//! # Durable send
//!
//! A [`DurableRequest`] serializes its body **once**; the bytes are kept
//! until Canon settles the request, and every attempt — the three of the
//! retry loop and any later replay by the caller after an ambiguous failure —
//! sends exactly those bytes. With an operation-bound id Canon returns the
//! original message for a replay; a 409 means the id already names a
//! different payload and surfaces as [`TransportError::MessageIdConflict`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request};
use rustls::pki_types::CertificateDer;
use serde_json::{Map, Value};

use canon_wire::endpoint::is_secure_or_local;
use canon_wire::retry::{
    durable_retry_delay_with, Classifier, RetryClass, DURABLE_SEND_ATTEMPTS, DURABLE_SEND_BACKOFF,
};
use canon_wire::secret::ApiKey;
use canon_wire::types::{
    attachment_kind, AgentMe, ConsumeInteraction, Conversation, InteractionCreated,
    InteractionRequest, InteractionResult, Registration, RegistrationStatus, RegistrationTicket,
    RuntimeSignal, SendMessage, SentMessage, StreamingUpdate, TurnUpdate, Typing, UploadMedia,
};

use crate::error::TransportError;
use crate::http::{BodyCap, HttpEngine, RawResponse, Timeouts};
use crate::net::{Resolver, SystemResolver};

/// Cap on a REST response body; a larger one is a protocol error.
pub const MAX_REST_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Media upload/download cap: 10 MiB raw (canon-wire.md §4.4, §7.2).
pub const MAX_MEDIA_BYTES: usize = 10 * 1024 * 1024;

/// Health-check and registration timeouts (canon-wire.md §1.2, §1.4, §2.2).
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

/// Registration timeout (canon-wire.md §1.4).
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The verb wire version (canon-wire.md §4.15).
pub const VERB_WIRE: &str = "canon.verb-wire.v1";

/// `User-Agent` of API calls (canon-wire.md §2.1 \[target\]).
pub const API_USER_AGENT: &str = concat!("canon-hermes/", env!("CARGO_PKG_VERSION"));

/// Everything a [`CanonClient`] needs.
#[derive(Clone)]
pub struct ClientConfig {
    /// API base URL (no trailing slash needed; one is stripped).
    pub base_url: String,
    /// Stream base URL.
    pub stream_url: String,
    /// The agent's API key.
    pub api_key: ApiKey,
    /// Connect/read timeouts for REST (30 s each by default).
    pub timeouts: Timeouts,
    /// Sleeps of the durable loop (0.4 s, 0.8 s by default; tests shorten them).
    pub durable_backoff: [Duration; 2],
    /// Name resolution (the system resolver by default).
    pub resolver: Arc<dyn Resolver>,
    /// Extra trusted roots; only settable with the `testing` feature.
    extra_roots: Vec<CertificateDer<'static>>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("stream_url", &self.stream_url)
            .field("api_key", &self.api_key)
            .field("timeouts", &self.timeouts)
            .field("durable_backoff", &self.durable_backoff)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    /// A configuration with the default timeouts and resolver.
    pub fn new(
        base_url: impl Into<String>,
        stream_url: impl Into<String>,
        api_key: ApiKey,
    ) -> ClientConfig {
        ClientConfig {
            base_url: base_url.into(),
            stream_url: stream_url.into(),
            api_key,
            timeouts: Timeouts::default(),
            durable_backoff: DURABLE_SEND_BACKOFF,
            resolver: Arc::new(SystemResolver),
            extra_roots: Vec::new(),
        }
    }

    /// Also trusts every certificate in `pem` (test-only: the simulator's
    /// test CA, canon-wire.md §11.1 S3). Returns how many were added.
    #[cfg(feature = "testing")]
    pub fn trust_test_ca_pem(&mut self, pem: &[u8]) -> Result<usize, TransportError> {
        use rustls::pki_types::pem::PemObject;
        let before = self.extra_roots.len();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|err| TransportError::InvalidRequest {
                detail: format!("invalid test CA: {err}"),
            })?;
            self.extra_roots.push(cert);
        }
        Ok(self.extra_roots.len() - before)
    }
}

struct Inner {
    engine: HttpEngine,
    base_url: String,
    stream_url: String,
    api_key: ApiKey,
    durable_backoff: [Duration; 2],
}

/// The Canon REST client (cheap to clone; clones share one connection pool).
#[derive(Clone)]
pub struct CanonClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CanonClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CanonClient")
            .field("base_url", &self.inner.base_url)
            .field("stream_url", &self.inner.stream_url)
            .finish_non_exhaustive()
    }
}

/// A base URL without surrounding space and trailing `/`, refused unless it is `https`, or
/// `http` on `localhost`, `127.0.0.1` or `::1` (canon-wire.md §1.1): every request carries the
/// API key, which must never cross the network in clear, whoever resolved the URL.
fn clean_base(url: &str) -> Result<String, TransportError> {
    let url = url.trim().trim_end_matches('/');
    let parsed: hyper::Uri = url.parse().map_err(|_| TransportError::InvalidRequest {
        detail: format!("invalid base url {url:?}"),
    })?;
    let (Some(scheme @ ("http" | "https")), Some(host)) = (parsed.scheme_str(), parsed.host())
    else {
        return Err(TransportError::InvalidRequest {
            detail: format!("base url must be http(s) with a host: {url:?}"),
        });
    };
    if !is_secure_or_local(url) {
        // Scheme and host only: a user-info part could hold a password.
        return Err(TransportError::InvalidRequest {
            detail: format!(
                "Canon base url {scheme}://{host} must use HTTPS \
                 (plain HTTP only on localhost, 127.0.0.1 or ::1)"
            ),
        });
    }
    Ok(url.to_owned())
}

/// Percent-encodes one path segment (RFC 3986 unreserved characters pass).
pub(crate) fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Standard base64 with padding (canon-wire.md §4.4).
pub(crate) fn base64_encode(data: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(TABLE[((n >> shift) & 63) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

/// canon-wire.md §2.3: empty body → `{}`; invalid UTF-8 → protocol error;
/// invalid JSON → decode error.
fn decode_value(body: &[u8]) -> Result<Value, TransportError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| TransportError::protocol("response body is not UTF-8"))?;
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_str(text)
        .map_err(|err| TransportError::decode(format!("response body is not JSON: {err}")))
}

/// Callers that expect an object treat a non-object as `{}` (canon-wire.md §2.3).
fn decode_object(body: &[u8]) -> Result<Map<String, Value>, TransportError> {
    Ok(match decode_value(body)? {
        Value::Object(map) => map,
        _ => Map::new(),
    })
}

fn check_status(raw: &RawResponse, classifier: Classifier) -> Result<(), TransportError> {
    if raw.status < 400 {
        return Ok(());
    }
    let failure =
        crate::error::HttpFailure::from_response(raw.status, raw.header("retry-after"), &raw.body);
    Err(TransportError::Http {
        failure,
        retry: RetryClass::NotRetryable,
    }
    .classified(classifier))
}

/// Validates a verb response envelope (canon-wire.md §4.15, exact messages).
pub fn verb_result(verb: &str, value: Value) -> Result<Map<String, Value>, TransportError> {
    let Value::Object(mut object) = value else {
        return Err(TransportError::decode(
            "Canon verb response must be an object",
        ));
    };
    if object.get("wire").and_then(Value::as_str) != Some(VERB_WIRE) {
        return Err(TransportError::decode(
            "Canon verb response has an unexpected wire version",
        ));
    }
    if object.get("verb").and_then(Value::as_str) != Some(verb) {
        return Err(TransportError::decode(
            "Canon verb response does not match the requested verb",
        ));
    }
    let result = match object.remove("result") {
        Some(Value::Object(result))
            if result.get("encoding").and_then(Value::as_str) == Some("json") =>
        {
            result
        }
        _ => {
            return Err(TransportError::decode(
                "Canon verb response does not contain a JSON result",
            ))
        }
    };
    match result.get("value") {
        Some(Value::Object(value)) => Ok(value.clone()),
        _ => Err(TransportError::decode(
            "Canon verb JSON result must be an object",
        )),
    }
}

/// The verb request body (canon-wire.md §4.15).
pub fn verb_body(verb: &str, envelope: Map<String, Value>, value: Map<String, Value>) -> Value {
    serde_json::json!({
        "wire": VERB_WIRE,
        "verb": verb,
        "envelope": envelope,
        "body": {"encoding": "json", "value": value},
    })
}

/// Parameters of `GET /agents/discover` (canon-wire.md §4.15.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoverAgents {
    /// `query` (sent only when given; may be empty).
    pub query: Option<String>,
    /// `limit` (1–10, default 10, always sent).
    pub limit: u8,
    /// `cursor` (sent only when given).
    pub cursor: Option<String>,
}

fn non_blank(value: Option<&Value>) -> bool {
    value
        .and_then(Value::as_str)
        .is_some_and(|s| !s.trim().is_empty())
}

/// The directory page shape of canon-wire.md §4.15.1.
fn directory_page_ok(page: &Map<String, Value>) -> bool {
    let cursor_ok = matches!(
        page.get("nextCursor"),
        Some(Value::Null) | Some(Value::String(_))
    );
    let Some(agents) = page.get("agents").and_then(Value::as_array) else {
        return false;
    };
    cursor_ok
        && agents.iter().all(|agent| {
            agent.as_object().is_some_and(|a| {
                non_blank(a.get("principalId"))
                    && a.get("shareable").is_some_and(Value::is_boolean)
                    && a.get("owner")
                        .and_then(Value::as_object)
                        .is_some_and(|o| non_blank(o.get("principalId")))
            })
        })
}

/// How consume errors count while polling (canon-wire.md §9.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollErrors {
    /// Every error counts as `pending` (the adapter's blocking flows).
    AsPending,
    /// `is_retryable` errors count as `pending`, others abort (\[target\] for
    /// the runtime tool's waits).
    RetryableAsPending,
    /// Any error aborts the wait (\[parity\] runtime tool).
    Abort,
}

/// How a poll ended.
#[derive(Debug, Clone, PartialEq)]
pub enum PollOutcome {
    /// The interaction left `pending`.
    Answered(InteractionResult),
    /// The deadline passed (a cancel was sent).
    TimedOut,
}

/// What a durable request is, for decoding its response.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DurableKind {
    Message,
    Verb(String),
}

/// A durable write whose exact bytes are kept until Canon settles it
/// (canon-wire.md §2.5, §2.7). Replays send byte-identical requests.
#[derive(Clone, PartialEq, Eq)]
pub struct DurableRequest {
    path: String,
    body: Bytes,
    client_id: Option<String>,
    kind: DurableKind,
}

/// The body holds the reply-authority token: `Debug` shows its length only.
impl std::fmt::Debug for DurableRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableRequest")
            .field("path", &self.path)
            .field("body_bytes", &self.body.len())
            .field("client_id", &self.client_id)
            .field("kind", &self.kind)
            .finish()
    }
}

impl DurableRequest {
    /// `POST /messages/send` (canon-wire.md §4.3). The client id is `messageId`.
    pub fn message(message: &SendMessage) -> Result<DurableRequest, TransportError> {
        let body = serde_json::to_vec(&Value::Object(message.to_body())).map_err(|err| {
            TransportError::InvalidRequest {
                detail: err.to_string(),
            }
        })?;
        Ok(DurableRequest {
            path: "/messages/send".to_owned(),
            body: Bytes::from(body),
            client_id: message.message_id.clone(),
            kind: DurableKind::Message,
        })
    }

    /// `POST /agent/verbs/{verb}` (canon-wire.md §4.15) sent through the durable loop,
    /// as the proactive `send_to` is. The client id is `envelope.idempotencyKey`.
    pub fn verb(
        verb: &str,
        envelope: Map<String, Value>,
        value: Map<String, Value>,
    ) -> Result<DurableRequest, TransportError> {
        let client_id = envelope
            .get("idempotencyKey")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let body = serde_json::to_vec(&verb_body(verb, envelope, value)).map_err(|err| {
            TransportError::InvalidRequest {
                detail: err.to_string(),
            }
        })?;
        Ok(DurableRequest {
            path: format!("/agent/verbs/{}", encode_segment(verb)),
            body: Bytes::from(body),
            client_id,
            kind: DurableKind::Verb(verb.to_owned()),
        })
    }

    /// The exact bytes every attempt sends.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The operation-bound client id, when there is one.
    pub fn client_id(&self) -> Option<&str> {
        self.client_id.as_deref()
    }

    /// The classifier the loop uses: idempotent with an id, safe-only without.
    pub fn classifier(&self) -> Classifier {
        if self.client_id.is_some() {
            Classifier::IdempotentWrite
        } else {
            Classifier::UnsafeWrite
        }
    }
}

impl CanonClient {
    /// The API base URL requests go to (no trailing `/`).
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    /// Builds a client. Fails only on unusable URLs.
    pub fn new(config: ClientConfig) -> Result<CanonClient, TransportError> {
        let base_url = clean_base(&config.base_url)?;
        let stream_url = clean_base(&config.stream_url)?;
        let engine = HttpEngine::new(
            config.resolver.clone(),
            None,
            config.timeouts,
            &config.extra_roots,
        );
        Ok(CanonClient {
            inner: Arc::new(Inner {
                engine,
                base_url,
                stream_url,
                api_key: config.api_key,
                durable_backoff: config.durable_backoff,
            }),
        })
    }

    pub(crate) fn engine(&self) -> &HttpEngine {
        &self.inner.engine
    }

    pub(crate) fn stream_base(&self) -> &str {
        &self.inner.stream_url
    }

    /// Builds a request with the canon-wire.md §2.1 headers.
    pub(crate) fn build(
        &self,
        method: Method,
        url: &str,
        auth: bool,
        body: Option<Bytes>,
        extra: &[(&str, &str)],
    ) -> Result<Request<Full<Bytes>>, TransportError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(url)
            .header("user-agent", API_USER_AGENT);
        if auth {
            builder = builder
                .header(
                    "authorization",
                    format!("Bearer {}", self.inner.api_key.expose()),
                )
                .header("content-type", "application/json");
        } else if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        for (name, value) in extra {
            builder = builder.header(*name, *value);
        }
        builder
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|err| TransportError::InvalidRequest {
                detail: format!("could not build request for {url}: {err}"),
            })
    }

    async fn exchange(
        &self,
        request: Request<Full<Bytes>>,
        timeout: Duration,
        classifier: Classifier,
    ) -> Result<RawResponse, TransportError> {
        let raw = self
            .inner
            .engine
            .send(request, timeout, BodyCap::Protocol(MAX_REST_BODY_BYTES))
            .await
            .map_err(|err| err.classified(classifier))?;
        check_status(&raw, classifier)?;
        Ok(raw)
    }

    /// One authenticated call against the API base URL.
    async fn api(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        classifier: Classifier,
    ) -> Result<Value, TransportError> {
        let bytes = match body {
            Some(body) => Some(Bytes::from(serde_json::to_vec(&body).map_err(|err| {
                TransportError::InvalidRequest {
                    detail: err.to_string(),
                }
            })?)),
            None => None,
        };
        let url = format!("{}{}", self.inner.base_url, path);
        tracing::debug!(method = %method, path, "canon request");
        let request = self.build(method, &url, true, bytes, &[])?;
        let raw = self
            .exchange(request, self.inner.engine.timeouts.read, classifier)
            .await?;
        decode_value(&raw.body).map_err(|err| err.classified(classifier))
    }

    async fn api_object(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        classifier: Classifier,
    ) -> Result<Map<String, Value>, TransportError> {
        Ok(match self.api(method, path, body, classifier).await? {
            Value::Object(map) => map,
            _ => Map::new(),
        })
    }

    /// `GET /healthz/` and `GET {stream}/health`: verifies that both services belong
    /// to `environment_id` (canon-wire.md §1.2). With `expected_project` the API
    /// body must report that project; without (a non-packaged environment) it must
    /// report a non-empty one, which the stream must repeat. Returns the project id.
    pub async fn verify_environment(
        &self,
        environment_id: &str,
        expected_project: Option<&str>,
    ) -> Result<String, TransportError> {
        let api_url = format!("{}/healthz/", self.inner.base_url);
        let project = self
            .probe_health(&api_url, environment_id, expected_project)
            .await?;
        let stream_url = format!("{}/health", self.inner.stream_url);
        self.probe_health(&stream_url, environment_id, Some(&project))
            .await?;
        Ok(project)
    }

    async fn probe_health(
        &self,
        url: &str,
        environment_id: &str,
        expected_project: Option<&str>,
    ) -> Result<String, TransportError> {
        let request = self.build(
            Method::GET,
            url,
            false,
            None,
            &[("accept", "application/json")],
        )?;
        let raw = self
            .inner
            .engine
            .send(
                request,
                HEALTH_TIMEOUT,
                BodyCap::Protocol(MAX_REST_BODY_BYTES),
            )
            .await?;
        let mismatch = || TransportError::EnvironmentMismatch {
            url: url.to_owned(),
            environment_id: environment_id.to_owned(),
        };
        // The status is deliberately not checked (a 503 with a correct body passes).
        if raw.header("x-canon-environment-id") != Some(environment_id) {
            return Err(mismatch());
        }
        let body: Value = serde_json::from_slice(&raw.body).map_err(|_| mismatch())?;
        let object = body.as_object().ok_or_else(mismatch)?;
        if object.get("environmentId").and_then(Value::as_str) != Some(environment_id) {
            return Err(mismatch());
        }
        let project = object
            .get("projectId")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or_else(mismatch)?;
        match expected_project {
            Some(expected) if expected != project => Err(mismatch()),
            _ => Ok(project.to_owned()),
        }
    }

    /// `GET /agents/me` (canon-wire.md §4.1).
    pub async fn get_me(&self) -> Result<AgentMe, TransportError> {
        Ok(AgentMe::from_object(
            self.api_object(Method::GET, "/agents/me", None, Classifier::Report)
                .await?,
        ))
    }

    /// `GET /conversations` (canon-wire.md §4.2).
    pub async fn list_conversations(&self) -> Result<Vec<Conversation>, TransportError> {
        Ok(Conversation::list_from(
            self.api(Method::GET, "/conversations", None, Classifier::Report)
                .await?,
        ))
    }

    /// `POST /messages/send` (canon-wire.md §4.3), single attempt (attachment messages \[parity\]).
    pub async fn send_message_once(
        &self,
        message: &SendMessage,
    ) -> Result<SentMessage, TransportError> {
        let request = DurableRequest::message(message)?;
        let reply = self.attempt_durable(&request, Classifier::Report).await?;
        Ok(SentMessage::from_object(reply))
    }

    /// `POST /messages/send` (canon-wire.md §4.3) through
    /// the durable loop: up to 3 attempts of the same bytes.
    pub async fn send_message(
        &self,
        request: &DurableRequest,
    ) -> Result<SentMessage, TransportError> {
        Ok(SentMessage::from_object(self.send_durable(request).await?))
    }

    /// Runs the durable loop (canon-wire.md §2.5) for a message or verb and
    /// returns the response object (for a verb: `result.value`).
    ///
    /// Failures report retryability with the loop's classifier when the
    /// request carries an id (replaying it is safe) and with `is_retryable`
    /// otherwise. Keep `request` until Canon settles it: calling this again
    /// with the same request replays identical bytes.
    pub async fn send_durable(
        &self,
        request: &DurableRequest,
    ) -> Result<Map<String, Value>, TransportError> {
        let loop_classifier = request.classifier();
        let report = if request.client_id.is_some() {
            Classifier::IdempotentWrite
        } else {
            Classifier::Report
        };
        let mut attempt = 1;
        loop {
            match self.attempt_durable(request, report).await {
                Ok(reply) => return Ok(reply),
                Err(err) => {
                    let kind = err.kind();
                    let conflict = matches!(err, TransportError::MessageIdConflict { .. });
                    if conflict || attempt >= DURABLE_SEND_ATTEMPTS || !loop_classifier.allows(kind)
                    {
                        return Err(err);
                    }
                    let retry_after = err.http().and_then(|h| h.retry_after);
                    let delay = durable_retry_delay_with(
                        self.inner.durable_backoff,
                        attempt,
                        kind,
                        retry_after,
                    );
                    tracing::warn!(attempt, client_message_id = request.client_id.as_deref().unwrap_or(""), error = %err, "durable send failed, retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
            }
        }
    }

    async fn attempt_durable(
        &self,
        request: &DurableRequest,
        classifier: Classifier,
    ) -> Result<Map<String, Value>, TransportError> {
        let url = format!("{}{}", self.inner.base_url, request.path);
        let http_request = self.build(Method::POST, &url, true, Some(request.body.clone()), &[])?;
        let result = self
            .exchange(http_request, self.inner.engine.timeouts.read, classifier)
            .await;
        let raw = match result {
            Ok(raw) => raw,
            Err(TransportError::Http { failure, .. })
                if failure.status == 409 && request.client_id.is_some() =>
            {
                return Err(TransportError::MessageIdConflict {
                    message_id: request.client_id.clone().unwrap_or_default(),
                    failure,
                });
            }
            Err(err) => return Err(err),
        };
        match &request.kind {
            DurableKind::Message => decode_object(&raw.body),
            DurableKind::Verb(verb) => verb_result(verb, decode_value(&raw.body)?),
        }
    }

    /// `POST /media/upload` (canon-wire.md §4.4); returns the attachment object.
    pub async fn upload_media(
        &self,
        upload: &UploadMedia,
    ) -> Result<Map<String, Value>, TransportError> {
        if upload.data.len() > MAX_MEDIA_BYTES {
            return Err(TransportError::TooLarge {
                limit: MAX_MEDIA_BYTES as u64,
                upload: true,
            });
        }
        let mut body = Map::new();
        body.insert(
            "conversationId".into(),
            upload.conversation_id.as_str().into(),
        );
        body.insert("data".into(), base64_encode(&upload.data).into());
        body.insert("mimeType".into(), upload.mime_type.as_str().into());
        if let Some(name) = &upload.file_name {
            body.insert("fileName".into(), name.as_str().into());
        }
        let mut reply = self
            .api_object(
                Method::POST,
                "/media/upload",
                Some(Value::Object(body)),
                Classifier::Report,
            )
            .await?;
        if let Some(Value::Object(attachment)) = reply.remove("attachment") {
            return Ok(attachment);
        }
        let url = reply
            .get("url")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| TransportError::decode("Canon media upload did not return a url"))?;
        let mut attachment = Map::new();
        attachment.insert("kind".into(), attachment_kind(&upload.mime_type).into());
        attachment.insert("url".into(), url.into());
        attachment.insert("mimeType".into(), upload.mime_type.as_str().into());
        if let Some(name) = &upload.file_name {
            attachment.insert("fileName".into(), name.as_str().into());
        }
        attachment.insert("sizeBytes".into(), upload.data.len().into());
        Ok(attachment)
    }

    /// `POST /typing` (canon-wire.md §4.5).
    pub async fn set_typing(&self, typing: &Typing) -> Result<(), TransportError> {
        let body = serde_json::to_value(typing).map_err(|err| TransportError::InvalidRequest {
            detail: err.to_string(),
        })?;
        self.api(Method::POST, "/typing", Some(body), Classifier::Report)
            .await
            .map(drop)
    }

    /// `POST /streaming` (canon-wire.md §4.6).
    pub async fn streaming(&self, update: &StreamingUpdate) -> Result<(), TransportError> {
        self.api(
            Method::POST,
            "/streaming",
            Some(update.to_body()),
            Classifier::Report,
        )
        .await
        .map(drop)
    }

    /// `POST /runtime/turn` (canon-wire.md §4.7).
    pub async fn publish_turn(&self, update: &TurnUpdate) -> Result<(), TransportError> {
        let body = serde_json::to_value(update).map_err(|err| TransportError::InvalidRequest {
            detail: err.to_string(),
        })?;
        self.api(
            Method::POST,
            "/runtime/turn",
            Some(body),
            Classifier::Report,
        )
        .await
        .map(drop)
    }

    /// `POST /runtime/status` with the static descriptor of canon-wire.md §4.8.
    pub async fn publish_runtime_status(&self) -> Result<(), TransportError> {
        self.api(
            Method::POST,
            "/runtime/status",
            Some(canon_wire::types::runtime_status_body()),
            Classifier::Report,
        )
        .await
        .map(drop)
    }

    /// `POST /runtime/signal/consume` (canon-wire.md §4.9); `None` when nothing was pending.
    pub async fn consume_signal(
        &self,
        conversation_id: &str,
    ) -> Result<Option<RuntimeSignal>, TransportError> {
        let body = serde_json::json!({"conversationId": conversation_id});
        let reply = self
            .api_object(
                Method::POST,
                "/runtime/signal/consume",
                Some(body),
                Classifier::Report,
            )
            .await?;
        Ok(RuntimeSignal::from_object(&reply))
    }

    /// `PATCH …/disposition` (canon-wire.md §4.10) with `accepted_now` (idempotent on the server).
    pub async fn accept_disposition(
        &self,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<(), TransportError> {
        let path = format!(
            "/conversations/{}/messages/{}/disposition",
            encode_segment(conversation_id),
            encode_segment(message_id)
        );
        let body = serde_json::json!({"inboundDisposition": "accepted_now"});
        self.api(
            Method::PATCH,
            &path,
            Some(body),
            Classifier::IdempotentWrite,
        )
        .await
        .map(drop)
    }

    /// `POST /conversations/{cid}/read` (canon-wire.md §4.11; no body).
    pub async fn mark_read(&self, conversation_id: &str) -> Result<(), TransportError> {
        let path = format!("/conversations/{}/read", encode_segment(conversation_id));
        self.api(Method::POST, &path, None, Classifier::Report)
            .await
            .map(drop)
    }

    /// `POST /runtime-interaction/request` (canon-wire.md §4.12).
    pub async fn request_interaction(
        &self,
        request: &InteractionRequest,
    ) -> Result<InteractionCreated, TransportError> {
        let reply = self
            .api_object(
                Method::POST,
                "/runtime-interaction/request",
                Some(request.to_body()),
                Classifier::Report,
            )
            .await?;
        Ok(InteractionCreated::from_object(reply))
    }

    /// `POST /runtime-interaction/consume` (canon-wire.md §4.13).
    pub async fn consume_interaction(
        &self,
        consume: &ConsumeInteraction,
    ) -> Result<InteractionResult, TransportError> {
        let reply = self
            .api_object(
                Method::POST,
                "/runtime-interaction/consume",
                Some(consume.to_body()),
                Classifier::Report,
            )
            .await?;
        Ok(InteractionResult::from_object(reply))
    }

    /// `POST /agent/verbs/{verb}` (canon-wire.md §4.15), single attempt; returns `result.value`.
    pub async fn execute_verb(
        &self,
        verb: &str,
        envelope: Map<String, Value>,
        value: Map<String, Value>,
    ) -> Result<Map<String, Value>, TransportError> {
        let request = DurableRequest::verb(verb, envelope, value)?;
        self.attempt_durable(&request, Classifier::Report).await
    }

    /// `GET /agents/discover` (canon-wire.md §4.15.1, 0.16.0). The
    /// parameters are assumed validated by the tool layer; `limit` is always
    /// sent. The body must be a well-formed directory page and is returned
    /// whole.
    pub async fn discover_agents(
        &self,
        query: &DiscoverAgents,
    ) -> Result<Map<String, Value>, TransportError> {
        let mut path = String::from("/agents/discover?");
        if let Some(text) = &query.query {
            path.push_str(&format!("query={}&", encode_segment(text)));
        }
        path.push_str(&format!("limit={}", query.limit));
        if let Some(cursor) = &query.cursor {
            path.push_str(&format!("&cursor={}", encode_segment(cursor)));
        }
        let body = self
            .api(Method::GET, &path, None, Classifier::Report)
            .await?;
        match body {
            Value::Object(page) if directory_page_ok(&page) => Ok(page),
            _ => Err(TransportError::decode(
                "Canon returned a malformed agent directory result",
            )),
        }
    }

    /// The poll engine of canon-wire.md §9.1: consumes until the interaction
    /// leaves `pending` or `deadline` passes; after the deadline it sends one
    /// best-effort `cancel:true` consume (errors ignored) and reports
    /// [`PollOutcome::TimedOut`].
    pub async fn poll_interaction(
        &self,
        consume: &ConsumeInteraction,
        deadline: tokio::time::Instant,
        interval: Duration,
        errors: PollErrors,
    ) -> Result<PollOutcome, TransportError> {
        let probe = ConsumeInteraction {
            cancel: false,
            ..consume.clone()
        };
        while tokio::time::Instant::now() <= deadline {
            match self.consume_interaction(&probe).await {
                Ok(result) if !result.is_pending() => return Ok(PollOutcome::Answered(result)),
                Ok(_) => {}
                Err(err) => match errors {
                    PollErrors::AsPending => {}
                    PollErrors::RetryableAsPending if err.is_retryable() => {}
                    _ => return Err(err),
                },
            }
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                break;
            }
            tokio::time::sleep(interval.min(remaining)).await;
        }
        let cancel = ConsumeInteraction {
            cancel: true,
            ..consume.clone()
        };
        if let Err(err) = self.consume_interaction(&cancel).await {
            tracing::debug!(error = %err, "best-effort interaction cancel failed");
        }
        Ok(PollOutcome::TimedOut)
    }

    /// `POST /agents/register` (canon-wire.md §1.4; no auth, 30 s).
    pub async fn register(
        &self,
        registration: &Registration,
    ) -> Result<RegistrationTicket, TransportError> {
        let body =
            serde_json::to_vec(registration).map_err(|err| TransportError::InvalidRequest {
                detail: err.to_string(),
            })?;
        let url = format!("{}/agents/register", self.inner.base_url);
        let request = self.build(Method::POST, &url, false, Some(Bytes::from(body)), &[])?;
        let raw = self
            .exchange(request, REGISTRATION_TIMEOUT, Classifier::Report)
            .await?;
        let reply = decode_object(&raw.body)?;
        let text = |key: &str| {
            reply
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Ok(RegistrationTicket {
            request_id: text("requestId").ok_or_else(|| {
                TransportError::decode("Canon registration did not return a requestId")
            })?,
            poll_token: text("pollToken"),
        })
    }

    /// `GET /agents/status/{requestId}` (canon-wire.md §1.4; poll-token header when issued).
    pub async fn poll_registration(
        &self,
        ticket: &RegistrationTicket,
    ) -> Result<RegistrationStatus, TransportError> {
        let url = format!(
            "{}/agents/status/{}",
            self.inner.base_url,
            encode_segment(&ticket.request_id)
        );
        let headers: Vec<(&str, &str)> = ticket
            .poll_token
            .iter()
            .map(|t| ("x-canon-poll-token", t.as_str()))
            .collect();
        let request = self.build(Method::GET, &url, false, None, &headers)?;
        let raw = self
            .exchange(request, REGISTRATION_TIMEOUT, Classifier::Report)
            .await?;
        Ok(RegistrationStatus::from_object(&decode_object(&raw.body)?))
    }

    /// `POST /agents/status/{requestId}/ack` (canon-wire.md §1.4; no body).
    pub async fn ack_registration(
        &self,
        ticket: &RegistrationTicket,
    ) -> Result<(), TransportError> {
        let url = format!(
            "{}/agents/status/{}/ack",
            self.inner.base_url,
            encode_segment(&ticket.request_id)
        );
        let headers: Vec<(&str, &str)> = ticket
            .poll_token
            .iter()
            .map(|t| ("x-canon-poll-token", t.as_str()))
            .collect();
        let request = self.build(Method::POST, &url, false, None, &headers)?;
        self.exchange(request, REGISTRATION_TIMEOUT, Classifier::Report)
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn config_debug_redacts_the_key() {
        let config = ClientConfig::new("https://a", "https://s", ApiKey::new("sk-very-secret"));
        let shown = format!("{config:?}");
        assert!(
            shown.contains("https://a") && !shown.contains("very-secret"),
            "{shown}"
        );
        let client = CanonClient::new(config).unwrap();
        assert!(!format!("{client:?}").contains("very-secret"));
    }

    #[test]
    fn a_durable_request_shows_no_body_in_debug() {
        let mut envelope = Map::new();
        envelope.insert("conversationId".into(), json!("c1"));
        let mut value = Map::new();
        value.insert(
            "replyAuthority".into(),
            json!({"token": "secret-token-123"}),
        );
        let request = DurableRequest::verb("send_to", envelope, value).unwrap();
        assert!(String::from_utf8_lossy(request.body()).contains("secret-token-123"));
        let shown = format!("{request:?}");
        assert!(!shown.contains("secret-token-123"), "{shown}");
        assert!(shown.contains("body_bytes"), "{shown}");
    }

    #[test]
    fn directory_page_shape() {
        let ok = |v: Value| directory_page_ok(v.as_object().unwrap());
        assert!(ok(json!({"agents":[],"nextCursor":null})));
        assert!(ok(
            json!({"agents":[{"principalId":"p","shareable":false,"owner":{"principalId":"o"}}],"nextCursor":"c"})
        ));
        assert!(!ok(json!({"agents":[]})));
        assert!(!ok(
            json!({"agents":[{"principalId":" ","shareable":false,"owner":{"principalId":"o"}}],"nextCursor":null})
        ));
        assert!(!ok(
            json!({"agents":[{"principalId":"p","shareable":false,"owner":{}}],"nextCursor":null})
        ));
        assert!(!ok(json!({"agents":{},"nextCursor":null})));
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(input.as_bytes()), expected);
        }
        assert_eq!(base64_encode(&[0xff, 0xfe, 0xfd]), "//79");
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(encode_segment("conv-1.a_b~"), "conv-1.a_b~");
        assert_eq!(encode_segment("a/b c?é"), "a%2Fb%20c%3F%C3%A9");
    }

    #[test]
    fn verb_response_checks_use_exact_messages() {
        let check = |value: Value, expected: &str| {
            let err = verb_result("send_to", value).unwrap_err();
            assert_eq!(err.to_string(), expected);
            assert!(!err.is_retryable());
        };
        check(json!([]), "Canon verb response must be an object");
        check(
            json!({"wire":"v0"}),
            "Canon verb response has an unexpected wire version",
        );
        check(
            json!({"wire":VERB_WIRE,"verb":"forward"}),
            "Canon verb response does not match the requested verb",
        );
        check(
            json!({"wire":VERB_WIRE,"verb":"send_to","result":{"encoding":"mls"}}),
            "Canon verb response does not contain a JSON result",
        );
        check(
            json!({"wire":VERB_WIRE,"verb":"send_to","result":{"encoding":"json","value":[1]}}),
            "Canon verb JSON result must be an object",
        );
        let ok = verb_result(
            "send_to",
            json!({"wire":VERB_WIRE,"verb":"send_to","result":{"encoding":"json","value":{"status":"messaged"}}}),
        );
        assert_eq!(ok.unwrap()["status"], "messaged");
    }

    #[test]
    fn decoding_rules() {
        assert_eq!(decode_object(b"").unwrap(), Map::new());
        assert_eq!(decode_object(b"[1]").unwrap(), Map::new());
        assert!(matches!(
            decode_object(b"{bad"),
            Err(TransportError::Decode { .. })
        ));
        assert!(matches!(
            decode_object(b"\xff"),
            Err(TransportError::Protocol { .. })
        ));
    }

    #[test]
    fn base_urls_are_cleaned_and_checked() {
        assert_eq!(
            clean_base(" https://api.example.com/ ").unwrap(),
            "https://api.example.com"
        );
        assert!(clean_base("ftp://x").is_err());
        assert!(clean_base("not a url").is_err());
    }

    /// canon-wire.md §1.1: the key is sent only over HTTPS, or plain HTTP to the local host.
    #[test]
    fn plain_http_is_refused_except_on_the_local_host() {
        for url in [
            "https://api.canonmail.com",
            "HTTPS://api.example/",
            "http://127.0.0.1:8080",
            "http://localhost:9/",
            "http://[::1]:9",
        ] {
            assert!(clean_base(url).is_ok(), "{url}");
        }
        for (url, shown) in [
            ("http://api.canonmail.com", "http://api.canonmail.com"),
            ("http://user:pw@10.0.0.1:80/v1", "http://10.0.0.1"),
            ("http://127.0.0.2", "http://127.0.0.2"),
            ("http://localhost.example", "http://localhost.example"),
        ] {
            let error = clean_base(url).expect_err(url);
            assert!(matches!(error, TransportError::InvalidRequest { .. }));
            assert_eq!(
                error.to_string(),
                format!(
                    "invalid request: Canon base url {shown} must use HTTPS \
                     (plain HTTP only on localhost, 127.0.0.1 or ::1)"
                ),
                "{url}"
            );
            let config = ClientConfig::new(url, "https://stream.example", ApiKey::new("k"));
            assert!(CanonClient::new(config).is_err(), "{url}");
            let config = ClientConfig::new("https://api.example", url, ApiKey::new("k"));
            assert!(CanonClient::new(config).is_err(), "{url}");
        }
    }

    #[test]
    fn durable_request_keeps_bytes_and_picks_classifier() {
        let message = SendMessage {
            conversation_id: "c".into(),
            text: "héllo".into(),
            message_id: Some("hermes-final-x".into()),
            ..SendMessage::default()
        };
        let request = DurableRequest::message(&message).unwrap();
        assert_eq!(
            request.body(),
            r#"{"conversationId":"c","text":"héllo","messageId":"hermes-final-x"}"#.as_bytes()
        );
        assert_eq!(request.classifier(), Classifier::IdempotentWrite);
        let anonymous = DurableRequest::message(&SendMessage::default()).unwrap();
        assert_eq!(anonymous.classifier(), Classifier::UnsafeWrite);
        let mut envelope = Map::new();
        envelope.insert("idempotencyKey".into(), "k1".into());
        let verb = DurableRequest::verb("send_to", envelope, Map::new()).unwrap();
        assert_eq!(verb.client_id(), Some("k1"));
    }

    #[test]
    fn configured_schedule_yields_to_longer_retry_after() {
        use canon_wire::retry::FailureKind;
        let fast = [Duration::from_millis(1), Duration::from_millis(2)];
        let delay = |attempt, status, after| {
            durable_retry_delay_with(fast, attempt, FailureKind::Http { status }, after)
        };
        assert_eq!(delay(1, 500, None), Duration::from_millis(1));
        assert_eq!(
            delay(2, 429, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(
            delay(2, 503, Some(Duration::from_secs(99))),
            Duration::from_secs(30)
        );
    }
}
