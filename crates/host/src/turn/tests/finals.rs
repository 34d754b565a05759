//! Tests of a lifecycle turn's durable final: its ids, metadata, reply authority and ordered
//! parts, the staging rules that decide its text, the bounded gateway metadata it carries, and
//! the sends that never become one (no finalized answer, a reply to a Canon control event).

use canon_chunking::ids::{stable_final_message_id, Ordinal};
use canon_dispatch::verbosity::ConversationType;
use serde_json::{json, Value};

use super::support::*;
use crate::turn::*;

/// The exact final of a streamed turn: id, metadata order, reply authority
/// and `replyTo` (turns.md §3.6, §4.2, §7.5).
#[test]
fn final_part_carries_ids_metadata_and_authority() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    let mut opening = start_in(1, S1, C1, "m1", ConversationType::Group, 1);
    opening.reply_authority = Some(ReplyAuthority {
        schema: "canon.agent-reply-authority.v1".to_owned(),
        source_message_id: "m1".to_owned(),
        token: "t".repeat(40),
        expires_at: "2026-12-01T00:00:00Z".to_owned(),
    });
    machine.handle(Input::ProcessingStart(opening), 0);
    machine.handle(
        send_with(
            2,
            Some(S1),
            "Done.",
            json!({"notify": true, "thread_id": "th", "canon_options": {"mentions": ["u2"], "messageId": "evil", "replyAuthority": {}}}),
        ),
        1,
    );
    let effects = machine.handle(complete(3, Outcome::Success), 2);
    let Some(Effect::Deliver(delivery)) = effects.first() else {
        panic!("expected a delivery, got {effects:?}");
    };
    let id = stable_final_message_id(C1, Some(&turn_id(1)), Ordinal::FIRST);
    assert_eq!(delivery.parts.len(), 1);
    let part = &delivery.parts[0];
    assert_eq!(part.message_id, id);
    assert_eq!(part.reply_to.as_deref(), Some("m1"));
    assert_eq!(
        Value::Object(part.metadata.clone()),
        json!({"hermes": {"thread_id": "th"}, "turnSemantics": "turn_complete", "turnComplete": true, "turnId": turn_id(1)})
    );
    assert_eq!(
        Value::Object(part.options.clone()),
        json!({"mentions": ["u2"]})
    );
    let authority = part.reply_authority.as_ref().map(|a| a.token.len());
    assert_eq!(authority, Some(40));
    assert!(!format!("{effects:?}").contains(&"t".repeat(40)));
}

/// The session's durable inbox closes the turn it journaled for the turn's messages only
/// when an answer to them is stored: the machine says so once the final's delivery succeeded
/// (naming the message that started the turn), and never for a final that failed.
#[test]
fn a_stored_final_is_reported_with_the_message_it_answers() {
    let reported = |effects: &[Effect]| -> Vec<String> {
        effects
            .iter()
            .filter(|e| matches!(e, Effect::FinalStored { .. }))
            .map(describe)
            .collect()
    };
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m1", 1), 0);
    machine.handle(edit(2, "Done.", true), 1);
    let closing = machine.handle(complete(3, Outcome::Success), 2);
    assert!(reported(&closing).is_empty(), "not stored yet: {closing:?}");
    let op = delivery_op(&closing);
    let stored = machine.handle(delivered(op), 3);
    assert_eq!(reported(&stored), ["final.stored (conv-1) m1"]);

    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m2", 2), 0);
    machine.handle(edit(2, "Done.", true), 1);
    let closing = machine.handle(complete(3, Outcome::Success), 2);
    let op = delivery_op(&closing);
    let lost = machine.handle(failed(op, FailureClass::Rejected), 3);
    assert!(
        reported(&lost).is_empty(),
        "a failed final is no answer: {lost:?}"
    );
}

/// The operation of the one delivery among `effects`.
fn delivery_op(effects: &[Effect]) -> u64 {
    let ops: Vec<u64> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deliver(d) => Some(d.op.0),
            _ => None,
        })
        .collect();
    assert_eq!(ops.len(), 1, "one delivery: {effects:?}");
    ops[0]
}

/// turns.md §3.6, §7.9: a 20 KB answer becomes ordered parts, only the last
/// one `turn_complete`, in one operation.
#[test]
fn twenty_kilobyte_answer_is_one_turn_complete() {
    let answer = "lorem ipsum dolor sit amet ".repeat(760);
    assert!(answer.len() > 20_000);
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m1", 3), 0);
    machine.handle(edit(2, &answer, true), 1);
    let effects = machine.handle(complete(3, Outcome::Success), 2);
    let delivers: Vec<&Delivery> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deliver(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(delivers.len(), 1);
    let parts = &delivers[0].parts;
    assert_eq!(parts.len(), 6);
    let base = stable_final_message_id(C1, Some(&turn_id(3)), Ordinal::FIRST).unwrap_or_default();
    for (index, part) in parts.iter().enumerate() {
        let last = index + 1 == parts.len();
        assert!(part.text.len() <= 3_800);
        assert_eq!(part.message_id, Some(format!("{base}-part-{}", index + 1)));
        assert_eq!(
            part.metadata["turnSemantics"],
            if last { "turn_complete" } else { "progress" }
        );
        assert_eq!(part.metadata["messageChunk"]["index"], index + 1);
        assert_eq!(part.metadata["messageChunk"]["groupId"], base.as_str());
    }
    // The answer's own speech block is stripped from a chunked final (turns.md §3.7).
    assert!(!parts[5].metadata.contains_key("turnTrail"));
    // A failed flush still closes the turn exactly once.
    let after = machine.handle(failed(1, FailureClass::Ambiguous), 3);
    let lines: Vec<String> = after.iter().map(describe).collect();
    assert_eq!(
        lines,
        [
            "stream clear conv-1",
            "turn completed T3 q=0",
            "typing.resume conv-1",
            "reply r3 done"
        ]
    );
    assert_eq!(machine.next_deadline(), None);
}

/// turns.md §7.5 step 2: no finalized, non-blank candidate → no
/// `turn_complete`, only the clear.
#[test]
fn turn_without_a_finalized_answer_sends_nothing_durable() {
    check(vec![
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
            preview(2, "Thinking out loud"),
            &[
                "stream set T1 text=\"Thinking out loud\" blocks=[text:T1:1:running]",
                "turn streaming T1 q=0",
                "reply r2 preview T1",
            ],
        ),
        (
            2,
            complete(3, Outcome::Success),
            &[
                "stream clear conv-1",
                "turn completed T1 q=0",
                "typing.resume conv-1",
                "reply r3 done",
            ],
        ),
    ]);
}

/// turns.md §7.3 E4 and §7.4: auxiliary sends are suppressed; an appended
/// final keeps the finished segment, an identical re-finalize does not
/// duplicate it.
#[test]
fn staging_rules() {
    check(vec![
        (0, start(1, "m1", 1), &["read conv-1", "turn thinking T1 q=0 active=m1", "reply r1 started T1"]),
        (1, send_with(2, Some(S1), "⚡ working", Value::Null), &["reply r2 aux T1"]),
        (2, edit(3, "First", true), &[
            "stream set T1 text=\"First\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r3 preview T1",
        ]),
        (3, edit(4, "First", true), &[
            "stream set T1 text=\"First\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r4 preview T1",
        ]),
        (4, send_with(5, Some(S1), "Second", json!({"notify": true})), &[
            "stream set T1 text=\"First\\nSecond\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r5 preview T1",
        ]),
        (5, complete(6, Outcome::Success), &[
            "deliver op1 messages conv-1 [base turn_complete \"First\\nSecond\" trail=[text:T1:1:completed]]",
        ]),
    ]);
}

/// Hermes re-sends an answer whose streamed delivery it could not confirm (a preview write
/// over its budget) as a whole send, without the stream's leading blank lines: the final
/// carries the answer once.
#[test]
fn a_resend_of_the_streamed_answer_is_not_a_second_segment() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m1", 1), 0);
    machine.handle(edit(2, "\n\nApproval asked, waiting.", true), 1);
    machine.handle(
        send_with(
            3,
            Some(S1),
            "Approval asked, waiting.",
            json!({"notify": true}),
        ),
        2,
    );
    let effects = machine.handle(complete(4, Outcome::Success), 3);
    let Some(Effect::Deliver(delivery)) = effects.first() else {
        panic!("expected a delivery: {effects:?}");
    };
    let texts: Vec<&str> = delivery.parts.iter().map(|p| p.text.as_str()).collect();
    assert_eq!(texts, ["Approval asked, waiting."]);
}

/// canon-wire.md §6.5 and Q10: gateway metadata travels as scalar
/// `metadata.hermes`, and is dropped before the trail when the metadata
/// would exceed 4,096 UTF-16 units.
#[test]
fn gateway_metadata_passthrough_is_bounded() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m1", 1), 0);
    machine.handle(tool_started("call_1", "search"), 1);
    let big = "x".repeat(3_900);
    machine.handle(
        send_with(
            2,
            Some(S1),
            "Answer",
            json!({"notify": true, "thread_id": big, "nested": {"a": 1}}),
        ),
        2,
    );
    let effects = machine.handle(complete(3, Outcome::Success), 3);
    let Some(Effect::Deliver(delivery)) = effects.first() else {
        panic!("expected a delivery: {effects:?}");
    };
    let metadata = &delivery.parts[0].metadata;
    assert!(!metadata.contains_key("hermes"), "{metadata:?}");
    assert!(metadata.contains_key("turnTrail"));

    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m1", 1), 0);
    machine.handle(
        send_with(
            2,
            Some(S1),
            "Answer",
            json!({"notify": true, "thread_id": "th", "nested": {"a": 1}}),
        ),
        1,
    );
    let effects = machine.handle(complete(3, Outcome::Success), 2);
    let Some(Effect::Deliver(delivery)) = effects.first() else {
        panic!("expected a delivery: {effects:?}");
    };
    assert_eq!(
        delivery.parts[0].metadata["hermes"],
        json!({"thread_id": "th"})
    );
}

/// Hermes' reply to a Canon stop signal (a `notify` send answering the
/// synthetic `canon-control:` event) is acknowledged and never becomes the
/// stopped turn's `turn_complete`.
#[test]
fn reply_to_a_control_event_is_never_written() {
    let stopped = Input::Send(HostSend {
        request: RequestId(3),
        session_key: Some(S1.to_owned()),
        conversation_id: C1.to_owned(),
        content: "⚡ Stopped. You can continue this session.".to_owned(),
        reply_to: Some("canon-control:interrupt:1796010678.17".to_owned()),
        metadata: meta(json!({"notify": true})),
        random: rand(9),
        stop_notice: false,
    });
    let after_turn = Input::Send(HostSend {
        request: RequestId(5),
        session_key: Some(S1.to_owned()),
        conversation_id: C1.to_owned(),
        content: "✨ Started a new session.".to_owned(),
        reply_to: None,
        metadata: meta(
            json!({"notify": true, "reply_to_message_id": "canon-control:new_session:1.0"}),
        ),
        random: rand(10),
        stop_notice: false,
    });
    check(vec![
        (
            0,
            start(1, "m1", 5),
            &[
                "read conv-1",
                "turn thinking T5 q=0 active=m1",
                "reply r1 started T5",
            ],
        ),
        (
            1,
            preview(2, "Partial ▉"),
            &[
                "stream set T5 text=\"Partial ▉\" blocks=[text:T5:1:running]",
                "turn streaming T5 q=0",
                "reply r2 preview T5",
            ],
        ),
        (2, stopped, &["reply r3 aux T5"]),
        (
            3,
            complete(4, Outcome::Cancelled),
            &[
                "stream clear conv-1",
                "turn interrupted T5 q=0",
                "typing.resume conv-1",
                "reply r4 done",
            ],
        ),
        (4, after_turn, &["reply r5 aux "]),
    ]);
}

/// Hermes answers a Canon stop and only then cancels the running task; when
/// the interrupted agent returns first, Hermes reports success. The stopped
/// turn still closes `interrupted` and its staged text is never posted. A
/// `new_session` reply does not count as a stop.
#[test]
fn a_stopped_turn_closes_interrupted_even_when_hermes_reports_success() {
    let stop_reply = |request: u64, signal: &str| {
        Input::Send(HostSend {
            request: RequestId(request),
            session_key: Some(S1.to_owned()),
            conversation_id: C1.to_owned(),
            content: "⚡ Stopped.".to_owned(),
            reply_to: Some(format!("canon-control:{signal}:1796010678.17")),
            metadata: meta(json!({"notify": true})),
            random: rand(9),
            stop_notice: false,
        })
    };
    check(vec![
        (
            0,
            start(1, "m1", 5),
            &[
                "read conv-1",
                "turn thinking T5 q=0 active=m1",
                "reply r1 started T5",
            ],
        ),
        (
            1,
            preview(2, "Partial ▉"),
            &[
                "stream set T5 text=\"Partial ▉\" blocks=[text:T5:1:running]",
                "turn streaming T5 q=0",
                "reply r2 preview T5",
            ],
        ),
        (2, stop_reply(3, "stop_and_drop"), &["reply r3 aux T5"]),
        (
            3,
            complete(4, Outcome::Success),
            &[
                "stream clear conv-1",
                "turn interrupted T5 q=0",
                "typing.resume conv-1",
                "reply r4 done",
            ],
        ),
    ]);
    check(vec![
        (
            0,
            start(1, "m1", 6),
            &[
                "read conv-1",
                "turn thinking T6 q=0 active=m1",
                "reply r1 started T6",
            ],
        ),
        (
            1,
            send_with(2, Some(S1), "Answer", json!({"notify": true})),
            &[
                "stream set T6 text=\"Answer\" blocks=[text:T6:1:completed]",
                "turn streaming T6 q=0",
                "reply r2 preview T6",
            ],
        ),
        (2, stop_reply(3, "new_session"), &["reply r3 aux T6"]),
        (
            3,
            complete(4, Outcome::Success),
            &["deliver op1 messages conv-1 [base turn_complete \"Answer\" trail=[text:T6:1:completed]]"],
        ),
    ]);
}
