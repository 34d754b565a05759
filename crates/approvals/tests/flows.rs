//! End-to-end flows through `Store` against the real file (approvals.md §9–§13).

use std::fs;

use canon_approvals::state::{
    Activation, CheckStatus, ConsumeClaim, ConsumeFinish, Decision, ServerOutcome, Status,
    WakeStatus,
};
use canon_approvals::store::{Lookup, Store};
use serde_json::{json, Value};

use crate::util::{approval, new_approval, temp_files, T0};

fn file_json(store: &Store) -> Value {
    serde_json::from_slice(&fs::read(store.registry_path()).expect("file")).expect("json")
}

#[test]
fn request_receipt_consume_wake_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path()).expect("store");
    let id = approval(1);
    let reservation = store
        .create_begin(&new_approval(1, "conv1"), T0)
        .expect("create");
    // The reservation is on disk before anything is sent (approvals.md §5 ordering).
    assert_eq!(file_json(&store)[id.as_str()]["status"], "creating");
    let echoed = serde_json::Number::from_f64(1796254084389.0).expect("finite");
    let activation = store
        .create_commit(
            id.as_str(),
            &reservation.create_claim,
            Some(&echoed),
            Some("human1"),
            T0 + 2,
        )
        .expect("commit");
    let Activation::Activated(entry) = activation else {
        panic!("not activated")
    };
    assert_eq!(
        canon_approvals::request::requested_result(&entry),
        json!({"status": "pending", "approvalId": id.as_str(), "conversationId": "conv1",
               "expiresAt": 1796254084389.0, "responseUserId": "human1",
               "note": canon_approvals::request::REQUESTED_NOTE})
    );
    // A receipt, then the receipt-driven consume with a wake.
    store
        .receipt(id.as_str(), T0 + 5)
        .expect("receipt")
        .expect("ours");
    let ConsumeClaim::Claimed(lease) = store
        .consume_begin(id.as_str(), None, T0 + 6)
        .expect("claim")
    else {
        panic!("claim expected")
    };
    assert_eq!(lease.conversation_id, "conv1");
    let outcome =
        ServerOutcome::from_response(&json!({"status": "allow", "respondedBy": "human1"}));
    let ConsumeFinish::Recorded(result) = store
        .consume_finish(&lease, &outcome, true, T0 + 7)
        .expect("finish")
    else {
        panic!("recorded expected")
    };
    assert_eq!(result.status, CheckStatus::Resolved);
    assert_eq!(
        store.pending_wakes().expect("wakes"),
        vec![id.as_str().to_owned()]
    );
    let job = store
        .wake_claim(id.as_str(), T0 + 8)
        .expect("wake")
        .expect("job");
    assert_eq!(
        job.text,
        format!("Canon approval {id} resolved: allow \u{2014} File PINVOICE 12345 for 8,200 ILS?")
    );
    assert!(store.wake_finish(&job, true, T0 + 9).expect("finish wake"));
    let on_disk = file_json(&store);
    let entry = &on_disk[id.as_str()];
    assert_eq!(entry["status"], "resolved");
    assert_eq!(entry["decision"], "allow");
    assert_eq!(entry["wakeStatus"], "delivered");
    assert_eq!(entry["receiptPending"], false);
    assert_eq!(
        entry["expiresAt"],
        json!(1796254084389.0),
        "float expiresAt kept as float"
    );
    assert!(entry.get("createClaimId").is_none() && entry.get("consumeClaimId").is_none());
    // Repeat checks answer from the registry.
    match store.check(id.as_str(), None).expect("check") {
        Lookup::Settled(result) => assert_eq!(result.decision, Some(Decision::Allow)),
        other => panic!("{other:?}"),
    }
    assert!(temp_files(dir.path()).is_empty());
    // The written bytes use the approvals.md §3.4 layout:
    // sorted keys, 2 spaces, no newline at the end.
    let text = fs::read_to_string(store.registry_path()).expect("text");
    assert!(text.starts_with("{\n  \"hermes-"));
    assert!(!text.ends_with('\n'));
}

#[test]
fn cross_conversation_check_is_rejected_before_any_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path()).expect("store");
    let id = approval(2);
    let reservation = store
        .create_begin(&new_approval(2, "convA"), T0)
        .expect("create");
    store
        .create_commit(id.as_str(), &reservation.create_claim, None, None, T0)
        .expect("commit");
    let before = fs::read(store.registry_path()).expect("bytes");
    assert_eq!(
        store.check(id.as_str(), Some("convB")).expect("check"),
        Lookup::WrongConversation
    );
    assert_eq!(
        store
            .consume_begin(id.as_str(), Some("convB"), T0 + 1)
            .expect("claim"),
        ConsumeClaim::WrongConversation
    );
    assert_eq!(
        fs::read(store.registry_path()).expect("bytes"),
        before,
        "no write, no lease"
    );
    assert!(matches!(
        store.check(id.as_str(), Some("convA")).expect("check"),
        Lookup::Live(_)
    ));
    assert!(matches!(
        store
            .check("hermes-ffffffffffffffffffff", Some("convA"))
            .expect("check"),
        Lookup::Missing(_)
    ));
}

#[test]
fn rewrites_preserve_foreign_fields_and_numbers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path()).expect("store");
    let foreign = json!({
        "hermes-aaaaaaaaaaaaaaaaaaaa": {
            "approvalId": "hermes-aaaaaaaaaaaaaaaaaaaa", "conversationId": "c",
            "status": "resolved", "decision": "deny", "expiresAt": 1796254084389.5,
            "resolvedAt": T0, "wakeStatus": "blocked", "wakeBlockedReason": "revalidation failed",
            "agentId": "agent-7", "nested": {"z": [1, {"y": null}], "big": 9007199254740993u64},
            "summary": "Überweisung \u{1F600}"
        }
    });
    fs::write(
        store.registry_path(),
        serde_json::to_vec(&foreign).expect("json"),
    )
    .expect("write");
    store
        .create_begin(&new_approval(3, "c"), T0 + 1)
        .expect("create");
    let after = file_json(&store);
    assert_eq!(
        after["hermes-aaaaaaaaaaaaaaaaaaaa"],
        foreign["hermes-aaaaaaaaaaaaaaaaaaaa"]
    );
    // A blocked wake is terminal: never claimed.
    assert!(store
        .wake_claim("hermes-aaaaaaaaaaaaaaaaaaaa", T0 + 2)
        .expect("wake")
        .is_none());
    let text = fs::read_to_string(store.registry_path()).expect("text");
    assert!(
        text.contains("\\u00dcberweisung \\ud83d\\ude00"),
        "non-ASCII escaped like Python"
    );
}

#[test]
fn duplicate_ids_are_refused_and_terminal_entries_pruned_after_14_days() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path()).expect("store");
    let reservation = store
        .create_begin(&new_approval(4, "c"), T0)
        .expect("create");
    let err = store.create_begin(&new_approval(4, "c"), T0).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Detached approval id '{}' already exists", approval(4))
    );
    store
        .create_fail(approval(4).as_str(), &reservation.create_claim, None, T0)
        .expect("fail")
        .expect("entry");
    assert_eq!(
        store
            .get(approval(4).as_str())
            .expect("get")
            .map(|e| e.status()),
        Some(Status::Orphaned)
    );
    // 14 days later, the next mutation prunes it; a plain read never does.
    let later = T0 + 1_209_600_001;
    assert!(store.get(approval(4).as_str()).expect("get").is_some());
    store
        .create_begin(&new_approval(5, "c"), later)
        .expect("create");
    assert!(store.get(approval(4).as_str()).expect("get").is_none());
    assert_eq!(
        store.check(approval(4).as_str(), None).expect("check"),
        Lookup::Missing(canon_approvals::state::CheckResult::not_in_registry(
            approval(4).as_str()
        ))
    );
}

#[test]
fn leases_survive_store_instances_and_expire_on_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Store::new(dir.path()).expect("store");
    let second = Store::new(dir.path()).expect("store");
    let id = approval(6);
    let reservation = first
        .create_begin(&new_approval(6, "c"), T0)
        .expect("create");
    // The creator crashed: its lease is respected for 300 s, then recovered.
    match second
        .consume_begin(id.as_str(), None, T0 + 299_999)
        .expect("claim")
    {
        ConsumeClaim::Busy(result) => assert_eq!(result.to_json()["leaseKind"], "creation"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        second
            .next_lease_retry_delay(T0 + 299_000)
            .expect("delay")
            .map(|d| d.as_millis()),
        Some(1_050)
    );
    let ConsumeClaim::Claimed(lease) = second
        .consume_begin(id.as_str(), None, T0 + 300_000)
        .expect("claim")
    else {
        panic!("expired create lease must be recoverable")
    };
    // The late creator can no longer activate.
    let late = first
        .create_commit(
            id.as_str(),
            &reservation.create_claim,
            None,
            None,
            T0 + 300_001,
        )
        .expect("commit");
    assert_eq!(
        late.error_message(id.as_str()).as_deref(),
        Some(format!("Creating detached approval '{id}' was claimed by recovery").as_str())
    );
    let entry = second.get(id.as_str()).expect("get").expect("entry");
    assert_eq!(
        entry.consume_lease().map(|l| l.owner),
        Some(Some(second.owner().as_str()))
    );
    assert_eq!(entry.wake_status(), None::<WakeStatus>);
    let finish = second
        .consume_finish(
            &lease,
            &ServerOutcome::Pending { expires_at: None },
            true,
            T0 + 300_002,
        )
        .expect("finish");
    assert!(matches!(finish, ConsumeFinish::Recorded(_)));
}

#[test]
fn reconcile_pass_drives_a_predecessor_consume_to_its_wake() {
    let dir = tempfile::tempdir().expect("tempdir");
    let predecessor = Store::new(dir.path()).expect("store");
    let successor = Store::new(dir.path()).expect("store");
    let id = approval(7);
    let reservation = predecessor
        .create_begin(&new_approval(7, "c"), T0)
        .expect("create");
    predecessor
        .create_commit(id.as_str(), &reservation.create_claim, None, None, T0)
        .expect("commit");
    // The predecessor claimed a consume and died.
    assert!(matches!(
        predecessor
            .consume_begin(id.as_str(), None, T0 + 1)
            .expect("claim"),
        ConsumeClaim::Claimed(_)
    ));
    let first = successor.reconcile_pass(T0 + 2).expect("pass");
    let mut tracker = canon_approvals::state::ReconcileTracker::new(&first.registry);
    assert_eq!(first.consume, vec![id.as_str().to_owned()]);
    assert!(first.wakes.is_empty());
    assert_eq!(first.next_delay.map(|d| d.as_millis()), Some(60_000));
    // Its lease is live: the successor must wait, not steal.
    assert!(matches!(
        successor
            .consume_begin(id.as_str(), None, T0 + 2)
            .expect("claim"),
        ConsumeClaim::Busy(_)
    ));
    assert!(!tracker.observe(&successor.reconcile_pass(T0 + 3).expect("pass").registry));
    // After the lease, the successor consumes with a wake and delivers it once.
    let ConsumeClaim::Claimed(lease) = successor
        .consume_begin(id.as_str(), None, T0 + 60_001)
        .expect("claim")
    else {
        panic!("expired lease must be claimable")
    };
    let outcome = ServerOutcome::Decision {
        decision: Decision::Deny,
        responded_by: Some("human1".into()),
    };
    successor
        .consume_finish(&lease, &outcome, true, T0 + 60_002)
        .expect("finish");
    let pass = successor.reconcile_pass(T0 + 60_003).expect("pass");
    assert!(tracker.observe(&pass.registry), "released");
    assert!(tracker.is_settled());
    assert!(pass.consume.is_empty());
    assert_eq!(pass.wakes, vec![id.as_str().to_owned()]);
    let job = successor
        .wake_claim(id.as_str(), T0 + 60_004)
        .expect("wake")
        .expect("job");
    assert!(
        predecessor
            .wake_claim(id.as_str(), T0 + 60_005)
            .expect("wake")
            .is_none(),
        "live wake lease"
    );
    assert!(successor
        .wake_finish(&job, true, T0 + 60_006)
        .expect("finish"));
    let pass = successor.reconcile_pass(T0 + 60_007).expect("pass");
    assert!(pass.wakes.is_empty() && pass.next_delay.is_none());
}

/// The Canon home holds the agent's credentials and decisions, so a home the store creates (with
/// every missing parent) is private whatever the umask lets through, while one that already
/// exists keeps the mode its owner gave it.
#[test]
fn a_canon_home_the_store_creates_is_private_and_an_existing_one_is_left_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("profiles").join("canon");
    let store = Store::new(&home).expect("store");
    store
        .create_begin(&new_approval(1, "conv1"), T0)
        .expect("create");
    let mode =
        |path: &std::path::Path| fs::metadata(path).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&home), 0o700, "the home it made");
    assert_eq!(
        mode(&dir.path().join("profiles")),
        0o700,
        "the parent it made"
    );

    let shared = dir.path().join("shared");
    fs::create_dir(&shared).expect("mkdir");
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o750)).expect("chmod");
    Store::new(&shared)
        .expect("store")
        .create_begin(&new_approval(2, "conv1"), T0)
        .expect("create");
    assert_eq!(mode(&shared), 0o750, "an existing home keeps its mode");
}
