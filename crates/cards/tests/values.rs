//! Submitted field values (cards.md §17.1): every case of `fixtures/card-values/cases.jsonl`,
//! whose expectations come from running backend-contracts 8.6.1 `validateRuntimeCardFieldValues`
//! in Node, must give exactly the same first problem (or none); every case of `throws.jsonl`,
//! where the package throws, must fail closed; and arbitrary JSON never panics.

use std::path::PathBuf;

use canon_cards::values::{validate_runtime_card_field_values, MALFORMED_ACTION_FIELDS};
use proptest::prelude::*;
use serde_json::{json, Map, Number, Value};

fn fixture(name: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/card-values")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} is committed: {e}", path.display()));
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{name} line {} is not JSON: {e}", n + 1))
        })
        .collect()
}

/// Runs one fixture case through the Rust function.
fn run(case: &Value) -> Option<String> {
    let action_id = match case.get("actionId") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.as_str()),
        Some(other) => panic!("actionId must be a string or null, not {other}"),
    };
    validate_runtime_card_field_values(
        action_id,
        case.get("actionFields").unwrap_or(&Value::Null),
        case.get("values").unwrap_or(&Value::Null),
    )
}

fn name(case: &Value) -> &str {
    case["name"].as_str().unwrap_or("<unnamed>")
}

#[test]
fn every_case_matches_backend_contracts() {
    let cases = fixture("cases.jsonl");
    assert!(
        cases.len() >= 250,
        "the fixture lost cases: {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let expected = match &case["expected"] {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => panic!(
                "{}: expected must be a string or null, not {other}",
                name(case)
            ),
        };
        let actual = run(case);
        if actual != expected {
            failures.push(format!(
                "{}\n  expected: {expected:?}\n  actual:   {actual:?}",
                name(case)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn cases_are_sorted_by_unique_name() {
    for file in ["cases.jsonl", "throws.jsonl"] {
        let names: Vec<String> = fixture(file).iter().map(|c| name(c).to_owned()).collect();
        assert!(
            names.windows(2).all(|w| w[0] < w[1]),
            "{file} is not sorted by unique name"
        );
    }
}

#[test]
fn inputs_the_package_throws_on_fail_closed() {
    let cases = fixture("throws.jsonl");
    assert!(!cases.is_empty());
    for case in &cases {
        assert!(
            case["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("TypeError")),
            "{}: the package's error is recorded",
            name(case)
        );
        assert_eq!(
            run(case).as_deref(),
            Some(MALFORMED_ACTION_FIELDS),
            "{}",
            name(case)
        );
    }
}

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter_map("finite", Number::from_f64)
            .prop_map(Value::Number),
        ".{0,6}".prop_map(Value::String),
        prop_oneof![
            Just("text"),
            Just("number"),
            Just("currency"),
            Just("date"),
            Just("select"),
            Just("multiSelect"),
            Just("lineItems"),
            Just("boolean"),
            Just("2024-02-29"),
            Just("a"),
            Just("0x10"),
            Just(" "),
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ]
}

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop_oneof![
            Just("id"),
            Just("label"),
            Just("type"),
            Just("required"),
            Just("choices"),
            Just("value"),
            Just("allowOther"),
            Just("min"),
            Just("max"),
            Just("step"),
            Just("precision"),
            Just("columns"),
            Just("minRows"),
            Just("maxRows"),
            Just("toString"),
            Just("__proto__"),
            Just("length"),
            Just("a"),
            Just("0"),
        ]
        .prop_map(str::to_owned),
        "[a-z0-9]{0,4}",
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    arb_scalar().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #[test]
    fn never_panics_and_is_deterministic(
        action_id in prop::option::of("[a-z]{0,2}"),
        fields in arb_json(),
        values in arb_json(),
    ) {
        let first = validate_runtime_card_field_values(action_id.as_deref(), &fields, &values);
        let again = validate_runtime_card_field_values(action_id.as_deref(), &fields, &values);
        prop_assert_eq!(first, again);
    }

    #[test]
    fn field_lists_never_panic(
        fields in prop::collection::vec(arb_json(), 1..5),
        values in arb_json(),
    ) {
        let fields = Value::Array(fields);
        let first = validate_runtime_card_field_values(Some("a"), &fields, &values);
        prop_assert_eq!(first, validate_runtime_card_field_values(Some("a"), &fields, &values));
    }
}
