//! Tests of the durable-delivery ledger outside a lifecycle turn: a replay after an ambiguous
//! failure reuses its ids, a released plan keeps its ordinal while `notify` sends advance, and
//! previews stream under the session's allocated turn id.

use canon_chunking::ids::{stable_final_message_id, Ordinal};
use serde_json::json;

use super::support::*;
use crate::turn::*;

/// turns.md §4.4, §4.7 and §7.6: an edit-finalize outside a lifecycle turn
/// is durable through the ledger; after an ambiguous failure Hermes' retry
/// replays the same operation with the same ids; different content is
/// refused; a settled final is not sent twice.
#[test]
fn replay_after_ambiguous_failure_reuses_ids() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    let first = machine.handle(edit(1, "Recovered answer", true), 0);
    let Some(Effect::Deliver(original)) = first.first().cloned() else {
        panic!("expected a delivery: {first:?}");
    };
    assert_eq!(
        original.parts[0].message_id,
        stable_final_message_id(C1, Some(&turn_id(9)), Ordinal::FIRST)
    );
    check_steps(&mut machine, vec![
        (10, failed(1, FailureClass::Ambiguous), &["reply r1 failed \"Canon request timed out\" retryable=false"]),
        (20, edit(2, "Something else", true), &[
            "reply r2 failed \"Canon refused to replace an unsettled durable delivery with different content\" retryable=false",
        ]),
    ]);
    let replay = machine.handle(edit(3, "Recovered answer", true), 30);
    assert_eq!(replay, vec![Effect::Deliver(original.clone())]);
    // A second finalize while the replay is in flight waits for it.
    assert_eq!(
        machine.handle(edit(4, "Recovered answer", true), 31),
        vec![]
    );
    check_steps(
        &mut machine,
        vec![
            (
                40,
                delivered(1),
                &["reply r3 delivered T9", "reply r4 delivered T9"],
            ),
            (
                41,
                edit(5, "Recovered answer", true),
                &["reply r5 duplicate T9"],
            ),
            (790, Input::Timeout, &["stream clear conv-1"]),
        ],
    );
}

/// turns.md §4.4 "Release on failure": a provably pre-handler failure of a
/// single-part plan releases it without advancing the ordinal, so the next
/// attempt uses the same ids; consecutive `notify` sends get new ordinals.
#[test]
fn released_plan_keeps_its_ordinal_and_notify_sends_advance() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    let notify = |r| send_with(r, Some(S1), "Ping", json!({"notify": true}));
    let first = machine.handle(notify(1), 0);
    machine.handle(failed(1, FailureClass::PreHandler), 1);
    let second = machine.handle(notify(2), 2);
    let ids = |effects: &[Effect]| -> Vec<Option<String>> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Deliver(d) => Some(d.parts[0].message_id.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(ids(&first), ids(&second));
    let done = machine.handle(delivered(2), 3);
    assert_eq!(
        done.iter().map(describe).collect::<Vec<_>>(),
        ["reply r2 delivered T9"]
    );
    let third = machine.handle(notify(3), 4);
    let second_ordinal = stable_final_message_id(C1, Some(&turn_id(9)), Ordinal::FIRST.next());
    assert_eq!(ids(&third), vec![second_ordinal]);
}

/// turns.md §7.6: outside a lifecycle turn a preview streams under the
/// session's allocated turn id, and a finalize after a committed final is a
/// fresh final once new content arrived.
#[test]
fn previews_outside_a_turn_use_the_session_turn_id() {
    check(vec![
        (
            0,
            preview(1, "Recovered ▉"),
            &["stream set T9 text=\"Recovered ▉\"", "reply r1 preview T9"],
        ),
        (
            1,
            edit(2, "Recovered", true),
            &["deliver op1 messages conv-1 [base turn_complete \"Recovered\"]"],
        ),
        (2, delivered(1), &["reply r2 delivered T9"]),
        (3, edit(3, "Recovered", true), &["reply r3 duplicate T9"]),
        (
            4,
            preview(4, "More ▉"),
            &["stream set T9 text=\"More ▉\"", "reply r4 preview T9"],
        ),
        (
            5,
            // Op ids are unique, not dense: the duplicate finalize used op2.
            edit(5, "More", true),
            &["deliver op3 messages conv-1 [base turn_complete \"More\"]"],
        ),
    ]);
}
