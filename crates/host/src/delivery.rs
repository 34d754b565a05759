//! How a durable [`Delivery`] of the turn machine becomes Canon calls, and
//! how a failed call is classified for the machine's operation ledger.
//!
//! The shell sends the calls of [`durable_calls`] in order and reads each
//! reply with `canon_wire::types::delivered_message_id`; on a failure it
//! reports [`classify_failure`]'s verdict in `Input::DeliveryOutcome`.

use canon_wire::types::{DurableCall, SendMessage, SendTo};
use canon_wire::FailureKind;

use crate::turn::{Delivery, DeliveryFailure, FailureClass, Route};

/// One Canon call per part, in order: `POST /messages/send` bodies for a
/// turn's answer, `send_to` verbs (with the part id as idempotency key) for
/// sends that belong to no turn.
pub fn durable_calls(delivery: &Delivery) -> Vec<DurableCall> {
    delivery
        .parts
        .iter()
        .map(|part| match delivery.route {
            Route::Messages => DurableCall::Message(SendMessage {
                conversation_id: delivery.conversation_id.clone(),
                text: part.text.clone(),
                message_id: part.message_id.clone(),
                reply_to: part.reply_to.clone(),
                metadata: (!part.metadata.is_empty()).then(|| part.metadata.clone()),
                reply_authority: part.reply_authority.clone(),
                options: part.options.clone(),
                content_type: part.content_type.clone(),
                attachments: (!part.attachments.is_empty()).then(|| part.attachments.clone()),
            }),
            Route::SendTo => DurableCall::SendTo(SendTo {
                conversation_id: delivery.conversation_id.clone(),
                text: part.text.clone(),
                idempotency_key: part.message_id.clone(),
                reply_to: part.reply_to.clone(),
                metadata: part.metadata.clone(),
                options: part.options.clone(),
                content_type: part.content_type.clone(),
                attachments: part.attachments.clone(),
            }),
        })
        .collect()
}

/// The error code of a 409 whose client id already names a message with a
/// different payload (canon-wire.md §2.4, §2.7).
pub const MESSAGE_ID_EXISTS: &str = "MESSAGE_ID_EXISTS";

/// The ledger's view of a failed durable call (turns.md §4.4): provably
/// rejected before the handler ran (HTTP 429 or 503, or no connection),
/// rejected by the handler (another 4xx, except 408, 409 and 425, or a
/// request refused before sending), an id conflict (HTTP 409 whose body's
/// `code` is [`MESSAGE_ID_EXISTS`]), or ambiguous (everything else: it may
/// have landed). `code` is the error body's `code` (canon-wire.md §2.4).
pub fn classify_failure(
    kind: FailureKind,
    code: Option<&str>,
    error: String,
    retryable: bool,
) -> DeliveryFailure {
    let class = match kind {
        FailureKind::Http { status: 409 } if code == Some(MESSAGE_ID_EXISTS) => {
            FailureClass::IdConflict
        }
        FailureKind::Http { status: 429 | 503 }
        | FailureKind::Connect
        | FailureKind::ConnectTimeout => FailureClass::PreHandler,
        FailureKind::Http { status }
            if (400..500).contains(&status) && ![408, 409, 425].contains(&status) =>
        {
            FailureClass::Rejected
        }
        FailureKind::Blocked | FailureKind::TooLarge | FailureKind::Invalid => {
            FailureClass::Rejected
        }
        _ => FailureClass::Ambiguous,
    };
    DeliveryFailure {
        class,
        error,
        retryable,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map, Value};

    use super::*;
    use crate::turn::{OpId, OutboundMessage};

    fn part(id: &str, text: &str) -> OutboundMessage {
        let mut metadata = Map::new();
        metadata.insert("turnSemantics".into(), json!("turn_complete"));
        let mut options = Map::new();
        options.insert("mentions".into(), json!(["u1"]));
        OutboundMessage {
            message_id: Some(id.to_owned()),
            text: text.to_owned(),
            reply_to: Some("m0".to_owned()),
            metadata,
            options,
            reply_authority: None,
            content_type: None,
            attachments: Vec::new(),
        }
    }

    fn delivery(route: Route) -> Delivery {
        Delivery {
            op: OpId(1),
            route,
            conversation_id: "c1".to_owned(),
            turn_id: None,
            parts: vec![part("p1", "one"), part("p2", "two")],
        }
    }

    #[test]
    fn message_route_sends_one_messages_body_per_part() {
        let calls = durable_calls(&delivery(Route::Messages));
        let bodies: Vec<Value> = calls
            .iter()
            .map(|call| match call {
                DurableCall::Message(message) => Value::Object(message.to_body()),
                DurableCall::SendTo(_) => Value::Null,
            })
            .collect();
        assert_eq!(
            bodies,
            [
                json!({"conversationId": "c1", "text": "one", "messageId": "p1", "replyTo": "m0",
                       "metadata": {"turnSemantics": "turn_complete"}, "mentions": ["u1"]}),
                json!({"conversationId": "c1", "text": "two", "messageId": "p2", "replyTo": "m0",
                       "metadata": {"turnSemantics": "turn_complete"}, "mentions": ["u1"]}),
            ]
        );
    }

    #[test]
    fn send_to_route_uses_the_part_id_as_idempotency_key() {
        let calls = durable_calls(&delivery(Route::SendTo));
        let DurableCall::SendTo(first) = &calls[0] else {
            panic!("expected a send_to call: {calls:?}");
        };
        let (envelope, value) = first.envelope_and_value();
        assert_eq!(
            Value::Object(envelope),
            json!({"conversationId": "c1", "idempotencyKey": "p1", "replyTo": "m0", "mentions": ["u1"]})
        );
        assert_eq!(
            Value::Object(value),
            json!({"text": "one", "messageOptions": {"metadata": {"turnSemantics": "turn_complete"}}})
        );
        assert_eq!(calls.len(), 2);
    }

    #[test]
    fn failures_are_classified_for_the_ledger() {
        let class = |kind| classify_failure(kind, None, "e".into(), false).class;
        for status in [429, 503] {
            assert_eq!(
                class(FailureKind::Http { status }),
                FailureClass::PreHandler
            );
        }
        assert_eq!(class(FailureKind::Connect), FailureClass::PreHandler);
        assert_eq!(class(FailureKind::ConnectTimeout), FailureClass::PreHandler);
        for status in [400, 401, 403, 404, 413, 422] {
            assert_eq!(class(FailureKind::Http { status }), FailureClass::Rejected);
        }
        for status in [408, 409, 425, 500, 502] {
            assert_eq!(class(FailureKind::Http { status }), FailureClass::Ambiguous);
        }
        // Only a 409 with the code `MESSAGE_ID_EXISTS` is an id conflict.
        let conflict = FailureKind::Http { status: 409 };
        let coded = |kind, code| classify_failure(kind, Some(code), "e".into(), false).class;
        assert_eq!(coded(conflict, MESSAGE_ID_EXISTS), FailureClass::IdConflict);
        assert_eq!(coded(conflict, "OTHER"), FailureClass::Ambiguous);
        assert_eq!(
            coded(FailureKind::Http { status: 400 }, MESSAGE_ID_EXISTS),
            FailureClass::Rejected
        );
        for kind in [
            FailureKind::Blocked,
            FailureKind::TooLarge,
            FailureKind::Invalid,
        ] {
            assert_eq!(class(kind), FailureClass::Rejected);
        }
        for kind in [
            FailureKind::WriteFailed,
            FailureKind::ReadTimeout,
            FailureKind::Reset,
            FailureKind::Protocol,
            FailureKind::Decode,
        ] {
            assert_eq!(class(kind), FailureClass::Ambiguous);
        }
        let failure = classify_failure(FailureKind::ReadTimeout, None, "timed out".into(), true);
        assert_eq!(
            (failure.error.as_str(), failure.retryable),
            ("timed out", true)
        );
    }
}
