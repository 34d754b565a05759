//! The turn vocabulary (`turns.md` §1) and a port of the turn protocol
//! helpers of @canonmsg/backend-contracts 8.6.1 (`turns.md` §9.2).
//!
//! The JavaScript contract is the authority. Its rules that matter for a
//! port:
//!
//! * Metadata counts only when it is a plain JSON object; arrays and scalars
//!   behave exactly like absent metadata.
//! * An enumerated field counts only when it is one of its exact strings; any
//!   other value, including a non-string one, is treated as absent (the
//!   Python port raises on arrays; we never do).
//! * `turnId` and `requestedTurnMode` are trimmed with JavaScript's
//!   `String.prototype.trim` whitespace set ([`js_trim`]), which differs from
//!   Rust's `str::trim` in two characters (U+FEFF is trimmed, U+0085 is not).
//! * The sender type is compared exactly with `"human"`; anything else,
//!   including a missing sender type, is non-human.
//!
//! Invariants: every function is total over arbitrary JSON and never panics;
//! results equal the contract's results for the same JSON input (pinned by
//! `fixtures/dispatch/gate-cases.jsonl` and `turn-state-cases.jsonl`).

use std::fmt;

use serde_json::{Map, Value};

use crate::json::as_record;

/// Active-turn stale threshold: an open turn not updated for this long reads
/// as stale (turns.md §1 Limits, contracts `ACTIVE_TURN_STALE_THRESHOLD_MS`).
pub const ACTIVE_TURN_STALE_THRESHOLD_MS: u64 = 30 * 60 * 1000;

/// Stale threshold of a turn in `waiting_input` (turns.md §1 Limits,
/// contracts `WAITING_INPUT_STALE_THRESHOLD_MS`).
pub const WAITING_INPUT_STALE_THRESHOLD_MS: u64 = 12 * 60 * 60 * 1000;

/// Maximum length of a trimmed `requestedTurnMode` (turns.md §1).
pub const REQUESTED_TURN_MODE_MAX_CHARS: usize = 80;

/// Control message `metadata.type` values that are hidden runtime-card
/// receipts and never a turn (turns.md §1, contracts turnProtocol.js).
pub const HIDDEN_RUNTIME_CARD_TYPES: [&str; 7] = [
    "approval_reply",
    "approval_outcome",
    "plan_approval_reply",
    "runtime_input_reply",
    "runtime_input_outcome",
    "runtime_card_reply",
    "runtime_card_outcome",
];

macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $($(#[$vmeta:meta])* $variant:ident => $wire:literal,)+ }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in the order the specification lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The exact wire string.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }

            /// The value whose wire string is exactly `s` (no trimming, no
            /// case folding).
            pub fn from_wire(s: &str) -> Option<Self> {
                match s {
                    $($wire => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The value when `value` is exactly one of the wire strings.
            pub fn from_json(value: Option<&Value>) -> Option<Self> {
                value.and_then(Value::as_str).and_then(Self::from_wire)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum! {
    /// `metadata.turnSemantics` (turns.md §1).
    TurnSemantics {
        /// A non-final message of a turn; never wakes another agent.
        Progress => "progress",
        /// The one durable message that completes a turn.
        TurnComplete => "turn_complete",
        /// A control message.
        Control => "control",
    }
}

wire_enum! {
    /// `metadata.replyBehavior` (turns.md §1).
    ReplyBehavior {
        /// Other agents may reply automatically.
        AllowAutoReply => "allow_auto_reply",
        /// No agent may be woken by this message.
        SuppressAutoReply => "suppress_auto_reply",
    }
}

wire_enum! {
    /// `metadata.deliveryIntent` (turns.md §1, §10).
    DeliveryIntent {
        /// Wait for the running turn (the protocol default).
        Queue => "queue",
        /// Interrupt the running turn and run this message next.
        Interrupt => "interrupt",
        /// Steer the running turn with this message.
        Interleave => "interleave",
        /// Drop the queue, interrupt, and run this message next.
        Stop => "stop",
    }
}

wire_enum! {
    /// `metadata.inboundDisposition` (turns.md §1).
    InboundDisposition {
        /// Waiting behind a running turn.
        Queued => "queued",
        /// Started running.
        AcceptedNow => "accepted_now",
        /// Steered into a running turn.
        Interleaved => "interleaved",
        /// Did not wake a turn.
        TriggerSuppressed => "trigger_suppressed",
        /// Refused.
        Rejected => "rejected",
        /// Cancelled before it ran.
        Cancelled => "cancelled",
    }
}

wire_enum! {
    /// Runtime turn `state` (turns.md §1).
    TurnLifecycleState {
        /// No turn.
        Idle => "idle",
        /// Open: the model is thinking.
        Thinking => "thinking",
        /// Open: text is streaming.
        Streaming => "streaming",
        /// Open: a tool is running.
        Tool => "tool",
        /// Open: waiting for a human answer.
        WaitingInput => "waiting_input",
        /// Closed normally.
        Completed => "completed",
        /// Closed by an interruption.
        Interrupted => "interrupted",
    }
}

impl TurnLifecycleState {
    /// Whether this is one of the open states (`thinking`, `streaming`,
    /// `tool`, `waiting_input`).
    pub fn is_open_state(self) -> bool {
        matches!(
            self,
            Self::Thinking | Self::Streaming | Self::Tool | Self::WaitingInput
        )
    }
}

/// Trims JavaScript's whitespace set (ECMAScript `WhiteSpace` plus
/// `LineTerminator`) from both ends, as `String.prototype.trim` does.
///
/// Unlike [`str::trim`] this removes U+FEFF and keeps U+0085.
pub fn js_trim(s: &str) -> &str {
    s.trim_matches(is_js_whitespace)
}

fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{0009}'
            | '\u{000A}'
            | '\u{000B}'
            | '\u{000C}'
            | '\u{000D}'
            | '\u{0020}'
            | '\u{00A0}'
            | '\u{1680}'
            | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

fn is_valid_turn_mode(trimmed: &str) -> bool {
    (1..=REQUESTED_TURN_MODE_MAX_CHARS).contains(&trimmed.len())
        && trimmed
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// The recognized turn fields of a message's metadata, as returned by
/// [`normalize_turn_metadata`]. Fields have no invariant beyond their type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnMetadata {
    /// `turnId`, trimmed and non-empty.
    pub turn_id: Option<String>,
    /// `turnSemantics`, when it was an exact wire value.
    pub turn_semantics: Option<TurnSemantics>,
    /// `deliveryIntent`, when it was an exact wire value.
    pub delivery_intent: Option<DeliveryIntent>,
    /// `replyBehavior`, when it was an exact wire value.
    pub reply_behavior: Option<ReplyBehavior>,
    /// `inboundDisposition`, when it was an exact wire value.
    pub inbound_disposition: Option<InboundDisposition>,
    /// `requestedTurnMode`, trimmed and matching `^[A-Za-z0-9_.:-]{1,80}$`.
    pub requested_turn_mode: Option<String>,
}

impl TurnMetadata {
    /// The JSON object the contract returns: present fields only, in the
    /// order `turnId`, `turnSemantics`, `deliveryIntent`, `replyBehavior`,
    /// `inboundDisposition`, `requestedTurnMode`.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        if let Some(v) = &self.turn_id {
            out.insert("turnId".into(), Value::from(v.as_str()));
        }
        if let Some(v) = self.turn_semantics {
            out.insert("turnSemantics".into(), Value::from(v.as_str()));
        }
        if let Some(v) = self.delivery_intent {
            out.insert("deliveryIntent".into(), Value::from(v.as_str()));
        }
        if let Some(v) = self.reply_behavior {
            out.insert("replyBehavior".into(), Value::from(v.as_str()));
        }
        if let Some(v) = self.inbound_disposition {
            out.insert("inboundDisposition".into(), Value::from(v.as_str()));
        }
        if let Some(v) = &self.requested_turn_mode {
            out.insert("requestedTurnMode".into(), Value::from(v.as_str()));
        }
        Value::Object(out)
    }
}

/// Port of the contract's `normalizeTurnMetadata`: `None` unless `metadata`
/// is a plain object carrying at least one recognized field.
pub fn normalize_turn_metadata(metadata: Option<&Value>) -> Option<TurnMetadata> {
    let record = as_record(metadata)?;
    let turn_id = record
        .get("turnId")
        .and_then(Value::as_str)
        .map(js_trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let requested_turn_mode = record
        .get("requestedTurnMode")
        .and_then(Value::as_str)
        .map(js_trim)
        .filter(|s| is_valid_turn_mode(s))
        .map(str::to_owned);
    let normalized = TurnMetadata {
        turn_id,
        turn_semantics: TurnSemantics::from_json(record.get("turnSemantics")),
        delivery_intent: DeliveryIntent::from_json(record.get("deliveryIntent")),
        reply_behavior: ReplyBehavior::from_json(record.get("replyBehavior")),
        inbound_disposition: InboundDisposition::from_json(record.get("inboundDisposition")),
        requested_turn_mode,
    };
    (normalized != TurnMetadata::default()).then_some(normalized)
}

fn is_human(sender_type: Option<&str>) -> bool {
    sender_type == Some("human")
}

/// The recognized `turnSemantics` of `metadata`. Equal to the contract's
/// `normalizeTurnMetadata(metadata)?.turnSemantics`: a recognized value makes
/// the normalized metadata non-null by itself.
fn explicit_semantics(metadata: Option<&Value>) -> Option<TurnSemantics> {
    as_record(metadata).and_then(|m| TurnSemantics::from_json(m.get("turnSemantics")))
}

fn resolve_from(sender_type: Option<&str>, explicit: Option<TurnSemantics>) -> TurnSemantics {
    match explicit {
        Some(semantics) => semantics,
        None if is_human(sender_type) => TurnSemantics::TurnComplete,
        None => TurnSemantics::Progress,
    }
}

/// Port of `resolveTurnMessageSemantics`: the recognized `turnSemantics`,
/// else `turn_complete` for a human sender, else `progress`.
pub fn resolve_turn_message_semantics(
    sender_type: Option<&str>,
    metadata: Option<&Value>,
) -> TurnSemantics {
    resolve_from(sender_type, explicit_semantics(metadata))
}

/// Whether `metadata.type` is one of [`HIDDEN_RUNTIME_CARD_TYPES`] (exact).
pub fn is_hidden_runtime_card_metadata(metadata: Option<&Value>) -> bool {
    as_record(metadata)
        .and_then(|m| m.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| HIDDEN_RUNTIME_CARD_TYPES.contains(&t))
}

/// Port of `shouldPromoteConversationMessage` (informative; turns.md §9.2).
pub fn should_promote_conversation_message(
    sender_type: Option<&str>,
    metadata: Option<&Value>,
) -> bool {
    if is_hidden_runtime_card_metadata(metadata) {
        return false;
    }
    match metadata {
        None | Some(Value::Null) => return true,
        Some(Value::Object(m)) if !m.contains_key("turnSemantics") => return true,
        _ => {}
    }
    resolve_turn_message_semantics(sender_type, metadata) != TurnSemantics::Progress
}

/// Why [`should_trigger_agent_turn`] decided as it did. [`Self::as_str`] is
/// the contract's exact reason string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TriggerReason {
    /// `replyBehavior` is `suppress_auto_reply` (any sender).
    SuppressedByMetadata,
    /// The sender is human.
    HumanSender,
    /// A non-human sender with an explicit `turnSemantics: "progress"`.
    AgentProgress,
    /// A non-human sender without recognized `turnSemantics`.
    AgentWithoutSemantics,
    /// A non-human sender with `turn_complete` or `control`.
    AgentTurnComplete,
}

impl TriggerReason {
    /// The exact reason string of the contract (turns.md §9.2).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SuppressedByMetadata => "metadata explicitly suppresses auto-reply",
            Self::HumanSender => "human messages always remain triggerable",
            Self::AgentProgress => "non-final agent progress does not trigger other agents",
            Self::AgentWithoutSemantics => {
                "agent messages require explicit turn_complete semantics"
            }
            Self::AgentTurnComplete => "agent message is treated as turn-complete",
        }
    }
}

impl fmt::Display for TriggerReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of [`should_trigger_agent_turn`] (the contract's
/// `TriggerDecision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Whether the message may wake an agent turn.
    pub allow: bool,
    /// The resolved semantics of the message.
    pub semantics: TurnSemantics,
    /// Why.
    pub reason: TriggerReason,
}

/// Port of the contract's `shouldTriggerAgentTurn({senderType, metadata})`,
/// the fallback wake rule of turns.md §9.2.
///
/// `sender_type` is the message's `senderType` when it is a string; pass
/// `None` for a missing or non-string value. `metadata` is the message's
/// `metadata` member as received (any JSON value, or `None` when absent).
pub fn should_trigger_agent_turn(sender_type: Option<&str>, metadata: Option<&Value>) -> Decision {
    // `normalizeTurnMetadata` is non-null whenever either field below is
    // recognized, so reading the two fields directly gives the same result
    // without building (and allocating) the whole normalized value.
    let explicit = explicit_semantics(metadata);
    let reply = as_record(metadata).and_then(|m| ReplyBehavior::from_json(m.get("replyBehavior")));
    let semantics = resolve_from(sender_type, explicit);
    let (allow, reason) = if reply == Some(ReplyBehavior::SuppressAutoReply) {
        (false, TriggerReason::SuppressedByMetadata)
    } else if is_human(sender_type) {
        (true, TriggerReason::HumanSender)
    } else if semantics == TurnSemantics::Progress {
        if explicit == Some(TurnSemantics::Progress) {
            (false, TriggerReason::AgentProgress)
        } else {
            (false, TriggerReason::AgentWithoutSemantics)
        }
    } else {
        (true, TriggerReason::AgentTurnComplete)
    };
    Decision {
        allow,
        semantics,
        reason,
    }
}

/// A runtime turn state as returned by [`normalize_runtime_turn_state`].
/// Timestamps are epoch milliseconds as JSON numbers (JavaScript doubles).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuntimeTurnState {
    /// The lifecycle state.
    pub state: TurnLifecycleState,
    /// `openedAt`, when it was a number.
    pub opened_at: Option<f64>,
    /// `updatedAt`, when it was a number.
    pub updated_at: Option<f64>,
    /// `turnUpdatedAt`, when it was a number.
    pub turn_updated_at: Option<f64>,
}

impl RuntimeTurnState {
    /// Port of `isTurnStateStale`: an open state whose latest timestamp
    /// (`turnUpdatedAt`, else `updatedAt`, else `openedAt`) is at least the
    /// state's threshold older than `now_ms`. Without a timestamp it is not
    /// stale.
    pub fn is_stale(&self, now_ms: u64) -> bool {
        if !self.state.is_open_state() {
            return false;
        }
        let Some(updated) = self.turn_updated_at.or(self.updated_at).or(self.opened_at) else {
            return false;
        };
        // JavaScript compares doubles; so do we.
        now_ms as f64 - updated >= turn_state_stale_threshold_ms(self.state) as f64
    }

    /// Port of `isTurnOpen`: an open state that is not stale.
    pub fn is_open(&self, now_ms: u64) -> bool {
        self.state.is_open_state() && !self.is_stale(now_ms)
    }

    /// The contract's JSON form: `state`, then the present timestamps in the
    /// order `openedAt`, `updatedAt`, `turnUpdatedAt`.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("state".into(), Value::from(self.state.as_str()));
        for (key, value) in [
            ("openedAt", self.opened_at),
            ("updatedAt", self.updated_at),
            ("turnUpdatedAt", self.turn_updated_at),
        ] {
            if let Some(v) = value {
                out.insert(key.into(), Value::from(v));
            }
        }
        Value::Object(out)
    }
}

/// Port of `getTurnStateStaleThresholdMs`.
pub fn turn_state_stale_threshold_ms(state: TurnLifecycleState) -> u64 {
    if state == TurnLifecycleState::WaitingInput {
        WAITING_INPUT_STALE_THRESHOLD_MS
    } else {
        ACTIVE_TURN_STALE_THRESHOLD_MS
    }
}

/// Port of `normalizeRuntimeTurnState`: `None` unless `value` is an object
/// whose `state` is an exact lifecycle value; non-number timestamps are
/// dropped.
pub fn normalize_runtime_turn_state(value: &Value) -> Option<RuntimeTurnState> {
    let record = value.as_object()?;
    let state = TurnLifecycleState::from_json(record.get("state"))?;
    let number = |key: &str| record.get(key).and_then(Value::as_f64);
    Some(RuntimeTurnState {
        state,
        opened_at: number("openedAt"),
        updated_at: number("updatedAt"),
        turn_updated_at: number("turnUpdatedAt"),
    })
}

#[cfg(test)]
mod tests;
