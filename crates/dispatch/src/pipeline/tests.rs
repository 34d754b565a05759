//! Tests for the turns.md §9.1 pipeline: each step's stop condition in
//! order, the buffer round trip, dedupe window and the event fields (the
//! reply authority's own checks live in canon-wire's `authority.rs`).

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::gate::WakeBasis;

const AGENT: &str = "agent-1";

fn ctx() -> Context<'static> {
    Context {
        agent_id: Some(AGENT),
        agent_name: Some("Hermes"),
        cached_conversation: None,
    }
}

fn payload(id: &str, message: Value) -> Value {
    let mut message = message;
    message["id"] = json!(id);
    json!({"conversationId": "c1", "message": message})
}

fn human(id: &str, text: &str) -> Value {
    payload(
        id,
        json!({"senderId": "u1", "senderName": "Una", "senderType": "human", "text": text}),
    )
}

fn wake(outcome: Outcome) -> WakeEvent {
    match outcome {
        Outcome::Wake(event) => *event,
        other => panic!("expected a wake, got {other:?}"),
    }
}

/// Runs a sequence of payloads through one dispatcher and compares each
/// outcome's short name.
fn check(inputs: &[Value], expected: &[&str]) {
    let mut d = Dispatcher::default();
    let got: Vec<String> = inputs
        .iter()
        .map(|p| match d.handle_message_created(p, ctx()) {
            Outcome::Ignored(reason) => format!("ignored:{reason:?}"),
            Outcome::ApprovalReceipt { approval_id, .. } => format!("receipt:{approval_id}"),
            Outcome::Suppressed { .. } => "suppressed".to_owned(),
            Outcome::Wake(_) => "wake".to_owned(),
        })
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn steps_stop_in_order() {
    check(
        &[
            json!({"conversationId": "c1", "message": "hi"}),
            json!({"conversationId": "c1"}),
            payload(
                "m1",
                json!({"senderId": AGENT, "text": "echo", "metadata": {"type": "approval_reply", "approvalId": "a1"}}),
            ),
            payload(
                "m2",
                json!({"senderId": "u1", "text": "Approved", "metadata": {"type": "approval_reply", "approvalId": "a1"}}),
            ),
            payload(
                "m3",
                json!({"senderId": "u1", "text": "Approved", "metadata": {"type": "approval_reply", "approvalId": ""}}),
            ),
            payload(
                "m4",
                json!({"senderId": "u1", "text": "x", "metadata": {"type": "runtime_card_outcome"}}),
            ),
            human("m5", "hello"),
            human("m5", "hello again"),
            json!({"message": {"id": "m6", "senderType": "human", "text": "no conversation"}}),
            human("m7", "   "),
            payload(
                "m8",
                json!({"senderType": "ai_agent", "text": "progress", "metadata": {"turnSemantics": "progress"}}),
            ),
        ],
        &[
            "ignored:MessageNotObject",
            "ignored:MessageNotObject",
            "ignored:OwnEcho",
            "receipt:a1",
            "ignored:ControlMessage { message_type: \"approval_reply\" }",
            "ignored:ControlMessage { message_type: \"runtime_card_outcome\" }",
            "wake",
            "ignored:Duplicate",
            "ignored:MissingConversationId",
            "ignored:EmptyText",
            "suppressed",
        ],
    );
}

#[test]
fn control_messages_are_not_recorded_as_seen() {
    let control = payload(
        "m1",
        json!({"senderId": "u1", "text": "x", "metadata": {"type": "runtime_input_reply"}}),
    );
    check(
        &[control, human("m1", "now a real message")],
        &[
            "ignored:ControlMessage { message_type: \"runtime_input_reply\" }",
            "wake",
        ],
    );
}

#[test]
fn suppressed_messages_are_recorded_as_seen_and_messages_without_id_never_are() {
    let progress = payload(
        "m1",
        json!({"senderType": "ai_agent", "text": "p", "metadata": {"turnSemantics": "progress"}}),
    );
    let no_id = json!({"conversationId": "c1", "message": {"senderType": "human", "text": "x"}});
    check(
        &[progress.clone(), progress, no_id.clone(), no_id],
        &["suppressed", "ignored:Duplicate", "wake", "wake"],
    );
}

#[test]
fn dedupe_window_is_1024_ids() {
    let mut d = Dispatcher::default();
    for i in 0..=SEEN_MESSAGE_IDS {
        assert!(matches!(
            d.handle_message_created(&human(&format!("m{i}"), "x"), ctx()),
            Outcome::Wake(_)
        ));
    }
    // m0 fell out of the window; m1 is still remembered.
    assert!(matches!(
        d.handle_message_created(&human("m0", "x"), ctx()),
        Outcome::Wake(_)
    ));
    assert_eq!(
        d.handle_message_created(&human("m2", "x"), ctx()),
        Outcome::Ignored(Ignored::Duplicate)
    );
}

#[test]
fn held_parts_travel_with_the_next_waking_message() {
    let mut d = Dispatcher::default();
    let part = |id: &str, index: u32, semantics: &str| {
        payload(
            id,
            json!({"senderId": "a2", "senderName": "Other\nBot", "senderType": "ai_agent", "text": format!("part {index}"),
                   "metadata": {"turnSemantics": semantics, "messageChunk": {"type": "text", "index": index, "count": 3}}}),
        )
    };
    assert!(matches!(
        d.handle_message_created(&part("p1", 1, "progress"), ctx()),
        Outcome::Suppressed { .. }
    ));
    assert!(matches!(
        d.handle_message_created(&part("p2", 2, "progress"), ctx()),
        Outcome::Suppressed { .. }
    ));
    let event = wake(d.handle_message_created(&part("p3", 3, "turn_complete"), ctx()));
    let expected = [
        crate::buffer::CONTEXT_HEADER_LINE_1,
        crate::buffer::CONTEXT_HEADER_LINE_2,
        "[Other Bot [agent] part 1/3] part 1",
        "[Other Bot [agent] part 2/3] part 2",
    ]
    .join("\n");
    assert_eq!(event.channel_context.as_deref(), Some(expected.as_str()));
    assert_eq!(event.text, "part 3");
    assert!(d.buffer().is_empty());
    let next = wake(d.handle_message_created(&human("h1", "thanks"), ctx()));
    assert_eq!(next.channel_context, None);
}

#[test]
fn verdict_is_authoritative_inside_the_pipeline() {
    let mut d = Dispatcher::default();
    let mut p = human("m1", "hi");
    p["turnDispatch"] = json!({"kind": "suppress"});
    match d.handle_message_created(&p, ctx()) {
        Outcome::Suppressed { decision, .. } => {
            assert_eq!(
                decision.basis,
                WakeBasis::Verdict {
                    kind: "suppress".to_owned()
                }
            );
        }
        other => panic!("expected suppression, got {other:?}"),
    }
    let mut p = payload(
        "m2",
        json!({"senderType": "ai_agent", "text": "x", "metadata": {"turnSemantics": "progress"}}),
    );
    p["turnDispatch"] = json!({"kind": "run_turn"});
    let event = wake(d.handle_message_created(&p, ctx()));
    assert_eq!(
        event.channel_context.as_deref().map(|c| c.lines().count()),
        Some(3)
    );
}

#[test]
fn event_fields() {
    let mut d = Dispatcher::default();
    let token = "t".repeat(32);
    let p = json!({
        "conversationId": "c1",
        "conversation": {"id": "c1", "name": "Team", "type": "group", "memberIds": ["a", "b"]},
        "provenance": {"conversation": {"type": "group"}, "mentionedAgent": true},
        "message": {"id": "m1", "senderId": "u1", "senderName": "Una", "senderType": "human", "text": "/help",
                    "replyTo": "m0", "metadata": {"deliveryIntent": " Interrupt "}},
        "replyAuthority": {"schema": "canon.agent-reply-authority.v1", "sourceMessageId": "m1", "token": token, "expiresAt": "2026-01-01T00:00:00Z", "admissionId": "adm"},
    });
    let event = wake(d.handle_message_created(&p, ctx()));
    assert_eq!(
        event.source,
        EventSource {
            chat_id: "c1".to_owned(),
            chat_name: Some("Team".to_owned()),
            chat_type: "group",
            user_id: Some("u1".to_owned()),
            user_name: Some("Una".to_owned()),
            message_id: Some("m1".to_owned()),
        }
    );
    assert_eq!(event.text, "/help");
    assert_eq!(event.reply_to_message_id.as_deref(), Some("m0"));
    assert_eq!(event.delivery_intent, DeliveryIntent::Interrupt);
    assert!(event
        .channel_prompt
        .as_deref()
        .is_some_and(|p| p.starts_with(
            "Canon group metadata: this message explicitly mentioned this agent (Hermes)."
        )));
    assert!(event.host_payload.get("replyAuthority").is_none());
    assert_eq!(event.host_payload["message"], p["message"]);
    assert_eq!(d.conversation_type("c1", None), ConversationType::Group);
}

#[test]
fn agent_senders_get_no_user_id() {
    let mut d = Dispatcher::default();
    let p = payload(
        "m1",
        json!({"senderId": "a2", "senderName": "Bot", "senderType": "ai_agent", "text": "done", "metadata": {"turnSemantics": "turn_complete"}}),
    );
    let event = wake(d.handle_message_created(&p, ctx()));
    assert_eq!(event.source.user_id, None);
    assert_eq!(event.source.user_name.as_deref(), Some("Bot"));
    assert_eq!(event.source.chat_type, "dm");
    assert_eq!(
        event.channel_prompt.as_deref(),
        Some(crate::prompt::AGENT_SENDER_PROMPT)
    );
}

#[test]
fn cached_conversation_is_used_when_the_payload_has_none() {
    let mut d = Dispatcher::default();
    let cached = json!({"type": "group", "name": "Cached"});
    let context = Context {
        cached_conversation: Some(&cached),
        ..ctx()
    };
    let event = wake(d.handle_message_created(&human("m1", "hi"), context));
    assert_eq!(event.source.chat_type, "group");
    assert_eq!(event.source.chat_name.as_deref(), Some("Cached"));
    assert_eq!(
        d.conversation_type("c1", Some(&cached)),
        ConversationType::Group
    );
    assert_eq!(d.conversation_type("c1", None), ConversationType::Unknown);
}

#[test]
fn declared_type_is_recorded_before_the_gate_and_unknown_never_overwrites() {
    let mut d = Dispatcher::default();
    let mut p = payload("m1", json!({"senderType": "ai_agent", "text": "x"}));
    p["provenance"] = json!({"conversation": {"type": "dm"}});
    assert!(matches!(
        d.handle_message_created(&p, ctx()),
        Outcome::Suppressed { .. }
    ));
    assert_eq!(
        d.conversation_type("c1", Some(&json!({"type": "group"}))),
        ConversationType::Direct
    );
    let mut p = human("m2", "y");
    p["provenance"] = json!({"conversation": {"type": "unknown"}});
    d.handle_message_created(&p, ctx());
    assert_eq!(d.conversation_type("c1", None), ConversationType::Direct);
}

#[test]
fn cache_step_flag() {
    assert!(Outcome::Ignored(Ignored::EmptyText).reached_conversation_step());
    assert!(!Outcome::Ignored(Ignored::Duplicate).reached_conversation_step());
    assert!(!Outcome::ApprovalReceipt {
        approval_id: "a".into(),
        conversation_id: None
    }
    .reached_conversation_step());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn pipeline_never_panics_and_only_wakes_through_the_gate(payloads in prop::collection::vec(crate::test_support::arb_payload(), 1..12)) {
        let mut d = Dispatcher::default();
        for payload in &payloads {
            match d.handle_message_created(payload, ctx()) {
                Outcome::Wake(event) => {
                    prop_assert!(event.decision.wake);
                    prop_assert!(!event.text.is_empty());
                    prop_assert!(event.host_payload.get("replyAuthority").is_none());
                    prop_assert!(event.channel_context.as_deref().is_none_or(|c| c.starts_with(crate::buffer::CONTEXT_HEADER_LINE_1)));
                }
                Outcome::Suppressed { conversation_id, decision } => {
                    prop_assert!(!decision.wake);
                    prop_assert!(d.buffer().entries(&conversation_id).count() >= 1);
                }
                Outcome::Ignored(_) | Outcome::ApprovalReceipt { .. } => {}
            }
            prop_assert!(d.buffer().conversations().count() <= crate::buffer::MAX_BUFFERED_CONVERSATIONS);
        }
    }
}
