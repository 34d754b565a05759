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
//! (30 s), `shutdown` (5 s).
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
//! `typing.pause`, `typing.resume`, `adapter.fatal`, `adapter.status`.
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

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use canon_wire::secret::{Opaque, Secret};

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
pub const SHIM_TIMEOUTS: [(&str, std::time::Duration); 16] = {
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

/// Defines a closed enum of message bodies keyed by their wire `type`.
macro_rules! messages {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $wire:literal => $variant:ident($body:ty), )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        // Closed on purpose: the daemon must handle every kind, so a new
        // kind fails to compile where it is not handled yet.
        // One message is decoded, handled and dropped at a time, so the size
        // of the largest body costs nothing worth a box per variant.
        #[allow(clippy::large_enum_variant)]
        pub enum $name {
            $( $(#[$vmeta])* $variant($body), )*
        }

        impl $name {
            /// Every wire `type` of this enum.
            pub const TYPES: &'static [&'static str] = &[$($wire),*];

            /// The wire `type`.
            pub fn type_name(&self) -> &'static str {
                match self {
                    $( $name::$variant(_) => $wire, )*
                }
            }

            /// Decodes a body by its `type`.
            pub fn from_parts(kind: &str, body: Value) -> Result<$name, ProtocolError> {
                match kind {
                    $( $wire => decode_body(kind, body).map($name::$variant), )*
                    other => Err(ProtocolError::UnknownType { kind: other.to_owned() }),
                }
            }

            /// The body as JSON.
            pub fn to_body(&self) -> Value {
                match self {
                    $( $name::$variant(body) => encode_body(body), )*
                }
            }
        }
    };
}

// ----- Shared shapes -----

/// The task-local turn context the shim reads from Hermes' session
/// contextvars at call time (hermes-host.md §17, §19.6); empty strings
/// become `null`. Never taken from model arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TurnContext {
    /// `HERMES_SESSION_PLATFORM`; `canon` inside a Canon turn.
    #[serde(default)]
    pub platform: Option<String>,
    /// The chat (Canon conversation) id.
    #[serde(default)]
    pub chat_id: Option<String>,
    /// The chat name.
    #[serde(default)]
    pub chat_name: Option<String>,
    /// The thread id.
    #[serde(default)]
    pub thread_id: Option<String>,
    /// The trusted sender (human only for Canon).
    #[serde(default)]
    pub user_id: Option<String>,
    /// The sender's display name.
    #[serde(default)]
    pub user_name: Option<String>,
    /// The Hermes session key.
    #[serde(default)]
    pub session_key: Option<String>,
    /// The durable session id.
    #[serde(default)]
    pub session_id: Option<String>,
    /// The triggering message id.
    #[serde(default)]
    pub message_id: Option<String>,
    /// The Hermes profile.
    #[serde(default)]
    pub profile: Option<String>,
}

/// What the daemon needs of a Hermes `MessageEvent` it did not build
/// (hermes-host.md §19.6).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EventSummary {
    /// The chat.
    pub chat_id: String,
    /// `dm`, `group`, …
    #[serde(default)]
    pub chat_type: Option<String>,
    /// The sender.
    #[serde(default)]
    pub user_id: Option<String>,
    /// The sender's name.
    #[serde(default)]
    pub user_name: Option<String>,
    /// The Canon message id.
    #[serde(default)]
    pub message_id: Option<String>,
    /// Hermes `MessageType` value.
    #[serde(default)]
    pub message_type: Option<String>,
    /// Synthetic event.
    #[serde(default)]
    pub internal: bool,
    /// Length of the text in code points.
    #[serde(default)]
    pub text_len: u64,
    /// `queue`, `interrupt`, `interleave` or `stop`.
    #[serde(default)]
    pub delivery_intent: Option<String>,
}

/// Hermes' `SendResult` (hermes-host.md §8.4).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SendResult {
    /// Success.
    pub success: bool,
    /// The message id (the turn id for staged sends).
    #[serde(default)]
    pub message_id: Option<String>,
    /// A safe error text; contains `timed out` for timeouts.
    #[serde(default)]
    pub error: Option<String>,
    /// Whether Hermes may retry.
    #[serde(default)]
    pub retryable: bool,
    /// Seconds to wait before a retry.
    #[serde(default)]
    pub retry_after: Option<f64>,
    /// `too_long`, `bad_format`, `forbidden`, `not_found`, `rate_limited`,
    /// `transient` or `unknown`.
    #[serde(default)]
    pub error_kind: Option<String>,
    /// For example `{"suppressedAuxiliary":true,"turnId":…}`.
    #[serde(default)]
    pub raw_response: Option<Value>,
}

/// Which Hermes runner seams the shim could install (hermes-host.md §12.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Seams {
    /// The busy-session dispatcher.
    #[serde(default)]
    pub busy_handler: bool,
    /// The dequeue-ack wrapper.
    #[serde(default)]
    pub dequeue_ack: bool,
}

/// An empty body, `{}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Empty {}

/// A body naming one chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatRef {
    /// The chat.
    pub chat_id: String,
}

/// A non-retryable or retryable adapter fatal (hermes-host.md §8.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fatal {
    /// `missing_api_key`, `auth_failed`, `connect_failed`, …
    pub code: String,
    /// A safe message.
    pub message: String,
    /// Whether the gateway should retry.
    pub retryable: bool,
}

// ----- Shim → daemon requests and their responses -----

/// `hello` (hermes-host.md §19.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Protocol versions the shim speaks.
    pub protocols: Vec<u32>,
    /// SHA-256 of the manifest the shim loaded.
    pub manifest_sha256: String,
    /// The shim's version.
    pub shim_version: String,
    /// The binary version the manifest pins.
    pub binary_version: String,
    /// `hermes-agent` version.
    pub hermes_version: String,
    /// Python version, e.g. `3.11.7`.
    pub python_version: String,
    /// The shim's process id.
    pub pid: u32,
    /// The resolved `HERMES_HOME`.
    pub hermes_home: String,
    /// The active profile.
    #[serde(default)]
    pub profile_name: Option<String>,
    /// Whether `gateway.multiplex_profiles` is active.
    #[serde(default)]
    pub multiplex_active: bool,
    /// Seams (filled at connect; false in hello).
    #[serde(default)]
    pub seams: Seams,
}

/// `hello` success body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloOk {
    /// The chosen protocol.
    pub protocol: u32,
    /// The daemon's version.
    pub daemon_version: String,
    /// A random 16-hex epoch of this child.
    pub epoch: String,
    /// Limits.
    pub limits: Limits,
}

/// Limits announced at handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// [`MAX_FRAME_BYTES`].
    pub max_frame_bytes: u64,
    /// [`MAX_INFLIGHT`].
    pub max_inflight: u32,
}

/// The platform configuration of a probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeConfig {
    /// `platforms.canon.extra` (may hold credentials).
    #[serde(default)]
    pub extra: Opaque,
    /// The configured API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<Secret>,
    /// The configured token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// `enabled`.
    #[serde(default)]
    pub enabled: bool,
}

/// `probe`: is Canon configured (and, with `verify`, reachable)?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The configuration; `null` from `check_fn`.
    #[serde(default)]
    pub config: Option<ProbeConfig>,
    /// Whether network verification is wanted.
    #[serde(default)]
    pub verify: bool,
}

/// `probe` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// Whether credentials resolve.
    pub configured: bool,
    /// The profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The environment id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_id: Option<String>,
    /// REST base URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Stream URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_url: Option<String>,
    /// `env_enablement_fn` dict, or `null`.
    #[serde(default)]
    pub seed: Option<Opaque>,
    /// A safe error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Gateway configuration sent at connect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectConfig {
    /// `platforms.canon.extra` (may hold credentials).
    #[serde(default)]
    pub extra: Opaque,
    /// The platform's home channel object, if any.
    #[serde(default)]
    pub home_channel: Option<Value>,
    /// `typing_indicator`.
    #[serde(default)]
    pub typing_indicator: bool,
    /// `reply_to_mode`.
    #[serde(default)]
    pub reply_to_mode: Option<String>,
}

/// Host settings that shape the adapter (hermes-host.md §19.6, Q10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSettings {
    /// `approvals.mode`.
    #[serde(default)]
    pub approvals_mode: Option<String>,
    /// `approvals.timeout` in seconds.
    #[serde(default)]
    pub approvals_timeout_s: Option<f64>,
    /// `agent.clarify_timeout` in seconds.
    #[serde(default)]
    pub clarify_timeout_s: Option<f64>,
    /// `display.busy_input_mode`.
    #[serde(default)]
    pub busy_input_mode: Option<String>,
    /// Whether gateway streaming is on.
    #[serde(default)]
    pub streaming_enabled: bool,
}

/// `adapter.connect`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterConnect {
    /// A reconnect by the gateway's watcher or after a respawn.
    #[serde(default)]
    pub is_reconnect: bool,
    /// Increments per adapter object.
    pub adapter_instance: u64,
    /// Gateway configuration.
    pub config: ConnectConfig,
    /// Host settings.
    pub host: HostSettings,
    /// Installed seams.
    #[serde(default)]
    pub seams: Seams,
}

/// `adapter.connect` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectResult {
    /// Connected.
    pub connected: bool,
    /// The agent id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The agent's display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fatal: Option<Fatal>,
}

/// `adapter.disconnect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterDisconnect {
    /// The adapter object.
    pub adapter_instance: u64,
}

/// `adapter.send` (Hermes `send`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterSend {
    /// The chat.
    pub chat_id: String,
    /// The text.
    pub content: String,
    /// `reply_to`.
    #[serde(default)]
    pub reply_to: Option<String>,
    /// Hermes metadata (markers `expect_edits`, `notify`, …).
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Turn context.
    #[serde(default)]
    pub ctx: TurnContext,
}

/// `adapter.edit` (Hermes `edit_message`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterEdit {
    /// The chat.
    pub chat_id: String,
    /// The message being edited (the turn id for staged sends).
    pub message_id: String,
    /// The full new text.
    pub content: String,
    /// `finalize`.
    #[serde(default)]
    pub finalize: bool,
    /// Hermes metadata.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Turn context.
    #[serde(default)]
    pub ctx: TurnContext,
}

/// Which Hermes media method was called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaOp {
    /// `send_image` with a URL.
    ImageUrl,
    /// `send_image_file`.
    ImageFile,
    /// `send_voice`.
    Voice,
    /// `send_video`.
    Video,
    /// `send_document`.
    Document,
}

/// `adapter.send_media`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterSendMedia {
    /// The method.
    pub op: MediaOp,
    /// The chat.
    pub chat_id: String,
    /// Remote URL (`image_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Absolute local path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Caption.
    #[serde(default)]
    pub caption: Option<String>,
    /// File name (`document`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// `reply_to`.
    #[serde(default)]
    pub reply_to: Option<String>,
    /// Hermes metadata.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// MIME type, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Audio duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Turn context.
    #[serde(default)]
    pub ctx: TurnContext,
}

/// `adapter.send_clarify` (hermes-host.md §13.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterSendClarify {
    /// The chat.
    pub chat_id: String,
    /// The question.
    pub question: String,
    /// Offered choices as Hermes passes them (`None` when it passes none).
    #[serde(default)]
    pub choices: Option<Vec<Value>>,
    /// Hermes' clarify id (10 hex).
    pub clarify_id: String,
    /// The session key.
    pub session_key: String,
    /// Hermes metadata.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Turn context.
    #[serde(default)]
    pub ctx: TurnContext,
}

/// `adapter.send_exec_approval` (hermes-host.md §13.2, Q2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterSendExecApproval {
    /// The chat.
    pub chat_id: String,
    /// The (Hermes-redacted) command; kept out of `Debug` all the same.
    pub command: Secret,
    /// The session key.
    pub session_key: String,
    /// Hermes' description.
    #[serde(default)]
    pub description: Option<String>,
    /// Hermes metadata.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Whether Hermes offers the permanent tier (never offered by Canon).
    #[serde(default)]
    pub allow_permanent: bool,
    /// Whether Hermes' smart review denied the command.
    #[serde(default)]
    pub smart_denied: bool,
    /// Whether Hermes allows a session rule (hermes-host.md Q2; Hermes
    /// 0.19.0 does not pass it, absent means allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_session: Option<bool>,
    /// Turn context.
    #[serde(default)]
    pub ctx: TurnContext,
}

/// `adapter.chat_info` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatInfo {
    /// Display name.
    pub name: String,
    /// `dm` or `group`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The chat id.
    pub id: String,
}

/// `turn.start` (Hermes `on_processing_start`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStart {
    /// The daemon's reference to the event (`_canon_ref`), if it built it.
    pub event_ref: String,
    /// The session key.
    pub session_key: String,
    /// The event.
    pub event: EventSummary,
    /// The session's queue depth.
    #[serde(default)]
    pub queue_depth: u32,
    /// Events the gateway merged into this one (a picture joining a waiting
    /// message): their messages are answered with it. Additive.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absorbed_refs: Vec<String>,
}

/// `turn.start` and `turn.accepted` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStarted {
    /// The Canon turn id.
    pub turn_id: String,
}

/// `turn.accepted` (the dequeue-ack wrapper, hermes-host.md §12.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnAccepted {
    /// The dequeued event.
    pub event_ref: String,
    /// The session key.
    pub session_key: String,
    /// The event.
    pub event: EventSummary,
    /// Always `queue_dequeue` today.
    pub phase: String,
    /// Events the gateway merged into this one (as for `turn.start`).
    #[serde(default)]
    pub absorbed_refs: Vec<String>,
    /// The session's queue depth.
    #[serde(default)]
    pub queue_depth: u32,
    /// This adapter interrupted the running agent for this follow-up
    /// (`interrupt` or `stop` intent), so the previous turn closes as
    /// cancelled. Additive, without a version bump (hermes-host.md §19.5).
    #[serde(default)]
    pub interrupted: bool,
}

/// Hermes' `ProcessingOutcome` (hermes-host.md §8.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessingOutcome {
    /// Delivered, or nothing to deliver.
    Success,
    /// Failed.
    Failure,
    /// Cancelled as expected.
    Cancelled,
}

/// `turn.complete` (Hermes `on_processing_complete`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnComplete {
    /// The event.
    pub event_ref: String,
    /// The session key.
    pub session_key: String,
    /// The outcome.
    pub outcome: ProcessingOutcome,
    /// The session's queue depth.
    #[serde(default)]
    pub queue_depth: u32,
}

/// Hook identity of a tool call.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ToolHook {
    /// Hermes task id.
    #[serde(default)]
    pub task_id: Option<String>,
    /// Hermes session id.
    #[serde(default)]
    pub session_id: Option<String>,
    /// The user task, when Hermes supplies one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_task: Option<String>,
}

/// `tool.call` (a Canon tool handler).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// `canon_runtime_control` or `canon_communicate`.
    pub name: String,
    /// Model arguments (may hold approval reasons).
    #[serde(default)]
    pub args: Opaque,
    /// Turn context.
    #[serde(default)]
    pub ctx: TurnContext,
    /// Hook identity.
    #[serde(default)]
    pub hook: ToolHook,
}

/// `tool.call` result: the tool's JSON result text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The result string handed to the model.
    pub result: String,
}

/// The platform configuration of a standalone send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StandaloneConfig {
    /// `extra` (may hold credentials).
    #[serde(default)]
    pub extra: Opaque,
    /// The home channel object, if any.
    #[serde(default)]
    pub home_channel: Option<Value>,
}

/// `standalone.send` (Hermes `standalone_sender_fn`, hermes-host.md §15).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StandaloneSendRequest {
    /// Platform configuration.
    pub pconfig: StandaloneConfig,
    /// Explicit target.
    #[serde(default)]
    pub chat_id: Option<String>,
    /// The whole text.
    pub message: String,
    /// Thread id.
    #[serde(default)]
    pub thread_id: Option<String>,
    /// Absolute paths of media to upload first.
    #[serde(default)]
    pub media_files: Vec<String>,
    /// Send images as documents.
    #[serde(default)]
    pub force_document: bool,
}

/// `standalone.send` result: `{success:true, message_id}` or `{error}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandaloneResult {
    /// Present and true on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    /// Canon's id of the final part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// `Canon standalone send failed: …`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A turn the shim still holds open after a daemon respawn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTurn {
    /// The event.
    pub event_ref: String,
    /// The session key.
    pub session_key: String,
    /// The turn id from `turn.start`.
    pub turn_id: String,
    /// The event.
    pub event: EventSummary,
    /// When it started (epoch ms).
    pub started_at_ms: u64,
}

/// `resync` (hermes-host.md §19.10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resync {
    /// Whether an adapter is connected.
    pub adapter_connected: bool,
    /// Open turns.
    #[serde(default)]
    pub open_turns: Vec<OpenTurn>,
    /// Queue depth per session key.
    #[serde(default)]
    pub queue_depths: BTreeMap<String, u32>,
}

/// `shutdown`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shutdown {
    /// Why.
    #[serde(default)]
    pub reason: String,
}

messages! {
    /// A request from the shim.
    ShimRequest {
        /// Handshake.
        "hello" => Hello(Hello),
        /// Configuration probe.
        "probe" => Probe(Probe),
        /// Connect.
        "adapter.connect" => AdapterConnect(AdapterConnect),
        /// Disconnect.
        "adapter.disconnect" => AdapterDisconnect(AdapterDisconnect),
        /// Hermes `send`.
        "adapter.send" => AdapterSend(AdapterSend),
        /// Hermes `edit_message`.
        "adapter.edit" => AdapterEdit(AdapterEdit),
        /// Hermes media sends.
        "adapter.send_media" => AdapterSendMedia(AdapterSendMedia),
        /// Hermes `send_clarify`.
        "adapter.send_clarify" => AdapterSendClarify(AdapterSendClarify),
        /// Hermes `send_exec_approval`.
        "adapter.send_exec_approval" => AdapterSendExecApproval(AdapterSendExecApproval),
        /// Hermes `get_chat_info`.
        "adapter.chat_info" => AdapterChatInfo(ChatRef),
        /// `on_processing_start`.
        "turn.start" => TurnStart(TurnStart),
        /// Dequeued follow-up.
        "turn.accepted" => TurnAccepted(TurnAccepted),
        /// `on_processing_complete`.
        "turn.complete" => TurnComplete(TurnComplete),
        /// A Canon tool call.
        "tool.call" => ToolCall(ToolCall),
        /// A standalone send.
        "standalone.send" => StandaloneSend(StandaloneSendRequest),
        /// Re-attach after a respawn.
        "resync" => Resync(Resync),
        /// Gateway stop.
        "shutdown" => Shutdown(Shutdown),
    }
}

messages! {
    /// The success body of a response to a [`ShimRequest`], keyed by the
    /// request's `type`.
    ShimResponse {
        /// To `hello`.
        "hello" => Hello(HelloOk),
        /// To `probe`.
        "probe" => Probe(ProbeResult),
        /// To `adapter.connect`.
        "adapter.connect" => AdapterConnect(ConnectResult),
        /// To `adapter.disconnect`.
        "adapter.disconnect" => AdapterDisconnect(Empty),
        /// To `adapter.send`.
        "adapter.send" => AdapterSend(SendResult),
        /// To `adapter.edit`.
        "adapter.edit" => AdapterEdit(SendResult),
        /// To `adapter.send_media`.
        "adapter.send_media" => AdapterSendMedia(SendResult),
        /// To `adapter.send_clarify`.
        "adapter.send_clarify" => AdapterSendClarify(SendResult),
        /// To `adapter.send_exec_approval`.
        "adapter.send_exec_approval" => AdapterSendExecApproval(SendResult),
        /// To `adapter.chat_info`.
        "adapter.chat_info" => AdapterChatInfo(ChatInfo),
        /// To `turn.start`.
        "turn.start" => TurnStart(TurnStarted),
        /// To `turn.accepted`: the follow-up's new turn id (added in
        /// protocol 1 without a version bump, hermes-host.md §19.5).
        "turn.accepted" => TurnAccepted(TurnStarted),
        /// To `turn.complete`.
        "turn.complete" => TurnComplete(Empty),
        /// To `tool.call`.
        "tool.call" => ToolCall(ToolResult),
        /// To `standalone.send`.
        "standalone.send" => StandaloneSend(StandaloneResult),
        /// To `resync`.
        "resync" => Resync(Empty),
        /// To `shutdown`.
        "shutdown" => Shutdown(Empty),
    }
}

// ----- Shim → daemon notifications -----

/// `typing` (Hermes `send_typing` / `stop_typing`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypingNote {
    /// The chat.
    pub chat_id: String,
    /// `send_typing` (true) or `stop_typing` (false).
    pub on: bool,
    /// Hermes metadata (`status`).
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// `hook.pre_tool_call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreToolCall {
    /// Turn context (platform `canon`).
    pub ctx: TurnContext,
    /// Tool name.
    #[serde(default)]
    pub tool_name: Option<String>,
    /// Arguments (truncated by the shim).
    #[serde(default)]
    pub args: Opaque,
    /// Call id.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// Task id.
    #[serde(default)]
    pub task_id: Option<String>,
    /// Session id.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Hermes turn id (not Canon's).
    #[serde(default)]
    pub turn_id: Option<String>,
    /// API request id.
    #[serde(default)]
    pub api_request_id: Option<String>,
}

/// `hook.post_tool_call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostToolCall {
    /// Turn context.
    pub ctx: TurnContext,
    /// Tool name.
    #[serde(default)]
    pub tool_name: Option<String>,
    /// Arguments.
    #[serde(default)]
    pub args: Opaque,
    /// Result.
    #[serde(default)]
    pub result: Opaque,
    /// `ok`, `error` or `blocked`.
    #[serde(default)]
    pub status: Option<String>,
    /// Duration in ms.
    #[serde(default)]
    pub duration_ms: Option<Value>,
    /// Error type.
    #[serde(default)]
    pub error_type: Option<String>,
    /// Error message.
    #[serde(default)]
    pub error_message: Option<String>,
    /// Call id.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// Task id.
    #[serde(default)]
    pub task_id: Option<String>,
    /// Session id.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Hermes turn id.
    #[serde(default)]
    pub turn_id: Option<String>,
    /// API request id.
    #[serde(default)]
    pub api_request_id: Option<String>,
}

/// `hook.subagent_stop`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentStopNote {
    /// Turn context.
    pub ctx: TurnContext,
    /// Child session.
    #[serde(default)]
    pub child_session_id: Option<String>,
    /// Child role.
    #[serde(default)]
    pub child_role: Option<String>,
    /// Child summary.
    #[serde(default)]
    pub child_summary: Opaque,
    /// Child status.
    #[serde(default)]
    pub child_status: Option<String>,
    /// Duration in ms.
    #[serde(default)]
    pub duration_ms: Option<Value>,
}

/// `turn.steered`: the running agent accepted an `interleave` message as a
/// steer (hermes-host.md §12.3 step 5), which lifts the turn's `no_reply`
/// silence. Additive in protocol 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteeredNote {
    /// The session key of the running turn.
    pub session_key: String,
    /// The chat.
    pub chat_id: String,
}

/// `queue.depth`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDepthNote {
    /// The session key.
    pub session_key: String,
    /// The chat.
    pub chat_id: String,
    /// Head slot plus FIFO overflow.
    pub depth: u32,
}

messages! {
    /// A notification from the shim.
    ShimNotification {
        /// Typing on or off.
        "typing" => Typing(TypingNote),
        /// A tool starts.
        "hook.pre_tool_call" => PreToolCall(PreToolCall),
        /// A tool finished.
        "hook.post_tool_call" => PostToolCall(PostToolCall),
        /// A subagent stopped.
        "hook.subagent_stop" => SubagentStop(SubagentStopNote),
        /// A session queue changed.
        "queue.depth" => QueueDepth(QueueDepthNote),
        /// An interleave was accepted as a steer.
        "turn.steered" => TurnSteered(SteeredNote),
    }
}

// ----- Daemon → shim -----

/// `SessionSource` fields the shim passes to `build_source`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventSource {
    /// Conversation id.
    pub chat_id: String,
    /// Conversation name.
    #[serde(default)]
    pub chat_name: Option<String>,
    /// `group` or `dm`.
    pub chat_type: String,
    /// Sender id, only for human senders.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Sender name.
    #[serde(default)]
    pub user_name: Option<String>,
    /// Canon message id.
    #[serde(default)]
    pub message_id: Option<String>,
    /// Thread id.
    #[serde(default)]
    pub thread_id: Option<String>,
}

/// Kind of an inbound media file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    /// An image.
    Image,
    /// Audio.
    Audio,
    /// Video.
    Video,
    /// Any other file.
    Document,
}

/// An inbound media file written by the daemon (0600, under
/// `<CANON_HOME>/tmp/`); the shim moves it into Hermes' cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboundMedia {
    /// Absolute path.
    pub path: String,
    /// MIME type.
    pub mime_type: String,
    /// Kind.
    pub kind: MediaKind,
    /// Original file name.
    #[serde(default)]
    pub file_name: Option<String>,
}

/// `event.metadata` of an inbound message.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct InboundMetadata {
    /// `queue`, `interrupt`, `interleave` or `stop`.
    #[serde(
        rename = "deliveryIntent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub delivery_intent: Option<String>,
}

/// The Hermes `MessageEvent` the shim builds (hermes-host.md §8.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundEvent {
    /// Rendered text.
    pub text: String,
    /// Hermes `MessageType` value.
    pub message_type: String,
    /// Source.
    pub source: EventSource,
    /// Canon message id.
    #[serde(default)]
    pub message_id: Option<String>,
    /// `replyTo`.
    #[serde(default)]
    pub reply_to_message_id: Option<String>,
    /// Media files.
    #[serde(default)]
    pub media: Vec<InboundMedia>,
    /// Ephemeral system prompt (turns.md §9.4).
    #[serde(default)]
    pub channel_prompt: Option<String>,
    /// Held background (turns.md §9.3).
    #[serde(default)]
    pub channel_context: Option<String>,
    /// Metadata.
    #[serde(default)]
    pub metadata: InboundMetadata,
    /// The SSE payload without `replyAuthority`.
    #[serde(default)]
    pub raw: Opaque,
    /// Synthetic event.
    #[serde(default)]
    pub internal: bool,
}

/// `inbound.message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundMessage {
    /// The daemon's reference, echoed in `turn.*`.
    pub event_ref: String,
    /// The event.
    pub event: InboundEvent,
}

/// `inbound.message` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// `handle_message` returned.
    pub accepted: bool,
}

/// A runtime control signal (turns.md §10.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// `/stop`.
    Interrupt,
    /// Drop the queue, `/stop`, drop again.
    StopAndDrop,
    /// `/new`.
    NewSession,
}

/// `control.signal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlSignal {
    /// The chat.
    pub chat_id: String,
    /// Its name.
    #[serde(default)]
    pub chat_name: Option<String>,
    /// `group` or `dm`.
    pub chat_type: String,
    /// The signal.
    pub signal: Signal,
    /// Who sent it.
    #[serde(default)]
    pub updated_by: Option<String>,
}

/// Hermes approval choice (hermes-host.md §13.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalChoice {
    /// Once.
    Once,
    /// For the session.
    Session,
    /// Always (never offered by Canon, kept for completeness).
    Always,
    /// Deny.
    Deny,
}

/// `approval.resolve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalResolve {
    /// The session key.
    pub session_key: String,
    /// The choice.
    pub choice: ApprovalChoice,
    /// The human's reason (secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Secret>,
}

/// `approval.resolve` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalResolved {
    /// How many waits were resolved.
    pub resolved: i64,
}

/// `clarify.resolve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClarifyResolve {
    /// Hermes' clarify id.
    pub clarify_id: String,
    /// The answer text.
    pub response: String,
}

/// `clarify.resolve` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClarifyResolved {
    /// Whether a wait was resolved.
    pub resolved: bool,
}

/// `host.queue_depth`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostQueueDepth {
    /// The session key.
    pub session_key: String,
}

/// `host.queue_depth` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Depth {
    /// Head slot plus FIFO overflow.
    pub depth: u32,
}

/// `adapter.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterStatus {
    /// Mark connected or disconnected.
    pub connected: bool,
}

messages! {
    /// A request from the daemon.
    DaemonRequest {
        /// Hand an event to `handle_message`.
        "inbound.message" => InboundMessage(InboundMessage),
        /// Inject `/stop` or `/new`.
        "control.signal" => ControlSignal(ControlSignal),
        /// Resolve a blocking approval.
        "approval.resolve" => ApprovalResolve(ApprovalResolve),
        /// Resolve a clarify.
        "clarify.resolve" => ClarifyResolve(ClarifyResolve),
        /// Read a session's queue depth.
        "host.queue_depth" => HostQueueDepth(HostQueueDepth),
    }
}

messages! {
    /// The success body of a response to a [`DaemonRequest`].
    DaemonResponse {
        /// To `inbound.message`.
        "inbound.message" => InboundMessage(Accepted),
        /// To `control.signal`.
        "control.signal" => ControlSignal(Empty),
        /// To `approval.resolve`.
        "approval.resolve" => ApprovalResolve(ApprovalResolved),
        /// To `clarify.resolve`.
        "clarify.resolve" => ClarifyResolve(ClarifyResolved),
        /// To `host.queue_depth`.
        "host.queue_depth" => HostQueueDepth(Depth),
    }
}

messages! {
    /// A notification from the daemon.
    DaemonNotification {
        /// `pause_typing_for_chat`.
        "typing.pause" => TypingPause(ChatRef),
        /// `resume_typing_for_chat`.
        "typing.resume" => TypingResume(ChatRef),
        /// `_set_fatal_error` then `_notify_fatal_error`.
        "adapter.fatal" => AdapterFatal(Fatal),
        /// `_mark_connected` / `_mark_disconnected`.
        "adapter.status" => AdapterStatus(AdapterStatus),
    }
}

/// What the daemon checks a `hello` against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakePolicy<'a> {
    /// The daemon's version.
    pub daemon_version: &'a str,
    /// SHA-256 of the manifest the daemon would generate.
    pub manifest_sha256: &'a str,
    /// The audited `hermes-agent` version (e.g. `0.19.0`).
    pub audited_hermes: &'a str,
    /// The audited Python `major.minor` (e.g. `3.11`).
    pub audited_python: &'a str,
}

/// Applies hermes-host.md §19.5 to a `hello`: the success body with the
/// given `epoch` (16 random hex from the caller), or the error to answer.
pub fn negotiate(
    hello: &Hello,
    policy: &HandshakePolicy<'_>,
    epoch: &str,
) -> Result<HelloOk, ErrorBody> {
    let refuse = |code, message: String| ErrorBody {
        code,
        message,
        retryable: false,
    };
    let Some(protocol) = hello
        .protocols
        .iter()
        .copied()
        .filter(|p| *p == PROTOCOL_VERSION)
        .max()
    else {
        return Err(refuse(
            ErrorCode::UnsupportedProtocol,
            format!("no common protocol; the daemon speaks {PROTOCOL_VERSION}"),
        ));
    };
    if hello.binary_version != policy.daemon_version
        || hello.manifest_sha256 != policy.manifest_sha256
    {
        return Err(refuse(ErrorCode::StaleShim, STALE_SHIM_MESSAGE.to_owned()));
    }
    let python_matches = hello.python_version == policy.audited_python
        || hello
            .python_version
            .strip_prefix(policy.audited_python)
            .is_some_and(|rest| rest.starts_with('.'));
    if hello.hermes_version != policy.audited_hermes || !python_matches {
        return Err(refuse(
            ErrorCode::UnsupportedHost,
            format!(
                "Canon requires hermes-agent {} on Python {}; found {} on {}",
                policy.audited_hermes,
                policy.audited_python,
                hello.hermes_version,
                hello.python_version
            ),
        ));
    }
    if hello.multiplex_active {
        return Err(refuse(
            ErrorCode::UnsupportedHost,
            MULTIPLEX_MESSAGE.to_owned(),
        ));
    }
    Ok(HelloOk {
        protocol,
        daemon_version: policy.daemon_version.to_owned(),
        epoch: epoch.to_owned(),
        limits: Limits {
            max_frame_bytes: MAX_FRAME_BYTES as u64,
            max_inflight: MAX_INFLIGHT,
        },
    })
}

#[cfg(test)]
mod tests;
