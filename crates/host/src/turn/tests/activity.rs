//! Tests of tool activity in a turn: a tool call seals the live bubble and the final carries
//! the ordered trail, while the pre-tool text that Hermes' stream consumer closes late (or
//! sends already final) stays out of the answer.

use serde_json::{json, Value};

use super::support::*;
use crate::turn::*;

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
