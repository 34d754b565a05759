//! The simulator's state model (canon-wire.md §11.2) and the server-side message emission of
//! canon-wire.md §11.4.
//!
//! Everything lives in one [`State`] behind a mutex; handlers are synchronous functions over
//! `&mut State`, so every request is atomic. Every collection is bounded: messages, histories,
//! journals, replay buffers, uploads and verb logs have fixed caps and evict the oldest entries.

use std::collections::{BTreeMap, HashMap, VecDeque};

use canon_dispatch::protocol::{normalize_runtime_turn_state, should_trigger_agent_turn};
use serde_json::{json, Map, Value};

use crate::clock::{iso_8601, SimClock};
use crate::config::SimConfig;
use crate::faults::Faults;
use crate::ids::IdGen;
use crate::journal::Journal;

/// Messages kept in total (oldest evicted first, with their idempotency records).
pub const MESSAGES_CAP: usize = 50_000;
/// Entries kept in each history list (streaming writes, turn states, typing, verbs, …).
pub const HISTORY_CAP: usize = 2_000;
/// Total bytes of uploaded media kept (oldest uploads evicted first).
pub const UPLOAD_BYTES_CAP: usize = 256 * 1024 * 1024;
/// Raw upload size limit (canon-wire.md §4.4).
pub const UPLOAD_LIMIT: usize = 10 * 1024 * 1024;
/// Conversations, interactions and registrations kept at most; creating more answers 503
/// `SIM_CAPACITY` (bounded memory).
pub const ENTITY_CAP: usize = 10_000;
/// Reply authority lifetime (canon-wire.md §11.4).
pub const REPLY_AUTHORITY_TTL_MS: u64 = 10 * 60 * 1000;
/// Approval tombstone lifetime (canon-wire.md §4.13, D5).
pub const TOMBSTONE_TTL_MS: u64 = 72 * 3600 * 1000;
/// The reply-authority schema id (canon-wire.md §5.5).
pub const REPLY_AUTHORITY_SCHEMA: &str = "canon.agent-reply-authority.v1";
/// Receipt `metadata.type` values, server-owned and refused on client sends (canon-wire.md §6.1).
pub const RECEIPT_TYPES: [&str; 7] = [
    "approval_reply",
    "approval_outcome",
    "runtime_input_reply",
    "runtime_input_outcome",
    "plan_approval_reply",
    "runtime_card_reply",
    "runtime_card_outcome",
];

/// A human or an agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    /// Principal id.
    pub id: String,
    /// `human` or `ai_agent`.
    pub kind: String,
    /// Display name.
    pub display_name: String,
    /// Owner (agents).
    pub owner_id: Option<String>,
    /// API keys (agents).
    pub api_keys: Vec<String>,
    /// `open`, `approval-required` or `closed` (agents).
    pub outbound_policy: String,
    /// Inbound policy for `send_to` user targets: `open`, `approval-required`, `closed`.
    pub inbound_policy: String,
    /// Group-join policy: `open`, `approval-required`, `closed`.
    pub group_join_policy: String,
    /// Contacts (principal ids).
    pub contacts: Vec<String>,
    /// Free-text description (agent directory).
    pub description: String,
}

impl Principal {
    /// Whether this principal is an agent.
    pub fn is_agent(&self) -> bool {
        self.kind == "ai_agent"
    }

    /// The contact card of this principal.
    pub fn contact_card(&self, owner_name: Option<&str>) -> Value {
        let mut card = json!({
            "userId": self.id,
            "displayName": self.display_name,
            "avatarUrl": null,
            "userType": self.kind,
        });
        if let Some(owner) = &self.owner_id {
            card["ownerId"] = json!(owner);
        }
        if let Some(name) = owner_name {
            card["ownerName"] = json!(name);
        }
        if !self.description.is_empty() {
            card["about"] = json!(self.description);
        }
        card
    }
}

/// A conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// Conversation id.
    pub id: String,
    /// `direct` or `group`.
    pub kind: String,
    /// Display name.
    pub name: String,
    /// Members in order.
    pub member_ids: Vec<String>,
    /// Roles by member (`owner`, `member`).
    pub roles: BTreeMap<String, String>,
    /// Last read time by member (sim ms).
    pub last_read: BTreeMap<String, u64>,
    /// Behavior policy (`participation` object), forwarded on `message.created`.
    pub behavior: Option<Value>,
}

impl Conversation {
    /// The wire shape of `GET /conversations` items.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "type": self.kind,
            "name": self.name,
            "memberIds": self.member_ids,
        })
    }
}

/// A stored message.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    /// Conversation.
    pub conversation_id: String,
    /// The `SerializedMessage`.
    pub message: Value,
    /// Client id (`messageId` / `idempotencyKey`).
    pub client_id: Option<String>,
}

/// The live streaming node of a conversation (canon-wire.md §4.6).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamingNode {
    /// Node fields (`text`, `blocks`, `status`, `turnId`, `messageId`, `updatedAt`).
    pub fields: Map<String, Value>,
    /// Writer (agent id).
    pub agent: String,
}

/// A runtime interaction (canon-wire.md §4.12, §4.13).
#[derive(Debug, Clone, PartialEq)]
pub struct Interaction {
    /// `input`, `card` or `approval`.
    pub kind: String,
    /// The interaction id.
    pub id: String,
    /// Conversation.
    pub conversation_id: String,
    /// Requesting agent.
    pub agent: String,
    /// Request body.
    pub request: Value,
    /// Effective deadline.
    pub expires_at: u64,
    /// Effective responder (None = owner routing).
    pub response_user_id: Option<String>,
    /// Effective `allowSessionRule` (approvals).
    pub allow_session_rule: Option<bool>,
    /// Whether the card is interactive.
    pub interactive: Option<bool>,
    /// `pending`, `answered`, `cancelled`, `expired`, `consumed`.
    pub state: String,
    /// The answer payload (status-specific fields).
    pub answer: Option<Value>,
    /// Who answered.
    pub responded_by: Option<String>,
    /// When it was consumed.
    pub consumed_at: Option<u64>,
    /// The result handed out at the first consume (tombstone of approvals).
    pub tombstone: Option<Value>,
    /// The interaction message id.
    pub message_id: String,
}

/// An uploaded file.
#[derive(Debug, Clone, PartialEq)]
pub struct Upload {
    /// Raw bytes.
    pub bytes: Vec<u8>,
    /// MIME type.
    pub mime_type: String,
    /// File name.
    pub file_name: Option<String>,
    /// Upload id.
    pub upload_id: String,
    /// URL token.
    pub token: String,
    /// Full URL.
    pub url: String,
}

/// A registration request (canon-wire.md §1.4).
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    /// Request id.
    pub request_id: String,
    /// Poll token.
    pub poll_token: String,
    /// Client registration id.
    pub local_registration_id: String,
    /// Submitted body.
    pub body: Value,
    /// `pending`, `approved`, `rejected`.
    pub status: String,
    /// Issued key and agent, once approved.
    pub issued: Option<(String, String)>,
    /// Polls so far.
    pub polls: u32,
    /// Acknowledged.
    pub acked: bool,
}

/// An issued reply authority (canon-wire.md §5.5, §11.4).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplyAuthority {
    /// Agent it was issued to.
    pub agent: String,
    /// Conversation.
    pub conversation_id: String,
    /// Inbound message it answers.
    pub source_message_id: String,
    /// Expiry (sim ms).
    pub expires_at: u64,
    /// The turn that claimed it with its first durable part.
    pub claimed_by: Option<String>,
}

/// One event in an agent's stream log.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedEvent {
    /// Position in the log (monotonic).
    pub seq: u64,
    /// SSE id (durable events only).
    pub id: Option<String>,
    /// Event name.
    pub name: String,
    /// JSON data.
    pub data: Value,
    /// Sim time.
    pub at_ms: u64,
}

/// An agent's event log: the replay buffer plus live delivery (canon-wire.md §11.2).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventLog {
    /// Events in order.
    pub events: VecDeque<LoggedEvent>,
    /// Last sequence number.
    pub last_seq: u64,
    /// Durable event counter (ids `e-000001`, …).
    pub next_id: u64,
}

impl EventLog {
    /// The position of the event with SSE id `id`, if still buffered.
    pub fn seq_of(&self, id: &str) -> Option<u64> {
        self.events
            .iter()
            .find(|e| e.id.as_deref() == Some(id))
            .map(|e| e.seq)
    }

    /// The newest buffered SSE id.
    pub fn newest_id(&self) -> Option<String> {
        self.events.iter().rev().find_map(|e| e.id.clone())
    }
}

/// Commands for open streams (canon-wire.md §11.5 `stream_control`).
#[derive(Debug, Clone, PartialEq)]
pub enum StreamCmd {
    /// Close the stream cleanly.
    Close,
    /// Abort the connection mid-stream.
    Reset,
    /// Send nothing for this many ms (real time).
    Stall(u64),
}

/// An open stream connection.
#[derive(Debug)]
pub struct OpenStream {
    /// Agent.
    pub agent: String,
    /// Command channel.
    pub commands: tokio::sync::mpsc::Sender<StreamCmd>,
}

/// Per-message overrides for injected messages (canon-wire.md §11.5 `inject_message`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EmitOverrides {
    /// `Some(None)` omits `turnDispatch`; `Some(Some(kind))` forces a kind.
    pub turn_dispatch: Option<Option<String>>,
    /// Replaces `provenance`.
    pub provenance: Option<Value>,
    /// Replaces `conversation`.
    pub conversation: Option<Value>,
    /// Deliver the event twice.
    pub duplicate: bool,
}

/// A message about to be created.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewMessage {
    /// Conversation.
    pub conversation_id: String,
    /// Sender.
    pub sender_id: String,
    /// Text.
    pub text: Option<String>,
    /// Content type (derived from attachments when None).
    pub content_type: Option<String>,
    /// Attachments.
    pub attachments: Vec<Value>,
    /// Mentions.
    pub mentions: Vec<String>,
    /// Reply-to id.
    pub reply_to: Option<String>,
    /// Reply-to position.
    pub reply_to_position: Option<Value>,
    /// Metadata.
    pub metadata: Option<Value>,
    /// Contact card.
    pub contact_card: Option<Value>,
    /// Interaction descriptor.
    pub interaction: Option<Value>,
    /// Forwarded from.
    pub forwarded_from: Option<Value>,
    /// Client id.
    pub client_id: Option<String>,
}

/// The whole simulator state.
#[derive(Debug)]
pub struct State {
    /// Configuration (switches are mutable at run time).
    pub config: SimConfig,
    /// The clock.
    pub clock: SimClock,
    /// The id generator.
    pub ids: IdGen,
    /// Origin of REST, stream and media URLs (`http://127.0.0.1:<port>`).
    pub origin: String,
    /// Origin of the stream (the same as `origin` unless a separate stream port is used).
    pub stream_origin: String,
    /// Principals by id.
    pub principals: BTreeMap<String, Principal>,
    /// API key → principal.
    pub keys: HashMap<String, String>,
    /// Conversations by id.
    pub conversations: BTreeMap<String, Conversation>,
    /// Messages in creation order.
    pub messages: VecDeque<StoredMessage>,
    /// (sender, client id) → (fingerprint, stored response).
    pub idempotency: HashMap<(String, String), (String, Value)>,
    /// Streaming node per conversation.
    pub streaming: BTreeMap<String, StreamingNode>,
    /// Streaming write history.
    pub streaming_history: VecDeque<Value>,
    /// Salvage decisions.
    pub salvage_log: VecDeque<Value>,
    /// Last `/runtime/turn` body per (agent, conversation).
    pub turn_states: BTreeMap<(String, String), Value>,
    /// `/runtime/turn` history.
    pub turn_history: VecDeque<Value>,
    /// Last typing body per (agent, conversation).
    pub typing: BTreeMap<(String, String), Value>,
    /// Typing history.
    pub typing_history: VecDeque<Value>,
    /// Runtime status per agent: raw, projection, last seen.
    pub runtime_status: BTreeMap<String, Value>,
    /// Signal queue per conversation.
    pub signals: BTreeMap<String, VecDeque<Value>>,
    /// Interactions by (conversation, kind, id).
    pub interactions: BTreeMap<(String, String, String), Interaction>,
    /// Uploads by storage path (`<a>/<b>/<c>`).
    pub uploads: BTreeMap<String, Upload>,
    /// Upload order for eviction.
    pub upload_order: VecDeque<String>,
    /// Verb log.
    pub verbs: VecDeque<Value>,
    /// `no_reply` records (never the reason text).
    pub no_replies: VecDeque<Value>,
    /// Registrations.
    pub registrations: Vec<Registration>,
    /// Event logs per agent.
    pub events: BTreeMap<String, EventLog>,
    /// Reply authorities by token.
    pub authorities: HashMap<String, ReplyAuthority>,
    /// Message timestamps per sender and per conversation (rate limits).
    pub rate_windows: HashMap<String, VecDeque<u64>>,
    /// Read markers and disposition changes, in order.
    pub receipts_log: VecDeque<Value>,
    /// The request journal.
    pub journal: Journal,
    /// Fault rules.
    pub faults: Faults,
    /// Open streams by connection id.
    pub open_streams: BTreeMap<u64, OpenStream>,
    /// Connection ids that carried an `Authorization` header on a media download.
    pub media_auth_seen: VecDeque<u64>,
    /// Interaction answers scheduled for a later sim time (`respond_interaction` with a delay).
    pub scheduled: Vec<(u64, Response)>,
}

/// Pushes onto a bounded history list.
pub fn push_bounded<T>(list: &mut VecDeque<T>, item: T, cap: usize) {
    if list.len() >= cap {
        list.pop_front();
    }
    list.push_back(item);
}

impl State {
    /// A fresh state for `config`, serving at `origin`.
    pub fn new(config: SimConfig, origin: String) -> Self {
        let clock = match config.frozen_clock_ms {
            Some(at) => SimClock::frozen(at),
            None => SimClock::system(),
        };
        let mut state = Self {
            ids: IdGen::new(config.seed),
            config,
            clock,
            stream_origin: origin.clone(),
            origin,
            principals: BTreeMap::new(),
            keys: HashMap::new(),
            conversations: BTreeMap::new(),
            messages: VecDeque::new(),
            idempotency: HashMap::new(),
            streaming: BTreeMap::new(),
            streaming_history: VecDeque::new(),
            salvage_log: VecDeque::new(),
            turn_states: BTreeMap::new(),
            turn_history: VecDeque::new(),
            typing: BTreeMap::new(),
            typing_history: VecDeque::new(),
            runtime_status: BTreeMap::new(),
            signals: BTreeMap::new(),
            interactions: BTreeMap::new(),
            uploads: BTreeMap::new(),
            upload_order: VecDeque::new(),
            verbs: VecDeque::new(),
            no_replies: VecDeque::new(),
            registrations: Vec::new(),
            events: BTreeMap::new(),
            authorities: HashMap::new(),
            rate_windows: HashMap::new(),
            receipts_log: VecDeque::new(),
            journal: Journal::default(),
            faults: Faults::default(),
            open_streams: BTreeMap::new(),
            media_auth_seen: VecDeque::new(),
            scheduled: Vec::new(),
        };
        if state.config.bootstrap {
            state.bootstrap();
        }
        state
    }

    /// Empties all state, keeps the seed, configuration and clock, and re-creates the default
    /// principals (canon-wire.md §11.5 `reset`).
    pub fn reset(&mut self) {
        let config = self.config.clone();
        let origin = self.origin.clone();
        let stream_origin = self.stream_origin.clone();
        let clock = self.clock.clone();
        let streams = std::mem::take(&mut self.open_streams);
        // Open streams track positions in the event logs: keep the counters, drop the events.
        let counters: Vec<(String, u64, u64)> = self
            .events
            .iter()
            .map(|(agent, log)| (agent.clone(), log.last_seq, log.next_id))
            .collect();
        let journal_cursor = self.journal.cursor();
        *self = Self::new(config, origin);
        self.stream_origin = stream_origin;
        self.clock = clock;
        self.open_streams = streams;
        for (agent, last_seq, next_id) in counters {
            let log = self.events.entry(agent).or_default();
            log.last_seq = last_seq;
            log.next_id = next_id;
        }
        // Keep journal sequence numbers monotonic across resets.
        while self.journal.cursor() < journal_cursor {
            self.journal.push(crate::journal::JournalEntry {
                seq: 0,
                method: String::new(),
                path: String::new(),
                query: String::new(),
                headers: Vec::new(),
                body: Value::Null,
                status: 0,
                response: Value::Null,
                at_ms: 0,
                arrived_unix_us: 0,
                connection_id: 0,
                principal: None,
            });
        }
        self.journal.clear();
    }

    /// The default world: human owner `h-owner`, agent `a-hermes` (key from the seed) and a
    /// direct conversation `c-direct` between them.
    fn bootstrap(&mut self) {
        self.create_principal(PrincipalSpec {
            id: Some("h-owner".to_owned()),
            kind: "human".to_owned(),
            display_name: Some("Owner".to_owned()),
            ..PrincipalSpec::default()
        });
        self.create_principal(PrincipalSpec {
            id: Some("a-hermes".to_owned()),
            kind: "ai_agent".to_owned(),
            display_name: Some("Hermes".to_owned()),
            owner_id: Some("h-owner".to_owned()),
            ..PrincipalSpec::default()
        });
        self.create_conversation(ConversationSpec {
            id: Some("c-direct".to_owned()),
            kind: "direct".to_owned(),
            name: Some("Owner".to_owned()),
            member_ids: vec!["h-owner".to_owned(), "a-hermes".to_owned()],
            behavior: None,
        });
    }

    /// Sim time now.
    pub fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The principal a bearer key maps to.
    pub fn principal_for_key(&self, key: &str) -> Option<&Principal> {
        self.keys.get(key).and_then(|id| self.principals.get(id))
    }

    /// The first API key of an agent.
    pub fn key_of(&self, agent: &str) -> Option<String> {
        self.principals
            .get(agent)
            .and_then(|p| p.api_keys.first().cloned())
    }

    /// Creates (or replaces) a principal and returns its id; agents get an API key.
    pub fn create_principal(&mut self, spec: PrincipalSpec) -> String {
        let prefix = if spec.kind == "ai_agent" { "a" } else { "h" };
        let id = spec.id.unwrap_or_else(|| self.ids.seq(prefix));
        let mut api_keys = Vec::new();
        if spec.kind == "ai_agent" {
            let key = spec
                .api_key
                .unwrap_or_else(|| format!("canon_sim_{}", self.ids.hex(32)));
            self.keys.insert(key.clone(), id.clone());
            api_keys.push(key);
        }
        let principal = Principal {
            id: id.clone(),
            kind: spec.kind,
            display_name: spec.display_name.unwrap_or_else(|| id.clone()),
            owner_id: spec.owner_id,
            api_keys,
            outbound_policy: spec.outbound_policy.unwrap_or_else(|| "open".to_owned()),
            inbound_policy: spec.inbound_policy.unwrap_or_else(|| "open".to_owned()),
            group_join_policy: spec.group_join_policy.unwrap_or_else(|| "open".to_owned()),
            contacts: spec.contacts,
            description: spec.description.unwrap_or_default(),
        };
        self.principals.insert(id.clone(), principal);
        id
    }

    /// Creates (or replaces) a conversation and returns its id.
    pub fn create_conversation(&mut self, spec: ConversationSpec) -> String {
        let id = spec.id.unwrap_or_else(|| self.ids.seq("c"));
        let mut roles = BTreeMap::new();
        for (i, m) in spec.member_ids.iter().enumerate() {
            roles.insert(
                m.clone(),
                if i == 0 { "owner" } else { "member" }.to_owned(),
            );
        }
        let conversation = Conversation {
            id: id.clone(),
            kind: spec.kind,
            name: spec.name.unwrap_or_else(|| id.clone()),
            member_ids: spec.member_ids,
            roles,
            last_read: BTreeMap::new(),
            behavior: spec.behavior,
        };
        self.conversations.insert(id.clone(), conversation);
        id
    }

    /// The message with this id.
    pub fn find_message(&self, conversation_id: &str, message_id: &str) -> Option<&StoredMessage> {
        self.messages.iter().rev().find(|m| {
            m.conversation_id == conversation_id
                && m.message.get("id").and_then(Value::as_str) == Some(message_id)
        })
    }

    /// Mutable access to a stored message.
    pub fn find_message_mut(
        &mut self,
        conversation_id: &str,
        message_id: &str,
    ) -> Option<&mut StoredMessage> {
        self.messages.iter_mut().rev().find(|m| {
            m.conversation_id == conversation_id
                && m.message.get("id").and_then(Value::as_str) == Some(message_id)
        })
    }

    /// Appends an event to an agent's log; durable events get an SSE id and enter the replay
    /// buffer. Returns the event's sequence number.
    pub fn emit(&mut self, agent: &str, name: &str, data: Value, durable: bool) -> u64 {
        let now = self.now();
        let cap = self.config.switches.replay_buffer_events.max(1);
        let max_age = self.config.switches.replay_buffer_age_ms;
        let log = self.events.entry(agent.to_owned()).or_default();
        log.last_seq += 1;
        let id = durable.then(|| {
            log.next_id += 1;
            format!("e-{:06}", log.next_id)
        });
        while log.events.len() >= cap
            || log
                .events
                .front()
                .is_some_and(|e| now.saturating_sub(e.at_ms) > max_age)
        {
            log.events.pop_front();
        }
        log.events.push_back(LoggedEvent {
            seq: log.last_seq,
            id,
            name: name.to_owned(),
            data,
            at_ms: now,
        });
        log.last_seq
    }

    /// Drops an agent's buffered events, so any `Last-Event-ID` is unknown afterwards
    /// (`stream_control` "expire the replay buffer").
    pub fn expire_replay_buffer(&mut self, agent: &str) {
        if let Some(log) = self.events.get_mut(agent) {
            log.events.clear();
        }
    }

    /// Checks and counts the message rate limits of `sender` in `conversation`
    /// (canon-wire.md §4.3). `Err(retry_after_seconds)` when a window is full.
    pub fn check_rate(&mut self, sender: &str, conversation: &str) -> Result<(), u64> {
        if !self.config.switches.rate_limits {
            return Ok(());
        }
        let now = self.now();
        let to_peer_agent = self.principals.get(sender).is_some_and(Principal::is_agent)
            && self.conversations.get(conversation).is_some_and(|c| {
                c.member_ids
                    .iter()
                    .any(|m| m != sender && self.principals.get(m).is_some_and(Principal::is_agent))
            });
        let mut windows = vec![
            (format!("sender:{sender}"), 300usize, 300_000u64),
            (format!("conversation:{conversation}"), 120, 300_000),
        ];
        if to_peer_agent {
            windows.push((format!("peer:{sender}"), 30, 3_600_000));
        }
        for (key, limit, span) in &windows {
            let (limit, span) = (*limit, *span);
            let list = self.rate_windows.entry(key.clone()).or_default();
            while list.front().is_some_and(|t| now.saturating_sub(*t) >= span) {
                list.pop_front();
            }
            if list.len() >= limit {
                let oldest = list.front().copied().unwrap_or(now);
                let wait_ms = span.saturating_sub(now.saturating_sub(oldest));
                return Err(wait_ms.div_ceil(1000).max(1));
            }
        }
        for (key, _, _) in windows {
            self.rate_windows.entry(key).or_default().push_back(now);
        }
        Ok(())
    }

    /// Stores a new message and emits `message.created` to every other agent member
    /// (canon-wire.md §11.4). Returns the serialized message.
    pub fn create_message(&mut self, new: NewMessage, overrides: &EmitOverrides) -> Value {
        let now = self.now();
        let id = self.ids.seq("m");
        let sender = self.principals.get(&new.sender_id).cloned();
        let conversation = self.conversations.get(&new.conversation_id).cloned();
        let sender_type = sender
            .as_ref()
            .map_or("human".to_owned(), |s| s.kind.clone());
        let is_owner = conversation
            .as_ref()
            .and_then(|c| c.roles.get(&new.sender_id))
            .is_some_and(|r| r == "owner");
        let content_type = new.content_type.clone().unwrap_or_else(|| {
            new.attachments
                .first()
                .and_then(|a| a.get("kind"))
                .and_then(Value::as_str)
                .unwrap_or("text")
                .to_owned()
        });
        let mut message = json!({
            "id": id,
            "senderId": new.sender_id,
            "senderName": sender.as_ref().map(|s| s.display_name.clone()),
            "senderType": sender_type,
            "isOwner": is_owner,
            "contentType": content_type,
            "text": new.text,
            "attachments": new.attachments,
            "mentions": new.mentions,
            "replyTo": new.reply_to,
            "replyToPosition": new.reply_to_position.clone().unwrap_or(Value::Null),
            "forwarded": new.forwarded_from.is_some(),
            "status": "sent",
            "createdAt": iso_8601(now),
        });
        if let Some(f) = &new.forwarded_from {
            message["forwardedFrom"] = f.clone();
        }
        if let Some(m) = &new.metadata {
            message["metadata"] = m.clone();
        }
        if let Some(c) = &new.contact_card {
            message["contactCard"] = c.clone();
        }
        if let Some(i) = &new.interaction {
            message["interaction"] = i.clone();
        }
        // Queued stamping applies per agent, but the stamp lives on the stored message.
        let agents: Vec<String> = conversation
            .as_ref()
            .map(|c| {
                c.member_ids
                    .iter()
                    .filter(|m| **m != new.sender_id)
                    .filter(|m| self.principals.get(*m).is_some_and(Principal::is_agent))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if self.config.switches.queued_stamping && sender_type == "human" {
            let intent = new
                .metadata
                .as_ref()
                .and_then(|m| m.get("deliveryIntent"))
                .and_then(Value::as_str);
            let busy = agents
                .iter()
                .any(|a| self.agent_busy(a, &new.conversation_id));
            if busy && intent.is_none_or(|i| i == "queue") {
                if !message["metadata"].is_object() {
                    message["metadata"] = json!({});
                }
                message["metadata"]["inboundDisposition"] = json!("queued");
            }
        }
        if self.messages.len() >= MESSAGES_CAP {
            if let Some(old) = self.messages.pop_front() {
                if let (Some(cid), Some(sender)) = (
                    old.client_id,
                    old.message.get("senderId").and_then(Value::as_str),
                ) {
                    self.idempotency.remove(&(sender.to_owned(), cid));
                }
            }
        }
        self.messages.push_back(StoredMessage {
            conversation_id: new.conversation_id.clone(),
            message: message.clone(),
            client_id: new.client_id.clone(),
        });
        if let Some(conv) = conversation {
            for agent in agents {
                self.deliver_message(&agent, &conv, &message, overrides);
            }
        }
        message
    }

    /// Whether `agent`'s last published turn state in `conversation` is open and not stale.
    pub fn agent_busy(&self, agent: &str, conversation: &str) -> bool {
        self.turn_states
            .get(&(agent.to_owned(), conversation.to_owned()))
            .and_then(normalize_runtime_turn_state)
            .is_some_and(|s| s.is_open(self.now()))
    }

    fn deliver_message(
        &mut self,
        agent: &str,
        conv: &Conversation,
        message: &Value,
        overrides: &EmitOverrides,
    ) {
        let sender_type = message.get("senderType").and_then(Value::as_str);
        let mut decision = should_trigger_agent_turn(sender_type, message.get("metadata"));
        if decision.allow && !self.participation_allows(agent, conv, message) {
            decision.allow = false;
        }
        let switches = &self.config.switches;
        let kind: Option<String> = match &overrides.turn_dispatch {
            Some(forced) => forced.clone(),
            None if switches.legacy_no_dispatch => None,
            None if decision.allow => Some("run_turn".to_owned()),
            None if switches.emit_suppressed => Some("suppress".to_owned()),
            None => return,
        };
        let wakes = match &kind {
            Some(k) => k == "run_turn",
            None => decision.allow,
        };
        let mentions = message.get("mentions").cloned().unwrap_or(json!([]));
        let mentioned = mentions
            .as_array()
            .is_some_and(|m| m.iter().any(|x| x.as_str() == Some(agent)));
        let mut payload = json!({
            "conversationId": conv.id,
            "conversation": overrides.conversation.clone().unwrap_or_else(|| conv.to_json()),
            "message": message,
            "provenance": overrides.provenance.clone().unwrap_or_else(|| json!({
                "conversation": {"type": conv.kind},
                "mentionedAgent": mentioned,
            })),
            "mentions": mentions,
        });
        if let Some(b) = &conv.behavior {
            payload["behavior"] = json!({"participation": b});
        }
        if let Some(k) = kind {
            payload["turnDispatch"] = json!({"kind": k});
        }
        if wakes {
            if let Some(a) = self.issue_authority(agent, &conv.id, message) {
                payload["replyAuthority"] = a;
            }
        }
        self.emit(agent, "message.created", payload.clone(), true);
        if overrides.duplicate {
            self.emit(agent, "message.created", payload, true);
        }
    }

    /// The participation part of the server verdict (canon-wire.md §11.4), applied only when a
    /// test configured a behavior policy on the conversation. The sim's reading of contracts
    /// `evaluateParticipationPolicy`: in groups `requireMentionForGroupReplies` needs a mention
    /// of `agent`; owner and human senders pass; `allowAgentToAgent:false` stops agent senders;
    /// `maxConsecutiveAgentTurns: N` stops an agent sender once the agent streak since the last
    /// human message (this one included) reaches N.
    fn participation_allows(&self, agent: &str, conv: &Conversation, message: &Value) -> bool {
        let Some(policy) = conv.behavior.as_ref().filter(|b| b.is_object()) else {
            return true;
        };
        let mentioned = message
            .get("mentions")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|x| x.as_str() == Some(agent)));
        if conv.kind == "group"
            && policy.get("requireMentionForGroupReplies") == Some(&Value::Bool(true))
            && !mentioned
        {
            return false;
        }
        if message.get("isOwner") == Some(&Value::Bool(true))
            || message.get("senderType").and_then(Value::as_str) != Some("ai_agent")
        {
            return true;
        }
        if policy.get("allowAgentToAgent") == Some(&Value::Bool(false)) {
            return false;
        }
        if let Some(max) = policy
            .get("maxConsecutiveAgentTurns")
            .and_then(Value::as_u64)
        {
            let current = message.get("id").and_then(Value::as_str);
            let prior = self
                .messages
                .iter()
                .rev()
                .filter(|m| m.conversation_id == conv.id)
                .filter(|m| m.message.get("id").and_then(Value::as_str) != current)
                .filter(|m| {
                    m.message
                        .pointer("/metadata/turnSemantics")
                        .and_then(Value::as_str)
                        != Some("progress")
                })
                .take_while(|m| {
                    m.message.get("senderType").and_then(Value::as_str) == Some("ai_agent")
                })
                .count();
            if u64::try_from(prior + 1).unwrap_or(u64::MAX) >= max {
                return false;
            }
        }
        true
    }

    fn issue_authority(
        &mut self,
        agent: &str,
        conversation: &str,
        message: &Value,
    ) -> Option<Value> {
        let source = message.get("id").and_then(Value::as_str)?.to_owned();
        let now = self.now();
        let expires_at = now + REPLY_AUTHORITY_TTL_MS;
        if self.authorities.len() >= ENTITY_CAP {
            self.authorities.retain(|_, a| a.expires_at > now);
        }
        let fault = self.config.switches.reply_authority_fault.clone();
        let token = match fault.as_deref() {
            Some("short_token") => self.ids.token(16),
            _ => self.ids.token(43),
        };
        let source_on_wire = match fault.as_deref() {
            Some("wrong_source") => format!("{source}-other"),
            _ => source.clone(),
        };
        self.authorities.insert(
            token.clone(),
            ReplyAuthority {
                agent: agent.to_owned(),
                conversation_id: conversation.to_owned(),
                source_message_id: source,
                expires_at,
                claimed_by: None,
            },
        );
        let mut value = json!({
            "schema": REPLY_AUTHORITY_SCHEMA,
            "sourceMessageId": source_on_wire,
            "token": token,
            "expiresAt": iso_8601(expires_at),
        });
        if self.config.switches.reply_authority_admission_id {
            value["admissionId"] = json!(self.ids.seq("adm"));
        }
        Some(value)
    }
}

/// Parameters of `create_principal` (canon-wire.md §11.5).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PrincipalSpec {
    /// Id (generated when absent).
    pub id: Option<String>,
    /// `human` or `ai_agent`.
    pub kind: String,
    /// Display name.
    pub display_name: Option<String>,
    /// Owner (agents).
    pub owner_id: Option<String>,
    /// API key (agents; generated when absent).
    pub api_key: Option<String>,
    /// Outbound policy.
    pub outbound_policy: Option<String>,
    /// Inbound policy.
    pub inbound_policy: Option<String>,
    /// Group-join policy.
    pub group_join_policy: Option<String>,
    /// Contacts.
    pub contacts: Vec<String>,
    /// Description.
    pub description: Option<String>,
}

/// Parameters of `create_conversation` (canon-wire.md §11.5).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConversationSpec {
    /// Id (generated when absent).
    pub id: Option<String>,
    /// `direct` or `group`.
    pub kind: String,
    /// Name.
    pub name: Option<String>,
    /// Members, in order (the first is the owner).
    pub member_ids: Vec<String>,
    /// Behavior policy (participation object).
    pub behavior: Option<Value>,
}

/// An answer given through the control API (canon-wire.md §11.5 `respond_interaction`).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Response {
    /// Conversation.
    pub conversation_id: String,
    /// `input`, `card` or `approval`.
    pub kind: String,
    /// Interaction id.
    pub id: String,
    /// Input: free-text value.
    pub value: Option<String>,
    /// Input: structured answers.
    pub answers: Option<Value>,
    /// Input: chosen choice.
    pub choice: Option<Value>,
    /// Card: action id.
    pub action_id: Option<String>,
    /// Card: field values.
    pub values: Option<Value>,
    /// Approval: `allow` or `deny`.
    pub decision: Option<String>,
    /// Approval: session rule.
    pub session_rule: Option<Value>,
    /// Input/card: `submitted` (default) or `cancelled`.
    pub status: Option<String>,
    /// Responder (default: the effective responder); `""` records no responder.
    pub responded_by: Option<String>,
    /// Apply the answer (and emit its receipt) only once the sim clock has advanced this many
    /// ms.
    pub delay_ms: Option<u64>,
}
