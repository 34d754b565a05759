//! The shim ⇄ daemon protocol: JSON lines over the child's stdin and stdout
//! (hermes-host.md §19). Only this crate knows it (style.md §6.2).
//!
//! # Framing
//!
//! Each frame is one JSON object, serialized compactly in UTF-8 and ended by
//! a single LF (`0x0A`). There is no BOM and no raw newline inside a frame
//! (JSON escapes them); CR is not a separator. A frame is at most
//! [`MAX_FRAME_BYTES`] bytes including its LF; a receiver that reads a
//! longer line discards it and, when it can recover an `id`, answers
//! `frame_too_large`. File contents never travel inline: media move as
//! absolute paths.
//!
//! # Envelope
//!
//! | Field | In | Type | Meaning |
//! |---|---|---|---|
//! | `v` | all | int | protocol version of the frame ([`PROTOCOL_VERSION`]) |
//! | `type` | requests, notifications | string | the message type |
//! | `id` | requests and their responses | string | `s:<n>` from the shim, `d:<n>` from the daemon; counters start at 1 per child epoch and never repeat in it |
//! | `re` | responses | string | the request's `type`, for diagnostics |
//! | `ok` | responses | bool | success |
//! | `body` | all but error responses | object | the payload (types below) |
//! | `error` | responses with `ok:false` | object | [`ErrorBody`] `{code, message, retryable}` |
//!
//! A frame with `id` and `type` is a **request** and gets exactly one
//! **response** (`id` and `ok`) from the other side, in any order. A frame
//! with `type` and no `id` is a **notification** and gets no answer.
//! [`decode_frame`] classifies a line into a [`Frame`]; the typed bodies are
//! decoded per direction with [`ShimRequest::from_parts`],
//! [`ShimNotification::from_parts`], [`DaemonRequest::from_parts`] and
//! [`DaemonNotification::from_parts`], and a response body with the
//! `from_parts` of the matching response enum ([`ShimResponse`],
//! [`DaemonResponse`]), keyed by the request type.
//!
//! # Message kinds
//!
//! Shim → daemon requests ([`ShimRequest`], shim timeout in brackets, also
//! [`SHIM_TIMEOUTS`]):
//! `hello` (10 s), `probe` (5 s), `adapter.connect` (28 s),
//! `adapter.disconnect` (10 s), `adapter.send` and `adapter.edit` (120 s),
//! `adapter.send_media` (300 s), `adapter.send_clarify` and
//! `adapter.send_exec_approval` (14 s), `adapter.chat_info` (10 s),
//! `turn.start`, `turn.accepted` (30 s), `turn.complete` (600 s; the final
//! publish happens inside it), `tool.call` (1,860 s for
//! `canon_runtime_control`, else 120 s), `standalone.send` (120 s), `resync`
//! (30 s), `shutdown` (5 s), `api.inbound_media` (30 s; additive), `api.call` (1,860 s;
//! additive: the domain-plugin card helpers and `validate_card`).
//!
//! `api.inbound_media {ctx}` serves the domain-plugin call
//! `current_canon_inbound_media()` (runtime-control.md §7.6): the answer is
//! `{media: [{message_id, attachment_index, mime_type, file_name, path,
//! size_bytes}]}`, the batch captured for the context's conversation and
//! message, each attachment as a new 0600 file under `<CANON_HOME>/tmp/`
//! that the shim reads and deletes, or `{error}` with the exact text of
//! runtime-control.md §7.6 when the context is no Canon turn or has no
//! message id.
//!
//! `turn.start` and `turn.accepted` both answer `{turn_id}`: the shim keeps
//! each open turn, dequeued follow-ups included, until its `turn.complete` or
//! the next boundary, and hands them back in `resync` after a respawn.
//! (`turn.accepted` answered `{}` before; the id was added without a version
//! bump, hermes-host.md §19.5.) The shim sends `turn.accepted` at the dequeue
//! itself; Hermes dequeues before the previous answer's final edits, so the
//! daemon answers the new id at once and performs the boundary when the
//! follow-up's output starts (its first send replying to it, a hook, the next
//! dequeue or `turn.complete`). Its additive `interrupted` field says the shim
//! interrupted the running agent for the follow-up: the previous turn then
//! closes as cancelled (the shim no longer sends a `turn.complete` for it).
//!
//! Shim → daemon notifications ([`ShimNotification`]): `typing`,
//! `hook.pre_tool_call`, `hook.post_tool_call`, `hook.subagent_stop`,
//! `queue.depth`, `turn.steered` (the busy dispatcher's `agent.steer` took an
//! `interleave` message; clears the turn's `no_reply` silence,
//! hermes-host.md §12.3 step 5; additive). Hook notifications never block the
//! agent thread; the shim drops them when its queue is full and truncates
//! `args` and `result` to 16,384 code points.
//!
//! Daemon → shim requests ([`DaemonRequest`]): `inbound.message`,
//! `control.signal`, `approval.resolve`, `clarify.resolve`,
//! `host.queue_depth`. Notifications ([`DaemonNotification`]):
//! `typing.pause`, `typing.resume`, `adapter.fatal`, `adapter.status`,
//! `tool.availability` (`{name, available}`, additive: sent when the
//! daemon's verdict on a tool changes, so the shim's `check_fn` answers
//! from the latest one without a round trip; runtime-control.md §5.1),
//! `turn.closed` (`{session_key, turn_id}`, additive: a turn a dequeue
//! boundary closed delivered its final, or with none published its closing
//! state; hermes-host.md §19.10).
//!
//! # Handshake and versioning
//!
//! The shim's first frame is `hello`; the daemon answers any other request
//! before it with `handshake_required`. [`negotiate`] applies the rules of
//! hermes-host.md §19.5: highest common protocol (none → `unsupported_protocol`,
//! and the daemon exits with [`EXIT_UNSUPPORTED_PROTOCOL`]); a binary version or
//! manifest hash that differs → `stale_shim`; a host outside the audited pair,
//! or a multiplexing gateway → `unsupported_host`. The version changes only for
//! incompatible changes; new fields and types are additive.
//!
//! # Ordering
//!
//! Each side writes frames from one writer, so notifications keep their
//! order relative to requests. The daemon keeps one ordered lane per chat id
//! for `adapter.send`, `adapter.edit` and `turn.*`; other requests are
//! served concurrently, so responses may come back in any order.
//!
//! # Errors
//!
//! An unknown request `type` is answered `unknown_type`; an unknown
//! notification is ignored (logged once per type). Unknown body fields are
//! ignored; a missing required field or a wrongly typed one is answered
//! `bad_request`. The codes are [`ErrorCode`]. Secrets (API keys, tokens,
//! approval reasons) and opaque host JSON print redacted from `Debug`
//! (`canon_wire::secret`), and decoding errors never quote field values.
//!
//! # Where the types live
//!
//! The frame functions, the constants and the error types are here; the message bodies are
//! split by direction into the private modules `shapes` (the shapes both directions share),
//! `handshake` (`hello`, its answer and [`negotiate`]), `shim` (shim → daemon requests, their
//! responses and the shim's notifications) and `daemon` (daemon → shim requests, their
//! responses and the daemon's notifications). Everything public is re-exported from this
//! module, so every type is named `canon_host::protocol::<Type>`.

#[macro_use]
mod macros;

mod daemon;
mod handshake;
mod shapes;
mod shim;

pub use daemon::*;
pub use handshake::*;
pub use shapes::*;
pub use shim::*;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The protocol version this crate speaks (hermes-host.md §19.4).
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest frame, LF included, in bytes (hermes-host.md §19.4).
pub const MAX_FRAME_BYTES: usize = 8_388_608;

/// Most requests the shim keeps in flight (hermes-host.md §19.9).
pub const MAX_INFLIGHT: u32 = 64;

/// Daemon exit code after `unsupported_protocol` (hermes-host.md §19.5).
pub const EXIT_UNSUPPORTED_PROTOCOL: i32 = 78;

/// The `stale_shim` message (hermes-host.md §19.5; exact).
pub const STALE_SHIM_MESSAGE: &str = "Canon Hermes shim is out of date; run canon-hermes install";

/// The `hermes-agent` version the shim must run on (hermes-host.md §16).
/// The one pinned constant of the supported host; the shim's
/// `_constants.py` is tied to it by `crates/cli/tests/it/shim_constants.rs`.
pub const AUDITED_HERMES: &str = "0.19.0";

/// The Python `major.minor` the shim must run on (hermes-host.md §16).
pub const AUDITED_PYTHON: &str = "3.11";

/// The turn context's `platform` inside a Canon turn (hermes-host.md §19.6).
pub const PLATFORM: &str = "canon";

/// The multiplex refusal (hermes-host.md §16; exact).
pub const MULTIPLEX_MESSAGE: &str = "Canon cannot start while Hermes gateway.multiplex_profiles is enabled. The Canon adapter still uses process-global profile, credential, and hook state, so multiplexing could cross profile boundaries. Set gateway.multiplex_profiles: false and run one Hermes gateway process per Canon profile.";

/// How long the shim waits for the answer to each request type it sends
/// (hermes-host.md §19.6); the shim's `_constants.TIMEOUTS` mirrors it
/// (crates/cli/tests/it/shim_constants.rs). `tool.call` is left out: its
/// timeout depends on the tool (1,860 s for `canon_runtime_control`, else
/// 120 s).
pub const SHIM_TIMEOUTS: [(&str, std::time::Duration); 18] = {
    use std::time::Duration;
    [
        ("hello", Duration::from_secs(10)),
        ("probe", Duration::from_secs(5)),
        ("adapter.connect", Duration::from_secs(28)),
        ("adapter.disconnect", Duration::from_secs(10)),
        ("adapter.send", Duration::from_secs(120)),
        ("adapter.edit", Duration::from_secs(120)),
        ("adapter.send_media", Duration::from_secs(300)),
        ("adapter.send_clarify", Duration::from_secs(14)),
        ("adapter.send_exec_approval", Duration::from_secs(14)),
        ("adapter.chat_info", Duration::from_secs(10)),
        ("turn.start", Duration::from_secs(30)),
        ("turn.accepted", Duration::from_secs(30)),
        ("turn.complete", Duration::from_secs(600)),
        ("standalone.send", Duration::from_secs(120)),
        ("resync", Duration::from_secs(30)),
        ("shutdown", Duration::from_secs(5)),
        ("api.inbound_media", Duration::from_secs(30)),
        // A card helper may wait for its human up to the 30-minute ceiling
        // (runtime-control.md §7.3), and a minute more.
        ("api.call", Duration::from_secs(1860)),
    ]
};

/// Error codes of an `ok:false` response (hermes-host.md §19.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// A request arrived before `hello`.
    HandshakeRequired,
    /// No common protocol version.
    UnsupportedProtocol,
    /// Shim and binary were not installed together.
    StaleShim,
    /// Host outside the audited pair, or multiplexing.
    UnsupportedHost,
    /// Missing or wrongly typed body field.
    BadRequest,
    /// Unknown request type.
    UnknownType,
    /// The frame exceeded [`MAX_FRAME_BYTES`].
    FrameTooLarge,
    /// The writer queue or in-flight cap is full; retryable.
    Backpressure,
    /// The request timed out (set by the shim).
    Timeout,
    /// No adapter is connected.
    NotConnected,
    /// The daemon exited (set by the shim).
    DaemonExited,
    /// Canon refused; the message is safe and `retryable` follows
    /// canon-wire.md §2.5.
    CanonApi,
    /// Anything else.
    Internal,
}

/// The `error` member of an `ok:false` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The code.
    pub code: ErrorCode,
    /// A safe human-readable message.
    #[serde(default)]
    pub message: String,
    /// Whether the caller may retry.
    #[serde(default)]
    pub retryable: bool,
}

/// Why a line could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The line is longer than [`MAX_FRAME_BYTES`].
    #[error("frame of {len} bytes exceeds the limit")]
    FrameTooLarge {
        /// Its length.
        len: usize,
    },
    /// Not a JSON object.
    #[error("frame is not a JSON object")]
    NotAnObject,
    /// A `v` other than [`PROTOCOL_VERSION`].
    #[error("unsupported frame version {v}")]
    UnsupportedVersion {
        /// The version found.
        v: u64,
    },
    /// Neither a request, a notification nor a response.
    #[error("frame is neither a request, a notification nor a response")]
    NotAFrame,
    /// The `type` is not known on this side.
    #[error("unknown message type {kind}")]
    UnknownType {
        /// The type.
        kind: String,
    },
    /// The body does not fit the type.
    #[error("bad {kind} body: {reason}")]
    BadRequest {
        /// The type.
        kind: String,
        /// What is wrong; never quotes a value.
        reason: String,
    },
}

impl ProtocolError {
    /// The response code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ProtocolError::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
            ProtocolError::UnsupportedVersion { .. } => ErrorCode::UnsupportedProtocol,
            ProtocolError::UnknownType { .. } => ErrorCode::UnknownType,
            ProtocolError::NotAnObject
            | ProtocolError::NotAFrame
            | ProtocolError::BadRequest { .. } => ErrorCode::BadRequest,
        }
    }
}

/// A classified frame; bodies are still untyped.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// `id` and `type`: answer exactly once.
    Request {
        /// Correlation id.
        id: String,
        /// Message type.
        kind: String,
        /// Body (`{}` when absent).
        body: Value,
    },
    /// `type` without `id`.
    Notification {
        /// Message type.
        kind: String,
        /// Body (`{}` when absent).
        body: Value,
    },
    /// `id` and `ok`.
    Response {
        /// Correlation id.
        id: String,
        /// The request type, when echoed.
        re: Option<String>,
        /// `body` when `ok`, else `error`.
        result: Result<Value, ErrorBody>,
    },
}

/// Decodes one line (with or without its LF) into a [`Frame`].
pub fn decode_frame(line: &[u8]) -> Result<Frame, ProtocolError> {
    if line.len() > MAX_FRAME_BYTES {
        return Err(ProtocolError::FrameTooLarge { len: line.len() });
    }
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(line) else {
        return Err(ProtocolError::NotAnObject);
    };
    match object.get("v").and_then(Value::as_u64) {
        Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
        Some(v) => return Err(ProtocolError::UnsupportedVersion { v }),
        None => return Err(ProtocolError::NotAFrame),
    }
    let take_str = |object: &mut Map<String, Value>, key: &str| match object.remove(key) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    let id = take_str(&mut object, "id");
    let kind = take_str(&mut object, "type");
    let re = take_str(&mut object, "re");
    let body = match object.remove("body") {
        Some(Value::Null) | None => Value::Object(Map::new()),
        Some(body) => body,
    };
    match (id, kind, object.get("ok").and_then(Value::as_bool)) {
        (Some(id), Some(kind), _) => Ok(Frame::Request { id, kind, body }),
        (None, Some(kind), _) => Ok(Frame::Notification { kind, body }),
        (Some(id), None, Some(true)) => Ok(Frame::Response {
            id,
            re,
            result: Ok(body),
        }),
        (Some(id), None, Some(false)) => {
            let error = object
                .remove("error")
                .and_then(|e| serde_json::from_value::<ErrorBody>(e).ok())
                .unwrap_or(ErrorBody {
                    code: ErrorCode::Internal,
                    message: String::new(),
                    retryable: false,
                });
            Ok(Frame::Response {
                id,
                re,
                result: Err(error),
            })
        }
        _ => Err(ProtocolError::NotAFrame),
    }
}

/// Serializes a compact line (without the LF) from envelope parts, in the
/// field order of the envelope table.
fn envelope_line(
    kind: Option<&str>,
    id: Option<&str>,
    re: Option<&str>,
    ok: Option<bool>,
    body: Option<Value>,
    error: Option<&ErrorBody>,
) -> String {
    let mut object = Map::new();
    object.insert("v".to_owned(), Value::from(PROTOCOL_VERSION));
    if let Some(kind) = kind {
        object.insert("type".to_owned(), Value::from(kind));
    }
    if let Some(id) = id {
        object.insert("id".to_owned(), Value::from(id));
    }
    if let Some(re) = re {
        object.insert("re".to_owned(), Value::from(re));
    }
    if let Some(ok) = ok {
        object.insert("ok".to_owned(), Value::Bool(ok));
    }
    if let Some(body) = body {
        object.insert("body".to_owned(), body);
    }
    if let Some(error) = error {
        object.insert(
            "error".to_owned(),
            serde_json::to_value(error).unwrap_or(Value::Null),
        );
    }
    Value::Object(object).to_string()
}

/// The line of a request (no LF).
pub fn encode_request(id: &str, kind: &str, body: Value) -> String {
    envelope_line(Some(kind), Some(id), None, None, Some(body), None)
}

/// The line of a notification (no LF).
pub fn encode_notification(kind: &str, body: Value) -> String {
    envelope_line(Some(kind), None, None, None, Some(body), None)
}

/// The line of a response (no LF): `body` on success, `error` otherwise.
pub fn encode_response(id: &str, re: &str, result: Result<Value, &ErrorBody>) -> String {
    match result {
        Ok(body) => envelope_line(None, Some(id), Some(re), Some(true), Some(body), None),
        Err(error) => envelope_line(None, Some(id), Some(re), Some(false), None, Some(error)),
    }
}

fn decode_body<T: DeserializeOwned>(kind: &str, body: Value) -> Result<T, ProtocolError> {
    serde_json::from_value(body).map_err(|error| {
        // serde's messages may quote values (a key, a token); keep only the
        // missing-field case, which names a field and nothing else.
        let text = error.to_string();
        let reason = if text.starts_with("missing field") {
            text
        } else {
            "a field has the wrong type or value".to_owned()
        };
        ProtocolError::BadRequest {
            kind: kind.to_owned(),
            reason,
        }
    })
}

fn encode_body<T: Serialize>(body: &T) -> Value {
    // Our body types serialize to JSON objects without fallible parts.
    serde_json::to_value(body).unwrap_or(Value::Object(Map::new()))
}

#[cfg(test)]
mod tests;
