//! Tests for answer plans: the turns.md §3.8 worked example, single-part
//! and standalone plans, the metadata guard and unbounded part counts.

use serde_json::json;

use super::*;
use crate::ids::{stable_final_message_id, Ordinal};
use crate::split::split_text;

const TURN: &str = "hermes-0123456789abcdef0123";
const BASE: &str = "hermes-final-df21a8694795b86bba2a5e77c3660bfd";

fn compact(map: &Map<String, Value>) -> String {
    serde_json::to_string(map).expect("serializable")
}

/// Expected shape of one planned part: index, role, byte length, id and
/// compact metadata JSON.
struct Expected<'e> {
    len: usize,
    role: PartRole,
    id: Option<&'e str>,
    metadata: &'e str,
}

fn check_plan(spec: AnswerSpec<'_>, expected: &[Expected<'_>]) {
    let plan = plan_answer(spec).expect("valid budget");
    assert_eq!(plan.parts().len(), expected.len());
    for (i, (part, want)) in plan.parts().iter().zip(expected).enumerate() {
        assert_eq!(part.index(), i + 1);
        assert_eq!(part.role(), want.role, "part {}", i + 1);
        assert_eq!(part.text().len(), want.len, "part {}", i + 1);
        assert_eq!(part.message_id(), want.id, "part {}", i + 1);
        assert_eq!(compact(part.metadata()), want.metadata, "part {}", i + 1);
    }
    assert_eq!(plan.leading_parts().len(), expected.len() - 1);
    assert_eq!(plan.final_part().index(), expected.len());
    assert_eq!(plan.is_split(), expected.len() > 1);
}

fn trail_block(id: &str, sequence: u64, kind: &str, extra: Value) -> Value {
    let mut block = json!({"id": id, "turnId": TURN, "kind": kind, "status": "completed", "sequence": sequence});
    if let (Value::Object(block), Value::Object(extra)) = (&mut block, extra) {
        block.extend(extra);
    }
    block
}

#[test]
fn spec_3_8_example_final_part() {
    let answer = "word ".repeat(1000);
    let answer = answer.trim();
    assert_eq!(answer.len(), 4999);
    let compacted = format!("{}...", answer.chars().take(277).collect::<String>());
    let base = stable_final_message_id("conv-1", Some(TURN), Ordinal::FIRST).unwrap();
    assert_eq!(base, BASE);

    let mut spec = AnswerSpec::new(answer);
    spec.base_id = Some(&base);
    spec.turn_id = Some(TURN);
    spec.turn_trail = vec![
        trail_block(
            "text:hermes-0123456789abcdef0123:1",
            1,
            "text",
            json!({"text": "Checking."}),
        ),
        trail_block(
            "tool:call_1",
            2,
            "tool",
            json!({"title": "web_search", "text": "ok", "summary": "12 ms"}),
        ),
        trail_block(
            "text:hermes-0123456789abcdef0123:2",
            3,
            "text",
            json!({"text": compacted}),
        ),
    ];
    check_plan(
        spec,
        &[
            Expected {
                len: 3799,
                role: PartRole::Leading,
                id: Some("hermes-final-df21a8694795b86bba2a5e77c3660bfd-part-1"),
                metadata: r#"{"turnId":"hermes-0123456789abcdef0123","turnSemantics":"progress","replyBehavior":"suppress_auto_reply","messageChunk":{"type":"text","index":1,"count":2,"groupId":"hermes-final-df21a8694795b86bba2a5e77c3660bfd"}}"#,
            },
            Expected {
                len: 1199,
                role: PartRole::Final,
                id: Some("hermes-final-df21a8694795b86bba2a5e77c3660bfd-part-2"),
                metadata: r#"{"turnSemantics":"turn_complete","turnComplete":true,"turnId":"hermes-0123456789abcdef0123","messageChunk":{"type":"text","index":2,"count":2,"groupId":"hermes-final-df21a8694795b86bba2a5e77c3660bfd"},"turnTrail":[{"id":"text:hermes-0123456789abcdef0123:1","turnId":"hermes-0123456789abcdef0123","kind":"text","status":"completed","sequence":1,"text":"Checking."},{"id":"tool:call_1","turnId":"hermes-0123456789abcdef0123","kind":"tool","status":"completed","sequence":2,"title":"web_search","text":"ok","summary":"12 ms"}]}"#,
            },
        ],
    );
}

#[test]
fn single_part_answer_uses_the_bare_id_and_keeps_its_speech() {
    let mut spec = AnswerSpec::new("Short answer.");
    spec.base_id = Some(BASE);
    spec.turn_id = Some(TURN);
    spec.metadata = match json!({"hermes": {"thread": "t1"}}) {
        Value::Object(map) => map,
        _ => unreachable!("a JSON object literal"),
    };
    spec.turn_trail = vec![json!({"kind": "text", "text": "Short answer."})];
    check_plan(
        spec,
        &[Expected {
            len: 13,
            role: PartRole::Final,
            id: Some(BASE),
            metadata: r#"{"hermes":{"thread":"t1"},"turnSemantics":"turn_complete","turnComplete":true,"turnId":"hermes-0123456789abcdef0123","turnTrail":[{"kind":"text","text":"Short answer."}]}"#,
        }],
    );
}

#[test]
fn empty_answer_is_one_empty_part() {
    let plan = plan_answer(AnswerSpec::new("")).unwrap();
    assert_eq!(plan.parts().len(), 1);
    assert_eq!(plan.final_part().text(), "");
    assert_eq!(plan.base_id(), None);
}

#[test]
fn spec_4_6_standalone_plan() {
    let group = StandaloneGroup::new("conv-1", 0);
    let text = "a".repeat(8000);
    let group_id = r#""groupId":"hermes-final-8407b15cd11138229a5aabec0600b30a"}"#;
    let leading = |index: usize| {
        format!(
            r#"{{"turnSemantics":"progress","replyBehavior":"suppress_auto_reply","messageChunk":{{"type":"text","index":{index},"count":3,{group_id}}}"#
        )
    };
    let last = format!(
        r#"{{"turnSemantics":"turn_complete","turnComplete":true,"messageChunk":{{"type":"text","index":3,"count":3,{group_id}}}"#
    );
    let (first, second) = (leading(1), leading(2));
    check_plan(
        AnswerSpec::standalone(&text, &group),
        &[
            Expected {
                len: 3800,
                role: PartRole::Leading,
                id: Some("hermes-final-8407b15cd11138229a5aabec0600b30a-part-1"),
                metadata: &first,
            },
            Expected {
                len: 3800,
                role: PartRole::Leading,
                id: Some("hermes-final-8407b15cd11138229a5aabec0600b30a-part-2"),
                metadata: &second,
            },
            Expected {
                len: 400,
                role: PartRole::Final,
                id: Some("hermes-final-8407b15cd11138229a5aabec0600b30a-part-3"),
                metadata: &last,
            },
        ],
    );
}

#[test]
fn no_base_id_means_no_ids_and_no_group() {
    let text = "b".repeat(3801);
    let mut spec = AnswerSpec::new(&text);
    spec.base_id = Some("");
    check_plan(
        spec,
        &[
            Expected {
                len: 3800,
                role: PartRole::Leading,
                id: None,
                metadata: r#"{"turnSemantics":"progress","replyBehavior":"suppress_auto_reply","messageChunk":{"type":"text","index":1,"count":2}}"#,
            },
            Expected {
                len: 1,
                role: PartRole::Final,
                id: None,
                metadata: r#"{"turnSemantics":"turn_complete","turnComplete":true,"messageChunk":{"type":"text","index":2,"count":2}}"#,
            },
        ],
    );
}

#[test]
fn metadata_guard_drops_an_oversized_trail() {
    // 1,400 astral characters: about 1,430 cp of JSON but about 2,830 u16,
    // so two such blocks pass a code-point guard and fail the u16 one.
    let emoji = "😀".repeat(1400);
    let mut spec = AnswerSpec::new("answer");
    spec.turn_id = Some(TURN);
    spec.turn_trail = vec![
        json!({"kind": "tool", "text": emoji}),
        json!({"kind": "tool", "text": emoji}),
    ];
    let plan = plan_answer(spec).unwrap();
    assert!(plan.trail_dropped());
    assert_eq!(
        compact(plan.final_part().metadata()),
        r#"{"turnSemantics":"turn_complete","turnComplete":true,"turnId":"hermes-0123456789abcdef0123"}"#
    );

    let mut spec = AnswerSpec::new("answer");
    spec.turn_trail = vec![json!({"kind": "tool", "text": emoji})];
    let plan = plan_answer(spec).unwrap();
    assert!(!plan.trail_dropped());
    assert!(plan.final_part().metadata().contains_key(KEY_TURN_TRAIL));
}

#[test]
fn a_mebibyte_answer_arrives_complete() {
    let line = "שלום עולם, hello world 😀 e\u{301}\n";
    let text = line.repeat((1 << 20) / line.len() + 1);
    assert!(text.len() >= 1 << 20);
    let mut spec = AnswerSpec::new(&text);
    spec.base_id = Some(BASE);
    spec.turn_id = Some(TURN);
    let plan = plan_answer(spec).unwrap();
    let count = plan.parts().len();
    assert!(count >= 276, "{count} parts");
    assert_eq!(
        plan.parts()
            .iter()
            .map(PlannedPart::text)
            .collect::<Vec<_>>(),
        split_text(&text, CHUNKED_TEXT_MAX_BYTES, Boundary::Grapheme).unwrap()
    );
    let mut ids = std::collections::BTreeSet::new();
    for part in plan.parts() {
        assert!(part.text().len() <= CHUNKED_TEXT_MAX_BYTES);
        let final_part = part.index() == count;
        assert_eq!(part.role() == PartRole::Final, final_part);
        let semantics = part.metadata()["turnSemantics"].as_str();
        assert_eq!(
            semantics,
            Some(if final_part {
                "turn_complete"
            } else {
                "progress"
            })
        );
        assert_eq!(part.metadata()["messageChunk"]["count"], json!(count));
        assert_eq!(part.metadata()["messageChunk"]["groupId"], json!(BASE));
        assert_eq!(
            part.message_id(),
            Some(format!("{BASE}-part-{}", part.index())).as_deref()
        );
        assert!(ids.insert(part.message_id().map(str::to_owned)));
    }
    // Every part is a consecutive slice of the answer, in order.
    let mut offset = 0;
    for part in plan.parts() {
        let start = text[offset..]
            .find(part.text())
            .expect("part comes from the answer");
        assert!(start <= 2, "at most one separator between parts");
        offset += start + part.text().len();
    }
    assert_eq!(offset, text.len());
}

#[test]
fn replays_compare_by_texts() {
    let text = "x".repeat(5000);
    let plan = |base: Option<&'static str>| {
        let mut spec = AnswerSpec::new(&text);
        spec.base_id = base;
        plan_answer(spec).unwrap()
    };
    assert!(plan(Some(BASE)).same_texts(&plan(None)));
    let other = "y".repeat(5000);
    assert!(!plan(None).same_texts(&plan_answer(AnswerSpec::new(&other)).unwrap()));
    assert_eq!(plan(Some(BASE)), plan(Some(BASE)));
}

#[test]
fn tiny_budget_is_refused() {
    let mut spec = AnswerSpec::new("abc");
    spec.max_bytes = 3;
    assert_eq!(
        plan_answer(spec).unwrap_err(),
        SplitError::BudgetTooSmall { max_bytes: 3 }
    );
}
