//! Retention and recovery (approvals.md §7, §14): pruning keeps live entries and recent
//! terminals; recovery and reconcile decide what to wait for, consume or deliver.

use serde_json::json;

use super::*;

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
