//! The scripted OpenAI-compatible model server (hermes-host.md §20.2 item 6;
//! canon-wire.md §13 Q15): `GET /v1/models`, `GET /v1/models/{id}` and streaming and
//! non-streaming `POST /v1/chat/completions`, driven by a small JSON [`Script`].
//!
//! A script is a list of rules matched against the **last** message of a request (first match
//! wins). A reply is text (sent as content deltas), a tool call, or an echo of the tool result
//! the last message carries. A tool call with `text` (or `deltas`) streams that speech before
//! the call, as a model that talks and then uses a tool does. The session-title call (a system prompt starting
//! `Generate a short, descriptive title`) is matched by `titleRequest`.
//!
//! ```json
//! {"model": "fake-model", "rules": [
//!   {"match": {"titleRequest": true}, "reply": {"text": "Scripted session"}},
//!   {"match": {"role": "user", "contains": "TOOL"},
//!    "reply": {"toolCall": {"name": "terminal", "arguments": {"command": "echo hi"}}}},
//!   {"match": {"role": "tool"}, "reply": {"echoToolResult": true, "prefix": "Tool said: "}},
//!   {"match": {}, "reply": {"text": "Hello from the scripted model."}}
//! ]}
//! ```
//!
//! Loopback only; the request log is bounded.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::body::{Aborted, SimBody};
use crate::error::SimError;

/// Requests kept in the model's log.
pub const MODEL_LOG_CAP: usize = 1000;
/// The title-request marker (hermes-host.md §20.2 item 6).
pub const TITLE_PROMPT_PREFIX: &str = "Generate a short, descriptive title";

/// What a rule matches in the last message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Match {
    /// Role of the last message (`user`, `tool`, `assistant`, `system`).
    pub role: Option<String>,
    /// Substring of the last message's text content.
    pub contains: Option<String>,
    /// Compare `contains` without regard to letter case (Unicode lower case of both sides), so a
    /// script answers a person who types `Delete` as well as `delete`.
    pub ignore_case: Option<bool>,
    /// The request is the session-title call.
    pub title_request: Option<bool>,
}

/// A scripted tool call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ToolCall {
    /// Function name.
    pub name: String,
    /// Arguments (serialized to the JSON string the API carries).
    pub arguments: Value,
    /// Call id (default `call_<n>`).
    pub id: Option<String>,
}

/// What a rule answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ScriptReply {
    /// Text reply.
    pub text: Option<String>,
    /// Explicit content deltas (instead of splitting `text` into words).
    pub deltas: Option<Vec<String>>,
    /// Tool-call reply (after the `text` or `deltas` speech, when given).
    pub tool_call: Option<ToolCall>,
    /// Reply with the last message's content (a tool result).
    pub echo_tool_result: bool,
    /// Prefix of the echoed text.
    pub prefix: Option<String>,
    /// Pause before each streamed chunk, in milliseconds (a slow model, so tests can act
    /// while a turn is running). `0`, the default, sends the whole answer at once.
    pub delay_ms: u64,
}

/// One rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    /// The matcher.
    #[serde(rename = "match", default)]
    pub matcher: Match,
    /// The reply.
    pub reply: ScriptReply,
}

/// A model script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Script {
    /// Model id reported by `/v1/models`.
    #[serde(default = "default_model")]
    pub model: String,
    /// Rules, first match wins. When none matches the reply is `OK`.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

fn default_model() -> String {
    "fake-model".to_owned()
}

impl Default for Script {
    fn default() -> Self {
        Self {
            model: default_model(),
            rules: Vec::new(),
        }
    }
}

impl Script {
    /// Parses a script.
    pub fn parse(text: &str) -> Result<Self, SimError> {
        serde_json::from_str(text).map_err(|e| SimError::Script(e.to_string()))
    }

    /// Reads a script file.
    pub fn load(path: &std::path::Path) -> Result<Self, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }
}

/// Text of a message's `content` (a string, or the text parts of a list).
fn content_text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Whether a request is the session-title call.
pub fn is_title_request(request: &Value) -> bool {
    request
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.first())
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
        .is_some_and(|m| content_text(m).starts_with(TITLE_PROMPT_PREFIX))
}

/// The planned answer to a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Planned {
    /// Text deltas.
    Text(Vec<String>),
    /// One tool call: id, name, arguments JSON string.
    Tool(String, String, String),
    /// Speech deltas, then one tool call (id, name, arguments JSON string).
    SpeechThenTool(Vec<String>, String, String, String),
}

impl Script {
    /// The `delayMs` of the rule that answers `request` (0 when none matches).
    pub fn delay_ms(&self, request: &Value) -> u64 {
        self.rule_for(request).map_or(0, |r| r.reply.delay_ms)
    }

    fn rule_for(&self, request: &Value) -> Option<&Rule> {
        let last = request
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or(Value::Null);
        let role = last.get("role").and_then(Value::as_str).unwrap_or("");
        let text = content_text(&last);
        let title = is_title_request(request);
        self.rules.iter().find(|r| {
            r.matcher.role.as_ref().is_none_or(|x| x == role)
                && r.matcher.contains.as_ref().is_none_or(|c| {
                    if r.matcher.ignore_case == Some(true) {
                        text.to_lowercase().contains(&c.to_lowercase())
                    } else {
                        text.contains(c.as_str())
                    }
                })
                && r.matcher.title_request.is_none_or(|t| t == title)
        })
    }
}

impl Script {
    /// Chooses the reply for `request`; `n` numbers generated call ids.
    pub fn plan(&self, request: &Value, n: u64) -> Planned {
        let text = request
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|m| m.last())
            .map(content_text)
            .unwrap_or_default();
        let Some(rule) = self.rule_for(request) else {
            return Planned::Text(vec!["OK".to_owned()]);
        };
        let reply = &rule.reply;
        if let Some(call) = &reply.tool_call {
            let args = match &call.arguments {
                Value::String(s) => s.clone(),
                Value::Null => "{}".to_owned(),
                other => other.to_string(),
            };
            let id = call.id.clone().unwrap_or_else(|| format!("call_{n}"));
            let speech = match (&reply.deltas, &reply.text) {
                (Some(d), _) => d.clone(),
                (None, Some(t)) => word_deltas(t),
                (None, None) => Vec::new(),
            };
            if speech.concat().is_empty() {
                return Planned::Tool(id, call.name.clone(), args);
            }
            return Planned::SpeechThenTool(speech, id, call.name.clone(), args);
        }
        if let Some(d) = &reply.deltas {
            return Planned::Text(d.clone());
        }
        let full = if reply.echo_tool_result {
            format!("{}{text}", reply.prefix.clone().unwrap_or_default())
        } else {
            reply.text.clone().unwrap_or_else(|| "OK".to_owned())
        };
        Planned::Text(word_deltas(&full))
    }
}

/// Splits `full` after each space, so the deltas concatenate back to the text.
fn word_deltas(full: &str) -> Vec<String> {
    let mut deltas = Vec::new();
    let mut current = String::new();
    for c in full.chars() {
        current.push(c);
        if c == ' ' {
            deltas.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() || deltas.is_empty() {
        deltas.push(current);
    }
    deltas
}

#[derive(Debug)]
struct ModelShared {
    script: Script,
    log: Mutex<(VecDeque<Value>, u64)>,
    /// When each logged request arrived, beside it in the log (same bound).
    arrivals: Mutex<VecDeque<std::time::Instant>>,
    started: std::time::Instant,
    /// The wall clock at `started`, in microseconds since the Unix epoch.
    started_unix_us: u64,
}

/// A running model server. Dropping it stops the listener.
#[derive(Debug)]
pub struct ModelServer {
    shared: Arc<ModelShared>,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl ModelServer {
    /// Starts on 127.0.0.1:`port` (0 = any).
    pub async fn start(script: Script, port: u16) -> Result<Self, SimError> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|source| SimError::Bind { port, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| SimError::Bind { port, source })?;
        let shared = Arc::new(ModelShared {
            script,
            log: Mutex::new((VecDeque::new(), 0)),
            arrivals: Mutex::new(VecDeque::new()),
            started: std::time::Instant::now(),
            started_unix_us: crate::journal::unix_us_now(),
        });
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        let accept = Arc::clone(&shared);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stop_rx => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let shared = Arc::clone(&accept);
                        tokio::spawn(async move {
                            let service = service_fn(move |req| {
                                let shared = Arc::clone(&shared);
                                async move { serve(shared, req).await }
                            });
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                }
            }
        });
        Ok(Self {
            shared,
            addr,
            stop: Some(stop_tx),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI base URL (`http://127.0.0.1:<port>/v1`).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.addr.port())
    }

    /// When each request of [`ModelServer::requests`] arrived, in microseconds since the server
    /// started (the figures of a tool call's round trip: the call's answer goes out at once, so
    /// the next request's arrival is when the tool's result reached the model).
    pub fn arrivals_us(&self) -> Vec<u64> {
        self.shared
            .arrivals
            .lock()
            .map(|a| {
                a.iter()
                    .map(|t| {
                        u64::try_from(t.duration_since(self.shared.started).as_micros())
                            .unwrap_or(u64::MAX)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// [`ModelServer::arrivals_us`] on the wall clock, in microseconds since the Unix epoch, to
    /// line up with timestamps taken in other processes (the turn-latency bench). A scripted
    /// reply without `delayMs` is written whole at once, so its arrival is also when the model
    /// started and finished answering.
    pub fn arrivals_unix_us(&self) -> Vec<u64> {
        let started = self.shared.started_unix_us;
        self.arrivals_us()
            .into_iter()
            .map(|t| started.saturating_add(t))
            .collect()
    }

    /// The chat-completion requests received so far (bounded).
    pub fn requests(&self) -> Vec<Value> {
        self.shared
            .log
            .lock()
            .map(|l| l.0.iter().cloned().collect())
            .unwrap_or_default()
    }
}

fn json_response(status: u16, body: &Value) -> Response<SimBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(SimBody::full(body.to_string()))
        .unwrap_or_else(|_| Response::new(SimBody::full("")))
}

fn chunk(id: &str, model: &str, delta: Value, finish: Option<&str>) -> String {
    let c = json!({
        "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    format!("data: {c}\n\n")
}

async fn serve(
    shared: Arc<ModelShared>,
    req: Request<Incoming>,
) -> Result<Response<SimBody>, Aborted> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let model = shared.script.model.clone();
    let model_object =
        json!({"id": model, "object": "model", "context_length": 131_072, "owned_by": "canon-sim"});
    match (parts.method.as_str(), path.as_str()) {
        ("GET", "/v1/models") => {
            return Ok(json_response(
                200,
                &json!({"object": "list", "data": [model_object]}),
            ))
        }
        ("GET", p) if p.strip_prefix("/v1/models/") == Some(model.as_str()) => {
            return Ok(json_response(200, &model_object))
        }
        ("POST", "/v1/chat/completions") => {}
        _ => {
            return Ok(json_response(
                404,
                &json!({"error": {"message": "not found", "type": "invalid_request_error"}}),
            ))
        }
    }
    let Ok(collected) = Limited::new(body, 8 * 1024 * 1024).collect().await else {
        return Ok(json_response(
            413,
            &json!({"error": {"message": "request too large"}}),
        ));
    };
    let Ok(request) = serde_json::from_slice::<Value>(&collected.to_bytes()) else {
        return Ok(json_response(
            400,
            &json!({"error": {"message": "invalid JSON", "type": "invalid_request_error"}}),
        ));
    };
    let n = {
        let mut log = shared
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut arrivals = shared
            .arrivals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if log.0.len() >= MODEL_LOG_CAP {
            log.0.pop_front();
            arrivals.pop_front();
        }
        log.0.push_back(request.clone());
        arrivals.push_back(std::time::Instant::now());
        log.1 += 1;
        log.1
    };
    let planned = shared.script.plan(&request, n);
    let id = format!("chatcmpl-{n}");
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15});
    if request.get("stream") != Some(&Value::Bool(true)) {
        let (message, finish) = match &planned {
            Planned::Text(d) => (json!({"role": "assistant", "content": d.concat()}), "stop"),
            Planned::Tool(cid, name, args) => (
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]}),
                "tool_calls",
            ),
            Planned::SpeechThenTool(speech, cid, name, args) => (
                json!({"role": "assistant", "content": speech.concat(), "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]}),
                "tool_calls",
            ),
        };
        return Ok(json_response(
            200,
            &json!({
                "id": id, "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }),
        ));
    }
    let mut frames = vec![chunk(&id, &model, json!({"role": "assistant"}), None)];
    let finish = match &planned {
        Planned::Text(deltas) => {
            for d in deltas {
                frames.push(chunk(&id, &model, json!({"content": d}), None));
            }
            "stop"
        }
        Planned::Tool(cid, name, args) => {
            frames.push(chunk(&id, &model, json!({"tool_calls": [
                {"index": 0, "id": cid, "type": "function", "function": {"name": name, "arguments": args}}]}), None));
            "tool_calls"
        }
        Planned::SpeechThenTool(speech, cid, name, args) => {
            for d in speech {
                frames.push(chunk(&id, &model, json!({"content": d}), None));
            }
            frames.push(chunk(&id, &model, json!({"tool_calls": [
                {"index": 0, "id": cid, "type": "function", "function": {"name": name, "arguments": args}}]}), None));
            "tool_calls"
        }
    };
    frames.push(chunk(&id, &model, json!({}), Some(finish)));
    if request.pointer("/stream_options/include_usage") == Some(&Value::Bool(true)) {
        let u = json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [], "usage": usage});
        frames.push(format!("data: {u}\n\n"));
    }
    frames.push("data: [DONE]\n\n".to_owned());
    let delay = shared.script.delay_ms(&request);
    let body = if delay == 0 {
        SimBody::full(frames.concat())
    } else {
        // A slow model: one frame per `delayMs`, so a test can act mid-turn.
        let (tx, body) = SimBody::channel();
        tokio::spawn(async move {
            for frame in frames {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                if tx.send(Ok(bytes::Bytes::from(frame))).await.is_err() {
                    return;
                }
            }
        });
        body
    };
    Ok(Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap_or_else(|_| Response::new(SimBody::full(""))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_concatenate_back_to_the_text() {
        let script =
            Script::parse(r#"{"rules":[{"match":{},"reply":{"text":"one two  three"}}]}"#).unwrap();
        let Planned::Text(d) = script.plan(&json!({"messages":[{"role":"user","content":"x"}]}), 1)
        else {
            panic!("expected text");
        };
        assert_eq!(d.concat(), "one two  three");
        assert!(d.len() >= 3);
    }

    #[test]
    fn a_tool_call_with_text_speaks_before_calling() {
        let script = Script::parse(
            r#"{"rules":[{"match":{},"reply":{"text":"Let me check. ","toolCall":{"name":"todo","arguments":{},"id":"c1"}}}]}"#,
        )
        .unwrap();
        let planned = script.plan(&json!({"messages":[{"role":"user","content":"x"}]}), 1);
        assert_eq!(
            planned,
            Planned::SpeechThenTool(
                vec!["Let ".into(), "me ".into(), "check. ".into()],
                "c1".into(),
                "todo".into(),
                "{}".into()
            )
        );
        let bare = Script::parse(
            r#"{"rules":[{"match":{},"reply":{"toolCall":{"name":"todo","arguments":{},"id":"c1"}}}]}"#,
        )
        .unwrap();
        assert_eq!(
            bare.plan(&json!({"messages":[{"role":"user","content":"x"}]}), 1),
            Planned::Tool("c1".into(), "todo".into(), "{}".into())
        );
    }

    #[test]
    fn ignore_case_matches_any_letter_case_and_only_when_asked() {
        let script = Script::parse(
            r#"{"rules":[{"match":{"contains":"delete","ignoreCase":true},"reply":{"text":"a"}},
                         {"match":{"contains":"tool"},"reply":{"text":"b"}},
                         {"match":{},"reply":{"text":"c"}}]}"#,
        )
        .unwrap();
        let answer = |text: &str| match script
            .plan(&json!({"messages":[{"role":"user","content":text}]}), 1)
        {
            Planned::Text(d) => d.concat(),
            other => panic!("expected text, got {other:?}"),
        };
        assert_eq!(answer("please DELETE it"), "a");
        assert_eq!(answer("Delete"), "a");
        assert_eq!(answer("run a tool"), "b");
        assert_eq!(answer("run a TOOL"), "c");
    }

    #[test]
    fn unknown_script_fields_are_refused() {
        assert!(Script::parse(r#"{"rules":[{"match":{"bogus":1},"reply":{}}]}"#).is_err());
    }
}
