//! `canon_communicate` through [`Session::handle`] (runtime-control.md §5): the availability
//! the shim is told (connect, `agent.context`, disconnect), the call-time refusals before the
//! arguments, a call that becomes its Canon call and the answer its result makes. The pure
//! twin of `crates/cli/tests/it/hermes_communicate.rs`.

use canon_wire::events::EventKind;

use super::*;
use crate::communicate::{self, CanonRequest, Failure};

fn me(policy: Option<&str>) -> AgentMe {
    let mut raw = json!({"agentId": "a1", "displayName": "Hermes", "ownerId": "o1"});
    if let Some(policy) = policy {
        raw["outboundPolicy"] = json!(policy);
    }
    AgentMe::from_object(raw.as_object().cloned().unwrap_or_default())
}

fn availability(available: bool) -> String {
    format!(
        "tool.availability {}",
        json!({"name": "canon_communicate", "available": available})
    )
}

fn context(policy: Option<&str>) -> SessionInput {
    SessionInput::StreamEvent(EventKind::AgentContext {
        agent_id: None,
        outbound_policy: policy.map(str::to_owned),
    })
}

impl Daemon {
    /// `adapter.connect` answered by Canon with an agent of `policy`.
    fn connect_as(&mut self, policy: Option<&str>) -> Vec<String> {
        let body = json!({"is_reconnect": false, "adapter_instance": 1,
                          "config": {"extra": {}, "home_channel": null}, "host": {},
                          "seams": {"busy_handler": false, "dequeue_ack": false}});
        let effects = self.handle_effects(SessionInput::Line(
            protocol::encode_request("s:c", "adapter.connect", body).into_bytes(),
        ));
        let [SessionEffect::ResolveCredentials(call)] = effects.as_slice() else {
            panic!("the credentials are resolved first: {effects:?}");
        };
        let facts = self.session.config.credentials.clone();
        self.handle(SessionInput::CredentialsResolved {
            call: call.clone(),
            facts,
        });
        let conversations = Conversation::list_from(json!([{"id": "c1", "type": "direct"}]));
        self.handle(SessionInput::ConnectDone {
            call: ConnectCall {
                id: "s:c".into(),
                re: "adapter.connect",
                busy_handler: false,
                is_reconnect: false,
            },
            result: Ok((me(policy), conversations)),
        })
    }

    /// A `canon_communicate` call with `args` in the turn context `ctx`.
    fn communicate(&mut self, id: &str, args: Value, ctx: Value) -> Vec<SessionEffect> {
        let body = json!({"name": "canon_communicate", "args": args, "ctx": ctx});
        self.handle_effects(SessionInput::Line(
            protocol::encode_request(id, "tool.call", body).into_bytes(),
        ))
    }
}

/// The tool result string of the one frame in `effects`, parsed.
fn tool_result(effects: &[SessionEffect]) -> Value {
    let [SessionEffect::Frame(line)] = effects else {
        panic!("one frame: {effects:?}");
    };
    let frame: Value = serde_json::from_str(line).expect("a JSON line");
    serde_json::from_str(frame["body"]["result"].as_str().expect("a result")).expect("JSON")
}

fn canon_ctx(conversation: &str) -> Value {
    json!({"platform": "canon", "chat_id": conversation, "user_id": "u1",
           "session_key": session_key(conversation), "message_id": "m1"})
}

#[test]
fn availability_is_announced_on_connect_and_follows_agent_context_and_disconnect() {
    let mut daemon = Daemon::connected();
    let connected = daemon.connect_as(Some("open"));
    assert_eq!(
        connected.last().map(String::as_str),
        Some(availability(true).as_str())
    );
    assert!(connected.contains(&"answer s:c adapter.connect ok".to_owned()));
    // Another enabled policy changes nothing the shim must hear.
    assert!(daemon.handle(context(Some("approval-required"))).is_empty());
    // A frame without a string policy clears it: closed.
    assert_eq!(daemon.handle(context(None)), [availability(false)]);
    assert!(daemon.handle(context(Some("closed"))).is_empty());
    assert_eq!(daemon.handle(context(Some("open"))), [availability(true)]);
    let stopped = daemon.request("s:d", "adapter.disconnect", json!({"adapter_instance": 1}));
    assert_eq!(
        stopped.last().map(String::as_str),
        Some(availability(false).as_str())
    );

    // A closed agent is never announced.
    let mut closed = Daemon::connected();
    let answered = closed.connect_as(Some("closed"));
    assert!(
        !answered.iter().any(|l| l.starts_with("tool.availability")),
        "{answered:?}"
    );
    assert_eq!(
        closed.handle(context(Some("approval-required"))),
        [availability(true)]
    );
}

#[test]
fn calls_are_refused_for_authority_then_policy_before_their_arguments() {
    let bad = json!({"action": "teleport"});
    let mut daemon = Daemon::connected();
    assert_eq!(
        tool_result(&daemon.communicate("s:1", bad.clone(), json!({}))),
        json!({"error": communicate::NO_AUTHORITY, "success": false})
    );
    daemon.connect_as(None);
    assert_eq!(
        tool_result(&daemon.communicate("s:2", bad.clone(), json!({}))),
        json!({"error": communicate::CLOSED, "success": false})
    );
    daemon.handle(context(Some("open")));
    // Inside a Canon turn the daemon must own an open turn in that conversation.
    assert_eq!(
        tool_result(&daemon.communicate("s:3", bad.clone(), canon_ctx("c1"))),
        json!({"error": communicate::NO_AUTHORITY, "success": false})
    );
    assert_eq!(
        tool_result(&daemon.communicate("s:4", bad, json!({}))),
        json!({"error": "communicate.text is required", "success": false})
    );
}

#[test]
fn a_call_in_its_turn_runs_one_verb_and_answers_with_the_mapped_result() {
    let mut daemon = Daemon::connected();
    daemon.connect_as(Some("approval-required"));
    let event = daemon.message("c1", "m1", "hello").expect("wakes");
    daemon.turn_start("s:t", &event, "c1", "m1");
    let args = json!({"action": "start_direct", "principalId": "a2", "text": "hi",
                      "selection": {"mode": "new"}});
    let effects = daemon.communicate("s:5", args, canon_ctx("c1"));
    let [SessionEffect::Communicate { id, re, call }] = effects.as_slice() else {
        panic!("one Canon call: {effects:?}");
    };
    assert_eq!((id.as_str(), *re), ("s:5", "tool.call"));
    let CanonRequest::Verb {
        verb,
        envelope,
        value,
    } = &call.request
    else {
        panic!("a verb: {call:?}");
    };
    assert_eq!(*verb, "send_to");
    // Inside its turn the call is keyed by the turn and itself, so a repeat posts once.
    let turn_id = daemon
        .session
        .machine
        .open_turn(&session_key("c1"))
        .expect("the open turn")
        .to_owned();
    let mut keyless = envelope.clone();
    let key = keyless.remove("idempotencyKey").expect("a key");
    assert_eq!(
        Value::Object(keyless.clone()),
        json!({"targetUserId": "a2", "sessionSelection": {"mode": "new"}})
    );
    let request = json!({"verb": "send_to", "envelope": keyless, "value": value}).to_string();
    assert_eq!(
        key,
        canon_chunking::ids::call_idempotency_key(&turn_id, &request)
    );
    assert_eq!(Value::Object(value.clone()), json!({"text": "hi"}));

    let done = daemon.handle_effects(SessionInput::CommunicateDone {
        id: id.clone(),
        re,
        call: call.clone(),
        result: Err(Failure {
            message: "Canon API returned 403: {}".into(),
            code: Some(communicate::OUTBOUND_APPROVAL_REQUIRED.into()),
        }),
    });
    assert_eq!(
        tool_result(&done),
        json!({"success": true, "status": "approval_required",
               "reason": communicate::APPROVAL_REQUIRED_REASON})
    );
    let done = daemon.handle_effects(SessionInput::CommunicateDone {
        id: id.clone(),
        re,
        call: call.clone(),
        result: Ok(
            json!({"status": "messaged", "conversationId": "c2", "messageId": "m9",
                          "created": true, "reused": false})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        ),
    });
    assert_eq!(
        tool_result(&done),
        json!({"success": true, "status": "messaged", "conversationId": "c2",
               "messageId": "m9", "created": true, "reused": false})
    );
}
