//! Unit and property tests of the pure registry model.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::ids::{ApprovalId, ClaimId};

const T0: u64 = 1_795_994_884_394;
const A: &str = "hermes-0a0a0a0a0a0a0a0a0a0a";

fn claim(n: u8) -> ClaimId {
    ClaimId::from_random([n; 16])
}

fn owner() -> ClaimId {
    claim(0xee)
}

fn new_approval(id: &str, responder: Option<&str>) -> NewApproval {
    NewApproval::new(
        ApprovalId::parse(id).unwrap(),
        "conv1",
        T0 + 3_600_000,
        Some("  File PINVOICE 12345 for 8,200 ILS?  "),
        responder,
    )
    .unwrap()
}

/// A registry with one `pending` entry for `A` expecting `human1`.
fn pending_registry() -> Registry {
    let mut r = Registry::default();
    r.record_creating(&new_approval(A, Some("human1")), &claim(1), &owner(), T0)
        .unwrap();
    let activated = r.activate_created(A, claim(1).as_str(), None, Some("human1"), T0 + 2);
    assert!(matches!(activated, Activation::Activated(_)));
    r
}

fn claimed(r: &mut Registry, n: u8, now: u64) -> ConsumeLease {
    match r.claim_consume(A, None, &claim(n), &owner(), now) {
        ConsumeClaim::Claimed(lease) => lease,
        other => panic!("expected a claim, got {other:?}"),
    }
}

fn recorded(finish: ConsumeFinish) -> Value {
    match finish {
        ConsumeFinish::Recorded(result) => result.to_json(),
        other => panic!("expected a recorded result, got {other:?}"),
    }
}

fn valid_entry() -> Value {
    json!({
        "approvalId": A, "conversationId": "conv1", "status": "pending", "expiresAt": 1.5e12
    })
}

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
fn record_creating_writes_the_reservation() {
    let mut r = Registry::default();
    let entry = r
        .record_creating(&new_approval(A, Some("human1")), &claim(1), &owner(), T0)
        .unwrap();
    assert_eq!(
        Value::Object(entry.fields().clone()),
        json!({
            "approvalId": A, "conversationId": "conv1", "requestedAt": T0,
            "expiresAt": T0 + 3_600_000, "status": "creating",
            "createClaimId": claim(1).as_str(), "createClaimExpiresAt": T0 + 300_000,
            "createClaimOwner": owner().as_str(),
            "summary": "File PINVOICE 12345 for 8,200 ILS?", "responseUserId": "human1"
        })
    );
    assert_eq!(
        r.record_creating(&new_approval(A, None), &claim(2), &owner(), T0),
        Err(DuplicateId(A.to_owned()))
    );
    assert_eq!(
        NewApproval::new(ApprovalId::parse(A).unwrap(), " ", 1, None, None),
        Err(InvalidApproval::BlankConversation)
    );
}

#[test]
fn activation_adopts_server_values_and_is_idempotent() {
    let mut r = Registry::default();
    r.record_creating(&new_approval(A, Some("human1")), &claim(1), &owner(), T0)
        .unwrap();
    let echoed = serde_json::Number::from_f64(1796254084389.5).unwrap();
    let Activation::Activated(entry) = r.activate_created(
        A,
        claim(1).as_str(),
        Some(&echoed),
        Some(" human1 "),
        T0 + 2,
    ) else {
        panic!("not activated")
    };
    assert_eq!(entry.status(), Status::Pending);
    assert_eq!(entry.expires_at(), &json!(1796254084389.5));
    assert!(entry.create_lease().is_none());
    assert!(entry.get("createClaimId").is_none());
    assert_eq!(
        entry.get("createdFromClaimId"),
        Some(&json!(claim(1).as_str()))
    );
    // Same claim again: unchanged.
    assert_eq!(
        r.activate_created(A, claim(1).as_str(), None, None, T0 + 9),
        Activation::Activated(entry)
    );
    assert!(matches!(
        r.activate_created(A, claim(2).as_str(), None, None, T0 + 9),
        Activation::ClaimedByRecovery(_)
    ));
    let gone = r.activate_created("hermes-ffffffffffffffffffff", "x", None, None, T0);
    assert_eq!(
        gone.error_message("hermes-ffffffffffffffffffff").unwrap(),
        "Creating detached approval 'hermes-ffffffffffffffffffff' disappeared"
    );
}

#[test]
fn activation_orphans_on_responder_identity_failure() {
    let cases = [
        (None, None, Some(RESPONDER_OMITTED_ERROR)),
        (
            Some("human1"),
            Some("human2"),
            Some(RESPONDER_DIFFERENT_ERROR),
        ),
        (Some("human1"), None, None),
        (None, Some("owner"), None),
    ];
    for (sent, echoed, problem) in cases {
        let mut r = Registry::default();
        r.record_creating(&new_approval(A, sent), &claim(1), &owner(), T0)
            .unwrap();
        let outcome = r.activate_created(A, claim(1).as_str(), None, echoed, T0 + 1);
        match (problem, outcome) {
            (Some(problem), Activation::Orphaned(entry)) => {
                assert_eq!(entry.status(), Status::Orphaned);
                assert_eq!(entry.get("creationError"), Some(&json!(problem)));
                assert_eq!(entry.get("identityMismatch"), Some(&json!(true)));
                assert_eq!(entry.get("resolvedAt"), Some(&json!(T0 + 1)));
                assert!(!entry.receipt_pending() && !entry.reconcile_pending());
            }
            (None, Activation::Activated(entry)) => {
                assert_eq!(entry.response_user_id(), sent.or(echoed));
            }
            (problem, outcome) => panic!("{sent:?}/{echoed:?}: {problem:?} vs {outcome:?}"),
        }
    }
}

#[test]
fn fail_creation_needs_the_matching_claim() {
    let mut r = Registry::default();
    r.record_creating(&new_approval(A, None), &claim(1), &owner(), T0)
        .unwrap();
    let unchanged = r.fail_creation(A, claim(2).as_str(), None, T0).unwrap();
    assert_eq!(unchanged.status(), Status::Creating);
    let failed = r
        .fail_creation(A, claim(1).as_str(), Some(&"x".repeat(600)), T0 + 5)
        .unwrap();
    assert_eq!(failed.status(), Status::Orphaned);
    assert_eq!(
        failed
            .get("creationError")
            .and_then(Value::as_str)
            .map(|s| s.len()),
        Some(500)
    );
    let mut r = Registry::default();
    r.record_creating(&new_approval(A, None), &claim(1), &owner(), T0)
        .unwrap();
    let failed = r.fail_creation(A, claim(1).as_str(), None, T0).unwrap();
    assert_eq!(
        failed.get("creationError"),
        Some(&json!(DEFAULT_CREATION_ERROR))
    );
    assert_eq!(
        r.fail_creation("hermes-ffffffffffffffffffff", "x", None, T0),
        None
    );
}

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

fn decision(d: Decision, by: Option<&str>) -> ServerOutcome {
    ServerOutcome::Decision {
        decision: d,
        responded_by: by.map(str::to_owned),
    }
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

#[test]
fn resolution_sets_wake_or_clears_receipt() {
    let mut r = pending_registry();
    r.mark_receipt_pending(A, T0 + 5).unwrap();
    let lease = claimed(&mut r, 5, T0 + 10);
    recorded(r.finish_consume(
        &lease,
        &decision(Decision::Allow, Some("human1")),
        false,
        T0 + 20,
    ));
    let entry = r.get(A).unwrap();
    assert_eq!(entry.wake_status(), None);
    assert!(!entry.receipt_pending());
    assert!(r.claim_wake(A, &claim(9), &owner(), T0 + 30).is_none());

    let mut r = pending_registry();
    r.mark_receipt_pending(A, T0 + 5).unwrap();
    let lease = claimed(&mut r, 5, T0 + 10);
    recorded(r.finish_consume(
        &lease,
        &decision(Decision::Deny, Some("human1")),
        true,
        T0 + 20,
    ));
    let entry = r.get(A).unwrap();
    assert_eq!(entry.wake_status(), Some(WakeStatus::Pending));
    assert!(entry.receipt_pending());
    assert_eq!(r.pending_wakes(), vec![A.to_owned()]);
    // A repeat check returns the cached decision without a claim.
    assert!(matches!(
        r.claim_consume(A, None, &claim(6), &owner(), T0 + 40),
        ConsumeClaim::Settled(CheckResult {
            decision: Some(Decision::Deny),
            ..
        })
    ));
}

#[test]
fn wake_lease_lifecycle() {
    let mut r = pending_registry();
    let lease = claimed(&mut r, 5, T0 + 10);
    recorded(r.finish_consume(
        &lease,
        &decision(Decision::Allow, Some("human1")),
        true,
        T0 + 20,
    ));
    r.mark_receipt_pending(A, T0 + 21).unwrap();
    let job = r.claim_wake(A, &claim(9), &owner(), T0 + 30).unwrap();
    assert_eq!(
        job.text,
        format!("Canon approval {A} resolved: allow \u{2014} File PINVOICE 12345 for 8,200 ILS?")
    );
    assert_eq!(job.responded_by.as_deref(), Some("human1"));
    assert!(
        !format!("{job:?}").contains("PINVOICE"),
        "Debug must not leak the summary"
    );
    assert!(
        r.claim_wake(A, &claim(10), &owner(), T0 + 60_029).is_none(),
        "live lease"
    );
    assert_eq!(r.next_lease_retry_delay_ms(T0 + 30), Some(60_000));
    assert_eq!(r.next_lease_retry_delay_ms(T0 + 30_030), Some(30_050));
    // Expired: taken over; the old holder can no longer finish.
    let second = r.claim_wake(A, &claim(10), &owner(), T0 + 60_030).unwrap();
    assert!(!r.finish_wake(A, job.claim_id.as_str(), true, T0 + 60_031));
    assert!(r.finish_wake(A, second.claim_id.as_str(), false, T0 + 60_032));
    let entry = r.get(A).unwrap();
    assert_eq!(entry.wake_status(), Some(WakeStatus::Pending));
    assert!(
        entry.receipt_pending(),
        "a failed wake keeps receiptPending"
    );
    assert!(entry.get("wakeClaimId").is_none());
    let third = r.claim_wake(A, &claim(11), &owner(), T0 + 60_040).unwrap();
    assert!(r.finish_wake(A, third.claim_id.as_str(), true, T0 + 60_041));
    let entry = r.get(A).unwrap();
    assert_eq!(entry.wake_status(), Some(WakeStatus::Delivered));
    assert!(!entry.receipt_pending());
    assert_eq!(entry.get("wakeDeliveredAt"), Some(&json!(T0 + 60_041)));
    assert!(
        r.claim_wake(A, &claim(12), &owner(), T0 + 999_999)
            .is_none(),
        "delivered is final"
    );
    assert!(r.pending_wakes().is_empty());
    assert_eq!(r.next_lease_retry_delay_ms(T0), None);
}

#[test]
fn wake_text_fixtures() {
    let id = "hermes-e88be37f465145e39a07";
    let cases: Vec<(Decision, Option<String>, String)> = vec![
        (
            Decision::Allow,
            None,
            format!("Canon approval {id} resolved: allow"),
        ),
        (
            Decision::Deny,
            Some(String::new()),
            format!("Canon approval {id} resolved: deny"),
        ),
        (
            Decision::Deny,
            Some(" \t ".into()),
            format!("Canon approval {id} resolved: deny"),
        ),
        (
            Decision::Allow,
            Some("x".repeat(500)),
            format!(
                "Canon approval {id} resolved: allow \u{2014} {}",
                "x".repeat(500)
            ),
        ),
        (
            Decision::Allow,
            Some(" Überweisung 8 200 ₪ 😀 ".into()),
            format!("Canon approval {id} resolved: allow \u{2014} Überweisung 8 200 ₪ 😀"),
        ),
    ];
    for (decision, summary, expected) in cases {
        assert_eq!(wake_text(id, decision, summary.as_deref()), expected);
    }
    assert_eq!(wake_message_id(id), format!("canon-detached-approval:{id}"));
}

#[test]
fn receipts_mark_only_eligible_states() {
    let mut r = pending_registry();
    let entry = r.mark_receipt_pending(A, T0 + 5).unwrap();
    assert!(entry.receipt_pending());
    assert_eq!(entry.get("receiptSeenAt"), Some(&json!(T0 + 5)));
    assert!(r
        .mark_receipt_pending("hermes-ffffffffffffffffffff", T0)
        .is_none());
    let lease = claimed(&mut r, 5, T0 + 10);
    recorded(r.finish_consume(&lease, &ServerOutcome::Gone, true, T0 + 20));
    let entry = r.mark_receipt_pending(A, T0 + 30).unwrap();
    assert!(!entry.receipt_pending(), "orphaned entries are not marked");
}

#[test]
fn pruning_keeps_live_entries_and_recent_terminals() {
    let entry = |id: &str, status: &str, resolved_at: Value, expires_at: Value| {
        json!({"approvalId": id, "conversationId": "c", "status": status, "decision": "allow",
               "resolvedAt": resolved_at, "expiresAt": expires_at,
               "createClaimId": "c", "createClaimExpiresAt": 0,
               "consumeClaimId": "c", "consumeClaimExpiresAt": 0})
    };
    let now = RETENTION_MS + 1_000;
    let doc = json!({
        "a-old-pending": entry("a-old-pending", "pending", json!(null), json!(0)),
        "b-old-creating": entry("b-old-creating", "creating", json!(null), json!(0)),
        "c-old-consuming": entry("c-old-consuming", "consuming", json!(null), json!(0)),
        "d-old-resolved": entry("d-old-resolved", "resolved", json!(999), json!(now)),
        "e-edge-resolved": entry("e-edge-resolved", "resolved", json!(1_000), json!(0)),
        "f-expiry-stamp": entry("f-expiry-stamp", "expired", json!(0), json!(1_000)),
        "g-no-stamp": entry("g-no-stamp", "orphaned", json!(null), json!(0)),
        "h-recent": entry("h-recent", "orphaned", json!(now), json!(0)),
    });
    let mut r = Registry::from_json(doc).unwrap();
    assert_eq!(r.prune(now), 2);
    let ids: Vec<&str> = r.entries().map(Entry::approval_id).collect();
    assert_eq!(
        ids,
        vec![
            "a-old-pending",
            "b-old-creating",
            "c-old-consuming",
            "e-edge-resolved",
            "f-expiry-stamp",
            "h-recent"
        ]
    );
}

#[test]
fn recovery_and_reconcile_decisions() {
    let mut r = Registry::default();
    r.record_creating(&new_approval(A, None), &claim(1), &owner(), T0)
        .unwrap();
    assert!(r.recovery_candidates(T0).is_empty());
    assert_eq!(
        recovery_action(r.get(A), 250, T0),
        RecoveryAction::Wait { delay_ms: 250 }
    );
    assert_eq!(
        recovery_action(r.get(A), 5_000, T0 + 299_990),
        RecoveryAction::Wait { delay_ms: 50 }
    );
    assert_eq!(
        recovery_action(r.get(A), 250, T0 + 300_000),
        RecoveryAction::Consume
    );
    assert_eq!(r.recovery_candidates(T0 + 300_000), vec![A.to_owned()]);
    assert_eq!(next_recovery_backoff(250), 500);
    assert_eq!(next_recovery_backoff(4_000), 5_000);
    assert_eq!(recovery_action(None, 250, T0), RecoveryAction::Stop);
    assert_eq!(r.reconcile_targets(), vec![A.to_owned()]);
    assert_eq!(r.next_lease_retry_delay_ms(T0 + 400_000), Some(50));

    // A predecessor's consume lease: tracked until released.
    let mut r = pending_registry();
    let lease = claimed(&mut r, 5, T0 + 10);
    let mut tracker = ReconcileTracker::new(&r);
    assert!(!tracker.is_settled());
    assert!(!tracker.observe(&r));
    recorded(r.finish_consume(
        &lease,
        &decision(Decision::Allow, Some("human1")),
        true,
        T0 + 20,
    ));
    assert!(
        tracker.observe(&r),
        "resolved with wake pending releases the consume"
    );
    assert!(tracker.is_settled());
    assert_eq!(
        recovery_action(r.get(A), 250, T0 + 30),
        RecoveryAction::DeliverWake
    );
    // \[seed\] scan rule: a pending wake without any flag is still picked up.
    assert_eq!(r.recovery_candidates(T0 + 30), vec![A.to_owned()]);

    let job = r.claim_wake(A, &claim(9), &owner(), T0 + 30).unwrap();
    let mut tracker = ReconcileTracker::new(&r);
    assert!(r.recovery_candidates(T0 + 31).is_empty(), "live wake lease");
    assert_eq!(r.recovery_candidates(T0 + 60_030), vec![A.to_owned()]);
    r.finish_wake(A, job.claim_id.as_str(), false, T0 + 40);
    assert!(tracker.observe(&r));
    assert!(tracker.is_settled());
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

// ---------------------------------------------------------------------------
// Properties.

#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Activate(u8, bool),
    FailCreate(u8),
    Receipt(u8),
    Claim(u8),
    Finish(u8, u8),
    WakeClaim(u8),
    WakeFinish(u8, bool),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0u8..4;
    prop_oneof![
        id.clone().prop_map(Op::Create),
        (id.clone(), any::<bool>()).prop_map(|(i, ok)| Op::Activate(i, ok)),
        id.clone().prop_map(Op::FailCreate),
        id.clone().prop_map(Op::Receipt),
        id.clone().prop_map(Op::Claim),
        (id.clone(), 0u8..8).prop_map(|(i, o)| Op::Finish(i, o)),
        id.clone().prop_map(Op::WakeClaim),
        (id, any::<bool>()).prop_map(|(i, d)| Op::WakeFinish(i, d)),
        prop_oneof![0u64..2_000, 50_000u64..400_000, Just(RETENTION_MS)].prop_map(Op::Advance),
    ]
}

fn id_of(i: u8) -> String {
    ApprovalId::from_random([i; 10]).as_str().to_owned()
}

fn outcome_of(o: u8) -> ServerOutcome {
    match o {
        0 => decision(Decision::Allow, Some("human1")),
        1 => decision(Decision::Deny, Some("human1")),
        2 => decision(Decision::Allow, Some("someone-else")),
        3 => ServerOutcome::Pending {
            expires_at: Some(json!(T0 * 2)),
        },
        4 => ServerOutcome::Timeout,
        5 => ServerOutcome::Gone,
        6 => ServerOutcome::Failed,
        _ => ServerOutcome::Unexpected("cancelled".into()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No operation sequence yields two decisions for one id, a terminal entry never
    /// returns to a live state, at most one live consume lease exists per id, every
    /// state validates and survives a serialize/parse round trip, and unknown fields
    /// survive every rewrite.
    #[test]
    fn operation_sequences_keep_the_invariants(ops in prop::collection::vec(op(), 1..80)) {
        let mut r = Registry::default();
        let mut now = T0;
        let mut create_claims: std::collections::HashMap<String, ClaimId> = Default::default();
        let mut leases: std::collections::HashMap<String, Vec<ConsumeLease>> = Default::default();
        let mut wakes: std::collections::HashMap<String, Vec<WakeJob>> = Default::default();
        let mut decided: std::collections::HashMap<String, Decision> = Default::default();
        let mut terminal: std::collections::HashMap<String, Status> = Default::default();
        let mut next_claim = 0u8;
        let mut fresh = || { next_claim = next_claim.wrapping_add(1); ClaimId::from_random([next_claim; 16]) };
        for op in ops {
            match op {
                Op::Create(i) => {
                    let id = id_of(i);
                    let c = fresh();
                    let new = NewApproval::new(ApprovalId::parse(&id).unwrap(), "conv", now + 1_000_000, Some("q"), Some("human1")).unwrap();
                    let existed = r.get(&id).is_some();
                    match r.record_creating(&new, &c, &owner(), now) {
                        Ok(_) => {
                            prop_assert!(!existed);
                            // Give the entry an unknown field, as another writer might.
                            let mut doc = r.to_json();
                            doc[&id]["x-extra"] = json!({"keep": [1, 2.25]});
                            r = Registry::from_json(doc).unwrap();
                            create_claims.insert(id.clone(), c);
                            terminal.remove(&id);
                            decided.remove(&id);
                        }
                        Err(_) => prop_assert!(existed),
                    }
                }
                Op::Activate(i, ok) => {
                    let id = id_of(i);
                    if let Some(c) = create_claims.get(&id) {
                        let responder = if ok { "human1" } else { "other" };
                        let _ = r.activate_created(&id, c.as_str(), None, Some(responder), now);
                    }
                }
                Op::FailCreate(i) => {
                    let id = id_of(i);
                    if let Some(c) = create_claims.get(&id) {
                        let _ = r.fail_creation(&id, c.as_str(), None, now);
                    }
                }
                Op::Receipt(i) => { let _ = r.mark_receipt_pending(&id_of(i), now); }
                Op::Claim(i) => {
                    let id = id_of(i);
                    let before = r.get(&id).cloned();
                    let outcome = r.claim_consume(&id, None, &fresh(), &owner(), now);
                    // Leases expire exactly as specified: claimable iff no live lease.
                    let claimable = before.as_ref().map(|e| match e.status() {
                        Status::Pending => true,
                        Status::Creating => !e.create_lease().is_some_and(|l| l.is_live(now)),
                        Status::Consuming => !e.consume_lease().is_some_and(|l| l.is_live(now)),
                        _ => false,
                    });
                    match outcome {
                        ConsumeClaim::Claimed(lease) => {
                            prop_assert_eq!(claimable, Some(true), "a live lease was stolen");
                            prop_assert_eq!(lease.expires_at_ms, now + CONSUME_LEASE_MS);
                            leases.entry(id).or_default().push(lease);
                        }
                        ConsumeClaim::Busy(_) => prop_assert_eq!(claimable, Some(false)),
                        ConsumeClaim::Settled(_) => {
                            prop_assert!(before.is_some_and(|e| e.status().is_terminal()))
                        }
                        ConsumeClaim::Missing(_) => prop_assert!(before.is_none()),
                        ConsumeClaim::WrongConversation => prop_assert!(false, "no conversation given"),
                    }
                }
                Op::Finish(i, o) => {
                    let id = id_of(i);
                    if let Some(lease) = leases.get_mut(&id).and_then(Vec::pop) {
                        let out = r.finish_consume(&lease, &outcome_of(o), o % 2 == 0, now);
                        if let ConsumeFinish::Recorded(CheckResult { status: CheckStatus::Resolved, decision: Some(d), .. }) = out {
                            prop_assert!(!decided.contains_key(&id), "two decisions recorded for one id");
                            decided.insert(id.clone(), d);
                        }
                    }
                }
                Op::WakeClaim(i) => {
                    let id = id_of(i);
                    let eligible = r.get(&id).is_some_and(|e| {
                        e.status() == Status::Resolved
                            && match e.wake_status() {
                                Some(WakeStatus::Pending) => true,
                                Some(WakeStatus::Delivering) => {
                                    !e.wake_lease().is_some_and(|l| l.is_live(now))
                                }
                                _ => false,
                            }
                    });
                    let job = r.claim_wake(&id, &fresh(), &owner(), now);
                    prop_assert_eq!(job.is_some(), eligible);
                    if let Some(job) = job {
                        wakes.entry(id).or_default().push(job);
                    }
                }
                Op::WakeFinish(i, delivered) => {
                    let id = id_of(i);
                    if let Some(job) = wakes.get_mut(&id).and_then(Vec::pop) {
                        let _ = r.finish_wake(&id, job.claim_id.as_str(), delivered, now);
                    }
                }
                Op::Advance(ms) => {
                    now += ms;
                    r.prune(now);
                }
            }
            // Every state validates and survives the file round trip.
            let bytes = crate::format::to_file_bytes(&r).unwrap();
            let reparsed = Registry::from_json(serde_json::from_slice(&bytes).unwrap()).unwrap();
            prop_assert_eq!(&reparsed, &r);
            for entry in r.entries() {
                let id = entry.approval_id().to_owned();
                prop_assert_eq!(entry.get("x-extra"), Some(&json!({"keep": [1, 2.25]})));
                if let Some(status) = terminal.get(&id) {
                    prop_assert_eq!(entry.status(), *status, "terminal status changed");
                }
                if entry.status().is_terminal() {
                    terminal.insert(id.clone(), entry.status());
                }
                if let Some(d) = decided.get(&id) {
                    prop_assert_eq!(entry.decision(), Some(*d));
                }
                if entry.status() == Status::Resolved {
                    prop_assert!(entry.decision().is_some());
                }
            }
            // A pruned terminal id is gone for good (fresh creates reuse it only explicitly).
            for id in terminal.keys() {
                if r.get(id).is_none() {
                    create_claims.remove(id);
                }
            }
        }
    }

    /// Arbitrary unknown fields are accepted and preserved exactly by a parse →
    /// serialize → parse cycle.
    #[test]
    fn unknown_fields_round_trip(
        extra in prop::collection::btree_map("[a-zA-Z]{1,8}", arb_json(), 0..6)
    ) {
        let mut entry = valid_entry();
        for (k, v) in &extra {
            if entry.get(k).is_none() && !is_known_field(k) {
                entry[k] = v.clone();
            }
        }
        let doc = json!({ A: entry.clone() });
        let registry = Registry::from_json(doc).unwrap();
        let bytes = crate::format::to_file_bytes(&registry).unwrap();
        let back: Value = serde_json::from_slice(&bytes).unwrap();
        prop_assert_eq!(&back[A], &entry);
    }

    /// Replacing a required or typed field by a value of the wrong type is rejected
    /// with that field's message; any other replacement is accepted.
    #[test]
    fn mutated_entries_are_rejected_as_the_spec_says(field in prop::sample::select(TYPED_FIELDS.to_vec()), value in arb_json()) {
        let mut entry = valid_entry();
        entry[field] = value.clone();
        let got = validate_entry(A, &entry);
        let ok = match field {
            "conversationId" => matches!(&value, Value::String(s) if !s.trim().is_empty()),
            "status" => matches!(value.as_str(), Some("pending" | "expired" | "orphaned")),
            "expiresAt" => value.is_number(),
            "respondedBy" | "summary" | "responseUserId" | "createdFromClaimId" | "creationError" => value.is_null() || value.is_string(),
            "receiptPending" | "reconcilePending" => value.is_null() || value.is_boolean(),
            "wakeStatus" => value.is_null() || matches!(value.as_str(), Some("pending" | "delivered" | "blocked")),
            _ => value.is_null() || value.is_number(),
        };
        prop_assert_eq!(got.is_ok(), ok, "{} = {}", field, value);
    }
}

const TYPED_FIELDS: [&str; 17] = [
    "conversationId",
    "status",
    "expiresAt",
    "respondedBy",
    "summary",
    "responseUserId",
    "createdFromClaimId",
    "creationError",
    "requestedAt",
    "createdAt",
    "creationRecoveredAt",
    "resolvedAt",
    "wakeDeliveredAt",
    "receiptSeenAt",
    "receiptPending",
    "reconcilePending",
    "wakeStatus",
];

fn is_known_field(name: &str) -> bool {
    TYPED_FIELDS.contains(&name)
        || name.starts_with("createClaim")
        || name.starts_with("consumeClaim")
        || name.starts_with("wakeClaim")
        || matches!(name, "approvalId" | "decision")
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e15f64..1e15).prop_map(Value::from),
        prop_oneof![
            Just("pending".to_owned()),
            Just("resolved".to_owned()),
            Just("  ".to_owned()),
            "\\PC{0,12}"
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
