//! Data-driven tests of the turn machine: sequences of inputs paired with
//! the expected effects (style.md §6.6), plus proptests for "never panics"
//! and "at most one `turn_complete` per turn".
//!
//! Effects are compared through [`describe`], a one-line rendering: turn
//! ids `hermes-<n>000…` print as `T<n>`, message ids as `base`, `part-N` or
//! `none`. Tests that pin exact ids or metadata compare the full structs.

use std::collections::{BTreeMap, BTreeSet};

use canon_chunking::ids::{stable_final_message_id, Ordinal};
use canon_dispatch::verbosity::{ConversationType, VerbosityConfig};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::*;

const C1: &str = "conv-1";
const S1: &str = "agent:main:canon:dm:conv-1";

/// Randomness that yields the turn id `hermes-<n>0000000000000000000`.
fn rand(n: u8) -> u128 {
    u128::from(n) << 124
}

fn turn_id(n: u8) -> String {
    canon_chunking::ids::turn_id_from_random(rand(n))
}

fn short(text: &str) -> String {
    let mut out = text.to_owned();
    for n in 1..16u8 {
        out = out.replace(&turn_id(n), &format!("T{n:x}"));
    }
    out
}

fn id_kind(id: Option<&str>) -> String {
    match id {
        None => "none".to_owned(),
        Some(id) => match id.rsplit_once("-part-") {
            Some((_, n)) => format!("part-{n}"),
            None => "base".to_owned(),
        },
    }
}

fn quoted(text: &str) -> String {
    if text.len() <= 24 {
        format!("{text:?}")
    } else {
        format!("{}B", text.len())
    }
}

fn block_list(blocks: &[Value]) -> String {
    let items: Vec<String> = blocks
        .iter()
        .map(|b| {
            format!(
                "{}:{}",
                b["id"].as_str().unwrap_or("?"),
                b["status"].as_str().unwrap_or("?")
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

/// One-line rendering of an effect.
/// A turn id the machine always sets, or `<none>` so a missing one shows.
fn id_or_none(id: Option<&str>) -> &str {
    id.unwrap_or("<none>")
}

fn describe(effect: &Effect) -> String {
    let line = match effect {
        Effect::PublishTurn(p) => {
            let mut s = format!(
                "turn {} {} q={}",
                p.state,
                id_or_none(p.turn_id.as_deref()),
                p.queue_depth
            );
            if let Some(active) = &p.active_message_ids {
                s.push_str(&format!(" active={}", active.join(",")));
            }
            if !p.capabilities.supports_input_interrupt {
                s.push_str(" no-input-interrupt");
            }
            s
        }
        Effect::Streaming(StreamingUpdate::Set {
            turn_id,
            text,
            blocks,
            ..
        }) => {
            let mut s = format!("stream set {}", id_or_none(turn_id.as_deref()));
            if let Some(text) = text {
                s.push_str(&format!(" text={}", quoted(text)));
            }
            if let Some(blocks) = blocks {
                s.push_str(&format!(" blocks={}", block_list(blocks)));
            }
            s
        }
        Effect::Streaming(StreamingUpdate::Blank { turn_id, .. }) => {
            format!("stream blank {}", id_or_none(turn_id.as_deref()))
        }
        Effect::Streaming(StreamingUpdate::Clear { conversation_id }) => {
            format!("stream clear {conversation_id}")
        }
        Effect::Typing(Typing {
            conversation_id,
            typing,
            status,
        }) => match status {
            Some(status) if *typing => format!("typing {conversation_id} on {}", status.as_str()),
            _ => format!("typing {conversation_id} off"),
        },
        Effect::PauseTyping { conversation_id } => format!("typing.pause {conversation_id}"),
        Effect::ResumeTyping { conversation_id } => format!("typing.resume {conversation_id}"),
        Effect::AckDisposition {
            conversation_id,
            message_id,
        } => format!("ack {conversation_id} {message_id}"),
        Effect::MarkRead { conversation_id } => format!("read {conversation_id}"),
        Effect::Deliver(d) => {
            let parts: Vec<String> = d
                .parts
                .iter()
                .map(|p| {
                    let mut s = format!(
                        "{} {} {}",
                        id_kind(p.message_id.as_deref()),
                        p.metadata
                            .get("turnSemantics")
                            .and_then(Value::as_str)
                            .unwrap_or("?"),
                        quoted(&p.text)
                    );
                    if let Some(Value::Array(trail)) = p.metadata.get("turnTrail") {
                        s.push_str(&format!(" trail={}", block_list(trail)));
                    }
                    s
                })
                .collect();
            let route = match d.route {
                Route::Messages => "messages",
                Route::SendTo => "send_to",
            };
            format!(
                "deliver op{} {route} {} [{}]",
                d.op.0,
                d.conversation_id,
                parts.join(", ")
            )
        }
        Effect::RecordNoReply {
            conversation_id,
            message_id,
            reason_given,
        } => format!(
            "no_reply record {conversation_id} {} {}",
            message_id.as_deref().unwrap_or("-"),
            if *reason_given { "given" } else { "none" }
        ),
        Effect::Reply { request, reply } => {
            let body = match reply {
                HostReply::Send(SendOutcome::Preview { turn_id }) => format!("preview {turn_id}"),
                HostReply::Send(SendOutcome::SuppressedAuxiliary { turn_id }) => {
                    format!("aux {turn_id}")
                }
                HostReply::Send(SendOutcome::Silenced { turn_id }) => format!("silenced {turn_id}"),
                HostReply::Send(SendOutcome::DuplicateFinal { turn_id }) => {
                    format!("duplicate {turn_id}")
                }
                HostReply::Send(SendOutcome::Delivered { message_id }) => {
                    format!("delivered {}", message_id.as_deref().unwrap_or("-"))
                }
                HostReply::Send(SendOutcome::Failed { error, retryable }) => {
                    format!("failed {error:?} retryable={retryable}")
                }
                HostReply::TurnStarted { turn_id } => format!("started {turn_id}"),
                HostReply::Done => "done".to_owned(),
                HostReply::NoReply(NoReplyOutcome::Acknowledged { conversation_id }) => {
                    format!("no_reply ack {conversation_id}")
                }
                HostReply::NoReply(NoReplyOutcome::Refused { error }) => {
                    format!("no_reply refused {error:?}")
                }
                HostReply::Standalone(Ok(id)) => {
                    format!("standalone ok {}", id.as_deref().unwrap_or("-"))
                }
                HostReply::Standalone(Err(error)) => format!("standalone err {error:?}"),
            };
            format!("reply r{} {body}", request.0)
        }
    };
    short(&line)
}

/// One step: the time, the input and the expected effect lines.
type Step = (u64, Input, &'static [&'static str]);

fn check_with(config: TurnConfig, steps: Vec<Step>) -> TurnMachine {
    let mut machine = TurnMachine::new(config);
    for (index, (now, input, expected)) in steps.into_iter().enumerate() {
        let shown = format!("{input:?}");
        let got: Vec<String> = machine.handle(input, now).iter().map(describe).collect();
        let want: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(got, want, "step {index} at {now} ms: {shown}");
    }
    machine
}

fn check(steps: Vec<Step>) -> TurnMachine {
    check_with(TurnConfig::default(), steps)
}

fn start_in(
    request: u64,
    session: &str,
    conversation: &str,
    message: &str,
    kind: ConversationType,
    n: u8,
) -> ProcessingStart {
    ProcessingStart {
        request: RequestId(request),
        session_key: session.to_owned(),
        conversation_id: conversation.to_owned(),
        message_id: Some(message.to_owned()),
        disposition_queued: false,
        absorbed_queued_ids: Vec::new(),
        responder: Some("human-1".to_owned()),
        reply_authority: None,
        conversation_type: kind,
        queue_depth: 0,
        random: rand(n),
    }
}

fn start(request: u64, message: &str, n: u8) -> Input {
    Input::ProcessingStart(start_in(
        request,
        S1,
        C1,
        message,
        ConversationType::Direct,
        n,
    ))
}

fn meta(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

fn send_with(request: u64, session: Option<&str>, content: &str, metadata: Value) -> Input {
    Input::Send(HostSend {
        request: RequestId(request),
        session_key: session.map(str::to_owned),
        conversation_id: C1.to_owned(),
        content: content.to_owned(),
        reply_to: Some("m1".to_owned()),
        metadata: meta(metadata),
        random: rand(9),
    })
}

fn preview(request: u64, content: &str) -> Input {
    send_with(
        request,
        Some(S1),
        content,
        json!({"expect_edits": true, "reply_to_message_id": "m1"}),
    )
}

fn edit_with(request: u64, session: Option<&str>, content: &str, finalize: bool) -> Input {
    Input::Edit(HostEdit {
        request: RequestId(request),
        session_key: session.map(str::to_owned),
        conversation_id: C1.to_owned(),
        content: content.to_owned(),
        finalize,
        metadata: Map::new(),
        random: rand(9),
    })
}

fn edit(request: u64, content: &str, finalize: bool) -> Input {
    edit_with(request, Some(S1), content, finalize)
}

fn complete(request: u64, outcome: Outcome) -> Input {
    Input::ProcessingComplete {
        request: RequestId(request),
        session_key: S1.to_owned(),
        conversation_id: C1.to_owned(),
        outcome,
        queue_depth: 0,
    }
}

fn delivered(op: u64) -> Input {
    Input::DeliveryOutcome {
        op: OpId(op),
        result: Ok(Some("canon-msg-1".to_owned())),
    }
}

fn failed(op: u64, class: FailureClass) -> Input {
    Input::DeliveryOutcome {
        op: OpId(op),
        result: Err(DeliveryFailure {
            class,
            error: "Canon request timed out".to_owned(),
            retryable: false,
        }),
    }
}

fn tool_started(call: &str, name: &str) -> Input {
    Input::Activity {
        session_key: Some(S1.to_owned()),
        conversation_id: C1.to_owned(),
        event: ActivityEvent::ToolStarted {
            tool_call_id: Some(call.to_owned()),
            tool_name: Some(name.to_owned()),
            args: Some(json!({"q": "weather"})),
        },
    }
}

fn tool_finished(call: &str, name: &str) -> Input {
    Input::Activity {
        session_key: Some(S1.to_owned()),
        conversation_id: C1.to_owned(),
        event: ActivityEvent::ToolFinished {
            tool_call_id: Some(call.to_owned()),
            tool_name: Some(name.to_owned()),
            args: None,
            result: Some(json!("ok")),
            status: Some("ok".to_owned()),
            duration_ms: Some(json!(12)),
        },
    }
}

fn no_reply(request: u64, target: Option<&str>, in_canon: bool) -> Input {
    Input::NoReply(NoReplyRequest {
        request: RequestId(request),
        in_canon_context: in_canon,
        session_key: Some(S1.to_owned()),
        conversation_id: Some(C1.to_owned()),
        target: target.map(str::to_owned),
        reason_given: true,
    })
}

fn typing(on: bool) -> Input {
    Input::Typing {
        conversation_id: C1.to_owned(),
        on,
        status: None,
    }
}

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

/// turns.md §5.3, §7.4 and OQ-4: a tool call seals the live bubble, resets
/// the candidate, is published when it starts (coalesced), and the final
/// carries the ordered trail.
#[test]
fn tool_call_turn_with_trail() {
    check(vec![
        (0, start(1, "m1", 1), &["read conv-1", "turn thinking T1 q=0 active=m1", "reply r1 started T1"]),
        (100, preview(2, "Checking."), &[
            "stream set T1 text=\"Checking.\" blocks=[text:T1:1:running]",
            "turn streaming T1 q=0",
            "reply r2 preview T1",
        ]),
        (110, edit(3, "Checking.", true), &[
            "stream set T1 text=\"Checking.\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r3 preview T1",
        ]),
        (200, tool_started("call_1", "web_search"), &[
            "stream set T1 text=\"\" blocks=[text:T1:1:completed,tool:call_1:running]",
            "turn tool T1 q=0",
        ]),
        // Finishing within 250 ms of the last write is coalesced.
        (300, tool_finished("call_1", "web_search"), &[]),
        (449, Input::Timeout, &[]),
        (450, Input::Timeout, &[
            "stream set T1 text=\"\" blocks=[text:T1:1:completed,tool:call_1:completed]",
            "turn thinking T1 q=0",
        ]),
        (600, preview(4, "Sunny"), &[
            "stream set T1 text=\"Sunny\" blocks=[text:T1:1:completed,tool:call_1:completed,text:T1:2:running]",
            "turn streaming T1 q=0",
            "reply r4 preview T1",
        ]),
        (700, edit(5, "Sunny, 21 °C", true), &[
            "stream set T1 text=\"Sunny, 21 °C\" blocks=[text:T1:1:completed,tool:call_1:completed,text:T1:2:completed]",
            "turn streaming T1 q=0",
            "reply r5 preview T1",
        ]),
        (800, complete(6, Outcome::Success), &[
            "deliver op1 messages conv-1 [base turn_complete \"Sunny, 21 °C\" trail=[text:T1:1:completed,tool:call_1:completed,text:T1:2:completed]]",
        ]),
        (900, delivered(1), &[]),
        (1_650, Input::Timeout, &[
            "stream clear conv-1",
            "turn completed T1 q=0",
            "typing.resume conv-1",
            "reply r6 done",
        ]),
    ]);
}

/// The final's trail texts, by block id.
fn trail_texts(effects: &[Effect]) -> Vec<(String, String)> {
    let Some(Effect::Deliver(delivery)) = effects.first() else {
        panic!("expected a delivery, got {effects:?}");
    };
    let trail = delivery
        .parts
        .last()
        .and_then(|p| p.metadata.get("turnTrail"));
    trail
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .map(|b| {
                    let id = short(b["id"].as_str().unwrap_or("?"));
                    (id, b["text"].as_str().unwrap_or("").to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// turns.md §7.4 with Hermes 0.19.0's stream consumer (hermes-host.md §10):
/// the consumer finalizes the pre-tool message on its next tick, after
/// `pre_tool_call`. That late close revises the sealed speech block (cursor
/// gone) and stays out of the answer, which holds only post-tool text.
#[test]
fn late_close_of_the_pre_tool_segment_stays_out_of_the_final() {
    let mut machine = check(vec![
        (0, start(1, "m1", 1), &["read conv-1", "turn thinking T1 q=0 active=m1", "reply r1 started T1"]),
        (100, preview(2, "Checking the ▉"), &[
            "stream set T1 text=\"Checking the ▉\" blocks=[text:T1:1:running]",
            "turn streaming T1 q=0",
            "reply r2 preview T1",
        ]),
        (200, tool_started("call_1", "web_search"), &[
            "stream set T1 text=\"\" blocks=[text:T1:1:completed,tool:call_1:running]",
            "turn tool T1 q=0",
        ]),
        // The segment-break finalize, twice (REQUIRES_EDIT_FINALIZE).
        (210, edit(3, "Checking the sky.", true), &[
            "stream set T1 text=\"\" blocks=[text:T1:1:completed,tool:call_1:running]",
            "reply r3 preview T1",
        ]),
        (211, edit(4, "Checking the sky.", true), &[
            "stream set T1 text=\"\" blocks=[text:T1:1:completed,tool:call_1:running]",
            "reply r4 preview T1",
        ]),
        (300, tool_finished("call_1", "web_search"), &[]),
        (450, Input::Timeout, &[
            "stream set T1 text=\"\" blocks=[text:T1:1:completed,tool:call_1:completed]",
            "turn thinking T1 q=0",
        ]),
        // The post-tool segment starts with a send, then edits it.
        (600, preview(5, "\n\nSunny ▉"), &[
            "stream set T1 text=\"\\n\\nSunny ▉\" blocks=[text:T1:1:completed,tool:call_1:completed,text:T1:2:running]",
            "turn streaming T1 q=0",
            "reply r5 preview T1",
        ]),
        (700, edit(6, "\n\nSunny", true), &[
            "stream set T1 text=\"\\n\\nSunny\" blocks=[text:T1:1:completed,tool:call_1:completed,text:T1:2:completed]",
            "turn streaming T1 q=0",
            "reply r6 preview T1",
        ]),
    ]);
    let effects = machine.handle(complete(7, Outcome::Success), 800);
    assert_eq!(
        effects.iter().map(describe).collect::<Vec<_>>(),
        ["deliver op1 messages conv-1 [base turn_complete \"\\n\\nSunny\" trail=[text:T1:1:completed,tool:call_1:completed,text:T1:2:completed]]"]
    );
    assert_eq!(
        trail_texts(&effects),
        [
            ("text:T1:1".to_owned(), "Checking the sky.".to_owned()),
            ("tool:call_1".to_owned(), "ok".to_owned()),
            ("text:T1:2".to_owned(), "\n\nSunny".to_owned()),
        ]
    );
}

/// The same race when nothing was previewed before the tool: the pre-tool
/// text arrives as an already-final first send while the tool runs.
#[test]
fn unpreviewed_pre_tool_text_stays_out_of_the_final() {
    let mut machine = check(vec![
        (0, start(1, "m1", 1), &["read conv-1", "turn thinking T1 q=0 active=m1", "reply r1 started T1"]),
        (200, tool_started("call_1", "web_search"), &[
            "stream set T1 text=\"\" blocks=[tool:call_1:running]",
            "turn tool T1 q=0",
        ]),
        (210, send_with(2, Some(S1), "Hmm.", json!({"expect_edits": true, "notify": true})), &[
            "stream set T1 text=\"\" blocks=[tool:call_1:running,text:T1:1:completed]",
            "reply r2 preview T1",
        ]),
        (300, tool_finished("call_1", "web_search"), &[]),
        (600, send_with(3, Some(S1), "Sunny", json!({"expect_edits": true, "notify": true})), &[
            "stream set T1 text=\"Sunny\" blocks=[tool:call_1:completed,text:T1:1:completed,text:T1:2:completed]",
            "turn streaming T1 q=0",
            "reply r3 preview T1",
        ]),
    ]);
    let effects = machine.handle(complete(4, Outcome::Success), 800);
    assert_eq!(
        effects.iter().map(describe).collect::<Vec<_>>(),
        ["deliver op1 messages conv-1 [base turn_complete \"Sunny\" trail=[tool:call_1:completed,text:T1:1:completed,text:T1:2:completed]]"]
    );
    assert_eq!(
        trail_texts(&effects)[1],
        ("text:T1:1".to_owned(), "Hmm.".to_owned())
    );
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
    // The answer's own speech block is stripped from a chunked final (§3.7).
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

/// A durable `send` with no session, no open turn and no `notify`: it
/// resolves to no turn id (turns.md §7.6), as Hermes' in-process cron
/// delivery does.
fn turnless_send(request: u64, content: &str, metadata: Value, random: u128) -> Input {
    Input::Send(HostSend {
        request: RequestId(request),
        session_key: None,
        conversation_id: C1.to_owned(),
        content: content.to_owned(),
        reply_to: None,
        metadata: meta(metadata),
        random,
    })
}

/// The one delivery among `effects`.
fn only_delivery(effects: &[Effect]) -> Delivery {
    match effects {
        [Effect::Deliver(delivery)] => delivery.clone(),
        _ => panic!("expected exactly one delivery: {effects:?}"),
    }
}

fn compact(metadata: &Map<String, Value>) -> String {
    Value::Object(metadata.clone()).to_string()
}

/// Lead decision on turns.md §7.6 vs §4.6: a send with no turn id gets the
/// id group `standalone:<32 hex>` of its input's randomness, and its ids
/// follow from that randomness alone.
#[test]
fn turnless_send_ids_derive_from_its_randomness() {
    let random = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;
    let send = || turnless_send(1, "Nightly report: all is well.", Value::Null, random);
    let first = only_delivery(&TurnMachine::new(TurnConfig::default()).handle(send(), 0));
    let second = only_delivery(&TurnMachine::new(TurnConfig::default()).handle(send(), 5));
    assert_eq!(first, second, "same randomness, same delivery");

    let group = StandaloneGroup::new(C1, random);
    assert_eq!(group.token(), "standalone:0123456789abcdef0123456789abcdef");
    assert_eq!(
        stable_final_message_id(C1, Some(group.token()), Ordinal::FIRST).as_deref(),
        Some(group.base_id())
    );
    assert_eq!(first.route, Route::SendTo);
    assert_eq!(first.conversation_id, C1);
    assert_eq!(first.turn_id, None, "the token never reaches the wire");
    assert_eq!(first.parts.len(), 1);
    let part = &first.parts[0];
    assert_eq!(part.message_id.as_deref(), Some(group.base_id()));
    assert_eq!(
        compact(&part.metadata),
        r#"{"turnSemantics":"turn_complete","turnComplete":true}"#
    );
    assert_eq!(part.reply_authority, None);
}

/// Every invocation mints a fresh group: two sends of the same text never
/// share an id, while a send with a turn id keeps the ledger's ids.
#[test]
fn turnless_sends_never_share_ids() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    let text = "word ".repeat(1_600);
    let ids = |delivery: &Delivery| -> Vec<String> {
        delivery
            .parts
            .iter()
            .map(|p| p.message_id.clone().expect("every part has an id"))
            .collect()
    };
    let first = only_delivery(&machine.handle(turnless_send(1, &text, Value::Null, 1), 0));
    let second = only_delivery(&machine.handle(turnless_send(2, &text, Value::Null, 2), 1));
    assert_eq!(first.parts.len(), 3);
    assert_eq!(second.parts.len(), 3);
    let (first_ids, second_ids) = (ids(&first), ids(&second));
    assert!(
        first_ids.iter().all(|id| !second_ids.contains(id)),
        "{first_ids:?} vs {second_ids:?}"
    );
    let group_id = |d: &Delivery| d.parts[0].metadata["messageChunk"]["groupId"].clone();
    assert_ne!(group_id(&first), group_id(&second));
    // The same randomness again (which the driver never supplies) would
    // replay the first group: the ids depend on nothing else.
    let again = only_delivery(&machine.handle(turnless_send(3, &text, Value::Null, 1), 2));
    assert_eq!(ids(&again), first_ids);
    check_steps(
        &mut machine,
        vec![
            (3, delivered(1), &["reply r1 delivered canon-msg-1"]),
            (
                4,
                failed(2, FailureClass::Ambiguous),
                &["reply r2 failed \"Canon request timed out\" retryable=false"],
            ),
        ],
    );
    // Nothing is kept for a turn-less send: no session, no pending plan.
    assert!(machine.sessions.is_empty());
}

/// turns.md §3.6 and §4.6: a 10 KB turn-less send splits into parts of at
/// most 3,800 bytes with ids `base-part-i`, leading parts `progress` with
/// `suppress_auto_reply`, one `turn_complete` final, `messageChunk` with the
/// group id on every part, and no `turnId` or trail.
#[test]
fn turnless_ten_kilobyte_send_is_one_chunked_group() {
    let text: String = (0..200)
        .map(|i| format!("Cron line {i:03}: the nightly report says all is well.\n"))
        .collect();
    assert!(text.len() > 10_000);
    let random = 42;
    let mut machine = TurnMachine::new(TurnConfig::default());
    let effects = machine.handle(turnless_send(1, &text, Value::Null, random), 0);
    assert_eq!(
        effects.iter().map(describe).collect::<Vec<_>>(),
        ["deliver op1 send_to conv-1 [part-1 progress 3795B, part-2 progress 3795B, part-3 turn_complete 2808B]"]
    );
    let delivery = only_delivery(&effects);
    let base = StandaloneGroup::new(C1, random).base_id().to_owned();
    let count = delivery.parts.len();
    for (i, part) in delivery.parts.iter().enumerate() {
        let index = i + 1;
        assert!(part.text.len() <= 3_800, "part {index}");
        assert_eq!(
            part.message_id.as_deref(),
            Some(format!("{base}-part-{index}").as_str())
        );
        let chunk = format!(
            r#""messageChunk":{{"type":"text","index":{index},"count":{count},"groupId":"{base}"}}"#
        );
        let expected = if index < count {
            format!(
                r#"{{"turnSemantics":"progress","replyBehavior":"suppress_auto_reply",{chunk}}}"#
            )
        } else {
            format!(r#"{{"turnSemantics":"turn_complete","turnComplete":true,{chunk}}}"#)
        };
        assert_eq!(compact(&part.metadata), expected, "part {index}");
    }
    let texts: Vec<&str> = delivery.parts.iter().map(|p| p.text.as_str()).collect();
    assert_eq!(texts.join("\n"), text, "each line cut consumes one newline");
}

/// The Hermes metadata of a turn-less send stays on every part (cron's
/// `job_id` under `metadata.hermes`, or a `canon_metadata` bag); `replyTo`
/// rides on every part, content options on the final part only.
#[test]
fn turnless_send_keeps_the_hermes_metadata() {
    let text = "word ".repeat(1_000);
    let mut machine = TurnMachine::new(TurnConfig::default());
    let cron = only_delivery(&machine.handle(
        turnless_send(1, &text, json!({"job_id": "job-7", "nested": {"a": 1}}), 3),
        0,
    ));
    assert_eq!(cron.parts.len(), 2);
    let base = StandaloneGroup::new(C1, 3).base_id().to_owned();
    assert_eq!(
        compact(&cron.parts[0].metadata),
        format!(
            r#"{{"hermes":{{"job_id":"job-7"}},"turnSemantics":"progress","replyBehavior":"suppress_auto_reply","messageChunk":{{"type":"text","index":1,"count":2,"groupId":"{base}"}}}}"#
        )
    );
    assert_eq!(
        compact(&cron.parts[1].metadata),
        format!(
            r#"{{"hermes":{{"job_id":"job-7"}},"turnSemantics":"turn_complete","turnComplete":true,"messageChunk":{{"type":"text","index":2,"count":2,"groupId":"{base}"}}}}"#
        )
    );

    let mut send = turnless_send(
        2,
        "Done.",
        json!({
            "canon_metadata": {"source": "cron", "turnTrail": [], "messageChunk": {}},
            "canon_options": {"mentions": ["u1"], "contentType": "x"},
        }),
        4,
    );
    if let Input::Send(host) = &mut send {
        host.reply_to = Some("m9".to_owned());
    }
    let bagged = only_delivery(&machine.handle(send, 1));
    let part = &bagged.parts[0];
    assert_eq!(
        compact(&part.metadata),
        r#"{"source":"cron","turnSemantics":"turn_complete","turnComplete":true}"#
    );
    assert_eq!(part.reply_to.as_deref(), Some("m9"));
    assert_eq!(compact(&part.options), r#"{"mentions":["u1"]}"#);
}

fn check_steps(machine: &mut TurnMachine, steps: Vec<Step>) {
    for (index, (now, input, expected)) in steps.into_iter().enumerate() {
        let shown = format!("{input:?}");
        let got: Vec<String> = machine.handle(input, now).iter().map(describe).collect();
        let want: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(got, want, "step {index} at {now} ms: {shown}");
    }
}

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
        // A negative resolution also publishes `tool` (OQ-3).
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

fn dequeue(start: ProcessingStart, interrupted: bool) -> Input {
    Input::QueueDequeued { start, interrupted }
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
    })
}

/// The opening of `T1` for `m1` with a streamed, not yet finalized answer.
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
/// once, the previous answer's late edits stay in the running turn, and the
/// follow-up's first send (replying to it) closes that turn with its own
/// final and opens the new one under the answered id.
#[test]
fn dequeue_boundary_waits_for_the_follow_ups_first_send() {
    let mut steps = streaming_first_turn();
    steps.extend::<Vec<Step>>(vec![
        (2, dequeue(follow_up(3, "m2", 2), false), &["reply r3 started T2"]),
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
            "ack conv-1 m2",
            "read conv-1",
            "turn thinking T2 q=2 active=m2",
            "stream set T2 text=\"Answer two ▉\" blocks=[text:T2:1:running]",
            "turn streaming T2 q=2",
            "reply r6 preview T2",
        ]),
        (7, delivered(1), &[]),
        (757, Input::Timeout, &[
            "stream clear conv-1",
            "turn completed T1 q=2",
            "typing.resume conv-1",
        ]),
        (758, edit(7, "Answer two", true), &[
            "stream set T2 text=\"Answer two\" blocks=[text:T2:1:completed]",
            "turn streaming T2 q=2",
            "reply r7 preview T2",
        ]),
        (759, complete(8, Outcome::Success), &[
            "deliver op2 messages conv-1 [base turn_complete \"Answer two\" trail=[text:T2:1:completed]]",
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
            &["reply r3 started T2"],
        ),
        (
            3,
            send_replying(4, "Two ▉", Some("m2"), true, json!({"expect_edits": true})),
            &[
                "stream clear conv-1",
                "turn completed T1 q=2",
                "typing.resume conv-1",
                "ack conv-1 m2",
                "read conv-1",
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
        (2, dequeue(follow_up(3, "m2", 2), false), &["reply r3 started T2"]),
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
            "ack conv-1 m2",
            "read conv-1",
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
            &["reply r3 started T2"],
        ),
        (
            3,
            tool_started("call_1", "search"),
            &[
                "stream clear conv-1",
                "turn completed T1 q=2",
                "typing.resume conv-1",
                "ack conv-1 m2",
                "read conv-1",
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
            &["reply r3 started T2"],
        ),
        (
            3,
            dequeue(follow_up(4, "m3", 3), false),
            &[
                "stream clear conv-1",
                "turn completed T1 q=2",
                "typing.resume conv-1",
                "ack conv-1 m2",
                "read conv-1",
                "turn thinking T2 q=2 active=m2",
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
                "ack conv-1 m3",
                "read conv-1",
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
        (2, dequeue(follow_up(3, "m2", 2), true), &["reply r3 started T2"]),
        (3, edit(4, "Answer one", true), &[
            "stream set T1 text=\"Answer one\" blocks=[text:T1:1:completed]",
            "turn streaming T1 q=0",
            "reply r4 preview T1",
        ]),
        (4, send_replying(5, "Two ▉", Some("m2"), false, json!({"expect_edits": true})), &[
            "stream clear conv-1",
            "turn interrupted T1 q=2",
            "typing.resume conv-1",
            "ack conv-1 m2",
            "read conv-1",
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
        // No session and two open turns: treated as turn-less (§7.6), so
        // a plain send is durable immediately under its own standalone id
        // group (§4.6).
        (
            3,
            send_with(4, None, "Who?", Value::Null),
            &["deliver op1 send_to conv-1 [base turn_complete \"Who?\"]"],
        ),
        (4, delivered(1), &["reply r4 delivered canon-msg-1"]),
    ]);
}

/// turns.md §4.6: a standalone send is chunked under a fresh id group to
/// the home channel; without any target it fails with the exact message.
#[test]
fn standalone_sends() {
    let standalone = |request, chat: Option<&str>, home: Option<&str>, text: &str| {
        Input::Standalone(StandaloneSend {
            request: RequestId(request),
            chat_id: chat.map(str::to_owned),
            home_channel_env: home.map(str::to_owned),
            home_channel_config: None,
            text: text.to_owned(),
            media: None,
            random: 7,
        })
    };
    let long = "cron line\n".repeat(500);
    check(vec![
        (0, standalone(1, None, None, "x"), &[
            "reply r1 standalone err \"Canon standalone send failed: no conversation ID provided\"",
        ]),
        (1, standalone(2, Some(" "), Some("home-1"), &long), &[
            "deliver op1 send_to home-1 [part-1 progress 3799B, part-2 turn_complete 1200B]",
        ]),
        (2, delivered(1), &["reply r2 standalone ok canon-msg-1"]),
        (3, standalone(3, Some("conv-9"), None, "hi"), &[
            "deliver op2 send_to conv-9 [base turn_complete \"hi\"]",
        ]),
        (4, failed(2, FailureClass::Ambiguous), &[
            "reply r3 standalone err \"Canon standalone send failed: Canon request timed out\"",
        ]),
    ]);
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
        }],
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
/// waiting host requests are answered.
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
            "reply r4 failed \"Canon adapter disconnected\" retryable=false",
        ]),
        (5, delivered(1), &[]),
    ]);
    assert_eq!(machine.next_deadline(), None);
    assert_eq!(machine.open_turn(S1), None);
}

/// OQ-8: verbosity is resolved at turn open and frozen; an explicit
/// configuration wins over the conversation type.
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

// ----- Properties -----

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
        (0usize..8, 0u8..4).prop_map(|(pick, class)| Op::Outcome { pick, class }),
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
                _ => Err(DeliveryFailure {
                    class: FailureClass::Ambiguous,
                    error: "timed out".to_owned(),
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
                            // OQ-6: media is its own turn_complete under a
                            // fresh ordinal id of its turn, never reused.
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

/// OQ-9 support: the driver can ask whether a call's turn is silenced.
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

// ----- media (turns.md §7.6 media row, OQ-6) -----

fn image_payload() -> MediaPayload {
    MediaPayload {
        content_type: "image".to_owned(),
        attachments: vec![
            json!({"kind": "image", "url": "https://canon/files/a/b/c?token=t",
                                 "mimeType": "image/png", "fileName": "cat.png"}),
        ],
    }
}

fn media(request: u64, session: Option<&str>, caption: &str, random: u128) -> Input {
    Input::Media(HostMedia {
        request: RequestId(request),
        session_key: session.map(str::to_owned),
        conversation_id: C1.to_owned(),
        caption: caption.to_owned(),
        reply_to: None,
        metadata: Map::new(),
        media: image_payload(),
        random,
    })
}

fn deliveries(effects: &[Effect]) -> Vec<Delivery> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deliver(d) => Some(d.clone()),
            _ => None,
        })
        .collect()
}

/// OQ-6: media in an open turn is its own durable `turn_complete` with the
/// turn id and the peeked trail, under the id of the turn's next ordinal;
/// its success consumes the activity, and the final takes the ordinal after.
#[test]
fn media_in_an_open_turn_is_its_own_turn_complete_under_the_next_ordinal() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m1", 4), 0);
    machine.handle(tool_started("call-1", "search"), 1);
    machine.handle(tool_finished("call-1", "search"), 2);
    let sent = machine.handle(media(2, Some(S1), "Here it is", rand(7)), 3);
    let delivery = only_delivery(&sent);
    assert_eq!(delivery.route, Route::Messages);
    assert_eq!(delivery.turn_id.as_deref(), Some(turn_id(4).as_str()));
    let [part] = delivery.parts.as_slice() else {
        panic!("one part: {delivery:?}");
    };
    assert_eq!(
        part.message_id,
        stable_final_message_id(C1, Some(&turn_id(4)), Ordinal::FIRST)
    );
    assert_eq!(part.text, "Here it is");
    assert_eq!(part.metadata["turnSemantics"], "turn_complete");
    assert_eq!(part.metadata["turnId"], json!(turn_id(4)));
    assert!(part.metadata.contains_key("turnTrail"), "{part:?}");
    assert_eq!(part.content_type.as_deref(), Some("image"));
    assert_eq!(part.attachments, image_payload().attachments);
    let done = machine.handle(delivered(delivery.op.0), 4);
    assert_eq!(
        done.iter().map(describe).collect::<Vec<_>>(),
        ["reply r2 delivered canon-msg-1"]
    );
    machine.handle(preview(3, "All done"), 5);
    machine.handle(edit(4, "All done", true), 6);
    let closed = machine.handle(complete(5, Outcome::Success), 7);
    let [flush] = deliveries(&closed).try_into().expect("one flush");
    let final_part = &flush.parts[0];
    assert_eq!(
        final_part.message_id,
        stable_final_message_id(C1, Some(&turn_id(4)), Ordinal::FIRST.next())
    );
    let trail = final_part.metadata["turnTrail"]
        .as_array()
        .expect("a trail");
    assert!(
        trail.iter().all(|b| b["kind"] == "text"),
        "the media consumed the tool activity: {final_part:?}"
    );
    assert!(final_part.attachments.is_empty());
    assert_eq!(final_part.content_type, None);
}

/// A media send that fails ambiguously still uses up its ordinal, so the
/// final can never collide with a media message Canon may have stored.
#[test]
fn failed_media_uses_up_its_ordinal() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m1", 4), 0);
    let sent = machine.handle(media(2, Some(S1), "", rand(7)), 1);
    let delivery = only_delivery(&sent);
    assert_eq!(delivery.parts[0].text, "");
    check_steps(
        &mut machine,
        vec![(
            2,
            failed(delivery.op.0, FailureClass::Ambiguous),
            &["reply r2 failed \"Canon request timed out\" retryable=false"],
        )],
    );
    let again = only_delivery(&machine.handle(media(3, Some(S1), "", rand(7)), 3));
    assert_eq!(
        again.parts[0].message_id,
        stable_final_message_id(C1, Some(&turn_id(4)), Ordinal::FIRST.next())
    );
}

/// A silenced turn answers media with success and writes nothing.
#[test]
fn media_in_a_silenced_turn_is_suppressed_with_success() {
    check(vec![
        (
            0,
            start(1, "m1", 4),
            &[
                "read conv-1",
                "turn thinking T4 q=0 active=m1",
                "reply r1 started T4",
            ],
        ),
        (
            1,
            no_reply(2, None, true),
            &[
                "no_reply record conv-1 m1 given",
                "reply r2 no_reply ack conv-1",
            ],
        ),
        (
            2,
            media(3, Some(S1), "pic", rand(7)),
            &["reply r3 silenced T4"],
        ),
    ]);
}

/// Out of turn, media is a fresh standalone id group through `send_to`
/// with the attachments on the final part only.
#[test]
fn media_out_of_turn_is_a_standalone_group_with_media_on_the_final_part() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    let caption = "word ".repeat(1_000);
    let delivery = only_delivery(&machine.handle(media(1, None, &caption, rand(5)), 0));
    assert_eq!(delivery.route, Route::SendTo);
    assert_eq!(delivery.turn_id, None);
    assert_eq!(delivery.parts.len(), 2);
    let group = StandaloneGroup::new(C1, rand(5));
    assert_eq!(
        delivery.parts[1].message_id.as_deref(),
        Some(format!("{}-part-2", group.base_id()).as_str())
    );
    assert!(delivery.parts[0].attachments.is_empty());
    assert_eq!(delivery.parts[0].content_type, None);
    assert_eq!(delivery.parts[1].attachments, image_payload().attachments);
    assert_eq!(delivery.parts[1].content_type.as_deref(), Some("image"));
    assert!(delivery
        .parts
        .iter()
        .all(|p| !p.metadata.contains_key("turnId")));
    let other = only_delivery(&machine.handle(media(2, None, "x", rand(6)), 1));
    assert_ne!(other.parts[0].message_id, delivery.parts[1].message_id);
}

/// `standalone.send` with media: the attachments ride on the final part.
#[test]
fn standalone_media_rides_on_the_final_part() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    let effects = machine.handle(
        Input::Standalone(StandaloneSend {
            request: RequestId(1),
            chat_id: Some(C1.to_owned()),
            home_channel_env: None,
            home_channel_config: None,
            text: "word ".repeat(1_000),
            media: Some(image_payload()),
            random: rand(3),
        }),
        0,
    );
    let delivery = only_delivery(&effects);
    assert_eq!(delivery.parts.len(), 2);
    assert!(delivery.parts[0].attachments.is_empty());
    assert_eq!(delivery.parts[1].attachments.len(), 1);
}
