//! Runs the real `canon-hermes serve --stdio` binary against canon-sim, speaking the shim side of
//! the JSON-lines protocol (hermes-host.md §19): handshake, an inbound wake, a streamed turn that
//! ends in exactly one `turn_complete`, a 20 KB answer in ordered parts, `no_reply` and its
//! lifting by `turn.steered`, `turn.accepted` answering the follow-up's turn id, exit on stdin EOF or
//! when the parent process is gone, the connect sequence's conversation cache, runtime control
//! signals (doorbell and poll), `probe`, `adapter.chat_info`, out-of-turn sends (one
//! standalone id group through `send_to`, replayed without duplicates after an ambiguous
//! failure), the runtime status loop, the conversation re-fetch after `replay.expired` and
//! typing coalescing.

use std::process::Stdio;
use std::time::Duration;

use canon_sim::control::{Injection, Signal};
use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};
use canon_sim::state::StreamCmd;
use canon_sim::{ConversationSpec, SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};

use super::shim_support::{
    complete_turn, ctx, dm_event, open_turn, open_turn_with, sim, Shim, SESSION, WAIT,
};

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

/// `adapter.disconnect`, asserting it is answered.
async fn disconnect(shim: &mut Shim) {
    let done = shim
        .request("adapter.disconnect", json!({"adapter_instance": 1}))
        .await;
    assert_eq!(done["ok"], true, "{done}");
}

/// Injects a human message with `text` into the direct conversation.
fn inject_text(sim: &SimHandle, text: &str) {
    sim.inject_message(&Injection {
        text: Some(text.to_owned()),
        ..Injection::default()
    })
    .expect("inject");
}

/// Raises a runtime control signal in `conversation`, with or without the doorbell.
fn raise_signal(
    sim: &SimHandle,
    conversation: &str,
    signal: &str,
    updated_by: Option<&str>,
    doorbell: bool,
) {
    sim.raise_signal(&Signal {
        conversation_id: conversation.to_owned(),
        signal: signal.to_owned(),
        updated_by: updated_by.map(str::to_owned),
        doorbell: Some(doorbell),
    })
    .expect("signal raised");
}

/// `adapter.send` opening a streamed answer (`expect_edits`) in the direct conversation; the
/// response.
async fn send_streamed(shim: &mut Shim, content: &str) -> Value {
    shim.request(
        "adapter.send",
        json!({"chat_id": DEFAULT_CONVERSATION, "content": content,
               "metadata": {"expect_edits": true}, "ctx": ctx()}),
    )
    .await
}

/// The finalizing `adapter.edit` of `turn_id` in the direct conversation; the response.
async fn edit_final(shim: &mut Shim, turn_id: &str, content: &str) -> Value {
    shim.request(
        "adapter.edit",
        json!({"chat_id": DEFAULT_CONVERSATION, "message_id": turn_id, "content": content,
               "finalize": true, "ctx": ctx()}),
    )
    .await
}

/// `canon_runtime_control` called with `args` in the current turn; the response.
async fn runtime_control(shim: &mut Shim, args: Value) -> Value {
    shim.request(
        "tool.call",
        json!({"name": "canon_runtime_control", "args": args, "ctx": ctx()}),
    )
    .await
}

/// The JSON result of a `tool.call` response.
fn tool_result(tool: &Value) -> Value {
    serde_json::from_str(tool["body"]["result"].as_str().expect("result"))
        .expect("the tool result is JSON")
}

/// `adapter.chat_info` for `chat_id`; the response.
async fn chat_info(shim: &mut Shim, chat_id: &str) -> Value {
    shim.request("adapter.chat_info", json!({"chat_id": chat_id}))
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn handshake_is_required_first_and_then_negotiated() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    let early = chat_info(&mut shim, "c").await;
    assert_eq!(early["ok"], false);
    assert_eq!(early["error"]["code"], "handshake_required");
    let hello = shim.hello().await;
    assert_eq!(hello["ok"], true, "{hello}");
    assert_eq!(hello["body"]["protocol"], 1);
    assert_eq!(hello["body"]["daemon_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(hello["body"]["epoch"].as_str().map(str::len), Some(16));
    let unsupported = shim
        .request(
            "tool.call",
            json!({"name": "canon_communicate", "args": {}}),
        )
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
    inject_text(&sim, "hello from a human");
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

    let sent = send_streamed(&mut shim, "Two plus").await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    assert_eq!(sent["body"]["message_id"], turn_id.as_str());
    let edited = edit_final(&mut shim, &turn_id, "Two plus two is four.").await;
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
    let sent = send_streamed(&mut shim, &answer[..100]).await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    let edited = edit_final(&mut shim, &turn_id, &answer).await;
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
    let tool = runtime_control(
        &mut shim,
        json!({"action": "no_reply", "reason": "secret model text"}),
    )
    .await;
    let result = tool_result(&tool);
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

/// Streams `text` into `turn_id` and finalizes it (staged until `turn.complete`).
async fn stage_final(shim: &mut Shim, turn_id: &str, text: &str) {
    let sent = send_streamed(shim, text).await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    let edited = edit_final(shim, turn_id, text).await;
    assert_eq!(edited["body"]["success"], true, "{edited}");
}

/// `turn.steered` after `no_reply`: the steer lifts the silence (hermes-host.md §12.3 step 5),
/// so the turn's final is delivered after all.
#[tokio::test(flavor = "multi_thread")]
async fn accepted_steer_lifts_the_no_reply_silence() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "nothing to say yet").await;
    let tool = runtime_control(&mut shim, json!({"action": "no_reply"})).await;
    let result = tool_result(&tool);
    assert_eq!(result["status"], "acknowledged", "{tool}");
    shim.write(&json!({"v": 1, "type": "turn.steered",
        "body": {"session_key": SESSION, "chat_id": DEFAULT_CONVERSATION}}))
        .await;
    stage_final(&mut shim, &turn_id, "Steered answer.").await;
    complete_turn(&mut shim, &event_ref).await;
    assert_eq!(
        agent_messages(&sim),
        vec![("Steered answer.".to_owned(), "turn_complete".to_owned())]
    );
    assert_eq!(shim.close().await, Some(0));
}

/// `turn.accepted` (a dequeued follow-up, turns.md OQ-18) answers the follow-up's own turn
/// id, and the follow-up's final lands under it (hermes-host.md §19.6, additive).
#[tokio::test(flavor = "multi_thread")]
async fn turn_accepted_answers_the_follow_ups_turn_id() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (_first_ref, first_turn) = open_turn(&mut shim, &sim, "first question").await;
    stage_final(&mut shim, &first_turn, "First answer.").await;

    inject_text(&sim, "second question");
    let inbound = shim.accept_inbound().await;
    let second_ref = inbound["body"]["event_ref"].as_str().expect("event_ref");
    let message_id = &inbound["body"]["event"]["message_id"];
    let accepted = shim
        .request(
            "turn.accepted",
            json!({"event_ref": second_ref, "session_key": SESSION, "phase": "queue_dequeue",
                   "event": dm_event(message_id.clone())}),
        )
        .await;
    assert_eq!(accepted["ok"], true, "{accepted}");
    let second_turn = accepted["body"]["turn_id"]
        .as_str()
        .expect("turn.accepted answers a turn id")
        .to_owned();
    assert_ne!(second_turn, first_turn);

    stage_final(&mut shim, &second_turn, "Second answer.").await;
    complete_turn(&mut shim, second_ref.to_owned().as_str()).await;
    sim.wait_for("two finals", WAIT, |s| {
        s.messages
            .iter()
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .count()
            >= 2
    })
    .await
    .expect("both turns deliver their final");
    let finals: Vec<(String, String)> = sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .map(|m| {
                (
                    m.message["metadata"]["turnId"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    m.message["text"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    });
    assert_eq!(
        finals,
        [
            (first_turn, "First answer.".to_owned()),
            (second_turn, "Second answer.".to_owned())
        ]
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
    let mut shim = Shim::spawn_logged(&sim, "trace", Stdio::piped(), &[]);
    let mut stderr = shim.child.stderr.take().expect("piped stderr");
    let logs = tokio::spawn(async move {
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text)
            .await
            .map(|_| text)
    });
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "log everything").await;
    let sent = send_streamed(&mut shim, "logged answer").await;
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

const GROUP: &str = "c-team";

/// A group conversation `c-team` ("Team") of the owner and the agent.
fn add_group(sim: &SimHandle) {
    sim.create_conversation(ConversationSpec {
        id: Some(GROUP.to_owned()),
        kind: "group".to_owned(),
        name: Some("Team".to_owned()),
        member_ids: vec![DEFAULT_OWNER.to_owned(), DEFAULT_AGENT.to_owned()],
        behavior: None,
    });
}

/// Requests the sim journal recorded under `path`, in order: (method, body).
fn journal(sim: &SimHandle, path: &str) -> Vec<(String, Value)> {
    sim.journal(0, Some(path))
        .into_iter()
        .map(|e| (e.method, e.body))
        .collect()
}

/// Waits until the daemon has polled at least `n` signals (any conversation).
async fn wait_for_consumes(sim: &SimHandle, n: usize) {
    sim.wait_for("signal consumed", WAIT, |s| {
        s.journal.count(Some("POST"), "/runtime/signal/consume") >= n
    })
    .await
    .expect("the daemon polls runtime signals");
}

fn status_fault(method: &str, path: &str, status: u16) -> FaultRule {
    FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            method: Some(method.to_owned()),
            path: Some(path.to_owned()),
            ..FaultMatcher::default()
        },
        action: FaultAction::Status {
            status,
            body: None,
            retry_after: None,
            headers: Vec::new(),
        },
        seen: 0,
        fired: 0,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_caches_the_conversations_for_chat_info() {
    let sim = sim().await;
    add_group(&sim);
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let paths: Vec<String> = sim.journal(0, None).into_iter().map(|e| e.path).collect();
    let me = paths.iter().position(|p| p == "/agents/me");
    let list = paths.iter().position(|p| p == "/conversations");
    assert!(
        me.is_some() && list.is_some() && me < list,
        "GET /agents/me, then GET /conversations: {paths:?}"
    );

    // No message arrived from the group: only `GET /conversations` can name it.
    let team = chat_info(&mut shim, GROUP).await;
    assert_eq!(
        team["body"],
        json!({"name": "Team", "type": "group", "id": GROUP}),
        "{team}"
    );
    let direct = chat_info(&mut shim, DEFAULT_CONVERSATION).await;
    assert_eq!(
        direct["body"],
        json!({"name": "Owner", "type": "dm", "id": DEFAULT_CONVERSATION})
    );
    let unknown = chat_info(&mut shim, "c-elsewhere").await;
    assert_eq!(
        unknown["body"],
        json!({"name": "c-elsewhere", "type": "dm", "id": "c-elsewhere"})
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_info_before_connect_falls_back_to_the_id() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    assert_eq!(shim.hello().await["ok"], true);
    let info = chat_info(&mut shim, DEFAULT_CONVERSATION).await;
    assert_eq!(
        info["body"],
        json!({"name": DEFAULT_CONVERSATION, "type": "dm", "id": DEFAULT_CONVERSATION})
    );
    assert!(
        sim.journal(0, None).is_empty(),
        "chat_info is answered locally"
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn rejected_conversation_list_fails_connect_as_auth_failed() {
    let sim = sim().await;
    sim.add_fault(status_fault("GET", "/conversations", 401))
        .expect("fault installed");
    let mut shim = Shim::spawn(&sim);
    let connect = shim.try_connect().await;
    assert_eq!(
        connect["body"],
        json!({"connected": false, "fatal": {
            "code": "auth_failed",
            "message": "Canon rejected the configured agent credentials. Re-run Canon setup.",
            "retryable": false,
        }}),
        "{connect}"
    );
    assert!(
        journal(&sim, "/agents/stream").is_empty(),
        "no stream after a failed connect"
    );
    assert!(journal(&sim, "/runtime/signal/consume").is_empty());
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_conversation_list_fails_connect_retryably() {
    let sim = sim().await;
    sim.add_fault(status_fault("GET", "/conversations", 503))
        .expect("fault installed");
    let mut shim = Shim::spawn(&sim);
    let connect = shim.try_connect().await;
    assert_eq!(connect["body"]["connected"], false, "{connect}");
    assert_eq!(connect["body"]["fatal"]["code"], "connect_failed");
    assert_eq!(connect["body"]["fatal"]["retryable"], true);
    assert!(journal(&sim, "/agents/stream").is_empty());
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn doorbell_signal_reaches_the_shim_as_control_signal() {
    let sim = sim().await;
    add_group(&sim);
    // The default 15 s poll: within the 10 s wait only the doorbell can deliver.
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    // The first pass at connect visits both conversations before the signal exists.
    wait_for_consumes(&sim, 2).await;

    raise_signal(
        &sim,
        DEFAULT_CONVERSATION,
        "interrupt",
        Some(DEFAULT_OWNER),
        true,
    );
    let request = shim.expect("control.signal").await;
    assert!(
        request["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("d:")),
        "{request}"
    );
    assert_eq!(
        request["body"],
        json!({"chat_id": DEFAULT_CONVERSATION, "chat_name": "Owner", "chat_type": "dm",
               "signal": "interrupt", "updated_by": DEFAULT_OWNER})
    );
    shim.answer(&request, json!({})).await;

    // A group signal without `updatedBy` names the agent itself.
    raise_signal(&sim, GROUP, "stop_and_drop", None, true);
    let request = shim.expect("control.signal").await;
    assert_eq!(
        request["body"],
        json!({"chat_id": GROUP, "chat_name": "Team", "chat_type": "group",
               "signal": "stop_and_drop", "updated_by": DEFAULT_AGENT})
    );
    shim.answer(&request, json!({})).await;
    assert!(sim.read_state(|s| s.signals.values().all(|q| q.is_empty())));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn missed_doorbell_is_caught_by_the_poll() {
    let sim = sim().await;
    let mut shim = Shim::spawn_with(&sim, &[("CANON_HERMES_SIGNAL_POLL_MS", "200")]);
    shim.connect(&sim).await;
    raise_signal(
        &sim,
        DEFAULT_CONVERSATION,
        "new_session",
        Some(DEFAULT_OWNER),
        false,
    );
    let request = shim.expect("control.signal").await;
    assert_eq!(request["body"]["signal"], "new_session", "{request}");
    assert_eq!(request["body"]["chat_id"], DEFAULT_CONVERSATION);
    assert_eq!(request["body"]["updated_by"], DEFAULT_OWNER);
    shim.answer(&request, json!({})).await;
    let consumes = journal(&sim, "/runtime/signal/consume");
    assert!(consumes.iter().all(|(method, body)| method == "POST"
        && *body == json!({"conversationId": DEFAULT_CONVERSATION})));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn disconnect_stops_the_signal_poll() {
    let sim = sim().await;
    let mut shim = Shim::spawn_with(&sim, &[("CANON_HERMES_SIGNAL_POLL_MS", "100")]);
    shim.connect(&sim).await;
    wait_for_consumes(&sim, 2).await;
    disconnect(&mut shim).await;
    raise_signal(&sim, DEFAULT_CONVERSATION, "interrupt", None, false);
    // The absence of a consume can only be observed over time: ten poll
    // intervals pass without the daemon taking the signal.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let pending = sim.read_state(|s| {
        s.signals
            .get(DEFAULT_CONVERSATION)
            .map_or(0, std::collections::VecDeque::len)
    });
    assert_eq!(pending, 1, "the signal is still waiting in Canon");
    assert!(shim
        .backlog()
        .all(|frame| frame["type"] != "control.signal"));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn probe_without_verify_makes_no_network_call_and_hides_the_key() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    assert_eq!(shim.hello().await["ok"], true);
    let probe = shim
        .request(
            "probe",
            json!({"config": {"extra": {}, "enabled": true}, "verify": false}),
        )
        .await;
    assert_eq!(
        probe["body"],
        json!({"configured": true, "base_url": sim.base_url(),
               "stream_url": sim.stream_url(), "seed": null}),
        "{probe}"
    );
    assert!(!probe.to_string().contains(&sim.api_key()));
    let check_fn = shim
        .request("probe", json!({"config": null, "verify": false}))
        .await;
    assert_eq!(check_fn["body"]["configured"], true, "{check_fn}");
    assert!(
        sim.journal(0, None).is_empty(),
        "probe without verify touched Canon"
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn probe_reports_missing_credentials_and_verifies_on_request() {
    let sim = sim().await;
    let mut bare = Shim::spawn_with(&sim, &[("CANON_API_KEY", "")]);
    assert_eq!(bare.hello().await["ok"], true);
    let probe = bare
        .request("probe", json!({"config": null, "verify": false}))
        .await;
    assert_eq!(probe["body"]["configured"], false, "{probe}");
    assert_eq!(bare.close().await, Some(0));
    assert!(sim.journal(0, None).is_empty());

    let mut shim = Shim::spawn(&sim);
    assert_eq!(shim.hello().await["ok"], true);
    let verified = shim
        .request("probe", json!({"config": null, "verify": true}))
        .await;
    assert_eq!(verified["body"]["configured"], true, "{verified}");
    assert!(verified["body"].get("error").is_none(), "{verified}");
    assert_eq!(journal(&sim, "/agents/me").len(), 1);
    assert!(!verified.to_string().contains(&sim.api_key()));

    sim.add_fault(status_fault("GET", "/agents/me", 401))
        .expect("fault installed");
    let refused = shim
        .request("probe", json!({"config": null, "verify": true}))
        .await;
    assert!(
        refused["body"]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty() && !e.contains(&sim.api_key())),
        "{refused}"
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_exits_when_the_parent_process_is_gone() {
    let sim = sim().await;
    let mut gone = std::process::Command::new("true")
        .spawn()
        .expect("`true` runs");
    let gone_pid = gone.id().to_string();
    gone.wait().expect("`true` exits and is reaped");

    let live_pid = std::process::id().to_string();
    let mut orphan = Shim::spawn_with(&sim, &[("CANON_HERMES_PARENT_PID", &gone_pid)]);
    let mut kept = Shim::spawn_with(&sim, &[("CANON_HERMES_PARENT_PID", &live_pid)]);
    // stdin stays open: only the parent check can end the orphan.
    let status = tokio::time::timeout(WAIT, orphan.child.wait())
        .await
        .expect("the daemon exits within the parent check interval")
        .expect("wait works");
    assert_eq!(status.code(), Some(0));
    assert!(orphan.stdin.is_some(), "stdin was never closed");

    assert!(
        kept.child.try_wait().expect("try_wait works").is_none(),
        "a daemon whose parent lives keeps running"
    );
    assert_eq!(kept.hello().await["ok"], true);
    assert_eq!(kept.close().await, Some(0));
}

/// A 10 KB cron report: 200 lines, 10,400 bytes, three parts.
fn cron_text() -> String {
    (0..200)
        .map(|i| format!("Cron line {i:03}: the nightly report says all is well.\n"))
        .collect()
}

/// `adapter.send` outside any turn, as Hermes' in-process cron delivers through the live
/// adapter (hermes-host.md §10, §15): no session, no `notify`, so no turn id (turns.md §7.6).
async fn send_out_of_turn(shim: &mut Shim, text: &str, metadata: Value) -> Value {
    shim.request(
        "adapter.send",
        json!({"chat_id": DEFAULT_CONVERSATION, "content": text, "reply_to": null,
               "metadata": metadata, "ctx": {}}),
    )
    .await
}

/// The agent's stored messages in the direct conversation: (client id, message).
fn stored_parts(sim: &SimHandle) -> Vec<(Option<String>, Value)> {
    sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.conversation_id == DEFAULT_CONVERSATION)
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .map(|m| (m.client_id.clone(), m.message.clone()))
            .collect()
    })
}

/// The `messageId` a `send_to` journal entry was answered with (null when none).
fn verb_message_id(response: &Value) -> &Value {
    &response["result"]["value"]["messageId"]
}

/// Lead decision on turns.md §7.6 vs §4.6: a send without a turn id is one standalone id
/// group, `hermes-final-<32 hex>` with `-part-i` ids and `messageChunk.groupId`, sent part by
/// part through `send_to` with the part id as `idempotencyKey`.
#[tokio::test(flavor = "multi_thread")]
async fn out_of_turn_send_is_one_durable_chunked_message_group() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let text = cron_text();
    assert!(text.len() > 10_000);
    let sent = send_out_of_turn(&mut shim, &text, json!({"job_id": "job-1"})).await;
    assert_eq!(sent["body"]["success"], true, "{sent}");

    let parts = stored_parts(&sim);
    assert_eq!(parts.len(), 3, "10 KB in 3,800-byte parts");
    let texts: Vec<&str> = parts
        .iter()
        .map(|(_, m)| m["text"].as_str().unwrap_or_default())
        .collect();
    assert!(texts.iter().all(|t| t.len() <= 3_800));
    assert_eq!(
        texts.join("\n"),
        text,
        "the parts carry the whole text in order"
    );
    let count = parts.len();
    let base = parts[0].1["metadata"]["messageChunk"]["groupId"]
        .as_str()
        .expect("a group id")
        .to_owned();
    assert!(
        base.len() == 45 && base.starts_with("hermes-final-"),
        "{base}"
    );
    for (i, (client_id, message)) in parts.iter().enumerate() {
        let index = i + 1;
        let metadata = &message["metadata"];
        assert_eq!(
            client_id.as_deref(),
            Some(format!("{base}-part-{index}").as_str())
        );
        assert_eq!(
            metadata["messageChunk"],
            json!({"type": "text", "index": index, "count": count, "groupId": base}),
            "{metadata}"
        );
        assert_eq!(metadata["hermes"], json!({"job_id": "job-1"}));
        assert!(metadata.get("turnId").is_none(), "no turn: {metadata}");
        assert!(metadata.get("turnTrail").is_none(), "{metadata}");
        if index < count {
            assert_eq!(metadata["turnSemantics"], "progress", "{metadata}");
            assert_eq!(metadata["replyBehavior"], "suppress_auto_reply");
            assert!(metadata.get("turnComplete").is_none(), "{metadata}");
        } else {
            assert_eq!(metadata["turnSemantics"], "turn_complete", "{metadata}");
            assert_eq!(metadata["turnComplete"], true);
        }
    }
    assert_eq!(sent["body"]["message_id"], parts[count - 1].1["id"]);

    let sends = journal(&sim, "/agent/verbs/send_to");
    assert_eq!(sends.len(), count, "one request per part, no retries");
    for ((method, body), (client_id, _)) in sends.iter().zip(&parts) {
        assert_eq!(method, "POST");
        assert_eq!(body["verb"], "send_to");
        assert_eq!(
            body["envelope"],
            json!({"conversationId": DEFAULT_CONVERSATION, "idempotencyKey": client_id})
        );
    }
    assert!(journal(&sim, "/messages/send").is_empty());

    // A second send of the same text is a new invocation: a new id group. Its `reply_to`
    // rides in the envelope on every part (canon-wire.md §4.15 [target]).
    let reply_to = parts[count - 1].1["id"].clone();
    let again = shim
        .request(
            "adapter.send",
            json!({"chat_id": DEFAULT_CONVERSATION, "content": text, "reply_to": reply_to,
                   "metadata": null, "ctx": {}}),
        )
        .await;
    assert_eq!(again["body"]["success"], true, "{again}");
    let all = stored_parts(&sim);
    assert_eq!(all.len(), 2 * count);
    let second_base = &all[count].1["metadata"]["messageChunk"]["groupId"];
    assert_ne!(second_base, &json!(base));
    assert!(all[count..]
        .iter()
        .all(|(id, _)| id.as_deref().is_some_and(|id| !id.starts_with(&base))));
    assert!(all[count..].iter().all(|(_, m)| m["replyTo"] == reply_to));
    let sends = journal(&sim, "/agent/verbs/send_to");
    assert!(sends[count..]
        .iter()
        .all(|(_, body)| body["envelope"]["replyTo"] == reply_to));
    assert_eq!(shim.close().await, Some(0));
}

/// turns.md §4.5 and §4.7 for a send without a turn id: an ambiguous failure of one part
/// (processed, then the connection dropped or a 502) is replayed with identical bytes under
/// the same `idempotencyKey`, and Canon stores exactly one copy of every part.
#[tokio::test(flavor = "multi_thread")]
async fn out_of_turn_send_replays_an_ambiguous_part_without_duplicates() {
    for (nth, action) in [
        (1, FaultAction::ProcessThenDrop),
        (3, FaultAction::ProcessThenStatus { status: 502 }),
    ] {
        let sim = sim().await;
        sim.add_fault(FaultRule {
            id: String::new(),
            matcher: FaultMatcher {
                method: Some("POST".to_owned()),
                path: Some("/agent/verbs/send_to".to_owned()),
                agent: Some(DEFAULT_AGENT.to_owned()),
                nth: Some(vec![nth]),
                ..FaultMatcher::default()
            },
            action: action.clone(),
            seen: 0,
            fired: 0,
        })
        .expect("fault installed");
        let mut shim = Shim::spawn(&sim);
        shim.connect(&sim).await;
        let text = cron_text();
        let sent = send_out_of_turn(&mut shim, &text, Value::Null).await;
        assert_eq!(sent["body"]["success"], true, "{action:?}: {sent}");

        let parts = stored_parts(&sim);
        assert_eq!(parts.len(), 3, "{action:?}: one stored copy of each part");
        let ids: Vec<&str> = parts
            .iter()
            .map(|(id, _)| id.as_deref().expect("a client id"))
            .collect();
        let texts: Vec<&str> = parts
            .iter()
            .map(|(_, m)| m["text"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(texts.join("\n"), text, "{action:?}: nothing lost");

        let entries = sim.journal(0, Some("/agent/verbs/send_to"));
        let statuses: Vec<u16> = entries.iter().map(|e| e.status).collect();
        let keys: Vec<&str> = entries
            .iter()
            .map(|e| e.body["envelope"]["idempotencyKey"].as_str().unwrap_or(""))
            .collect();
        let first = nth as usize - 1;
        let mut expected_statuses = vec![200; 4];
        expected_statuses[first] = match action {
            FaultAction::ProcessThenStatus { status } => status,
            _ => 0,
        };
        assert_eq!(statuses, expected_statuses, "{action:?}");
        let mut expected_keys = ids.clone();
        expected_keys.insert(first, ids[first]);
        assert_eq!(keys, expected_keys, "{action:?}: the replay reuses the id");
        assert!(
            entries[first].body == entries[first + 1].body,
            "{action:?}: the replay sends identical bytes"
        );
        // The failed attempt was processed and stored the part; the replay was answered with
        // that very message.
        let stored = &parts[first].1["id"];
        assert_eq!(verb_message_id(&entries[first + 1].response), stored);
        if matches!(action, FaultAction::ProcessThenDrop) {
            assert_eq!(verb_message_id(&entries[first].response), stored);
        }
        assert_eq!(sent["body"]["message_id"], parts[2].1["id"]);
        assert!(journal(&sim, "/messages/send").is_empty());
        assert_eq!(shim.close().await, Some(0));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_disposition_release_is_retried_behind_later_writes() {
    let sim = sim().await;
    let mut fault = status_fault("PATCH", "/conversations/*", 503);
    fault.matcher.nth = Some(vec![1]);
    sim.add_fault(fault).expect("fault installed");
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let injection = Injection {
        text: Some("a queued question".to_owned()),
        metadata: Some(json!({"inboundDisposition": "queued"})),
        ..Injection::default()
    };
    let (event_ref, _turn_id) = open_turn_with(&mut shim, &sim, &injection).await;
    sim.wait_for("disposition retried", WAIT, |s| {
        s.journal.count(Some("PATCH"), "/conversations/") >= 2
    })
    .await
    .expect("the failed release is retried");

    let entries = sim.journal(0, Some("/conversations/"));
    let patches: Vec<_> = entries.iter().filter(|e| e.method == "PATCH").collect();
    assert_eq!(patches.len(), 2, "one failure, one successful retry");
    assert_eq!(patches[0].status, 503);
    assert_eq!(patches[1].status, 200);
    assert_eq!(
        patches[1].body,
        json!({"inboundDisposition": "accepted_now"})
    );
    // The ordered worker did not wait for the retry: the read mark behind
    // the failed release went out before the retry did.
    let read = entries
        .iter()
        .find(|e| e.method == "POST" && e.path.ends_with("/read"))
        .expect("the turn marks the conversation read");
    assert!(patches[0].seq < read.seq && read.seq < patches[1].seq);
    let released = sim.read_state(|s| {
        s.messages.iter().any(|m| {
            m.message["text"] == "a queued question"
                && m.message["metadata"]["inboundDisposition"] == "accepted_now"
        })
    });
    assert!(released, "Canon holds the message as accepted_now");
    complete_turn(&mut shim, &event_ref).await;
    assert_eq!(shim.close().await, Some(0));
}

/// How many requests the sim journal holds of exactly `method path`.
fn count_requests(sim: &SimHandle, method: &str, path: &str) -> usize {
    sim.journal(0, Some(path))
        .iter()
        .filter(|e| e.method == method && e.path == path)
        .count()
}

/// canon-wire.md §8.1 steps 6–7: T10 at connect, then again every status interval (shortened
/// here to 100 ms) until `adapter.disconnect` stops the loop.
#[tokio::test(flavor = "multi_thread")]
async fn runtime_status_is_republished_until_disconnect() {
    let sim = sim().await;
    let mut shim = Shim::spawn_with(&sim, &[("CANON_HERMES_STATUS_INTERVAL_MS", "100")]);
    shim.connect(&sim).await;
    // One publish at connect, at least two more from the loop.
    sim.wait_for("runtime status republished", WAIT, |s| {
        s.journal.count(Some("POST"), "/runtime/status") >= 3
    })
    .await
    .expect("the status loop publishes again");
    let published = journal(&sim, "/runtime/status");
    assert!(
        published
            .iter()
            .all(|(method, body)| method == "POST" && body.is_object() && *body == published[0].1),
        "every publish carries the same descriptor: {published:?}"
    );

    disconnect(&mut shim).await;
    // A publish already on the wire may still land; after that, ten intervals pass
    // without another one.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = count_requests(&sim, "POST", "/runtime/status");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(
        count_requests(&sim, "POST", "/runtime/status"),
        stopped,
        "no runtime status after disconnect"
    );
    assert_eq!(shim.close().await, Some(0));
}

/// Asks `adapter.chat_info` until it names `chat_id` as a group (the re-fetched list reaches
/// the loop after Canon answered it), at most for the wait; returns the last body.
async fn chat_info_once_known(shim: &mut Shim, chat_id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let info = chat_info(shim, chat_id).await;
        if info["body"]["type"] == "group" || tokio::time::Instant::now() >= deadline {
            return info["body"].clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Moves the daemon's stream cursor past one message, then makes the sim forget it and closes
/// the stream: the reconnect sends that cursor and gets `replay.expired`.
async fn expire_the_replay(shim: &mut Shim, sim: &SimHandle) {
    inject_text(sim, "before the gap");
    // The cursor moves before the event is handled, so it is set once this arrives.
    shim.accept_inbound().await;
    sim.expire_replay_buffer(DEFAULT_AGENT);
    assert_eq!(sim.stream_control(DEFAULT_AGENT, StreamCmd::Close), 1);
    sim.wait_for("stream reopened", WAIT, |s| {
        s.journal.count(Some("GET"), "/agents/stream") >= 2
    })
    .await
    .expect("the daemon reconnects the stream");
    let streams = sim.journal(0, Some("/agents/stream"));
    assert!(
        streams[1]
            .headers
            .iter()
            .any(|(name, value)| name == "last-event-id" && !value.is_empty()),
        "the reconnect resumes from the cursor: {:?}",
        streams[1].headers
    );
}

/// canon-wire.md §5.3: after `replay.expired` the daemon re-fetches `GET /conversations`, so a
/// conversation the stream never mentioned is known to `adapter.chat_info`.
#[tokio::test(flavor = "multi_thread")]
async fn replay_expired_refetches_the_conversation_list() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    // Created after connect; nothing on the stream names it.
    add_group(&sim);
    let unknown = chat_info(&mut shim, GROUP).await;
    assert_eq!(
        unknown["body"],
        json!({"name": GROUP, "type": "dm", "id": GROUP}),
        "not cached before the re-fetch"
    );
    assert_eq!(count_requests(&sim, "GET", "/conversations"), 1);

    expire_the_replay(&mut shim, &sim).await;
    sim.wait_for("conversations re-fetched", WAIT, |s| {
        s.journal
            .since(0, Some("/conversations"))
            .iter()
            .filter(|e| e.method == "GET" && e.path == "/conversations")
            .count()
            >= 2
    })
    .await
    .expect("replay.expired re-fetches the conversations");
    assert_eq!(
        chat_info_once_known(&mut shim, GROUP).await,
        json!({"name": "Team", "type": "group", "id": GROUP})
    );
    // The connection's conversations stay cached too.
    let direct = chat_info(&mut shim, DEFAULT_CONVERSATION).await;
    assert_eq!(
        direct["body"],
        json!({"name": "Owner", "type": "dm", "id": DEFAULT_CONVERSATION})
    );
    assert_eq!(shim.close().await, Some(0));
}

/// canon-wire.md §5.3: a failed re-fetch is not fatal: it is logged, the stream reconnects and
/// the daemon keeps delivering inbound messages.
#[tokio::test(flavor = "multi_thread")]
async fn failed_refetch_reconnects_the_stream_and_is_not_fatal() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    sim.add_fault(status_fault("GET", "/conversations", 503))
        .expect("fault installed");
    expire_the_replay(&mut shim, &sim).await;
    // Each stream opening logs an `agent.context` in the same step that makes it live; the
    // buffer was emptied before the second one, so two mean the third stream is live.
    sim.wait_for("stream reconnected after the failed re-fetch", WAIT, |s| {
        s.journal.count(Some("GET"), "/agents/stream") >= 3
            && s.events.get(DEFAULT_AGENT).is_some_and(|log| {
                log.events
                    .iter()
                    .filter(|e| e.name == "agent.context")
                    .count()
                    >= 2
            })
    })
    .await
    .expect("a failed re-fetch reconnects the stream");
    let lists: Vec<u16> = sim
        .journal(0, Some("/conversations"))
        .into_iter()
        .filter(|e| e.method == "GET" && e.path == "/conversations")
        .map(|e| e.status)
        .collect();
    assert!(
        lists.len() >= 2 && lists[1..].iter().all(|status| *status == 503),
        "the re-fetch was tried and failed: {lists:?}"
    );
    sim.clear_faults();

    inject_text(&sim, "after the gap");
    let inbound = shim.accept_inbound().await;
    assert_eq!(inbound["body"]["event"]["text"], "after the gap");
    assert!(
        shim.backlog().all(|f| f["type"] != "adapter.fatal"),
        "a failed re-fetch is not fatal: {:?}",
        shim.backlog().collect::<Vec<_>>()
    );
    assert_eq!(shim.close().await, Some(0));
}

/// The `typing` flag of every `POST /typing` the daemon made, in order.
fn typing_writes(sim: &SimHandle) -> Vec<Value> {
    journal(sim, "/typing")
        .into_iter()
        .filter(|(method, _)| method == "POST")
        .map(|(_, body)| body["typing"].clone())
        .collect()
}

/// hermes-host.md §19.9: repeated `typing on` for one chat reach Canon at most once per 1.5 s;
/// `typing off` always passes and re-arms the chat.
#[tokio::test(flavor = "multi_thread")]
async fn repeated_typing_on_is_coalesced_per_chat() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let typing = |on: bool| json!({"v": 1, "type": "typing", "body": {"chat_id": DEFAULT_CONVERSATION, "on": on}});
    let started = std::time::Instant::now();
    for _ in 0..10 {
        shim.write(&typing(true)).await;
    }
    shim.write(&typing(false)).await;
    // Writes leave in order, so once `off` is in, every earlier write is too.
    sim.wait_for("typing off written", WAIT, |s| {
        s.journal
            .since(0, Some("/typing"))
            .iter()
            .any(|e| e.body["typing"] == false)
    })
    .await
    .expect("typing off reaches Canon");
    let elapsed = started.elapsed();
    let writes = typing_writes(&sim);
    let on = writes.iter().take_while(|t| **t == true).count();
    assert_eq!(writes.get(on), Some(&json!(false)), "{writes:?}");
    // The ten frames were handled within `elapsed`, so coalescing lets through one, plus one
    // per full 1.5 s window that passed (none on any usual machine).
    let allowed = 1 + usize::try_from(elapsed.as_millis() / 1_500).unwrap_or(usize::MAX);
    assert!(
        (1..=allowed).contains(&on),
        "{on} typing-on writes for 10 notifications within {elapsed:?}"
    );

    shim.write(&typing(true)).await;
    sim.wait_for("typing on after off", WAIT, |s| {
        s.journal.count(Some("POST"), "/typing") > on + 1
    })
    .await
    .expect("typing on passes again right after off");
    assert_eq!(typing_writes(&sim).last(), Some(&json!(true)));
    assert_eq!(shim.close().await, Some(0));
}
