//! Tests for the channel prompt (turns.md §9.4), inbound text
//! (turns.md §9.1 step 8) and the chat name and type.

use serde_json::{json, Value};

use super::*;

const GUIDANCE_NO_SIZE: &str = "This is a group chat. Reply only when you add something; otherwise call `canon_runtime_control` with the `no_reply` action to stay silent — every message you post is seen by all members and may trigger other agents.";

fn check_prompt(payload: Value, agent_name: Option<&str>, expected: Option<&str>) {
    let conversation = payload.get("conversation").cloned();
    let got = channel_prompt(&payload, conversation.as_ref(), Some("agent-1"), agent_name);
    assert_eq!(got.as_deref(), expected, "payload {payload}");
}

#[test]
fn direct_chats_prompt_only_for_agent_senders() {
    check_prompt(
        json!({"message": {"senderType": "human"}, "conversation": {"type": "direct"}}),
        None,
        None,
    );
    check_prompt(
        json!({"message": {"senderType": "ai_agent"}, "conversation": {"type": "direct"}}),
        None,
        Some(AGENT_SENDER_PROMPT),
    );
    check_prompt(
        json!({"message": {"senderType": "ai_agent"}}),
        Some("Bot"),
        Some(AGENT_SENDER_PROMPT),
    );
    check_prompt(json!({"message": {}}), None, None);
    assert_eq!(
        AGENT_SENDER_PROMPT,
        "The sender is another agent. Continue only if this usefully advances the user-directed task; otherwise call `canon_runtime_control` with the `no_reply` action to stay silent. Avoid open-ended agent-only loops."
    );
}

#[test]
fn no_message_object_means_no_prompt() {
    check_prompt(
        json!({"message": "x", "conversation": {"type": "group"}}),
        None,
        None,
    );
    check_prompt(json!({"conversation": {"type": "group"}}), None, None);
}

#[test]
fn group_not_mentioned_without_name_or_size() {
    let expected = format!("Canon group metadata: this message did not structurally mention this agent.\n{GUIDANCE_NO_SIZE}");
    check_prompt(
        json!({"message": {"senderType": "human"}, "conversation": {"type": "group"}}),
        None,
        Some(&expected),
    );
    check_prompt(
        json!({"message": {"senderType": "human"}, "conversation": {"type": "group"}}),
        Some(""),
        Some(&expected),
    );
}

#[test]
fn group_mentioned_with_name_members_and_cap() {
    let payload = json!({
        "message": {"senderType": "ai_agent", "mentions": ["agent-1"]},
        "conversation": {"type": "group", "memberIds": ["a", "b", "c"]},
        "behavior": {"participation": {"maxConsecutiveAgentTurns": 4}},
    });
    let expected = "Canon group metadata: this message explicitly mentioned this agent (Hermes). Treat it as addressed to you.\nThis is a group chat with 3 members. Reply only when you add something; otherwise call `canon_runtime_control` with the `no_reply` action to stay silent — every message you post is seen by all members and may trigger other agents.\nAt most 4 agent replies in a row are allowed here before a person speaks again.";
    check_prompt(payload, Some("Hermes"), Some(expected));
}

#[test]
fn member_count_is_singular_for_one() {
    let payload = json!({"message": {}, "conversation": {"type": "group", "memberIds": ["a"]}});
    let got =
        channel_prompt(&payload, payload.get("conversation"), None, None).expect("group prompt");
    assert!(
        got.contains("This is a group chat with 1 member. Reply"),
        "{got}"
    );
    let payload = json!({"message": {}, "conversation": {"type": "group", "memberIds": []}});
    let got =
        channel_prompt(&payload, payload.get("conversation"), None, None).expect("group prompt");
    assert!(got.contains("with 0 members."), "{got}");
    let payload = json!({"message": {}, "conversation": {"type": "group", "memberIds": "ab"}});
    let got =
        channel_prompt(&payload, payload.get("conversation"), None, None).expect("group prompt");
    assert!(got.contains("This is a group chat. Reply"), "{got}");
}

fn mentioned(payload: Value) -> bool {
    let conversation = json!({"type": "group"});
    channel_prompt(&payload, Some(&conversation), Some("agent-1"), None)
        .expect("group prompt")
        .contains("explicitly mentioned")
}

#[test]
fn mention_sources_and_precedence() {
    assert!(mentioned(
        json!({"message": {}, "provenance": {"mentionedAgent": true}})
    ));
    assert!(mentioned(
        json!({"message": {"provenance": {"mentionedAgent": 1}}})
    ));
    // Payload provenance, when an object, shadows the message's.
    assert!(!mentioned(
        json!({"message": {"provenance": {"mentionedAgent": true}}, "provenance": {}})
    ));
    assert!(!mentioned(
        json!({"message": {}, "provenance": {"mentionedAgent": false}})
    ));
    assert!(mentioned(
        json!({"message": {"mentions": ["x", "agent-1"]}})
    ));
    assert!(mentioned(
        json!({"message": {"mentions": []}, "mentions": ["agent-1"]})
    ));
    // A truthy message list shadows the payload list.
    assert!(!mentioned(
        json!({"message": {"mentions": ["x"]}, "mentions": ["agent-1"]})
    ));
    assert!(!mentioned(json!({"message": {"mentions": "agent-1"}})));
    assert!(!mentioned(json!({"message": {"mentions": [["agent-1"]]}})));
}

#[test]
fn cap_needs_an_integer_that_is_not_a_boolean() {
    for (cap, expected) in [
        (json!(2), true),
        (json!(true), false),
        (json!(2.5), false),
        (json!("3"), false),
        (json!(null), false),
        (json!(0), true),
    ] {
        let payload = json!({"message": {}, "behavior": {"participation": {"maxConsecutiveAgentTurns": cap.clone()}}});
        let got = channel_prompt(&payload, Some(&json!({"type": "group"})), None, None)
            .expect("group prompt");
        assert_eq!(got.contains("agent replies in a row"), expected, "{cap}");
    }
}

fn check_text(message: Value, expected: &str) {
    assert_eq!(inbound_text(&message), expected, "{message}");
}

#[test]
fn inbound_text_order() {
    check_text(json!({"text": "  hi  "}), "  hi  ");
    check_text(json!({"text": "   ", "contentType": "text"}), "");
    check_text(json!({"text": null}), "");
    check_text(
        json!({"contentType": "image", "text": "\n"}),
        "[image message]",
    );
    check_text(
        json!({"contentType": "image", "attachments": [{"kind": "image", "fileName": "cat.png"}]}),
        "[image attachment: cat.png]",
    );
    check_text(
        json!({"contentType": "file", "attachments": [{"fileName": "dir\\sub/report.pdf"}, {"kind": "audio"}, {"fileName": "https://x/y.png"}, "junk", {"contentType": "video", "fileName": ""}]}),
        "[file attachment: report.pdf; audio attachment; file attachment; file attachment]",
    );
    check_text(
        json!({"attachments": [{"fileName": "a.txt"}]}),
        "[file attachment: a.txt]",
    );
    check_text(json!({"attachments": ["junk"], "contentType": "text"}), "");
    check_text(
        json!({"contentType": "interaction"}),
        "[interaction message]",
    );
    check_text(json!({"contentType": 5}), "");
    check_text(json!({}), "");
}

#[test]
fn contact_cards() {
    check_text(json!({"contentType": "contact_card"}), "[Contact card]");
    check_text(
        json!({"contentType": "contact_card", "text": " look \n", "contactCard": {"displayName": " Ada ", "userType": "human", "userId": "u1", "ownerName": "Bob", "about": "math"}}),
        "[Contact card] \"Ada\" - human; userId: u1; owner: Bob; about: math\nlook",
    );
    check_text(
        json!({"contentType": "contact_card", "contactCard": {"displayName": "  "}}),
        "[Contact card] \"Unknown\"",
    );
    check_text(
        json!({"contentType": "contact_card", "contactCard": {"userId": "u2"}}),
        "[Contact card] \"Unknown\" - userId: u2",
    );
}

#[test]
fn chat_name_and_type() {
    assert_eq!(
        chat_name(Some(&json!({"name": "", "topic": "T", "id": "c"}))),
        Some("T")
    );
    assert_eq!(chat_name(Some(&json!({"id": "c"}))), Some("c"));
    assert_eq!(chat_name(Some(&json!([]))), None);
    assert_eq!(chat_name(None), None);
    assert_eq!(hermes_chat_type(Some(&json!({"type": "group"}))), "group");
    assert_eq!(hermes_chat_type(Some(&json!({"type": "Group"}))), "dm");
    assert_eq!(hermes_chat_type(Some(&json!({"type": "direct"}))), "dm");
    assert_eq!(hermes_chat_type(None), "dm");
}
