//! Unit and property tests of the pure registry model, by topic: entry validation and the
//! file format (`validation.rs`), creation (`creation.rs`), consuming (`consume.rs`), wakes and
//! receipts (`wake.rs`), pruning and recovery (`recovery.rs`), and properties over operation
//! sequences and mutated entries (`properties.rs`). The fixtures and helpers they share are
//! here.

mod consume;
mod creation;
mod properties;
mod recovery;
mod validation;
mod wake;

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

fn decision(d: Decision, by: Option<&str>) -> ServerOutcome {
    ServerOutcome::Decision {
        decision: d,
        responded_by: by.map(str::to_owned),
    }
}
