//! Request and response shapes of the REST operations (canon-wire.md §4),
//! (the credential types live in `secret.rs`, the reply authority in
//! `authority.rs`).
//!
//! Request types serialize to the exact wire bodies: camelCase keys, optional
//! fields omitted rather than sent as `null` (canon-wire.md §0). Response types
//! are read leniently, the way the reference reads them ("first non-empty wins"),
//! and keep the whole object in `raw` so nothing the server adds is lost.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::authority::ReplyAuthority;
use crate::secret::ApiKey;

fn first_string(object: &Map<String, Value>, keys: &[&str]) -> Option<String> {
    keys.iter()
        .filter_map(|key| object.get(*key).and_then(Value::as_str))
        .find(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The agent's outbound policy (canon-wire.md §4.1). Before anything said otherwise it is
/// closed (runtime-control.md §5.1: an absent policy withholds `canon_communicate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutboundPolicy {
    /// `open`.
    Open,
    /// `approval-required`.
    ApprovalRequired,
    /// Anything else, absent included.
    #[default]
    Closed,
}

impl OutboundPolicy {
    /// Reads the wire value.
    pub fn from_wire(value: Option<&str>) -> OutboundPolicy {
        match value {
            Some("open") => OutboundPolicy::Open,
            Some("approval-required") => OutboundPolicy::ApprovalRequired,
            _ => OutboundPolicy::Closed,
        }
    }
}

/// `GET /agents/me` (canon-wire.md §4.1).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentMe {
    /// `agentId` | `id` | `userId`.
    pub agent_id: Option<String>,
    /// `ownerId`.
    pub owner_id: Option<String>,
    /// `outboundPolicy`.
    pub outbound_policy: OutboundPolicy,
    /// `displayName` | `agentName` | `name`.
    pub display_name: Option<String>,
    /// The whole response object.
    pub raw: Map<String, Value>,
}

impl AgentMe {
    /// Reads the response object leniently (the first non-empty candidate
    /// key wins), keeping what the type does not name in its raw fields.
    pub fn from_object(raw: Map<String, Value>) -> AgentMe {
        AgentMe {
            agent_id: first_string(&raw, &["agentId", "id", "userId"]),
            owner_id: first_string(&raw, &["ownerId"]),
            outbound_policy: OutboundPolicy::from_wire(
                raw.get("outboundPolicy").and_then(Value::as_str),
            ),
            display_name: first_string(&raw, &["displayName", "agentName", "name"]),
            raw,
        }
    }
}

/// One conversation of `GET /conversations` (canon-wire.md §4.2).
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// `id` | `conversationId`.
    pub id: String,
    /// `type == "group"`.
    pub is_group: bool,
    /// `name` | `topic`, else the id.
    pub name: String,
    /// `memberIds` (string entries only).
    pub member_ids: Vec<String>,
    /// The whole object.
    pub raw: Map<String, Value>,
}

impl Conversation {
    /// Reads one item; `None` when it has no id.
    pub fn from_object(raw: Map<String, Value>) -> Option<Conversation> {
        let id = first_string(&raw, &["id", "conversationId"])?;
        Some(Conversation {
            is_group: raw.get("type").and_then(Value::as_str) == Some("group"),
            name: first_string(&raw, &["name", "topic"]).unwrap_or_else(|| id.clone()),
            member_ids: raw
                .get("memberIds")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            id,
            raw,
        })
    }

    /// Reads the conversation list of a `GET /conversations` response,
    /// skipping entries that are not objects with an id.
    pub fn list_from(value: Value) -> Vec<Conversation> {
        let items = match value {
            Value::Array(items) => items,
            Value::Object(mut object) => match object.remove("conversations") {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        items
            .into_iter()
            .filter_map(|item| match item {
                Value::Object(object) => Conversation::from_object(object),
                _ => None,
            })
            .collect()
    }
}

/// `POST /messages/send` request (canon-wire.md §4.3).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SendMessage {
    /// `conversationId`.
    pub conversation_id: String,
    /// `text` (may be empty for attachment-only messages).
    pub text: String,
    /// `messageId`: the operation-bound client id, when there is one.
    pub message_id: Option<String>,
    /// `replyTo`.
    pub reply_to: Option<String>,
    /// `metadata`.
    pub metadata: Option<Map<String, Value>>,
    /// `contentType`.
    pub content_type: Option<String>,
    /// `attachments` (canon-wire.md §7.1 objects).
    pub attachments: Option<Vec<Value>>,
    /// `replyAuthority`, copied from the event that opened the turn.
    pub reply_authority: Option<ReplyAuthority>,
    /// The gateway options bag. Only `mentions` and `replyToPosition` are sent
    /// (canon-wire.md §4.3 \[target\]); explicit fields above always win.
    pub options: Map<String, Value>,
}

/// Option-bag keys that may reach the wire (canon-wire.md §4.3 \[target\]).
const ALLOWED_OPTION_KEYS: [&str; 2] = ["mentions", "replyToPosition"];

impl SendMessage {
    /// The wire body as a JSON object (deterministic key order).
    pub fn to_body(&self) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert(
            "conversationId".into(),
            Value::String(self.conversation_id.clone()),
        );
        body.insert("text".into(), Value::String(self.text.clone()));
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                body.insert(key.to_owned(), value);
            }
        };
        put("messageId", self.message_id.clone().map(Value::String));
        put("replyTo", self.reply_to.clone().map(Value::String));
        put("metadata", self.metadata.clone().map(Value::Object));
        put("contentType", self.content_type.clone().map(Value::String));
        put("attachments", self.attachments.clone().map(Value::Array));
        put(
            "replyAuthority",
            self.reply_authority
                .as_ref()
                .and_then(|a| serde_json::to_value(a).ok()),
        );
        for key in ALLOWED_OPTION_KEYS {
            if let Some(value) = self.options.get(key) {
                body.entry(key.to_owned()).or_insert_with(|| value.clone());
            }
        }
        body
    }
}

/// One message sent through the `send_to` verb (canon-wire.md §4.15), the
/// route of sends that belong to no turn: a standalone send, cron output,
/// a durable send with no turn id. The envelope carries the routing keys,
/// the value carries the text and the message options.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SendTo {
    /// `envelope.conversationId`.
    pub conversation_id: String,
    /// `value.text`.
    pub text: String,
    /// `envelope.idempotencyKey`: the part's client message id, so a replay
    /// lands on the same message.
    pub idempotency_key: Option<String>,
    /// `envelope.replyTo`.
    pub reply_to: Option<String>,
    /// `value.messageOptions.metadata`, when not empty.
    pub metadata: Map<String, Value>,
    /// The gateway options bag: `mentions` and `replyToPosition` ride in the
    /// envelope (the server reads them only there, canon-wire.md §4.15
    /// \[target\]); every other key goes into `messageOptions`.
    pub options: Map<String, Value>,
    /// `value.messageOptions.contentType`.
    pub content_type: Option<String>,
    /// `value.messageOptions.attachments`, when not empty.
    pub attachments: Vec<Value>,
}

impl SendTo {
    /// The verb's envelope and value objects, in wire order.
    pub fn envelope_and_value(&self) -> (Map<String, Value>, Map<String, Value>) {
        let mut envelope = Map::new();
        envelope.insert(
            "conversationId".into(),
            self.conversation_id.as_str().into(),
        );
        if let Some(id) = &self.idempotency_key {
            envelope.insert("idempotencyKey".into(), id.as_str().into());
        }
        if let Some(reply_to) = &self.reply_to {
            envelope.insert("replyTo".into(), reply_to.as_str().into());
        }
        let mut options = Map::new();
        for (key, option) in &self.options {
            if ALLOWED_OPTION_KEYS.contains(&key.as_str()) {
                envelope.insert(key.clone(), option.clone());
            } else {
                options.insert(key.clone(), option.clone());
            }
        }
        if !self.metadata.is_empty() {
            options.insert("metadata".into(), Value::Object(self.metadata.clone()));
        }
        if let Some(content_type) = &self.content_type {
            options.insert("contentType".into(), content_type.as_str().into());
        }
        if !self.attachments.is_empty() {
            options.insert("attachments".into(), Value::Array(self.attachments.clone()));
        }
        let mut value = Map::new();
        value.insert("text".into(), self.text.as_str().into());
        if !options.is_empty() {
            value.insert("messageOptions".into(), Value::Object(options));
        }
        (envelope, value)
    }
}

/// The `no_reply` verb's record of a silenced turn (turns.md §8.4): the
/// conversation and triggering message in the envelope, and `reason` as the
/// literal `given` when the model gave one. The model's text itself never
/// leaves the process.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NoReplyRecord {
    /// `envelope.conversationId`.
    pub conversation_id: String,
    /// `envelope.messageId`, when the triggering message is known.
    pub message_id: Option<String>,
    /// Whether the model gave a non-blank reason.
    pub reason_given: bool,
}

impl NoReplyRecord {
    /// The verb's envelope and value objects.
    pub fn envelope_and_value(&self) -> (Map<String, Value>, Map<String, Value>) {
        let mut envelope = Map::new();
        envelope.insert(
            "conversationId".into(),
            self.conversation_id.as_str().into(),
        );
        if let Some(id) = &self.message_id {
            envelope.insert("messageId".into(), id.as_str().into());
        }
        let mut value = Map::new();
        if self.reason_given {
            value.insert("reason".into(), "given".into());
        }
        (envelope, value)
    }
}

/// One durable Canon call: a `POST /messages/send` or a `send_to` verb.
#[derive(Debug, Clone, PartialEq)]
pub enum DurableCall {
    /// `POST /messages/send`.
    Message(SendMessage),
    /// `POST /agent/verbs/send_to`.
    SendTo(SendTo),
}

/// Canon's id of a delivered message, read from a durable send's reply:
/// `messageId`, else `id`, else `message.id`, the first that is present,
/// when it is a string (an empty string counts). This is what the daemon
/// has always reported to Hermes, which is why it differs from
/// [`SentMessage::from_object`] (which skips empty strings and never reads
/// `message.id`).
pub fn delivered_message_id(reply: &Map<String, Value>) -> Option<String> {
    reply
        .get("messageId")
        .or_else(|| reply.get("id"))
        .or_else(|| reply.get("message").and_then(|m| m.get("id")))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A sent (or replayed) message.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    /// `messageId`, else `id`.
    pub message_id: Option<String>,
    /// The whole response object.
    pub raw: Map<String, Value>,
}

impl SentMessage {
    /// Reads the response object leniently (the first non-empty candidate
    /// key wins), keeping what the type does not name in its raw fields.
    pub fn from_object(raw: Map<String, Value>) -> SentMessage {
        SentMessage {
            message_id: first_string(&raw, &["messageId", "id"]),
            raw,
        }
    }
}

/// `POST /media/upload` request (canon-wire.md §4.4).
#[derive(Debug, Clone, PartialEq)]
pub struct UploadMedia {
    /// `conversationId`.
    pub conversation_id: String,
    /// The raw bytes (≤ 10 MiB), sent base64-encoded as `data`.
    pub data: Vec<u8>,
    /// `mimeType`: lower-case type/subtype without parameters.
    pub mime_type: String,
    /// `fileName` (basename only).
    pub file_name: Option<String>,
}

/// The attachment kind derived from a MIME type (canon-wire.md §4.4).
pub fn attachment_kind(mime_type: &str) -> &'static str {
    let mime = mime_type.to_ascii_lowercase();
    if mime.starts_with("image/") {
        "image"
    } else if mime.starts_with("audio/") {
        "audio"
    } else if mime.starts_with("video/") {
        "video"
    } else {
        "file"
    }
}

/// `status` of `POST /typing` (canon-wire.md §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TypingStatus {
    /// `typing`.
    Typing,
    /// `thinking`.
    Thinking,
}

impl TypingStatus {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            TypingStatus::Typing => "typing",
            TypingStatus::Thinking => "thinking",
        }
    }
}

/// `POST /typing` request (canon-wire.md §4.5).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Typing {
    /// `conversationId`.
    pub conversation_id: String,
    /// `typing`.
    pub typing: bool,
    /// `status`; the stop call omits it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<TypingStatus>,
}

/// The three `POST /streaming` shapes (canon-wire.md §4.6).
#[derive(Debug, Clone, PartialEq)]
pub enum StreamingUpdate {
    /// Merge-update the live bubble.
    Set {
        /// `conversationId`.
        conversation_id: String,
        /// The whole accumulated text, when sent.
        text: Option<String>,
        /// The turn id (sent as both `messageId` and `turnId`).
        turn_id: Option<String>,
        /// Live activity blocks (≤ 30), when sent.
        blocks: Option<Vec<Value>>,
    },
    /// Empty the node so nothing is salvaged on clear.
    Blank {
        /// `conversationId`.
        conversation_id: String,
        /// The turn id, when one exists.
        turn_id: Option<String>,
    },
    /// Delete the node.
    Clear {
        /// `conversationId`.
        conversation_id: String,
    },
}

impl StreamingUpdate {
    /// The wire body.
    pub fn to_body(&self) -> Value {
        let mut body = Map::new();
        match self {
            StreamingUpdate::Set {
                conversation_id,
                text,
                turn_id,
                blocks,
            } => {
                body.insert("conversationId".into(), conversation_id.as_str().into());
                body.insert("status".into(), "streaming".into());
                if let Some(text) = text {
                    body.insert("text".into(), text.as_str().into());
                }
                if let Some(turn_id) = turn_id {
                    body.insert("messageId".into(), turn_id.as_str().into());
                    body.insert("turnId".into(), turn_id.as_str().into());
                }
                if let Some(blocks) = blocks {
                    body.insert("blocks".into(), Value::Array(blocks.clone()));
                }
            }
            StreamingUpdate::Blank {
                conversation_id,
                turn_id,
            } => {
                body.insert("conversationId".into(), conversation_id.as_str().into());
                body.insert("status".into(), "thinking".into());
                body.insert("text".into(), "".into());
                if let Some(turn_id) = turn_id {
                    body.insert("messageId".into(), turn_id.as_str().into());
                    body.insert("turnId".into(), turn_id.as_str().into());
                }
                body.insert("blocks".into(), Value::Array(Vec::new()));
            }
            StreamingUpdate::Clear { conversation_id } => {
                body.insert("conversationId".into(), conversation_id.as_str().into());
                body.insert("streaming".into(), false.into());
            }
        }
        Value::Object(body)
    }
}

/// Turn states published on `POST /runtime/turn` (canon-wire.md §4.7).
/// `idle` is never sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnState {
    /// `thinking`: the turn was accepted and nothing has streamed yet.
    Thinking,
    /// `streaming`: text was staged at least once.
    Streaming,
    /// `tool`: a tool runs, or a wait for a human resolved.
    Tool,
    /// `waiting_input`: blocked on a human; typing is paused.
    WaitingInput,
    /// `completed`: closing; the turn ended normally (or failed).
    Completed,
    /// `interrupted`: closing; the turn was cancelled.
    Interrupted,
}

impl TurnState {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnState::Thinking => "thinking",
            TurnState::Streaming => "streaming",
            TurnState::Tool => "tool",
            TurnState::WaitingInput => "waiting_input",
            TurnState::Completed => "completed",
            TurnState::Interrupted => "interrupted",
        }
    }

    /// Whether the state closes the turn.
    pub fn is_closing(self) -> bool {
        matches!(self, TurnState::Completed | TurnState::Interrupted)
    }
}

impl std::fmt::Display for TurnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `capabilities` of a turn publish (canon-wire.md §4.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnCapabilities {
    /// Always `true`.
    pub supports_interrupt: bool,
    /// Always `true`.
    pub supports_queue: bool,
    /// Mid-turn steer available.
    pub supports_interleave: bool,
    /// `state != waiting_input`.
    pub supports_input_interrupt: bool,
    /// Always `false`.
    pub supports_non_final_permanent_messages: bool,
}

impl TurnCapabilities {
    /// The reference's capabilities for `state` (canon-wire.md §4.7).
    pub fn for_state(state: TurnState, supports_interleave: bool) -> TurnCapabilities {
        TurnCapabilities {
            supports_interrupt: true,
            supports_queue: true,
            supports_interleave,
            supports_input_interrupt: state != TurnState::WaitingInput,
            supports_non_final_permanent_messages: false,
        }
    }
}

/// `POST /runtime/turn` request (canon-wire.md §4.7).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnUpdate {
    /// `conversationId`.
    pub conversation_id: String,
    /// `state`.
    pub state: TurnState,
    /// `queueDepth`.
    pub queue_depth: u32,
    /// `turnId`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// `activeMessageIds` (opening `thinking` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_message_ids: Option<Vec<String>>,
    /// `capabilities` (always sent).
    pub capabilities: TurnCapabilities,
    /// `openedAt` (epoch ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opened_at: Option<u64>,
    /// `turnUpdatedAt` (epoch ms, always sent).
    pub turn_updated_at: u64,
}

/// The static `POST /runtime/status` body of canon-wire.md §4.8 (exact).
pub fn runtime_status_body() -> Value {
    let command = |id: &str,
                   label: &str,
                   description: &str,
                   aliases: &[&str],
                   category: &str,
                   placements: &[&str],
                   availability: &str,
                   signal: &str| {
        serde_json::json!({
            "id": id,
            "label": label,
            "description": description,
            "aliases": aliases,
            "category": category,
            "placements": placements,
            "availability": availability,
            "dispatch": {"kind": "signal", "signal": signal},
        })
    };
    serde_json::json!({
        "runtime": "hermes",
        "hostMode": true,
        "runtimeDescriptor": {
            "coreControls": [],
            "runtimeControls": [],
            "supportsInterrupt": true,
            "supportsInputInterrupt": true,
            "streamingTextMode": "delta",
            "commands": [
                command("stop", "Stop", "Interrupt the current Hermes turn.", &["stop"], "turn",
                        &["composer_slash", "command_palette"], "busy", "interrupt"),
                command("stop-and-clear-queue", "Stop & clear queue",
                        "Interrupt the current Hermes turn and drop queued Canon prompts.",
                        &["stop-clear", "clear-queue"], "turn",
                        &["composer_slash", "command_palette", "session_strip"], "busy_with_queue", "stop_and_drop"),
                command("new-session", "New session", "Start a fresh Hermes session inside this Canon chat.",
                        &["new"], "session", &["composer_slash", "command_palette", "session_strip"], "always", "new_session"),
            ],
        },
    })
}

/// A pending runtime signal (canon-wire.md §4.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalKind {
    /// `interrupt`.
    Interrupt,
    /// `stop_and_drop`.
    StopAndDrop,
    /// `new_session`.
    NewSession,
}

/// A consumed signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeSignal {
    /// Which signal.
    pub signal: SignalKind,
    /// `updatedBy`, when present.
    pub updated_by: Option<String>,
}

impl RuntimeSignal {
    /// Reads a consume response: `None` unless `status` is `signal` and the
    /// signal is one of the three known kinds.
    pub fn from_object(object: &Map<String, Value>) -> Option<RuntimeSignal> {
        if object.get("status").and_then(Value::as_str) != Some("signal") {
            return None;
        }
        let signal = match object.get("signal").and_then(Value::as_str)? {
            "interrupt" => SignalKind::Interrupt,
            "stop_and_drop" => SignalKind::StopAndDrop,
            "new_session" => SignalKind::NewSession,
            _ => return None,
        };
        Some(RuntimeSignal {
            signal,
            updated_by: first_string(object, &["updatedBy"]),
        })
    }
}

/// `interactionKind` (canon-wire.md §4.12–§4.13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InteractionKind {
    /// `input`.
    Input,
    /// `card`.
    Card,
    /// `approval`.
    Approval,
}

impl InteractionKind {
    fn id_key(self) -> &'static str {
        match self {
            InteractionKind::Input => "inputId",
            InteractionKind::Card => "cardId",
            InteractionKind::Approval => "approvalId",
        }
    }
}

/// One choice of an input request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    /// `label`.
    pub label: String,
    /// `value`.
    pub value: String,
    /// `description`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One approval detail row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalDetail {
    /// `label`.
    pub label: String,
    /// `value`.
    pub value: String,
    /// `monospace`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monospace: Option<bool>,
}

/// `interactionKind:"input"` request (canon-wire.md §4.12).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InputRequest {
    /// `conversationId`.
    pub conversation_id: String,
    /// `inputId`.
    pub input_id: String,
    /// `kind`: `clarify`, `sudo` or `secret`.
    pub kind: String,
    /// `expiresAt` (epoch ms).
    pub expires_at: u64,
    /// `title`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `prompt`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// `choices`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choices: Option<Vec<Choice>>,
    /// `questions` (objects as canon-wire.md §4.12 describes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub questions: Option<Vec<Value>>,
    /// `responseUserId`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_user_id: Option<String>,
    /// `native` correlation ids (canon-wire.md §4.12.1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native: Option<Map<String, Value>>,
    /// `sensitive`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sensitive: Option<bool>,
    /// `turnId`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
}

/// `interactionKind:"card"` request (canon-wire.md §4.12).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CardRequest {
    /// `conversationId`.
    pub conversation_id: String,
    /// `card` (`canon.card.v1`, validated by the caller).
    pub card: Value,
    /// `cardId`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card_id: Option<String>,
    /// `expiresAt` (epoch ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// `responseUserId`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_user_id: Option<String>,
    /// `runtimeId`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_id: Option<String>,
    /// `turnId`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// `native`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native: Option<Map<String, Value>>,
}

/// `interactionKind:"approval"` request (canon-wire.md §4.12). `category`,
/// `risk` and `riskLevel` are constants added on serialization.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// `conversationId`.
    pub conversation_id: String,
    /// `approvalId`.
    pub approval_id: String,
    /// `toolName`.
    pub tool_name: String,
    /// `toolSummary`.
    pub tool_summary: String,
    /// `expiresAt` (epoch ms).
    pub expires_at: u64,
    /// `allowSessionRule`.
    pub allow_session_rule: bool,
    /// `responseUserId`.
    pub response_user_id: Option<String>,
    /// `details`.
    pub details: Option<Vec<ApprovalDetail>>,
    /// `native`.
    pub native: Option<Map<String, Value>>,
}

/// `POST /runtime-interaction/request` (canon-wire.md §4.12).
#[derive(Debug, Clone, PartialEq)]
pub enum InteractionRequest {
    /// An input request.
    Input(InputRequest),
    /// A card request.
    Card(CardRequest),
    /// An approval request.
    Approval(ApprovalRequest),
}

impl InteractionRequest {
    /// The wire body, `interactionKind` first.
    pub fn to_body(&self) -> Value {
        let mut body = Map::new();
        let (kind, rest) = match self {
            InteractionRequest::Input(r) => (InteractionKind::Input, serde_json::to_value(r)),
            InteractionRequest::Card(r) => (InteractionKind::Card, serde_json::to_value(r)),
            InteractionRequest::Approval(r) => {
                let mut m = Map::new();
                m.insert("conversationId".into(), r.conversation_id.as_str().into());
                m.insert("approvalId".into(), r.approval_id.as_str().into());
                m.insert("toolName".into(), r.tool_name.as_str().into());
                m.insert("toolSummary".into(), r.tool_summary.as_str().into());
                m.insert("expiresAt".into(), r.expires_at.into());
                m.insert("category".into(), "command".into());
                m.insert("risk".into(), "high".into());
                m.insert("riskLevel".into(), "destructive".into());
                m.insert("allowSessionRule".into(), r.allow_session_rule.into());
                if let Some(user) = &r.response_user_id {
                    m.insert("responseUserId".into(), user.as_str().into());
                }
                if let Some(details) = &r.details {
                    m.insert(
                        "details".into(),
                        serde_json::to_value(details).unwrap_or_default(),
                    );
                }
                if let Some(native) = &r.native {
                    m.insert("native".into(), Value::Object(native.clone()));
                }
                (InteractionKind::Approval, Ok(Value::Object(m)))
            }
        };
        body.insert(
            "interactionKind".into(),
            serde_json::to_value(kind).unwrap_or_default(),
        );
        if let Ok(Value::Object(rest)) = rest {
            body.extend(rest);
        }
        Value::Object(body)
    }
}

/// The create response of `POST /runtime-interaction/request` (canon-wire.md §4.12).
#[derive(Debug, Clone, PartialEq)]
pub struct InteractionCreated {
    /// `messageId`.
    pub message_id: Option<String>,
    /// `cardId`.
    pub card_id: Option<String>,
    /// `interactive`.
    pub interactive: Option<bool>,
    /// `responseUserId`.
    pub response_user_id: Option<String>,
    /// `expiresAt`, when numeric.
    pub expires_at: Option<i64>,
    /// `allowSessionRule`.
    pub allow_session_rule: Option<bool>,
    /// The whole response.
    pub raw: Map<String, Value>,
}

impl InteractionCreated {
    /// Reads the response object leniently (the first non-empty candidate
    /// key wins), keeping what the type does not name in its raw fields.
    pub fn from_object(raw: Map<String, Value>) -> InteractionCreated {
        InteractionCreated {
            message_id: first_string(&raw, &["messageId"]),
            card_id: first_string(&raw, &["cardId"]),
            interactive: raw.get("interactive").and_then(Value::as_bool),
            response_user_id: first_string(&raw, &["responseUserId"]),
            expires_at: raw
                .get("expiresAt")
                .and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))),
            allow_session_rule: raw.get("allowSessionRule").and_then(Value::as_bool),
            raw,
        }
    }
}

/// `POST /runtime-interaction/consume` request (canon-wire.md §4.13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumeInteraction {
    /// Which kind of interaction.
    pub kind: InteractionKind,
    /// `conversationId`.
    pub conversation_id: String,
    /// The `inputId` / `cardId` / `approvalId`.
    pub id: String,
    /// Send `cancel: true` (deadline passed).
    pub cancel: bool,
}

impl ConsumeInteraction {
    /// The wire body.
    pub fn to_body(&self) -> Value {
        let mut body = Map::new();
        body.insert(
            "interactionKind".into(),
            serde_json::to_value(self.kind).unwrap_or_default(),
        );
        body.insert(
            "conversationId".into(),
            self.conversation_id.as_str().into(),
        );
        body.insert(self.kind.id_key().into(), self.id.as_str().into());
        if self.cancel {
            body.insert("cancel".into(), true.into());
        }
        Value::Object(body)
    }
}

/// A consume result (canon-wire.md §4.13): `status` plus the whole object.
#[derive(Debug, Clone, PartialEq)]
pub struct InteractionResult {
    /// `status` (empty when absent).
    pub status: String,
    /// `respondedBy`.
    pub responded_by: Option<String>,
    /// The whole response.
    pub raw: Map<String, Value>,
}

impl InteractionResult {
    /// Reads the response object leniently (the first non-empty candidate
    /// key wins), keeping what the type does not name in its raw fields.
    pub fn from_object(raw: Map<String, Value>) -> InteractionResult {
        InteractionResult {
            status: raw
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            responded_by: first_string(&raw, &["respondedBy"]),
            raw,
        }
    }

    /// Whether the interaction is still open (`pending` or no status).
    pub fn is_pending(&self) -> bool {
        self.status.is_empty() || self.status == "pending"
    }
}

/// `POST /agents/register` request (canon-wire.md §1.4).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Registration {
    /// `name`.
    pub name: String,
    /// `description`.
    pub description: String,
    /// `ownerPhone` (E.164).
    pub owner_phone: String,
    /// `developerInfo` (`Hermes gateway platform adapter`).
    pub developer_info: String,
    /// `clientType` (`hermes`).
    pub client_type: String,
    /// `localRegistrationId`.
    pub local_registration_id: String,
    /// `requestedAgentId`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_agent_id: Option<String>,
}

/// The submit response of a registration.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistrationTicket {
    /// `requestId`.
    pub request_id: String,
    /// `pollToken` (secret; redacted in `Debug`).
    pub poll_token: Option<String>,
}

impl std::fmt::Debug for RegistrationTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistrationTicket")
            .field("request_id", &self.request_id)
            .field(
                "poll_token",
                &self.poll_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// The poll response of a registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationStatus {
    /// `status`: `pending`, `approved` or `rejected` (as sent).
    pub status: String,
    /// `apiKey`, when approved.
    pub api_key: Option<ApiKey>,
    /// `agentId`.
    pub agent_id: Option<String>,
    /// `agentName`.
    pub agent_name: Option<String>,
}

impl RegistrationStatus {
    /// Reads the response object leniently (the first non-empty candidate
    /// key wins), keeping what the type does not name in its raw fields.
    pub fn from_object(raw: &Map<String, Value>) -> RegistrationStatus {
        RegistrationStatus {
            status: first_string(raw, &["status"]).unwrap_or_default(),
            api_key: first_string(raw, &["apiKey"]).map(ApiKey::new),
            agent_id: first_string(raw, &["agentId"]),
            agent_name: first_string(raw, &["agentName"]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::REPLY_AUTHORITY_SCHEMA;
    use serde_json::json;

    #[test]
    fn secrets_are_redacted_in_debug() {
        let key = ApiKey::new("sk-live-secret");
        assert!(!format!("{key:?}").contains("secret"));
        let authority = ReplyAuthority {
            schema: REPLY_AUTHORITY_SCHEMA.into(),
            source_message_id: "m1".into(),
            token: "t".repeat(40),
            expires_at: "2026-01-01T00:00:00Z".into(),
        };
        assert!(!format!("{authority:?}").contains("tttt"));
        let ticket = RegistrationTicket {
            request_id: "r".into(),
            poll_token: Some("poll-secret".into()),
        };
        assert!(!format!("{ticket:?}").contains("poll-secret"));
        let status = RegistrationStatus::from_object(
            json!({"status":"approved","apiKey":"k-secret"})
                .as_object()
                .unwrap(),
        );
        assert!(!format!("{status:?}").contains("k-secret"));
    }

    #[test]
    fn send_to_puts_routing_keys_in_the_envelope_and_the_rest_in_message_options() {
        let mut options = Map::new();
        options.insert("mentions".into(), json!(["u1"]));
        options.insert("replyToPosition".into(), json!(3));
        options.insert("other".into(), json!(true));
        let mut metadata = Map::new();
        metadata.insert("turnSemantics".into(), json!("turn_complete"));
        let send = SendTo {
            conversation_id: "c1".into(),
            text: "hi".into(),
            idempotency_key: Some("standalone-1".into()),
            reply_to: Some("m0".into()),
            metadata,
            options,
            content_type: Some("image/png".into()),
            attachments: vec![json!({"url": "u"})],
        };
        let (envelope, value) = send.envelope_and_value();
        assert_eq!(
            Value::Object(envelope),
            json!({"conversationId": "c1", "idempotencyKey": "standalone-1", "replyTo": "m0",
                   "mentions": ["u1"], "replyToPosition": 3})
        );
        assert_eq!(
            Value::Object(value),
            json!({"text": "hi", "messageOptions": {"other": true,
                   "metadata": {"turnSemantics": "turn_complete"},
                   "contentType": "image/png", "attachments": [{"url": "u"}]}})
        );
        let bare = SendTo {
            conversation_id: "c1".into(),
            text: "x".into(),
            ..SendTo::default()
        };
        let (envelope, value) = bare.envelope_and_value();
        assert_eq!(Value::Object(envelope), json!({"conversationId": "c1"}));
        assert_eq!(Value::Object(value), json!({"text": "x"}));
    }

    #[test]
    fn no_reply_record_never_carries_the_reason_text() {
        let record = NoReplyRecord {
            conversation_id: "c1".into(),
            message_id: Some("m1".into()),
            reason_given: true,
        };
        let (envelope, value) = record.envelope_and_value();
        assert_eq!(
            Value::Object(envelope),
            json!({"conversationId": "c1", "messageId": "m1"})
        );
        assert_eq!(Value::Object(value), json!({"reason": "given"}));
        let bare = NoReplyRecord {
            conversation_id: "c1".into(),
            ..NoReplyRecord::default()
        };
        let (envelope, value) = bare.envelope_and_value();
        assert_eq!(Value::Object(envelope), json!({"conversationId": "c1"}));
        assert!(value.is_empty());
    }

    #[test]
    fn delivered_message_id_reads_three_places_in_order() {
        let id = |v: Value| delivered_message_id(v.as_object().unwrap());
        assert_eq!(
            id(json!({"messageId": "a", "id": "b"})).as_deref(),
            Some("a")
        );
        assert_eq!(
            id(json!({"id": "b", "message": {"id": "c"}})).as_deref(),
            Some("b")
        );
        assert_eq!(id(json!({"message": {"id": "c"}})).as_deref(), Some("c"));
        assert_eq!(id(json!({"messageId": ""})).as_deref(), Some(""));
        assert_eq!(id(json!({"messageId": 7, "id": "b"})), None);
        assert_eq!(id(json!({})), None);
    }

    #[test]
    fn send_message_body_omits_absent_fields_and_filters_options() {
        let mut options = Map::new();
        options.insert("mentions".into(), json!(["u1"]));
        options.insert("messageId".into(), json!("evil"));
        options.insert("replyAuthority".into(), json!({}));
        options.insert("other".into(), json!(1));
        let send = SendMessage {
            conversation_id: "c1".into(),
            text: "hi".into(),
            message_id: Some("hermes-final-1".into()),
            options,
            ..SendMessage::default()
        };
        assert_eq!(
            Value::Object(send.to_body()),
            json!({"conversationId":"c1","text":"hi","messageId":"hermes-final-1","mentions":["u1"]})
        );
    }

    #[test]
    fn streaming_shapes() {
        let set = StreamingUpdate::Set {
            conversation_id: "c".into(),
            text: Some("ab".into()),
            turn_id: Some("t".into()),
            blocks: None,
        };
        assert_eq!(
            set.to_body(),
            json!({"conversationId":"c","status":"streaming","text":"ab","messageId":"t","turnId":"t"})
        );
        let blank = StreamingUpdate::Blank {
            conversation_id: "c".into(),
            turn_id: None,
        };
        assert_eq!(
            blank.to_body(),
            json!({"conversationId":"c","status":"thinking","text":"","blocks":[]})
        );
        let clear = StreamingUpdate::Clear {
            conversation_id: "c".into(),
        };
        assert_eq!(
            clear.to_body(),
            json!({"conversationId":"c","streaming":false})
        );
    }

    #[test]
    fn interaction_bodies() {
        let approval = InteractionRequest::Approval(ApprovalRequest {
            conversation_id: "c".into(),
            approval_id: "hermes-0123".into(),
            tool_name: "Command".into(),
            tool_summary: "rm".into(),
            expires_at: 5,
            allow_session_rule: false,
            response_user_id: None,
            details: None,
            native: None,
        });
        assert_eq!(
            approval.to_body(),
            json!({"interactionKind":"approval","conversationId":"c","approvalId":"hermes-0123","toolName":"Command",
                   "toolSummary":"rm","expiresAt":5,"category":"command","risk":"high","riskLevel":"destructive",
                   "allowSessionRule":false})
        );
        let consume = ConsumeInteraction {
            kind: InteractionKind::Card,
            conversation_id: "c".into(),
            id: "card-1".into(),
            cancel: true,
        };
        assert_eq!(
            consume.to_body(),
            json!({"interactionKind":"card","conversationId":"c","cardId":"card-1","cancel":true})
        );
    }

    #[test]
    fn lenient_response_readers() {
        let me = AgentMe::from_object(
            json!({"id":"a1","agentId":"","outboundPolicy":"open","name":"Bot"})
                .as_object()
                .unwrap()
                .clone(),
        );
        assert_eq!(me.agent_id.as_deref(), Some("a1"));
        assert_eq!(me.outbound_policy, OutboundPolicy::Open);
        assert_eq!(me.display_name.as_deref(), Some("Bot"));
        let list = Conversation::list_from(
            json!([{"conversationId":"c1","type":"group","memberIds":["a",1]}, {"x":1}, 5]),
        );
        assert_eq!(list.len(), 1);
        assert!(list[0].is_group);
        assert_eq!(list[0].name, "c1");
        assert_eq!(list[0].member_ids, vec!["a".to_owned()]);
        let wrapped = Conversation::list_from(json!({"conversations":[{"id":"c2","topic":"T"}]}));
        assert_eq!(wrapped[0].name, "T");
        let signal = RuntimeSignal::from_object(
            json!({"status":"signal","signal":"stop_and_drop"})
                .as_object()
                .unwrap(),
        );
        assert_eq!(signal.map(|s| s.signal), Some(SignalKind::StopAndDrop));
        assert!(
            RuntimeSignal::from_object(json!({"status":"none"}).as_object().unwrap()).is_none()
        );
        assert_eq!(attachment_kind("Image/PNG"), "image");
        assert_eq!(attachment_kind("application/pdf"), "file");
    }

    #[test]
    fn runtime_status_descriptor_is_exact() {
        let body = runtime_status_body();
        assert_eq!(body["runtime"], "hermes");
        let commands = body["runtimeDescriptor"]["commands"].as_array().unwrap();
        assert_eq!(commands.len(), 3);
        assert_eq!(commands[1]["aliases"], json!(["stop-clear", "clear-queue"]));
        assert_eq!(
            commands[2]["dispatch"],
            json!({"kind":"signal","signal":"new_session"})
        );
        assert_eq!(body["runtimeDescriptor"]["streamingTextMode"], "delta");
    }
}
