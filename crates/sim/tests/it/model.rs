//! The scripted OpenAI-compatible model (hermes-host.md §20.2 item 6).

use canon_sim::model::{ModelServer, Script};
use serde_json::{json, Value};

use super::support::raw;

const SCRIPT: &str = r#"{"model": "fake-model", "rules": [
  {"match": {"titleRequest": true}, "reply": {"text": "Scripted session"}},
  {"match": {"role": "user", "contains": "TOOL"}, "reply": {"toolCall": {"name": "terminal", "arguments": {"command": "echo hi"}, "id": "call_x"}}},
  {"match": {"role": "tool"}, "reply": {"echoToolResult": true, "prefix": "Tool said: "}},
  {"match": {}, "reply": {"text": "Hello from the scripted model."}}
]}"#;

async fn model() -> ModelServer {
    ModelServer::start(Script::parse(SCRIPT).unwrap(), 0)
        .await
        .unwrap()
}

fn sse_chunks(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    assert!(text.trim_end().ends_with("data: [DONE]"));
    text.split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

async fn complete(m: &ModelServer, body: Value) -> super::support::Resp {
    raw(
        m.addr(),
        "POST",
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        Some(body.to_string().as_bytes()),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn models_are_listed_and_unknown_paths_404() {
    let m = model().await;
    let list = raw(m.addr(), "GET", "/v1/models", &[], None)
        .await
        .unwrap()
        .json();
    assert_eq!(list["data"][0]["id"], "fake-model");
    assert_eq!(list["data"][0]["context_length"], 131_072);
    assert_eq!(
        raw(m.addr(), "GET", "/v1/models/fake-model", &[], None)
            .await
            .unwrap()
            .status,
        200
    );
    assert_eq!(
        raw(m.addr(), "GET", "/api/v1/models", &[], None)
            .await
            .unwrap()
            .status,
        404
    );
    assert!(m.base_url().ends_with("/v1"));
}

#[tokio::test]
async fn streamed_text_reply_has_role_deltas_stop_usage_and_done() {
    let m = model().await;
    let r = complete(&m, json!({"model": "fake-model", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "system", "content": "You are Hermes"}, {"role": "user", "content": "hello"}]})).await;
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let chunks = sse_chunks(&r.body);
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant"})
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello from the scripted model.");
    let finish = chunks
        .iter()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str())
        .unwrap();
    assert_eq!(finish, "stop");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["total_tokens"].is_number());
}

#[tokio::test]
async fn tool_call_round_trip() {
    let m = model().await;
    let first = complete(&m, json!({"stream": true, "messages": [{"role": "user", "content": "please run TOOL"}], "tools": []})).await;
    let chunks = sse_chunks(&first.body);
    let call = chunks
        .iter()
        .find_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned())
        .unwrap();
    assert_eq!(call[0]["id"], "call_x");
    assert_eq!(call[0]["function"]["name"], "terminal");
    let args: Value =
        serde_json::from_str(call[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"command": "echo hi"}));
    assert!(chunks
        .iter()
        .any(|c| c["choices"][0]["finish_reason"] == "tool_calls"));
    let second = complete(
        &m,
        json!({"stream": true, "messages": [
            {"role": "user", "content": "please run TOOL"},
            {"role": "assistant", "content": null, "tool_calls": call},
            {"role": "tool", "name": "terminal", "tool_call_id": "call_x", "content": "hi\n"}
        ]}),
    )
    .await;
    let text: String = sse_chunks(&second.body)
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Tool said: hi\n");
    assert_eq!(m.requests().len(), 2);
}

#[tokio::test]
async fn title_call_gets_a_plain_completion() {
    let m = model().await;
    let r = complete(&m, json!({"messages": [{"role": "system", "content": "Generate a short, descriptive title (3-7 words) for this"}, {"role": "user", "content": "TOOL talk"}]})).await.json();
    assert_eq!(r["object"], "chat.completion");
    assert_eq!(r["choices"][0]["message"]["content"], "Scripted session");
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    let bad = raw(
        m.addr(),
        "POST",
        "/v1/chat/completions",
        &[],
        Some(b"{oops"),
    )
    .await
    .unwrap();
    assert_eq!(bad.status, 400);
}
