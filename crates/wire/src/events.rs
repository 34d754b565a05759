//! The event catalogue of canon-wire.md §5.3 as typed events.
//!
//! [`Event::from_frame`] turns a parsed [`Frame`] into an [`EventKind`]. It
//! never fails and never panics: unknown event names are preserved as
//! [`EventKind::Unknown`], the explicitly ignored ones as
//! [`EventKind::Ignored`], and a known event whose data lacks what the
//! catalogue requires becomes [`EventKind::Malformed`] with the data kept. A
//! `message.created` reply authority is validated (canon-wire.md §5.5) and
//! removed from the payload, so the payload can be handed on as raw context.

use serde_json::{Map, Value};

use crate::authority::ReplyAuthority;
use crate::sse::Frame;

/// One event from the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The frame id (the stream cursor), when the frame had one.
    pub id: Option<String>,
    /// What happened.
    pub kind: EventKind,
}

/// The canon-wire.md §5.3 catalogue.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EventKind {
    /// `connected` (no state change).
    Connected(Value),
    /// `heartbeat` (liveness only).
    Heartbeat(Value),
    /// `error`: logged as a warning, the stream stays open.
    Error(Value),
    /// `replay.expired`: the stream has already applied the cursor change.
    ReplayExpired {
        /// `lastAvailableId` when present and non-empty.
        last_available_id: Option<String>,
    },
    /// `agent.context`.
    AgentContext {
        /// `agentId` | `id` | `userId` (first present string).
        agent_id: Option<String>,
        /// `outboundPolicy` when a string; `None` means "clear it" (canon-wire.md §5.3).
        outbound_policy: Option<String>,
    },
    /// `conversation.updated`.
    ConversationUpdated {
        /// `conversationId` | `id`.
        conversation_id: String,
        /// `changes` (empty when absent or not an object).
        changes: Map<String, Value>,
    },
    /// `runtime.control` (a doorbell; `kind == "signal"` means consume now).
    RuntimeControl {
        /// `conversationId`.
        conversation_id: String,
        /// `kind` (empty when absent).
        kind: String,
    },
    /// `message.created` (canon-wire.md §5.4).
    MessageCreated(Box<MessageCreated>),
    /// An event the adapter explicitly ignores (`message.updated`, `typing`, …).
    Ignored {
        /// The event name.
        name: String,
        /// The data.
        data: Value,
    },
    /// An event name outside the catalogue (preserved, ignored by callers).
    Unknown {
        /// The event name.
        name: String,
        /// The data.
        data: Value,
    },
    /// A catalogue event whose data lacks a required field.
    Malformed {
        /// The event name.
        name: String,
        /// The data as received.
        data: Value,
        /// Which rule failed.
        reason: &'static str,
    },
}

/// Events canon-wire.md §5.3 lists as explicitly ignored.
const EXPLICITLY_IGNORED: [&str; 8] = [
    "message.updated",
    "message.deleted",
    "typing",
    "presence",
    "contact.added",
    "contact.removed",
    "runtime.turn",
    "voice.session",
];

/// A validated `message.created` payload (canon-wire.md §5.4.1).
#[derive(Debug, Clone, PartialEq)]
pub struct MessageCreated {
    /// `conversationId` (required).
    pub conversation_id: String,
    /// `message` (required object; `SerializedMessage`).
    pub message: Map<String, Value>,
    /// `replyAuthority`, only when every canon-wire.md §5.5 rule holds.
    pub reply_authority: Option<ReplyAuthority>,
    /// The whole payload **without** `replyAuthority`.
    pub payload: Map<String, Value>,
}

impl MessageCreated {
    fn message_str(&self, key: &str) -> Option<&str> {
        self.message.get(key).and_then(Value::as_str)
    }

    /// `message.id` (the dedup key).
    pub fn message_id(&self) -> Option<&str> {
        self.message_str("id")
    }

    /// `message.senderId`.
    pub fn sender_id(&self) -> Option<&str> {
        self.message_str("senderId")
    }

    /// `message.senderType`.
    pub fn sender_type(&self) -> Option<&str> {
        self.message_str("senderType")
    }

    /// `message.metadata`, when an object.
    pub fn metadata(&self) -> Option<&Map<String, Value>> {
        self.message.get("metadata").and_then(Value::as_object)
    }

    /// `payload.turnDispatch.kind`, when a non-empty string.
    pub fn turn_dispatch_kind(&self) -> Option<&str> {
        self.payload
            .get("turnDispatch")
            .and_then(Value::as_object)
            .and_then(|d| d.get("kind"))
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty())
    }
}

fn first_str(object: &Map<String, Value>, keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|key| object.get(*key).and_then(Value::as_str))
        .map(str::to_owned)
}

impl Event {
    /// Types one frame. Never fails.
    pub fn from_frame(frame: Frame) -> Event {
        let Frame { event, data, id } = frame;
        let data = data.into_value();
        Event {
            id,
            kind: EventKind::classify(event, data),
        }
    }
}

impl EventKind {
    fn classify(name: String, data: Value) -> EventKind {
        let malformed =
            |name: String, data: Value, reason| EventKind::Malformed { name, data, reason };
        match name.as_str() {
            "connected" => EventKind::Connected(data),
            "heartbeat" => EventKind::Heartbeat(data),
            "error" => EventKind::Error(data),
            "replay.expired" => EventKind::ReplayExpired {
                last_available_id: data
                    .get("lastAvailableId")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            },
            "agent.context" => match data.as_object() {
                Some(object) => EventKind::AgentContext {
                    agent_id: first_str(object, &["agentId", "id", "userId"]),
                    outbound_policy: object
                        .get("outboundPolicy")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                },
                None => malformed(name, data, "data is not an object"),
            },
            "conversation.updated" => {
                let Some(object) = data.as_object() else {
                    return malformed(name, data, "data is not an object");
                };
                let Some(conversation_id) = first_str(object, &["conversationId", "id"]) else {
                    return malformed(name, data, "missing conversationId");
                };
                let changes = object
                    .get("changes")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                EventKind::ConversationUpdated {
                    conversation_id,
                    changes,
                }
            }
            "runtime.control" => {
                let conversation_id = data
                    .get("conversationId")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                match conversation_id {
                    Some(conversation_id) => EventKind::RuntimeControl {
                        kind: data
                            .get("kind")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        conversation_id,
                    },
                    None => malformed(name, data, "missing conversationId"),
                }
            }
            "message.created" => {
                let Value::Object(mut payload) = data else {
                    return malformed(name, data, "data is not an object");
                };
                // The token leaves the payload first, so even a malformed event (kept, and
                // logged at trace level) never carries it.
                let authority = payload.remove("replyAuthority");
                let conversation_id = payload
                    .get("conversationId")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let message = payload.get("message").and_then(Value::as_object).cloned();
                let (Some(conversation_id), Some(message)) = (conversation_id, message) else {
                    return malformed(
                        name,
                        Value::Object(payload),
                        "missing conversationId or message object",
                    );
                };
                let message_id = message
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let reply_authority =
                    authority.and_then(|a| ReplyAuthority::accept(&a, message_id));
                EventKind::MessageCreated(Box::new(MessageCreated {
                    conversation_id,
                    message,
                    reply_authority,
                    payload,
                }))
            }
            other if EXPLICITLY_IGNORED.contains(&other) => EventKind::Ignored { name, data },
            _ => EventKind::Unknown { name, data },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_message_event_keeps_no_reply_authority() {
        let data = serde_json::json!({"replyAuthority": {"token": "secret-token-123"},
                                      "message": {"id": "m1"}});
        let kind = EventKind::classify("message.created".to_owned(), data);
        assert!(matches!(kind, EventKind::Malformed { .. }), "{kind:?}");
        assert!(
            !format!("{kind:?}").contains("secret-token-123"),
            "{kind:?}"
        );
    }
    use crate::sse::{FrameData, SseParser};
    use proptest::prelude::*;
    use serde_json::json;

    fn event(name: &str, data: Value) -> EventKind {
        Event::from_frame(Frame {
            event: name.into(),
            data: FrameData::Json(data),
            id: Some("1".into()),
        })
        .kind
    }

    #[test]
    fn catalogue_is_typed() {
        assert_eq!(
            event("replay.expired", json!({"lastAvailableId": "41"})),
            EventKind::ReplayExpired {
                last_available_id: Some("41".into())
            }
        );
        assert_eq!(
            event("replay.expired", json!({"lastAvailableId": ""})),
            EventKind::ReplayExpired {
                last_available_id: None
            }
        );
        assert_eq!(
            event("agent.context", json!({"userId": "a", "outboundPolicy": 3})),
            EventKind::AgentContext {
                agent_id: Some("a".into()),
                outbound_policy: None
            }
        );
        assert_eq!(
            event(
                "conversation.updated",
                json!({"id": "c", "changes": {"name": "N"}})
            ),
            EventKind::ConversationUpdated {
                conversation_id: "c".into(),
                changes: json!({"name": "N"}).as_object().unwrap().clone()
            }
        );
        assert_eq!(
            event(
                "runtime.control",
                json!({"conversationId": "c", "kind": "signal"})
            ),
            EventKind::RuntimeControl {
                conversation_id: "c".into(),
                kind: "signal".into()
            }
        );
        assert!(matches!(
            event("typing", json!({})),
            EventKind::Ignored { .. }
        ));
        assert!(matches!(
            event("heartbeat", json!({"timestamp": 1})),
            EventKind::Heartbeat(_)
        ));
        assert_eq!(
            event("ephemeral.x", json!([1])),
            EventKind::Unknown {
                name: "ephemeral.x".into(),
                data: json!([1])
            }
        );
    }

    #[test]
    fn message_created_extracts_and_strips_reply_authority() {
        let authority = json!({"schema": crate::authority::REPLY_AUTHORITY_SCHEMA, "sourceMessageId": "m1",
                               "token": "k".repeat(43), "expiresAt": "2026-01-01T00:10:00Z"});
        let kind = event(
            "message.created",
            json!({"conversationId": "c1", "message": {"id": "m1", "senderId": "u", "senderType": "human"},
                   "turnDispatch": {"kind": "run_turn"}, "replyAuthority": authority}),
        );
        let EventKind::MessageCreated(created) = kind else {
            panic!("expected message.created, got {kind:?}");
        };
        assert_eq!(created.message_id(), Some("m1"));
        assert_eq!(created.sender_type(), Some("human"));
        assert_eq!(created.turn_dispatch_kind(), Some("run_turn"));
        assert!(created.reply_authority.is_some());
        assert!(!created.payload.contains_key("replyAuthority"));
        assert!(!format!("{created:?}").contains("kkkk"));
    }

    #[test]
    fn message_created_without_required_fields_is_malformed() {
        for data in [
            json!("text"),
            json!({"conversationId": "c"}),
            json!({"message": {}}),
            json!({"conversationId": 1, "message": {}}),
        ] {
            assert!(matches!(
                event("message.created", data),
                EventKind::Malformed { .. }
            ));
        }
        let bad_authority = event(
            "message.created",
            json!({"conversationId": "c", "message": {"id": "m"}, "replyAuthority": {"token": "short"}}),
        );
        let EventKind::MessageCreated(created) = bad_authority else {
            panic!("expected message.created");
        };
        assert!(created.reply_authority.is_none());
    }

    proptest! {
        #[test]
        fn hostile_json_never_panics(name in prop_oneof![
                Just("message.created"), Just("agent.context"), Just("conversation.updated"),
                Just("runtime.control"), Just("replay.expired"), Just("error"), Just("zzz")],
            body in "[\\[\\]{}\":,a-z0-9 ]{0,64}") {
            let wire = format!("event: {name}\ndata: {body}\n\n");
            for frame in SseParser::parse_all(wire.as_bytes()).unwrap_or_default() {
                let kind = Event::from_frame(frame).kind;
                // Unknown names are preserved; known names are never "unknown".
                if let EventKind::Unknown { name: seen, .. } = &kind {
                    prop_assert_eq!(seen.as_str(), "zzz");
                }
            }
        }
    }
}
