//! Properties: operation sequences keep the registry's invariants, unknown fields round-trip,
//! and mutated entries are rejected as the spec says.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

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
