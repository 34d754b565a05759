//! Shared helpers of the turn-machine tests: the conversation and session constants, the
//! one-line rendering of effects ([`describe`]), the step checkers and builders for the inputs
//! the tests feed the machine.

use canon_dispatch::verbosity::ConversationType;
use serde_json::{json, Map, Value};

use crate::turn::*;

/// The conversation of the tests.
pub(super) const C1: &str = "conv-1";
/// The session of the direct conversation [`C1`].
pub(super) const S1: &str = "agent:main:canon:dm:conv-1";

/// Randomness that yields the turn id `hermes-<n>0000000000000000000`.
pub(super) fn rand(n: u8) -> u128 {
    u128::from(n) << 124
}

/// The turn id that `rand(n)` yields.
pub(super) fn turn_id(n: u8) -> String {
    canon_chunking::ids::turn_id_from_random(rand(n))
}

/// `text` with the turn ids of `rand(1)` to `rand(15)` shortened to `T` and the hex digit of n.
pub(super) fn short(text: &str) -> String {
    let mut out = text.to_owned();
    for n in 1..16u8 {
        out = out.replace(&turn_id(n), &format!("T{n:x}"));
    }
    out
}

/// The kind of a message id: `base`, `part-N` or `none`.
fn id_kind(id: Option<&str>) -> String {
    match id {
        None => "none".to_owned(),
        Some(id) => match id.rsplit_once("-part-") {
            Some((_, n)) => format!("part-{n}"),
            None => "base".to_owned(),
        },
    }
}

/// A short text quoted, or a long one as its length in bytes.
fn quoted(text: &str) -> String {
    if text.len() <= 24 {
        format!("{text:?}")
    } else {
        format!("{}B", text.len())
    }
}

/// Trail or live blocks as `[id:status,…]`.
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

/// A turn id the machine always sets, or `<none>` so a missing one shows.
fn id_or_none(id: Option<&str>) -> &str {
    id.unwrap_or("<none>")
}

/// The one-line rendering of an effect, with turn ids shortened by [`short`].
pub(super) fn describe(effect: &Effect) -> String {
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
        Effect::TurnClosed {
            session_key,
            turn_id,
        } => format!(
            "turn.closed {turn_id} ({})",
            session_key.rsplit(':').next().unwrap_or_default()
        ),
        Effect::FinalStored {
            session_key,
            trigger_message_id,
        } => format!(
            "final.stored ({}) {}",
            session_key.rsplit(':').next().unwrap_or_default(),
            trigger_message_id.as_deref().unwrap_or("-")
        ),
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
pub(super) type Step = (u64, Input, &'static [&'static str]);

/// Runs `steps` on a fresh machine with `config`, asserting each step's effect lines; the
/// machine afterwards.
pub(super) fn check_with(config: TurnConfig, steps: Vec<Step>) -> TurnMachine {
    let mut machine = TurnMachine::new(config);
    for (index, (now, input, expected)) in steps.into_iter().enumerate() {
        let shown = format!("{input:?}");
        // The session's inbox signal is checked by its own tests (`finals.rs`); these
        // transcripts show what Canon and the shim see.
        let got: Vec<String> = machine
            .handle(input, now)
            .iter()
            .filter(|e| !matches!(e, Effect::FinalStored { .. }))
            .map(describe)
            .collect();
        let want: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(got, want, "step {index} at {now} ms: {shown}");
    }
    machine
}

/// [`check_with`] with the default configuration.
pub(super) fn check(steps: Vec<Step>) -> TurnMachine {
    check_with(TurnConfig::default(), steps)
}

/// The start of processing of `message` by `human-1` in `session` and `conversation`, with
/// the turn id of `rand(n)`.
pub(super) fn start_in(
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
        absorbed_message_ids: Vec::new(),
        absorbed_queued_ids: Vec::new(),
        responder: Some("human-1".to_owned()),
        reply_authority: None,
        conversation_type: kind,
        queue_depth: 0,
        random: rand(n),
    }
}

/// [`start_in`] for the owner's direct session [`S1`] in [`C1`].
pub(super) fn start(request: u64, message: &str, n: u8) -> Input {
    Input::ProcessingStart(start_in(
        request,
        S1,
        C1,
        message,
        ConversationType::Direct,
        n,
    ))
}

/// The object `value` as a metadata map (empty for anything else).
pub(super) fn meta(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// A send in [`C1`] replying to `m1`, with this session, content and metadata.
pub(super) fn send_with(
    request: u64,
    session: Option<&str>,
    content: &str,
    metadata: Value,
) -> Input {
    Input::Send(HostSend {
        request: RequestId(request),
        session_key: session.map(str::to_owned),
        conversation_id: C1.to_owned(),
        content: content.to_owned(),
        reply_to: Some("m1".to_owned()),
        metadata: meta(metadata),
        random: rand(9),
        stop_notice: false,
    })
}

/// A previewing send of [`S1`] (`expect_edits`) replying to `m1`.
pub(super) fn preview(request: u64, content: &str) -> Input {
    send_with(
        request,
        Some(S1),
        content,
        json!({"expect_edits": true, "reply_to_message_id": "m1"}),
    )
}

/// An edit in [`C1`] with this session, content and finalize flag.
pub(super) fn edit_with(
    request: u64,
    session: Option<&str>,
    content: &str,
    finalize: bool,
) -> Input {
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

/// [`edit_with`] for the session [`S1`].
pub(super) fn edit(request: u64, content: &str, finalize: bool) -> Input {
    edit_with(request, Some(S1), content, finalize)
}

/// Processing complete for [`S1`] with `outcome` and an empty queue.
pub(super) fn complete(request: u64, outcome: Outcome) -> Input {
    Input::ProcessingComplete {
        request: RequestId(request),
        session_key: S1.to_owned(),
        conversation_id: C1.to_owned(),
        outcome,
        queue_depth: 0,
    }
}

/// A successful outcome of delivery `op`, stored as `canon-msg-1`.
pub(super) fn delivered(op: u64) -> Input {
    Input::DeliveryOutcome {
        op: OpId(op),
        result: Ok(Some("canon-msg-1".to_owned())),
    }
}

/// A failed outcome of delivery `op` in this failure class.
pub(super) fn failed(op: u64, class: FailureClass) -> Input {
    Input::DeliveryOutcome {
        op: OpId(op),
        result: Err(DeliveryFailure {
            class,
            error: "Canon request timed out".to_owned(),
            retryable: false,
        }),
    }
}

/// A tool call of [`S1`] starting.
pub(super) fn tool_started(call: &str, name: &str) -> Input {
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

/// A tool call of [`S1`] finishing with the result `ok`.
pub(super) fn tool_finished(call: &str, name: &str) -> Input {
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

/// A `no_reply` call of [`S1`] in [`C1`] with a reason, aimed at `target`, in a Canon context
/// when `in_canon`.
pub(super) fn no_reply(request: u64, target: Option<&str>, in_canon: bool) -> Input {
    Input::NoReply(NoReplyRequest {
        request: RequestId(request),
        in_canon_context: in_canon,
        session_key: Some(S1.to_owned()),
        conversation_id: Some(C1.to_owned()),
        target: target.map(str::to_owned),
        reason_given: true,
    })
}

/// A typing-on or typing-off call in [`C1`] with no status.
pub(super) fn typing(on: bool) -> Input {
    Input::Typing {
        conversation_id: C1.to_owned(),
        on,
        status: None,
    }
}

/// The one delivery among `effects`.
pub(super) fn only_delivery(effects: &[Effect]) -> Delivery {
    match effects {
        [Effect::Deliver(delivery)] => delivery.clone(),
        _ => panic!("expected exactly one delivery: {effects:?}"),
    }
}

/// Runs `steps` on `machine`, asserting each step's effect lines.
pub(super) fn check_steps(machine: &mut TurnMachine, steps: Vec<Step>) {
    for (index, (now, input, expected)) in steps.into_iter().enumerate() {
        let shown = format!("{input:?}");
        let got: Vec<String> = machine
            .handle(input, now)
            .iter()
            .filter(|e| !matches!(e, Effect::FinalStored { .. }))
            .map(describe)
            .collect();
        let want: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(got, want, "step {index} at {now} ms: {shown}");
    }
}

/// The media payload of one PNG image attachment.
pub(super) fn image_payload() -> MediaPayload {
    MediaPayload {
        content_type: "image".to_owned(),
        attachments: vec![
            json!({"kind": "image", "url": "https://canon/files/a/b/c?token=t",
                                 "mimeType": "image/png", "fileName": "cat.png"}),
        ],
    }
}
