//! Tests of a turn's lifecycle: a direct streamed turn from its opening to its closing
//! publish, a quiet group turn, cancel and failure, concurrent turns of one group keyed by
//! session, a resynced turn, disconnect, verbosity frozen at turn open and the bound on loose
//! turns.

use canon_dispatch::verbosity::{ConversationType, VerbosityConfig};
use serde_json::{json, Value};

use super::support::*;
use crate::turn::*;

/// turns.md §7.3 E1–E3, E12, E15 and canon-wire.md §8.2: a direct verbose
/// streamed turn.
#[test]
fn direct_verbose_streamed_turn() {
    let mut queued = start_in(1, S1, C1, "m1", ConversationType::Direct, 1);
    queued.disposition_queued = true;
    queued.absorbed_queued_ids = vec!["m0".to_owned()];
    check(vec![
        (1_000, Input::ProcessingStart(queued), &[
            "ack conv-1 m1",
            "ack conv-1 m0",
            "read conv-1",
            "turn thinking T1 q=0 active=m1",
            "reply r1 started T1",
        ]),
        (1_010, typing(true), &["typing conv-1 on thinking"]),
        (1_100, preview(2, "Hello ▉"), &[
            "stream set T1 text=\"Hello ▉\" blocks=[text:T1:1:running]",
            "turn streaming T1 q=0",
            "reply r2 preview T1",
        ]),
        (1_150, edit(3, "Hello world ▉", false), &[
            "stream set T1 text=\"Hello world ▉\" blocks=[text:T1:1:running]",
            "turn streaming T1 q=0",
            "reply r3 preview T1",
        ]),
        (1_200, edit(4, "Hello world", true), &[
            "stream set T1 text=\"Hello world\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r4 preview T1",
        ]),
        (1_200, edit(5, "Hello world", true), &[
            "stream set T1 text=\"Hello world\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r5 preview T1",
        ]),
        (1_300, typing(false), &["typing conv-1 off"]),
        (1_400, complete(6, Outcome::Success), &[
            "deliver op1 messages conv-1 [base turn_complete \"Hello world\" trail=[text:T1:1:completed]]",
        ]),
        (1_500, delivered(1), &[]),
        (2_000, Input::Timeout, &[]),
        (2_250, Input::Timeout, &[
            "stream clear conv-1",
            "turn completed T1 q=0",
            "typing.resume conv-1",
            "reply r6 done",
        ]),
    ]);
}

/// turns.md §6.3 and §11: a quiet group turn retires the stale node, never
/// writes narration, still publishes `streaming`, and its final has no
/// trail.
#[test]
fn quiet_group_turn() {
    let group = "agent:main:canon:group:conv-1:human-1";
    let open = Input::ProcessingStart(start_in(1, group, C1, "m1", ConversationType::Group, 2));
    let mut tool = tool_started("call_1", "search");
    if let Input::Activity { session_key, .. } = &mut tool {
        *session_key = Some(group.to_owned());
    }
    check(vec![
        (
            0,
            open,
            &[
                "read conv-1",
                "turn thinking T2 q=0 active=m1",
                "stream blank T2",
                "reply r1 started T2",
            ],
        ),
        (
            10,
            send_with(2, Some(group), "Pre-tool", json!({"expect_edits": true})),
            &["turn streaming T2 q=0", "reply r2 preview T2"],
        ),
        (20, tool, &["turn tool T2 q=0"]),
        (
            30,
            send_with(3, Some(group), "Answer", json!({"notify": true})),
            &["turn streaming T2 q=0", "reply r3 preview T2"],
        ),
        (
            40,
            Input::ProcessingComplete {
                request: RequestId(4),
                session_key: group.to_owned(),
                conversation_id: C1.to_owned(),
                outcome: Outcome::Success,
                queue_depth: 2,
            },
            &["deliver op1 messages conv-1 [base turn_complete \"Answer\"]"],
        ),
        (50, delivered(1), &[]),
        (
            800,
            Input::Timeout,
            &[
                "stream clear conv-1",
                "turn completed T2 q=2",
                "typing.resume conv-1",
                "reply r4 done",
            ],
        ),
    ]);
}

/// turns.md §7.3 E13/E14 and canon-wire.md §8.5: cancel and failure clear
/// without blanking and send no durable message.
#[test]
fn cancel_and_failure_close_without_a_final() {
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
            edit(2, "Partial", true),
            &[
                "stream set T5 text=\"Partial\" blocks=[text:T5:1:completed]",
                "turn streaming T5 q=0",
                "reply r2 preview T5",
            ],
        ),
        (
            2,
            complete(3, Outcome::Cancelled),
            &[
                "stream clear conv-1",
                "turn interrupted T5 q=0",
                "typing.resume conv-1",
                "reply r3 done",
            ],
        ),
        (
            3,
            start(4, "m2", 6),
            &[
                "read conv-1",
                "turn thinking T6 q=0 active=m2",
                "reply r4 started T6",
            ],
        ),
        (
            4,
            edit(5, "Partial", true),
            &[
                "stream set T6 text=\"Partial\" blocks=[text:T6:1:completed]",
                "turn streaming T6 q=0",
                "reply r5 preview T6",
            ],
        ),
        (
            5,
            complete(6, Outcome::Failure),
            &[
                "stream clear conv-1",
                "turn completed T6 q=0",
                "typing.resume conv-1",
                "reply r6 done",
            ],
        ),
        // A second complete for the same session finds no turn.
        (6, complete(7, Outcome::Success), &["reply r7 done"]),
    ]);
}

/// turns.md §7.1: concurrent turns of different users in one group; a send
/// with no task-local session refuses to guess.
#[test]
fn concurrent_group_turns_are_keyed_by_session() {
    let alice = "agent:main:canon:group:conv-1:alice";
    let bob = "agent:main:canon:group:conv-1:bob";
    check(vec![
        (
            0,
            Input::ProcessingStart(start_in(1, alice, C1, "m1", ConversationType::Group, 1)),
            &[
                "read conv-1",
                "turn thinking T1 q=0 active=m1",
                "stream blank T1",
                "reply r1 started T1",
            ],
        ),
        (
            1,
            Input::ProcessingStart(start_in(2, bob, C1, "m2", ConversationType::Group, 2)),
            &[
                "read conv-1",
                "turn thinking T2 q=0 active=m2",
                "stream blank T2",
                "reply r2 started T2",
            ],
        ),
        (
            2,
            send_with(3, Some(bob), "For Bob", json!({"expect_edits": true})),
            &["turn streaming T2 q=0", "reply r3 preview T2"],
        ),
        // No session and two open turns: treated as turn-less
        // (turns.md §7.6), so a plain send is durable immediately under
        // its own standalone id group (turns.md §4.6).
        (
            3,
            send_with(4, None, "Who?", Value::Null),
            &["deliver op1 send_to conv-1 [base turn_complete \"Who?\"]"],
        ),
        (4, delivered(1), &["reply r4 delivered canon-msg-1"]),
    ]);
}

/// hermes-host.md §19.10 and Q4: a resynced turn keeps its id; completing
/// it with nothing staged closes it as `interrupted`.
#[test]
fn resynced_turn_keeps_its_id() {
    let resync = Input::Resync {
        request: RequestId(1),
        open_turns: vec![ResyncTurn {
            session_key: S1.to_owned(),
            conversation_id: C1.to_owned(),
            turn_id: "hermes-abcabcabcabcabcabcab".to_owned(),
            message_id: Some("m1".to_owned()),
            started_at_ms: 5,
            conversation_type: ConversationType::Direct,
            reply_authority: None,
            durable_sent: false,
        }],
        delivered_turns: Vec::new(),
    };
    check(vec![
        (10, resync, &["reply r1 done"]),
        (
            11,
            complete(2, Outcome::Success),
            &[
                "stream clear conv-1",
                "turn interrupted hermes-abcabcabcabcabcabcab q=0",
                "typing.resume conv-1",
                "reply r2 done",
            ],
        ),
    ]);
}

/// turns.md §7.1: on disconnect all state is dropped without publishes;
/// waiting host requests are answered (a turn-less send as unconfirmed: its
/// delivery may have landed). A turn whose final is still in flight is the
/// exception: the final's outcome, which the daemon's exit grace waits for,
/// publishes its closing state and clears its live node (the fault harness
/// found the turn left working in Canon otherwise).
#[test]
fn disconnect_drops_everything() {
    let machine = check(vec![
        (0, start(1, "m1", 1), &["read conv-1", "turn thinking T1 q=0 active=m1", "reply r1 started T1"]),
        (1, edit(2, "Bye", true), &[
            "stream set T1 text=\"Bye\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r2 preview T1",
        ]),
        (2, complete(3, Outcome::Success), &[
            "deliver op1 messages conv-1 [base turn_complete \"Bye\" trail=[text:T1:1:completed]]",
        ]),
        (3, send_with(4, Some("other"), "cron", Value::Null), &[
            "deliver op2 send_to conv-1 [base turn_complete \"cron\"]",
        ]),
        (4, Input::Disconnect, &[
            "reply r3 done",
            "reply r4 failed \"Canon send timed out unconfirmed; it may have been delivered, so it is not retried\" retryable=false",
        ]),
        // Its node is its own: the clear goes with the closing state, as after a handoff.
        (5, delivered(1), &["stream clear conv-1", "turn completed T1 q=0", "typing.resume conv-1"]),
    ]);
    assert_eq!(machine.next_deadline(), None);
    assert_eq!(machine.open_turn(S1), None);
}

/// Verbosity is resolved at turn open and frozen (turns.md OQ-8);
/// an explicit configuration wins over the conversation type.
#[test]
fn verbosity_is_frozen_per_turn() {
    let config = TurnConfig {
        verbosity: VerbosityConfig::Quiet,
        supports_interleave: true,
    };
    let machine = check_with(
        config,
        vec![
            (
                0,
                start(1, "m1", 1),
                &[
                    "read conv-1",
                    "turn thinking T1 q=0 active=m1",
                    "stream blank T1",
                    "reply r1 started T1",
                ],
            ),
            (
                1,
                preview(2, "quiet"),
                &["turn streaming T1 q=0", "reply r2 preview T1"],
            ),
        ],
    );
    assert_eq!(machine.open_turn(S1), Some(turn_id(1).as_str()));
}

/// Memory bound: at the session cap the oldest idle loose turn makes room.
#[test]
fn loose_turns_are_bounded() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    for i in 0..=MAX_SESSIONS {
        let session = format!("session-{i}");
        let effects = machine.handle(
            send_with(i as u64, Some(&session), "x", json!({"expect_edits": true})),
            i as u64,
        );
        let preview = effects.iter().any(|e| {
            matches!(e, Effect::Reply { reply: HostReply::Send(SendOutcome::Preview { turn_id }), .. } if !turn_id.is_empty())
        });
        assert!(preview, "call {i}: {effects:?}");
    }
    assert_eq!(machine.sessions.len(), MAX_SESSIONS);
    assert!(!machine.sessions.contains_key("session-0"));
}

/// hermes-host.md §19.10 (`delivered_turns`): a turn a dequeue boundary
/// closed, whose final the killed daemon stored (the shim heard
/// `turn.closed`), may never have had its closing state published; the
/// new daemon publishes `completed` under its id beside the follow-up it
/// resumes, and sends nothing else for it.
#[test]
fn a_delivered_turn_handed_over_in_a_resync_is_published_completed() {
    let turn = |id: &str, message: &str| ResyncTurn {
        session_key: S1.to_owned(),
        conversation_id: C1.to_owned(),
        turn_id: id.to_owned(),
        message_id: Some(message.to_owned()),
        started_at_ms: 5,
        conversation_type: ConversationType::Direct,
        reply_authority: None,
        durable_sent: false,
    };
    let resync = Input::Resync {
        request: RequestId(1),
        open_turns: vec![turn("hermes-bbbbbbbbbbbbbbbbbbbb", "m2")],
        delivered_turns: vec![
            turn("hermes-aaaaaaaaaaaaaaaaaaaa", "m1"),
            // The same turn handed over as open too: it is resumed, not closed.
            turn("hermes-bbbbbbbbbbbbbbbbbbbb", "m2"),
        ],
    };
    check(vec![(
        10,
        resync,
        &[
            "turn completed hermes-aaaaaaaaaaaaaaaaaaaa q=0",
            "reply r1 done",
        ],
    )]);
}

/// A turn of [`S1`] whose final Canon stored and which waits out its 750 ms
/// handoff; `then` comes 100 ms after the delivery.
fn stored_final_then(then: Input, expected: &'static [&'static str]) -> Vec<Step> {
    vec![
        (1_000, start(1, "m1", 1), &[
            "read conv-1",
            "turn thinking T1 q=0 active=m1",
            "reply r1 started T1",
        ]),
        (1_100, edit(2, "Done", true), &[
            "stream set T1 text=\"Done\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r2 preview T1",
        ]),
        (1_200, complete(3, Outcome::Success), &[
            "deliver op1 messages conv-1 [base turn_complete \"Done\" trail=[text:T1:1:completed]]",
        ]),
        (1_300, delivered(1), &[]),
        (1_400, then, expected),
    ]
}

/// What a turn waiting out its handoff gets when the waiting is cut short.
const CLOSED_AT_ONCE: &[&str] = &[
    "stream clear conv-1",
    "turn completed T1 q=0",
    "typing.resume conv-1",
    "reply r3 done",
];

/// A daemon exiting (a gateway stop) while a turn whose final Canon stored
/// waits out its 750 ms handoff closes that turn at once, so its closing
/// state still reaches Canon within the exit grace.
#[test]
fn an_exiting_daemon_closes_the_turns_waiting_out_their_handoff() {
    check(stored_final_then(Input::Exiting, CLOSED_AT_ONCE));
}

/// The shim's `adapter.disconnect` at a gateway stop comes right after the
/// last turn completed: a turn whose final Canon stored closes at once
/// (clear, closing publish, the answer to its `turn.complete`), not after
/// the handoff it no longer gets.
#[test]
fn a_disconnect_closes_the_turns_whose_final_is_stored() {
    check(stored_final_then(Input::Disconnect, CLOSED_AT_ONCE));
}
