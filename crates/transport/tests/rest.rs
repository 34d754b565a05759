//! REST client tests against a local hyper server: request shapes
//! (canon-wire.md §4), headers (§2.1), decoding (§2.3), error classes
//! (canon-wire.md §2.5/§2.6), durable send.

use std::time::Duration;

use canon_transport::client::{CanonClient, ClientConfig, DurableRequest};
use canon_transport::http::Timeouts;
use canon_transport::TransportError;
use canon_wire::types::*;
use canon_wire::{ApiKey, FailureKind};
use serde_json::{json, Map, Value};

use crate::support::{RawServer, Recorded, Reply, RestServer};

const KEY: &str = "sk-test-0123456789";

fn client_for(server: &RestServer) -> CanonClient {
    let mut config =
        ClientConfig::new(format!("{}/", server.url()), server.url(), ApiKey::new(KEY));
    config.durable_backoff = [Duration::from_millis(1), Duration::from_millis(2)];
    config.timeouts = Timeouts {
        connect: Duration::from_secs(2),
        read: Duration::from_secs(2),
    };
    CanonClient::new(config).unwrap()
}

fn ok(_: &Recorded, _: usize) -> Reply {
    Reply::Json(200, json!({"ok": true}))
}

fn assert_api_headers(request: &Recorded) {
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert!(request
        .header("user-agent")
        .unwrap()
        .starts_with("canon-hermes/"));
}

fn object(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

#[tokio::test]
async fn every_operation_sends_its_documented_shape() {
    let server = RestServer::start(ok).await;
    let client = client_for(&server);
    client.get_me().await.unwrap();
    client.list_conversations().await.unwrap();
    let send = SendMessage {
        conversation_id: "c1".into(),
        text: "hello ü".into(),
        message_id: Some("hermes-final-abc".into()),
        metadata: Some(object(
            json!({"turnSemantics": "turn_complete", "turnComplete": true}),
        )),
        ..SendMessage::default()
    };
    client
        .send_message(&DurableRequest::message(&send).unwrap())
        .await
        .unwrap();
    client
        .set_typing(&Typing {
            conversation_id: "c1".into(),
            typing: true,
            status: Some(TypingStatus::Thinking),
        })
        .await
        .unwrap();
    client
        .streaming(&StreamingUpdate::Clear {
            conversation_id: "c1".into(),
        })
        .await
        .unwrap();
    client
        .publish_turn(&TurnUpdate {
            conversation_id: "c1".into(),
            state: TurnState::WaitingInput,
            queue_depth: 2,
            turn_id: Some("hermes-0123456789abcdef0123".into()),
            active_message_ids: None,
            capabilities: TurnCapabilities::for_state(TurnState::WaitingInput, false),
            opened_at: Some(10),
            turn_updated_at: 20,
        })
        .await
        .unwrap();
    client.publish_runtime_status().await.unwrap();
    client.consume_signal("c1").await.unwrap();
    client.accept_disposition("c 1", "m/1").await.unwrap();
    client.mark_read("c1").await.unwrap();
    client
        .consume_interaction(&ConsumeInteraction {
            kind: InteractionKind::Input,
            conversation_id: "c1".into(),
            id: "in-1".into(),
            cancel: false,
        })
        .await
        .unwrap();

    let requests = server.requests();
    let shapes: Vec<(String, String)> = requests
        .iter()
        .map(|r| (r.method.clone(), r.uri.clone()))
        .collect();
    let expected = [
        ("GET", "/agents/me"),
        ("GET", "/conversations"),
        ("POST", "/messages/send"),
        ("POST", "/typing"),
        ("POST", "/streaming"),
        ("POST", "/runtime/turn"),
        ("POST", "/runtime/status"),
        ("POST", "/runtime/signal/consume"),
        ("PATCH", "/conversations/c%201/messages/m%2F1/disposition"),
        ("POST", "/conversations/c1/read"),
        ("POST", "/runtime-interaction/consume"),
    ];
    assert_eq!(
        shapes,
        expected.map(|(m, p)| (m.to_owned(), p.to_owned())).to_vec()
    );
    for request in &requests {
        assert_api_headers(request);
    }
    assert!(requests[0].body.is_empty());
    assert_eq!(
        requests[2].json(),
        json!({"conversationId":"c1","text":"hello ü","messageId":"hermes-final-abc",
               "metadata":{"turnSemantics":"turn_complete","turnComplete":true}})
    );
    // Non-ASCII is sent as UTF-8, not escaped.
    assert!(std::str::from_utf8(&requests[2].body)
        .unwrap()
        .contains("ü"));
    assert_eq!(
        requests[3].json(),
        json!({"conversationId":"c1","typing":true,"status":"thinking"})
    );
    assert_eq!(
        requests[4].json(),
        json!({"conversationId":"c1","streaming":false})
    );
    assert_eq!(
        requests[5].json(),
        json!({"conversationId":"c1","state":"waiting_input","queueDepth":2,"turnId":"hermes-0123456789abcdef0123",
               "capabilities":{"supportsInterrupt":true,"supportsQueue":true,"supportsInterleave":false,
                               "supportsInputInterrupt":false,"supportsNonFinalPermanentMessages":false},
               "openedAt":10,"turnUpdatedAt":20})
    );
    assert_eq!(requests[6].json(), runtime_status_body());
    assert_eq!(requests[7].json(), json!({"conversationId":"c1"}));
    assert_eq!(
        requests[8].json(),
        json!({"inboundDisposition":"accepted_now"})
    );
    assert!(requests[9].body.is_empty());
    assert_eq!(
        requests[10].json(),
        json!({"interactionKind":"input","conversationId":"c1","inputId":"in-1"})
    );
}

#[tokio::test]
async fn responses_are_read_leniently() {
    let server = RestServer::start(|request, _| match request.uri.as_str() {
        "/agents/me" => Reply::Json(200, json!({"agentId":"a1","ownerId":"o1","outboundPolicy":"approval-required","displayName":"Bot"})),
        "/conversations" => Reply::Json(200, json!({"conversations":[{"id":"c1","type":"group","name":"G","memberIds":["a","b"]}]})),
        "/runtime/signal/consume" => Reply::Json(200, json!({"status":"signal","signal":"interrupt","updatedBy":"u1"})),
        "/runtime-interaction/request" => Reply::Json(200, json!({"messageId":"m9","cardId":"card-1","interactive":true,"expiresAt":123})),
        "/runtime-interaction/consume" => Reply::Json(200, json!({"status":"allow","respondedBy":"u1"})),
        "/media/upload" => Reply::Json(200, json!({"url":"https://api.example/files/a/b/c?token=t"})),
        _ => Reply::Raw(200, vec![], Vec::new()),
    })
    .await;
    let client = client_for(&server);
    let me = client.get_me().await.unwrap();
    assert_eq!(
        (me.agent_id.as_deref(), me.owner_id.as_deref()),
        (Some("a1"), Some("o1"))
    );
    assert_eq!(me.outbound_policy, OutboundPolicy::ApprovalRequired);
    let conversations = client.list_conversations().await.unwrap();
    assert_eq!(conversations[0].member_ids.len(), 2);
    let signal = client.consume_signal("c1").await.unwrap().unwrap();
    assert_eq!(
        (signal.signal, signal.updated_by.as_deref()),
        (SignalKind::Interrupt, Some("u1"))
    );
    let created = client
        .request_interaction(&InteractionRequest::Card(CardRequest {
            conversation_id: "c1".into(),
            card: json!({"schema":"canon.card.v1"}),
            card_id: None,
            expires_at: Some(99),
            response_user_id: None,
            runtime_id: None,
            turn_id: None,
            native: None,
        }))
        .await
        .unwrap();
    assert_eq!(
        (
            created.card_id.as_deref(),
            created.interactive,
            created.expires_at
        ),
        (Some("card-1"), Some(true), Some(123))
    );
    let result = client
        .consume_interaction(&ConsumeInteraction {
            kind: InteractionKind::Approval,
            conversation_id: "c1".into(),
            id: "hermes-1".into(),
            cancel: false,
        })
        .await
        .unwrap();
    assert_eq!(
        (result.status.as_str(), result.is_pending()),
        ("allow", false)
    );
    // Empty 200 body → `{}`.
    client.mark_read("c1").await.unwrap();
    let attachment = client
        .upload_media(&UploadMedia {
            conversation_id: "c1".into(),
            data: b"foobar".to_vec(),
            mime_type: "image/png".into(),
            file_name: Some("a.png".into()),
        })
        .await
        .unwrap();
    assert_eq!(
        Value::Object(attachment),
        json!({"kind":"image","url":"https://api.example/files/a/b/c?token=t","mimeType":"image/png","fileName":"a.png","sizeBytes":6})
    );
    let upload = server
        .requests()
        .into_iter()
        .find(|r| r.uri == "/media/upload")
        .unwrap();
    assert_eq!(
        upload.json(),
        json!({"conversationId":"c1","data":"Zm9vYmFy","mimeType":"image/png","fileName":"a.png"})
    );
    let request = server
        .requests()
        .into_iter()
        .find(|r| r.uri == "/runtime-interaction/request")
        .unwrap();
    assert_eq!(
        request.json(),
        json!({"interactionKind":"card","conversationId":"c1","card":{"schema":"canon.card.v1"},"expiresAt":99})
    );
}

#[tokio::test]
async fn oversize_upload_is_refused_before_sending() {
    let server = RestServer::start(ok).await;
    let client = client_for(&server);
    let err = client
        .upload_media(&UploadMedia {
            conversation_id: "c1".into(),
            data: vec![0; 10 * 1024 * 1024 + 1],
            mime_type: "application/octet-stream".into(),
            file_name: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Canon media upload limit is 10MB");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn http_errors_keep_status_code_message_and_report_retryability() {
    let server = RestServer::start(|request, _| match request.uri.as_str() {
        "/agents/me" => Reply::Json(401, json!({"error":"bad key","code":"UNAUTHENTICATED"})),
        "/conversations" => Reply::Raw(503, vec![("retry-after", "3".into())], b"busy".to_vec()),
        _ => Reply::Raw(
            302,
            vec![("location", "http://elsewhere/".into())],
            b"{\"moved\":true}".to_vec(),
        ),
    })
    .await;
    let client = client_for(&server);
    let err = client.get_me().await.unwrap_err();
    let failure = err.http().unwrap();
    assert_eq!(
        (
            failure.status,
            failure.code.as_deref(),
            failure.error_message()
        ),
        (401, Some("UNAUTHENTICATED"), "bad key")
    );
    assert!(!err.is_retryable());
    assert_eq!(
        err.to_string(),
        r#"Canon API returned 401: {"error":"bad key","code":"UNAUTHENTICATED"}"#
    );
    let err = client.list_conversations().await.unwrap_err();
    assert!(err.is_retryable());
    assert_eq!(
        err.http().unwrap().retry_after,
        Some(Duration::from_secs(3))
    );
    // A 3xx is not followed for API calls; its body is decoded like a success.
    client.mark_read("c1").await.unwrap();
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn transport_failures_map_to_their_kinds() {
    // Connect error: a port nobody listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = CanonClient::new(ClientConfig::new(dead.clone(), dead, ApiKey::new(KEY))).unwrap();
    let err = client.get_me().await.unwrap_err();
    assert_eq!(err.kind(), FailureKind::Connect);
    assert!(err.is_retryable());

    // Reset: the server reads the request and closes without answering.
    let server = RestServer::start(|_, _| Reply::Drop).await;
    let err = client_for(&server).get_me().await.unwrap_err();
    assert_eq!(err.kind(), FailureKind::Reset, "{err:?}");
    assert!(
        !err.is_retryable(),
        "a reset is reported non-retryable by is_retryable"
    );

    // Read timeout.
    let server = RestServer::start(|_, _| {
        Reply::Sleep(
            Duration::from_secs(5),
            Box::new(Reply::Json(200, json!({}))),
        )
    })
    .await;
    let mut config = ClientConfig::new(server.url(), server.url(), ApiKey::new(KEY));
    config.timeouts.read = Duration::from_millis(100);
    let err = CanonClient::new(config)
        .unwrap()
        .get_me()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), FailureKind::ReadTimeout);
    assert!(err.is_retryable());

    // Malformed success body.
    let server = RestServer::start(|_, _| Reply::Raw(200, vec![], b"{not json".to_vec())).await;
    let err = client_for(&server).get_me().await.unwrap_err();
    assert_eq!(err.kind(), FailureKind::Decode);
}

/// A body that drips one byte at a time, each well inside the read timeout, never trips the
/// per-chunk timeout; the whole body must still arrive within the read timeout once the head
/// is in, or a dripping proxy would hold the call (and a turn's close behind it) for as long
/// as it likes.
#[tokio::test]
async fn a_dripping_body_times_out_as_a_whole() {
    use tokio::io::AsyncWriteExt as _;
    let server = RawServer::start(|_, mut stream| {
        Box::pin(async move {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                        content-length: 100000\r\n\r\n{";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if stream.write_all(b" ").await.is_err() || stream.flush().await.is_err() {
                    return;
                }
            }
        })
    })
    .await;
    let mut config = ClientConfig::new(server.url(), server.url(), ApiKey::new(KEY));
    config.timeouts.read = Duration::from_millis(300);
    let err = CanonClient::new(config)
        .unwrap()
        .get_me()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), FailureKind::ReadTimeout, "{err:?}");
}

fn durable_send(message_id: Option<&str>) -> DurableRequest {
    DurableRequest::message(&SendMessage {
        conversation_id: "c1".into(),
        text: "answer".into(),
        message_id: message_id.map(str::to_owned),
        ..SendMessage::default()
    })
    .unwrap()
}

#[tokio::test]
async fn ambiguous_failure_is_replayed_with_identical_bytes() {
    // Attempt 1: the server "processes" then drops the connection.
    let server = RestServer::start(|_, index| match index {
        0 => Reply::Drop,
        _ => Reply::Json(200, json!({"messageId":"srv-1"})),
    })
    .await;
    let client = client_for(&server);
    let request = durable_send(Some("hermes-final-1"));
    let sent = client.send_message(&request).await.unwrap();
    assert_eq!(sent.message_id.as_deref(), Some("srv-1"));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body);
    assert_eq!(&requests[0].body[..], request.body());
}

#[tokio::test]
async fn exhausted_loop_then_later_replay_resends_the_same_bytes() {
    let server = RestServer::start(|_, index| match index {
        0..=2 => Reply::Json(500, json!({"error":"boom"})),
        _ => Reply::Json(200, json!({"id":"srv-2"})),
    })
    .await;
    let client = client_for(&server);
    let request = durable_send(Some("hermes-final-2"));
    let err = client.send_message(&request).await.unwrap_err();
    assert_eq!(err.status(), Some(500));
    assert!(err.is_retryable());
    assert!(err.may_have_landed(1));
    assert_eq!(server.requests().len(), 3, "three attempts");
    let sent = client.send_message(&request).await.unwrap();
    assert_eq!(sent.message_id.as_deref(), Some("srv-2"));
    let bodies: Vec<_> = server.requests().into_iter().map(|r| r.body).collect();
    assert!(bodies.iter().all(|b| b == &bodies[0]));
}

#[tokio::test]
async fn conflict_on_a_changed_payload_is_distinct_and_not_retried() {
    let server = RestServer::start(|_, _| {
        Reply::Json(409, json!({"error":"exists","code":"MESSAGE_ID_EXISTS"}))
    })
    .await;
    let client = client_for(&server);
    let err = client
        .send_message(&durable_send(Some("hermes-final-3")))
        .await
        .unwrap_err();
    match &err {
        TransportError::MessageIdConflict {
            message_id,
            failure,
        } => {
            assert_eq!(message_id, "hermes-final-3");
            assert_eq!(failure.code.as_deref(), Some("MESSAGE_ID_EXISTS"));
        }
        other => panic!("expected MessageIdConflict, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert!(err.may_have_landed(1));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn send_without_id_retries_only_provably_unprocessed_failures() {
    let server = RestServer::start(|_, _| Reply::Json(500, json!({}))).await;
    let err = client_for(&server)
        .send_message(&durable_send(None))
        .await
        .unwrap_err();
    assert!(
        err.is_retryable(),
        "500 without id: not retried, reported retryable"
    );
    assert_eq!(server.requests().len(), 1);

    let server = RestServer::start(|_, index| match index {
        0 => Reply::Json(503, json!({})),
        1 => Reply::Raw(429, vec![("retry-after", "0.05".into())], Vec::new()),
        _ => Reply::Json(200, json!({"messageId":"m"})),
    })
    .await;
    let started = std::time::Instant::now();
    client_for(&server)
        .send_message(&durable_send(None))
        .await
        .unwrap();
    assert_eq!(server.requests().len(), 3);
    assert!(
        started.elapsed() >= Duration::from_millis(50),
        "Retry-After honoured"
    );

    let server = RestServer::start(|_, _| Reply::Drop).await;
    let err = client_for(&server)
        .send_message(&durable_send(None))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), FailureKind::Reset);
    assert_eq!(
        server.requests().len(),
        1,
        "a reset without id is ambiguous: no retry"
    );
}

#[tokio::test]
async fn verbs_validate_their_envelope_and_use_the_durable_loop() {
    let server = RestServer::start(|request, index| {
        let verb = request.uri.rsplit('/').next().unwrap_or_default().to_owned();
        match (verb.as_str(), index) {
            ("send_to", 0) => Reply::Json(502, json!({})),
            ("send_to", _) => Reply::Json(200, json!({"wire":"canon.verb-wire.v1","verb":"send_to","result":{"encoding":"json","value":{"status":"messaged"}}})),
            _ => Reply::Json(200, json!({"wire":"canon.verb-wire.v1","verb":"other","result":{"encoding":"json","value":{}}})),
        }
    })
    .await;
    let client = client_for(&server);
    let envelope = object(json!({"conversationId":"c1","idempotencyKey":"hermes-final-9"}));
    let value = object(json!({"text":"hi"}));
    let request = DurableRequest::verb("send_to", envelope, value).unwrap();
    let result = client.send_durable(&request).await.unwrap();
    assert_eq!(result["status"], "messaged");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body);
    assert_eq!(
        requests[0].json(),
        json!({"wire":"canon.verb-wire.v1","verb":"send_to","envelope":{"conversationId":"c1","idempotencyKey":"hermes-final-9"},
               "body":{"encoding":"json","value":{"text":"hi"}}})
    );
    let err = client
        .execute_verb("no_reply", Map::new(), Map::new())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Canon verb response does not match the requested verb"
    );
    assert_eq!(
        server.requests().last().unwrap().uri,
        "/agent/verbs/no_reply"
    );
}

#[tokio::test]
async fn health_check_binds_both_services_to_the_environment() {
    fn health(
        env: &'static str,
        project: &'static str,
        status: u16,
    ) -> impl Fn(&Recorded, usize) -> Reply {
        move |_, _| {
            Reply::Raw(
                status,
                vec![("x-canon-environment-id", env.into())],
                serde_json::to_vec(&json!({"environmentId": env, "projectId": project})).unwrap(),
            )
        }
    }
    let good = RestServer::start(health("canon-dev-v1", "canonmail-dev", 503)).await;
    let client = client_for(&good);
    assert_eq!(
        client
            .verify_environment("canon-dev-v1", Some("canonmail-dev"))
            .await
            .unwrap(),
        "canonmail-dev"
    );
    assert_eq!(
        client
            .verify_environment("canon-dev-v1", None)
            .await
            .unwrap(),
        "canonmail-dev"
    );
    let requests = good.requests();
    assert_eq!(requests[0].uri, "/healthz/");
    assert_eq!(requests[1].uri, "/health");
    assert_eq!(requests[0].header("authorization"), None);
    assert_eq!(requests[0].header("accept"), Some("application/json"));
    let err = client
        .verify_environment("canon-prod-v1", Some("canonmail-prod"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Canon runtime endpoint {}/healthz/ does not match environment canon-prod-v1",
            good.url()
        )
    );
    let other_project = RestServer::start(health("canon-dev-v1", "someone-else", 200)).await;
    assert!(client_for(&other_project)
        .verify_environment("canon-dev-v1", Some("canonmail-dev"))
        .await
        .is_err());
}

#[tokio::test]
async fn registration_is_unauthenticated_and_sends_the_poll_token() {
    let server = RestServer::start(|request, _| match request.uri.as_str() {
        "/agents/register" => {
            Reply::Json(200, json!({"requestId":"req 1","pollToken":"pt-secret"}))
        }
        "/agents/status/req%201" => Reply::Json(
            200,
            json!({"status":"approved","apiKey":"new-key","agentId":"a9"}),
        ),
        _ => Reply::Raw(204, vec![], Vec::new()),
    })
    .await;
    let client = client_for(&server);
    let ticket = client
        .register(&Registration {
            name: "Bot".into(),
            description: "d".into(),
            owner_phone: "+15550000000".into(),
            developer_info: "Hermes gateway platform adapter".into(),
            client_type: "hermes".into(),
            local_registration_id: "hermes-00000000000000000000000000000000".into(),
            requested_agent_id: None,
        })
        .await
        .unwrap();
    let status = client.poll_registration(&ticket).await.unwrap();
    assert_eq!(status.status, "approved");
    assert_eq!(status.api_key.as_ref().map(ApiKey::expose), Some("new-key"));
    client.ack_registration(&ticket).await.unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(request.header("authorization"), None);
    }
    assert_eq!(requests[0].header("content-type"), Some("application/json"));
    assert_eq!(
        requests[0].json()["localRegistrationId"],
        "hermes-00000000000000000000000000000000"
    );
    assert_eq!(requests[1].header("x-canon-poll-token"), Some("pt-secret"));
    assert_eq!(
        (requests[2].method.as_str(), requests[2].uri.as_str()),
        ("POST", "/agents/status/req%201/ack")
    );
    assert_eq!(requests[2].header("x-canon-poll-token"), Some("pt-secret"));

    let missing = RestServer::start(|_, _| Reply::Json(200, json!({}))).await;
    let err = client_for(&missing)
        .register(&Registration {
            name: "Bot".into(),
            description: String::new(),
            owner_phone: String::new(),
            developer_info: String::new(),
            client_type: "hermes".into(),
            local_registration_id: "x".into(),
            requested_agent_id: None,
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Canon registration did not return a requestId"
    );
}

#[tokio::test]
async fn discover_agents_sends_its_query_and_checks_the_page() {
    let server = RestServer::start(|request, _| {
        if request.uri.contains("cursor=bad") {
            Reply::Json(200, json!({"agents":[{"principalId":"p1","shareable":"yes","owner":{"principalId":"o"}}],"nextCursor":null}))
        } else {
            Reply::Json(200, json!({"agents":[{"principalId":"p1","shareable":true,"owner":{"principalId":"o1"},"extra":1}],"nextCursor":"n2"}))
        }
    })
    .await;
    let client = client_for(&server);
    let page = client
        .discover_agents(&canon_transport::client::DiscoverAgents {
            query: Some("tax & law".into()),
            limit: 10,
            cursor: None,
        })
        .await
        .unwrap();
    assert_eq!(page["agents"][0]["extra"], 1, "server fields are kept");
    let err = client
        .discover_agents(&canon_transport::client::DiscoverAgents {
            query: Some(String::new()),
            limit: 3,
            cursor: Some("bad".into()),
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Canon returned a malformed agent directory result"
    );
    let uris: Vec<String> = server.requests().into_iter().map(|r| r.uri).collect();
    assert_eq!(
        uris,
        [
            "/agents/discover?query=tax%20%26%20law&limit=10",
            "/agents/discover?query=&limit=3&cursor=bad"
        ]
    );
}

fn consume_input() -> ConsumeInteraction {
    ConsumeInteraction {
        kind: InteractionKind::Input,
        conversation_id: "c1".into(),
        id: "in-1".into(),
        cancel: false,
    }
}

#[tokio::test]
async fn poll_engine_returns_the_first_non_pending_result() {
    use canon_transport::client::{PollErrors, PollOutcome};
    let server = RestServer::start(|_, index| match index {
        0 => Reply::Json(200, json!({"status":"pending"})),
        1 => Reply::Json(503, json!({})),
        _ => Reply::Json(
            200,
            json!({"status":"submitted","value":"yes","respondedBy":"u1"}),
        ),
    })
    .await;
    let client = client_for(&server);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let outcome = client
        .poll_interaction(
            &consume_input(),
            deadline,
            Duration::from_millis(5),
            PollErrors::AsPending,
        )
        .await
        .unwrap();
    let PollOutcome::Answered(result) = outcome else {
        panic!("expected an answer, got {outcome:?}");
    };
    assert_eq!(
        (result.status.as_str(), result.responded_by.as_deref()),
        ("submitted", Some("u1"))
    );
    assert_eq!(server.requests().len(), 3);

    let strict = RestServer::start(|_, _| Reply::Json(400, json!({}))).await;
    let err = client_for(&strict)
        .poll_interaction(
            &consume_input(),
            deadline,
            Duration::from_millis(5),
            PollErrors::RetryableAsPending,
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400));
}

#[tokio::test]
async fn poll_engine_cancels_once_after_the_deadline() {
    use canon_transport::client::{PollErrors, PollOutcome};
    let server = RestServer::start(|_, _| Reply::Json(200, json!({"status":"pending"}))).await;
    let client = client_for(&server);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(60);
    let outcome = client
        .poll_interaction(
            &consume_input(),
            deadline,
            Duration::from_millis(20),
            PollErrors::Abort,
        )
        .await
        .unwrap();
    assert_eq!(outcome, PollOutcome::TimedOut);
    let bodies: Vec<Value> = server.requests().iter().map(Recorded::json).collect();
    let (last, probes) = bodies.split_last().unwrap();
    assert_eq!(
        last,
        &json!({"interactionKind":"input","conversationId":"c1","inputId":"in-1","cancel":true})
    );
    assert!(
        !probes.is_empty() && probes.iter().all(|b| b.get("cancel").is_none()),
        "{bodies:?}"
    );
}

/// A resolver that never answers: name resolution runs into the connect timeout.
struct SilentResolver;

impl canon_transport::net::Resolver for SilentResolver {
    fn resolve(
        &self,
        _host: String,
        _port: u16,
    ) -> canon_transport::net::BoxFuture<std::io::Result<Vec<std::net::SocketAddr>>> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn connect_timeout_is_its_own_retryable_kind() {
    let mut config = ClientConfig::new(
        "https://canon.invalid",
        "https://canon.invalid",
        ApiKey::new(KEY),
    );
    config.resolver = std::sync::Arc::new(SilentResolver);
    config.timeouts.connect = Duration::from_millis(50);
    let err = CanonClient::new(config)
        .unwrap()
        .get_me()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), FailureKind::ConnectTimeout, "{err:?}");
    assert!(err.is_retryable());
    assert!(!err.may_have_landed(1), "nothing was sent");
}

#[tokio::test]
async fn tls_handshake_failure_is_a_connect_error() {
    // A plain-HTTP server behind an https:// URL: rustls fails the handshake
    // before any request byte is sent.
    let server = RestServer::start(ok).await;
    let url = format!("https://{}", server.addr);
    let err = CanonClient::new(ClientConfig::new(url.clone(), url, ApiKey::new(KEY)))
        .unwrap()
        .get_me()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), FailureKind::Connect, "{err:?}");
    assert!(server.requests().is_empty());
}
