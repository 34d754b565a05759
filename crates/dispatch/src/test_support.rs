//! Shared proptest strategies for the unit tests.

use proptest::prelude::*;
use serde_json::Value;

/// Arbitrary JSON, including the values the gate reads, nested.
pub(crate) fn arb_json() -> impl Strategy<Value = Value> {
    let known = prop_oneof![
        Just("progress".to_owned()),
        Just("turn_complete".to_owned()),
        Just("control".to_owned()),
        Just("suppress_auto_reply".to_owned()),
        Just("allow_auto_reply".to_owned()),
        Just("human".to_owned()),
        Just("ai_agent".to_owned()),
        Just("run_turn".to_owned()),
        Just("group".to_owned()),
        Just("contact_card".to_owned()),
        ".*",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        known.prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        let key = prop_oneof![
            Just("turnSemantics".to_owned()),
            Just("replyBehavior".to_owned()),
            Just("turnId".to_owned()),
            Just("deliveryIntent".to_owned()),
            Just("inboundDisposition".to_owned()),
            Just("requestedTurnMode".to_owned()),
            Just("type".to_owned()),
            Just("kind".to_owned()),
            Just("messageChunk".to_owned()),
            Just("index".to_owned()),
            Just("count".to_owned()),
            ".*",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::vec((key, inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// An arbitrary `message.created` payload: known keys with arbitrary values,
/// a message object that is usually well-formed enough to reach the gate.
pub(crate) fn arb_payload() -> impl Strategy<Value = Value> {
    let message = (
        prop::option::of(prop_oneof![
            Just(Value::from("m1")),
            Just(Value::from("m2")),
            arb_json()
        ]),
        prop::option::of(prop_oneof![
            Just(Value::from("human")),
            Just(Value::from("ai_agent")),
            arb_json()
        ]),
        prop::option::of(prop_oneof![Just(Value::from("hello")), arb_json()]),
        prop::option::of(arb_json()),
        prop::option::of(arb_json()),
        prop::option::of(arb_json()),
        prop::option::of(arb_json()),
    )
        .prop_map(
            |(id, sender_type, text, metadata, name, content_type, attachments)| {
                let mut m = serde_json::Map::new();
                for (key, value) in [
                    ("id", id),
                    ("senderType", sender_type),
                    ("text", text),
                    ("metadata", metadata),
                    ("senderName", name),
                    ("contentType", content_type),
                    ("attachments", attachments),
                ] {
                    if let Some(v) = value {
                        m.insert(key.to_owned(), v);
                    }
                }
                Value::Object(m)
            },
        );
    (
        prop::option::of(prop_oneof![message, arb_json()]),
        prop::option::of(prop_oneof![
            Just(Value::from("c1")),
            Just(Value::from("c2")),
            arb_json()
        ]),
        prop::option::of(arb_json()),
        prop::option::of(arb_json()),
        prop::option::of(arb_json()),
        prop::option::of(arb_json()),
    )
        .prop_map(
            |(message, conversation_id, dispatch, conversation, provenance, authority)| {
                let mut p = serde_json::Map::new();
                for (key, value) in [
                    ("message", message),
                    ("conversationId", conversation_id),
                    ("turnDispatch", dispatch),
                    ("conversation", conversation),
                    ("provenance", provenance),
                    ("replyAuthority", authority),
                ] {
                    if let Some(v) = value {
                        p.insert(key.to_owned(), v);
                    }
                }
                Value::Object(p)
            },
        )
}
