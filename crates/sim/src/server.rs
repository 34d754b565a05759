//! The hyper server: loopback listener, per-connection tasks, fault application, journaling,
//! and dispatch to the REST handlers ([`crate::api`]), the stream ([`crate::stream`]) and the
//! control API ([`crate::control`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::body::{Aborted, SimBody};
use crate::config::SimConfig;
use crate::error::SimError;
use crate::faults::{FaultAction, MalformedKind, RequestFacts};
use crate::http::{ApiRequest, Reply, ReplyBody};
use crate::journal::JournalEntry;
use crate::shared::Shared;
use crate::state::State;

/// Largest request body accepted (a 10 MiB upload is ≈ 13.4 MiB of JSON).
pub const MAX_REQUEST_BODY: usize = 16 * 1024 * 1024;

/// What [`start`] returns: the shared state, the REST address, the stream address (the same
/// unless `separate_stream_port` is set) and the stop switch.
pub(crate) type Started = (Arc<Shared>, SocketAddr, SocketAddr, watch::Sender<bool>);

async fn bind(port: u16) -> Result<(TcpListener, SocketAddr), SimError> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|source| SimError::Bind { port, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| SimError::Bind { port, source })?;
    if !addr.ip().is_loopback() {
        return Err(SimError::NotLoopback {
            addr: addr.to_string(),
        });
    }
    Ok((listener, addr))
}

/// Binds 127.0.0.1:`port` (and a second loopback port for the stream when configured) and
/// starts serving.
pub(crate) async fn start(config: SimConfig) -> Result<Started, SimError> {
    // Build the TLS acceptor first: a bad certificate fails before anything listens.
    let tls = config.tls.as_ref().map(crate::tls::acceptor).transpose()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let (listener, addr) = bind(config.port).await?;
    let second = if config.separate_stream_port {
        Some(bind(0).await?)
    } else {
        None
    };
    let stream_addr = second.as_ref().map_or(addr, |(_, a)| *a);
    let origin = format!("{scheme}://127.0.0.1:{}", addr.port());
    let stream_origin = format!("{scheme}://127.0.0.1:{}", stream_addr.port());
    let mut state = State::new(config, origin);
    state.stream_origin = stream_origin;
    let shared = Arc::new(Shared::new(state));
    let (stop_tx, stop_rx) = watch::channel(false);
    spawn_accept(
        listener,
        tls.clone(),
        Arc::clone(&shared),
        stop_rx.clone(),
        0,
    );
    if let Some((l, _)) = second {
        spawn_accept(l, tls, Arc::clone(&shared), stop_rx, 1 << 32);
    }
    Ok((shared, addr, stream_addr, stop_tx))
}

/// Accepts connections until the stop switch flips. Connection ids start at `first_conn + 1`.
/// With `tls`, each connection is served after its TLS handshake (bounded by
/// [`crate::tls::HANDSHAKE_TIMEOUT`]); a failed handshake only ends that connection.
fn spawn_accept(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    first_conn: u64,
) {
    tokio::spawn(async move {
        let mut next_conn = first_conn;
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    next_conn += 1;
                    let conn_id = next_conn;
                    let shared = Arc::clone(&shared);
                    let tls = tls.clone();
                    tokio::spawn(async move {
                        match tls {
                            None => serve(stream, shared, conn_id).await,
                            Some(acceptor) => {
                                let handshake = tokio::time::timeout(
                                    crate::tls::HANDSHAKE_TIMEOUT,
                                    acceptor.accept(stream),
                                );
                                match handshake.await {
                                    Ok(Ok(stream)) => serve(stream, shared, conn_id).await,
                                    Ok(Err(e)) => {
                                        tracing::debug!(conn_id, error = %e, "TLS handshake failed");
                                    }
                                    Err(_) => {
                                        tracing::debug!(conn_id, "TLS handshake timed out");
                                    }
                                }
                            }
                        }
                    });
                }
            }
        }
    });
}

/// Serves HTTP/1.1 on one accepted (plain or TLS) connection until it ends.
async fn serve<S>(stream: S, shared: Arc<Shared>, conn_id: u64)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let shared = Arc::clone(&shared);
        async move { handle(shared, conn_id, req).await }
    });
    if let Err(e) = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(conn_id, error = %e, "connection ended with an error");
    }
}

fn to_response(reply: &Reply) -> Response<SimBody> {
    let mut builder = Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let body = match &reply.body {
        ReplyBody::Json(v) => {
            builder = builder.header("content-type", "application/json");
            SimBody::full(v.to_string())
        }
        ReplyBody::Bytes(b, ct) => {
            builder = builder.header("content-type", ct.as_str());
            SimBody::full(b.clone())
        }
    };
    builder
        .body(body)
        .unwrap_or_else(|_| Response::new(SimBody::full("")))
}

fn journal_body(path: &str, body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(mut v) => {
            if path == "/media/upload" {
                if let Some(len) = v.get("data").and_then(Value::as_str).map(str::len) {
                    v["data"] = json!(format!("<{len} base64 chars>"));
                }
            }
            v
        }
        Err(_) => Value::String(String::from_utf8_lossy(body).into_owned()),
    }
}

fn conversation_of(req: &ApiRequest) -> Option<String> {
    if let Some(c) = req
        .json()
        .as_ref()
        .and_then(|v| v.get("conversationId"))
        .and_then(Value::as_str)
    {
        return Some(c.to_owned());
    }
    let segs: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["conversations", c, ..] => Some((*c).to_owned()),
        _ => None,
    }
}

fn malformed(kind: MalformedKind, reply: &Reply) -> Response<SimBody> {
    let verb = reply
        .json_body()
        .get("verb")
        .cloned()
        .unwrap_or(Value::Null);
    let text = match kind {
        MalformedKind::InvalidJson => "{not json".to_owned(),
        MalformedKind::Array => "[]".to_owned(),
        MalformedKind::Empty => String::new(),
        MalformedKind::WrongWire => json!({"wire": "canon.verb-wire.v0", "verb": verb, "result": {"encoding": "json", "value": {}}}).to_string(),
        MalformedKind::WrongVerb => json!({"wire": "canon.verb-wire.v1", "verb": "react", "result": {"encoding": "json", "value": {}}}).to_string(),
        MalformedKind::NonObjectValue => json!({"wire": "canon.verb-wire.v1", "verb": verb, "result": {"encoding": "json", "value": [1]}}).to_string(),
    };
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(SimBody::full(text))
        .unwrap_or_else(|_| Response::new(SimBody::full("")))
}

async fn handle(
    shared: Arc<Shared>,
    conn_id: u64,
    req: Request<Incoming>,
) -> Result<Response<SimBody>, Aborted> {
    let (parts, body) = req.into_parts();
    let bytes: Bytes = match Limited::new(body, MAX_REQUEST_BODY).collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => {
            let reply = Reply::error(413, "PAYLOAD_TOO_LARGE", "request body too large");
            return Ok(to_response(&reply));
        }
    };
    let arrived_unix_us = crate::journal::unix_us_now();
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let req = ApiRequest {
        method: parts.method.as_str().to_ascii_uppercase(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or("").to_owned(),
        headers,
        body: bytes.to_vec(),
    };
    if req.path.starts_with("/__sim/") || req.path == "/__sim" {
        let reply = crate::control::handle(&shared, &req).await;
        return Ok(to_response(&reply));
    }
    let conversation = conversation_of(&req);
    let (principal, action, now, latency) = shared.with(|s| {
        let principal = req
            .bearer()
            .and_then(|k| s.principal_for_key(k))
            .map(|p| p.id.clone());
        let facts = RequestFacts {
            method: &req.method,
            path: &req.path,
            agent: principal.as_deref(),
            conversation: conversation.as_deref(),
        };
        let mut ids = s.ids.clone();
        let action = s.faults.take(&facts, &mut || {
            (ids.next_u64() >> 11) as f64 / (1u64 << 53) as f64
        });
        let switches = &s.config.switches;
        let jitter = match switches.rest_jitter_ms {
            0 => 0,
            most => ids.next_u64() % (most + 1),
        };
        let latency = Duration::from_millis(switches.rest_latency_ms + jitter);
        s.ids = ids;
        if req.path.starts_with("/files/") && req.header("authorization").is_some() {
            crate::state::push_bounded(&mut s.media_auth_seen, conn_id, crate::state::HISTORY_CAP);
        }
        (principal, action, s.now(), latency)
    });
    // The way in: the request reaches Canon half a round trip after it was sent.
    let (way_in, way_back) = (latency / 2, latency - latency / 2);
    if !way_in.is_zero() {
        tokio::time::sleep(way_in).await;
    }
    let journal = |status: u16, response: Value| {
        let headers = req
            .headers
            .iter()
            .map(|(k, v)| {
                if k == "authorization" {
                    (
                        k.clone(),
                        format!("Bearer {}", principal.as_deref().unwrap_or("<unknown>")),
                    )
                } else {
                    (k.clone(), v.clone())
                }
            })
            .collect();
        let entry = JournalEntry {
            seq: 0,
            method: req.method.clone(),
            path: req.path.clone(),
            query: req.query.clone(),
            headers,
            body: journal_body(&req.path, &req.body),
            status,
            response,
            at_ms: now,
            arrived_unix_us,
            connection_id: conn_id,
            principal: principal.clone(),
        };
        shared.with(|s| s.journal.push(entry));
    };
    // Actions that act before processing.
    match &action {
        Some(FaultAction::Status {
            status,
            body,
            retry_after,
            headers,
        }) => {
            let body = body
                .clone()
                .unwrap_or_else(|| json!({"error": "injected fault", "code": "SIM_FAULT"}));
            let mut reply = Reply::json(*status, body);
            if let Some(r) = retry_after {
                reply = reply.with_header("retry-after", &r.to_string());
            }
            for (k, v) in headers {
                reply = reply.with_header(k, v);
            }
            journal(*status, reply.json_body());
            return Ok(to_response(&reply));
        }
        Some(FaultAction::Drop) => {
            journal(0, Value::Null);
            return Err(Aborted);
        }
        Some(FaultAction::DelayBefore { ms }) => {
            tokio::time::sleep(Duration::from_millis(*ms)).await
        }
        Some(FaultAction::Stall { ms }) => {
            tokio::time::sleep(Duration::from_millis(*ms)).await;
            journal(0, Value::Null);
            return Err(Aborted);
        }
        _ => {}
    }
    if req.method == "GET" && req.path == "/agents/stream" {
        let sse = match &action {
            Some(FaultAction::Sse(f)) => Some(f.clone()),
            _ => None,
        };
        let agent = shared.read(|s| crate::checks::authenticate(s, &req));
        if !way_back.is_zero() {
            tokio::time::sleep(way_back).await;
        }
        return match agent {
            Ok(agent) => {
                journal(200, Value::Null);
                Ok(crate::stream::open(
                    shared.clone(),
                    conn_id,
                    agent,
                    req.header("last-event-id").map(str::to_owned),
                    sse,
                ))
            }
            Err(reply) => {
                journal(reply.status, reply.json_body());
                Ok(to_response(&reply))
            }
        };
    }
    let reply = shared
        .with(|s| crate::api::handle(s, &req))
        .unwrap_or_else(|| Reply::error(404, "NOT_FOUND", "no such endpoint"));
    // The way back: the answer reaches the client half a round trip after Canon processed it.
    if !way_back.is_zero() {
        tokio::time::sleep(way_back).await;
    }
    match action {
        Some(FaultAction::ProcessThenStatus { status }) => {
            let r = Reply::error(status, "SIM_FAULT", "injected fault after processing");
            journal(status, r.json_body());
            Ok(to_response(&r))
        }
        Some(FaultAction::ProcessThenDrop) => {
            journal(0, reply.json_body());
            Err(Aborted)
        }
        Some(FaultAction::DelayAfter { ms }) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            journal(reply.status, reply.json_body());
            Ok(to_response(&reply))
        }
        Some(FaultAction::Malformed { kind }) => {
            journal(200, Value::Null);
            Ok(malformed(kind, &reply))
        }
        Some(FaultAction::ResetMidBody) => {
            journal(0, reply.json_body());
            let full = match &reply.body {
                ReplyBody::Json(v) => v.to_string().into_bytes(),
                ReplyBody::Bytes(b, _) => b.clone(),
            };
            let half = full[..full.len() / 2].to_vec();
            let (tx, body) = SimBody::channel();
            tokio::spawn(async move {
                let _ = tx.send(Ok(Bytes::from(half))).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
                let _ = tx.send(Err(Aborted)).await;
            });
            Ok(Response::builder()
                .status(reply.status)
                .header("content-length", full.len().to_string())
                .body(body)
                .unwrap_or_else(|_| Response::new(SimBody::full(""))))
        }
        Some(FaultAction::Drip {
            chunk_bytes,
            delay_ms,
        }) => {
            journal(reply.status, reply.json_body());
            let (content_type, full) = match &reply.body {
                ReplyBody::Json(v) => ("application/json".to_owned(), v.to_string().into_bytes()),
                ReplyBody::Bytes(b, ct) => (ct.clone(), b.clone()),
            };
            let mut builder = Response::builder()
                .status(reply.status)
                .header("content-type", content_type)
                .header("content-length", full.len().to_string());
            for (k, v) in &reply.headers {
                builder = builder.header(k.as_str(), v.as_str());
            }
            let (tx, body) = SimBody::channel();
            tokio::spawn(async move {
                for piece in full.chunks(chunk_bytes.max(1)) {
                    if tx.send(Ok(Bytes::copy_from_slice(piece))).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                }
            });
            Ok(builder
                .body(body)
                .unwrap_or_else(|_| Response::new(SimBody::full(""))))
        }
        Some(FaultAction::OversizeBody {
            bytes,
            content_length,
        }) => {
            journal(200, Value::Null);
            let (tx, body) = SimBody::channel();
            tokio::spawn(async move {
                let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len() as u64);
                    if tx
                        .send(Ok(chunk.slice(..usize::try_from(n).unwrap_or(0))))
                        .await
                        .is_err()
                    {
                        break;
                    }
                    left -= n;
                }
            });
            let mut b = Response::builder()
                .status(200)
                .header("content-type", "application/octet-stream");
            if content_length {
                b = b.header("content-length", bytes.to_string());
            }
            Ok(b.body(body)
                .unwrap_or_else(|_| Response::new(SimBody::full(""))))
        }
        _ => {
            journal(reply.status, reply.json_body());
            Ok(to_response(&reply))
        }
    }
}
