//! Daemon → shim: the requests ([`DaemonRequest`]), the success bodies of their responses
//! ([`DaemonResponse`]) and the daemon's notifications ([`DaemonNotification`]), with their
//! body types (hermes-host.md §19.7).

use serde::{Deserialize, Serialize};

use canon_wire::authority::ReplyAuthority;
use canon_wire::secret::{Opaque, Secret};

use super::{ChatRef, Empty, Fatal};

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
    /// The message's validated reply authority. The shim keeps it with the event and hands it
    /// back in `turn.start`, `turn.accepted` and `resync`, so a respawned daemon, which never
    /// saw the message, still answers it with its authority (a final replayed after a daemon
    /// kill must be the same request, authority included). Never logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_authority: Option<ReplyAuthority>,
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

/// `tool.availability`: the daemon's verdict on whether a model-facing tool is offered now
/// (runtime-control.md §5.1 for `canon_communicate`: connected, and the live outbound policy
/// `open` or `approval-required`), sent whenever it changes. The shim's `check_fn` answers from
/// the latest one. Additive in protocol 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolAvailability {
    /// The tool.
    pub name: String,
    /// Whether Hermes may offer it.
    pub available: bool,
}

/// `turn.closed`: a turn that a dequeue boundary closed (no `turn.complete` waits for it) has
/// delivered its final (or, with none, published its closing state). Until then the shim keeps that turn
/// and its answer to hand them to a respawned daemon (hermes-host.md §19.10). Additive in
/// protocol 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnClosed {
    /// The session the turn ran in.
    pub session_key: String,
    /// The closed turn.
    pub turn_id: String,
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
        /// A tool's availability changed (additive).
        "tool.availability" => ToolAvailability(ToolAvailability),
        /// A boundary-closed turn finished closing (additive).
        "turn.closed" => TurnClosed(TurnClosed),
    }
}
