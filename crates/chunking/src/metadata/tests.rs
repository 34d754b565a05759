//! Tests for the descriptor, leading-part metadata and the chunked-final
//! strip (turns.md §3.6–§3.7). Expected values are compact JSON strings, so
//! key order is checked too.

use serde_json::json;

use super::*;

const BASE: &str = "hermes-final-df21a8694795b86bba2a5e77c3660bfd";

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn compact(map: &Map<String, Value>) -> String {
    serde_json::to_string(map).expect("serializable")
}

fn check_descriptor(chunk: MessageChunk, expected: &str) {
    assert_eq!(serde_json::to_string(&chunk.to_json()).unwrap(), expected);
}

fn check_leading(final_metadata: Value, chunk: MessageChunk, expected: &str) {
    let leading = leading_part_metadata(&object(final_metadata), &chunk);
    assert_eq!(compact(&leading), expected);
}

fn check_strip(metadata: Value, answer: &str, expected: Value, expected_removed: bool) {
    let mut metadata = object(metadata);
    let removed = strip_chunked_final_text_blocks(&mut metadata, answer);
    assert_eq!(compact(&metadata), compact(&object(expected)));
    assert_eq!(removed, expected_removed);
}

#[test]
fn descriptor_key_order_and_group_id() {
    check_descriptor(
        MessageChunk::new(1, 3, Some(BASE)),
        r#"{"type":"text","index":1,"count":3,"groupId":"hermes-final-df21a8694795b86bba2a5e77c3660bfd"}"#,
    );
    check_descriptor(
        MessageChunk::new(2, 2, None),
        r#"{"type":"text","index":2,"count":2}"#,
    );
    check_descriptor(
        MessageChunk::new(2, 2, Some("")),
        r#"{"type":"text","index":2,"count":2}"#,
    );
    let hand_built = MessageChunk {
        index: 1,
        count: 2,
        group_id: Some(String::new()),
    };
    check_descriptor(hand_built, r#"{"type":"text","index":1,"count":2}"#);
}

#[test]
fn spec_3_6_leading_part_example() {
    check_leading(
        json!({
            "turnSemantics": "turn_complete",
            "turnComplete": true,
            "turnId": "hermes-x",
            "messageChunk": {"type": "text", "index": 3, "count": 3, "groupId": BASE},
            "turnTrail": [{"id": "tool:call_1", "kind": "tool"}],
        }),
        MessageChunk::new(1, 3, Some(BASE)),
        r#"{"turnId":"hermes-x","turnSemantics":"progress","replyBehavior":"suppress_auto_reply","messageChunk":{"type":"text","index":1,"count":3,"groupId":"hermes-final-df21a8694795b86bba2a5e77c3660bfd"}}"#,
    );
}

#[test]
fn leading_parts_keep_other_keys_in_place() {
    // An existing replyBehavior keeps its position and is overwritten.
    check_leading(
        json!({"hermes": {"a": 1}, "replyBehavior": "allow_auto_reply", "turnSemantics": "turn_complete", "z": null}),
        MessageChunk::new(2, 5, None),
        r#"{"hermes":{"a":1},"replyBehavior":"suppress_auto_reply","z":null,"turnSemantics":"progress","messageChunk":{"type":"text","index":2,"count":5}}"#,
    );
    check_leading(
        json!({}),
        MessageChunk::new(1, 2, Some(BASE)),
        r#"{"turnSemantics":"progress","replyBehavior":"suppress_auto_reply","messageChunk":{"type":"text","index":1,"count":2,"groupId":"hermes-final-df21a8694795b86bba2a5e77c3660bfd"}}"#,
    );
}

#[test]
fn turn_complete_metadata_order() {
    let base = turn_complete_metadata(object(json!({"hermes": {"k": "v"}})), Some("hermes-x"));
    assert_eq!(
        compact(&base),
        r#"{"hermes":{"k":"v"},"turnSemantics":"turn_complete","turnComplete":true,"turnId":"hermes-x"}"#
    );
    let standalone = turn_complete_metadata(Map::new(), None);
    assert_eq!(
        compact(&standalone),
        r#"{"turnSemantics":"turn_complete","turnComplete":true}"#
    );
    let overwritten = turn_complete_metadata(
        object(json!({"turnSemantics": "progress", "a": 1})),
        Some(""),
    );
    assert_eq!(
        compact(&overwritten),
        r#"{"turnSemantics":"turn_complete","a":1,"turnComplete":true}"#
    );
}

#[test]
fn vocabulary_wire_values() {
    assert_eq!(TurnSemantics::Progress.as_str(), "progress");
    assert_eq!(TurnSemantics::TurnComplete.as_str(), "turn_complete");
    assert_eq!(TurnSemantics::Control.as_str(), "control");
    assert_eq!(ReplyBehavior::AllowAutoReply.as_str(), "allow_auto_reply");
    assert_eq!(
        ReplyBehavior::SuppressAutoReply.as_str(),
        "suppress_auto_reply"
    );
}

fn speech(text: &str) -> Value {
    json!({"id": "text:t:1", "kind": "text", "status": "completed", "text": text})
}

fn tool() -> Value {
    json!({"id": "tool:call_1", "kind": "tool", "status": "completed", "text": "ok"})
}

#[test]
fn strip_exact_answer_keeps_earlier_speech() {
    check_strip(
        json!({"turnId": "t", "turnTrail": [speech("Checking."), tool(), speech("the answer")], "after": 1}),
        "the answer",
        json!({"turnId": "t", "turnTrail": [speech("Checking."), tool()], "after": 1}),
        true,
    );
}

#[test]
fn strip_compacted_prefix() {
    let answer = "ש".repeat(300);
    let compacted = format!("{}...", "ש".repeat(277));
    check_strip(
        json!({"turnTrail": [tool(), speech(&compacted)]}),
        &answer,
        json!({"turnTrail": [tool()]}),
        true,
    );
    // 279 cp ending in "..." is not the compacted form.
    let short = format!("{}...", "ש".repeat(276));
    check_strip(
        json!({"turnTrail": [speech(&short)]}),
        &answer,
        json!({"turnTrail": [speech(&short)]}),
        false,
    );
    // 280 cp whose prefix is not the answer's.
    let other = format!("{}...", "x".repeat(277));
    check_strip(
        json!({"turnTrail": [speech(&other)]}),
        &answer,
        json!({"turnTrail": [speech(&other)]}),
        false,
    );
    // 280 cp without the ellipsis.
    let no_dots = "ש".repeat(280);
    check_strip(
        json!({"turnTrail": [speech(&no_dots)]}),
        &answer,
        json!({"turnTrail": [speech(&no_dots)]}),
        false,
    );
}

#[test]
fn strip_examines_only_the_latest_speech_block() {
    // The earlier block duplicates the answer, the latest does not: no change.
    check_strip(
        json!({"turnTrail": [speech("answer"), tool(), speech("other")]}),
        "answer",
        json!({"turnTrail": [speech("answer"), tool(), speech("other")]}),
        false,
    );
    // A latest speech block without string text stops the scan.
    let odd = json!({"kind": "text", "text": 7});
    check_strip(
        json!({"turnTrail": [speech("answer"), odd.clone()]}),
        "answer",
        json!({"turnTrail": [speech("answer"), odd]}),
        false,
    );
    // Non-objects and other kinds are skipped.
    check_strip(
        json!({"turnTrail": [speech("answer"), "junk", 3, tool(), {"kind": "status", "text": "answer"}]}),
        "answer",
        json!({"turnTrail": ["junk", 3, tool(), {"kind": "status", "text": "answer"}]}),
        true,
    );
}

#[test]
fn strip_removes_an_emptied_trail() {
    check_strip(
        json!({"a": 1, "turnTrail": [speech("x")], "b": 2}),
        "x",
        json!({"a": 1, "b": 2}),
        true,
    );
    // An empty trail is removed too, as the reference does.
    check_strip(
        json!({"a": 1, "turnTrail": []}),
        "x",
        json!({"a": 1}),
        false,
    );
}

#[test]
fn strip_ignores_a_trail_that_is_not_an_array() {
    check_strip(
        json!({"turnTrail": {"kind": "text"}}),
        "x",
        json!({"turnTrail": {"kind": "text"}}),
        false,
    );
    check_strip(
        json!({"turnTrail": null}),
        "x",
        json!({"turnTrail": null}),
        false,
    );
    check_strip(json!({"other": 1}), "x", json!({"other": 1}), false);
}

#[test]
fn metadata_length_counts_utf16_units() {
    assert_eq!(json_u16_len(&object(json!({"a": "b"}))), 9);
    // One astral character is 2 u16 (and 1 cp, 4 bytes).
    assert_eq!(json_u16_len(&object(json!({"a": "😀"}))), 10);
    assert_eq!(json_u16_len(&object(json!({"a": "ש"}))), 9);
    // Control characters are escaped as JSON.stringify does.
    assert_eq!(json_u16_len(&object(json!({"a": "\n"}))), 10);
}
