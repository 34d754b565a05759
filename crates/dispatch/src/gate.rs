//! The wake gate (`turns.md` §9.2): does an inbound `message.created`
//! payload wake an agent turn?
//!
//! The stream service's `turnDispatch` verdict is authoritative when present
//! (turns.md §9.2 rows G1 and G2): only the exact kind `run_turn` wakes, every other
//! non-empty kind suppresses (turns.md OQ-11). Without a verdict (turns.md §9.2 rows G3
//! and G4) the contracts rule [`should_trigger_agent_turn`] decides.
//!
//! Invariant: [`decide_wake`] is total over arbitrary JSON and never panics.

use serde_json::Value;

use crate::protocol::{should_trigger_agent_turn, Decision};

/// The only `turnDispatch.kind` that wakes a turn (turns.md §1, §9.2).
pub const RUN_TURN: &str = "run_turn";

/// The stream service's verdict kind: `payload.turnDispatch.kind` when
/// `turnDispatch` is an object and `kind` is a non-empty string, compared
/// later without trimming or case folding. `None` means "no verdict".
pub fn turn_dispatch_kind(payload: &Value) -> Option<&str> {
    payload
        .get("turnDispatch")
        .filter(|d| d.is_object())
        .and_then(|d| d.get("kind"))
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
}

/// What a [`WakeDecision`] was based on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeBasis {
    /// The authoritative `turnDispatch` verdict with this kind (turns.md §9.2 rows G1, G2).
    Verdict {
        /// The verdict kind, exactly as received.
        kind: String,
    },
    /// No verdict; the contracts rule decided (turns.md §9.2 rows G3, G4).
    Fallback(Decision),
}

/// The outcome of the wake gate for one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeDecision {
    /// Whether the message wakes a turn. When false the caller buffers the
    /// message text (turns.md §9.3).
    pub wake: bool,
    /// Why.
    pub basis: WakeBasis,
}

/// Applies the wake gate to a `message.created` `payload` whose message is
/// `message` (normally `payload.message`).
///
/// The fallback reads `message.senderType` (a non-string counts as missing)
/// and `message.metadata`.
pub fn decide_wake(payload: &Value, message: &Value) -> WakeDecision {
    if let Some(kind) = turn_dispatch_kind(payload) {
        return WakeDecision {
            wake: kind == RUN_TURN,
            basis: WakeBasis::Verdict {
                kind: kind.to_owned(),
            },
        };
    }
    let sender_type = message.get("senderType").and_then(Value::as_str);
    let decision = should_trigger_agent_turn(sender_type, message.get("metadata"));
    WakeDecision {
        wake: decision.allow,
        basis: WakeBasis::Fallback(decision),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protocol::{TriggerReason, TurnSemantics};

    /// One row: payload `turnDispatch` member (or none), message, expected
    /// wake, expected verdict kind (None means the fallback decided).
    fn check(dispatch: Option<Value>, message: Value, wake: bool, verdict: Option<&str>) {
        let mut payload = json!({"conversationId": "c1", "message": message.clone()});
        if let Some(d) = dispatch.clone() {
            payload["turnDispatch"] = d;
        }
        let got = decide_wake(&payload, &message);
        assert_eq!(got.wake, wake, "dispatch {dispatch:?} message {message}");
        match (&got.basis, verdict) {
            (WakeBasis::Verdict { kind }, Some(expected)) => assert_eq!(kind, expected),
            (WakeBasis::Fallback(decision), None) => assert_eq!(decision.allow, wake),
            (basis, expected) => panic!("basis {basis:?}, expected verdict {expected:?}"),
        }
    }

    #[test]
    fn g1_run_turn_wakes_even_when_the_fallback_would_not() {
        let agent_progress =
            json!({"senderType": "ai_agent", "metadata": {"turnSemantics": "progress"}});
        check(
            Some(json!({"kind": "run_turn"})),
            agent_progress,
            true,
            Some("run_turn"),
        );
        let suppressed =
            json!({"senderType": "human", "metadata": {"replyBehavior": "suppress_auto_reply"}});
        check(
            Some(json!({"kind": "run_turn", "x": 1})),
            suppressed,
            true,
            Some("run_turn"),
        );
    }

    #[test]
    fn g2_other_kinds_never_wake() {
        let human = json!({"senderType": "human", "text": "hi"});
        for kind in [
            "RUN_TURN",
            " run_turn",
            "run_turn ",
            "suppress",
            "ignore",
            "run-turn",
            "😀",
        ] {
            check(
                Some(json!({ "kind": kind })),
                human.clone(),
                false,
                Some(kind),
            );
        }
    }

    #[test]
    fn g3_object_without_usable_kind_falls_back() {
        let human = json!({"senderType": "human"});
        let agent = json!({"senderType": "ai_agent"});
        for dispatch in [
            json!({}),
            json!({"kind": ""}),
            json!({"kind": null}),
            json!({"kind": 1}),
            json!({"kind": ["run_turn"]}),
            json!({"kind": {"kind": "run_turn"}}),
            json!({"Kind": "run_turn"}),
        ] {
            check(Some(dispatch.clone()), human.clone(), true, None);
            check(Some(dispatch), agent.clone(), false, None);
        }
    }

    #[test]
    fn g4_absent_or_non_object_verdict_falls_back() {
        let complete =
            json!({"senderType": "ai_agent", "metadata": {"turnSemantics": "turn_complete"}});
        let progress = json!({"senderType": "ai_agent", "metadata": {"turnSemantics": "progress"}});
        for dispatch in [
            None,
            Some(json!(null)),
            Some(json!("run_turn")),
            Some(json!(["run_turn"])),
            Some(json!([{"kind": "run_turn"}])),
            Some(json!(true)),
            Some(json!(7)),
        ] {
            check(dispatch.clone(), complete.clone(), true, None);
            check(dispatch, progress.clone(), false, None);
        }
    }

    #[test]
    fn fallback_carries_the_contract_decision() {
        let message = json!({"senderType": "ai_agent", "metadata": {"turnSemantics": "control"}});
        let got = decide_wake(&json!({}), &message);
        assert_eq!(
            got.basis,
            WakeBasis::Fallback(Decision {
                allow: true,
                semantics: TurnSemantics::Control,
                reason: TriggerReason::AgentTurnComplete,
            })
        );
    }

    #[test]
    fn non_string_sender_type_is_non_human() {
        for sender in [
            json!(null),
            json!(1),
            json!(["human"]),
            json!({"human": true}),
        ] {
            let message = json!({"senderType": sender});
            let got = decide_wake(&json!({}), &message);
            assert!(!got.wake, "{message}");
        }
    }

    proptest::proptest! {
        #[test]
        fn gate_never_panics_and_respects_the_verdict(payload in crate::test_support::arb_payload(), dispatch in crate::test_support::arb_json()) {
            let mut payload = payload;
            if let Some(map) = payload.as_object_mut() {
                map.insert("turnDispatch".into(), dispatch);
            }
            let message = payload.get("message").cloned().unwrap_or(Value::Null);
            let got = decide_wake(&payload, &message);
            match turn_dispatch_kind(&payload) {
                Some(kind) => proptest::prop_assert_eq!(got.wake, kind == RUN_TURN),
                None => proptest::prop_assert!(matches!(got.basis, WakeBasis::Fallback(d) if d.allow == got.wake)),
            }
        }
    }

    #[test]
    fn non_object_payload_and_message_fall_back_without_panicking() {
        for value in [json!(null), json!([]), json!("x"), json!(3)] {
            let got = decide_wake(&value, &value);
            assert_eq!(
                got.basis,
                WakeBasis::Fallback(Decision {
                    allow: false,
                    semantics: TurnSemantics::Progress,
                    reason: TriggerReason::AgentWithoutSemantics,
                })
            );
        }
    }
}
