//! Property tests: the validator never panics and is deterministic on arbitrary JSON, survives
//! pathological nesting, and the JavaScript helpers agree with independent formulations.

use canon_cards::js::{self, json_stringify_len};
use canon_cards::{validate_card, validate_card_text};
use proptest::prelude::*;
use serde_json::{json, Map, Number, Value};

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter_map("finite", Number::from_f64)
            .prop_map(Value::Number),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("summary"),
            Just("actions"),
            Just("select"),
            Just("lineItems"),
            Just("date"),
            Just("canon.card.v1"),
            Just("neutral"),
            Just("2024-01-01"),
            Just(" "),
            Just("\u{feff}"),
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ]
}

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop_oneof![
            Just("kind"),
            Just("title"),
            Just("text"),
            Just("blocks"),
            Just("actions"),
            Just("fields"),
            Just("choices"),
            Just("columns"),
            Just("rows"),
            Just("id"),
            Just("label"),
            Just("type"),
            Just("min"),
            Just("max"),
            Just("value"),
            Just("media"),
            Just("series"),
            Just("points"),
            Just("y"),
            Just("schema"),
            Just("fallbackText"),
            Just("0"),
            Just("7"),
        ]
        .prop_map(str::to_owned),
        "[a-zA-Z0-9]{0,6}",
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    arb_scalar().prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A valid card with one subtree replaced by an arbitrary value, so that deep rules run.
fn arb_mutated_card() -> impl Strategy<Value = Value> {
    let base: Value = serde_json::from_str(include_str!("../benches/data/typical.json"))
        .expect("the typical bench card is JSON");
    (any::<prop::sample::Index>(), arb_json()).prop_map(move |(index, replacement)| {
        let mut card = base.clone();
        let mut pointers = Vec::new();
        collect_pointers(&card, String::new(), &mut pointers);
        let pointer = index.get(&pointers).clone();
        if let Some(slot) = card.pointer_mut(&pointer) {
            *slot = replacement;
        }
        card
    })
}

fn collect_pointers(value: &Value, here: String, out: &mut Vec<String>) {
    out.push(here.clone());
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_pointers(item, format!("{here}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let escaped = k.replace('~', "~0").replace('/', "~1");
                collect_pointers(item, format!("{here}/{escaped}"), out);
            }
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics_and_is_deterministic(value in arb_json()) {
        let first = validate_card(&value);
        prop_assert_eq!(first.ok, first.errors.is_empty());
        prop_assert_eq!(&first, &validate_card(&value));
        if !value.is_object() {
            prop_assert_eq!(first.errors, vec!["card must be an object".to_owned()]);
        }
    }

    #[test]
    fn mutated_cards_never_panic(card in arb_mutated_card()) {
        let result = validate_card(&card);
        prop_assert_eq!(result.ok, result.errors.is_empty());
        // The text entry point agrees with the value entry point.
        let text = serde_json::to_string(&card).expect("serializable");
        prop_assert_eq!(validate_card_text(&text).expect("valid JSON"), result);
    }

    #[test]
    fn stringify_length_matches_serde_for_integers_and_strings(value in arb_json()) {
        // serde_json and JSON.stringify agree on everything but non-integral spellings of
        // doubles; strip doubles to compare the rest byte for byte.
        let value = strip_floats(value);
        let serde_len = serde_json::to_string(&value).expect("serializable").len();
        prop_assert_eq!(json_stringify_len(&value), serde_len);
    }

    #[test]
    fn number_strings_round_trip(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
        let s = js::js_number_string(x);
        let back: f64 = s.parse().expect("ECMAScript number strings parse as f64");
        prop_assert_eq!(back, if x == 0.0 { 0.0 } else { x });
        prop_assert!(!s.contains("e") || s.contains("e+") || s.contains("e-"));
    }

    #[test]
    fn utf16_length_matches_encoder(s in ".{0,40}") {
        prop_assert_eq!(js::utf16_len(&s), s.encode_utf16().count());
        prop_assert_eq!(js::is_blank(&s), js::js_trim(&s).is_empty());
    }
}

fn strip_floats(value: Value) -> Value {
    match value {
        Value::Number(n) if n.is_f64() => Value::Null,
        Value::Array(items) => Value::Array(items.into_iter().map(strip_floats).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, strip_floats(v))).collect())
        }
        other => other,
    }
}

/// Drops a deeply nested value without recursion (serde_json's own drop recurses).
fn drop_deep(value: Value) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

const DEPTH: usize = 100_000;

fn nested(depth: usize) -> Value {
    let mut v = json!("leaf");
    for i in 0..depth {
        // Built by hand: `json!` would serialize an interpolated value recursively.
        v = if i % 2 == 0 {
            Value::Array(vec![v])
        } else {
            let mut map = Map::new();
            map.insert("kind".to_owned(), v);
            Value::Object(map)
        };
    }
    v
}

#[test]
fn pathological_nesting_is_validated_without_overflow() {
    // Deep values in the block kind (rendered by String()) and in an unsupported key (measured by
    // the size rule). Runs on a 2 MiB test thread.
    let mut card = json!({
        "schema": "canon.card.v1", "title": "Deep", "fallbackText": "Deep",
        "blocks": [{"kind": "summary", "text": "x"}],
    });
    card["blocks"][0]["kind"] = Value::Array(vec![nested(DEPTH)]);
    card["zz"] = nested(DEPTH);
    let result = validate_card(&card);
    assert_eq!(result.errors[0], "card exceeds 32768 bytes");
    assert_eq!(result.errors[1], "card has unsupported key \"zz\"");
    assert!(result.errors[2].starts_with("card.blocks[0].kind \"[object Object]\""));
    drop_deep(card);
}

/// A record with more than 16 keys once sent the key lookup into endless recursion (a stack
/// overflow that aborted the process): it must be validated like any other.
#[test]
fn records_with_more_than_sixteen_keys_are_validated() {
    let mut block = Map::new();
    block.insert("kind".to_owned(), json!("summary"));
    block.insert("text".to_owned(), json!("Ready."));
    let mut card = Map::new();
    for key in ["schema", "title", "fallbackText"] {
        card.insert(key.to_owned(), json!("canon.card.v1"));
    }
    let mut expected = Vec::new();
    for i in 0..17 {
        card.insert(format!("extra{i}"), json!(i));
        expected.push(format!("card has unsupported key \"extra{i}\""));
    }
    for i in 0..15 {
        block.insert(format!("z{i}"), json!(i));
    }
    for i in 0..15 {
        expected.push(format!("card.blocks[0] has unsupported key \"z{i}\""));
    }
    card.insert("blocks".to_owned(), json!([Value::Object(block)]));
    let result = validate_card(&Value::Object(card));
    assert_eq!(result.errors, expected);
}

#[test]
fn not_json_text_is_a_clear_error() {
    let error = validate_card_text("{\"schema\": ").expect_err("truncated JSON");
    assert!(error
        .to_string()
        .starts_with("card is not valid JSON at line 1"));
    assert!(
        validate_card_text("1e400").is_err(),
        "serde_json refuses infinite numbers"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The fast size check agrees with the exact length for every limit around it.
    #[test]
    fn size_check_agrees_with_exact_length(value in arb_json(), slack in 0usize..64) {
        let exact = json_stringify_len(&value);
        for limit in [exact.saturating_sub(slack), exact, exact + slack] {
            prop_assert_eq!(js::json_stringify_len_exceeds(&value, limit), exact > limit);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// Short decimals (the common case in cards) are measured by a fast path; it must agree
    /// with the full `Number::toString`.
    #[test]
    fn short_decimal_lengths_match_number_to_string(
        units in -9_000_000_000_000_000i64..9_000_000_000_000_000,
        places in 0u32..6,
    ) {
        let x = units as f64 / 10f64.powi(places as i32);
        let value = json!(x);
        prop_assert_eq!(json_stringify_len(&value), js::js_number_string(x).len(), "x = {}", x);
    }

    #[test]
    fn any_double_length_matches_number_to_string(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
        prop_assert_eq!(json_stringify_len(&json!(x)), js::js_number_string(x).len());
    }
}
