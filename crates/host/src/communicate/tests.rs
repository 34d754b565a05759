//! Tests of `canon_communicate` (runtime-control.md §5): here every call-time refusal and
//! argument message in its order (runtime-control.md §5.1–§5.3) and the Canon call of every
//! action (runtime-control.md §5.4); in `tests/results.rs` every row of the result mapping
//! (runtime-control.md §5.5); in `tests/schema.rs` the tool's JSON Schema and the properties of
//! the validator against it.

use serde_json::{json, Map, Value};

use super::*;
use crate::protocol::TurnContext;

fn map(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// One argument case: the arguments and the exact error they get.
fn check_error(args: Value, expected: &str) {
    assert_eq!(
        validate(&args).map(|_| ()),
        Err(expected.to_owned()),
        "{args}"
    );
}

/// One mapping case: the arguments and the Canon call they make.
fn check_request(args: Value, expected: CanonRequest) {
    match validate(&args) {
        Ok(planned) => assert_eq!(planned.request, expected, "{args}"),
        Err(error) => panic!("{args}: {error}"),
    }
}

fn verb_call(verb: &'static str, envelope: Value, value: Value) -> CanonRequest {
    CanonRequest::Verb {
        verb,
        envelope: map(envelope),
        value: map(value),
    }
}

#[test]
fn discover_agents_checks_in_order_before_every_other_action() {
    let d = |extra: Value| {
        let mut args = map(json!({"action": "discover_agents"}));
        args.extend(map(extra));
        Value::Object(args)
    };
    // Checked before the `text` every unknown action needs.
    check_error(
        d(json!({"text": "hi"})),
        "discover_agents contains unsupported fields",
    );
    check_error(
        d(json!({"query": 5, "limit": 0})),
        "communicate.query must be a string",
    );
    check_error(
        d(json!({"query": "q".repeat(65), "limit": 0})),
        "communicate.query must be at most 64 characters",
    );
    for limit in [
        json!(0),
        json!(11),
        json!(true),
        json!(2.0),
        json!("3"),
        json!(null),
        json!(-1),
    ] {
        check_error(
            d(json!({"limit": limit, "cursor": ""})),
            "communicate.limit must be an integer from 1 to 10",
        );
    }
    for cursor in [json!(""), json!(7), json!([])] {
        check_error(
            d(json!({"cursor": cursor})),
            "communicate.cursor must be a non-empty string",
        );
    }
    // 64 code points of a 4-byte character are allowed; `null` is no query and no cursor.
    check_request(
        d(json!({"query": "😀".repeat(64), "limit": 3, "cursor": " "})),
        CanonRequest::Discover {
            query: Some("😀".repeat(64)),
            limit: 3,
            cursor: Some(" ".into()),
        },
    );
    check_request(
        d(json!({"query": null, "cursor": null})),
        CanonRequest::Discover {
            query: None,
            limit: 10,
            cursor: None,
        },
    );
    check_request(
        d(json!({"query": ""})),
        CanonRequest::Discover {
            query: Some(String::new()),
            limit: 10,
            cursor: None,
        },
    );
}

#[test]
fn create_group_checks_and_deduplicates_keeping_the_first() {
    check_error(
        json!({"action": "create_group", "name": "", "memberIds": [], "text": "x"}),
        "create_group contains unsupported fields",
    );
    for name in [json!(null), json!("  \u{1c} "), json!(3)] {
        check_error(
            json!({"action": "create_group", "name": name, "memberIds": []}),
            "communicate.name is required",
        );
    }
    for members in [
        json!([]),
        json!("a"),
        json!(["a", " "]),
        json!(["a", 1]),
        json!(null),
    ] {
        check_error(
            json!({"action": "create_group", "name": "Team", "memberIds": members}),
            "communicate.memberIds must contain at least one principal id",
        );
    }
    check_request(
        json!({"action": "create_group", "name": " Team ", "memberIds": ["b", "a", "b", " a"]}),
        verb_call(
            "create_group",
            json!({"memberIds": ["b", "a", " a"]}),
            json!({"name": " Team "}),
        ),
    );
}

#[test]
fn forward_message_checks_each_id_then_the_text() {
    let base = json!({"action": "forward_message", "sourceConversationId": "c1",
                      "targetConversationId": "c2", "messageId": "m1"});
    let with = |key: &str, value: Value| {
        let mut args = map(base.clone());
        args.insert(key.into(), value);
        Value::Object(args)
    };
    check_error(
        with("conversationId", json!("c")),
        "forward_message contains unsupported fields",
    );
    check_error(
        json!({"action": "forward_message"}),
        "communicate.sourceConversationId is required",
    );
    check_error(
        with("targetConversationId", json!(" ")),
        "communicate.targetConversationId is required",
    );
    check_error(
        with("messageId", json!(null)),
        "communicate.messageId is required",
    );
    check_error(with("text", json!(5)), "communicate.text must be a string");
    check_request(
        with("text", json!(null)),
        verb_call(
            "forward",
            json!({"sourceConversationId": "c1", "conversationId": "c2", "messageId": "m1"}),
            json!({}),
        ),
    );
    check_request(
        with("text", json!("")),
        verb_call(
            "forward",
            json!({"sourceConversationId": "c1", "conversationId": "c2", "messageId": "m1"}),
            json!({"text": ""}),
        ),
    );
}

#[test]
fn share_contact_checks_ids_text_then_message_id() {
    let base = json!({"action": "share_contact", "conversationId": "c1", "contactUserId": "u1"});
    let with = |key: &str, value: Value| {
        let mut args = map(base.clone());
        args.insert(key.into(), value);
        Value::Object(args)
    };
    check_error(
        with("userId", json!("u")),
        "share_contact contains unsupported fields",
    );
    check_error(
        json!({"action": "share_contact", "contactUserId": "u1"}),
        "communicate.conversationId is required",
    );
    check_error(
        with("contactUserId", json!("")),
        "communicate.contactUserId is required",
    );
    check_error(
        json!({"action": "share_contact", "conversationId": "c1", "contactUserId": "u1",
               "text": [], "messageId": " "}),
        "communicate.text must be a string",
    );
    for id in [json!(" "), json!(5)] {
        check_error(
            with("messageId", id),
            "communicate.messageId must be a non-empty string",
        );
    }
    check_request(
        json!({"action": "share_contact", "conversationId": "c1", "contactUserId": "u1",
               "text": "meet", "messageId": "k1"}),
        verb_call(
            "share_contact",
            json!({"conversationId": "c1", "contactUserId": "u1", "idempotencyKey": "k1"}),
            json!({"text": "meet"}),
        ),
    );
    check_request(
        with("messageId", json!(null)),
        verb_call(
            "share_contact",
            json!({"conversationId": "c1", "contactUserId": "u1"}),
            json!({}),
        ),
    );
}

#[test]
fn manage_group_members_checks_and_picks_the_verb() {
    check_error(
        json!({"action": "manage_group_members", "text": "x"}),
        "manage_group_members contains unsupported fields",
    );
    check_error(
        json!({"action": "manage_group_members", "userId": "u"}),
        "communicate.conversationId is required",
    );
    check_error(
        json!({"action": "manage_group_members", "conversationId": "g"}),
        "communicate.userId is required",
    );
    for operation in [json!("Add"), json!(null), json!("kick")] {
        check_error(
            json!({"action": "manage_group_members", "conversationId": "g", "userId": "u",
                   "operation": operation}),
            "communicate.operation must be add or remove",
        );
    }
    for (operation, verb) in [("add", "add_member"), ("remove", "remove_member")] {
        check_request(
            json!({"action": "manage_group_members", "conversationId": "g", "userId": "u",
                   "operation": operation}),
            verb_call(
                verb,
                json!({"conversationId": "g", "targetUserId": "u"}),
                json!({}),
            ),
        );
    }
}

#[test]
fn other_actions_need_text_before_the_action_is_recognized() {
    for args in [
        json!({}),
        json!({"action": "teleport"}),
        json!({"action": 5, "text": "  "}),
        json!({"action": "message_existing", "conversationId": "c"}),
        json!({"action": "start_direct", "text": 3}),
    ] {
        check_error(args, "communicate.text is required");
    }
    check_error(
        json!({"action": "teleport", "text": "hi", "messageId": ""}),
        "communicate.messageId must be a non-empty string",
    );
    check_error(
        json!({"action": "teleport", "text": "hi"}),
        "communicate.action is invalid",
    );
    check_error(
        json!({"action": " message_existing", "text": "hi"}),
        "communicate.action is invalid",
    );
    // The arguments object itself may be anything; it is read as empty.
    check_error(json!([1]), "communicate.text is required");
}

#[test]
fn message_existing_checks_and_marks_the_message_turn_complete() {
    check_error(
        json!({"action": "message_existing", "text": "hi", "principalId": "p"}),
        "message_existing contains unsupported fields",
    );
    check_error(
        json!({"action": "message_existing", "text": "hi", "conversationId": "\u{3000}"}),
        "communicate.conversationId is required",
    );
    check_request(
        json!({"action": "message_existing", "conversationId": "c1", "text": " hi ", "messageId": "k1"}),
        verb_call(
            "send_to",
            json!({"conversationId": "c1", "idempotencyKey": "k1"}),
            json!({"text": " hi ", "messageOptions": {"metadata": {"turnSemantics": "turn_complete"}}}),
        ),
    );
    check_request(
        json!({"action": "message_existing", "conversationId": "c1", "text": "hi", "messageId": null}),
        verb_call(
            "send_to",
            json!({"conversationId": "c1"}),
            json!({"text": "hi", "messageOptions": {"metadata": {"turnSemantics": "turn_complete"}}}),
        ),
    );
}

#[test]
fn start_direct_checks_the_principal_then_the_selection() {
    let direct = |selection: Value| json!({"action": "start_direct", "principalId": "p1", "text": "hi", "selection": selection});
    check_error(
        json!({"action": "start_direct", "text": "hi", "conversationId": "c"}),
        "start_direct contains unsupported fields",
    );
    check_error(
        json!({"action": "start_direct", "text": "hi"}),
        "communicate.principalId is required",
    );
    for selection in [json!("new"), json!([]), json!(1)] {
        check_error(direct(selection), "communicate.selection must be an object");
    }
    for selection in [
        json!({}),
        json!({"mode": "new", "x": 1}),
        json!({"mode": "latest"}),
        json!({"mode": "continue_or_create"}),
        json!({"mode": "specific"}),
        json!({"mode": "specific", "conversationId": " "}),
        json!({"mode": "specific", "conversationId": 5}),
        json!({"mode": "specific", "conversationId": "c", "x": 1}),
        json!({"mode": "latest_or_new", "conversationId": "c"}),
    ] {
        check_error(direct(selection), "communicate.selection is invalid");
    }
    let sent = |selection: Option<Value>| {
        let mut envelope = map(json!({"targetUserId": "p1"}));
        if let Some(selection) = selection {
            envelope.insert("sessionSelection".into(), selection);
        }
        envelope.insert("idempotencyKey".into(), json!("k"));
        CanonRequest::Verb {
            verb: "send_to",
            envelope,
            value: map(json!({"text": "hi"})),
        }
    };
    let with_key = |selection: Value| {
        let mut args = map(direct(selection));
        args.insert("messageId".into(), json!("k"));
        Value::Object(args)
    };
    check_request(
        with_key(json!({"mode": "latest_or_new"})),
        sent(Some(json!({"mode": "continue_or_create"}))),
    );
    check_request(
        with_key(json!({"mode": "new"})),
        sent(Some(json!({"mode": "new"}))),
    );
    // `specific` passes unchanged, keys in the model's order.
    check_request(
        with_key(json!({"conversationId": "c9", "mode": "specific"})),
        sent(Some(json!({"conversationId": "c9", "mode": "specific"}))),
    );
    check_request(with_key(json!(null)), sent(None));
}

#[test]
fn lengths_and_byte_limits_are_checked_after_the_reference_checks() {
    let long_id = "c".repeat(161);
    check_error(
        json!({"action": "message_existing", "conversationId": long_id, "text": "hi"}),
        "communicate.conversationId must be at most 160 characters",
    );
    // The reference check still comes first.
    check_error(
        json!({"action": "message_existing", "conversationId": long_id, "text": " "}),
        "communicate.text is required",
    );
    check_error(
        json!({"action": "message_existing", "conversationId": "c", "text": "x".repeat(4097)}),
        "communicate.text must be at most 4096 characters",
    );
    check_error(
        json!({"action": "start_direct", "principalId": "p", "text": "é".repeat(2049)}),
        "communicate.text must be at most 4096 UTF-8 bytes",
    );
    // 4096 bytes exactly pass.
    assert!(validate(
        &json!({"action": "start_direct", "principalId": "p", "text": "é".repeat(2048)})
    )
    .is_ok());
    check_error(
        json!({"action": "share_contact", "conversationId": "c", "contactUserId": "u",
               "messageId": "😀".repeat(65)}),
        "communicate.messageId must be at most 256 UTF-8 bytes",
    );
    check_error(
        json!({"action": "forward_message", "sourceConversationId": "s", "targetConversationId": "t",
               "messageId": "m".repeat(161)}),
        "communicate.messageId must be at most 160 characters",
    );
    check_error(
        json!({"action": "start_direct", "principalId": "p", "text": "hi",
               "selection": {"mode": "specific", "conversationId": "c".repeat(161)}}),
        "communicate.selection.conversationId must be at most 160 characters",
    );
    check_error(
        json!({"action": "create_group", "name": "n".repeat(101), "memberIds": ["a"]}),
        "communicate.name must be at most 100 characters",
    );
    let fifty: Vec<String> = (0..50).map(|n| format!("u{n}")).collect();
    check_error(
        json!({"action": "create_group", "name": "Team", "memberIds": fifty}),
        "communicate.memberIds must contain at most 49 principal ids",
    );
    check_error(
        json!({"action": "create_group", "name": "Team", "memberIds": ["a", long_id]}),
        "communicate.memberIds entries must be at most 160 characters",
    );
    check_error(
        json!({"action": "manage_group_members", "conversationId": "g", "userId": long_id,
               "operation": "add"}),
        "communicate.userId must be at most 160 characters",
    );
}

fn canon_ctx(chat: &str) -> TurnContext {
    TurnContext {
        platform: Some("canon".into()),
        chat_id: Some(chat.into()),
        ..TurnContext::default()
    }
}

#[test]
fn authority_needs_a_connection_and_inside_a_turn_its_conversation() {
    let open = OutboundPolicy::Open;
    let outside = TurnContext::default();
    assert_eq!(
        authority(&outside, false, open, |_| true),
        Authority::Missing
    );
    assert_eq!(
        authority(&outside, true, open, |_| false),
        Authority::Live(open)
    );
    assert_eq!(
        authority(&canon_ctx("c1"), true, open, |c| c == "c1"),
        Authority::Live(open)
    );
    assert_eq!(
        authority(&canon_ctx("c1"), true, open, |c| c == "c2"),
        Authority::Missing
    );
    // Another platform's turn is no Canon turn.
    let telegram = TurnContext {
        platform: Some("telegram".into()),
        chat_id: Some("c1".into()),
        ..TurnContext::default()
    };
    assert_eq!(
        authority(&telegram, true, open, |_| false),
        Authority::Live(open)
    );
}

#[test]
fn call_time_errors_come_before_the_arguments() {
    let bad = json!({"action": "teleport"});
    assert_eq!(
        plan(&bad, Authority::Missing, None),
        Err(NO_AUTHORITY.to_owned())
    );
    assert_eq!(
        plan(&bad, Authority::Live(OutboundPolicy::Closed), None),
        Err(CLOSED.to_owned())
    );
    assert_eq!(
        plan(
            &bad,
            Authority::Live(OutboundPolicy::ApprovalRequired),
            None
        ),
        Err("communicate.text is required".to_owned())
    );
    assert!(is_enabled(OutboundPolicy::Open));
    assert!(is_enabled(OutboundPolicy::ApprovalRequired));
    assert!(!is_enabled(OutboundPolicy::Closed));
    assert!(!is_enabled(OutboundPolicy::from_wire(Some("Open"))));
    assert!(!is_enabled(OutboundPolicy::from_wire(None)));
}

mod results;
mod schema;

/// A message-posting call inside a turn gets a key from the turn and the call when the model
/// gave no `messageId`: the same call again in the same turn carries the same key (Canon
/// stores it once), another text or another turn a new one; the model's own id is kept, and
/// calls that post nothing (or run outside a turn) get none.
#[test]
fn a_posting_call_in_a_turn_is_keyed_by_the_turn_and_the_call() {
    const TURN: &str = "hermes-0123456789abcdef0123";
    let open = Authority::Live(OutboundPolicy::Open);
    let key = |args: Value, turn: Option<&str>| match plan(&args, open, turn) {
        Ok(Communicate {
            request: CanonRequest::Verb { envelope, .. },
            ..
        }) => envelope.get("idempotencyKey").cloned(),
        other => panic!("{other:?}"),
    };
    let send =
        |text: &str| json!({"action": "message_existing", "conversationId": "c2", "text": text});
    let first = key(send("Hello"), Some(TURN)).expect("a key");
    assert!(first
        .as_str()
        .is_some_and(|k| k.starts_with(canon_chunking::ids::CALL_KEY_PREFIX)));
    assert_eq!(key(send("Hello"), Some(TURN)), Some(first.clone()));
    assert_ne!(key(send("Hello!"), Some(TURN)), Some(first.clone()));
    assert_ne!(
        key(send("Hello"), Some("hermes-0123456789abcdef0124")),
        Some(first.clone())
    );
    assert_eq!(key(send("Hello"), None), None, "no turn, no key");
    let direct = json!({"action": "start_direct", "principalId": "u9", "text": "Hi"});
    assert!(key(direct, Some(TURN)).is_some());
    let contact = json!({"action": "share_contact", "conversationId": "c2",
                         "contactUserId": "u9"});
    assert!(key(contact, Some(TURN)).is_some());
    let own = json!({"action": "message_existing", "conversationId": "c2", "text": "Hello",
                     "messageId": "mine-1"});
    assert_eq!(key(own, Some(TURN)), Some(json!("mine-1")));
    let group = json!({"action": "create_group", "memberIds": ["u1"], "name": "G"});
    assert_eq!(key(group, Some(TURN)), None, "posts no message");
}
