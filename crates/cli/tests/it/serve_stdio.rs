//! Runs the real `canon-hermes serve --stdio` binary against canon-sim, speaking the shim side of
//! the JSON-lines protocol (hermes-host.md §19): handshake, an inbound wake, a streamed turn that
//! ends in exactly one `turn_complete`, a 20 KB answer in ordered parts, and exit on stdin EOF.

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::Duration;

use canon_sim::config::SimConfig;
use canon_sim::control::Injection;
use canon_sim::{Sim, SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const WAIT: Duration = Duration::from_secs(10);
const SESSION: &str = "agent:main:canon:dm:c-direct";

/// The shim side of one daemon child.
struct Shim {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// Frames read while waiting for something else.
    backlog: VecDeque<Value>,
}

impl Shim {
    fn spawn(sim: &SimHandle) -> Shim {
        Shim::spawn_with(sim, "warn", Stdio::inherit())
    }

    fn spawn_with(sim: &SimHandle, log: &str, stderr: Stdio) -> Shim {
        let mut child = Command::new(env!("CARGO_BIN_EXE_canon-hermes"))
            .args(["serve", "--stdio"])
            .env("CANON_API_KEY", sim.api_key())
            .env("CANON_BASE_URL", sim.base_url())
            .env("CANON_STREAM_URL", sim.stream_url())
            .env_remove("CANON_ENVIRONMENT_ID")
            .env_remove("CANON_HOME_CHANNEL")
            .env("RUST_LOG", log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("the binary starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        Shim {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next_id: 0,
            backlog: VecDeque::new(),
        }
    }

    async fn write(&mut self, frame: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let mut line = frame.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).await.expect("write stdin");
        stdin.flush().await.expect("flush stdin");
    }

    async fn read(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("a frame within the wait")
            .expect("stdout readable")
            .expect("stdout open");
        serde_json::from_str(&line).expect("stdout carries JSON frames only")
    }

    /// Sends a request and returns its response, keeping other frames in the backlog.
    async fn request(&mut self, kind: &str, body: Value) -> Value {
        self.next_id += 1;
        let id = format!("s:{}", self.next_id);
        self.write(&json!({"v": 1, "type": kind, "id": id, "body": body}))
            .await;
        loop {
            let frame = self.read().await;
            if frame.get("id") == Some(&json!(id)) && frame.get("ok").is_some() {
                return frame;
            }
            self.backlog.push_back(frame);
        }
    }

    /// The next frame of `kind` (from the backlog first).
    async fn expect(&mut self, kind: &str) -> Value {
        if let Some(i) = self.backlog.iter().position(|f| f["type"] == kind) {
            return self.backlog.remove(i).expect("present");
        }
        loop {
            let frame = self.read().await;
            if frame["type"] == kind {
                return frame;
            }
            self.backlog.push_back(frame);
        }
    }

    async fn hello(&mut self) -> Value {
        self.request(
            "hello",
            json!({
                "protocols": [1],
                "manifest_sha256": "0".repeat(64),
                "shim_version": env!("CARGO_PKG_VERSION"),
                "binary_version": env!("CARGO_PKG_VERSION"),
                "hermes_version": "0.19.0",
                "python_version": "3.11.7",
                "pid": 1,
                "hermes_home": "/tmp/hermes",
            }),
        )
        .await
    }

    async fn connect(&mut self, sim: &SimHandle) {
        let hello = self.hello().await;
        assert_eq!(hello["ok"], true, "{hello}");
        let connect = self
            .request(
                "adapter.connect",
                json!({
                    "adapter_instance": 1,
                    "config": {"extra": {}, "typing_indicator": true},
                    "host": {"streaming_enabled": true},
                }),
            )
            .await;
        assert_eq!(connect["body"]["connected"], true, "{connect}");
        assert_eq!(connect["body"]["agent_id"], DEFAULT_AGENT);
        sim.wait_for("stream open", WAIT, |s| !s.open_streams.is_empty())
            .await
            .expect("the daemon opens the event stream");
    }

    /// Closes stdin and returns the exit code.
    async fn close(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the daemon exits after EOF")
            .expect("wait works");
        status.code()
    }
}

async fn sim() -> SimHandle {
    Sim::start(SimConfig::for_tests())
        .await
        .expect("the simulator starts")
}

fn ctx() -> Value {
    json!({"platform": "canon", "chat_id": DEFAULT_CONVERSATION, "session_key": SESSION})
}

/// The agent's messages in the direct conversation, in creation order: (text, turnSemantics).
fn agent_messages(sim: &SimHandle) -> Vec<(String, String)> {
    sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.conversation_id == DEFAULT_CONVERSATION)
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .map(|m| {
                (
                    m.message["text"].as_str().unwrap_or_default().to_owned(),
                    m.message["metadata"]["turnSemantics"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    })
}

/// Injects a human message, answers the daemon's `inbound.message` and opens the turn.
async fn open_turn(shim: &mut Shim, sim: &SimHandle, text: &str) -> (String, String) {
    sim.inject_message(&Injection {
        text: Some(text.to_owned()),
        ..Injection::default()
    })
    .expect("inject");
    let inbound = shim.expect("inbound.message").await;
    let event = &inbound["body"]["event"];
    assert!(
        event["text"].as_str().is_some_and(|t| t.contains(text)),
        "{inbound}"
    );
    let event_ref = inbound["body"]["event_ref"]
        .as_str()
        .expect("event_ref")
        .to_owned();
    let message_id = event["message_id"].as_str().expect("message id").to_owned();
    shim.write(
        &json!({"v": 1, "id": inbound["id"], "re": "inbound.message", "ok": true,
        "body": {"accepted": true}}),
    )
    .await;
    let started = shim
        .request(
            "turn.start",
            json!({
                "event_ref": event_ref,
                "session_key": SESSION,
                "event": {"chat_id": DEFAULT_CONVERSATION, "chat_type": "dm",
                          "user_id": DEFAULT_OWNER, "message_id": message_id},
            }),
        )
        .await;
    let turn_id = started["body"]["turn_id"]
        .as_str()
        .expect("turn id")
        .to_owned();
    (event_ref, turn_id)
}

async fn complete_turn(shim: &mut Shim, event_ref: &str) {
    let done = shim
        .request(
            "turn.complete",
            json!({"event_ref": event_ref, "session_key": SESSION, "outcome": "success"}),
        )
        .await;
    assert_eq!(done["ok"], true, "{done}");
}

#[tokio::test(flavor = "multi_thread")]
async fn handshake_is_required_first_and_then_negotiated() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    let early = shim
        .request("adapter.chat_info", json!({"chat_id": "c"}))
        .await;
    assert_eq!(early["ok"], false);
    assert_eq!(early["error"]["code"], "handshake_required");
    let hello = shim.hello().await;
    assert_eq!(hello["ok"], true, "{hello}");
    assert_eq!(hello["body"]["protocol"], 1);
    assert_eq!(hello["body"]["daemon_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(hello["body"]["epoch"].as_str().map(str::len), Some(16));
    let unsupported = shim
        .request("adapter.chat_info", json!({"chat_id": "c"}))
        .await;
    assert_eq!(unsupported["ok"], false);
    assert_eq!(unsupported["error"]["code"], "internal");
    assert!(unsupported["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("not supported")));
    let unknown = shim.request("no.such.type", json!({})).await;
    assert_eq!(unknown["error"]["code"], "unknown_type");
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn unsupported_protocol_exits_78() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    let refused = shim
        .request(
            "hello",
            json!({"protocols": [99], "manifest_sha256": "", "shim_version": "",
                   "binary_version": "", "hermes_version": "", "python_version": "",
                   "pid": 1, "hermes_home": "/"}),
        )
        .await;
    assert_eq!(refused["error"]["code"], "unsupported_protocol");
    let status = tokio::time::timeout(WAIT, shim.child.wait())
        .await
        .expect("exits")
        .expect("wait works");
    assert_eq!(status.code(), Some(78));
}

#[tokio::test(flavor = "multi_thread")]
async fn injected_human_message_reaches_the_shim_as_inbound_message() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    sim.inject_message(&Injection {
        text: Some("hello from a human".into()),
        ..Injection::default()
    })
    .expect("inject");
    let inbound = shim.expect("inbound.message").await;
    assert!(inbound["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("d:")));
    let event = &inbound["body"]["event"];
    assert_eq!(event["text"], "hello from a human");
    assert_eq!(event["source"]["chat_id"], DEFAULT_CONVERSATION);
    assert_eq!(event["source"]["user_id"], DEFAULT_OWNER);
    assert!(!inbound.to_string().contains("replyAuthority"));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn streamed_turn_ends_with_exactly_one_turn_complete() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "what is two plus two").await;

    let sent = shim
        .request(
            "adapter.send",
            json!({"chat_id": DEFAULT_CONVERSATION, "content": "Two plus",
                   "metadata": {"expect_edits": true}, "ctx": ctx()}),
        )
        .await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    assert_eq!(sent["body"]["message_id"], turn_id.as_str());
    let edited = shim
        .request(
            "adapter.edit",
            json!({"chat_id": DEFAULT_CONVERSATION, "message_id": turn_id,
                   "content": "Two plus two is four.", "finalize": true, "ctx": ctx()}),
        )
        .await;
    assert_eq!(edited["body"]["success"], true, "{edited}");
    // Staged, not yet durable (turns.md §7.4).
    assert!(agent_messages(&sim).is_empty());

    complete_turn(&mut shim, &event_ref).await;
    let messages = agent_messages(&sim);
    assert_eq!(
        messages,
        vec![(
            "Two plus two is four.".to_owned(),
            "turn_complete".to_owned()
        )]
    );
    let states: Vec<Value> = sim.read_state(|s| {
        s.turn_history
            .iter()
            .filter(|t| t["turnId"] == turn_id.as_str())
            .map(|t| t["state"].clone())
            .collect()
    });
    assert_eq!(states.first(), Some(&json!("thinking")));
    assert_eq!(states.last(), Some(&json!("completed")));
    assert_eq!(shim.close().await, Some(0));
    assert_eq!(agent_messages(&sim).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_kilobyte_answer_arrives_as_ordered_parts_with_one_turn_complete() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "write a long essay").await;

    let answer: String = (0..300)
        .map(|i| {
            format!("Paragraph {i:03}: the quick brown fox jumps over the lazy dog again.\n\n")
        })
        .collect::<String>()
        .trim_end()
        .to_owned();
    assert!(answer.len() > 20_000);
    // Streamed: the first delta opens the bubble, the finalizing edit carries the whole text.
    let sent = shim
        .request(
            "adapter.send",
            json!({"chat_id": DEFAULT_CONVERSATION, "content": &answer[..100],
                   "metadata": {"expect_edits": true}, "ctx": ctx()}),
        )
        .await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    let edited = shim
        .request(
            "adapter.edit",
            json!({"chat_id": DEFAULT_CONVERSATION, "message_id": turn_id, "content": answer,
                   "finalize": true, "ctx": ctx()}),
        )
        .await;
    assert_eq!(edited["body"]["success"], true, "{edited}");
    complete_turn(&mut shim, &event_ref).await;

    let messages = agent_messages(&sim);
    assert!(messages.len() >= 6, "{} parts", messages.len());
    let (last, leading) = messages.split_last().expect("parts");
    assert_eq!(last.1, "turn_complete");
    assert!(leading.iter().all(|(_, semantics)| semantics == "progress"));
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let joined: String = messages.iter().map(|(text, _)| squash(text)).collect();
    assert_eq!(joined, squash(&answer), "parts arrive whole and in order");
    assert!(messages.iter().all(|(text, _)| text.len() <= 3_800));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn stdin_eof_exits_zero_without_a_handshake() {
    let sim = sim().await;
    let shim = Shim::spawn(&sim);
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn no_reply_silences_the_turn_and_records_the_silence() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, _turn_id) = open_turn(&mut shim, &sim, "nothing to say here").await;
    let tool = shim
        .request(
            "tool.call",
            json!({"name": "canon_runtime_control",
                   "args": {"action": "no_reply", "reason": "secret model text"},
                   "ctx": ctx()}),
        )
        .await;
    let result: Value = serde_json::from_str(tool["body"]["result"].as_str().expect("result"))
        .expect("the tool result is JSON");
    assert_eq!(result["status"], "acknowledged", "{tool}");
    complete_turn(&mut shim, &event_ref).await;
    sim.wait_for("silence recorded", WAIT, |s| !s.no_replies.is_empty())
        .await
        .expect("the daemon records the silence");
    let record = sim
        .read_state(|s| s.no_replies.front().cloned())
        .expect("a record");
    assert_eq!(record["conversationId"], DEFAULT_CONVERSATION);
    assert_eq!(record["hasReason"], true);
    assert!(
        agent_messages(&sim).is_empty(),
        "a silenced turn posts nothing"
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn typing_and_tool_hooks_are_carried_to_canon() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "use a tool").await;
    shim.write(&json!({"v": 1, "type": "typing",
        "body": {"chat_id": DEFAULT_CONVERSATION, "on": true}}))
        .await;
    shim.write(&json!({"v": 1, "type": "hook.pre_tool_call",
        "body": {"ctx": ctx(), "tool_name": "web_search", "args": {"q": "rust"},
                 "tool_call_id": "call-1"}}))
        .await;
    sim.wait_for("tool state published", WAIT, |s| {
        s.turn_history
            .iter()
            .any(|t| t["turnId"] == turn_id.as_str() && t["state"] == "tool")
    })
    .await
    .expect("the tool start is published as the turn's tool state");
    complete_turn(&mut shim, &event_ref).await;
    assert!(sim.read_state(|s| !s.typing_history.is_empty()));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn trace_logs_go_to_stderr_and_never_contain_the_api_key() {
    let sim = sim().await;
    let mut shim = Shim::spawn_with(&sim, "trace", Stdio::piped());
    let mut stderr = shim.child.stderr.take().expect("piped stderr");
    let logs = tokio::spawn(async move {
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text)
            .await
            .map(|_| text)
    });
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "log everything").await;
    let sent = shim
        .request(
            "adapter.send",
            json!({"chat_id": DEFAULT_CONVERSATION, "content": "logged answer",
                   "metadata": {"expect_edits": true}, "ctx": ctx()}),
        )
        .await;
    assert_eq!(sent["body"]["message_id"], turn_id.as_str());
    complete_turn(&mut shim, &event_ref).await;
    assert_eq!(shim.close().await, Some(0));
    let logs = logs.await.expect("joined").expect("stderr readable");
    assert!(logs.contains("handshake done"), "{logs}");
    assert!(
        !logs.contains(&sim.api_key()),
        "the API key leaked into the logs"
    );
}
