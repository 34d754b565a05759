//! The `canon-sim` binary: `serve --print-env` prints a working environment (its key
//! authenticates and its URLs answer), `--agents-json` writes a profile, and `model --script`
//! serves the script.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use super::support::raw;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary and reads `KEY=value` lines until one starts with `last`.
fn spawn(args: &[&str], last: &str) -> (Killed, Vec<(String, String)>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_canon-sim"))
        .args(args)
        .args(["--exit-after", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("canon-sim starts");
    let stdout = child.stdout.take().expect("stdout piped");
    let guard = Killed(child);
    let mut env = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("utf-8 line");
        let (k, v) = line.split_once('=').expect("KEY=value line");
        env.push((k.to_owned(), v.to_owned()));
        if k.starts_with(last) {
            break;
        }
    }
    (guard, env)
}

fn get<'a>(env: &'a [(String, String)], key: &str) -> &'a str {
    env.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("{key} printed"))
}

fn addr_of(url: &str) -> std::net::SocketAddr {
    url.trim_start_matches("http://")
        .trim_end_matches("/v1")
        .parse()
        .expect("loopback address")
}

#[tokio::test]
async fn serve_print_env_gives_a_working_environment() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents.json");
    let (_child, env) = spawn(
        &[
            "serve",
            "--print-env",
            "--seed",
            "7",
            "--separate-stream-port",
            "--agents-json",
            agents.to_str().unwrap(),
        ],
        "CANON_SIM_CONTROL_URL",
    );
    for key in [
        "CANON_API_KEY",
        "CANON_ENVIRONMENT_ID",
        "CANON_BASE_URL",
        "CANON_STREAM_URL",
        "CANON_RTDB_URL",
        "CANON_FIREBASE_API_KEY",
    ] {
        assert!(!get(&env, key).is_empty(), "{key}");
    }
    assert_eq!(get(&env, "HERMES_ALLOW_PRIVATE_URLS"), "true");
    assert_ne!(get(&env, "CANON_BASE_URL"), get(&env, "CANON_STREAM_URL"));
    let base = addr_of(get(&env, "CANON_BASE_URL"));
    let auth = format!("Bearer {}", get(&env, "CANON_API_KEY"));
    let me = raw(base, "GET", "/agents/me", &[("authorization", &auth)], None)
        .await
        .unwrap();
    assert_eq!(me.json()["agentId"], "a-hermes");
    let stream_health = raw(
        addr_of(get(&env, "CANON_STREAM_URL")),
        "GET",
        "/health",
        &[],
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        stream_health.json()["environmentId"],
        get(&env, "CANON_ENVIRONMENT_ID")
    );
    let profile: Value = serde_json::from_str(&std::fs::read_to_string(&agents).unwrap()).unwrap();
    let p = &profile["canon-sim"];
    assert_eq!(p["apiKey"], get(&env, "CANON_API_KEY"));
    assert_eq!(p["streamUrl"], get(&env, "CANON_STREAM_URL"));
    assert_eq!(p["clientType"], "hermes");
    assert_eq!(p["registeredAt"].as_str().unwrap().len(), 20);
}

#[tokio::test]
async fn model_binary_serves_its_script() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!({"rules": [{"match": {}, "reply": {"text": "scripted"}}]}).to_string(),
    )
    .unwrap();
    let (_child, env) = spawn(
        &["model", "--script", script.to_str().unwrap(), "--print-env"],
        "OPENAI_API_KEY",
    );
    let addr = addr_of(get(&env, "OPENAI_BASE_URL"));
    let body = json!({"messages": [{"role": "user", "content": "hi"}]}).to_string();
    let r = raw(
        addr,
        "POST",
        "/v1/chat/completions",
        &[],
        Some(body.as_bytes()),
    )
    .await
    .unwrap();
    assert_eq!(r.json()["choices"][0]["message"]["content"], "scripted");
}

#[test]
fn bad_arguments_exit_with_status_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_canon-sim"))
        .args(["serve", "--port", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_canon-sim"))
        .args(["model"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
