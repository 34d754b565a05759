//! Tests of queued follow-ups (turns.md §10.3): `turn.accepted` answers the follow-up's turn
//! id at once, and the boundary to the follow-up's turn waits for its first send, a hook, the
//! next dequeue or processing complete; an interrupting dequeue cancels the previous turn, and
//! with no turn running a dequeue opens its turn at once.

use canon_dispatch::verbosity::ConversationType;
use serde_json::{json, Value};

use super::support::*;
use crate::turn::*;

fn dequeue(start: ProcessingStart, interrupted: bool) -> Input {
    Input::QueueDequeued {
        start,
        interrupted,
        turn_id: None,
    }
}

/// The follow-up `m<n>` of [`S1`], dequeued with turn `T<n>`, queue depth 2.
fn follow_up(request: u64, message: &str, n: u8) -> ProcessingStart {
    let mut next = start_in(request, S1, C1, message, ConversationType::Direct, n);
    next.disposition_queued = true;
    next.queue_depth = 2;
    next
}

/// A send of [`S1`] replying to `reply_to` (through `metadata.reply_to_message_id` when
/// `in_metadata`).
fn send_replying(
    request: u64,
    content: &str,
    reply_to: Option<&str>,
    in_metadata: bool,
    mut metadata: Value,
) -> Input {
    if in_metadata {
        metadata["reply_to_message_id"] = json!(reply_to);
    }
    Input::Send(HostSend {
        request: RequestId(request),
        session_key: Some(S1.to_owned()),
        conversation_id: C1.to_owned(),
        content: content.to_owned(),
        reply_to: reply_to.filter(|_| !in_metadata).map(str::to_owned),
        metadata: meta(metadata),
        random: rand(9),
        stop_notice: false,
    })
}

/// The opening of the first turn (`rand(1)`) for `m1` with a streamed, not yet finalized answer.
fn streaming_first_turn() -> Vec<Step> {
    vec![
        (
            0,
            start(1, "m1", 1),
            &[
                "read conv-1",
                "turn thinking T1 q=0 active=m1",
                "reply r1 started T1",
            ],
        ),
        (
            1,
            preview(2, "Answer one ▉"),
            &[
                "stream set T1 text=\"Answer one ▉\" blocks=[text:T1:1:running]",
                "turn streaming T1 q=0",
                "reply r2 preview T1",
            ],
        ),
    ]
}

/// turns.md §10.3 and OQ-18: `turn.accepted` answers the follow-up's id at
/// once (its disposition ack and read mark go out with it, so they are not
/// round trips ahead of the follow-up's first live text), the previous
/// answer's late edits stay in the running turn, and the
/// follow-up's first send (replying to it) closes that turn with its own
/// final and opens the new one under the answered id.
#[test]
fn dequeue_boundary_waits_for_the_follow_ups_first_send() {
    let mut steps = streaming_first_turn();
    steps.extend::<Vec<Step>>(vec![
        (2, dequeue(follow_up(3, "m2", 2), false), &["ack conv-1 m2", "read conv-1", "reply r3 started T2"]),
        // Hermes' stream consumer finishes the previous answer after the dequeue.
        (3, edit(4, "Answer one", true), &[
            "stream set T1 text=\"Answer one\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r4 preview T1",
        ]),
        (4, typing(true), &["typing conv-1 on thinking"]),
        // A send replying to another message is not the follow-up's.
        (5, send_replying(5, "aside", Some("m1"), false, Value::Null), &["reply r5 aux T1"]),
        (6, send_replying(6, "Answer two ▉", Some("m2"), false, json!({"expect_edits": true})), &[
            "deliver op1 messages conv-1 [base turn_complete \"Answer one\" trail=[text:T1:1:completed]]",
            "turn thinking T2 q=2 active=m2",
            "stream set T2 text=\"Answer two ▉\" blocks=[text:T2:1:running]",
            "turn streaming T2 q=2",
            "reply r6 preview T2",
        ]),
        // Stored: the shim hears the boundary-closed turn is done with now,
        // not after the handoff wait.
        (7, delivered(1), &["turn.closed T1 (conv-1)"]),
        // The follow-up already writes the live node: the first turn's handoff
        // clear would wipe it (and the server would salvage the follow-up's
        // answer into a second bubble).
        (757, Input::Timeout, &["turn completed T1 q=2", "typing.resume conv-1"]),
        (758, edit(7, "Answer two", true), &[
            "stream set T2 text=\"Answer two\" blocks=[text:T2:1:completed]",
            "turn streaming T2 q=2",
            "reply r7 preview T2",
        ]),
        (759, complete(8, Outcome::Success), &[
            "deliver op2 messages conv-1 [base turn_complete \"Answer two\" trail=[text:T2:1:completed]]",
        ]),
        (760, delivered(2), &[]),
        // The node is the follow-up's: its own handoff clears it.
        (1510, Input::Timeout, &[
            "stream clear conv-1",
            "turn completed T2 q=0",
            "typing.resume conv-1",
            "reply r8 done",
        ]),
    ]);
    check(steps);
}

/// The follow-up's first send may name its message in
/// `metadata.reply_to_message_id` only (Hermes' stream consumer).
#[test]
fn dequeue_boundary_at_a_send_replying_in_metadata() {
    let mut steps = streaming_first_turn();
    steps.extend::<Vec<Step>>(vec![
        (
            2,
            dequeue(follow_up(3, "m2", 2), false),
            &["ack conv-1 m2", "read conv-1", "reply r3 started T2"],
        ),
        (
            3,
            send_replying(4, "Two ▉", Some("m2"), true, json!({"expect_edits": true})),
            &[
                "stream clear conv-1",
                "turn completed T1 q=2",
                "typing.resume conv-1",
                "turn.closed T1 (conv-1)",
                "turn thinking T2 q=2 active=m2",
                "stream set T2 text=\"Two ▉\" blocks=[text:T2:1:running]",
                "turn streaming T2 q=2",
                "reply r4 preview T2",
            ],
        ),
    ]);
    check(steps);
}

/// Without reply threading, a previewing send that replies to nothing starts
/// the follow-up once the running answer is finalized, and not before.
#[test]
fn dequeue_boundary_at_an_unthreaded_send_after_the_final() {
    let mut steps = streaming_first_turn();
    steps.extend::<Vec<Step>>(vec![
        (2, dequeue(follow_up(3, "m2", 2), false), &["ack conv-1 m2", "read conv-1", "reply r3 started T2"]),
        (3, send_replying(4, "more ▉", None, false, json!({"expect_edits": true})), &[
            "stream set T1 text=\"more ▉\" blocks=[text:T1:1:running]",
            "turn streaming T1 q=0",
            "reply r4 preview T1",
        ]),
        (4, edit(5, "Answer one", true), &[
            "stream set T1 text=\"Answer one\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r5 preview T1",
        ]),
        (5, send_replying(6, "Two ▉", None, false, json!({"expect_edits": true})), &[
            "deliver op1 messages conv-1 [base turn_complete \"Answer one\" trail=[text:T1:1:completed]]",
            "turn thinking T2 q=2 active=m2",
            "stream set T2 text=\"Two ▉\" blocks=[text:T2:1:running]",
            "turn streaming T2 q=2",
            "reply r6 preview T2",
        ]),
    ]);
    check(steps);
}

/// A hook of the session (only the follow-up's run can fire one) performs
/// the boundary, then applies to the new turn.
#[test]
fn dequeue_boundary_at_a_hook() {
    let mut steps = streaming_first_turn();
    steps.extend::<Vec<Step>>(vec![
        (
            2,
            dequeue(follow_up(3, "m2", 2), false),
            &["ack conv-1 m2", "read conv-1", "reply r3 started T2"],
        ),
        (
            3,
            tool_started("call_1", "search"),
            &[
                "stream clear conv-1",
                "turn completed T1 q=2",
                "typing.resume conv-1",
                "turn.closed T1 (conv-1)",
                "turn thinking T2 q=2 active=m2",
                "stream set T2 text=\"\" blocks=[tool:call_1:running]",
                "turn tool T2 q=2",
            ],
        ),
    ]);
    check(steps);
}

/// A second dequeue performs the boundary of the first follow-up, then waits
/// for its own; processing complete performs the last boundary and closes
/// the last follow-up's turn with the outcome.
#[test]
fn dequeue_boundary_at_the_next_dequeue_and_at_complete() {
    let mut steps = streaming_first_turn();
    steps.extend::<Vec<Step>>(vec![
        (
            2,
            dequeue(follow_up(3, "m2", 2), false),
            &["ack conv-1 m2", "read conv-1", "reply r3 started T2"],
        ),
        (
            3,
            dequeue(follow_up(4, "m3", 3), false),
            &[
                "stream clear conv-1",
                "turn completed T1 q=2",
                "typing.resume conv-1",
                "turn.closed T1 (conv-1)",
                "turn thinking T2 q=2 active=m2",
                "ack conv-1 m3",
                "read conv-1",
                "reply r4 started T3",
            ],
        ),
        (
            4,
            complete(5, Outcome::Failure),
            &[
                "stream clear conv-1",
                "turn completed T2 q=2",
                "typing.resume conv-1",
                "turn.closed T2 (conv-1)",
                "turn thinking T3 q=2 active=m3",
                "stream clear conv-1",
                "turn completed T3 q=0",
                "typing.resume conv-1",
                "reply r5 done",
            ],
        ),
    ]);
    let machine = check(steps);
    assert_eq!(machine.open_turn(S1), None);
    assert!(machine.closing.is_empty());
}

/// `interrupted`: this adapter interrupted the running agent for the
/// follow-up, so the previous turn closes as cancelled: nothing of its staged
/// answer is published, even when it was finalized.
#[test]
fn interrupted_dequeue_closes_the_previous_turn_as_cancelled() {
    let mut steps = streaming_first_turn();
    steps.extend::<Vec<Step>>(vec![
        (2, dequeue(follow_up(3, "m2", 2), true), &["ack conv-1 m2", "read conv-1", "reply r3 started T2"]),
        (3, edit(4, "Answer one", true), &[
            "stream set T1 text=\"Answer one\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r4 preview T1",
        ]),
        (4, send_replying(5, "Two ▉", Some("m2"), false, json!({"expect_edits": true})), &[
            "stream clear conv-1",
            "turn interrupted T1 q=2",
            "typing.resume conv-1",
            "turn.closed T1 (conv-1)",
            "turn thinking T2 q=2 active=m2",
            "stream set T2 text=\"Two ▉\" blocks=[text:T2:1:running]",
            "turn streaming T2 q=2",
            "reply r5 preview T2",
        ]),
        (5, edit(6, "Two", true), &[
            "stream set T2 text=\"Two\" blocks=[text:T2:1:completed]",
            "turn streaming T2 q=2",
            "reply r6 preview T2",
        ]),
        (6, complete(7, Outcome::Success), &[
            "deliver op1 messages conv-1 [base turn_complete \"Two\" trail=[text:T2:1:completed]]",
        ]),
    ]);
    check(steps);
}

/// With no lifecycle turn running in the session, a dequeue opens its turn
/// at once.
#[test]
fn dequeue_without_a_running_turn_opens_at_once() {
    check(vec![(
        0,
        dequeue(follow_up(1, "m2", 2), true),
        &[
            "ack conv-1 m2",
            "read conv-1",
            "turn thinking T2 q=2 active=m2",
            "reply r1 started T2",
        ],
    )]);
}

/// hermes-host.md §19.10: a dequeue sent again after a daemon respawn carries
/// the id the daemon before answered; the follow-up keeps it (Canon may show
/// that turn already), and an id of another shape is not taken.
#[test]
fn a_dequeue_sent_again_after_a_respawn_keeps_its_turn_id() {
    let again = |request: u64, id: &str| Input::QueueDequeued {
        start: follow_up(request, "m2", 2),
        interrupted: false,
        turn_id: Some(id.to_owned()),
    };
    let mut machine = TurnMachine::new(TurnConfig::default());
    let kept = machine.handle(again(1, "hermes-0123456789abcdef0123"), 1);
    assert!(kept.iter().any(|e| matches!(e, Effect::PublishTurn(p)
        if p.turn_id.as_deref() == Some("hermes-0123456789abcdef0123"))));
    let mut machine = TurnMachine::new(TurnConfig::default());
    let refused = machine.handle(again(1, "hermes-NOT-OURS"), 1);
    assert!(refused.iter().all(|e| !matches!(e, Effect::PublishTurn(p)
        if p.turn_id.as_deref() == Some("hermes-NOT-OURS"))));
    assert!(refused.iter().any(|e| matches!(e, Effect::PublishTurn(p)
        if p.turn_id.as_deref() == Some(turn_id(2).as_str()))));
}

/// A gateway stop while the follow-up's final is still on its way (fault harness seed 1): the
/// first turn's final is stored and it waits out its handoff; the follow-up's answer lives in
/// the node. The stop closes the first turn at once, but its clear must not wipe the
/// follow-up's live answer: Canon would salvage that into a `progress` copy beside the
/// follow-up's own final a moment later. The follow-up, stored after the stop, clears its node
/// itself then (its final is in Canon, so nothing is salvaged).
#[test]
fn a_gateway_stop_does_not_clear_a_follow_ups_answer_whose_final_is_in_flight() {
    let mut steps = streaming_first_turn();
    steps.extend::<Vec<Step>>(vec![
        (2, dequeue(follow_up(3, "m2", 2), false), &["ack conv-1 m2", "read conv-1", "reply r3 started T2"]),
        (3, edit(4, "Answer one", true), &[
            "stream set T1 text=\"Answer one\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r4 preview T1",
        ]),
        (4, send_replying(5, "Answer two ▉", Some("m2"), false, json!({"expect_edits": true})), &[
            "deliver op1 messages conv-1 [base turn_complete \"Answer one\" trail=[text:T1:1:completed]]",
            "turn thinking T2 q=2 active=m2",
            "stream set T2 text=\"Answer two ▉\" blocks=[text:T2:1:running]",
            "turn streaming T2 q=2",
            "reply r5 preview T2",
        ]),
        (5, delivered(1), &["turn.closed T1 (conv-1)"]),
        (6, edit(6, "Answer two", true), &[
            "stream set T2 text=\"Answer two\" blocks=[text:T2:1:completed]",
            "turn streaming T2 q=2",
            "reply r6 preview T2",
        ]),
        (7, complete(7, Outcome::Success), &[
            "deliver op2 messages conv-1 [base turn_complete \"Answer two\" trail=[text:T2:1:completed]]",
        ]),
        // The stop: the first turn closes now, without touching the follow-up's node; the
        // follow-up's completion is answered, its final still in flight.
        (8, Input::Disconnect, &[
            "turn completed T1 q=2",
            "typing.resume conv-1",
            "reply r7 done",
        ]),
        (9, delivered(2), &[
            "stream clear conv-1",
            "turn completed T2 q=0",
            "typing.resume conv-1",
        ]),
    ]);
    check(steps);
}
