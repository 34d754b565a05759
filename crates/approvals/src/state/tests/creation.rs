//! Creating an approval (approvals.md §9): the durable reservation, activation with the
//! server's values or an orphan on a responder identity failure, and a failed creation.

use serde_json::{json, Value};

use super::*;

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
