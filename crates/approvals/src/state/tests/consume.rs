//! Consuming (approvals.md §10): claims that respect live leases, the response mapping of
//! approvals.md §10.3, and how server bodies are classified.

use serde_json::{json, Value};

use super::*;

#[test]
fn consume_claim_respects_live_leases() {
    let mut r = Registry::default();
    assert_eq!(
        r.claim_consume(A, None, &claim(5), &owner(), T0),
        ConsumeClaim::Missing(CheckResult::not_in_registry(A))
    );
    assert_eq!(
        CheckResult::not_in_registry(A).to_json(),
        json!({"status": "unknown", "approvalId": A, "note": format!("approval id is not in the detached registry \u{2014} {RE_ISSUE_NOTE}")})
    );
    r.record_creating(&new_approval(A, None), &claim(1), &owner(), T0)
        .unwrap();
    let ConsumeClaim::Busy(busy) = r.claim_consume(A, None, &claim(5), &owner(), T0 + 299_999)
    else {
        panic!("live create lease must be respected")
    };
    assert_eq!(
        busy.to_json(),
        json!({"status": "pending", "approvalId": A, "conversationId": "conv1",
               "expiresAt": T0 + 3_600_000, "leaseKind": "creation", "note": CREATION_BUSY_NOTE})
    );
    // Expired create lease: recovered by the consumer.
    let lease = claimed(&mut r, 5, T0 + 300_000);
    let entry = r.get(A).unwrap();
    assert_eq!(entry.status(), Status::Consuming);
    assert_eq!(entry.get("creationRecoveredAt"), Some(&json!(T0 + 300_000)));
    assert!(entry.get("createClaimId").is_none());
    assert_eq!(lease.expires_at_ms, T0 + 360_000);
    // Live consume lease: refused to anyone, including another process.
    let ConsumeClaim::Busy(busy) = r.claim_consume(A, None, &claim(6), &claim(7), T0 + 359_999)
    else {
        panic!("live consume lease must be respected")
    };
    assert_eq!(busy.lease_kind, Some(LeaseKind::Consume));
    assert_eq!(busy.note.as_deref(), Some(CONSUME_BUSY_NOTE));
    // Expired consume lease: replaced; the old holder's finish is then ignored.
    let second = claimed(&mut r, 6, T0 + 360_000);
    let stale = r.finish_consume(&lease, &ServerOutcome::Timeout, false, T0 + 360_001);
    assert!(
        matches!(stale, ConsumeFinish::LeaseLost(ref res) if res.status == CheckStatus::Unknown)
    );
    assert_eq!(r.get(A).unwrap().status(), Status::Consuming);
    assert!(matches!(
        r.finish_consume(&second, &ServerOutcome::Timeout, false, T0 + 360_002),
        ConsumeFinish::Recorded(_)
    ));
    assert_eq!(
        r.claim_consume(A, Some("conv2"), &claim(8), &owner(), T0),
        ConsumeClaim::WrongConversation
    );
}

#[test]
fn consume_response_mapping_follows_10_3() {
    let note = |prefix: &str| format!("{prefix} \u{2014} {RE_ISSUE_NOTE}");
    let cases: Vec<(ServerOutcome, Value, Status)> = vec![
        (
            decision(Decision::Allow, Some(" human1 ")),
            json!({"status": "resolved", "decision": "allow", "approvalId": A, "conversationId": "conv1", "respondedBy": "human1"}),
            Status::Resolved,
        ),
        (
            decision(Decision::Deny, Some("  ")),
            json!({"status": "unknown", "approvalId": A, "conversationId": "conv1", "note": note("approval response omitted authenticated responder identity")}),
            Status::Orphaned,
        ),
        (
            decision(Decision::Deny, Some("mallory")),
            json!({"status": "unknown", "approvalId": A, "conversationId": "conv1", "note": note("approval responder identity mismatch")}),
            Status::Orphaned,
        ),
        (
            ServerOutcome::Pending {
                expires_at: Some(json!(1796254084389.25)),
            },
            json!({"status": "pending", "approvalId": A, "conversationId": "conv1", "expiresAt": 1796254084389.25}),
            Status::Pending,
        ),
        (
            ServerOutcome::Pending {
                expires_at: Some(json!("soon")),
            },
            json!({"status": "pending", "approvalId": A, "conversationId": "conv1", "expiresAt": "soon"}),
            Status::Pending,
        ),
        (
            ServerOutcome::Pending { expires_at: None },
            json!({"status": "pending", "approvalId": A, "conversationId": "conv1", "expiresAt": T0 + 3_600_000}),
            Status::Pending,
        ),
        (
            ServerOutcome::Timeout,
            json!({"status": "expired", "approvalId": A, "conversationId": "conv1", "note": note("approval expired before a decision")}),
            Status::Expired,
        ),
        (
            ServerOutcome::Gone,
            json!({"status": "unknown", "approvalId": A, "conversationId": "conv1", "note": RE_ISSUE_NOTE}),
            Status::Orphaned,
        ),
        (
            ServerOutcome::Malformed,
            json!({"status": "unknown", "approvalId": A, "conversationId": "conv1", "note": note("malformed consume response")}),
            Status::Pending,
        ),
        (
            ServerOutcome::Unexpected(String::new()),
            json!({"status": "unknown", "approvalId": A, "conversationId": "conv1", "note": note("unexpected consume status '<empty>'")}),
            Status::Pending,
        ),
        (
            ServerOutcome::Unexpected("cancelled".into()),
            json!({"status": "unknown", "approvalId": A, "conversationId": "conv1", "note": note("unexpected consume status 'cancelled'")}),
            Status::Pending,
        ),
    ];
    for (outcome, expected, status) in cases {
        let mut r = pending_registry();
        let lease = claimed(&mut r, 5, T0 + 10);
        let got = recorded(r.finish_consume(&lease, &outcome, false, T0 + 20));
        assert_eq!(got, expected, "{outcome:?}");
        let entry = r.get(A).unwrap();
        assert_eq!(entry.status(), status, "{outcome:?}");
        assert!(entry.consume_lease().is_none() && entry.get("consumeClaimId").is_none());
        let retry = matches!(
            outcome,
            ServerOutcome::Malformed | ServerOutcome::Unexpected(_)
        );
        assert_eq!(entry.reconcile_pending(), retry, "{outcome:?}");
        if status == Status::Pending {
            let kept = if let ServerOutcome::Pending {
                expires_at: Some(v @ Value::Number(_)),
            } = &outcome
            {
                v.clone()
            } else {
                json!(T0 + 3_600_000)
            };
            assert_eq!(entry.expires_at(), &kept);
        }
    }
    // Transport failure: deferred, retried by the scan.
    let mut r = pending_registry();
    let lease = claimed(&mut r, 5, T0 + 10);
    assert_eq!(
        r.finish_consume(&lease, &ServerOutcome::Failed, true, T0 + 20),
        ConsumeFinish::Deferred
    );
    assert!(r.get(A).unwrap().reconcile_pending());
    assert_eq!(r.recovery_candidates(T0 + 20), vec![A.to_owned()]);
}

#[test]
fn server_responses_are_classified() {
    let cases = [
        (json!([]), ServerOutcome::Malformed),
        (
            json!({"status": "allow", "respondedBy": "h"}),
            decision(Decision::Allow, Some("h")),
        ),
        (json!({"status": "deny"}), decision(Decision::Deny, None)),
        (
            json!({"status": "pending"}),
            ServerOutcome::Pending { expires_at: None },
        ),
        (
            json!({"status": "pending", "expiresAt": null}),
            ServerOutcome::Pending {
                expires_at: Some(Value::Null),
            },
        ),
        (json!({"status": "timeout"}), ServerOutcome::Timeout),
        (
            json!({"status": null}),
            ServerOutcome::Unexpected(String::new()),
        ),
        (json!({"status": 7}), ServerOutcome::Unexpected("7".into())),
        (
            json!({"status": "ALLOW"}),
            ServerOutcome::Unexpected("ALLOW".into()),
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(ServerOutcome::from_response(&body), expected, "{body}");
    }
}
