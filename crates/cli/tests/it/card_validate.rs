//! Runs the real `canon-hermes` binary: `card validate` output and exit codes.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_canon-hermes"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    child.wait_with_output().expect("the binary exits")
}

const VALID: &str = r#"{"schema":"canon.card.v1","title":"T","fallbackText":"F","blocks":[{"kind":"summary","text":"x"}]}"#;

#[test]
fn valid_card_from_stdin_exits_zero() {
    let out = run(&["card", "validate"], VALID.as_bytes());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"ok\":true,\"errors\":[]}\n"
    );
}

#[test]
fn invalid_card_exits_one_with_errors() {
    let card = VALID.replace("\"T\"", "\"\"");
    let out = run(&["card", "validate", "-"], card.as_bytes());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"ok\":false,\"errors\":[\"card.title must be a non-empty string\"]}\n"
    );
}

#[test]
fn file_argument_and_missing_file() {
    let dir = std::env::temp_dir().join(format!("canon-hermes-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("card.json");
    std::fs::write(&path, VALID).expect("write card");
    let out = run(
        &["card", "validate", path.to_str().expect("utf-8 path")],
        b"",
    );
    assert_eq!(out.status.code(), Some(0));
    let missing = dir.join("missing.json");
    let out = run(
        &["card", "validate", missing.to_str().expect("utf-8 path")],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("reading"));
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn not_json_exits_two_with_a_clear_message() {
    let out = run(&["card", "validate"], b"{\"schema\": ");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot validate stdin: card is not valid JSON"),
        "{stderr}"
    );
    let out = run(&["card", "validate"], &[0xff, 0xfe]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not UTF-8"));
}

#[test]
fn non_object_json_is_an_invalid_card() {
    let out = run(&["cards", "validate"], b"[1,2]");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"ok\":false,\"errors\":[\"card must be an object\"]}\n"
    );
}

#[test]
fn unknown_command_exits_two() {
    let out = run(&["frobnicate"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage: canon-hermes"));
}
