//! canon-transport's REST client against the simulator over real sockets (canon-wire.md §11.7
//! "transport"): every request shape of canon-wire.md §4 checked in the sim journal (every
//! operation of canon-wire.md §3, the media download included), every §2.5 classifier row driven by
//! sim fault rules (status before and after processing, drops, resets, delays, malformed bodies),
//! and the idempotent replay after commit-then-fail (same message, no duplicate).

use std::time::Duration;

use canon_sim::control::Injection;
use canon_sim::SimHandle;
use canon_transport::client::{CanonClient, DiscoverAgents, DurableRequest};
use canon_transport::media::{MediaDownloader, MediaOptions};
use canon_transport::net::AddressPolicy;
use canon_transport::TransportError;
use canon_wire::types::*;
use canon_wire::FailureKind;
use serde_json::{json, Map, Value};

use crate::sim_support::{
    client, client_with_read_timeout, header, journal_at, journal_cursor, rule, sim,
    stored_with_client_id,
};

fn object(value: Value) -> Map<String, Value> {
    value.as_object().expect("object").clone()
}

fn send(text: &str, message_id: Option<&str>) -> DurableRequest {
    DurableRequest::message(&SendMessage {
        conversation_id: "c-direct".into(),
        text: text.into(),
        message_id: message_id.map(str::to_owned),
        ..SendMessage::default()
    })
    .expect("serializable")
}

fn agent_messages(sim: &SimHandle) -> usize {
    sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.message["senderId"] == "a-hermes")
            .count()
    })
}

/// Checks one journalled request: method, path, query, the canon-wire.md §2.1
/// headers and the body (JSON equality, so key order does not matter).
fn check_entry(sim: &SimHandle, since: u64, method: &str, path: &str, body: Value, auth: bool) {
    let entries = journal_at(sim, since, path);
    let entry = entries
        .iter()
        .find(|e| e.method == method)
        .unwrap_or_else(|| panic!("{method} {path} in the journal"));
    assert_eq!(entry.status, 200, "{method} {path}: {}", entry.response);
    assert_eq!(entry.body, body, "{method} {path}");
    let agent = header(entry, "authorization");
    if auth {
        assert_eq!(agent, Some("Bearer a-hermes"), "{method} {path}");
        assert_eq!(
            header(entry, "content-type"),
            Some("application/json"),
            "{method} {path}"
        );
        assert!(header(entry, "user-agent").is_some_and(|ua| ua.starts_with("canon-hermes/")));
    } else {
        assert_eq!(agent, None, "{method} {path} must not carry credentials");
    }
}

#[tokio::test]
async fn every_operation_lands_in_the_sim_journal_with_its_documented_shape() {
    let sim = sim().await;
    let client = client(&sim);
    let inbound = sim
        .inject_message(&Injection {
            text: Some("hello agent".into()),
            ..Injection::default()
        })
        .unwrap();
    let inbound_id = inbound["id"].as_str().unwrap().to_owned();
    let since = journal_cursor(&sim);

    // Environment verification (canon-wire.md §1.2).
    let project = client
        .verify_environment("canon-dev-v1", Some("canonmail-dev"))
        .await
        .unwrap();
    assert_eq!(project, "canonmail-dev");
    // `GET /agents/me` and `GET /conversations` (canon-wire.md §4.1, §4.2).
    let me = client.get_me().await.unwrap();
    assert_eq!(me.agent_id.as_deref(), Some("a-hermes"));
    let conversations = client.list_conversations().await.unwrap();
    assert!(conversations.iter().any(|c| c.id == "c-direct"));
    // `POST /messages/send` (canon-wire.md §4.3), durable and single attempt.
    let metadata = object(json!({"turnSemantics": "turn_complete", "turnComplete": true}));
    let durable = DurableRequest::message(&SendMessage {
        conversation_id: "c-direct".into(),
        text: "hello ü".into(),
        message_id: Some("hermes-final-df21a8694795b86bba2a5e77c3660bfd".into()),
        metadata: Some(metadata.clone()),
        ..SendMessage::default()
    })
    .unwrap();
    let sent = client.send_message(&durable).await.unwrap();
    assert!(sent.message_id.is_some());
    // `POST /media/upload`, then `POST /messages/send` with the attachment
    // (canon-wire.md §4.4, §4.3; single attempt, as attachment messages are).
    let attachment = client
        .upload_media(&UploadMedia {
            conversation_id: "c-direct".into(),
            data: b"foobar".to_vec(),
            mime_type: "image/png".into(),
            file_name: Some("a.png".into()),
        })
        .await
        .unwrap();
    assert_eq!(attachment["kind"], "image");
    assert_eq!(attachment["sizeBytes"], 6);
    // Media download (canon-wire.md §4.14): the uploaded file, fetched
    // without credentials through the SSRF guard (the sim is on loopback,
    // so loopback is allowed here).
    let url = attachment["url"].as_str().unwrap().to_owned();
    let media = MediaDownloader::new(MediaOptions {
        policy: AddressPolicy {
            allow_private: true,
            allow_loopback: true,
        },
        ..MediaOptions::default()
    })
    .download(&url)
    .await
    .unwrap();
    assert_eq!(&media.bytes[..], b"foobar");
    client
        .send_message_once(&SendMessage {
            conversation_id: "c-direct".into(),
            text: String::new(),
            attachments: Some(vec![Value::Object(attachment.clone())]),
            ..SendMessage::default()
        })
        .await
        .unwrap();
    // Typing, streaming, turn state, runtime status, signals,
    // disposition and read (canon-wire.md §4.5–§4.11).
    client
        .set_typing(&Typing {
            conversation_id: "c-direct".into(),
            typing: true,
            status: Some(TypingStatus::Thinking),
        })
        .await
        .unwrap();
    client
        .streaming(&StreamingUpdate::Set {
            conversation_id: "c-direct".into(),
            text: Some("partial".into()),
            turn_id: Some("hermes-0123456789abcdef0123".into()),
            blocks: None,
        })
        .await
        .unwrap();
    client
        .publish_turn(&TurnUpdate {
            conversation_id: "c-direct".into(),
            state: TurnState::Thinking,
            queue_depth: 0,
            turn_id: Some("hermes-0123456789abcdef0123".into()),
            active_message_ids: None,
            capabilities: TurnCapabilities::for_state(TurnState::Thinking, false),
            opened_at: Some(10),
            turn_updated_at: 20,
        })
        .await
        .unwrap();
    client.publish_runtime_status().await.unwrap();
    assert_eq!(client.consume_signal("c-direct").await.unwrap(), None);
    client
        .accept_disposition("c-direct", &inbound_id)
        .await
        .unwrap();
    client.mark_read("c-direct").await.unwrap();
    client
        .streaming(&StreamingUpdate::Clear {
            conversation_id: "c-direct".into(),
        })
        .await
        .unwrap();
    // Runtime interactions: request and consume (canon-wire.md §4.12, §4.13).
    let expires_at = sim.now_ms() + 60_000;
    client
        .request_interaction(&InteractionRequest::Input(InputRequest {
            conversation_id: "c-direct".into(),
            input_id: "in-1".into(),
            kind: "clarify".into(),
            expires_at,
            title: Some("Clarification needed".into()),
            prompt: Some("Which?".into()),
            choices: None,
            questions: None,
            response_user_id: None,
            native: None,
            sensitive: None,
            turn_id: None,
        }))
        .await
        .unwrap();
    let pending = client
        .consume_interaction(&ConsumeInteraction {
            kind: InteractionKind::Input,
            conversation_id: "c-direct".into(),
            id: "in-1".into(),
            cancel: false,
        })
        .await
        .unwrap();
    assert!(pending.is_pending());
    // A verb, and the agent directory (canon-wire.md §4.15, §4.15.1).
    let verb = client
        .execute_verb(
            "no_reply",
            object(json!({"conversationId": "c-direct"})),
            Map::new(),
        )
        .await
        .unwrap();
    assert!(verb.is_empty() || verb.contains_key("status"), "{verb:?}");
    let page = client
        .discover_agents(&DiscoverAgents {
            query: Some("her mes".into()),
            limit: 5,
            cursor: None,
        })
        .await
        .unwrap();
    assert!(page.contains_key("agents"));
    // Registration: register, poll, acknowledge (canon-wire.md §1.4).
    let ticket = client
        .register(&Registration {
            name: "Bot".into(),
            description: "A test agent".into(),
            owner_phone: "+15555550100".into(),
            developer_info: "Hermes gateway platform adapter".into(),
            client_type: "hermes".into(),
            local_registration_id: "hermes-0123456789abcdef0123456789abcdef".into(),
            requested_agent_id: None,
        })
        .await
        .unwrap();
    assert_eq!(
        client.poll_registration(&ticket).await.unwrap().status,
        "pending"
    );
    sim.approve_registration(&ticket.request_id).unwrap();
    let approved = client.poll_registration(&ticket).await.unwrap();
    assert_eq!(approved.status, "approved");
    assert!(approved.api_key.is_some());
    client.ack_registration(&ticket).await.unwrap();

    // The journal holds every request with its exact shape.
    let check = |method: &str, path: &str, body: Value, auth: bool| {
        check_entry(&sim, since, method, path, body, auth)
    };
    check("GET", "/healthz/", Value::Null, false);
    check("GET", "/health", Value::Null, false);
    check("GET", "/agents/me", Value::Null, true);
    check("GET", "/conversations", Value::Null, true);
    let sends = journal_at(&sim, since, "/messages/send");
    assert_eq!(sends.len(), 2);
    assert_eq!(
        sends[0].body,
        json!({"conversationId": "c-direct", "text": "hello ü", "messageId": "hermes-final-df21a8694795b86bba2a5e77c3660bfd",
               "metadata": {"turnSemantics": "turn_complete", "turnComplete": true}})
    );
    assert_eq!(
        sends[1].body,
        json!({"conversationId": "c-direct", "text": "", "attachments": [Value::Object(attachment)]})
    );
    check(
        "POST",
        "/media/upload",
        json!({"conversationId": "c-direct", "data": "<8 base64 chars>", "mimeType": "image/png", "fileName": "a.png"}),
        true,
    );
    check(
        "POST",
        "/typing",
        json!({"conversationId": "c-direct", "typing": true, "status": "thinking"}),
        true,
    );
    let streaming = journal_at(&sim, since, "/streaming");
    assert_eq!(
        streaming.iter().map(|e| e.body.clone()).collect::<Vec<_>>(),
        [
            json!({"conversationId": "c-direct", "status": "streaming", "text": "partial",
                   "messageId": "hermes-0123456789abcdef0123", "turnId": "hermes-0123456789abcdef0123"}),
            json!({"conversationId": "c-direct", "streaming": false}),
        ]
    );
    check(
        "POST",
        "/runtime/turn",
        json!({"conversationId": "c-direct", "state": "thinking", "queueDepth": 0, "turnId": "hermes-0123456789abcdef0123",
               "capabilities": serde_json::to_value(TurnCapabilities::for_state(TurnState::Thinking, false)).unwrap(),
               "openedAt": 10, "turnUpdatedAt": 20}),
        true,
    );
    check("POST", "/runtime/status", runtime_status_body(), true);
    check(
        "POST",
        "/runtime/signal/consume",
        json!({"conversationId": "c-direct"}),
        true,
    );
    check(
        "PATCH",
        &format!("/conversations/c-direct/messages/{inbound_id}/disposition"),
        json!({"inboundDisposition": "accepted_now"}),
        true,
    );
    check("POST", "/conversations/c-direct/read", Value::Null, true);
    check(
        "POST",
        "/runtime-interaction/request",
        json!({"interactionKind": "input", "conversationId": "c-direct", "inputId": "in-1", "kind": "clarify",
               "expiresAt": expires_at, "title": "Clarification needed", "prompt": "Which?"}),
        true,
    );
    check(
        "POST",
        "/runtime-interaction/consume",
        json!({"interactionKind": "input", "conversationId": "c-direct", "inputId": "in-1"}),
        true,
    );
    check(
        "POST",
        "/agent/verbs/no_reply",
        json!({"wire": "canon.verb-wire.v1", "verb": "no_reply", "envelope": {"conversationId": "c-direct"},
               "body": {"encoding": "json", "value": {}}}),
        true,
    );
    let discover = journal_at(&sim, since, "/agents/discover");
    assert_eq!(discover.len(), 1);
    assert_eq!(discover[0].query, "query=her%20mes&limit=5");
    check(
        "POST",
        "/agents/register",
        json!({"name": "Bot", "description": "A test agent", "ownerPhone": "+15555550100",
               "developerInfo": "Hermes gateway platform adapter", "clientType": "hermes",
               "localRegistrationId": "hermes-0123456789abcdef0123456789abcdef"}),
        false,
    );
    let status_path = format!("/agents/status/{}", ticket.request_id);
    let polls = journal_at(&sim, since, &status_path);
    assert_eq!(polls.len(), 2);
    assert!(polls
        .iter()
        .all(|p| header(p, "x-canon-poll-token").is_some() && p.status == 200));
    check("POST", &format!("{status_path}/ack"), Value::Null, false);
    let files: Vec<_> = sim
        .journal(since, Some("/files/"))
        .into_iter()
        .filter(|e| e.method == "GET")
        .collect();
    assert_eq!(files.len(), 1);
    assert_eq!(header(&files[0], "authorization"), None);
    assert_eq!(
        header(&files[0], "user-agent"),
        Some("HermesAgent/CanonPlatform")
    );
    // Every authenticated request mapped to the default agent; nothing failed.
    let all = sim.journal(since, None);
    assert!(all.iter().all(|e| e.status == 200), "{all:#?}");
}

/// What one status does to a durable send with and without a client id, and
/// to a best-effort call (canon-wire.md §2.5 status matrix).
struct Row {
    status: u16,
    /// Attempts of a durable send with an id.
    attempts_with_id: usize,
    /// Attempts of a durable send without an id.
    attempts_without_id: usize,
    /// Retryability reported for the send with an id.
    reported_with_id: bool,
    /// Retryability reported for the send without an id (and best-effort calls).
    reported_without_id: bool,
}

#[tokio::test]
async fn each_status_row_of_the_classifier_matrix_through_sim_faults() {
    let rows = [
        (400, 1, 1, false, false),
        (401, 1, 1, false, false),
        (403, 1, 1, false, false),
        (404, 1, 1, false, false),
        (408, 3, 1, true, true),
        (409, 1, 1, false, false),
        (425, 3, 1, true, true),
        (429, 3, 3, true, true),
        (500, 3, 1, true, true),
        (502, 3, 1, true, true),
        (503, 3, 3, true, true),
    ]
    .map(|(status, a, b, c, d)| Row {
        status,
        attempts_with_id: a,
        attempts_without_id: b,
        reported_with_id: c,
        reported_without_id: d,
    });
    let sim = sim().await;
    let client = client(&sim);
    for row in rows {
        let status = row.status;
        sim.clear_faults();
        sim.add_fault(rule(
            json!({"matcher": {"method": "POST", "path": "/messages/send"},
                                  "action": {"type": "status", "status": status}}),
        ));
        sim.add_fault(rule(
            json!({"matcher": {"method": "POST", "path": "/typing"},
                                  "action": {"type": "status", "status": status}}),
        ));

        let since = journal_cursor(&sim);
        let id = format!("hermes-final-row-{status}");
        let err = client
            .send_message(&send("row", Some(&id)))
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(status));
        assert_eq!(err.is_retryable(), row.reported_with_id, "{status} with id");
        assert_eq!(
            matches!(err, TransportError::MessageIdConflict { .. }),
            status == 409,
            "{status}: {err:?}"
        );
        let attempts = journal_at(&sim, since, "/messages/send");
        assert_eq!(attempts.len(), row.attempts_with_id, "{status} with id");
        // Every attempt sent byte-identical bodies.
        assert!(attempts.iter().all(|a| a.body == attempts[0].body));

        let since = journal_cursor(&sim);
        let err = client.send_message(&send("row", None)).await.unwrap_err();
        assert_eq!(err.status(), Some(status));
        assert_eq!(
            err.is_retryable(),
            row.reported_without_id,
            "{status} without id"
        );
        assert_eq!(
            journal_at(&sim, since, "/messages/send").len(),
            row.attempts_without_id,
            "{status} without id"
        );

        let since = journal_cursor(&sim);
        let err = client
            .set_typing(&Typing {
                conversation_id: "c-direct".into(),
                typing: true,
                status: None,
            })
            .await
            .unwrap_err();
        assert_eq!(
            (err.status(), err.is_retryable()),
            (Some(status), row.reported_without_id),
            "{status} best effort"
        );
        assert_eq!(journal_at(&sim, since, "/typing").len(), 1);
        // A status before processing never stores anything.
        assert_eq!(agent_messages(&sim), 0, "{status}");
    }
    // After the faults, the same requests go through.
    sim.clear_faults();
    client
        .send_message(&send("row", Some("hermes-final-row-ok")))
        .await
        .unwrap();
    assert_eq!(agent_messages(&sim), 1);
}

#[tokio::test]
async fn replay_after_commit_then_fail_returns_the_same_message_without_duplicate() {
    let sim = sim().await;
    let client = client(&sim);
    // Each ambiguous failure after processing: the loop's next attempt is a
    // replay of the same bytes, Canon returns the original message.
    let actions = [
        json!({"type": "process_then_status", "status": 500}),
        json!({"type": "process_then_status", "status": 503}),
        json!({"type": "process_then_drop"}),
        json!({"type": "reset_mid_body"}),
    ];
    for (n, action) in actions.iter().enumerate() {
        sim.clear_faults();
        sim.add_fault(rule(
            json!({"matcher": {"path": "/messages/send", "times": 1}, "action": action}),
        ));
        let id = format!("hermes-final-commit-{n}");
        let request = send(&format!("commit then fail {n}"), Some(&id));
        let since = journal_cursor(&sim);
        let sent = client.send_message(&request).await.unwrap();
        let stored = stored_with_client_id(&sim, &id);
        assert_eq!(stored.len(), 1, "{action}: exactly one message");
        assert_eq!(
            sent.message_id.as_deref(),
            stored[0]["id"].as_str(),
            "{action}"
        );
        let attempts = journal_at(&sim, since, "/messages/send");
        assert_eq!(attempts.len(), 2, "{action}");
        assert_eq!(attempts[0].body, attempts[1].body, "{action}");
        assert_eq!(attempts[1].status, 200);
        // A later replay by the caller (the reservation was kept) also
        // returns the same message.
        let again = client.send_message(&request).await.unwrap();
        assert_eq!(again.message_id, sent.message_id, "{action}");
        assert_eq!(stored_with_client_id(&sim, &id).len(), 1);
    }
    // A changed payload under the same id is the distinct 409 error.
    let err = client
        .send_message(&send("a different text", Some("hermes-final-commit-0")))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, TransportError::MessageIdConflict { message_id, .. } if message_id == "hermes-final-commit-0"),
        "{err:?}"
    );
    assert!(err.may_have_landed(1));
    assert_eq!(agent_messages(&sim), actions.len());
}

#[tokio::test]
async fn transport_failures_classify_per_row_through_sim_faults() {
    let sim = sim().await;
    let client = client(&sim);
    // Without an id an ambiguous failure is not retried: the message landed,
    // the error says so, and a reset is reported non-retryable.
    for (action, kind, reported) in [
        (
            json!({"type": "process_then_drop"}),
            FailureKind::Reset,
            false,
        ),
        (json!({"type": "reset_mid_body"}), FailureKind::Reset, false),
    ] {
        sim.clear_faults();
        sim.add_fault(rule(
            json!({"matcher": {"path": "/messages/send", "times": 1}, "action": action}),
        ));
        let before = agent_messages(&sim);
        let since = journal_cursor(&sim);
        let err = client.send_message(&send("no id", None)).await.unwrap_err();
        assert_eq!(err.kind(), kind, "{action}: {err:?}");
        assert_eq!(err.is_retryable(), reported, "{action}");
        assert!(err.may_have_landed(1));
        assert_eq!(journal_at(&sim, since, "/messages/send").len(), 1);
        assert_eq!(agent_messages(&sim), before + 1, "{action}: it landed");
    }
    // A drop before processing: with an id the loop retries (one message),
    // without an id it does not (nothing landed, a reset is not retryable).
    sim.clear_faults();
    sim.add_fault(rule(
        json!({"matcher": {"path": "/messages/send", "nth": [1, 3]}, "action": {"type": "drop"}}),
    ));
    let before = agent_messages(&sim);
    let sent = client
        .send_message(&send("dropped", Some("hermes-final-drop")))
        .await
        .unwrap();
    assert_eq!(
        sent.message_id.as_deref(),
        stored_with_client_id(&sim, "hermes-final-drop")[0]["id"].as_str()
    );
    let err = client
        .send_message(&send("dropped", None))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), FailureKind::Reset);
    assert!(!err.is_retryable());
    assert_eq!(agent_messages(&sim), before + 1);
    // Best-effort and read calls report a reset as non-retryable, but a read
    // timeout and a protocol error as retryable.
    sim.clear_faults();
    sim.add_fault(rule(
        json!({"matcher": {"path": "/agents/me", "nth": [1]}, "action": {"type": "drop"}}),
    ));
    let err = client.get_me().await.unwrap_err();
    assert_eq!(
        (err.kind(), err.is_retryable()),
        (FailureKind::Reset, false)
    );
    client.get_me().await.unwrap();
}

#[tokio::test]
async fn delays_past_the_read_timeout_classify_and_replay_to_one_message() {
    let sim = sim().await;
    let client = client_with_read_timeout(&sim, Duration::from_secs(1));
    // Processed, then the answer comes too late: the loop replays and Canon
    // returns the original message.
    sim.add_fault(rule(
        json!({"matcher": {"path": "/messages/send", "nth": [1]}, "action": {"type": "delay_after", "ms": 5000}}),
    ));
    let since = journal_cursor(&sim);
    let sent = client
        .send_message(&send("slow", Some("hermes-final-slow")))
        .await
        .unwrap();
    let stored = stored_with_client_id(&sim, "hermes-final-slow");
    assert_eq!(stored.len(), 1);
    assert_eq!(sent.message_id.as_deref(), stored[0]["id"].as_str());
    // Only the replay has been journalled so far (the delayed answer is
    // journalled when it is written).
    let replays = journal_at(&sim, since, "/messages/send");
    assert_eq!(replays.len(), 1);
    assert_eq!(replays[0].status, 200);
    // Without an id a read timeout is not retried but reported retryable.
    sim.add_fault(rule(
        json!({"matcher": {"path": "/messages/send", "nth": [1]}, "action": {"type": "delay_after", "ms": 5000}}),
    ));
    let err = client.send_message(&send("slow", None)).await.unwrap_err();
    assert_eq!(
        (err.kind(), err.is_retryable()),
        (FailureKind::ReadTimeout, true)
    );
    assert!(err.may_have_landed(1));
    // A delay before processing on a read: read timeout, retryable.
    sim.add_fault(rule(
        json!({"matcher": {"path": "/conversations", "nth": [1]}, "action": {"type": "delay_before", "ms": 5000}}),
    ));
    let err = client.list_conversations().await.unwrap_err();
    assert_eq!(
        (err.kind(), err.is_retryable()),
        (FailureKind::ReadTimeout, true)
    );
    // A short delay under the timeout is just slow.
    sim.add_fault(rule(
        json!({"matcher": {"path": "/agents/me", "nth": [1]}, "action": {"type": "delay_before", "ms": 20}}),
    ));
    client.get_me().await.unwrap();
    // Processing happened before each delay, so the slow original and its
    // replay are one message.
    assert_eq!(stored_with_client_id(&sim, "hermes-final-slow").len(), 1);
}

#[tokio::test]
async fn malformed_success_bodies_are_decode_errors_or_read_leniently() {
    let sim = sim().await;
    let client: CanonClient = client(&sim);
    let malformed = |path: &str, kind: &str| {
        rule(
            json!({"matcher": {"path": path, "times": 1}, "action": {"type": "malformed", "kind": kind}}),
        )
    };
    // Invalid JSON on a send: a decode error, never retried by the loop (the
    // message landed; a replay returns it).
    sim.add_fault(malformed("/messages/send", "invalid_json"));
    let request = send("malformed", Some("hermes-final-malformed"));
    let since = journal_cursor(&sim);
    let err = client.send_message(&request).await.unwrap_err();
    assert_eq!(err.kind(), FailureKind::Decode, "{err:?}");
    assert!(!err.is_retryable());
    assert!(err.may_have_landed(1));
    assert_eq!(journal_at(&sim, since, "/messages/send").len(), 1);
    let replay = client.send_message(&request).await.unwrap();
    let stored = stored_with_client_id(&sim, "hermes-final-malformed");
    assert_eq!(stored.len(), 1);
    assert_eq!(replay.message_id.as_deref(), stored[0]["id"].as_str());
    // An empty 200 and an array are read as `{}` (canon-wire.md §2.3).
    sim.add_fault(malformed("/agents/me", "empty"));
    assert_eq!(client.get_me().await.unwrap().agent_id, None);
    sim.add_fault(malformed("/conversations", "array"));
    assert!(client.list_conversations().await.unwrap().is_empty());
    // Verb envelope checks use the exact canon-wire.md §4.15 messages.
    for (kind, message) in [
        (
            "wrong_wire",
            "Canon verb response has an unexpected wire version",
        ),
        (
            "wrong_verb",
            "Canon verb response does not match the requested verb",
        ),
        (
            "non_object_value",
            "Canon verb JSON result must be an object",
        ),
        ("array", "Canon verb response must be an object"),
    ] {
        sim.add_fault(malformed("/agent/verbs/no_reply", kind));
        let err = client
            .execute_verb(
                "no_reply",
                object(json!({"conversationId": "c-direct"})),
                Map::new(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), message, "{kind}");
        assert_eq!(err.kind(), FailureKind::Decode);
    }
}
