//! The shapes both directions share (hermes-host.md §19.6, §19.7): the turn context, event
//! summaries, Hermes' `SendResult`, the installed seams, the empty body, a chat reference and
//! an adapter fatal.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
