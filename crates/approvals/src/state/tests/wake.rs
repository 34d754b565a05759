//! The wake turn and receipts (approvals.md §8.2, §12, §13): a resolution sets the wake or
//! clears the receipt, the wake lease's lifecycle, the wake texts, and which states take a
//! receipt.

use serde_json::json;

use super::*;

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
