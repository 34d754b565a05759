//! The result mapping of `canon_communicate` (runtime-control.md §5.5): every accepted and
//! refused shape per action, failures, the operator-approval result and directory pages.

use serde_json::{json, Value};

use super::map;
use crate::communicate::*;

/// The parsed envelope of the answer to `args` when Canon answered `result`.
fn answered(args: Value, result: Result<Value, Failure>) -> Value {
    let planned = validate(&args).unwrap_or_else(|e| panic!("{args}: {e}"));
    let text = answer(&planned, result.map(map));
    serde_json::from_str(&text).expect("JSON")
}

fn fails(message: &str) -> Value {
    json!({"error": message, "success": false})
}

pub(super) fn message_args() -> Value {
    json!({"action": "message_existing", "conversationId": "c1", "text": "hi"})
}

pub(super) fn direct_args() -> Value {
    json!({"action": "start_direct", "principalId": "p1", "text": "hi"})
}

#[test]
fn send_to_results_map_as_the_reference_does() {
    for args in [message_args(), direct_args()] {
        let ok = |v: Value| answered(args.clone(), Ok(v));
        assert_eq!(
            ok(
                json!({"status": "messaged", "conversationId": "c1", "messageId": "m1",
                      "reused": false, "created": true, "extra": 1})
            ),
            json!({"success": true, "status": "messaged", "conversationId": "c1",
                   "messageId": "m1", "created": true, "reused": false})
        );
        for status in ["requested", "pending"] {
            assert_eq!(
                ok(json!({"status": status, "requestId": "r1", "note": "x"})),
                json!({"success": true, "status": status, "requestId": "r1"})
            );
        }
        for status in ["blocked", "unavailable", "setup_required", "no_session"] {
            assert_eq!(
                ok(json!({"status": status, "reason": "closed", "x": 1})),
                json!({"success": true, "status": status, "reason": "closed"})
            );
        }
        for valid_elsewhere in [
            json!({"status": "shared", "messageId": "m"}),
            json!({"status": "added"}),
            json!({"status": "forwarded", "messageId": "m", "targetConversationId": "c"}),
        ] {
            assert_eq!(ok(valid_elsewhere), fails(UNSUPPORTED_RESULT));
        }
        for malformed in [
            json!({}),
            json!({"status": "messaged", "conversationId": "c1"}),
            json!({"status": "messaged", "conversationId": "c1", "messageId": "m", "created": "yes"}),
            json!({"status": "requested"}),
            json!({"status": "blocked", "reason": 4}),
            json!({"status": "no_session"}),
            json!({"status": "teleported"}),
        ] {
            assert_eq!(ok(malformed), fails(MALFORMED_RESULT));
        }
    }
}

#[test]
fn failures_map_to_the_envelope_and_operator_approval_to_a_result() {
    let approval = Failure {
        message: "Canon API returned 403: {\"code\":\"OUTBOUND_APPROVAL_REQUIRED\"}".into(),
        code: Some(OUTBOUND_APPROVAL_REQUIRED.into()),
    };
    let approval_required = json!({"success": true, "status": "approval_required",
                                   "reason": "The agent operator must approve this outbound action."});
    assert_eq!(
        answered(direct_args(), Err(approval.clone())),
        approval_required
    );
    assert_eq!(
        answered(json!({"action": "discover_agents"}), Err(approval)),
        approval_required
    );
    let closed = Failure {
        message: "Canon API returned 403: {\"code\":\"OUTBOUND_CLOSED\"}".into(),
        code: Some("OUTBOUND_CLOSED".into()),
    };
    assert_eq!(
        answered(message_args(), Err(closed)),
        fails("Canon API returned 403: {\"code\":\"OUTBOUND_CLOSED\"}")
    );
    let decode = Failure {
        message: "Canon verb response does not match the requested verb".into(),
        code: None,
    };
    assert_eq!(
        answered(message_args(), Err(decode)),
        fails("Canon verb response does not match the requested verb")
    );
}

#[test]
fn create_group_results_pass_unchanged() {
    let args = json!({"action": "create_group", "name": "Team", "memberIds": ["a", "b", "c"]});
    let created = json!({"status": "created", "conversationId": "g1", "added": ["a"],
                         "pending": [{"userId": "b", "requestId": "r1"}],
                         "skipped": [{"userId": "c", "reason": "closed"}], "extra": true});
    let mut expected = map(json!({"success": true}));
    expected.extend(map(created.clone()));
    assert_eq!(answered(args.clone(), Ok(created)), Value::Object(expected));
    // Any accepted shape passes, even one that is not `created`.
    assert_eq!(
        answered(
            args.clone(),
            Ok(json!({"status": "requested", "requestId": "r"}))
        ),
        json!({"success": true, "status": "requested", "requestId": "r"})
    );
    for malformed in [
        json!({"status": "created", "conversationId": "g1", "added": ["a"], "pending": []}),
        json!({"status": "created", "conversationId": "g1", "added": [1], "pending": [], "skipped": []}),
        json!({"status": "created", "conversationId": "g1", "added": [], "pending": [{"userId": "b"}],
               "skipped": []}),
        json!({"status": "created", "conversationId": "g1", "added": [], "pending": [],
               "skipped": [{"reason": "x"}]}),
        json!({"status": "created", "added": [], "pending": [], "skipped": []}),
    ] {
        assert_eq!(
            answered(args.clone(), Ok(malformed)),
            fails(MALFORMED_RESULT)
        );
    }
}

#[test]
fn forward_share_and_member_results_keep_only_their_own_status() {
    let forward = json!({"action": "forward_message", "sourceConversationId": "s",
                         "targetConversationId": "t", "messageId": "m"});
    assert_eq!(
        answered(
            forward.clone(),
            Ok(
                json!({"targetConversationId": "t", "status": "forwarded", "messageId": "m2", "x": 1})
            )
        ),
        json!({"success": true, "status": "forwarded", "messageId": "m2", "targetConversationId": "t"})
    );
    // [target] runtime-control.md Q7: the reference crashes here; this is the malformed error.
    assert_eq!(
        answered(forward, Ok(json!({"status": "pending", "requestId": "r"}))),
        fails(MALFORMED_RESULT)
    );

    let share = json!({"action": "share_contact", "conversationId": "c1", "contactUserId": "u"});
    assert_eq!(
        answered(
            share.clone(),
            Ok(json!({"status": "shared", "messageId": "m3", "conversationId": "other"}))
        ),
        json!({"success": true, "status": "shared", "conversationId": "c1", "messageId": "m3"})
    );
    for other in [
        json!({"status": "added"}),
        json!({"status": "shared"}),
        json!({"status": "pending", "requestId": "r"}),
    ] {
        assert_eq!(answered(share.clone(), Ok(other)), fails(MALFORMED_RESULT));
    }

    let members = |operation: &str| {
        json!({"action": "manage_group_members", "conversationId": "g", "userId": "u",
               "operation": operation})
    };
    assert_eq!(
        answered(members("add"), Ok(json!({"status": "added"}))),
        json!({"success": true, "status": "added", "conversationId": "g", "userId": "u"})
    );
    assert_eq!(
        answered(members("remove"), Ok(json!({"status": "removed", "x": 2}))),
        json!({"success": true, "status": "removed", "conversationId": "g", "userId": "u"})
    );
    assert_eq!(
        answered(
            members("add"),
            Ok(json!({"status": "pending", "requestId": "r", "x": 1}))
        ),
        json!({"success": true, "status": "pending", "requestId": "r"})
    );
    for (operation, other) in [
        ("add", json!({"status": "removed"})),
        ("remove", json!({"status": "added"})),
        ("add", json!({"status": "blocked", "reason": "x"})),
        ("add", json!({"status": "pending"})),
    ] {
        assert_eq!(
            answered(members(operation), Ok(other)),
            fails(MALFORMED_RESULT)
        );
    }
}

#[test]
fn directory_pages_gain_a_status_and_keep_every_field() {
    let args = json!({"action": "discover_agents", "query": "He"});
    let page = json!({"agents": [{"principalId": "a2", "displayName": "Helper",
                                  "owner": {"principalId": "h2", "displayName": "Ann"},
                                  "inboundPolicy": "open", "groupJoinPolicy": "closed",
                                  "shareable": true, "extra": 1}],
                      "nextCursor": null, "total": 1});
    let mut expected = map(json!({"success": true}));
    expected.extend(map(page.clone()));
    expected.insert("status".into(), json!("discovered"));
    assert_eq!(answered(args.clone(), Ok(page)), Value::Object(expected));
    // A server `status` is overwritten in its place.
    assert_eq!(
        answered(
            args.clone(),
            Ok(json!({"status": "ok", "agents": [], "nextCursor": "n2"}))
        ),
        json!({"success": true, "status": "discovered", "agents": [], "nextCursor": "n2"})
    );
    for malformed in [
        json!({"agents": []}),
        json!({"agents": {}, "nextCursor": null}),
        json!({"agents": [], "nextCursor": 3}),
        json!({"agents": [5], "nextCursor": null}),
        json!({"agents": [{"principalId": " ", "shareable": true, "owner": {"principalId": "h"}}],
               "nextCursor": null}),
        json!({"agents": [{"principalId": "a", "shareable": "yes", "owner": {"principalId": "h"}}],
               "nextCursor": null}),
        json!({"agents": [{"principalId": "a", "shareable": true, "owner": {"principalId": "\u{1f}"}}],
               "nextCursor": null}),
        json!({"agents": [{"principalId": "a", "shareable": true}], "nextCursor": null}),
    ] {
        assert_eq!(
            answered(args.clone(), Ok(malformed)),
            fails(MALFORMED_DIRECTORY)
        );
    }
}
