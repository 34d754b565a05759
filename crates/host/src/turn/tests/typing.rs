//! Tests of the typing indicator: typing-on calls for one chat are coalesced, and a turn
//! waiting for input pauses typing (and its heartbeat) until the input is resolved.

use super::support::*;
use crate::turn::*;

/// turns.md §7.7–7.8, E7–E9 and OQ-3/OQ-5: `waiting_input` pauses typing
/// and has no heartbeat; any resolution publishes `tool` and resumes.
#[test]
fn waiting_input_pauses_typing_and_heartbeat() {
    let waiting = || Input::WaitingInput {
        session_key: Some(S1.to_owned()),
        conversation_id: C1.to_owned(),
    };
    let resolved = || Input::InputResolved {
        session_key: Some(S1.to_owned()),
        conversation_id: C1.to_owned(),
    };
    let machine = check(vec![
        (
            0,
            start(1, "m1", 1),
            &[
                "read conv-1",
                "turn thinking T1 q=0 active=m1",
                "reply r1 started T1",
            ],
        ),
        (600_000, Input::Timeout, &["turn thinking T1 q=0"]),
        (
            600_100,
            waiting(),
            &[
                "turn waiting_input T1 q=0 no-input-interrupt",
                "typing.pause conv-1",
            ],
        ),
        (5_000_000, Input::Timeout, &[]),
        (
            5_000_001,
            resolved(),
            &["turn tool T1 q=0", "typing.resume conv-1"],
        ),
        (
            5_000_002,
            waiting(),
            &[
                "turn waiting_input T1 q=0 no-input-interrupt",
                "typing.pause conv-1",
            ],
        ),
        // A negative resolution also publishes `tool` (turns.md OQ-3).
        (
            5_000_003,
            resolved(),
            &["turn tool T1 q=0", "typing.resume conv-1"],
        ),
    ]);
    assert_eq!(machine.next_deadline(), Some(5_600_003));
    assert_eq!(machine.turn_state(S1), Some(TurnState::Tool));
    assert_eq!(machine.responder(S1), Some("human-1"));
}

/// hermes-host.md §19.9: typing-on calls for one chat are coalesced to one
/// per 1.5 s; typing-off always passes.
#[test]
fn typing_is_forwarded_and_coalesced() {
    check(vec![
        (0, typing(true), &["typing conv-1 on thinking"]),
        (1_000, typing(true), &[]),
        (
            1_500,
            Input::Typing {
                conversation_id: C1.to_owned(),
                on: true,
                status: Some("typing".to_owned()),
            },
            &["typing conv-1 on typing"],
        ),
        (1_600, typing(false), &["typing conv-1 off"]),
        (1_700, typing(true), &["typing conv-1 on thinking"]),
    ]);
}
