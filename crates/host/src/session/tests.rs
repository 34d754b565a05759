//! Tests of the session: its pieces one by one, then whole daemon
//! scenarios driven the way the shim and Canon drive the daemon (shim
//! requests as the shim encodes them, `message.created` events, delivery
//! outcomes), with no process, socket or sleep. Effects are compared as
//! one-line renderings ([`describe`]).

use canon_dispatch::verbosity::ConversationType;
use serde_json::json;

use super::*;
use crate::turn::{OpId, FINAL_HANDOFF_MS};

fn created(id: &str, text: &str, extra: Value) -> MessageCreated {
    let mut message = json!({"id": id, "senderId": "u1", "senderName": "Una",
                             "senderType": "human", "text": text});
    if let (Value::Object(m), Value::Object(e)) = (&mut message, extra) {
        m.extend(e);
    }
    let payload = json!({"conversationId": "c1", "message": message,
                         "conversation": {"id": "c1", "type": "direct"}});
    let Value::Object(payload) = payload else {
        unreachable!()
    };
    MessageCreated {
        conversation_id: "c1".into(),
        message: payload["message"].as_object().cloned().unwrap_or_default(),
        payload,
        reply_authority: None,
    }
}

fn sent(step: InboundStep) -> InboundMessage {
    match step {
        InboundStep::Send(message) => *message,
        other => panic!("expected a message to send: {other:?}"),
    }
}

#[test]
fn a_waking_message_is_sent_remembered_and_opens_its_turn() {
    let mut session = Session::default();
    let (step, keys_changed) = session.message_created(created("m1", "hello", json!({})));
    assert!(keys_changed, "the conversation object is cached");
    let message = sent(step);
    assert_eq!(message.event_ref, "e:1");
    assert_eq!(message.event.text, "hello");
    let request = session.register("s:1".into(), "turn.start");
    let summary = EventSummary {
        chat_id: "c1".into(),
        message_id: Some("m1".into()),
        user_id: Some("u1".into()),
        ..EventSummary::default()
    };
    let start = session.processing_start(
        request,
        "e:1",
        "agent:main:canon:dm:c1".into(),
        &summary,
        0,
        &[],
        5,
    );
    assert_eq!(start.conversation_id, "c1");
    assert_eq!(start.conversation_type, ConversationType::Direct);
    assert_eq!(start.responder.as_deref(), Some("u1"));
    assert_eq!(start.random, 5);
    assert_eq!(session.complete("agent:main:canon:dm:c1", "e:1"), "c1");
    assert!(session.events.get("e:1").is_none());
    // An unknown session falls back to the end of its key.
    assert_eq!(session.complete("agent:main:canon:group:c7", "e:9"), "c7");
}

#[test]
fn a_duplicate_message_does_not_wake_twice() {
    let mut session = Session::default();
    let (first, _) = session.message_created(created("m1", "hello", json!({})));
    assert!(matches!(first, InboundStep::Send(_)));
    let (again, keys_changed) = session.message_created(created("m1", "hello", json!({})));
    assert_eq!(again, InboundStep::Nothing);
    assert!(!keys_changed);
}

#[test]
fn messages_behind_a_download_wait_in_their_lane() {
    let mut session = Session::default();
    let (step, _) = session.message_created(created(
        "m1",
        "see this",
        json!({"attachments": [{"url": "https://x/a.png", "mimeType": "image/png"}]}),
    ));
    let InboundStep::Materialize {
        job,
        message,
        attachments,
        ..
    } = step
    else {
        panic!("expected a download: {step:?}");
    };
    assert_eq!(attachments.len(), 1);
    let (behind, _) = session.message_created(created("m2", "and this", json!({})));
    assert_eq!(behind, InboundStep::Nothing, "waits behind the download");
    let released = session
        .lanes
        .finished("c1", job, *message)
        .expect("the job waits");
    let texts: Vec<&str> = released.iter().map(|m| m.event.text.as_str()).collect();
    assert_eq!(texts, ["see this", "and this"]);
}

#[test]
fn answers_go_to_their_request_once() {
    let mut session = Session::default();
    let request = session.register("s:4".into(), "turn.complete");
    let line = session
        .reply_line(request, HostReply::Done)
        .expect("a line");
    let value: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(value["id"], json!("s:4"));
    assert_eq!(value["re"], json!("turn.complete"));
    assert_eq!(value["ok"], json!(true));
    let first = session.request_line(DaemonRequest::HostQueueDepth(protocol::HostQueueDepth {
        session_key: "s1".into(),
    }));
    assert!(first.contains("\"d:1\""), "{first}");
}

/// A daemon without I/O: the session, a clock and a randomness counter.
struct Daemon {
    session: Session,
    now: u64,
    draws: u8,
}

const FACTS: RequestFacts<'static> = RequestFacts {
    daemon_version: "0.1.0",
    manifest_sha256: None,
    home_channel: None,
};

/// The configuration of the test daemon: credentials set, no environment.
fn config() -> SessionConfig {
    SessionConfig {
        daemon_version: "0.1.0".into(),
        credentials: crate::credentials::CredentialFacts {
            api_key_set: true,
            base_url: "https://canon.test/api/v1".into(),
            stream_url: "https://canon.test/api/v1/events".into(),
            ..Default::default()
        },
        clarify_timeout: std::time::Duration::from_secs(300),
        approval_timeout: std::time::Duration::from_secs(60),
        ..SessionConfig::default()
    }
}

impl Daemon {
    /// A daemon that has not seen `hello`.
    fn new() -> Daemon {
        Daemon {
            session: Session::new(config()),
            now: 1_000,
            draws: 0,
        }
    }

    /// A session that has answered `hello`.
    fn connected() -> Daemon {
        let mut daemon = Daemon::new();
        let hello = json!({"protocols": [1], "manifest_sha256": "a".repeat(64),
            "shim_version": "0.1.0", "binary_version": "0.1.0", "hermes_version": "0.19.0",
            "python_version": "3.11.7", "pid": 1, "hermes_home": "/h", "profile_name": null,
            "multiplex_active": false, "seams": {"busy_handler": false, "dequeue_ack": false}});
        let answer = daemon.request("s:0", "hello", hello);
        assert_eq!(answer, ["answer s:0 hello ok"]);
        daemon
    }

    /// One input through [`Session::handle`], at a later time and with
    /// fresh randomness; the effects as [`describe`] lines.
    fn handle(&mut self, input: SessionInput) -> Vec<String> {
        self.handle_effects(input).iter().map(describe).collect()
    }

    /// [`Daemon::handle`], with the effects themselves.
    fn handle_effects(&mut self, input: SessionInput) -> Vec<SessionEffect> {
        self.draws += 1;
        let random = u128::from(self.draws) << 120;
        self.now += 10;
        self.session.handle(input, self.now, random)
    }

    /// A shim request, as the line the shim writes.
    fn request(&mut self, id: &str, kind: &str, body: Value) -> Vec<String> {
        let line = protocol::encode_request(id, kind, body);
        self.handle(SessionInput::Line(line.into_bytes()))
    }

    fn feed(&mut self, input: Input) -> Vec<String> {
        self.now += 10;
        self.session
            .feed(input, self.now)
            .iter()
            .map(describe)
            .collect()
    }

    /// The timers due `ms` from now.
    fn after(&mut self, ms: u64) -> Vec<String> {
        self.now += ms;
        self.session
            .feed(Input::Timeout, self.now)
            .iter()
            .map(describe)
            .collect()
    }

    /// A human message in a conversation: the event reference it was
    /// handed to the shim under, or `None` when it does not wake.
    fn message(&mut self, conversation: &str, id: &str, text: &str) -> Option<String> {
        let payload = json!({"conversationId": conversation, "conversation": {"id": conversation, "type": "direct"},
            "message": {"id": id, "senderId": "u1", "senderName": "Una", "senderType": "human", "text": text}});
        let Value::Object(payload) = payload else {
            unreachable!()
        };
        let created = MessageCreated {
            conversation_id: conversation.to_owned(),
            message: payload["message"].as_object().cloned().unwrap_or_default(),
            payload,
            reply_authority: None,
        };
        match self.session.message_created(created).0 {
            InboundStep::Send(message) => Some(message.event_ref),
            _ => None,
        }
    }

    fn turn_start(
        &mut self,
        id: &str,
        event_ref: &str,
        conversation: &str,
        message: &str,
    ) -> Vec<String> {
        let body = json!({"event_ref": event_ref, "session_key": session_key(conversation),
            "event": {"chat_id": conversation, "chat_type": "dm", "user_id": "u1", "user_name": "Una",
                      "message_id": message, "message_type": "text", "internal": false,
                      "text_len": 5, "delivery_intent": "queue"},
            "queue_depth": 0});
        self.request(id, "turn.start", body)
    }

    /// A final answer as Hermes sends it (`notify`: a send that is already
    /// whole, not an auxiliary message).
    fn send(&mut self, id: &str, conversation: &str, reply_to: &str, text: &str) -> Vec<String> {
        let body = json!({"chat_id": conversation, "content": text, "reply_to": reply_to, "metadata": {"notify": true},
            "ctx": {"platform": "canon", "chat_id": conversation, "session_key": session_key(conversation),
                    "user_id": "u1", "message_id": reply_to}});
        self.request(id, "adapter.send", body)
    }

    fn complete(&mut self, id: &str, event_ref: &str, conversation: &str) -> Vec<String> {
        let body = json!({"event_ref": event_ref, "session_key": session_key(conversation),
            "outcome": "success", "queue_depth": 0});
        self.request(id, "turn.complete", body)
    }
}

fn session_key(conversation: &str) -> String {
    format!("agent:main:canon:dm:{conversation}")
}

/// One line per effect: frames by type or answered request, replies with
/// their request, Canon writes by what they change.
fn describe(effect: &SessionEffect) -> String {
    let line = |line: &str| serde_json::from_str::<Value>(line).expect("a JSON line");
    match effect {
        SessionEffect::Frame(text) => {
            let v = line(text);
            match v.get("re").and_then(Value::as_str) {
                Some(re) => {
                    let ok = if v["ok"] == json!(true) {
                        "ok".to_owned()
                    } else {
                        format!("error {}", v["error"]["code"].as_str().unwrap_or("?"))
                    };
                    format!("answer {} {re} {ok}", v["id"].as_str().unwrap_or("?"))
                }
                None => format!("{} {}", v["type"].as_str().unwrap_or("?"), v["body"]),
            }
        }
        SessionEffect::Reply(text) => {
            let v = line(text);
            format!(
                "reply {} {}",
                v["id"].as_str().unwrap_or("?"),
                v["re"].as_str().unwrap_or("?")
            )
        }
        SessionEffect::Inbox(records) => format!("inbox {records:?}"),
        SessionEffect::StreamGap(gap) => format!("stream gap {}", gap.to_json()),
        SessionEffect::CancelHitl(keys) => format!("cancel hitl {keys:?}"),
        SessionEffect::ForgetHitl(key) => format!("forget hitl {key}"),
        SessionEffect::StartHitl { id, re, start } => {
            format!(
                "start hitl {} {id} {re} {}",
                start.key, start.conversation_id
            )
        }
        SessionEffect::ResolveCredentials(call) => {
            let purpose = match &call.purpose {
                crate::credentials::ResolvePurpose::Connect(connect) => {
                    format!("connect {}", connect.id)
                }
                crate::credentials::ResolvePurpose::Probe { id, .. } => format!("probe {id}"),
            };
            format!("resolve credentials for {purpose} adopt={}", call.adopt)
        }
        SessionEffect::VerifyProbe { id, platform, .. } => match platform {
            Some(_) => format!("verify probe {id} with its config"),
            None => format!("verify probe {id}"),
        },
        SessionEffect::Connect(call) => {
            format!("connect {} busy_handler={}", call.id, call.busy_handler)
        }
        SessionEffect::Detached { id, re, api, call } => {
            format!("detached {id} {re} api={api} {call:?}")
        }
        SessionEffect::Communicate { id, re, call } => {
            format!("communicate {id} {re} {:?}", call.request)
        }
        SessionEffect::ApprovalReceipt(receipt) => {
            format!("approval receipt {}", receipt.approval_id)
        }
        SessionEffect::CardReceipt(receipt) => format!("card receipt {}", receipt.card_id),
        SessionEffect::CardWait { id, re, call, .. } => format!("card wait {id} {re} {call:?}"),
        SessionEffect::CardWakeAnswered { wake, delivered } => {
            format!("card wake answered {} delivered={delivered}", wake.card_id)
        }
        SessionEffect::ApprovalWakeAnswered {
            approval_id,
            delivered,
        } => format!("approval wake answered {approval_id} delivered={delivered}"),
        SessionEffect::OpenConnection => "open connection".to_owned(),
        SessionEffect::StopConnection => "stop connection".to_owned(),
        SessionEffect::CloseStream => "close stream".to_owned(),
        SessionEffect::ReconnectStream => "reconnect stream".to_owned(),
        SessionEffect::PublishConversations(ids) => format!("conversations {ids:?}"),
        SessionEffect::Ring(conversation) => format!("ring {conversation}"),
        SessionEffect::Refetch(generation) => format!("refetch {generation}"),
        SessionEffect::RefetchSettled => "refetch settled".to_owned(),
        SessionEffect::Materialize(job) => format!(
            "download {} job{} {} attachment(s)",
            job.conversation_id,
            job.job,
            job.attachments.len()
        ),
        SessionEffect::UploadMedia { request, media } => {
            format!("upload media r{} {}", request.0, media.chat_id)
        }
        SessionEffect::UploadApiMedia {
            request,
            conversation_id,
            mime_type,
            ..
        } => format!(
            "upload api media r{} {conversation_id} {mime_type}",
            request.0
        ),
        SessionEffect::ServeInboundMedia {
            id,
            message_id,
            media,
            ..
        } => format!(
            "serve inbound media {id} {message_id} {} attachment(s)",
            media.len()
        ),
        SessionEffect::UploadStandalone {
            request,
            target,
            files,
            ..
        } => format!("upload files r{} {target} {files:?}", request.0),
        SessionEffect::Canon(Effect::PublishTurn(update)) => {
            format!("turn {} {}", update.state, update.conversation_id)
        }
        SessionEffect::Canon(Effect::Deliver(delivery)) => {
            let parts: Vec<String> = delivery
                .parts
                .iter()
                .map(|p| {
                    format!(
                        "{} reply_to={} {:?}",
                        p.metadata
                            .get("turnSemantics")
                            .and_then(Value::as_str)
                            .unwrap_or("?"),
                        p.reply_to.as_deref().unwrap_or("-"),
                        p.text
                    )
                })
                .collect();
            format!(
                "deliver op{} {} [{}]",
                delivery.op.0,
                delivery.conversation_id,
                parts.join(", ")
            )
        }
        SessionEffect::Canon(Effect::Streaming(_)) => "streaming".to_owned(),
        SessionEffect::Canon(Effect::Typing(typing)) => {
            format!("typing {} {}", typing.conversation_id, typing.typing)
        }
        SessionEffect::Canon(other) => format!("canon {other:?}"),
        // Described as the write (the journal record after it is the inbox tests' business).
        SessionEffect::CanonJournaled { effect, .. }
        | SessionEffect::JournalThenCanon { effect, .. } => {
            describe(&SessionEffect::Canon(effect.clone()))
        }
    }
}

/// The lines of `lines` that start with `prefix`.
fn only<'a>(lines: &'a [String], prefix: &str) -> Vec<&'a str> {
    lines
        .iter()
        .filter(|l| l.starts_with(prefix))
        .map(String::as_str)
        .collect()
}

#[test]
fn requests_before_hello_are_refused() {
    let mut daemon = Daemon::new();
    assert_eq!(
        daemon.request("s:1", "adapter.chat_info", json!({"chat_id": "c1"})),
        ["answer s:1 adapter.chat_info error handshake_required"]
    );
    assert!(!daemon.session.handshake_done);
}

#[test]
fn requests_that_need_io_become_io_effects() {
    let mut daemon = Daemon::connected();
    assert_eq!(
        daemon.request("s:1", "shutdown", json!({})),
        [
            "stop connection",
            "cancel hitl []",
            "answer s:1 shutdown ok"
        ]
    );
    assert_eq!(
        daemon.request("s:2", "probe", json!({"verify": false})),
        ["answer s:2 probe ok"],
        "a probe without verify is answered from the configuration"
    );
    assert_eq!(
        daemon.request("s:3", "probe", json!({"verify": true})),
        ["verify probe s:3"]
    );
}

#[test]
fn a_tool_call_with_bad_arguments_is_answered_with_the_tool_error() {
    let mut daemon = Daemon::connected();
    let answer = daemon.request(
        "s:1",
        "tool.call",
        json!({"name": "canon_runtime_control", "args": {"action": "send_card"}, "ctx": {}}),
    );
    assert_eq!(answer, ["answer s:1 tool.call ok"]);
    let unknown = daemon.request(
        "s:2",
        "tool.call",
        json!({"name": "canon_other", "args": {}, "ctx": {}}),
    );
    assert_eq!(unknown, ["answer s:2 tool.call ok"]);
}

#[test]
fn a_message_is_answered_once_through_the_whole_daemon() {
    let mut daemon = Daemon::connected();
    let event = daemon.message("c1", "m1", "hello").expect("wakes");
    let started = daemon.turn_start("s:1", &event, "c1", "m1");
    assert_eq!(only(&started, "turn "), ["turn thinking c1"]);
    assert_eq!(only(&started, "reply "), ["reply s:1 turn.start"]);
    let staged = daemon.send("s:2", "c1", "m1", "Hi Una");
    assert_eq!(only(&staged, "reply "), ["reply s:2 adapter.send"]);
    assert!(
        only(&staged, "deliver").is_empty(),
        "nothing durable before the turn ends"
    );
    let closing = daemon.complete("s:3", &event, "c1");
    assert_eq!(
        closing[0], "cancel hitl []",
        "the session's interactions first"
    );
    let delivered = only(&closing, "deliver");
    assert_eq!(
        delivered,
        ["deliver op1 c1 [turn_complete reply_to=m1 \"Hi Una\"]"]
    );
    let stored = daemon.feed(Input::DeliveryOutcome {
        op: OpId(1),
        result: Ok(Some("canon-msg-1".into())),
    });
    assert!(
        only(&stored, "reply ").is_empty(),
        "the turn closes after the hand-off"
    );
    let done = daemon.after(FINAL_HANDOFF_MS);
    assert_eq!(only(&done, "reply "), ["reply s:3 turn.complete"]);
    assert_eq!(only(&done, "turn "), ["turn completed c1"]);
    assert!(
        daemon.session.events.get(&event).is_none(),
        "the event is forgotten"
    );
}

#[test]
fn two_busy_conversations_each_answer_their_own_message() {
    let mut daemon = Daemon::connected();
    let first = daemon.message("c1", "m1", "first").expect("wakes");
    let second = daemon.message("c2", "m2", "second").expect("wakes");
    daemon.turn_start("s:1", &first, "c1", "m1");
    daemon.turn_start("s:2", &second, "c2", "m2");
    daemon.send("s:3", "c2", "m2", "answer two");
    daemon.send("s:4", "c1", "m1", "answer one");
    let closing_two = daemon.complete("s:5", &second, "c2");
    let closing_one = daemon.complete("s:6", &first, "c1");
    assert_eq!(
        only(&closing_two, "deliver"),
        ["deliver op1 c2 [turn_complete reply_to=m2 \"answer two\"]"]
    );
    assert_eq!(
        only(&closing_one, "deliver"),
        ["deliver op2 c1 [turn_complete reply_to=m1 \"answer one\"]"]
    );
    daemon.feed(Input::DeliveryOutcome {
        op: OpId(2),
        result: Ok(None),
    });
    let done_one = daemon.after(FINAL_HANDOFF_MS);
    assert_eq!(only(&done_one, "reply "), ["reply s:6 turn.complete"]);
    assert_eq!(only(&done_one, "turn "), ["turn completed c1"]);
    daemon.feed(Input::DeliveryOutcome {
        op: OpId(1),
        result: Ok(None),
    });
    let done_two = daemon.after(FINAL_HANDOFF_MS);
    assert_eq!(only(&done_two, "reply "), ["reply s:5 turn.complete"]);
    assert_eq!(only(&done_two, "turn "), ["turn completed c2"]);
}

#[test]
fn connect_refuses_a_bad_media_setting_then_missing_credentials() {
    let mut session = Session::default();
    let facts = |image: Option<&'static str>, key: bool| ConnectFacts {
        inbound_image_delivery: image,
        inbound_visual_media_delivery: None,
        turn_verbosity: None,
        api_key_set: key,
        base_url_set: true,
    };
    let fatal_code = |result: Result<(), ConnectResult>| {
        result
            .err()
            .and_then(|r| r.fatal)
            .map(|f| f.code)
            .unwrap_or_default()
    };
    assert_eq!(
        fatal_code(session.connect_start(facts(Some("sometimes"), true), &json!({}))),
        "invalid_config"
    );
    assert_eq!(
        fatal_code(session.connect_start(facts(None, false), &json!({}))),
        "missing_api_key"
    );
    assert_eq!(session.connect_start(facts(None, true), &json!({})), Ok(()));
}

#[test]
fn connect_refuses_an_unknown_turn_verbosity_and_keeps_a_known_one() {
    let facts = |verbosity: Option<&'static str>| ConnectFacts {
        inbound_image_delivery: None,
        inbound_visual_media_delivery: None,
        turn_verbosity: verbosity,
        api_key_set: true,
        base_url_set: true,
    };
    let refused = |result: Result<(), ConnectResult>| {
        let fatal = result.err().and_then(|r| r.fatal).expect("refused");
        assert!(!fatal.retryable);
        (fatal.code, fatal.message)
    };
    let expected = (
        "invalid_config".to_owned(),
        "CANON_TURN_VERBOSITY must be 'auto', 'verbose', or 'quiet'".to_owned(),
    );
    for (env, extra) in [
        (Some("loud"), json!({})),
        (None, json!({"turn_verbosity": "chatty"})),
        (None, json!({"canon_turn_verbosity": 3})),
        (
            None,
            json!({"turn_verbosity": "", "CANON_TURN_VERBOSITY": "x"}),
        ),
    ] {
        let mut session = Session::default();
        assert_eq!(
            refused(session.connect_start(facts(env), &extra)),
            expected,
            "{env:?} {extra}"
        );
    }
    // The environment wins over the extras; case and surrounding blanks do not matter; a
    // whitespace-only variable masks the extras and means `auto`.
    for (env, extra, verbosity) in [
        (
            Some(" QUIET "),
            json!({"turn_verbosity": "loud"}),
            VerbosityConfig::Quiet,
        ),
        (
            None,
            json!({"turn_verbosity": "Verbose"}),
            VerbosityConfig::Verbose,
        ),
        (
            Some("  "),
            json!({"turn_verbosity": "loud"}),
            VerbosityConfig::Auto,
        ),
        (
            None,
            json!({"turn_verbosity": null, "canon_turn_verbosity": "quiet"}),
            VerbosityConfig::Quiet,
        ),
        (None, json!({}), VerbosityConfig::Auto),
    ] {
        let mut session = Session::default();
        assert_eq!(
            session.connect_start(facts(env), &extra),
            Ok(()),
            "{env:?} {extra}"
        );
        assert_eq!(session.verbosity, verbosity, "{env:?} {extra}");
    }
    // An invalid media setting is reported first.
    let mut session = Session::default();
    let both = ConnectFacts {
        inbound_image_delivery: Some("sometimes"),
        ..facts(Some("loud"))
    };
    assert_eq!(
        refused(session.connect_start(both, &json!({}))).1,
        "CANON_INBOUND_IMAGE_DELIVERY must be 'model' or 'trusted-only'"
    );
}

#[test]
fn connected_keeps_the_agent_and_the_fresh_conversation_list() {
    let mut session = Session::default();
    session
        .conversations
        .insert("stale", json!({"id": "stale"}));
    let me = AgentMe::from_object(
        json!({"agentId": "a1", "displayName": "Hermes", "ownerId": "o1"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let list = Conversation::list_from(json!([{"id": "c1", "type": "group"}]));
    let result = session.connected(me, list, true);
    assert!(result.connected && result.fatal.is_none());
    assert_eq!(result.agent_name.as_deref(), Some("Hermes"));
    assert_eq!(session.agent.owner_id.as_deref(), Some("o1"));
    assert_eq!(session.conversations.ids(), ["c1"]);
}

#[test]
fn stream_events_become_steps() {
    let mut session = Session::default();
    let changes = json!({"name": "Team"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let updated = session.stream_event(EventKind::ConversationUpdated {
        conversation_id: "c9".into(),
        changes,
    });
    assert_eq!(updated, (StreamStep::Nothing, true));
    assert_eq!(session.conversations.chat_facts("c9").0, "Team");
    let ring = session.stream_event(EventKind::RuntimeControl {
        conversation_id: "c9".into(),
        kind: "signal".into(),
    });
    assert_eq!(ring, (StreamStep::Ring("c9".into()), false));
    let expired = session.stream_event(EventKind::ReplayExpired {
        last_available_id: None,
    });
    assert_eq!(expired, (StreamStep::Refetch, false));
}

#[test]
fn blocking_interactions_ask_the_turns_human_and_open_their_entry() {
    use crate::hitl::table::MAX_HITL;
    use crate::protocol::{AdapterSendClarify, AdapterSendExecApproval, TurnContext};
    use canon_wire::secret::Secret;
    use canon_wire::types::InteractionRequest;
    use std::time::Duration;

    let mut daemon = Daemon::connected();
    let event = daemon.message("c1", "m1", "run it").expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    let ctx = TurnContext {
        platform: Some("canon".into()),
        chat_id: Some("c1".into()),
        user_id: Some("someone-else".into()),
        ..TurnContext::default()
    };
    let approval = AdapterSendExecApproval {
        chat_id: "c1".into(),
        command: Secret::new("rm -rf build"),
        session_key: session_key("c1"),
        description: None,
        metadata: None,
        allow_permanent: false,
        smart_denied: false,
        allow_session: Some(true),
        ctx: ctx.clone(),
    };
    let start = daemon
        .session
        .exec_approval(approval, Duration::from_secs(60), 5_000, 0xabc)
        .expect("room in the table");
    let InteractionRequest::Approval(request) = &start.request else {
        panic!("an approval request: {start:?}");
    };
    assert_eq!(
        request.response_user_id.as_deref(),
        Some("u1"),
        "the turn's human answers"
    );
    assert_eq!(request.expires_at, 65_000);
    assert_eq!(start.consume.id, format!("hermes-{:020x}", 0xabc));
    assert_eq!(start.timeout, Duration::from_secs(60));
    assert_eq!(daemon.session.hitl.len(), 1);

    let clarify = AdapterSendClarify {
        chat_id: "c1".into(),
        question: "Which branch?".into(),
        choices: None,
        clarify_id: "q1".into(),
        session_key: session_key("c1"),
        metadata: None,
        ctx,
    };
    while daemon.session.hitl.len() < MAX_HITL {
        let entry = crate::hitl::table::HitlEntry::new(
            "other".into(),
            "c9".into(),
            crate::hitl::table::HitlKind::Clarify {
                clarify_id: "x".into(),
            },
        );
        daemon.session.hitl.open(entry);
    }
    assert_eq!(
        daemon
            .session
            .clarify(clarify, Duration::from_secs(300), 5_000),
        None,
        "a full table refuses"
    );
}

#[test]
fn media_into_a_silenced_turn_is_answered_without_an_upload() {
    let mut daemon = Daemon::connected();
    let event = daemon.message("c1", "m1", "fyi").expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    let key = session_key("c1");
    let before = daemon.session.register("s:2".into(), "adapter.send_media");
    assert_eq!(
        daemon.session.silenced_media(before, Some(&key), "c1"),
        None
    );
    let silence = daemon.request(
        "s:3",
        "tool.call",
        json!({"name": "canon_runtime_control", "args": {"action": "no_reply", "reason": "nothing to add"},
               "ctx": {"platform": "canon", "chat_id": "c1", "session_key": key}}),
    );
    assert_eq!(only(&silence, "reply "), ["reply s:3 tool.call"]);
    let after = daemon.session.register("s:4".into(), "adapter.send_media");
    let answer = daemon
        .session
        .silenced_media(after, Some(&key), "c1")
        .expect("the turn is silenced");
    assert_eq!(describe(&answer), "reply s:4 adapter.send_media");
}

#[test]
fn only_the_latest_refetch_replaces_the_cache() {
    let mut session = Session::default();
    let list = |id: &str| Conversation::list_from(json!([{ "id": id }]));
    let superseded = session.start_refetch();
    let latest = session.start_refetch();
    assert_eq!(
        session.refetched(superseded, Ok(list("old"))),
        RefetchStep::Stale
    );
    assert!(session.conversations.ids().is_empty());
    assert_eq!(
        session.refetched(latest, Ok(list("new"))),
        RefetchStep::Replaced
    );
    assert_eq!(session.conversations.ids(), ["new"]);
    let failing = session.start_refetch();
    assert_eq!(
        session.refetched(failing, Err("503".into())),
        RefetchStep::Reconnect
    );
    let in_flight = session.start_refetch();
    session.stop_refetch();
    assert_eq!(
        session.refetched(in_flight, Ok(list("late"))),
        RefetchStep::Stale
    );
    assert_eq!(session.conversations.ids(), ["new"]);
}

impl Daemon {
    /// A streamed delta (`expect_edits`), the way Hermes opens a bubble.
    fn stream(&mut self, id: &str, conversation: &str, reply_to: &str, text: &str) -> Vec<String> {
        let body = json!({"chat_id": conversation, "content": text, "reply_to": reply_to,
            "metadata": {"expect_edits": true},
            "ctx": {"platform": "canon", "chat_id": conversation, "session_key": session_key(conversation)}});
        self.request(id, "adapter.send", body)
    }

    /// The finalizing edit of a streamed answer.
    fn finalize(&mut self, id: &str, conversation: &str, text: &str) -> Vec<String> {
        let body = json!({"chat_id": conversation, "message_id": "ignored", "content": text,
            "finalize": true, "metadata": null,
            "ctx": {"platform": "canon", "chat_id": conversation, "session_key": session_key(conversation)}});
        self.request(id, "adapter.edit", body)
    }

    /// The deliveries among `lines`, with their parts.
    fn deliveries(lines: &[String]) -> Vec<&str> {
        only(lines, "deliver")
    }
}

#[test]
fn an_unsupported_protocol_is_refused_with_the_exit_code() {
    let mut daemon = Daemon {
        session: Session::default(),
        now: 0,
        draws: 0,
    };
    let refused = daemon.request(
        "s:1",
        "hello",
        json!({"protocols": [99], "manifest_sha256": "", "shim_version": "", "binary_version": "",
               "hermes_version": "", "python_version": "", "pid": 1, "hermes_home": "/"}),
    );
    assert_eq!(refused, ["answer s:1 hello error unsupported_protocol"]);
    assert_eq!(daemon.session.exit_code, Some(EXIT_UNSUPPORTED_PROTOCOL));
    assert!(!daemon.session.handshake_done);
}

#[test]
fn a_streamed_answer_is_staged_then_delivered_once() {
    let mut daemon = Daemon::connected();
    let event = daemon
        .message("c1", "m1", "what is two plus two")
        .expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    let opened = daemon.stream("s:2", "c1", "m1", "Two plus");
    assert_eq!(only(&opened, "reply "), ["reply s:2 adapter.send"]);
    let finalized = daemon.finalize("s:3", "c1", "Two plus two is four.");
    assert!(
        Daemon::deliveries(&finalized).is_empty(),
        "staged, not yet durable"
    );
    let closing = daemon.complete("s:4", &event, "c1");
    assert_eq!(
        Daemon::deliveries(&closing),
        ["deliver op1 c1 [turn_complete reply_to=m1 \"Two plus two is four.\"]"]
    );
}

#[test]
fn a_long_answer_is_one_delivery_of_ordered_parts_with_one_turn_complete() {
    let mut daemon = Daemon::connected();
    let event = daemon
        .message("c1", "m1", "write a long essay")
        .expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    let answer: String = (0..300)
        .map(|i| {
            format!("Paragraph {i:03}: the quick brown fox jumps over the lazy dog again.\n\n")
        })
        .collect::<String>()
        .trim_end()
        .to_owned();
    daemon.stream("s:2", "c1", "m1", &answer[..100]);
    daemon.finalize("s:3", "c1", &answer);
    let request = daemon.session.register("s:4".into(), "turn.complete");
    let effects = daemon.session.feed(
        Input::ProcessingComplete {
            request,
            session_key: session_key("c1"),
            conversation_id: "c1".into(),
            outcome: crate::turn::Outcome::Success,
            queue_depth: 0,
        },
        daemon.now + 10,
    );
    let deliveries: Vec<&crate::turn::Delivery> = effects
        .iter()
        .filter_map(|e| match e {
            SessionEffect::Canon(Effect::Deliver(d)) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(deliveries.len(), 1, "one durable operation");
    let parts = &deliveries[0].parts;
    assert!(parts.len() >= 6, "{} parts", parts.len());
    let semantics: Vec<&str> = parts
        .iter()
        .map(|p| p.metadata["turnSemantics"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(semantics.last(), Some(&"turn_complete"));
    assert!(semantics[..semantics.len() - 1]
        .iter()
        .all(|s| *s == "progress"));
    assert!(parts.iter().all(|p| p.text.len() <= 3_800));
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let joined: String = parts.iter().map(|p| squash(&p.text)).collect();
    assert_eq!(joined, squash(&answer), "parts arrive whole and in order");
}

#[test]
fn no_reply_silences_the_turn_and_records_the_silence_without_the_reason() {
    let mut daemon = Daemon::connected();
    let event = daemon
        .message("c1", "m1", "nothing to say here")
        .expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    let silence = daemon.request(
        "s:2",
        "tool.call",
        json!({"name": "canon_runtime_control", "args": {"action": "no_reply", "reason": "secret model text"},
               "ctx": {"platform": "canon", "chat_id": "c1", "session_key": session_key("c1")}}),
    );
    assert_eq!(only(&silence, "reply "), ["reply s:2 tool.call"]);
    let records = only(&silence, "canon RecordNoReply");
    assert_eq!(records.len(), 1, "{silence:?}");
    assert!(records[0].contains("reason_given: true"));
    assert!(
        silence.iter().all(|l| !l.contains("secret model text")),
        "the reason never leaves: {silence:?}"
    );
    daemon.send("s:3", "c1", "m1", "an answer after all");
    let closing = daemon.complete("s:4", &event, "c1");
    assert!(
        Daemon::deliveries(&closing).is_empty(),
        "a silenced turn posts nothing"
    );
}

#[test]
fn an_accepted_steer_lifts_the_no_reply_silence() {
    use crate::protocol::{ShimNotification, SteeredNote};
    let mut daemon = Daemon::connected();
    let event = daemon
        .message("c1", "m1", "nothing to say yet")
        .expect("wakes");
    daemon.turn_start("s:1", &event, "c1", "m1");
    daemon.request(
        "s:2",
        "tool.call",
        json!({"name": "canon_runtime_control", "args": {"action": "no_reply"},
               "ctx": {"platform": "canon", "chat_id": "c1", "session_key": session_key("c1")}}),
    );
    let steer = requests::notification_input(ShimNotification::TurnSteered(SteeredNote {
        session_key: session_key("c1"),
        chat_id: "c1".into(),
    }))
    .expect("a turn input");
    daemon.feed(steer);
    daemon.send("s:3", "c1", "m1", "Steered answer.");
    let closing = daemon.complete("s:4", &event, "c1");
    assert_eq!(
        Daemon::deliveries(&closing),
        ["deliver op1 c1 [turn_complete reply_to=m1 \"Steered answer.\"]"]
    );
}

#[test]
fn a_dequeued_follow_up_gets_its_own_turn_and_answer() {
    let mut daemon = Daemon::connected();
    let first = daemon.message("c1", "m1", "first question").expect("wakes");
    let started = daemon.turn_start("s:1", &first, "c1", "m1");
    assert_eq!(only(&started, "turn "), ["turn thinking c1"]);
    daemon.send("s:2", "c1", "m1", "First answer.");
    let second = daemon
        .message("c1", "m2", "second question")
        .expect("wakes");
    let accepted = daemon.request(
        "s:3",
        "turn.accepted",
        json!({"event_ref": second, "session_key": session_key("c1"), "phase": "queue_dequeue",
               "event": {"chat_id": "c1", "chat_type": "dm", "user_id": "u1", "message_id": "m2"}}),
    );
    assert_eq!(only(&accepted, "reply "), ["reply s:3 turn.accepted"]);
    let follow_up = daemon.send("s:4", "c1", "m2", "Second answer.");
    let boundary = Daemon::deliveries(&follow_up);
    assert_eq!(
        boundary,
        ["deliver op1 c1 [turn_complete reply_to=m1 \"First answer.\"]"],
        "the follow-up's first output closes the first turn with its own answer"
    );
    let closing = daemon.complete("s:5", &second, "c1");
    assert_eq!(
        Daemon::deliveries(&closing),
        ["deliver op2 c1 [turn_complete reply_to=m2 \"Second answer.\"]"]
    );
}

#[test]
fn chat_info_before_connect_falls_back_to_the_id() {
    let mut daemon = Daemon::connected();
    let answer = daemon.session.request(
        "s:1".into(),
        ShimRequest::from_parts("adapter.chat_info", json!({"chat_id": "c-unknown"})).unwrap(),
        FACTS,
        0,
        0,
    );
    let Handled::Effects(effects) = answer else {
        panic!("answered by the session");
    };
    let [SessionEffect::Frame(line)] = effects.as_slice() else {
        panic!("one frame: {effects:?}");
    };
    let value: Value = serde_json::from_str(line).unwrap();
    assert_eq!(
        value["body"],
        json!({"name": "c-unknown", "type": "dm", "id": "c-unknown"})
    );
}

mod communicate;
mod inbox;
mod io;

/// The sequence a real Hermes 0.19.0 gateway produced when a burst of
/// queued follow-ups reached its recursion cap (captured shim ⇄ daemon
/// frames, one conversation): the fourth message's answer is streamed and
/// finalized in its own turn, then Hermes sends the same text again, now
/// replying to the first message of the run, and completes the first
/// message's event. The final must still reply to the fourth message, once.
/// The shim leaves the next follow-up queued at the cap (no dequeue ack),
/// so it opens its own turn with `turn.start` afterwards.
#[test]
fn a_resend_anchored_to_the_runs_first_message_keeps_the_answers_reply_target() {
    let mut daemon = Daemon::connected();
    let a1 = daemon.message("c1", "mA1", "msgA1x").expect("wakes");
    let a4 = daemon.message("c1", "mA4", "msgA4x").expect("wakes");
    let a5 = daemon.message("c1", "mA5", "msgA5x").expect("wakes");
    daemon.turn_start("s:1", &a1, "c1", "mA1");
    daemon.stream("s:2", "c1", "mA1", "Answer A1 done here now");
    daemon.finalize("s:3", "c1", "Answer A1 done here now");
    let accepted = daemon.request(
        "s:4",
        "turn.accepted",
        json!({"event_ref": a4, "session_key": session_key("c1"), "phase": "queue_dequeue",
               "queue_depth": 1,
               "event": {"chat_id": "c1", "chat_type": "dm", "user_id": "u1", "message_id": "mA4"}}),
    );
    assert_eq!(only(&accepted, "reply "), ["reply s:4 turn.accepted"]);
    let boundary = daemon.stream("s:5", "c1", "mA4", "Answer A4 done here now ▉");
    assert_eq!(
        Daemon::deliveries(&boundary),
        ["deliver op1 c1 [turn_complete reply_to=mA1 \"Answer A1 done here now\"]"]
    );
    daemon.finalize("s:6", "c1", "Answer A4 done here now");
    daemon.finalize("s:7", "c1", "Answer A4 done here now");
    let resent = daemon.send("s:8", "c1", "mA1", "Answer A4 done here now");
    assert!(Daemon::deliveries(&resent).is_empty(), "{resent:?}");
    let closing = daemon.complete("s:9", &a1, "c1");
    assert_eq!(
        Daemon::deliveries(&closing),
        ["deliver op2 c1 [turn_complete reply_to=mA4 \"Answer A4 done here now\"]"],
        "one final, replying to the message it answers"
    );
    // The follow-up left queued runs as a fresh processing cycle.
    daemon.feed(Input::DeliveryOutcome {
        op: OpId(2),
        result: Ok(None),
    });
    daemon.after(FINAL_HANDOFF_MS);
    daemon.turn_start("s:10", &a5, "c1", "mA5");
    daemon.stream("s:11", "c1", "mA5", "Answer A5 done here now");
    daemon.finalize("s:12", "c1", "Answer A5 done here now");
    let last = daemon.complete("s:13", &a5, "c1");
    assert_eq!(
        Daemon::deliveries(&last),
        ["deliver op3 c1 [turn_complete reply_to=mA5 \"Answer A5 done here now\"]"]
    );
}

/// When the gateway merges a waiting message into another (a picture
/// joining the text before it), the turn that answers them lists both among
/// its active messages, acknowledges the queued disposition of the merged
/// one, and the merged event never opens a turn of its own.
#[test]
fn a_merged_message_is_answered_by_the_turn_it_joined() {
    let mut daemon = Daemon::connected();
    let head = daemon.message("c1", "m2", "msgA2x").expect("wakes");
    let merged = {
        let payload = json!({"conversationId": "c1", "conversation": {"id": "c1", "type": "direct"},
            "message": {"id": "m3", "senderId": "u1", "senderName": "Una", "senderType": "human",
                        "text": "and this picture", "metadata": {"inboundDisposition": "queued"}}});
        let Value::Object(payload) = payload else {
            unreachable!()
        };
        let created = MessageCreated {
            conversation_id: "c1".into(),
            message: payload["message"].as_object().cloned().unwrap_or_default(),
            payload,
            reply_authority: None,
        };
        match daemon.session.message_created(created).0 {
            InboundStep::Send(message) => message.event_ref,
            other => panic!("wakes: {other:?}"),
        }
    };
    let body = json!({"event_ref": head, "session_key": session_key("c1"),
        "event": {"chat_id": "c1", "chat_type": "dm", "user_id": "u1", "message_id": "m2"},
        "queue_depth": 0, "absorbed_refs": [merged]});
    let effects = daemon.handle_effects(SessionInput::Line(
        protocol::encode_request("s:1", "turn.start", body).into_bytes(),
    ));
    let active: Vec<Vec<String>> = effects
        .iter()
        .filter_map(|e| match e {
            SessionEffect::Canon(Effect::PublishTurn(update))
            | SessionEffect::JournalThenCanon {
                effect: Effect::PublishTurn(update),
                ..
            } => update.active_message_ids.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(active, [vec!["m2".to_owned(), "m3".to_owned()]]);
    let acks: Vec<&str> = effects
        .iter()
        .filter_map(|e| match e {
            SessionEffect::Canon(Effect::AckDisposition { message_id, .. }) => {
                Some(message_id.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(acks, ["m3"], "only the merged message was queued");
    assert!(
        daemon.session.events.get(&merged).is_none(),
        "the merged event is forgotten"
    );
    daemon.send("s:2", "c1", "m2", "Answer A2 done here now");
    let closing = daemon.complete("s:3", &head, "c1");
    assert_eq!(
        Daemon::deliveries(&closing),
        ["deliver op1 c1 [turn_complete reply_to=m2 \"Answer A2 done here now\"]"]
    );
}
