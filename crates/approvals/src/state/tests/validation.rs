//! Entry validation against the spec's table, the spec's example file byte for byte, and
//! unknown fields kept through every transition (approvals.md §3, §6).

use serde_json::{json, Value};

use super::*;

fn check_validation(patch: Value, expected: Option<&str>) {
    let mut entry = valid_entry();
    for (k, v) in patch.as_object().unwrap() {
        if v == &json!("<remove>") {
            entry.as_object_mut().unwrap().remove(k);
        } else {
            entry[k] = v.clone();
        }
    }
    let got = validate_entry(A, &entry).err().map(|p| p.to_string());
    assert_eq!(got.as_deref(), expected, "patch {patch}");
}

#[test]
fn validation_follows_the_spec_table() {
    let cases: Vec<(Value, Option<&str>)> = vec![
        (json!({}), None),
        (
            json!({"approvalId": "other"}),
            Some("has a mismatched approvalId"),
        ),
        (
            json!({"approvalId": "<remove>"}),
            Some("has a mismatched approvalId"),
        ),
        (
            json!({"conversationId": "  "}),
            Some("has no conversationId"),
        ),
        (json!({"conversationId": 5}), Some("has no conversationId")),
        (json!({"status": "done"}), Some("has an invalid status")),
        (json!({"expiresAt": true}), Some("has an invalid expiresAt")),
        (json!({"expiresAt": "1"}), Some("has an invalid expiresAt")),
        (
            json!({"status": "resolved"}),
            Some("has an invalid decision"),
        ),
        (
            json!({"status": "resolved", "decision": "maybe"}),
            Some("has an invalid decision"),
        ),
        (json!({"status": "resolved", "decision": "deny"}), None),
        (
            json!({"status": "creating", "createClaimId": "", "createClaimExpiresAt": 1}),
            Some("has an invalid create lease"),
        ),
        (
            json!({"status": "creating", "createClaimId": "c", "createClaimExpiresAt": 1, "createClaimOwner": 3}),
            Some("has an invalid create owner"),
        ),
        (
            json!({"status": "creating", "createClaimId": "c", "createClaimExpiresAt": 1, "createClaimOwner": null}),
            None,
        ),
        (
            json!({"status": "consuming", "consumeClaimId": "c"}),
            Some("has an invalid consume lease"),
        ),
        (
            json!({"status": "consuming", "consumeClaimId": "c", "consumeClaimExpiresAt": 1, "consumeClaimOwner": []}),
            Some("has an invalid consume owner"),
        ),
        (
            json!({"wakeStatus": "sent"}),
            Some("has an invalid wakeStatus"),
        ),
        (
            json!({"wakeStatus": "blocked", "wakeBlockedReason": "x"}),
            None,
        ),
        (
            json!({"wakeStatus": "delivering", "wakeClaimId": "w"}),
            Some("has an invalid wake lease"),
        ),
        (
            json!({"wakeStatus": "delivering", "wakeClaimId": "w", "wakeClaimExpiresAt": 1, "wakeClaimOwner": false}),
            Some("has an invalid wake owner"),
        ),
        (
            json!({"respondedBy": 1}),
            Some("has an invalid respondedBy"),
        ),
        (json!({"summary": {}}), Some("has an invalid summary")),
        (
            json!({"creationError": 1}),
            Some("has an invalid creationError"),
        ),
        (
            json!({"resolvedAt": "x"}),
            Some("has an invalid resolvedAt"),
        ),
        (
            json!({"receiptSeenAt": false}),
            Some("has an invalid receiptSeenAt"),
        ),
        (
            json!({"receiptPending": "yes"}),
            Some("has an invalid receiptPending"),
        ),
        (
            json!({"reconcilePending": 0}),
            Some("has an invalid reconcilePending"),
        ),
        // Leftovers from an earlier state and unknown fields are fine.
        (
            json!({"consumeClaimId": 7, "identityMismatch": "odd", "x": [1]}),
            None,
        ),
    ];
    for (patch, expected) in cases {
        check_validation(patch, expected);
    }
    assert_eq!(
        validate_entry(A, &json!([])),
        Err(EntryProblem::NotAnObject)
    );
    assert_eq!(
        validate_entry("", &json!({"approvalId": ""})),
        Err(EntryProblem::MismatchedApprovalId)
    );
    assert_eq!(
        Registry::from_json(json!([])),
        Err(ValidationError::RootNotObject)
    );
}

#[test]
fn spec_example_round_trips() {
    let text = r#"{
  "hermes-e88be37f465145e39a07": {
    "approvalId": "hermes-e88be37f465145e39a07",
    "conversationId": "conv1",
    "createdAt": 1795994884396,
    "createdFromClaimId": "45ce79748d8748c2805c2f9bac7c265e",
    "decision": "allow",
    "expiresAt": 1796254084389,
    "receiptPending": false,
    "reconcilePending": false,
    "requestedAt": 1795994884394,
    "resolvedAt": 1795994884404,
    "respondedBy": "human1",
    "responseUserId": "human1",
    "status": "resolved",
    "summary": "File PINVOICE 12345 for 8,200 ILS?"
  }
}"#;
    let registry = Registry::from_json(serde_json::from_str(text).unwrap()).unwrap();
    let bytes = crate::format::to_file_bytes(&registry).unwrap();
    assert_eq!(String::from_utf8(bytes).unwrap(), text);
    let entry = registry.get("hermes-e88be37f465145e39a07").unwrap();
    assert_eq!(
        entry.terminal_result().unwrap().to_json(),
        json!({"status": "resolved", "decision": "allow", "approvalId": "hermes-e88be37f465145e39a07",
               "conversationId": "conv1", "respondedBy": "human1"})
    );
}

#[test]
fn transitions_preserve_unknown_fields() {
    let mut r = pending_registry();
    let mut doc = r.to_json();
    doc[A]["futureField"] = json!({"nested": [1, 2.5, "ü"], "n": 12345678901234u64});
    doc[A]["wakeBlockedReason"] = json!("kept");
    let mut r2 = Registry::from_json(doc.clone()).unwrap();
    r = std::mem::take(&mut r2);
    let lease = claimed(&mut r, 5, T0 + 10);
    recorded(r.finish_consume(
        &lease,
        &decision(Decision::Allow, Some("human1")),
        true,
        T0 + 20,
    ));
    let job = r.claim_wake(A, &claim(9), &owner(), T0 + 30).unwrap();
    r.finish_wake(A, job.claim_id.as_str(), true, T0 + 40);
    let entry = r.get(A).unwrap();
    assert_eq!(entry.get("futureField"), Some(&doc[A]["futureField"]));
    assert_eq!(entry.get("wakeBlockedReason"), Some(&json!("kept")));
}
