//! Whole daemon scenarios through [`Session::handle`] that need I/O: the
//! connect calls, the stream's states and events, runtime signals,
//! re-fetches, downloads, uploads and blocking interactions. Each is the
//! pure twin of a whole-binary scenario in `crates/cli/tests/it/serve_*.rs`
//! (named in its doc line); the shell's part is played by feeding back
//! the report an effect asks for.

use canon_wire::types::{InteractionCreated, InteractionResult, RuntimeSignal};

use super::*;
use crate::credentials::{CredentialFacts, ResolvePurpose};
use crate::hitl::table::HitlOutcome;

fn object(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

fn me() -> AgentMe {
    AgentMe::from_object(object(
        json!({"agentId": "a1", "displayName": "Hermes", "ownerId": "o1"}),
    ))
}

fn connect_body() -> Value {
    json!({"is_reconnect": false, "adapter_instance": 1,
           "config": {"extra": {}, "home_channel": null},
           "host": {"approvals_timeout_s": 60.0},
           "seams": {"busy_handler": true, "dequeue_ack": true}})
}

fn ctx(conversation: &str) -> Value {
    json!({"platform": "canon", "chat_id": conversation, "user_id": "u1", "user_name": "Una",
           "session_key": session_key(conversation), "message_id": "m1"})
}

/// The body of the one frame in `effects`, parsed.
fn frame_body(effects: &[SessionEffect]) -> Value {
    let frames: Vec<&String> = effects
        .iter()
        .filter_map(|e| match e {
            SessionEffect::Frame(line) | SessionEffect::Reply(line) => Some(line),
            _ => None,
        })
        .collect();
    let [line] = frames.as_slice() else {
        panic!("one frame: {effects:?}");
    };
    serde_json::from_str(line).expect("a JSON line")
}

impl Daemon {
    /// `adapter.connect` with `body`, its credentials resolved (as the shell
    /// reports them) to `facts`; the effects after the resolution.
    fn connect_resolved(&mut self, body: Value, facts: CredentialFacts) -> Vec<SessionEffect> {
        let effects = self.handle_effects(SessionInput::Line(
            protocol::encode_request("s:c", "adapter.connect", body).into_bytes(),
        ));
        let [SessionEffect::ResolveCredentials(call)] = effects.as_slice() else {
            panic!("the credentials are resolved first: {effects:?}");
        };
        self.handle_effects(SessionInput::CredentialsResolved {
            call: call.clone(),
            facts,
        })
    }

    /// `adapter.connect` answered by Canon with `me` and `conversations`.
    pub(super) fn connect_with(&mut self, conversations: Value) -> Vec<String> {
        let facts = self.session.config.credentials.clone();
        let asked = self.connect_resolved(connect_body(), facts);
        let asked: Vec<String> = asked.iter().map(describe).collect();
        assert_eq!(asked, ["connect s:c busy_handler=true"]);
        let call = ConnectCall {
            id: "s:c".into(),
            re: "adapter.connect",
            busy_handler: true,
            is_reconnect: false,
        };
        self.handle(SessionInput::ConnectDone {
            call,
            result: Ok((me(), Conversation::list_from(conversations))),
        })
    }

    pub(super) fn connect(&mut self) {
        self.connect_with(json!([{"id": "c1", "type": "direct", "name": "Una"}]));
    }
}

/// `connect_caches_the_conversations_for_chat_info`.
#[test]
fn connect_caches_the_conversations_and_opens_the_connection() {
    let mut daemon = Daemon::connected();
    let answered = daemon.connect_with(json!([{"id": "c1", "type": "group", "name": "Team"}]));
    assert_eq!(
        answered,
        [
            "conversations [\"c1\"]",
            "open connection",
            "answer s:c adapter.connect ok"
        ]
    );
    assert!(daemon.session.connected);
    assert_eq!(daemon.session.host_approvals_timeout, Some(60.0));
    let info = daemon.handle_effects(SessionInput::Line(
        protocol::encode_request("s:2", "adapter.chat_info", json!({"chat_id": "c1"})).into_bytes(),
    ));
    let body = frame_body(&info)["body"].clone();
    assert_eq!(body["name"], json!("Team"));
    assert_eq!(body["type"], json!("group"));
}

/// `rejected_conversation_list_fails_connect_as_auth_failed` and
/// `failing_conversation_list_fails_connect_retryably`.
#[test]
fn a_failed_connect_call_answers_a_fatal_and_opens_nothing() {
    for (status, code, retryable) in [(401, "auth_failed", false), (503, "connect_failed", true)] {
        let mut daemon = Daemon::connected();
        let facts = daemon.session.config.credentials.clone();
        daemon.connect_resolved(connect_body(), facts);
        let effects = daemon.handle_effects(SessionInput::ConnectDone {
            call: ConnectCall {
                id: "s:c".into(),
                re: "adapter.connect",
                busy_handler: true,
                is_reconnect: false,
            },
            result: Err(ConnectFailure::Call {
                status: Some(status),
                message: format!("HTTP {status}"),
                retryable,
            }),
        });
        assert_eq!(effects.len(), 1, "only the answer: {effects:?}");
        let body = frame_body(&effects)["body"].clone();
        assert_eq!(body["connected"], json!(false));
        assert_eq!(body["fatal"]["retryable"], json!(retryable), "{body}");
        if status == 401 {
            assert_eq!(body["fatal"]["code"], json!(code));
        }
        assert!(!daemon.session.connected);
    }
}

/// `invalid_delivery_values_refuse_the_connect`: refused before any call.
#[test]
fn an_invalid_media_setting_refuses_the_connect_without_a_call() {
    let mut daemon = Daemon::connected();
    daemon.session.config.inbound_image_delivery = Some("sometimes".into());
    let facts = daemon.session.config.credentials.clone();
    let effects = daemon.connect_resolved(connect_body(), facts);
    assert_eq!(effects.len(), 1, "no connect effect: {effects:?}");
    let body = frame_body(&effects)["body"].clone();
    assert_eq!(body["connected"], json!(false));
    assert_eq!(body["fatal"]["code"], json!(connect::INVALID_CONFIG_CODE));
}

/// `disconnect_stops_the_signal_poll`: the loops stop, open interactions
/// are cancelled, and a re-fetch on its way is stale.
#[test]
fn disconnect_stops_the_connection_and_cancels_what_is_open() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let generation = match daemon
        .handle_effects(SessionInput::StreamEvent(EventKind::ReplayExpired {
            last_available_id: None,
        }))
        .as_slice()
    {
        [SessionEffect::StreamGap(_), SessionEffect::Refetch(generation)] => *generation,
        other => panic!("the gap, then a re-fetch: {other:?}"),
    };
    let event = daemon.message("c1", "m1", "ask me").expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    let started = daemon.request(
        "s:2",
        "adapter.send_clarify",
        json!({"chat_id": "c1", "question": "Which?", "choices": null, "clarify_id": "q1",
               "session_key": session_key("c1"), "metadata": null, "ctx": ctx("c1")}),
    );
    assert_eq!(started, ["start hitl 1 s:2 adapter.send_clarify c1"]);
    let stopped = daemon.request("s:3", "adapter.disconnect", json!({"adapter_instance": 1}));
    assert_eq!(stopped[0], "stop connection");
    assert_eq!(stopped[1], "cancel hitl [1]");
    assert_eq!(
        stopped.last().map(String::as_str),
        Some("answer s:3 adapter.disconnect ok")
    );
    assert!(!daemon.session.connected);
    let late = daemon.handle(SessionInput::Refetched {
        generation,
        result: Ok(Conversation::list_from(json!([{"id": "late"}]))),
    });
    assert!(late.is_empty(), "stale after the disconnect: {late:?}");
    assert_eq!(daemon.session.conversations.ids(), ["c1"]);
}

/// `replay_expired_refetches_the_conversation_list` and
/// `failed_refetch_reconnects_the_stream_and_is_not_fatal`.
#[test]
fn replay_expiry_refetches_and_a_failed_refetch_reconnects() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let expired = || {
        SessionInput::StreamEvent(EventKind::ReplayExpired {
            last_available_id: Some("41".into()),
        })
    };
    // Each expiry is also a reported gap (an_expired_replay_is_a_reported_gap_and_a_health_code).
    let without_gap = |lines: Vec<String>| -> Vec<String> {
        let (gaps, rest): (Vec<String>, Vec<String>) = lines
            .into_iter()
            .partition(|l| l.starts_with("stream gap "));
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        rest
    };
    assert_eq!(without_gap(daemon.handle(expired())), ["refetch 2"]);
    let replaced = daemon.handle(SessionInput::Refetched {
        generation: 2,
        result: Ok(Conversation::list_from(json!([{"id": "c1"}, {"id": "c2"}]))),
    });
    assert_eq!(
        replaced,
        ["refetch settled", "conversations [\"c1\", \"c2\"]"]
    );
    assert_eq!(without_gap(daemon.handle(expired())), ["refetch 3"]);
    let failed = daemon.handle(SessionInput::Refetched {
        generation: 3,
        result: Err("HTTP 503".into()),
    });
    assert_eq!(failed, ["refetch settled", "reconnect stream"]);
}

/// `doorbell_signal_reaches_the_shim_as_control_signal`.
#[test]
fn a_doorbell_is_consumed_and_its_signal_reaches_the_shim() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let rung = daemon.handle(SessionInput::StreamEvent(EventKind::RuntimeControl {
        conversation_id: "c1".into(),
        kind: "signal".into(),
    }));
    assert_eq!(rung, ["ring c1"]);
    let signal = RuntimeSignal::from_object(&object(
        json!({"status": "signal", "signal": "interrupt", "id": "sig-1", "requestedBy": "u1"}),
    ))
    .expect("a signal");
    let effects = daemon.handle_effects(SessionInput::Signal {
        conversation_id: "c1".into(),
        signal,
    });
    let frame = frame_body(&effects);
    assert_eq!(frame["type"], json!("control.signal"));
    assert_eq!(frame["id"], json!("d:1"));
    assert_eq!(frame["body"]["chat_id"], json!("c1"));
}

/// The stream's states: a (re)connect tells the shim, a failure is fatal
/// and forgets the stream, an end forgets it.
#[test]
fn stream_states_become_notifications() {
    let mut daemon = Daemon::connected();
    let connected = daemon.handle(SessionInput::StreamConnected);
    assert_eq!(connected, ["adapter.status {\"connected\":true}"]);
    let failed = daemon.handle(SessionInput::StreamFailed("HTTP 401".into()));
    assert_eq!(failed[0], "close stream");
    assert!(failed[1].starts_with("adapter.fatal "), "{failed:?}");
    assert_eq!(daemon.handle(SessionInput::StreamEnded), ["close stream"]);
}

/// `a_later_message_never_overtakes_earlier_media_in_its_conversation`.
#[test]
fn a_message_behind_a_download_goes_out_after_it_in_order() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let payload = |id: &str, extra: Value| {
        let mut message = json!({"id": id, "senderId": "u1", "senderName": "Una",
                                 "senderType": "human", "text": format!("text {id}")});
        if let (Value::Object(m), Value::Object(e)) = (&mut message, extra) {
            m.extend(e);
        }
        let payload = object(json!({"conversationId": "c1", "message": message,
                                    "conversation": {"id": "c1", "type": "direct"}}));
        EventKind::MessageCreated(Box::new(MessageCreated {
            conversation_id: "c1".into(),
            message: payload["message"].as_object().cloned().unwrap_or_default(),
            payload,
            reply_authority: None,
        }))
    };
    let first = daemon.handle_effects(SessionInput::StreamEvent(payload(
        "m1",
        json!({"attachments": [{"url": "https://files.test/a.png", "mimeType": "image/png"}]}),
    )));
    let job = match first.as_slice() {
        [SessionEffect::Materialize(job)] => job.clone(),
        other => panic!("a download: {other:?}"),
    };
    assert_eq!(job.attachments.len(), 1);
    assert_eq!(job.fallback.event_ref, job.message.event_ref);
    let behind = daemon.handle(SessionInput::StreamEvent(payload("m2", json!({}))));
    assert!(behind.is_empty(), "waits behind the download: {behind:?}");
    assert!(daemon.session.accepts_events());
    let released = daemon.handle_effects(SessionInput::MediaDone {
        conversation_id: "c1".into(),
        job: job.job,
        message: Box::new(job.message.clone()),
        materialized: None,
    });
    let texts: Vec<String> = released
        .iter()
        .map(|e| match e {
            SessionEffect::Frame(line) => {
                let v: Value = serde_json::from_str(line).unwrap();
                assert_eq!(v["type"], json!("inbound.message"));
                v["body"]["event"]["text"].as_str().unwrap_or("").to_owned()
            }
            other => panic!("frames only: {other:?}"),
        })
        .collect();
    assert_eq!(texts, ["text m1", "text m2"]);
}

/// `image_file_in_an_open_turn_is_one_durable_turn_complete…` (the upload
/// half) and `oversized_file_is_refused_and_nothing_is_uploaded` (a failed
/// upload is answered, nothing is sent).
#[test]
fn media_is_uploaded_then_sent_and_a_failed_upload_is_answered() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let event = daemon
        .message("c1", "m1", "send the report")
        .expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    let media = |id: &str, daemon: &mut Daemon| {
        daemon.request(
            id,
            "adapter.send_media",
            json!({"op": "document", "chat_id": "c1", "path": "/tmp/report.pdf",
                   "caption": "Report", "file_name": "report.pdf", "reply_to": null,
                   "metadata": null, "mime_type": "application/pdf", "ctx": ctx("c1")}),
        )
    };
    assert_eq!(media("s:2", &mut daemon), ["upload media r2 c1"]);
    let sent = daemon.handle(SessionInput::Uploaded {
        request: RequestId(2),
        result: Ok(turn::MediaPayload {
            content_type: "file".into(),
            attachments: vec![json!({"id": "att-1", "name": "report.pdf"})],
        }),
    });
    let deliveries = only(&sent, "deliver");
    assert_eq!(deliveries.len(), 1, "one durable message: {sent:?}");
    assert!(deliveries[0].contains("\"Report\""), "{deliveries:?}");
    assert!(
        only(&sent, "reply ").is_empty(),
        "answered after the delivery"
    );
    let answered = daemon.handle(SessionInput::Delivered {
        op: OpId(1),
        result: Ok(Some("msg-1".into())),
    });
    assert_eq!(only(&answered, "reply "), ["reply s:2 adapter.send_media"]);
    assert_eq!(media("s:3", &mut daemon), ["upload media r3 c1"]);
    let refused = daemon.handle_effects(SessionInput::Uploaded {
        request: RequestId(3),
        result: Err("the file is larger than 25 MiB".into()),
    });
    let answer = frame_body(&refused);
    assert_eq!(answer["id"], json!("s:3"));
    assert_eq!(answer["body"]["success"], json!(false), "{answer}");
    assert!(
        refused
            .iter()
            .all(|e| !matches!(e, SessionEffect::Canon(Effect::Deliver(_)))),
        "nothing is sent"
    );
}

/// `standalone_send_uploads_media_files_onto_the_final_part`.
#[test]
fn a_standalone_send_with_files_uploads_then_delivers_one_group() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let asked = daemon.request(
        "s:1",
        "standalone.send",
        json!({"pconfig": {"extra": {}, "home_channel": null}, "chat_id": "c1",
               "message": "Daily report", "thread_id": null,
               "media_files": ["/tmp/a.png"], "force_document": false}),
    );
    assert_eq!(asked, ["upload files r1 c1 [\"/tmp/a.png\"]"]);
    let delivered = daemon.handle(SessionInput::Uploaded {
        request: RequestId(1),
        result: Ok(turn::MediaPayload {
            content_type: "image".into(),
            attachments: vec![json!({"id": "att-1"})],
        }),
    });
    let deliveries = only(&delivered, "deliver");
    assert_eq!(deliveries.len(), 1, "{delivered:?}");
    assert!(deliveries[0].contains("\"Daily report\""), "{deliveries:?}");
}

/// `hitl_requests_fail_cleanly_when_not_connected_or_refused`.
#[test]
fn a_blocking_interaction_before_connect_fails_cleanly() {
    let mut daemon = Daemon::connected();
    let effects = daemon.handle_effects(SessionInput::Line(
        protocol::encode_request(
            "s:1",
            "adapter.send_clarify",
            json!({"chat_id": "c1", "question": "Which?", "choices": null, "clarify_id": "q1",
                   "session_key": session_key("c1"), "metadata": null, "ctx": ctx("c1")}),
        )
        .into_bytes(),
    ));
    let answer = frame_body(&effects);
    assert_eq!(answer["body"]["success"], json!(false));
    assert!(daemon.session.hitl.is_empty());
}

/// `clarify_asks_canon_and_resolves_hermes_with_the_answer` and
/// `the_end_of_the_turn_cancels_an_open_interaction`.
#[test]
fn a_clarify_waits_for_its_human_then_resolves_hermes() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let event = daemon.message("c1", "m1", "pick one").expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    let started = daemon.request(
        "s:2",
        "adapter.send_clarify",
        json!({"chat_id": "c1", "question": "Which?", "choices": ["a", "b"], "clarify_id": "q1",
               "session_key": session_key("c1"), "metadata": null, "ctx": ctx("c1")}),
    );
    assert_eq!(started, ["start hitl 1 s:2 adapter.send_clarify c1"]);
    let created = daemon.handle(SessionInput::HitlCreated {
        key: 1,
        shim_id: "s:2".into(),
        re: "adapter.send_clarify",
        result: Ok(InteractionCreated::from_object(object(
            json!({"messageId": "msg-q", "interactive": true, "responseUserId": "u1"}),
        ))),
    });
    assert_eq!(only(&created, "turn "), ["turn waiting_input c1"]);
    assert_eq!(
        created.last().map(String::as_str),
        Some("answer s:2 adapter.send_clarify ok")
    );
    let finished = daemon.handle_effects(SessionInput::HitlFinished {
        key: 1,
        outcome: HitlOutcome::Answered(InteractionResult::from_object(object(
            json!({"status": "submitted", "respondedBy": "u1", "response": {"choice": "b"}}),
        ))),
    });
    let lines: Vec<String> = finished.iter().map(describe).collect();
    assert_eq!(lines[0], "forget hitl 1");
    assert_eq!(only(&lines, "turn "), ["turn tool c1"]);
    let resolve = match finished.last() {
        Some(SessionEffect::Frame(line)) => serde_json::from_str::<Value>(line).unwrap(),
        other => panic!("a clarify.resolve last: {other:?}"),
    };
    assert_eq!(resolve["type"], json!("clarify.resolve"));
    assert_eq!(resolve["body"]["clarify_id"], json!("q1"));

    // A second clarify stays open until the turn ends, which cancels it.
    daemon.request(
        "s:3",
        "adapter.send_clarify",
        json!({"chat_id": "c1", "question": "And?", "choices": null, "clarify_id": "q2",
               "session_key": session_key("c1"), "metadata": null, "ctx": ctx("c1")}),
    );
    let closing = daemon.complete("s:4", &event, "c1");
    assert_eq!(closing[0], "cancel hitl [2]");
}

/// `tool_request_input_waits_for_the_human` in `serve_tools.rs`: a tool's input is created on
/// Canon, the turn waits, and the call is answered with the human's answer.
#[test]
fn a_tool_input_waits_for_its_human_and_answers_the_call() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let event = daemon.message("c1", "m1", "ask me").expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    let started = daemon.request(
        "s:2",
        "tool.call",
        json!({"name": "canon_runtime_control",
               "args": {"action": "request_input", "inputId": "q1", "prompt": "Colour?"},
               "ctx": ctx("c1")}),
    );
    let key = (1u64 << 62) + 1;
    assert_eq!(started, [format!("start hitl {key} s:2 tool.call c1")]);
    let created = daemon.handle(SessionInput::HitlCreated {
        key,
        shim_id: "s:2".into(),
        re: "tool.call",
        result: Ok(InteractionCreated::from_object(object(
            json!({"messageId": "m-q"}),
        ))),
    });
    assert_eq!(only(&created, "turn "), ["turn waiting_input c1"]);
    assert!(only(&created, "answer ").is_empty(), "{created:?}");
    let finished = daemon.handle_effects(SessionInput::HitlFinished {
        key,
        outcome: HitlOutcome::Answered(InteractionResult::from_object(object(
            json!({"status": "submitted", "value": "blue", "respondedBy": "u1"}),
        ))),
    });
    let lines: Vec<String> = finished.iter().map(describe).collect();
    assert_eq!(lines[0], format!("forget hitl {key}"));
    assert_eq!(only(&lines, "turn "), ["turn tool c1"]);
    let answer = match finished.last() {
        Some(SessionEffect::Frame(line)) => serde_json::from_str::<Value>(line).unwrap(),
        other => panic!("the tool.call answer last: {other:?}"),
    };
    assert_eq!(answer["re"], "tool.call");
    let result: Value = serde_json::from_str(answer["body"]["result"].as_str().unwrap()).unwrap();
    assert_eq!(
        result,
        json!({"success": true, "status": "submitted", "value": "blue", "respondedBy": "u1",
               "conversationId": "c1"})
    );
}

/// `tool_send_card_is_displayed` in `serve_tools.rs`: a displayed card answers the call when
/// Canon answers the create call, and nothing waits.
#[test]
fn a_sent_card_answers_the_call_once_created() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let card = json!({"schema": "canon.card.v1", "title": "Hi", "fallbackText": "Hi",
                      "blocks": [{"kind": "summary", "title": "Hello", "text": "World"}]});
    let started = daemon.request(
        "s:2",
        "tool.call",
        json!({"name": "canon_runtime_control", "args": {"action": "send_card", "card": card},
               "ctx": ctx("c1")}),
    );
    let key = (1u64 << 62) + 1;
    assert_eq!(started, [format!("start hitl {key} s:2 tool.call c1")]);
    let created = daemon.handle_effects(SessionInput::HitlCreated {
        key,
        shim_id: "s:2".into(),
        re: "tool.call",
        result: Ok(InteractionCreated::from_object(object(
            json!({"cardId": "card-1", "messageId": "m-c"}),
        ))),
    });
    let lines: Vec<String> = created.iter().map(describe).collect();
    assert_eq!(lines[0], format!("forget hitl {key}"));
    let answer = frame_body(&created);
    let result: Value = serde_json::from_str(answer["body"]["result"].as_str().unwrap()).unwrap();
    assert_eq!(result["status"], "displayed");
    assert_eq!(result["cardId"], "card-1");
    // Not connected: the call fails without a Canon call.
    let mut offline = Daemon::connected();
    let refused = offline.request(
        "s:3",
        "tool.call",
        json!({"name": "canon_runtime_control", "args": {"action": "send_card",
               "card": {"schema": "canon.card.v1", "title": "Hi", "fallbackText": "Hi",
                        "blocks": [{"kind": "summary", "title": "Hello", "text": "World"}]}},
               "ctx": ctx("c1")}),
    );
    assert_eq!(refused, ["answer s:3 tool.call ok"]);
}

/// A failed create call forgets its task and answers the failure; the
/// turn never waits.
#[test]
fn a_failed_interaction_create_is_answered_and_forgotten() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let event = daemon.message("c1", "m1", "pick").expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    daemon.request(
        "s:2",
        "adapter.send_clarify",
        json!({"chat_id": "c1", "question": "Which?", "choices": null, "clarify_id": "q1",
               "session_key": session_key("c1"), "metadata": null, "ctx": ctx("c1")}),
    );
    let failed = daemon.handle(SessionInput::HitlCreated {
        key: 1,
        shim_id: "s:2".into(),
        re: "adapter.send_clarify",
        result: Err(("HTTP 503".into(), true)),
    });
    assert_eq!(failed.first().map(String::as_str), Some("forget hitl 1"));
    assert!(only(&failed, "turn ").is_empty(), "{failed:?}");
    assert_eq!(
        failed.last().map(String::as_str),
        Some("answer s:2 adapter.send_clarify ok")
    );
}

/// `typing_and_tool_hooks_are_carried_to_canon`: notifications feed the
/// turn machine.
#[test]
fn typing_notifications_reach_canon() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let line = protocol::encode_notification(
        "typing",
        json!({"chat_id": "c1", "on": true, "metadata": {"status": "thinking"}}),
    );
    let effects = daemon.handle(SessionInput::Line(line.into_bytes()));
    assert_eq!(only(&effects, "typing "), ["typing c1 true"]);
}

/// Bad lines: one with an id and a type is answered with the error; one
/// without is dropped; the daemon goes on.
#[test]
fn unusable_lines_are_answered_when_they_can_be_and_never_fatal() {
    let mut daemon = Daemon::connected();
    assert!(daemon
        .handle(SessionInput::Line(b"not json {".to_vec()))
        .is_empty());
    let answered = daemon.handle(SessionInput::Line(
        br#"{"v":1,"type":"adapter.send","id":"s:9","body":{"chat_id":7}}"#.to_vec(),
    ));
    assert_eq!(answered.len(), 1);
    assert!(
        answered[0].starts_with("answer s:9 adapter.send error"),
        "{answered:?}"
    );
    assert!(daemon.handle(SessionInput::LineTooLarge).is_empty());
    let still = daemon.request("s:10", "adapter.chat_info", json!({"chat_id": "c1"}));
    assert_eq!(still, ["answer s:10 adapter.chat_info ok"]);
}

/// `out_of_turn_send_is_one_durable_chunked_message_group`, and the
/// delivery's outcome answering the send.
#[test]
fn an_out_of_turn_send_is_one_durable_delivery_answered_after_it() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let body = json!({"chat_id": "c1", "content": "Reminder: standup", "reply_to": null,
                      "metadata": null, "ctx": {"platform": "canon"}});
    let asked = daemon.request("s:1", "adapter.send", body);
    let deliveries = only(&asked, "deliver");
    assert_eq!(deliveries.len(), 1, "{asked:?}");
    assert!(
        only(&asked, "reply ").is_empty(),
        "answered after the delivery"
    );
    let answered = daemon.handle(SessionInput::Delivered {
        op: OpId(1),
        result: Ok(Some("msg-1".into())),
    });
    assert_eq!(only(&answered, "reply "), ["reply s:1 adapter.send"]);
}

/// `platform_config_api_key_connects` and `platform_config_profile_that_is_missing_refuses_the_connect`
/// in `serve_config.rs`: a connect resolves its credentials with its platform config, adopts
/// what it gets, and connects with it or answers `missing_api_key`.
#[test]
fn a_connect_resolves_with_its_platform_config_and_adopts_the_result() {
    let mut daemon = Daemon::connected();
    daemon.session.config.credentials = CredentialFacts::default();
    let body = json!({"adapter_instance": 1,
                      "config": {"extra": {"agent": "ops"}, "api_key": "sk-config"},
                      "host": {}, "seams": {"busy_handler": true}});
    let asked = daemon.handle_effects(SessionInput::Line(
        protocol::encode_request("s:c", "adapter.connect", body.clone()).into_bytes(),
    ));
    let [SessionEffect::ResolveCredentials(call)] = asked.as_slice() else {
        panic!("{asked:?}");
    };
    assert!(call.adopt);
    assert_eq!(call.platform.extra, json!({"agent": "ops"}));
    assert_eq!(
        call.platform.api_key.as_ref().map(|k| k.expose()),
        Some("sk-config")
    );
    assert!(matches!(&call.purpose, ResolvePurpose::Connect(c) if c.id == "s:c" && c.busy_handler));

    // Resolved: adopted, and the connect calls run.
    let resolved = CredentialFacts {
        api_key_set: true,
        base_url: "https://api".into(),
        stream_url: "https://stream".into(),
        environment_id: Some("canon-dev-v1".into()),
        profile: Some("ops".into()),
        error: None,
    };
    let effects = daemon.handle_effects(SessionInput::CredentialsResolved {
        call: call.clone(),
        facts: resolved.clone(),
    });
    assert_eq!(
        effects.iter().map(describe).collect::<Vec<_>>(),
        ["connect s:c busy_handler=true"]
    );
    assert_eq!(daemon.session.config.credentials, resolved);
    // `check_fn`'s probe now answers from the adopted credentials.
    let probe = daemon.handle_effects(SessionInput::Line(
        protocol::encode_request("s:p", "probe", json!({"config": null})).into_bytes(),
    ));
    assert_eq!(frame_body(&probe)["body"]["profile"], json!("ops"));

    // Not resolved: adopted too (the daemon is unconfigured now), and refused.
    let failed = CredentialFacts {
        error: Some("Canon profile \"ghost\" not found".into()),
        ..CredentialFacts::default()
    };
    let effects = daemon.connect_resolved(body, failed.clone());
    assert_eq!(
        frame_body(&effects)["body"],
        json!({"connected": false, "fatal": {"code": "missing_api_key",
               "message": connect::MISSING_CREDENTIALS_MESSAGE, "retryable": false}})
    );
    assert_eq!(daemon.session.config.credentials, failed);
    assert!(!daemon.session.connected);
}

/// A probe with a config is answered from its own resolution, which the daemon does not adopt;
/// a verifying one is checked with those credentials.
#[test]
fn a_probe_with_a_config_is_answered_from_its_resolution_without_adopting_it() {
    let mut daemon = Daemon::connected();
    let before = daemon.session.config.credentials.clone();
    let probe = |verify: bool| {
        protocol::encode_request(
            "s:p",
            "probe",
            json!({"config": {"extra": {"agent": "ghost"}, "enabled": true}, "verify": verify}),
        )
        .into_bytes()
    };
    let asked = daemon.handle_effects(SessionInput::Line(probe(false)));
    let [SessionEffect::ResolveCredentials(call)] = asked.as_slice() else {
        panic!("{asked:?}");
    };
    assert!(!call.adopt);
    let why =
        "Canon profile \"ghost\" not found in /h/agents.json. Set CANON_AGENTS_JSON_BOOTSTRAP, \
               set CANON_API_KEY, or re-run registration.";
    let answer = daemon.handle_effects(SessionInput::CredentialsResolved {
        call: call.clone(),
        facts: CredentialFacts {
            error: Some(why.into()),
            ..CredentialFacts::default()
        },
    });
    assert_eq!(
        frame_body(&answer)["body"],
        json!({"configured": false, "seed": null, "error": why})
    );
    assert_eq!(daemon.session.config.credentials, before, "not adopted");

    let asked = daemon.handle_effects(SessionInput::Line(probe(true)));
    let [SessionEffect::ResolveCredentials(call)] = asked.as_slice() else {
        panic!("{asked:?}");
    };
    let verify = daemon.handle(SessionInput::CredentialsResolved {
        call: call.clone(),
        facts: before.clone(),
    });
    assert_eq!(verify, ["verify probe s:p with its config"]);
}

/// The pure twin of `the_turn_of_a_message_reads_its_captured_attachments_until_it_completes`
/// (serve_media.rs; runtime-control.md §7.6, §8.4, §8.5, §8.6): a download's captures are
/// registered when it reports, the marker says they are available and `interleave` is demoted;
/// `api.inbound_media` in the message's turn asks the shell to hand them over; a dequeued
/// follow-up ends the turn and discards them.
#[test]
fn captured_media_is_registered_served_in_its_turn_and_discarded_after_it() {
    use crate::inbound::Materialized;
    use crate::media::capture::{CaptureBatch, CapturedMedia};
    use crate::media::MediaCounts;
    use std::sync::Arc;

    let mut daemon = Daemon::connected();
    daemon.session.media_scope = TrustedScope::Image;
    let payload = |id: &str| {
        let message = json!({"id": id, "senderId": "u1", "senderName": "Una", "senderType": "human",
            "text": "", "metadata": {"deliveryIntent": "interleave"},
            "attachments": [{"url": "https://files.test/a.png", "mimeType": "image/png"}]});
        let payload = object(json!({"conversationId": "c1", "message": message,
                                    "conversation": {"id": "c1", "type": "direct"}}));
        EventKind::MessageCreated(Box::new(MessageCreated {
            conversation_id: "c1".into(),
            message: payload["message"].as_object().cloned().unwrap_or_default(),
            payload,
            reply_authority: None,
        }))
    };
    let download = |effects: Vec<SessionEffect>| match effects.as_slice() {
        [SessionEffect::PublishConversations(_), SessionEffect::Materialize(job)] => job.clone(),
        other => panic!("a download: {other:?}"),
    };
    let job = download(daemon.handle_effects(SessionInput::StreamEvent(payload("m1"))));
    let mut captures = CaptureBatch::default();
    captures.offer(CapturedMedia {
        index: 0,
        mime_type: "image/png".into(),
        file_name: "a.png".into(),
        data: Arc::from(&b"\x89PNG"[..]),
    });
    let found = Materialized {
        source: job.source.clone(),
        intent: job.intent,
        scope: job.scope,
        listed: Vec::new(),
        counts: MediaCounts {
            hidden: 1,
            unavailable: 0,
        },
        captures,
    };
    let released = daemon.handle_effects(SessionInput::MediaDone {
        conversation_id: "c1".into(),
        job: job.job,
        message: Box::new(job.message.clone()),
        materialized: Some(Box::new(found)),
    });
    let inbound = frame_body(&released);
    assert_eq!(
        inbound["body"]["event"]["text"],
        "[1 image attachment is available to trusted Canon tools and not sent to the model's general vision pipeline.]"
    );
    assert_eq!(
        inbound["body"]["event"]["metadata"]["deliveryIntent"],
        "queue"
    );
    assert_eq!(daemon.session.captures.len(), 1);

    let ask = |daemon: &mut Daemon, id: &str, message: &str| {
        let ctx = json!({"platform": "canon", "chat_id": "c1", "message_id": message});
        let line = protocol::encode_request(id, "api.inbound_media", json!({"ctx": ctx}));
        daemon.handle_effects(SessionInput::Line(line.into_bytes()))
    };
    daemon.turn_start("s:1", "e:1", "c1", "m1");
    match ask(&mut daemon, "s:2", "m1").as_slice() {
        [SessionEffect::ServeInboundMedia {
            id,
            message_id,
            media,
            ..
        }] => {
            assert_eq!((id.as_str(), message_id.as_str()), ("s:2", "m1"));
            assert_eq!(media.len(), 1);
            assert_eq!(&*media[0].data, b"\x89PNG");
        }
        other => panic!("a hand-over: {other:?}"),
    }
    assert_eq!(
        frame_body(&ask(&mut daemon, "s:3", "m9"))["body"],
        json!({"media": []})
    );

    // A follow-up dequeued in the same session ends the turn of m1.
    let accepted = json!({"event_ref": "e:2", "session_key": session_key("c1"), "phase": "queue_dequeue",
        "event": {"chat_id": "c1", "chat_type": "dm", "user_id": "u1", "message_id": "m2"}});
    daemon.request("s:4", "turn.accepted", accepted);
    assert!(daemon.session.captures.is_empty());
    assert_eq!(
        frame_body(&ask(&mut daemon, "s:5", "m1"))["body"],
        json!({"media": []})
    );
}

/// runtime-control.md §8.4 "Discard": a turn that ends cancelled discards its message's capture
/// as a completed one does, and the captures of messages Hermes merged into the turn go too.
#[test]
fn a_cancelled_turn_discards_its_captures_and_those_of_merged_messages() {
    use crate::media::capture::CapturedMedia;
    use std::sync::Arc;

    let mut daemon = Daemon::connected();
    let png = |index| CapturedMedia {
        index,
        mime_type: "image/png".into(),
        file_name: "a.png".into(),
        data: Arc::from(&b"\x89PNG"[..]),
    };
    for message in ["m1", "m2", "m3"] {
        assert!(daemon
            .session
            .captures
            .register("c1", message, vec![png(0)], 0));
    }
    let m2 = daemon.message("c1", "m2", "merged").expect("wakes");
    let start = json!({"event_ref": "e:9", "session_key": session_key("c1"), "absorbed_refs": [m2],
        "event": {"chat_id": "c1", "chat_type": "dm", "user_id": "u1", "message_id": "m1"}});
    daemon.request("s:1", "turn.start", start);
    let complete =
        json!({"event_ref": "e:9", "session_key": session_key("c1"), "outcome": "cancelled"});
    daemon.request("s:2", "turn.complete", complete);
    assert_eq!(
        daemon.session.captures.keys(),
        [("c1".to_owned(), "m3".to_owned())]
    );
}

/// runtime-control.md §8.4, §8.5 (missing provenance): a downloaded message without a message
/// id has nothing to bind its bytes to: nothing is registered and its hidden image is withheld.
#[test]
fn a_message_without_an_id_registers_nothing_and_withholds_its_hidden_media() {
    use crate::inbound::Materialized;
    use crate::media::capture::{CaptureBatch, CapturedMedia};
    use crate::media::MediaCounts;
    use std::sync::Arc;

    let mut daemon = Daemon::connected();
    daemon.session.media_scope = TrustedScope::Image;
    let message = json!({"id": "m1", "senderId": "u1", "senderName": "Una", "senderType": "human",
        "text": "", "attachments": [{"url": "https://files.test/a.png", "mimeType": "image/png"}]});
    let payload = object(json!({"conversationId": "c1", "message": message,
                                "conversation": {"id": "c1", "type": "direct"}}));
    let event = EventKind::MessageCreated(Box::new(MessageCreated {
        conversation_id: "c1".into(),
        message: payload["message"].as_object().cloned().unwrap_or_default(),
        payload,
        reply_authority: None,
    }));
    let mut job = match daemon
        .handle_effects(SessionInput::StreamEvent(event))
        .as_slice()
    {
        [_, SessionEffect::Materialize(job)] => job.clone(),
        other => panic!("a download: {other:?}"),
    };
    job.message.event.message_id = None;
    let mut captures = CaptureBatch::default();
    captures.offer(CapturedMedia {
        index: 0,
        mime_type: "image/png".into(),
        file_name: "a.png".into(),
        data: Arc::from(&b"\x89PNG"[..]),
    });
    let found = Materialized {
        source: job.source.clone(),
        intent: job.intent,
        scope: job.scope,
        listed: Vec::new(),
        counts: MediaCounts {
            hidden: 1,
            unavailable: 0,
        },
        captures,
    };
    let released = daemon.handle_effects(SessionInput::MediaDone {
        conversation_id: "c1".into(),
        job: job.job,
        message: Box::new(job.message.clone()),
        materialized: Some(Box::new(found)),
    });
    assert_eq!(
        frame_body(&released)["body"]["event"]["text"],
        "[1 image attachment was withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]"
    );
    assert!(daemon.session.captures.is_empty());
}

/// `real_gateway_domain_plugin_uses_the_card_helpers` in `hermes_api.rs`, the upload part: the
/// turn and the MIME type are checked, the shell uploads the hand-off file, and the plugin's
/// call is answered with the attachment and its url.
#[test]
fn a_domain_plugin_upload_goes_to_the_turns_conversation_and_answers_the_attachment() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let call = |daemon: &mut Daemon, id: &str, mime: &str, ctx: Value| {
        daemon.handle_effects(SessionInput::Line(
            protocol::encode_request(
                id,
                "api.call",
                json!({"method": "upload_media_for_current_conversation",
                       "args": {"path": "/tmp/canon-upload-x", "mime_type": mime, "file_name": "a.txt"},
                       "ctx": ctx}),
            )
            .into_bytes(),
        ))
    };
    let outside = call(
        &mut daemon,
        "s:1",
        "text/plain",
        json!({"platform": "telegram"}),
    );
    assert_eq!(
        frame_body(&outside)["body"]["error"],
        crate::api::NO_CANON_CONVERSATION
    );
    let no_mime = call(&mut daemon, "s:2", "plain", ctx("c1"));
    assert_eq!(
        frame_body(&no_mime)["body"]["error"],
        "mime_type is required"
    );
    let started = call(&mut daemon, "s:3", " Text/Plain ", ctx("c1"));
    let lines: Vec<String> = started.iter().map(describe).collect();
    let [line] = lines.as_slice() else {
        panic!("{lines:?}");
    };
    assert!(
        line.starts_with("upload api media r") && line.ends_with(" c1 text/plain"),
        "{line}"
    );
    let SessionEffect::UploadApiMedia { request, .. } = &started[0] else {
        panic!("{started:?}");
    };
    let done = daemon.handle_effects(SessionInput::Uploaded {
        request: *request,
        result: Ok(crate::turn::MediaPayload {
            content_type: "file".into(),
            attachments: vec![json!({"kind": "file", "url": "https://cdn/a.txt"})],
        }),
    });
    assert_eq!(
        frame_body(&done)["body"],
        json!({"value": {"attachment": {"kind": "file", "url": "https://cdn/a.txt"},
                         "url": "https://cdn/a.txt"}})
    );
}

/// Canon's replay expired: the messages in the gap never arrive, so the daemon reports the gap
/// (its window from the last event before it, the agent's conversations) for the shell to
/// record, and a domain plugin reading the runtime health of one of those conversations sees
/// `CANON_EVENTS_MISSED` for an hour, with the gap itself in `eventGap`.
#[test]
fn an_expired_replay_is_a_reported_gap_and_a_health_code() {
    let mut daemon = Daemon::connected();
    daemon.connect_with(json!([{"id": "c1", "type": "direct", "name": "Una"},
                               {"id": "c2", "type": "group", "name": "Team"}]));
    daemon.handle_effects(SessionInput::StreamConnected);
    let event = daemon.message("c1", "m1", "hello").expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    daemon.handle_effects(SessionInput::StreamEvent(EventKind::RuntimeControl {
        conversation_id: "c2".into(),
        kind: "signal".into(),
    }));
    let last_event = daemon.now;
    // A new stream's first frames are no conversation's events: the window starts before.
    daemon.handle_effects(SessionInput::StreamEvent(EventKind::AgentContext {
        agent_id: None,
        outbound_policy: None,
    }));
    let effects = daemon.handle_effects(SessionInput::StreamFrame {
        id: "e-9".into(),
        kind: EventKind::ReplayExpired {
            last_available_id: Some("e-9".into()),
        },
    });
    let gaps: Vec<&crate::gaps::StreamGap> = effects
        .iter()
        .filter_map(|e| match e {
            SessionEffect::StreamGap(gap) => Some(gap),
            _ => None,
        })
        .collect();
    let [gap] = gaps.as_slice() else {
        panic!("one gap: {effects:?}");
    };
    assert_eq!(gap.from_ms, Some(last_event));
    assert_eq!(gap.to_ms, daemon.now);
    assert_eq!(gap.conversations, ["c1", "c2"]);
    assert_eq!(gap.count, 1);
    assert!(effects
        .iter()
        .any(|e| matches!(e, SessionEffect::Refetch(_))));

    let health =
        |daemon: &mut Daemon, id: &str| {
            frame_body(&daemon.handle_effects(SessionInput::Line(
            protocol::encode_request(
                id,
                "api.call",
                json!({"method": "current_canon_runtime_health", "args": {}, "ctx": ctx("c1")}),
            )
            .into_bytes(),
        )))["body"]["value"]
            .clone()
        };
    let now = health(&mut daemon, "s:2");
    assert_eq!(now["code"], crate::gaps::EVENTS_MISSED, "{now}");
    assert_eq!(now["eventGap"]["count"], 1, "{now}");
    assert_eq!(now["eventGap"]["conversationIds"], json!(["c1", "c2"]));
    daemon.now += crate::gaps::GAP_NOTICE_MS;
    let later = health(&mut daemon, "s:3");
    assert_eq!(later["code"], Value::Null, "{later}");
    assert_eq!(later["eventGap"]["count"], 1, "the last gap stays: {later}");
}
