//! The inbound pipeline for an SSE `message.created` payload
//! (`turns.md` §9.1), as a small sans-I/O state machine.
//!
//! [`Dispatcher::handle_message_created`] runs the steps in their normative
//! order and returns one [`Outcome`]:
//!
//! | Step | Rule | Outcome when it stops here |
//! |---|---|---|
//! | 1 | `payload.message` is an object | [`Ignored::MessageNotObject`] |
//! | 2 | not the agent's own echo | [`Ignored::OwnEcho`] |
//! | 3 | detached-approval receipt (`approval_reply` with an `approvalId`) | [`Outcome::ApprovalReceipt`]: the caller consults the approvals registry; when the id is not there the message is a dropped control message, exactly as step 4 would do |
//! | 4 | not a control type ([`HIDDEN_RUNTIME_CARD_TYPES`]) | [`Ignored::ControlMessage`] |
//! | 5 | `message.id` not among the last 1,024 ids (then recorded) | [`Ignored::Duplicate`] |
//! | 6 | `payload.conversationId` present | [`Ignored::MissingConversationId`] |
//! | 7 | record the declared conversation type (turns.md §6.2) | |
//! | 8 | non-empty inbound text | [`Ignored::EmptyText`] |
//! | 9 | the wake gate (turns.md §9.2) says yes, else the text is held (§9.3) | [`Outcome::Suppressed`] |
//! | 10–11 | delivery intent, event fields, drained `channel_context`, reply authority | [`Outcome::Wake`] |
//!
//! What stays with the caller (it needs I/O or state this crate does not
//! own): the conversation cache (cache `payload.conversation` whenever
//! [`Outcome::reached_conversation_step`] is true, and pass the cached entry
//! in), the approvals registry (step 3), attachment materialization and the
//! media demotion of step 10 ([`crate::intent::demote_for_hidden_media`]),
//! and handing the event to Hermes.
//!
//! Invariants: total over arbitrary JSON; memory is bounded by
//! [`SEEN_MESSAGE_IDS`], [`MAX_CONVERSATION_TYPES`] and the buffer bounds.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::Value;

use crate::buffer::ContextBuffer;
use crate::gate::{decide_wake, WakeDecision};
use crate::intent::delivery_intent;
use crate::json::str_field;
use crate::prompt::{channel_prompt, chat_name, hermes_chat_type, inbound_text};
use crate::protocol::{DeliveryIntent, HIDDEN_RUNTIME_CARD_TYPES};
use crate::verbosity::{cached_conversation_type, declared_conversation_type, ConversationType};

/// Message ids remembered for de-duplication (turns.md §1 Limits, §9.1
/// step 5; FIFO eviction).
pub const SEEN_MESSAGE_IDS: usize = 1_024;

/// Conversations whose declared type is remembered. The reference keeps this
/// map unbounded; we cap it (our number) and evict in insertion order. An
/// evicted conversation falls back to its cached conversation object.
pub const MAX_CONVERSATION_TYPES: usize = 4_096;

/// Why a payload was ignored without a turn and without being held.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ignored {
    /// Step 1: `payload.message` is not an object.
    MessageNotObject,
    /// Step 2: the message was sent by this agent.
    OwnEcho,
    /// Step 4: `metadata.type` is a control type.
    ControlMessage {
        /// The control type.
        message_type: String,
    },
    /// Step 5: the message id was seen recently.
    Duplicate,
    /// Step 6: no `conversationId`.
    MissingConversationId,
    /// Step 8: the message contributes no text.
    EmptyText,
}

/// The result of [`Dispatcher::handle_message_created`].
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Dropped; nothing to do.
    Ignored(Ignored),
    /// Step 3: an `approval_reply` receipt. If `approval_id` is in the local
    /// detached registry the caller consumes it (approvals.md §12);
    /// otherwise it is a dropped control message. Never a turn.
    ApprovalReceipt {
        /// `metadata.approvalId`.
        approval_id: String,
        /// `payload.conversationId`, when present.
        conversation_id: Option<String>,
    },
    /// Step 9: the gate said no; the text is now held for the conversation.
    Suppressed {
        /// The conversation whose buffer holds the text.
        conversation_id: String,
        /// The gate's decision.
        decision: WakeDecision,
    },
    /// Steps 10–11: the message wakes a turn.
    Wake(Box<WakeEvent>),
}

impl Outcome {
    /// Whether the pipeline got past step 6, i.e. the caller must now cache
    /// `payload.conversation` when it is an object (step 7).
    pub fn reached_conversation_step(&self) -> bool {
        matches!(
            self,
            Outcome::Wake(_) | Outcome::Suppressed { .. } | Outcome::Ignored(Ignored::EmptyText)
        )
    }
}

/// The Hermes event source (turns.md §9.1 step 11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSource {
    /// The conversation id.
    pub chat_id: String,
    /// The conversation's name, topic or id, when known.
    pub chat_name: Option<String>,
    /// `"group"` or `"dm"`.
    pub chat_type: &'static str,
    /// The sender id, only when `senderType` is exactly `human`.
    pub user_id: Option<String>,
    /// `senderName`, when it is a string.
    pub user_name: Option<String>,
    /// `message.id`, when it is a string.
    pub message_id: Option<String>,
}

/// Everything the adapter needs to hand a waking message to Hermes.
#[derive(Debug, Clone, PartialEq)]
pub struct WakeEvent {
    /// `payload.conversationId`.
    pub conversation_id: String,
    /// The inbound text (turns.md §9.1 step 8), before any media markers.
    pub text: String,
    /// The Hermes event source.
    pub source: EventSource,
    /// `message.replyTo`, when it is a string.
    pub reply_to_message_id: Option<String>,
    /// The channel prompt (turns.md §9.4).
    pub channel_prompt: Option<String>,
    /// The delivery intent (turns.md §10.1), before the media demotion of step 10.
    pub delivery_intent: DeliveryIntent,
    /// The drained held buffer (turns.md §9.3), if the conversation held anything.
    pub channel_context: Option<String>,
    /// The gate's decision.
    pub decision: WakeDecision,
    /// A copy of the payload without `replyAuthority`, for Hermes. The reply
    /// authority is validated once, by `canon_wire::events::MessageCreated`;
    /// stripping it here as well keeps the token out of the host payload
    /// whatever the caller passed in.
    pub host_payload: Value,
}

/// The agent-side context a payload is judged in.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    /// The own agent id (for the echo check and mentions).
    pub agent_id: Option<&'a str>,
    /// The own agent display name (for the group prompt).
    pub agent_name: Option<&'a str>,
    /// The cached conversation object for `payload.conversationId`, if any.
    pub cached_conversation: Option<&'a Value>,
}

/// The inbound pipeline's state: the seen-id window, the declared
/// conversation types and the held buffer.
#[derive(Debug, Clone, Default)]
pub struct Dispatcher {
    seen_order: VecDeque<String>,
    seen: HashSet<String>,
    types_order: VecDeque<String>,
    types: HashMap<String, ConversationType>,
    buffer: ContextBuffer,
}

impl Dispatcher {
    /// Runs turns.md §9.1 over one `message.created` payload.
    pub fn handle_message_created(&mut self, payload: &Value, ctx: Context<'_>) -> Outcome {
        // Step 1.
        let Some(message) = payload.get("message").filter(|m| m.is_object()) else {
            return Outcome::Ignored(Ignored::MessageNotObject);
        };
        // Step 2.
        let sender_id = str_field(message, "senderId");
        if sender_id.is_some() && sender_id == ctx.agent_id {
            return Outcome::Ignored(Ignored::OwnEcho);
        }
        let conversation_id = str_field(payload, "conversationId").filter(|c| !c.is_empty());
        // Steps 3 and 4.
        let metadata = message.get("metadata").filter(|m| m.is_object());
        let message_type = metadata.and_then(|m| str_field(m, "type"));
        if message_type == Some("approval_reply") {
            if let Some(approval_id) = metadata
                .and_then(|m| str_field(m, "approvalId"))
                .filter(|id| !id.is_empty())
            {
                return Outcome::ApprovalReceipt {
                    approval_id: approval_id.to_owned(),
                    conversation_id: conversation_id.map(str::to_owned),
                };
            }
        }
        if let Some(t) = message_type.filter(|t| HIDDEN_RUNTIME_CARD_TYPES.contains(t)) {
            return Outcome::Ignored(Ignored::ControlMessage {
                message_type: t.to_owned(),
            });
        }
        // Step 5.
        let message_id = str_field(message, "id");
        if let Some(id) = message_id {
            if !self.remember_id(id) {
                return Outcome::Ignored(Ignored::Duplicate);
            }
        }
        // Step 6.
        let Some(conversation_id) = conversation_id else {
            return Outcome::Ignored(Ignored::MissingConversationId);
        };
        // Step 7.
        if let Some(declared) = declared_conversation_type(payload) {
            self.remember_type(conversation_id, declared);
        }
        let conversation = payload
            .get("conversation")
            .filter(|c| c.is_object())
            .or(ctx.cached_conversation);
        // Step 8.
        let text = inbound_text(message);
        if text.is_empty() {
            return Outcome::Ignored(Ignored::EmptyText);
        }
        // Step 9.
        let decision = decide_wake(payload, message);
        if !decision.wake {
            self.buffer.record(conversation_id, message, &text);
            return Outcome::Suppressed {
                conversation_id: conversation_id.to_owned(),
                decision,
            };
        }
        // Steps 10 and 11.
        let human = str_field(message, "senderType") == Some("human");
        let mut host_payload = payload.clone();
        if let Some(map) = host_payload.as_object_mut() {
            map.retain(|key, _| key != "replyAuthority");
        }
        let event = WakeEvent {
            conversation_id: conversation_id.to_owned(),
            text,
            source: EventSource {
                chat_id: conversation_id.to_owned(),
                chat_name: chat_name(conversation).map(str::to_owned),
                chat_type: hermes_chat_type(conversation),
                user_id: sender_id.filter(|_| human).map(str::to_owned),
                user_name: str_field(message, "senderName").map(str::to_owned),
                message_id: message_id.map(str::to_owned),
            },
            reply_to_message_id: str_field(message, "replyTo").map(str::to_owned),
            channel_prompt: channel_prompt(payload, conversation, ctx.agent_id, ctx.agent_name),
            delivery_intent: delivery_intent(message),
            channel_context: self.buffer.drain(conversation_id),
            decision,
            host_payload,
        };
        Outcome::Wake(Box::new(event))
    }

    /// The conversation type for verbosity (turns.md §6.2): the type a
    /// payload declared, else the cached conversation's type, else unknown.
    pub fn conversation_type(
        &self,
        conversation_id: &str,
        cached_conversation: Option<&Value>,
    ) -> ConversationType {
        self.types
            .get(conversation_id)
            .copied()
            .or_else(|| cached_conversation_type(cached_conversation))
            .unwrap_or(ConversationType::Unknown)
    }

    /// The held buffer (read-only).
    pub fn buffer(&self) -> &ContextBuffer {
        &self.buffer
    }

    /// The held buffer, for a caller that wakes a turn on another path (for
    /// example an approval wake) and drains the context itself.
    pub fn buffer_mut(&mut self) -> &mut ContextBuffer {
        &mut self.buffer
    }

    /// Records `id`; false when it was already among the remembered ids.
    fn remember_id(&mut self, id: &str) -> bool {
        if self.seen.contains(id) {
            return false;
        }
        if self.seen_order.len() >= SEEN_MESSAGE_IDS {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen.remove(&old);
            }
        }
        self.seen_order.push_back(id.to_owned());
        self.seen.insert(id.to_owned());
        true
    }

    fn remember_type(&mut self, conversation_id: &str, declared: ConversationType) {
        if let Some(slot) = self.types.get_mut(conversation_id) {
            *slot = declared;
            return;
        }
        if self.types_order.len() >= MAX_CONVERSATION_TYPES {
            if let Some(old) = self.types_order.pop_front() {
                self.types.remove(&old);
            }
        }
        self.types_order.push_back(conversation_id.to_owned());
        self.types.insert(conversation_id.to_owned(), declared);
    }
}

#[cfg(test)]
mod tests;
