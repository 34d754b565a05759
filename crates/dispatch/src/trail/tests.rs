//! Tests for compaction and the bounded final trail: the turns.md §3.8 example
//! blocks, each cut rule, both bounds, the metadata guard, and properties.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::*;

fn block(id: &str, kind: BlockKind, sequence: u64, text: Option<&str>) -> TrailBlock {
    TrailBlock {
        id: id.to_owned(),
        turn_id: "hermes-0123456789abcdef0123".to_owned(),
        kind,
        status: BlockStatus::Completed,
        sequence,
        title: None,
        text: text.map(str::to_owned),
        summary: None,
    }
}

fn trail_json(trail: &[TrailBlock]) -> String {
    json!({ "turnTrail": trail_to_json(trail) }).to_string()
}

#[test]
fn example_blocks_of_section_3_8() {
    let mut tool = block("tool:call_1", BlockKind::Tool, 2, Some("ok"));
    tool.title = Some("web_search".to_owned());
    tool.summary = Some("12 ms".to_owned());
    let answer = "x".repeat(4_999);
    let blocks = vec![
        block(
            "text:hermes-0123456789abcdef0123:3",
            BlockKind::Text,
            3,
            Some(&answer),
        ),
        tool,
        block(
            "text:hermes-0123456789abcdef0123:1",
            BlockKind::Text,
            1,
            Some("Checking."),
        ),
    ];
    let trail = final_turn_trail(&blocks);
    assert_eq!(trail.len(), 3);
    assert_eq!(
        trail[2].text.as_deref().map(|t| t.chars().count()),
        Some(280)
    );
    assert!(trail[2].text.as_deref().is_some_and(|t| t.ends_with("...")));
    let first_two = trail_to_json(&trail[..2]).to_string();
    assert_eq!(
        first_two,
        r#"[{"id":"text:hermes-0123456789abcdef0123:1","turnId":"hermes-0123456789abcdef0123","kind":"text","status":"completed","sequence":1,"text":"Checking."},{"id":"tool:call_1","turnId":"hermes-0123456789abcdef0123","kind":"tool","status":"completed","sequence":2,"title":"web_search","text":"ok","summary":"12 ms"}]"#
    );
}

#[test]
fn compaction_cuts_each_field_to_its_limit() {
    let long = TrailBlock {
        id: "i".repeat(121),
        turn_id: "t".repeat(120),
        kind: BlockKind::Plan,
        status: BlockStatus::Pending,
        sequence: 7,
        title: Some("é".repeat(81)),
        text: Some("😀".repeat(281)),
        summary: Some("s".repeat(121)),
    };
    let c = compact_trail_block(&long);
    assert_eq!(c.id, format!("{}...", "i".repeat(117)));
    assert_eq!(c.turn_id, "t".repeat(120));
    assert_eq!(c.title, Some(format!("{}...", "é".repeat(77))));
    assert_eq!(c.text, Some(format!("{}...", "😀".repeat(277))));
    assert_eq!(c.summary, Some(format!("{}...", "s".repeat(117))));
    assert_eq!(
        (c.kind, c.status, c.sequence),
        (BlockKind::Plan, BlockStatus::Pending, 7)
    );
}

#[test]
fn compaction_drops_empty_optionals_and_keeps_empty_ids() {
    let mut b = block("", BlockKind::Status, 1, Some(""));
    b.turn_id = String::new();
    b.title = Some(String::new());
    let c = compact_trail_block(&b);
    assert_eq!(
        c.to_json().to_string(),
        r#"{"id":"","turnId":"","kind":"status","status":"completed","sequence":1}"#
    );
}

#[test]
fn lenient_kind_and_status() {
    assert_eq!(BlockKind::parse_lenient("subagent"), BlockKind::Status);
    assert_eq!(BlockKind::parse_lenient("tool"), BlockKind::Tool);
    assert_eq!(BlockStatus::parse_lenient(None), BlockStatus::Running);
    assert_eq!(
        BlockStatus::parse_lenient(Some("done")),
        BlockStatus::Running
    );
    assert_eq!(
        BlockStatus::parse_lenient(Some("blocked")),
        BlockStatus::Blocked
    );
}

#[test]
fn at_most_twenty_blocks() {
    let blocks: Vec<TrailBlock> = (1..=35)
        .map(|i| block(&format!("b{i}"), BlockKind::Tool, i, None))
        .collect();
    let trail = final_turn_trail(&blocks);
    assert_eq!(trail.len(), 20);
    assert_eq!(trail.last().map(|b| b.sequence), Some(20));
    assert_eq!(live_blocks(&blocks).len(), LIVE_MAX_BLOCKS);
}

#[test]
fn byte_bound_stops_at_the_first_block_that_does_not_fit() {
    // Each block with a 280-cp text is well over 300 bytes; a small one
    // after the cut must not be taken instead.
    let mut blocks: Vec<TrailBlock> = (1..=10)
        .map(|i| block(&format!("b{i}"), BlockKind::Text, i, Some(&"w".repeat(400))))
        .collect();
    blocks.push(block("small", BlockKind::Status, 11, Some("s")));
    let trail = final_turn_trail(&blocks);
    assert!(trail.len() < 10);
    assert!(trail.iter().all(|b| b.id != "small"));
    assert!(trail_json(&trail).len() <= FINAL_TRAIL_MAX_BYTES);
    let mut one_more = trail.clone();
    one_more.push(compact_trail_block(&blocks[trail.len()]));
    assert!(trail_json(&one_more).len() > FINAL_TRAIL_MAX_BYTES);
}

#[test]
fn byte_bound_is_inclusive() {
    let b = block("x", BlockKind::Text, 1, Some("y"));
    let exact = trail_json(&[compact_trail_block(&b)]).len();
    assert_eq!(
        build_bounded_turn_trail(std::slice::from_ref(&b), 20, exact).len(),
        1
    );
    assert_eq!(build_bounded_turn_trail(&[b], 20, exact - 1).len(), 0);
}

#[test]
fn sort_is_stable_by_sequence() {
    let blocks = vec![
        block("b", BlockKind::Tool, 2, None),
        block("a1", BlockKind::Tool, 1, None),
        block("a2", BlockKind::Tool, 1, None),
    ];
    let ids: Vec<String> = final_turn_trail(&blocks)
        .into_iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(ids, ["a1", "a2", "b"]);
}

#[test]
fn metadata_guard_counts_utf16_units() {
    let trail = vec![block("t", BlockKind::Text, 1, Some("hi"))];
    let mut metadata = Map::new();
    metadata.insert("turnSemantics".into(), json!("turn_complete"));
    let (with, attached) = attach_turn_trail(&metadata, &trail);
    assert!(attached);
    assert_eq!(
        with.keys().next_back().map(String::as_str),
        Some("turnTrail")
    );
    // Fill the metadata so the trail just fits in code points but not in
    // UTF-16 units: astral characters count twice.
    let trail_len = json_u16_length(&Value::Object(with.clone()));
    let room = METADATA_MAX_U16 - trail_len;
    let mut padded = metadata.clone();
    padded.insert("pad".into(), json!("😀".repeat(room / 2 + 1)));
    let (without, attached) = attach_turn_trail(&padded, &trail);
    assert!(!attached);
    assert!(!without.contains_key("turnTrail"));
    let mut fits = metadata.clone();
    fits.insert("pad".into(), json!("a".repeat(room - r#","pad":"""#.len())));
    let (with, attached) = attach_turn_trail(&fits, &trail);
    assert!(attached);
    assert_eq!(json_u16_length(&Value::Object(with)), METADATA_MAX_U16);
}

#[test]
fn metadata_guard_with_empty_trail_removes_the_key_and_keeps_order() {
    let mut metadata = Map::new();
    metadata.insert("a".into(), json!(1));
    metadata.insert("turnTrail".into(), json!([]));
    metadata.insert("b".into(), json!(2));
    let (out, attached) = attach_turn_trail(&metadata, &[]);
    assert!(!attached);
    assert_eq!(Value::Object(out).to_string(), r#"{"a":1,"b":2}"#);
}

fn arb_block() -> impl Strategy<Value = TrailBlock> {
    (
        ".{0,150}",
        ".{0,130}",
        0u8..6,
        0u64..50,
        prop::option::of(".{0,100}"),
        prop::option::of(".{0,400}"),
        prop::option::of(".{0,150}"),
    )
        .prop_map(
            |(id, turn_id, kind, sequence, title, text, summary)| TrailBlock {
                id,
                turn_id,
                kind: [
                    BlockKind::Text,
                    BlockKind::Tool,
                    BlockKind::Plan,
                    BlockKind::Approval,
                    BlockKind::Input,
                    BlockKind::Status,
                ][usize::from(kind)],
                status: BlockStatus::Running,
                sequence,
                title,
                text,
                summary,
            },
        )
}

proptest! {
    #[test]
    fn trail_bounds_always_hold(blocks in prop::collection::vec(arb_block(), 0..40), max_blocks in 0usize..25, max_bytes in 0usize..4000) {
        let trail = build_bounded_turn_trail(&blocks, max_blocks, max_bytes);
        prop_assert!(trail.len() <= max_blocks);
        if !trail.is_empty() {
            prop_assert!(trail_json(&trail).len() <= max_bytes);
        }
        // A prefix of the compacted, sequence-sorted blocks.
        let mut sorted = blocks.clone();
        sorted.sort_by_key(|b| b.sequence);
        for (got, original) in trail.iter().zip(&sorted) {
            prop_assert_eq!(got, &compact_trail_block(original));
        }
        // Maximal: the next block would break a bound.
        if trail.len() < sorted.len() && trail.len() < max_blocks {
            let mut next = trail.clone();
            next.push(compact_trail_block(&sorted[trail.len()]));
            prop_assert!(trail_json(&next).len() > max_bytes);
        }
        let final_trail = final_turn_trail(&blocks);
        prop_assert!(final_trail.len() <= FINAL_TRAIL_MAX_BLOCKS);
        prop_assert!(final_trail.is_empty() || trail_json(&final_trail).len() <= FINAL_TRAIL_MAX_BYTES);
    }

    #[test]
    fn compaction_bounds_hold(b in arb_block()) {
        let c = compact_trail_block(&b);
        prop_assert!(c.id.chars().count() <= COMPACT_ID_CHARS);
        prop_assert!(c.turn_id.chars().count() <= COMPACT_ID_CHARS);
        prop_assert!(c.title.as_ref().is_none_or(|t| !t.is_empty() && t.chars().count() <= COMPACT_TITLE_CHARS));
        prop_assert!(c.text.as_ref().is_none_or(|t| !t.is_empty() && t.chars().count() <= COMPACT_TEXT_CHARS));
        prop_assert!(c.summary.as_ref().is_none_or(|t| !t.is_empty() && t.chars().count() <= COMPACT_SUMMARY_CHARS));
        prop_assert_eq!(compact_trail_block(&c), c.clone());
    }
}
