//! Shim → daemon: the requests ([`ShimRequest`]), the success bodies of their responses
//! ([`ShimResponse`]) and the shim's notifications ([`ShimNotification`]), with their body
//! types (hermes-host.md §19.6). `hello` and its answer are in `handshake.rs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use canon_wire::secret::{Opaque, Secret};

use super::{ChatRef, Empty, EventSummary, Fatal, Hello, HelloOk, Seams, SendResult, TurnContext};

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
    /// `api_key` of the platform config (read after `CANON_API_KEY`,
    /// cli.md §5.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<Secret>,
    /// `token` of the platform config (read when `api_key` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
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
    /// The shim's key of this invocation (32 lowercase hex), the same when the
    /// shim sends it once more to a respawned daemon. A send that resolves to
    /// no turn id derives its standalone id group from it, so that resend
    /// lands on the Canon messages the first attempt may have stored
    /// (turns.md §4.6). Absent or malformed: a fresh group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_key: Option<String>,
    /// The text is a stopping gateway's refusal of a message ("not accepting new work"): not
    /// posted, since Hermes ran nothing and the restarted gateway answers the message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop_notice: bool,
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
    /// The reply authority the daemon handed over with the event, as the shim kept it (used
    /// when this daemon does not know the event: it was handed over by its predecessor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_authority: Option<serde_json::Value>,
    /// The gateway had begun its stop when Hermes started this cycle: the runner will not run
    /// the message (it refuses new work, or the stop cancels the cycle). Additive.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
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
    /// As in [`TurnStart`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_authority: Option<serde_json::Value>,
    /// The turn id a daemon before a respawn answered for this dequeue, when the shim sends it
    /// again after the `resync`: the follow-up keeps it. Additive (hermes-host.md §19.10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
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
    /// The gateway is stopping: a turn it cut off is resumed by Hermes after its restart, and
    /// the messages still queued were discarded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
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
    /// As in [`TurnStart`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_authority: Option<serde_json::Value>,
    /// The turn made a durable send before the respawn (media, or a send without
    /// `expect_edits`), which takes an ordinal of the turn's message ids. Without one, a
    /// message already stored under the final's id can only be that final. Additive
    /// (hermes-host.md §19.10).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub durable_sent: bool,
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
    /// Turns a dequeue boundary closed whose final the previous daemon stored (`turn.closed`
    /// arrived) while the run they belong to goes on: that daemon may have died before it
    /// published their closing state, so the new one publishes `completed` for each. Additive
    /// (hermes-host.md §19.10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delivered_turns: Vec<OpenTurn>,
}

/// `shutdown`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shutdown {
    /// Why.
    #[serde(default)]
    pub reason: String,
}

/// `api.inbound_media`: the domain-plugin call `current_canon_inbound_media()`
/// (runtime-control.md §7.6). The batch is the one captured for the turn
/// context's conversation and message, never one the caller names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiInboundMedia {
    /// Turn context, read by the shim in the calling task.
    #[serde(default)]
    pub ctx: TurnContext,
}

/// `api.call`: one of the card helpers of the domain-plugin API
/// (runtime-control.md §7.3, §7.4) or `validate_card`, with the turn context the
/// shim read in the calling task. The conversation and responder come from
/// that context, never from `args`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiCall {
    /// `validate_card`, `send_card_to_current_conversation` or
    /// `request_card_for_current_human`.
    pub method: String,
    /// The function's arguments (`card`, `timeout_seconds`, `native`).
    #[serde(default)]
    pub args: Opaque,
    /// Turn context.
    #[serde(default)]
    pub ctx: TurnContext,
}

/// `api.call` result: the function's return value, or the error it raises.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ApiResult {
    /// What the function returns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The text of the error it raises.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One captured attachment of an `api.inbound_media` answer, handed over
/// as a new 0600 file the shim reads and deletes (hermes-host.md Q8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboundMediaFile {
    /// The Canon message id.
    pub message_id: String,
    /// Position in the message's `attachments` array.
    pub attachment_index: u64,
    /// Normalized MIME type.
    pub mime_type: String,
    /// Sanitized file name.
    pub file_name: String,
    /// Absolute path of the hand-off file.
    pub path: String,
    /// Its length in bytes.
    pub size_bytes: u64,
}

/// `api.inbound_media` result: the captured batch (empty when nothing was
/// captured or it was evicted), or the exact runtime-control.md §7.6 error.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct InboundMediaBatch {
    /// The attachments, in capture order.
    #[serde(default)]
    pub media: Vec<InboundMediaFile>,
    /// Why the call is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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
        /// `current_canon_inbound_media()` (additive).
        "api.inbound_media" => ApiInboundMedia(ApiInboundMedia),
        /// A card helper of the domain-plugin API, or `validate_card`.
        "api.call" => ApiCall(ApiCall),
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
        /// To `api.inbound_media`.
        "api.inbound_media" => ApiInboundMedia(InboundMediaBatch),
        /// To `api.call`.
        "api.call" => ApiCall(ApiResult),
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
