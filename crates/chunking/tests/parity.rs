//! Parity with canon-hermes-plugin 0.14.1 (`message_limits.py`), replayed from
//! `fixtures/chunking/parity-0.14.1.jsonl` without Python (turns.md "Test
//! oracles"). Each line is `{"fn", "args", "expect"}`, where `expect` is the
//! reference's `{"ok": result}` or `{"err": message}`; see the README next
//! to the fixture for how it was produced.

use std::path::Path;

use canon_chunking::ids::{part_message_id, stable_final_message_id, Ordinal};
use canon_chunking::metadata::{
    leading_part_metadata, strip_chunked_final_text_blocks, MessageChunk,
};
use canon_chunking::split::{split_text, Boundary};
use serde_json::{json, Map, Value};

fn fixture_lines() -> Vec<Value> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/chunking/parity-0.14.1.jsonl");
    let text = std::fs::read_to_string(&path).expect("parity fixture is readable");
    text.lines()
        .map(|line| serde_json::from_str(line).expect("fixture line is JSON"))
        .collect()
}

fn string(value: &Value) -> &str {
    value.as_str().expect("string argument")
}

fn index(value: &Value) -> usize {
    usize::try_from(value.as_u64().expect("integer argument")).expect("fits usize")
}

fn object(value: &Value) -> Map<String, Value> {
    value.as_object().expect("object argument").clone()
}

/// Our result for one fixture call, in the fixture's `{"ok"}`/`{"err"}` form.
fn run(function: &str, args: &[Value]) -> Value {
    let ok = |value: Value| json!({ "ok": value });
    let err = |message: String| json!({ "err": message });
    match function {
        "split" => match split_text(string(&args[0]), index(&args[1]), Boundary::CodePoint) {
            Ok(parts) => ok(json!(parts)),
            Err(e) => err(e.to_string()),
        },
        "final_id" => match Ordinal::try_from(args[2].as_i64().expect("integer ordinal")) {
            Ok(ordinal) => ok(json!(stable_final_message_id(
                string(&args[0]),
                args[1].as_str(),
                ordinal
            ))),
            Err(e) => err(e.to_string()),
        },
        "part_id" => ok(json!(part_message_id(string(&args[0]), index(&args[1])))),
        "leading" => {
            let chunk = MessageChunk::new(index(&args[1]), index(&args[2]), args[3].as_str());
            ok(Value::Object(leading_part_metadata(
                &object(&args[0]),
                &chunk,
            )))
        }
        "strip" => {
            let mut metadata = object(&args[0]);
            strip_chunked_final_text_blocks(&mut metadata, string(&args[1]));
            ok(Value::Object(metadata))
        }
        other => panic!("unknown fixture function {other}"),
    }
}

#[test]
fn message_limits_parity() {
    let lines = fixture_lines();
    assert!(lines.len() > 500, "fixture has {} lines", lines.len());
    let mut checked = std::collections::BTreeMap::<String, usize>::new();
    for (number, line) in lines.iter().enumerate() {
        let function = string(&line["fn"]);
        let args = line["args"].as_array().expect("args array");
        let got = run(function, args);
        // Compare compact serializations so metadata key order counts too.
        let got = serde_json::to_string(&got).expect("serializable");
        let want = serde_json::to_string(&line["expect"]).expect("serializable");
        assert_eq!(got, want, "line {}: {function}", number + 1);
        *checked.entry(function.to_owned()).or_default() += 1;
    }
    for function in ["split", "final_id", "part_id", "leading", "strip"] {
        assert!(
            checked.get(function).copied().unwrap_or(0) >= 20,
            "too few {function} cases: {checked:?}"
        );
    }
}
