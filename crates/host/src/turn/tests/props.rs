//! Property tests of the turn machine: for any sequence of inputs it never panics, every
//! turn opens once and has at most one `turn_complete` and one closing publish, every host
//! request is answered at most once, and deliveries that name no turn never share an id.

use std::collections::{BTreeMap, BTreeSet};

use canon_dispatch::verbosity::ConversationType;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::support::*;
use crate::turn::*;

#[derive(Debug, Clone)]
enum Op {
    Start {
        session: u8,
        n: u8,
    },
    Dequeue {
        session: u8,
        n: u8,
    },
    Complete {
        session: u8,
        outcome: u8,
    },
    Send {
        session: Option<u8>,
        kind: u8,
        big: bool,
        /// Replies to the message of the input this many steps back (a
        /// dequeued follow-up's, perhaps), or to nothing.
        reply: Option<u8>,
    },
    Edit {
        session: Option<u8>,
        finalize: bool,
    },
    Tool {
        session: u8,
        start: bool,
    },
    Waiting {
        session: u8,
        resolve: bool,
    },
    NoReply {
        session: u8,
    },
    Steer {
        session: u8,
    },
    Outcome {
        pick: usize,
        class: u8,
    },
    Standalone,
    Media {
        session: Option<u8>,
    },
    Tick {
        advance: u64,
    },
    Typing {
        on: bool,
    },
    Disconnect,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let session = 0u8..3;
    prop_oneof![
        (session.clone(), 1u8..16).prop_map(|(session, n)| Op::Start { session, n }),
        (session.clone(), 1u8..16).prop_map(|(session, n)| Op::Dequeue { session, n }),
        (session.clone(), 0u8..3).prop_map(|(session, outcome)| Op::Complete { session, outcome }),
        (
            proptest::option::of(session.clone()),
            0u8..4,
            any::<bool>(),
            proptest::option::of(1u8..4)
        )
            .prop_map(|(session, kind, big, reply)| Op::Send {
                session,
                kind,
                big,
                reply
            }),
        (proptest::option::of(session.clone()), any::<bool>())
            .prop_map(|(session, finalize)| Op::Edit { session, finalize }),
        (session.clone(), any::<bool>()).prop_map(|(session, start)| Op::Tool { session, start }),
        (session.clone(), any::<bool>())
            .prop_map(|(session, resolve)| Op::Waiting { session, resolve }),
        session.clone().prop_map(|session| Op::NoReply { session }),
        proptest::option::of(session.clone()).prop_map(|session| Op::Media { session }),
        session.prop_map(|session| Op::Steer { session }),
        (0usize..8, 0u8..5).prop_map(|(pick, class)| Op::Outcome { pick, class }),
        Just(Op::Standalone),
        (0u64..2_000).prop_map(|advance| Op::Tick { advance }),
        any::<bool>().prop_map(|on| Op::Typing { on }),
        Just(Op::Disconnect),
    ]
}

fn session_name(session: u8) -> String {
    format!("agent:main:canon:group:conv-1:user{session}")
}

fn to_input(op: &Op, request: u64, ops: &[OpId], now: u64) -> Input {
    let text = |big: bool| {
        if big {
            "word ".repeat(1_600)
        } else {
            format!("text {}", now % 3)
        }
    };
    match op {
        Op::Start { session, n } | Op::Dequeue { session, n } => {
            let mut start = start_in(
                request,
                &session_name(*session),
                C1,
                &format!("m{request}"),
                ConversationType::Direct,
                *n,
            );
            // Distinct randomness per turn, as the driver guarantees.
            start.random |= u128::from(request) << 64;
            match op {
                Op::Start { .. } => Input::ProcessingStart(start),
                _ => Input::QueueDequeued {
                    start,
                    interrupted: n % 2 == 0,
                    turn_id: None,
                },
            }
        }
        Op::Complete { session, outcome } => Input::ProcessingComplete {
            request: RequestId(request),
            session_key: session_name(*session),
            conversation_id: C1.to_owned(),
            outcome: [Outcome::Success, Outcome::Failure, Outcome::Cancelled]
                [usize::from(*outcome) % 3],
            queue_depth: 0,
        },
        Op::Send {
            session,
            kind,
            big,
            reply,
        } => {
            let metadata = match kind {
                0 => json!({"expect_edits": true}),
                1 => json!({"notify": true}),
                2 => json!({"notify": true, "expect_edits": true}),
                _ => Value::Null,
            };
            let mut send = send_with(
                request,
                session.map(session_name).as_deref(),
                &text(*big),
                metadata,
            );
            // Fresh randomness per call, as the driver guarantees.
            if let Input::Send(host) = &mut send {
                host.random |= u128::from(request) << 64;
                host.reply_to =
                    reply.map(|back| format!("m{}", request.saturating_sub(u64::from(back))));
            }
            send
        }
        Op::Edit { session, finalize } => edit_with(
            request,
            session.map(session_name).as_deref(),
            &text(false),
            *finalize,
        ),
        Op::Tool { session, start } => Input::Activity {
            session_key: Some(session_name(*session)),
            conversation_id: C1.to_owned(),
            event: if *start {
                ActivityEvent::ToolStarted {
                    tool_call_id: None,
                    tool_name: Some("t".to_owned()),
                    args: None,
                }
            } else {
                ActivityEvent::ToolFinished {
                    tool_call_id: None,
                    tool_name: Some("t".to_owned()),
                    args: None,
                    result: Some(json!({"r": 1})),
                    status: Some("ok".to_owned()),
                    duration_ms: Some(json!(3)),
                }
            },
        },
        Op::Waiting { session, resolve } => {
            let session_key = Some(session_name(*session));
            if *resolve {
                Input::InputResolved {
                    session_key,
                    conversation_id: C1.to_owned(),
                }
            } else {
                Input::WaitingInput {
                    session_key,
                    conversation_id: C1.to_owned(),
                }
            }
        }
        Op::NoReply { session } => Input::NoReply(NoReplyRequest {
            request: RequestId(request),
            in_canon_context: true,
            session_key: Some(session_name(*session)),
            conversation_id: Some(C1.to_owned()),
            target: None,
            reason_given: false,
        }),
        Op::Steer { session } => Input::SteerAccepted {
            session_key: Some(session_name(*session)),
            conversation_id: C1.to_owned(),
        },
        Op::Outcome { pick, class } => {
            let op = ops.get(pick % ops.len().max(1)).copied().unwrap_or(OpId(0));
            let result = match class {
                0 => Ok(Some("x".to_owned())),
                1 => Err(DeliveryFailure {
                    class: FailureClass::PreHandler,
                    error: "busy".to_owned(),
                    retryable: true,
                }),
                2 => Err(DeliveryFailure {
                    class: FailureClass::Rejected,
                    error: "bad".to_owned(),
                    retryable: false,
                }),
                3 => Err(DeliveryFailure {
                    class: FailureClass::Ambiguous,
                    error: "timed out".to_owned(),
                    retryable: false,
                }),
                _ => Err(DeliveryFailure {
                    class: FailureClass::IdConflict,
                    error: "message id exists".to_owned(),
                    retryable: false,
                }),
            };
            Input::DeliveryOutcome { op, result }
        }
        Op::Standalone => Input::Standalone(StandaloneSend {
            request: RequestId(request),
            chat_id: None,
            home_channel_env: Some("home".to_owned()),
            home_channel_config: None,
            text: "cron".to_owned(),
            media: None,
            random: u128::from(request),
        }),
        Op::Media { session } => Input::Media(HostMedia {
            request: RequestId(request),
            session_key: (*session).map(session_name),
            conversation_id: C1.to_owned(),
            caption: String::new(),
            reply_to: None,
            metadata: Map::new(),
            media: image_payload(),
            random: u128::from(request) << 32,
        }),
        Op::Tick { .. } => Input::Timeout,
        Op::Typing { on } => typing(*on),
        Op::Disconnect => Input::Disconnect,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// For any input sequence the machine never panics, every lifecycle
    /// turn has at most one distinct `turn_complete` final (by message id)
    /// and at most one closing publish, every host request is answered at
    /// most once (`turn.start` and `turn.accepted` at once, even while a
    /// dequeue boundary waits), a turn opens once and closes only after it
    /// opened, and deliveries that name no turn (standalone and turn-less
    /// sends, turns.md §4.6) never share a message id.
    #[test]
    fn at_most_one_turn_complete_per_turn(ops in proptest::collection::vec(op_strategy(), 1..60)) {
        let mut machine = TurnMachine::new(TurnConfig::default());
        let mut now = 1_000u64;
        let mut delivered_ops: Vec<OpId> = Vec::new();
        let mut lifecycle: BTreeSet<String> = BTreeSet::new();
        let mut finals: BTreeMap<String, BTreeSet<Option<String>>> = BTreeMap::new();
        let mut closes: BTreeMap<String, usize> = BTreeMap::new();
        let mut replies: BTreeMap<u64, usize> = BTreeMap::new();
        let mut standalone_ids: BTreeSet<String> = BTreeSet::new();
        let mut media_ids: BTreeSet<String> = BTreeSet::new();
        for (index, op) in ops.iter().enumerate() {
            if let Op::Tick { advance } = op {
                now += advance;
            }
            let request = index as u64 + 1;
            let input = to_input(op, request, &delivered_ops, now);
            let effects = machine.handle(input, now);
            if matches!(op, Op::Start { .. } | Op::Dequeue { .. }) {
                // Answered at once, even while the boundary waits.
                let answered = effects.iter().any(|e| matches!(e,
                    Effect::Reply { request: r, reply: HostReply::TurnStarted { .. } } if r.0 == request));
                prop_assert!(answered, "request {} not answered at once", request);
            }
            for effect in effects {
                match effect {
                    Effect::PublishTurn(p) => {
                        prop_assert!(p.turn_id.is_some(), "a turn publish without a turn id");
                        let turn_id = p.turn_id.clone().unwrap_or_default();
                        if p.active_message_ids.is_some() {
                            // A turn opens once, under the id it was answered with.
                            prop_assert!(lifecycle.insert(turn_id.clone()), "turn {} opened twice", turn_id);
                        }
                        if p.state.is_closing() {
                            // A waiting follow-up is never closed unopened.
                            prop_assert!(lifecycle.contains(&turn_id), "turn {} closed before it opened", turn_id);
                            *closes.entry(turn_id).or_default() += 1;
                        }
                    }
                    Effect::Deliver(d) => {
                        delivered_ops.push(d.op);
                        let last = d.parts.last().expect("a delivery has parts");
                        prop_assert_eq!(&last.metadata["turnSemantics"], "turn_complete");
                        let is_media = !last.attachments.is_empty();
                        prop_assert!(d.parts[..d.parts.len() - 1].iter().all(|p| p.attachments.is_empty()));
                        if let (true, Some(_)) = (is_media, d.turn_id.as_ref()) {
                            // turns.md OQ-6: media is its own turn_complete under
                            // a fresh ordinal id of its turn, never reused.
                            let id = last.message_id.clone().expect("a media id");
                            prop_assert!(media_ids.insert(id.clone()), "media id {} reused", id);
                        } else if let Some(turn) = d.turn_id.clone() {
                            finals.entry(turn).or_default().insert(last.message_id.clone());
                        } else {
                            prop_assert_eq!(d.route, Route::SendTo);
                            for part in &d.parts {
                                let id = part.message_id.clone().expect("a part id");
                                prop_assert!(standalone_ids.insert(id.clone()), "id {} reused", id);
                            }
                        }
                    }
                    Effect::Reply { request, .. } => *replies.entry(request.0).or_default() += 1,
                    _ => {}
                }
            }
        }
        let final_ids: BTreeSet<String> = finals.values().flatten().flatten().cloned().collect();
        prop_assert!(final_ids.is_disjoint(&media_ids), "a final reused a media id");
        for turn in &lifecycle {
            prop_assert!(finals.get(turn).map_or(0, BTreeSet::len) <= 1, "turn {} has several finals", turn);
            prop_assert!(closes.get(turn).copied().unwrap_or(0) <= 1, "turn {} closed twice", turn);
        }
        for (request, count) in replies {
            prop_assert!(count <= 1, "request {} answered {} times", request, count);
        }
    }
}
