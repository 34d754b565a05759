//! Tests for the turn protocol port: the fixture produced by the real
//! backend-contracts 8.6.1 (exact equality), the spec's tables, and
//! never-panic properties.

use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::test_support::arb_json;

fn fixture(name: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/dispatch")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(text.ends_with('\n'), "{name} must end with LF");
    assert!(!text.contains('\r'), "{name} must use LF line endings");
    text.lines()
        .map(|line| serde_json::from_str(line).expect("fixture line is JSON"))
        .collect()
}

fn decision_json(d: &Decision) -> Value {
    json!({"allow": d.allow, "semantics": d.semantics.as_str(), "reason": d.reason.as_str()})
}

#[test]
fn gate_fixture_matches_backend_contracts_exactly() {
    let cases = fixture("gate-cases.jsonl");
    assert!(
        cases.len() >= 1000,
        "expected the full generated fixture, got {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().expect("case name");
        let sender = case.get("sender_type").and_then(Value::as_str);
        let metadata = case.get("metadata");
        let decision = should_trigger_agent_turn(sender, metadata);
        if decision_json(&decision) != case["expected"] {
            failures.push(format!(
                "{name}: decision {} != {}",
                decision_json(&decision),
                case["expected"]
            ));
        }
        let semantics = resolve_turn_message_semantics(sender, metadata);
        if json!(semantics.as_str()) != case["resolved_semantics"] {
            failures.push(format!("{name}: semantics {semantics}"));
        }
        let normalized = normalize_turn_metadata(metadata).map_or(Value::Null, |m| m.to_json());
        if normalized != case["normalized"] {
            failures.push(format!(
                "{name}: normalized {normalized} != {}",
                case["normalized"]
            ));
        }
        let promote = should_promote_conversation_message(sender, metadata);
        if json!(promote) != case["promote"] {
            failures.push(format!("{name}: promote {promote}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn fixtures_are_sorted_by_unique_name() {
    for file in ["gate-cases.jsonl", "turn-state-cases.jsonl"] {
        let names: Vec<Vec<u16>> = fixture(file)
            .iter()
            .map(|case| {
                case["name"]
                    .as_str()
                    .expect("case name")
                    .encode_utf16()
                    .collect()
            })
            .collect();
        // The generator sorts with JavaScript's string order (UTF-16 units).
        assert!(
            names.windows(2).all(|w| w[0] < w[1]),
            "{file} is not sorted by unique name"
        );
    }
}

#[test]
fn turn_state_fixture_matches_backend_contracts_exactly() {
    let cases = fixture("turn-state-cases.jsonl");
    assert!(!cases.is_empty());
    for case in &cases {
        let name = case["name"].as_str().expect("case name");
        let now_ms = case["now_ms"].as_u64().expect("now_ms");
        let normalized = normalize_runtime_turn_state(&case["value"]);
        match (&normalized, &case["normalized"]) {
            (None, Value::Null) => {}
            (Some(state), Value::Object(expected)) => {
                assert_eq!(
                    Some(state.state.as_str()),
                    expected["state"].as_str(),
                    "{name}"
                );
                for (key, got) in [
                    ("openedAt", state.opened_at),
                    ("updatedAt", state.updated_at),
                    ("turnUpdatedAt", state.turn_updated_at),
                ] {
                    assert_eq!(
                        got,
                        expected.get(key).and_then(Value::as_f64),
                        "{name} {key}"
                    );
                }
                assert_eq!(
                    state
                        .to_json()
                        .as_object()
                        .map(|o| o.keys().cloned().collect::<Vec<_>>()),
                    Some(expected.keys().cloned().collect::<Vec<_>>()),
                    "{name}: key order"
                );
            }
            (got, expected) => panic!("{name}: normalized {got:?} != {expected}"),
        }
        let open = normalized.is_some_and(|s| s.is_open(now_ms));
        let stale = normalized.is_some_and(|s| s.is_stale(now_ms));
        assert_eq!(json!(open), case["open"], "{name}: open");
        assert_eq!(json!(stale), case["stale"], "{name}: stale");
        let threshold = normalized.map(|s| turn_state_stale_threshold_ms(s.state));
        assert_eq!(
            threshold.map_or(Value::Null, Value::from),
            case["threshold_ms"],
            "{name}: threshold"
        );
    }
}

/// One row of the turns.md §9.2 fallback table: sender, metadata,
/// expected allow, semantics and reason string.
fn check(sender: Option<&str>, metadata: Value, allow: bool, semantics: &str, reason: &str) {
    let d = should_trigger_agent_turn(sender, Some(&metadata));
    assert_eq!(
        (d.allow, d.semantics.as_str(), d.reason.as_str()),
        (allow, semantics, reason),
        "sender {sender:?} metadata {metadata}"
    );
}

#[test]
fn fallback_table_rows_of_section_9_2() {
    // Order 1: suppress wins for every sender.
    check(
        Some("human"),
        json!({"replyBehavior": "suppress_auto_reply"}),
        false,
        "turn_complete",
        "metadata explicitly suppresses auto-reply",
    );
    check(
        Some("ai_agent"),
        json!({"turnSemantics": "turn_complete", "replyBehavior": "suppress_auto_reply"}),
        false,
        "turn_complete",
        "metadata explicitly suppresses auto-reply",
    );
    check(
        None,
        json!({"turnSemantics": "progress", "replyBehavior": "suppress_auto_reply"}),
        false,
        "progress",
        "metadata explicitly suppresses auto-reply",
    );
    // Order 2: humans, whatever the semantics.
    check(
        Some("human"),
        json!({}),
        true,
        "turn_complete",
        "human messages always remain triggerable",
    );
    check(
        Some("human"),
        json!({"turnSemantics": "progress"}),
        true,
        "progress",
        "human messages always remain triggerable",
    );
    check(
        Some("human"),
        json!({"turnSemantics": "control", "replyBehavior": "allow_auto_reply"}),
        true,
        "control",
        "human messages always remain triggerable",
    );
    // Order 3 and 3'.
    check(
        Some("ai_agent"),
        json!({"turnSemantics": "progress"}),
        false,
        "progress",
        "non-final agent progress does not trigger other agents",
    );
    check(
        Some("ai_agent"),
        json!({}),
        false,
        "progress",
        "agent messages require explicit turn_complete semantics",
    );
    check(
        Some("ai_agent"),
        json!({"turnSemantics": "Turn_Complete"}),
        false,
        "progress",
        "agent messages require explicit turn_complete semantics",
    );
    check(
        Some("ai_agent"),
        json!({"turnSemantics": ["turn_complete"]}),
        false,
        "progress",
        "agent messages require explicit turn_complete semantics",
    );
    // Order 4.
    check(
        Some("ai_agent"),
        json!({"turnSemantics": "turn_complete"}),
        true,
        "turn_complete",
        "agent message is treated as turn-complete",
    );
    check(
        None,
        json!({"turnSemantics": "control"}),
        true,
        "control",
        "agent message is treated as turn-complete",
    );
}

#[test]
fn spec_one_shot_example() {
    // turns.md "Test oracles", Node one-shot example.
    check(
        Some("ai_agent"),
        json!({"turnSemantics": "progress"}),
        false,
        "progress",
        "non-final agent progress does not trigger other agents",
    );
}

#[test]
fn malformed_metadata_is_absent_metadata() {
    for metadata in [
        json!(null),
        json!([]),
        json!([{"turnSemantics": "turn_complete"}]),
        json!("turn_complete"),
        json!(7),
        json!(true),
    ] {
        assert_eq!(normalize_turn_metadata(Some(&metadata)), None, "{metadata}");
        assert_eq!(
            should_trigger_agent_turn(Some("ai_agent"), Some(&metadata)),
            should_trigger_agent_turn(Some("ai_agent"), None)
        );
        assert_eq!(
            should_trigger_agent_turn(Some("human"), Some(&metadata)),
            should_trigger_agent_turn(Some("human"), None)
        );
    }
}

#[test]
fn normalize_keeps_recognized_fields_in_contract_order() {
    let metadata = json!({
        "requestedTurnMode": " review ",
        "inboundDisposition": "queued",
        "replyBehavior": "allow_auto_reply",
        "deliveryIntent": "stop",
        "turnSemantics": "control",
        "turnId": "\u{feff} t-1 \u{a0}",
        "other": 1,
    });
    let got = normalize_turn_metadata(Some(&metadata)).map(|m| m.to_json().to_string());
    assert_eq!(
        got.as_deref(),
        Some(
            r#"{"turnId":"t-1","turnSemantics":"control","deliveryIntent":"stop","replyBehavior":"allow_auto_reply","inboundDisposition":"queued","requestedTurnMode":"review"}"#
        )
    );
}

#[test]
fn js_trim_differs_from_rust_trim_where_javascript_does() {
    assert_eq!(js_trim("\u{feff}x\u{feff}"), "x");
    assert_eq!(js_trim("\u{85}x\u{85}"), "\u{85}x\u{85}");
    assert_eq!(js_trim("\u{180e}x"), "\u{180e}x");
    assert_eq!(js_trim(" \t\n\u{b}\u{c}\r\u{a0}\u{1680}\u{2000}\u{200a}\u{2028}\u{2029}\u{202f}\u{205f}\u{3000}x "), "x");
}

#[test]
fn requested_turn_mode_follows_the_regex() {
    let mode = |raw: &str| {
        normalize_turn_metadata(Some(&json!({"requestedTurnMode": raw})))
            .and_then(|m| m.requested_turn_mode)
    };
    assert_eq!(mode("plan").as_deref(), Some("plan"));
    assert_eq!(mode(&"a".repeat(80)).map(|m| m.len()), Some(80));
    assert_eq!(mode(&"a".repeat(81)), None);
    assert_eq!(mode("plan mode"), None);
    assert_eq!(mode("über"), None);
    assert_eq!(mode("  "), None);
}

#[test]
fn promotion_rule() {
    assert!(should_promote_conversation_message(Some("ai_agent"), None));
    assert!(should_promote_conversation_message(
        Some("ai_agent"),
        Some(&json!(null))
    ));
    assert!(should_promote_conversation_message(
        Some("ai_agent"),
        Some(&json!({"replyBehavior": "suppress_auto_reply"}))
    ));
    assert!(!should_promote_conversation_message(
        Some("ai_agent"),
        Some(&json!({"turnSemantics": "progress"}))
    ));
    assert!(!should_promote_conversation_message(
        Some("ai_agent"),
        Some(&json!({"turnSemantics": 3}))
    ));
    assert!(!should_promote_conversation_message(
        Some("ai_agent"),
        Some(&json!([]))
    ));
    assert!(should_promote_conversation_message(
        Some("human"),
        Some(&json!([]))
    ));
    for t in HIDDEN_RUNTIME_CARD_TYPES {
        assert!(!should_promote_conversation_message(
            Some("human"),
            Some(&json!({ "type": t }))
        ));
    }
}

#[test]
fn staleness_uses_the_state_threshold() {
    let now = 10_000_000_000u64;
    let state = |s: &str, age: u64| {
        normalize_runtime_turn_state(&json!({"state": s, "openedAt": now - age}))
            .expect("valid state")
    };
    assert!(!state("tool", ACTIVE_TURN_STALE_THRESHOLD_MS - 1).is_stale(now));
    assert!(state("tool", ACTIVE_TURN_STALE_THRESHOLD_MS).is_stale(now));
    assert!(!state("waiting_input", ACTIVE_TURN_STALE_THRESHOLD_MS).is_stale(now));
    assert!(state("waiting_input", WAITING_INPUT_STALE_THRESHOLD_MS).is_stale(now));
    assert!(!state("completed", WAITING_INPUT_STALE_THRESHOLD_MS).is_stale(now));
    assert!(state("thinking", 0).is_open(now));
    assert!(!state("idle", 0).is_open(now));
}

proptest! {
    #[test]
    fn gate_is_total_and_consistent_on_arbitrary_metadata(metadata in arb_json(), sender in prop::option::of(prop_oneof![Just("human".to_owned()), Just("ai_agent".to_owned()), ".*"])) {
        let sender = sender.as_deref();
        let d = should_trigger_agent_turn(sender, Some(&metadata));
        prop_assert_eq!(d.semantics, resolve_turn_message_semantics(sender, Some(&metadata)));
        let normalized = normalize_turn_metadata(Some(&metadata));
        let suppressed = normalized.as_ref().and_then(|m| m.reply_behavior) == Some(ReplyBehavior::SuppressAutoReply);
        prop_assert_eq!(d.reason == TriggerReason::SuppressedByMetadata, suppressed);
        if suppressed {
            prop_assert!(!d.allow);
        } else if sender == Some("human") {
            prop_assert!(d.allow);
        } else {
            prop_assert_eq!(d.allow, d.semantics != TurnSemantics::Progress);
        }
        if !metadata.is_object() {
            prop_assert!(normalized.is_none());
        }
        let _ = should_promote_conversation_message(sender, Some(&metadata));
        let _ = normalize_runtime_turn_state(&metadata);
    }
}
