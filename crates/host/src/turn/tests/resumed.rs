//! Tests of a turn resumed after a daemon restart (hermes-host.md §19.10): its ledger starts
//! again at ordinal 1, so a durable operation may reserve an ordinal the daemon before the
//! restart already used. Canon then answers 409 `MESSAGE_ID_EXISTS`, and the operation moves
//! on to the next ordinal, whole and under that ordinal's ids, at most
//! [`MAX_RESUMED_ORDINAL_SKIPS`] times (turns.md §4.4 "Resumed turn"). In a turn that was not
//! resumed the conflict stays a failure that keeps its reservation.

use canon_chunking::ids::{stable_final_message_id, Ordinal};
use canon_dispatch::verbosity::ConversationType;
use serde_json::{json, Map, Value};

use super::support::*;
use crate::turn::*;

/// The resync of the daemon started after a restart: the turn `rand(4)` of [`S1`] in [`C1`],
/// still open in the shim.
fn resync(request: u64) -> Input {
    Input::Resync {
        request: RequestId(request),
        open_turns: vec![ResyncTurn {
            session_key: S1.to_owned(),
            conversation_id: C1.to_owned(),
            turn_id: turn_id(4),
            message_id: Some("m1".to_owned()),
            started_at_ms: 0,
            conversation_type: ConversationType::Direct,
            reply_authority: None,
            // The daemon before the restart made a durable send of the turn, which took an
            // ordinal: the premise of every skip below.
            durable_sent: true,
        }],
        delivered_turns: Vec::new(),
    }
}

/// Canon's 409 `MESSAGE_ID_EXISTS` for delivery `op`, as the shell classifies it.
fn conflict(op: u64) -> Input {
    Input::DeliveryOutcome {
        op: OpId(op),
        result: Err(DeliveryFailure {
            class: FailureClass::IdConflict,
            error: "message id already names a different message".to_owned(),
            retryable: false,
        }),
    }
}

/// `adapter.send_media` of an image in [`S1`] with this caption.
fn image(request: u64, caption: &str) -> Input {
    Input::Media(HostMedia {
        request: RequestId(request),
        session_key: Some(S1.to_owned()),
        conversation_id: C1.to_owned(),
        caption: caption.to_owned(),
        reply_to: None,
        metadata: Map::new(),
        media: image_payload(),
        random: rand(7),
    })
}

/// The base id of ordinal `n` of the turn `rand(4)`.
fn base(n: u64) -> String {
    let ordinal = Ordinal::new(n).expect("an ordinal ≥ 1");
    stable_final_message_id(C1, Some(&turn_id(4)), ordinal).expect("a turn id")
}

/// The client ids of a delivery's parts.
fn ids(delivery: &Delivery) -> Vec<String> {
    delivery
        .parts
        .iter()
        .map(|p| p.message_id.clone().unwrap_or_default())
        .collect()
}

/// A delivery's parts without their ids and `messageChunk.groupId`: what Canon stores.
fn payloads(delivery: &Delivery) -> Vec<(String, Value, Map<String, Value>)> {
    delivery
        .parts
        .iter()
        .map(|p| {
            let mut metadata = Value::Object(p.metadata.clone());
            if let Some(chunk) = metadata.get_mut("messageChunk") {
                chunk["groupId"] = Value::Null;
            }
            (p.text.clone(), metadata, p.options.clone())
        })
        .collect()
}

/// Stages `text` as the finalized answer of [`S1`], then completes the turn; the flush.
fn finish(machine: &mut TurnMachine, text: &str, now: u64) -> Delivery {
    machine.handle(preview(20, text), now);
    machine.handle(edit(21, text, true), now + 1);
    only_delivery(
        &machine
            .handle(complete(22, Outcome::Success), now + 2)
            .into_iter()
            .filter(|e| matches!(e, Effect::Deliver(_)))
            .collect::<Vec<_>>(),
    )
}

/// Media sent in a resumed turn whose first ordinal the daemon before the restart had used
/// gets 409 `MESSAGE_ID_EXISTS`; it is sent again, same payload, under ordinal 2, and only
/// that answers the host. The final then takes ordinal 3.
#[test]
fn resumed_turn_media_moves_past_an_ordinal_taken_before_the_restart() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    check_steps(&mut machine, vec![(10, resync(1), &["reply r1 done"])]);
    let first = only_delivery(&machine.handle(image(2, "A cat"), 11));
    assert_eq!(ids(&first), [base(1)]);
    let again = only_delivery(&machine.handle(conflict(first.op.0), 12));
    assert_eq!(again.op, first.op, "the same operation, so the same waiter");
    assert_eq!(ids(&again), [base(2)]);
    assert_eq!(payloads(&again), payloads(&first));
    assert_eq!(again.parts[0].attachments, image_payload().attachments);
    check_steps(
        &mut machine,
        vec![(
            13,
            delivered(first.op.0),
            &["reply r2 delivered canon-msg-1"],
        )],
    );
    let flush = finish(&mut machine, "Here is your cat", 14);
    assert_eq!(ids(&flush), [base(3)]);
}

/// The final of a resumed turn whose ordinal the daemon before the restart had used (its
/// media) gets 409 `MESSAGE_ID_EXISTS`; before, the turn closed and the answer was lost
/// ("final delivery failed"). Now the flush goes again under ordinal 2, and the turn closes
/// only after it settled, as `completed`.
#[test]
fn resumed_turn_final_moves_past_an_ordinal_taken_before_the_restart() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(resync(1), 10);
    let first = finish(&mut machine, "The answer", 11);
    assert_eq!(ids(&first), [base(1)]);
    let effects = machine.handle(conflict(first.op.0), 20);
    let again = only_delivery(&effects);
    assert_eq!(again.op, first.op);
    assert_eq!(ids(&again), [base(2)]);
    assert_eq!(payloads(&again), payloads(&first));
    assert_eq!(again.parts[0].metadata["turnSemantics"], "turn_complete");
    assert_eq!(again.parts[0].metadata["turnId"], json!(turn_id(4)));
    check_steps(
        &mut machine,
        vec![
            (21, delivered(first.op.0), &[]),
            (
                771,
                Input::Timeout,
                &[
                    "stream clear conv-1",
                    "turn completed T4 q=0",
                    "typing.resume conv-1",
                    "reply r22 done",
                ],
            ),
        ],
    );
    // Settled under ordinal 2: a media send after it cannot reuse it.
    assert_eq!(machine.next_deadline(), None);
}

/// A resumed turn with a long answer: a conflict on any part moves the whole plan to
/// the next ordinal, every part under its ids (`-part-1` … `-part-N`, in order, with
/// `messageChunk` counting N and naming the new group), one `turn_complete` last; a second
/// conflict moves it again.
#[test]
fn resumed_multi_part_final_moves_whole_to_the_next_ordinal() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(resync(1), 10);
    let text = "word ".repeat(1_600);
    let first = finish(&mut machine, text.trim_end(), 11);
    let count = first.parts.len();
    assert!(count >= 3, "{count} parts");
    let part_ids = |n: u64| -> Vec<String> {
        (1..=count)
            .map(|i| format!("{}-part-{i}", base(n)))
            .collect()
    };
    assert_eq!(ids(&first), part_ids(1));
    let check_plan = |delivery: &Delivery, n: u64| {
        assert_eq!(ids(delivery), part_ids(n));
        assert_eq!(payloads(delivery), payloads(&first));
        for (i, part) in delivery.parts.iter().enumerate() {
            let chunk = &part.metadata["messageChunk"];
            assert_eq!(chunk["index"], json!(i + 1));
            assert_eq!(chunk["count"], json!(count));
            assert_eq!(chunk["groupId"], json!(base(n)));
            let semantics = if i + 1 == count {
                "turn_complete"
            } else {
                "progress"
            };
            assert_eq!(part.metadata["turnSemantics"], semantics, "part {}", i + 1);
        }
    };
    let second = only_delivery(&machine.handle(conflict(first.op.0), 20));
    check_plan(&second, 2);
    let third = only_delivery(&machine.handle(conflict(first.op.0), 21));
    check_plan(&third, 3);
    machine.handle(delivered(first.op.0), 22);
    let closed: Vec<String> = machine
        .handle(Input::Timeout, 772)
        .iter()
        .map(describe)
        .collect();
    assert!(
        closed.contains(&"turn completed T4 q=0".to_owned()),
        "{closed:?}"
    );
}

/// The media of a resumed turn still in flight when the turn completes moves past the final's
/// reserved ordinal, and the final then past the media's, so the two never share an id.
#[test]
fn resumed_media_and_final_never_take_the_same_ordinal() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(resync(1), 10);
    let media = only_delivery(&machine.handle(image(2, "A cat"), 11));
    assert_eq!(ids(&media), [base(1)]);
    let flush = finish(&mut machine, "Done", 12);
    assert_eq!(ids(&flush), [base(2)]);
    let media_again = only_delivery(&machine.handle(conflict(media.op.0), 20));
    assert_eq!(ids(&media_again), [base(3)]);
    let flush_again = only_delivery(&machine.handle(conflict(flush.op.0), 21));
    assert_eq!(ids(&flush_again), [base(4)]);
}

/// A 409 `MESSAGE_ID_EXISTS` in a turn that was not resumed is what it always was: the final
/// is not sent again and the turn closes (as for any kept reservation at close, turns.md §4.4
/// "Turn close"); media answers the failure. A resumed turn's ambiguous failure (a 409
/// without the code among them) does not move on either.
#[test]
fn an_id_conflict_outside_a_resumed_turn_fails_as_before() {
    const CLOSES: &[&str] = &[
        "stream clear conv-1",
        "turn completed T4 q=0",
        "typing.resume conv-1",
        "reply r22 done",
    ];
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m1", 4), 0);
    let media = only_delivery(&machine.handle(image(2, "A cat"), 1));
    check_steps(
        &mut machine,
        vec![(
            2,
            conflict(media.op.0),
            &["reply r2 failed \"message id already names a different message\" retryable=false"],
        )],
    );
    let flush = finish(&mut machine, "The answer", 3);
    assert_eq!(ids(&flush), [base(2)]);
    check_steps(&mut machine, vec![(10, conflict(flush.op.0), CLOSES)]);

    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(resync(1), 10);
    let flush = finish(&mut machine, "The answer", 11);
    check_steps(
        &mut machine,
        vec![(20, failed(flush.op.0, FailureClass::Ambiguous), CLOSES)],
    );
}

/// The skips are bounded: after [`MAX_RESUMED_ORDINAL_SKIPS`] ordinals moved past, the next
/// conflict fails the final and the turn closes.
#[test]
fn a_resumed_turn_gives_up_after_the_skip_bound() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(resync(1), 10);
    let flush = finish(&mut machine, "The answer", 11);
    for skip in 1..=u64::from(MAX_RESUMED_ORDINAL_SKIPS) {
        let again = only_delivery(&machine.handle(conflict(flush.op.0), 20 + skip));
        assert_eq!(ids(&again), [base(skip + 1)]);
    }
    check_steps(
        &mut machine,
        vec![(
            100,
            conflict(flush.op.0),
            &[
                "stream clear conv-1",
                "turn completed T4 q=0",
                "typing.resume conv-1",
                "reply r22 done",
            ],
        )],
    );
}

/// A turn the daemon before the restart made no durable send of (the shim says so in the
/// resync): a 409 `MESSAGE_ID_EXISTS` on its final's id means that daemon stored this final
/// (its metadata came from the stream's first send, which the replay may not rebuild), so the
/// final counts as delivered and is not stored again under the next ordinal.
#[test]
fn a_resumed_turn_without_durable_sends_takes_a_conflict_as_its_own_stored_final() {
    let mut resync = resync(1);
    if let Input::Resync { open_turns, .. } = &mut resync {
        open_turns[0].durable_sent = false;
    }
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(resync, 10);
    let first = finish(&mut machine, "The answer", 11);
    assert_eq!(ids(&first), [base(1)]);
    check_steps(
        &mut machine,
        vec![
            (20, conflict(first.op.0), &[]),
            (
                770,
                Input::Timeout,
                &[
                    "stream clear conv-1",
                    "turn completed T4 q=0",
                    "typing.resume conv-1",
                    "reply r22 done",
                ],
            ),
        ],
    );
}

/// The shim re-sends a resynced turn's first send and last edit so that a final the daemon
/// before the restart already stored is sent again byte for byte (Canon then answers with the
/// stored message, not 409): the resumed turn's final carries the same text, metadata (the
/// first send's Hermes `reply_to_message_id` included) and options as the final of a turn that
/// never restarted.
#[test]
fn a_resumed_turn_whose_stream_is_replayed_sends_the_final_it_would_have_sent() {
    let mut fresh = TurnMachine::new(TurnConfig::default());
    fresh.handle(start(1, "m1", 4), 10);
    let a = finish(&mut fresh, "The answer", 11);
    let mut resumed = TurnMachine::new(TurnConfig::default());
    resumed.handle(resync(1), 10);
    let b = finish(&mut resumed, "The answer", 11);
    assert_eq!(payloads(&a), payloads(&b));
}
