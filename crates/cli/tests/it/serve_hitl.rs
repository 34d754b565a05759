//! Blocking clarify and exec approval through the real `canon-hermes serve --stdio` against
//! canon-sim (runtime-control.md §6.1–§6.5, hermes-host.md §13, §19.6–§19.7, Q2, Q10,
//! turns.md §7.8 and OQ-3): the exact runtime-interaction request bodies, the `SendResult`
//! right after creation, `waiting_input` then `tool`, typing paused and resumed,
//! `clarify.resolve` with the answer text, `approval.resolve` with `session`, `once` or `deny`,
//! the responder check, the cancel, deny and timeout paths, and the cancel when the turn ends.
//!
//! The simulator's clock follows the system time here: the daemon computes `expiresAt` from
//! the real clock, as Canon expects.

use std::time::Duration;

use canon_sim::config::SimConfig;
use canon_sim::interactions::Response;
use canon_sim::{
    ConversationSpec, PrincipalSpec, Sim, SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION,
    DEFAULT_OWNER,
};
use serde_json::{json, Value};

use super::shim_support::{
    complete_turn, ctx_with_owner, start_turn, turn_states, Shim, SESSION, WAIT,
};

/// The `event_ref` of the owner's turns, which the tests open without injecting a message.
const EVENT_REF: &str = "e-hitl";
const GROUP: &str = "c-hitl-group";
const GUEST: &str = "h-guest";

/// A simulator on the system clock, with a group where a second human (not the owner) is a
/// member.
async fn hitl_sim() -> SimHandle {
    let mut config = SimConfig::for_tests();
    config.frozen_clock_ms = None;
    let sim = Sim::start(config).await.expect("the simulator starts");
    sim.create_principal(PrincipalSpec {
        id: Some(GUEST.into()),
        kind: "human".into(),
        display_name: Some("Guest".into()),
        ..PrincipalSpec::default()
    });
    sim.create_conversation(ConversationSpec {
        id: Some(GROUP.into()),
        kind: "group".into(),
        name: Some("HITL group".into()),
        member_ids: vec![DEFAULT_OWNER.into(), DEFAULT_AGENT.into(), GUEST.into()],
        behavior: None,
    });
    sim
}

/// A connected daemon polling every 50 ms; the HITL timeouts come from `env` only.
async fn connected(sim: &SimHandle, env: &[(&str, &str)], host: Value) -> Shim {
    let mut all = vec![
        ("CANON_HERMES_HITL_POLL_MS", "50"),
        ("HERMES_CLARIFY_TIMEOUT", ""),
        ("HERMES_APPROVAL_TIMEOUT", ""),
    ];
    for (name, value) in env {
        all.retain(|(n, _)| n != name);
        all.push((name, value));
    }
    let mut shim = Shim::spawn_with(sim, &all);
    let connect = shim
        .try_connect_with(json!({"extra": {}, "typing_indicator": true}), host)
        .await;
    assert_eq!(connect["body"]["connected"], true, "{connect}");
    sim.wait_for("stream open", WAIT, |s| !s.open_streams.is_empty())
        .await
        .expect("the daemon opens the event stream");
    shim
}

/// The bodies of the agent's runtime-interaction requests, in order.
fn interaction_requests(sim: &SimHandle) -> Vec<Value> {
    sim.journal(0, Some("/runtime-interaction/request"))
        .into_iter()
        .filter(|e| e.method == "POST" && e.principal.as_deref() == Some(DEFAULT_AGENT))
        .map(|e| e.body)
        .collect()
}

/// Waits until the agent published `state` in `conversation`.
async fn wait_state(sim: &SimHandle, conversation: &str, state: &str) {
    let (conversation, state) = (conversation.to_owned(), state.to_owned());
    sim.wait_for(&format!("turn state {state}"), WAIT, move |s| {
        s.turn_history.iter().any(|t| {
            t["conversationId"] == conversation.as_str()
                && t["agent"] == DEFAULT_AGENT
                && t["state"] == state.as_str()
        })
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Waits until `conversation`'s turn has published `tool` after `n` resolutions: the
/// publish runs on the daemon's ordered writer, after the `*.resolve` frame the test saw.
async fn wait_tool_states(sim: &SimHandle, conversation: &str, n: usize) {
    let conversation = conversation.to_owned();
    sim.wait_for(&format!("{n} tool states"), WAIT, move |s| {
        let mut states: Vec<&str> = Vec::new();
        for t in s
            .turn_history
            .iter()
            .filter(|t| t["conversationId"] == conversation.as_str() && t["agent"] == DEFAULT_AGENT)
        {
            let state = t["state"].as_str().unwrap_or_default();
            if states.last() != Some(&state) {
                states.push(state);
            }
        }
        states.iter().filter(|s| **s == "tool").count() >= n
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// The sim's state of interaction `id` of `kind` in `conversation`.
fn interaction_state(sim: &SimHandle, conversation: &str, kind: &str, id: &str) -> String {
    sim.read_state(|s| {
        s.interactions
            .get(&(conversation.to_owned(), kind.to_owned(), id.to_owned()))
            .map(|i| i.state.clone())
            .unwrap_or_default()
    })
}

/// `adapter.send_clarify` in the direct conversation; the response.
async fn send_clarify(shim: &mut Shim, clarify_id: &str, choices: Value) -> Value {
    shim.request(
        "adapter.send_clarify",
        json!({"chat_id": DEFAULT_CONVERSATION, "question": "Which colour?", "choices": choices,
               "clarify_id": clarify_id, "session_key": SESSION, "metadata": null,
               "ctx": ctx_with_owner()}),
    )
    .await
}

/// `adapter.send_exec_approval` with the given extra fields; the response.
async fn send_approval(shim: &mut Shim, chat_id: &str, ctx: Value, extra: Value) -> Value {
    let mut body = json!({"chat_id": chat_id, "command": "rm -rf /tmp/scratch",
                          "session_key": SESSION, "description": "recursive delete",
                          "metadata": null, "allow_permanent": true, "smart_denied": false,
                          "ctx": ctx});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    shim.request("adapter.send_exec_approval", body).await
}

/// Asserts a successful `SendResult` naming the interaction message; returns the message id.
fn sent(response: &Value) -> String {
    assert_eq!(response["ok"], true, "{response}");
    assert_eq!(response["body"]["success"], true, "{response}");
    response["body"]["message_id"]
        .as_str()
        .expect("the interaction message id")
        .to_owned()
}

/// Answers the next daemon request of `kind` and returns its body.
async fn resolved(shim: &mut Shim, kind: &str, answer: Value) -> Value {
    let request = shim.expect(kind).await;
    assert!(request["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("d:")));
    shim.answer(&request, answer).await;
    request["body"].clone()
}

fn respond(sim: &SimHandle, response: Response) {
    sim.respond_interaction(&response)
        .expect("the sim takes the answer");
}

#[tokio::test]
async fn clarify_asks_canon_and_resolves_hermes_with_the_answer() {
    let sim = hitl_sim().await;
    let mut shim = connected(&sim, &[], json!({"streaming_enabled": true})).await;
    start_turn(&mut shim, EVENT_REF, "m-hitl").await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let reply = send_clarify(
        &mut shim,
        "0123456789",
        json!([" Red ", {"text": "Blue", "value": "blue"}, {"label": "  "}, ""]),
    )
    .await;
    let message_id = sent(&reply);

    // The exact request (runtime-control.md §6.4).
    let requests = interaction_requests(&sim);
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let mut request = requests[0].clone();
    let expires_at = request["expiresAt"].as_u64().expect("expiresAt");
    assert!(
        (before + 299_000..=before + 310_000).contains(&expires_at),
        "300 s ahead: {expires_at} vs {before}"
    );
    request["expiresAt"] = json!(0);
    assert_eq!(
        request,
        json!({"interactionKind": "input", "conversationId": DEFAULT_CONVERSATION,
               "inputId": "0123456789", "kind": "clarify", "expiresAt": 0,
               "title": "Clarification needed", "prompt": "Which colour?",
               "choices": [{"label": "Red", "value": "Red"}, {"label": "Blue", "value": "blue"}],
               "responseUserId": DEFAULT_OWNER,
               "native": {"runtime": "hermes", "method": "clarify", "requestId": "0123456789",
                          "sessionKey": SESSION}})
    );
    let message = sim.read_state(|s| {
        s.messages
            .iter()
            .find(|m| m.message["id"] == message_id.as_str())
            .map(|m| m.message.clone())
    });
    assert!(
        message.is_some(),
        "the SendResult names the interaction message"
    );

    // `waiting_input` pauses typing.
    wait_state(&sim, DEFAULT_CONVERSATION, "waiting_input").await;
    let pause = shim.expect("typing.pause").await;
    assert_eq!(pause["body"]["chat_id"], DEFAULT_CONVERSATION);

    respond(
        &sim,
        Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "input".into(),
            id: "0123456789".into(),
            value: Some("blue".into()),
            ..Response::default()
        },
    );
    let body = resolved(&mut shim, "clarify.resolve", json!({"resolved": true})).await;
    assert_eq!(
        body,
        json!({"clarify_id": "0123456789", "response": "blue"})
    );
    wait_state(&sim, DEFAULT_CONVERSATION, "tool").await;
    let resume = shim.expect("typing.resume").await;
    assert_eq!(resume["body"]["chat_id"], DEFAULT_CONVERSATION);
    assert_eq!(
        turn_states(&sim, DEFAULT_CONVERSATION),
        ["thinking", "waiting_input", "tool"]
    );
    complete_turn(&mut shim, EVENT_REF).await;
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test]
async fn clarify_structured_answers_cancel_and_timeout_give_their_texts() {
    let sim = hitl_sim().await;
    let mut shim = connected(&sim, &[("HERMES_CLARIFY_TIMEOUT", "60")], json!({})).await;
    start_turn(&mut shim, EVENT_REF, "m-hitl").await;

    // Structured answers of two questions: one `id: a, b` line each.
    sent(&send_clarify(&mut shim, "c000000001", json!(null)).await);
    let request = &interaction_requests(&sim)[0];
    assert!(request.get("choices").is_none(), "{request}");
    respond(
        &sim,
        Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "input".into(),
            id: "c000000001".into(),
            answers: Some(json!({"q1": {"answers": ["a", " b "]}, "q2": "c"})),
            ..Response::default()
        },
    );
    let body = resolved(&mut shim, "clarify.resolve", json!({"resolved": true})).await;
    assert_eq!(body["response"], "q1: a, b\nq2: c");

    // Cancelled by the human.
    sent(&send_clarify(&mut shim, "c000000002", json!(["x"])).await);
    respond(
        &sim,
        Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "input".into(),
            id: "c000000002".into(),
            status: Some("cancelled".into()),
            ..Response::default()
        },
    );
    let body = resolved(&mut shim, "clarify.resolve", json!({"resolved": true})).await;
    assert_eq!(body["response"], "[user cancelled the clarification]");

    // Expired on Canon (the sim clock passes the 60 s deadline).
    sent(&send_clarify(&mut shim, "c000000003", json!(["x"])).await);
    let requests = interaction_requests(&sim);
    let span = requests[2]["expiresAt"].as_u64().expect("expiresAt") - sim.now_ms();
    assert!(
        (55_000..=61_000).contains(&span),
        "HERMES_CLARIFY_TIMEOUT: {span}"
    );
    sim.advance_clock(120_000);
    let body = resolved(&mut shim, "clarify.resolve", json!({"resolved": false})).await;
    assert_eq!(body["response"], "[user did not respond within 5m]");

    // `tool` after every resolution, the turn stays open (turns.md OQ-3).
    wait_tool_states(&sim, DEFAULT_CONVERSATION, 3).await;
    let states = turn_states(&sim, DEFAULT_CONVERSATION);
    assert_eq!(
        states.last().map(String::as_str),
        Some("tool"),
        "{states:?}"
    );
    assert!(!states.iter().any(|s| s == "interrupted"), "{states:?}");
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test]
async fn exec_approval_allowed_by_the_owner_resolves_session_or_once() {
    let sim = hitl_sim().await;
    let mut shim = connected(&sim, &[], json!({"approvals_timeout_s": 60.0})).await;
    start_turn(&mut shim, EVENT_REF, "m-hitl").await;
    let reply = send_approval(&mut shim, DEFAULT_CONVERSATION, ctx_with_owner(), json!({})).await;
    sent(&reply);

    // The exact request (runtime-control.md §6.5): the owner answers, so a session rule is
    // offered; the deadline is Hermes' 60 s approvals.timeout (hermes-host.md Q10).
    let mut request = interaction_requests(&sim)[0].clone();
    let approval_id = request["approvalId"].as_str().expect("an id").to_owned();
    assert!(
        approval_id.len() == 27
            && approval_id.starts_with("hermes-")
            && approval_id[7..].bytes().all(|b| b.is_ascii_hexdigit()),
        "{approval_id}"
    );
    let span = request["expiresAt"].as_u64().expect("expiresAt") - sim.now_ms();
    assert!(
        (55_000..=61_000).contains(&span),
        "min(300 s, 60 s): {span}"
    );
    request["expiresAt"] = json!(0);
    assert_eq!(
        request,
        json!({"interactionKind": "approval", "conversationId": DEFAULT_CONVERSATION,
               "approvalId": approval_id, "toolName": "Command",
               "toolSummary": "recursive delete", "expiresAt": 0, "category": "command",
               "risk": "high", "riskLevel": "destructive", "allowSessionRule": true,
               "responseUserId": DEFAULT_OWNER,
               "details": [{"label": "Command", "value": "rm -rf /tmp/scratch", "monospace": true},
                           {"label": "Reason", "value": "recursive delete"}],
               "native": {"runtime": "hermes", "method": "exec_approval",
                          "requestId": approval_id, "sessionKey": SESSION}})
    );
    wait_state(&sim, DEFAULT_CONVERSATION, "waiting_input").await;
    shim.expect("typing.pause").await;
    respond(
        &sim,
        Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "approval".into(),
            id: approval_id.clone(),
            decision: Some("allow".into()),
            session_rule: Some(json!({"type": "approve-all"})),
            ..Response::default()
        },
    );
    let body = resolved(&mut shim, "approval.resolve", json!({"resolved": 1})).await;
    assert_eq!(body, json!({"session_key": SESSION, "choice": "session"}));
    wait_state(&sim, DEFAULT_CONVERSATION, "tool").await;
    shim.expect("typing.resume").await;

    // Allowed without a session rule: once.
    sent(&send_approval(&mut shim, DEFAULT_CONVERSATION, ctx_with_owner(), json!({})).await);
    let approval_id = interaction_requests(&sim)[1]["approvalId"]
        .as_str()
        .expect("an id")
        .to_owned();
    respond(
        &sim,
        Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "approval".into(),
            id: approval_id,
            decision: Some("allow".into()),
            ..Response::default()
        },
    );
    let body = resolved(&mut shim, "approval.resolve", json!({"resolved": 1})).await;
    assert_eq!(body["choice"], "once");
    wait_tool_states(&sim, DEFAULT_CONVERSATION, 2).await;
    assert_eq!(
        turn_states(&sim, DEFAULT_CONVERSATION),
        ["thinking", "waiting_input", "tool", "waiting_input", "tool"]
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test]
async fn exec_approval_routing_sudo_smart_denied_and_a_guest_responder() {
    let sim = hitl_sim().await;
    let mut shim = connected(&sim, &[("HERMES_APPROVAL_TIMEOUT", "30")], json!({})).await;
    let guest_ctx = json!({"platform": "canon", "chat_id": GROUP, "session_key": SESSION,
                           "user_id": GUEST});

    // A guest (not the owner) answers: no session rule; an `approve-all` answer is `once`.
    sent(&send_approval(&mut shim, GROUP, guest_ctx.clone(), json!({})).await);
    let request = interaction_requests(&sim)[0].clone();
    assert_eq!(request["responseUserId"], GUEST);
    assert_eq!(request["allowSessionRule"], false);
    let span = request["expiresAt"].as_u64().expect("expiresAt") - sim.now_ms();
    assert!(
        (25_000..=31_000).contains(&span),
        "HERMES_APPROVAL_TIMEOUT: {span}"
    );
    respond(
        &sim,
        Response {
            conversation_id: GROUP.into(),
            kind: "approval".into(),
            id: request["approvalId"].as_str().expect("id").into(),
            decision: Some("allow".into()),
            session_rule: Some(json!({"type": "approve-all"})),
            ..Response::default()
        },
    );
    let body = resolved(&mut shim, "approval.resolve", json!({"resolved": 1})).await;
    assert_eq!(body["choice"], "once");

    // `sudo` goes to the owner: no responseUserId, a session rule may be offered.
    sent(
        &send_approval(
            &mut shim,
            GROUP,
            guest_ctx.clone(),
            json!({"command": "/usr/bin/sudo rm -rf /tmp/scratch", "description": ""}),
        )
        .await,
    );
    let request = interaction_requests(&sim)[1].clone();
    assert!(request.get("responseUserId").is_none(), "{request}");
    assert_eq!(request["allowSessionRule"], true);
    assert_eq!(request["toolSummary"], "Command approval required");
    assert_eq!(
        request["details"][1],
        json!({"label": "Reason", "value": ""})
    );
    // Allowed by the owner (Canon's effective responder).
    respond(
        &sim,
        Response {
            conversation_id: GROUP.into(),
            kind: "approval".into(),
            id: request["approvalId"].as_str().expect("id").into(),
            decision: Some("allow".into()),
            session_rule: Some(json!({"type": "approve-tool"})),
            ..Response::default()
        },
    );
    let body = resolved(&mut shim, "approval.resolve", json!({"resolved": 1})).await;
    assert_eq!(body["choice"], "session");

    // Smart-denied and Hermes' session tier withheld: no session rule, a third detail row.
    let owner_ctx = json!({"platform": "canon", "chat_id": GROUP, "session_key": SESSION,
                           "user_id": DEFAULT_OWNER});
    sent(
        &send_approval(
            &mut shim,
            GROUP,
            owner_ctx.clone(),
            json!({"smart_denied": true}),
        )
        .await,
    );
    let request = interaction_requests(&sim)[2].clone();
    assert_eq!(request["responseUserId"], DEFAULT_OWNER);
    assert_eq!(request["allowSessionRule"], false);
    assert_eq!(
        request["details"][2],
        json!({"label": "Smart approval",
               "value": "The safety review denied this command. An override allows this operation once only."})
    );
    sent(&send_approval(&mut shim, GROUP, owner_ctx, json!({"allow_session": false})).await);
    let request = interaction_requests(&sim)[3].clone();
    assert_eq!(request["allowSessionRule"], false);
    assert_eq!(request["details"].as_array().map(Vec::len), Some(2));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test]
async fn exec_approval_deny_timeout_and_a_foreign_responder_deny() {
    let sim = hitl_sim().await;
    let mut shim = connected(&sim, &[], json!({})).await;
    start_turn(&mut shim, EVENT_REF, "m-hitl").await;
    let approval = |sim: &SimHandle, n: usize| {
        interaction_requests(sim)[n]["approvalId"]
            .as_str()
            .expect("id")
            .to_owned()
    };

    // Denied.
    sent(&send_approval(&mut shim, DEFAULT_CONVERSATION, ctx_with_owner(), json!({})).await);
    respond(
        &sim,
        Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "approval".into(),
            id: approval(&sim, 0),
            decision: Some("deny".into()),
            ..Response::default()
        },
    );
    let body = resolved(&mut shim, "approval.resolve", json!({"resolved": 1})).await;
    assert_eq!(body, json!({"session_key": SESSION, "choice": "deny"}));

    // Allowed, but by someone other than the requested human (canon-wire.md Q7b): deny.
    sent(&send_approval(&mut shim, DEFAULT_CONVERSATION, ctx_with_owner(), json!({})).await);
    respond(
        &sim,
        Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "approval".into(),
            id: approval(&sim, 1),
            decision: Some("allow".into()),
            responded_by: Some(GUEST.into()),
            ..Response::default()
        },
    );
    let body = resolved(&mut shim, "approval.resolve", json!({"resolved": 1})).await;
    assert_eq!(body["choice"], "deny");

    // Allowed without any responder identity: deny.
    sent(&send_approval(&mut shim, DEFAULT_CONVERSATION, ctx_with_owner(), json!({})).await);
    respond(
        &sim,
        Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "approval".into(),
            id: approval(&sim, 2),
            decision: Some("allow".into()),
            responded_by: Some(String::new()),
            ..Response::default()
        },
    );
    let body = resolved(&mut shim, "approval.resolve", json!({"resolved": 1})).await;
    assert_eq!(body["choice"], "deny");

    // Timed out on Canon: deny.
    sent(&send_approval(&mut shim, DEFAULT_CONVERSATION, ctx_with_owner(), json!({})).await);
    sim.advance_clock(400_000);
    let body = resolved(&mut shim, "approval.resolve", json!({"resolved": 0})).await;
    assert_eq!(body["choice"], "deny");
    wait_tool_states(&sim, DEFAULT_CONVERSATION, 4).await;
    let states = turn_states(&sim, DEFAULT_CONVERSATION);
    assert_eq!(
        states.last().map(String::as_str),
        Some("tool"),
        "{states:?}"
    );
    assert!(!states.iter().any(|s| s == "interrupted"), "{states:?}");
    assert_eq!(shim.close().await, Some(0));
}

/// An exec approval nobody is known to expect: a `sudo` command asks no particular human, and
/// this Canon knows no owner for the agent, so its create response names no responder and
/// `GET /agents/me` has no `ownerId`. A guest of the group then allows it with `approve-all`.
/// That allow came from someone the daemon cannot check, so it is a deny; it used to be
/// trusted, and even became a session-wide grant.
#[tokio::test]
async fn an_exec_approval_with_no_known_responder_is_denied_whoever_allows_it() {
    let sim = hitl_sim().await;
    sim.with_state(|s| {
        if let Some(agent) = s.principals.get_mut(DEFAULT_AGENT) {
            agent.owner_id = None;
        }
    });
    let mut shim = connected(&sim, &[("HERMES_APPROVAL_TIMEOUT", "30")], json!({})).await;
    let guest_ctx = json!({"platform": "canon", "chat_id": GROUP, "session_key": SESSION,
                           "user_id": GUEST});
    sent(
        &send_approval(
            &mut shim,
            GROUP,
            guest_ctx,
            json!({"command": "/usr/bin/sudo rm -rf /tmp/scratch"}),
        )
        .await,
    );
    let request = interaction_requests(&sim)[0].clone();
    assert!(request.get("responseUserId").is_none(), "{request}");
    let id = request["approvalId"].as_str().expect("id").to_owned();
    let echoed = sim.read_state(|s| {
        s.interactions
            .get(&(GROUP.to_owned(), "approval".to_owned(), id.clone()))
            .map(|i| i.response_user_id.clone())
    });
    assert_eq!(echoed, Some(None), "this Canon names no responder");
    respond(
        &sim,
        Response {
            conversation_id: GROUP.into(),
            kind: "approval".into(),
            id,
            decision: Some("allow".into()),
            session_rule: Some(json!({"type": "approve-all"})),
            responded_by: Some(GUEST.into()),
            ..Response::default()
        },
    );
    let body = resolved(&mut shim, "approval.resolve", json!({"resolved": 1})).await;
    assert_eq!(body, json!({"session_key": SESSION, "choice": "deny"}));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test]
async fn hermes_approval_timeout_bounds_the_canon_deadline_and_denies() {
    let sim = hitl_sim().await;
    // 5 s: the shortest Canon wait (runtime-control.md §6.5).
    let mut shim = connected(&sim, &[], json!({"approvals_timeout_s": 1.0})).await;
    sent(&send_approval(&mut shim, DEFAULT_CONVERSATION, ctx_with_owner(), json!({})).await);
    let id = interaction_requests(&sim)[0]["approvalId"]
        .as_str()
        .expect("id")
        .to_owned();
    let started = std::time::Instant::now();
    let request = tokio::time::timeout(Duration::from_secs(15), shim.expect("approval.resolve"))
        .await
        .expect("resolved at the deadline");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(request["body"]["choice"], "deny");
    shim.answer(&request, json!({"resolved": 0})).await;
    // The Canon deadline is Hermes' own wait (hermes-host.md Q10): the last consume finds it
    // expired, or the daemon's cancel consume closed it.
    sim.wait_for("closed", WAIT, |s| {
        s.interactions
            .values()
            .any(|i| i.id == id && matches!(i.state.as_str(), "cancelled" | "expired"))
    })
    .await
    .expect("the interaction is closed on Canon at the deadline");
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test]
async fn the_end_of_the_turn_cancels_an_open_interaction() {
    let sim = hitl_sim().await;
    let mut shim = connected(&sim, &[], json!({})).await;
    start_turn(&mut shim, EVENT_REF, "m-hitl").await;
    sent(&send_clarify(&mut shim, "c00000000a", json!(["x"])).await);
    wait_state(&sim, DEFAULT_CONVERSATION, "waiting_input").await;
    complete_turn(&mut shim, EVENT_REF).await;
    sim.wait_for("cancelled", WAIT, |s| {
        s.interactions
            .values()
            .any(|i| i.id == "c00000000a" && i.state == "cancelled")
    })
    .await
    .expect("turn.complete cancels the open clarify");
    assert_eq!(
        interaction_state(&sim, DEFAULT_CONVERSATION, "input", "c00000000a"),
        "cancelled"
    );
    // Hermes' wait ended with its turn: nothing is resolved.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !shim.backlog().any(|f| f["type"] == "clarify.resolve"),
        "no resolve after the turn ended"
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test]
async fn hitl_requests_fail_cleanly_when_not_connected_or_refused() {
    let sim = hitl_sim().await;
    let mut shim = Shim::spawn(&sim);
    let hello = shim.hello().await;
    assert_eq!(hello["ok"], true, "{hello}");
    let reply = send_clarify(&mut shim, "0123456789", json!([])).await;
    assert_eq!(
        reply["body"],
        json!({"success": false, "message_id": null, "error": "Canon adapter is not connected",
               "retryable": false, "retry_after": null, "error_kind": null,
               "raw_response": null})
    );
    let reply = send_approval(&mut shim, DEFAULT_CONVERSATION, ctx_with_owner(), json!({})).await;
    assert_eq!(reply["body"]["success"], false);
    assert_eq!(reply["body"]["error"], "Canon adapter is not connected");
    assert!(interaction_requests(&sim).is_empty());
    drop(shim);

    // Canon refuses the request (the responder is no member of the conversation).
    let mut shim = connected(&sim, &[], json!({})).await;
    let stranger = json!({"platform": "canon", "chat_id": DEFAULT_CONVERSATION,
                          "session_key": SESSION, "user_id": GUEST});
    let reply = send_approval(&mut shim, DEFAULT_CONVERSATION, stranger, json!({})).await;
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(reply["body"]["success"], false, "{reply}");
    assert!(
        reply["body"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("400")),
        "{reply}"
    );
    assert_eq!(shim.close().await, Some(0));
}
