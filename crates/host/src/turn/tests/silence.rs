//! Tests of `no_reply` (turns.md §8): its refusals, the silenced turn and its blanked live
//! node, a steer lifting the silence, the per-turn query the driver makes, and the tool result
//! strings (runtime-control.md §2).

use serde_json::json;

use super::support::*;
use crate::turn::*;

/// turns.md §8: `no_reply` refusals, silence, precedence over the final,
/// the live-node blanking, and a steer lifting the silence.
#[test]
fn no_reply_silences_the_turn() {
    check(vec![
        (0, no_reply(1, None, true), &[
            "reply r1 no_reply refused \"No open Canon turn to silence. Reply normally, or simply say nothing further.\"",
        ]),
        (1, start(2, "m1", 4), &["read conv-1", "turn thinking T4 q=0 active=m1", "reply r2 started T4"]),
        (2, no_reply(3, None, false), &[
            "reply r3 no_reply refused \"no_reply applies to the Canon turn that is running, and this turn is not one. Nothing was silenced.\"",
        ]),
        (3, no_reply(4, Some(" canon:conv-2 "), true), &[
            "reply r4 no_reply refused \"no_reply silences the turn that is running; it cannot target another conversation (this turn is in conv-1).\"",
        ]),
        (4, no_reply(5, Some("canon:conv-1"), true), &[
            "no_reply record conv-1 m1 given",
            "reply r5 no_reply ack conv-1",
        ]),
        (5, edit(6, "I'd say…", true), &[
            "stream set T4 text=\"I'd say…\" blocks=[text:T4:1:completed]",
            "turn streaming T4 q=0",
            "reply r6 preview T4",
        ]),
        (6, complete(7, Outcome::Success), &[
            "stream blank T4",
            "stream clear conv-1",
            "turn completed T4 q=0",
            "typing.resume conv-1",
            "reply r7 done",
        ]),
    ]);
}

/// turns.md §8.2, E11: an accepted interleave steer lifts the silence.
#[test]
fn steer_lifts_silence() {
    check(vec![
        (0, start(1, "m1", 4), &["read conv-1", "turn thinking T4 q=0 active=m1", "reply r1 started T4"]),
        (1, no_reply(2, None, true), &["no_reply record conv-1 m1 given", "reply r2 no_reply ack conv-1"]),
        (2, Input::SteerAccepted { session_key: Some(S1.to_owned()), conversation_id: C1.to_owned() }, &[]),
        (3, send_with(3, Some(S1), "OK then", json!({"notify": true})), &[
            "stream set T4 text=\"OK then\" blocks=[text:T4:1:completed]",
            "turn streaming T4 q=0",
            "reply r3 preview T4",
        ]),
        (4, complete(4, Outcome::Success), &[
            "deliver op1 messages conv-1 [base turn_complete \"OK then\" trail=[text:T4:1:completed]]",
        ]),
    ]);
}

/// Support for turns.md OQ-9: the driver can ask whether a call's turn is silenced.
#[test]
fn silence_is_queryable_per_turn() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m1", 1), 0);
    assert!(!machine.is_silenced(Some(S1), C1));
    machine.handle(no_reply(2, None, true), 1);
    assert!(machine.is_silenced(Some(S1), C1));
    assert!(machine.is_silenced(None, C1));
    assert!(!machine.is_silenced(Some(S1), "conv-2"));
    machine.handle(complete(3, Outcome::Success), 2);
    assert!(!machine.is_silenced(Some(S1), C1));
}

/// runtime-control.md §2 and §4.10: the tool result strings.
#[test]
fn no_reply_tool_results() {
    let ack = NoReplyOutcome::Acknowledged {
        conversation_id: C1.to_owned(),
    };
    assert_eq!(
        ack.tool_result(),
        r#"{"success":true,"status":"acknowledged","conversationId":"conv-1","note":"Acknowledged — nothing was posted to the conversation."}"#
    );
    let refused = NoReplyOutcome::Refused {
        error: NO_REPLY_NO_TURN.to_owned(),
    };
    assert_eq!(
        refused.tool_result(),
        r#"{"error":"No open Canon turn to silence. Reply normally, or simply say nothing further.","success":false}"#
    );
}
