//! The golden stdio lines of `fixtures/stdio/` (which canon-adapter's protocol tests round-trip
//! through the Rust types) through the shim's own frame functions: `shim_golden.py` checks that
//! the shim's encoder writes each line the shim sends and that its decoder takes each line the
//! daemon sends. Here every line must be reported, classified as Rust's `decode_frame` classifies
//! it. No Hermes needed.

use canon_host::protocol::{decode_frame, Frame};
use serde_json::Value;

use super::gateway_support::{shim_source, workspace_root};
use super::shim_constants::run_python;

#[test]
fn golden_stdio_lines_round_trip_through_the_shim() {
    let fixtures = workspace_root().join("fixtures/stdio");
    let script = workspace_root().join("crates/cli/tests/it/shim_golden.py");
    let out = run_python(&[script, shim_source(), fixtures.clone()]);
    let reports: Vec<Value> = out
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect();
    let mut expected = Vec::new();
    for (name, shim_sends) in [
        ("shim.jsonl", ["request", "notification"]),
        ("daemon.jsonl", ["response", "response"]),
    ] {
        let text = std::fs::read_to_string(fixtures.join(name)).expect("a fixture");
        for (number, line) in text.lines().enumerate() {
            let kind = match decode_frame(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"))
            {
                Frame::Request { .. } => "request",
                Frame::Notification { .. } => "notification",
                Frame::Response { .. } => "response",
            };
            let checked = if shim_sends.contains(&kind) {
                "encoded"
            } else {
                "decoded"
            };
            expected.push(serde_json::json!({
                "file": name, "line": number + 1, "kind": kind, "checked": checked,
            }));
        }
    }
    assert!(expected.len() > 50, "{}", expected.len());
    assert_eq!(reports, expected);
}
