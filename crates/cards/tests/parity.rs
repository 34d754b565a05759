//! Runs every case of `fixtures/card-validation/parity.jsonl` (cards.md §20) through the
//! validator and requires the exact `ok` and the exact, ordered `errors` list.

use std::path::PathBuf;

use canon_cards::{is_interactive, validate_card, validate_card_text, Validation};
use serde_json::Value;

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/card-validation/parity.jsonl")
}

#[test]
fn every_parity_fixture_matches() {
    let text = std::fs::read_to_string(fixture_path()).expect("parity fixtures are committed");
    let mut failures = Vec::new();
    let mut count = 0usize;
    for (line_no, line) in text.lines().enumerate() {
        let case: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("line {} is not JSON: {e}", line_no + 1));
        let name = case["name"].as_str().unwrap_or("<unnamed>").to_owned();
        let expected: Validation = serde_json::from_value(case["expected"].clone())
            .unwrap_or_else(|e| panic!("{name}: bad expected member: {e}"));
        assert_eq!(
            expected.ok,
            expected.errors.is_empty(),
            "{name}: ok must equal errors.is_empty()"
        );
        let (actual, card) = match case.get("cardText").and_then(Value::as_str) {
            Some(card_text) => (
                validate_card_text(card_text).unwrap_or_else(|e| panic!("{name}: {e}")),
                serde_json::from_str(card_text).unwrap_or(Value::Null),
            ),
            None => (validate_card(&case["card"]), case["card"].clone()),
        };
        if actual != expected {
            failures.push(format!(
                "{name}\n  expected: {:?}\n  actual:   {:?}",
                expected.errors, actual.errors
            ));
        }
        let tags: Vec<&str> = case["tags"]
            .as_array()
            .map(|t| t.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (tag, want) in [("interactive:true", true), ("interactive:false", false)] {
            if tags.contains(&tag) && is_interactive(&card) != want {
                failures.push(format!("{name}: is_interactive should be {want}"));
            }
        }
        count += 1;
    }
    assert!(
        count > 700,
        "expected the full fixture set, found {count} cases"
    );
    assert!(
        failures.is_empty(),
        "{} of {count} parity cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn fixture_file_is_sorted_lf_and_unique() {
    let bytes = std::fs::read(fixture_path()).expect("parity fixtures are committed");
    assert!(!bytes.contains(&b'\r'), "fixtures must use LF line endings");
    assert!(bytes.ends_with(b"\n"), "fixtures end with a newline");
    let text = String::from_utf8(bytes).expect("fixtures are UTF-8");
    let names: Vec<String> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("JSON line");
            v["name"].as_str().expect("name").to_owned()
        })
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(names, sorted, "cases are sorted by name and unique");
}
