//! REST endpoints of canon-wire.md §11.3: happy paths and documented 4xx.

use canon_sim::control::Injection;
use canon_sim::interactions::Response;
use canon_sim::{ConversationSpec, PrincipalSpec};
use serde_json::{json, Value};

use super::support::{call, call_as, control, raw, sim, sim_with};

#[tokio::test]
async fn health_endpoints_report_the_environment() {
    let sim = sim().await;
    for path in ["/healthz/", "/health"] {
        let r = raw(sim.addr(), "GET", path, &[], None).await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-canon-environment-id"), Some("canon-dev-v1"));
        assert_eq!(
            r.json(),
            json!({"environmentId": "canon-dev-v1", "projectId": "canonmail-dev", "status": "ok"})
        );
    }
}

#[tokio::test]
async fn registration_is_idempotent_token_guarded_and_issues_a_working_key() {
    let sim = sim().await;
    let body = json!({"name": "Bot", "localRegistrationId": "hermes-0123", "clientType": "hermes"})
        .to_string();
    let first = raw(
        sim.addr(),
        "POST",
        "/agents/register",
        &[],
        Some(body.as_bytes()),
    )
    .await
    .unwrap()
    .json();
    let second = raw(
        sim.addr(),
        "POST",
        "/agents/register",
        &[],
        Some(body.as_bytes()),
    )
    .await
    .unwrap()
    .json();
    assert_eq!(first["requestId"], second["requestId"]);
    let id = first["requestId"].as_str().unwrap().to_owned();
    let token = first["pollToken"].as_str().unwrap().to_owned();
    let path = format!("/agents/status/{id}");
    let no_token = raw(sim.addr(), "GET", &path, &[], None).await.unwrap();
    assert_eq!(no_token.status, 401);
    let pending = raw(
        sim.addr(),
        "GET",
        &path,
        &[("x-canon-poll-token", &token)],
        None,
    )
    .await
    .unwrap();
    assert_eq!(pending.json()["status"], "pending");
    assert_eq!(
        control(&sim, "POST", &format!("/registrations/{id}/approve"), None)
            .await
            .status,
        200
    );
    let approved = raw(
        sim.addr(),
        "GET",
        &path,
        &[("x-canon-poll-token", &token)],
        None,
    )
    .await
    .unwrap()
    .json();
    assert_eq!(approved["status"], "approved");
    assert_eq!(approved["agentName"], "Bot");
    let key = approved["apiKey"].as_str().unwrap().to_owned();
    let ack = raw(
        sim.addr(),
        "POST",
        &format!("{path}/ack"),
        &[("x-canon-poll-token", &token)],
        None,
    )
    .await
    .unwrap();
    assert_eq!(ack.status, 200);
    let me = call_as(&sim, &key, "GET", "/agents/me", None).await;
    assert_eq!(me.json()["agentId"], approved["agentId"]);
    let body2 = json!({"name": "Other", "localRegistrationId": "hermes-9"}).to_string();
    let other = raw(
        sim.addr(),
        "POST",
        "/agents/register",
        &[],
        Some(body2.as_bytes()),
    )
    .await
    .unwrap()
    .json();
    let oid = other["requestId"].as_str().unwrap();
    assert!(sim.reject_registration(oid));
}

#[tokio::test]
async fn authentication_membership_and_existence_are_enforced() {
    let sim = sim().await;
    let r = call_as(&sim, "wrong-key", "GET", "/agents/me", None).await;
    assert_eq!(
        (r.status, r.code().as_deref()),
        (401, Some("UNAUTHENTICATED"))
    );
    sim.create_principal(PrincipalSpec {
        id: Some("h-2".into()),
        kind: "human".into(),
        ..Default::default()
    });
    sim.create_conversation(ConversationSpec {
        id: Some("c-other".into()),
        kind: "direct".into(),
        member_ids: vec!["h-2".into()],
        ..Default::default()
    });
    let r = call(&sim, "POST", "/conversations/c-other/read", None).await;
    assert_eq!(r.status, 403);
    let r = call(&sim, "POST", "/conversations/c-nope/read", None).await;
    assert_eq!(r.status, 404);
    let r = call(&sim, "POST", "/conversations/c-direct/read", None).await;
    assert_eq!(r.status, 200);
    assert!(sim.read_state(|s| s.conversations["c-direct"]
        .last_read
        .contains_key("a-hermes")));
}

#[tokio::test]
async fn me_and_conversations_have_the_documented_shapes() {
    let sim = sim().await;
    let me = call(&sim, "GET", "/agents/me", None).await.json();
    assert_eq!(
        me,
        json!({"agentId": "a-hermes", "id": "a-hermes", "ownerId": "h-owner", "displayName": "Hermes", "outboundPolicy": "open"})
    );
    let list = call(&sim, "GET", "/conversations", None).await.json();
    assert_eq!(
        list["conversations"][0]["memberIds"],
        json!(["h-owner", "a-hermes"])
    );
    sim.set_switches(|s| s.conversations_bare_array = true);
    let bare = call(&sim, "GET", "/conversations", None).await.json();
    assert_eq!(bare[0]["id"], "c-direct");
}

#[tokio::test]
async fn send_replays_identical_payloads_and_refuses_changed_ones() {
    let sim = sim().await;
    let body = json!({"conversationId": "c-direct", "text": "hello", "messageId": "hermes-final-1", "metadata": {"turnSemantics": "turn_complete", "turnId": "t1"}});
    let first = call(&sim, "POST", "/messages/send", Some(body.clone())).await;
    assert_eq!(first.status, 200);
    // Key order does not matter for the fingerprint.
    let reordered = json!({"metadata": {"turnId": "t1", "turnSemantics": "turn_complete"}, "messageId": "hermes-final-1", "text": "hello", "conversationId": "c-direct"});
    let second = call(&sim, "POST", "/messages/send", Some(reordered)).await;
    assert_eq!(second.json(), first.json());
    assert_eq!(sim.read_state(|s| s.messages.len()), 1);
    let mut changed = body;
    changed["text"] = json!("different");
    let conflict = call(&sim, "POST", "/messages/send", Some(changed)).await;
    assert_eq!(
        (conflict.status, conflict.code().as_deref()),
        (409, Some("MESSAGE_ID_EXISTS"))
    );
    assert_eq!(sim.read_state(|s| s.messages.len()), 1);
}

#[tokio::test]
async fn send_enforces_the_message_limits() {
    let sim = sim().await;
    let cases = [
        (
            json!({"conversationId": "c-direct", "text": "x".repeat(4097)}),
            "TEXT_TOO_LONG",
        ),
        (
            json!({"conversationId": "c-direct", "text": "x", "metadata": {"k": "y".repeat(4100)}}),
            "METADATA_TOO_LARGE",
        ),
        (
            json!({"conversationId": "c-direct", "text": "x", "metadata": {"type": "approval_reply"}}),
            "METADATA_TYPE_RESERVED",
        ),
        (
            json!({"conversationId": "c-direct", "text": "x", "messageId": "__x__"}),
            "INVALID_MESSAGE_ID",
        ),
        (
            json!({"conversationId": "c-direct", "text": "x", "mentions": ["nobody"]}),
            "INVALID_MENTIONS",
        ),
        (
            json!({"conversationId": "c-direct", "text": "x", "attachments": [{"kind": "image", "url": "https://evil.example/x.png"}]}),
            "ATTACHMENT_URL_NOT_ALLOWED",
        ),
        (
            json!({"conversationId": "c-direct", "text": "x", "attachments": vec![json!({}); 11]}),
            "TOO_MANY_ATTACHMENTS",
        ),
        (json!({"conversationId": "c-direct"}), "INVALID_TEXT"),
        (json!({"text": "x"}), "INVALID_REQUEST"),
    ];
    for (body, code) in cases {
        let r = call(&sim, "POST", "/messages/send", Some(body.clone())).await;
        assert_eq!((r.status, r.code()), (400, Some(code.to_owned())), "{body}");
    }
    // 4096 bytes of multi-byte text is exactly at the limit.
    let ok = call(
        &sim,
        "POST",
        "/messages/send",
        Some(json!({"conversationId": "c-direct", "text": "ש".repeat(2048)})),
    )
    .await;
    assert_eq!(ok.status, 200);
    sim.set_switches(|s| s.lenient_messages = true);
    let lenient = call(
        &sim,
        "POST",
        "/messages/send",
        Some(json!({"conversationId": "c-direct", "text": "x".repeat(5000)})),
    )
    .await;
    assert_eq!(lenient.status, 200);
}

#[tokio::test]
async fn conversation_rate_limit_answers_429_with_retry_after_until_the_window_passes() {
    let sim = sim().await;
    for i in 0..120 {
        let r = call(
            &sim,
            "POST",
            "/messages/send",
            Some(json!({"conversationId": "c-direct", "text": format!("m{i}")})),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let limited = call(
        &sim,
        "POST",
        "/messages/send",
        Some(json!({"conversationId": "c-direct", "text": "one more"})),
    )
    .await;
    assert_eq!(limited.status, 429);
    assert_eq!(limited.json()["retryAfter"], 300);
    assert_eq!(limited.header("retry-after"), Some("300"));
    sim.advance_clock(300_000);
    let again = call(
        &sim,
        "POST",
        "/messages/send",
        Some(json!({"conversationId": "c-direct", "text": "later"})),
    )
    .await;
    assert_eq!(again.status, 200);
}

fn authority_for(sim: &canon_sim::SimHandle, message_id: &str) -> Value {
    let token = sim.read_state(|s| {
        s.authorities
            .iter()
            .find(|(_, a)| a.source_message_id == message_id)
            .map(|(t, _)| t.clone())
    });
    json!({"schema": "canon.agent-reply-authority.v1", "sourceMessageId": message_id, "token": token.unwrap(), "expiresAt": "x"})
}

#[tokio::test]
async fn reply_authority_binds_to_the_first_turn_that_uses_it() {
    let sim = sim().await;
    let m = sim
        .inject_message(&Injection {
            text: Some("question".into()),
            ..Default::default()
        })
        .unwrap();
    let mid = m["id"].as_str().unwrap();
    let authority = authority_for(&sim, mid);
    let part = |text: &str, turn: &str| json!({"conversationId": "c-direct", "text": text, "replyAuthority": authority, "metadata": {"turnId": turn}});
    assert_eq!(
        call(&sim, "POST", "/messages/send", Some(part("p1", "T1")))
            .await
            .status,
        200
    );
    assert_eq!(
        call(&sim, "POST", "/messages/send", Some(part("p2", "T1")))
            .await
            .status,
        200
    );
    let other = call(&sim, "POST", "/messages/send", Some(part("x", "T2"))).await;
    assert_eq!(
        (other.status, other.code().as_deref()),
        (403, Some("REPLY_AUTHORITY_INVALID"))
    );
    let mut forged = authority.clone();
    forged["token"] = json!("t".repeat(43));
    let r = call(
        &sim,
        "POST",
        "/messages/send",
        Some(json!({"conversationId": "c-direct", "text": "x", "replyAuthority": forged})),
    )
    .await;
    assert_eq!(r.status, 403);
    sim.advance_clock(11 * 60 * 1000);
    let expired = call(&sim, "POST", "/messages/send", Some(part("late", "T1"))).await;
    assert_eq!(expired.status, 403);
}

#[tokio::test]
async fn uploads_are_served_only_with_their_token_and_usable_as_attachments() {
    let sim = sim().await;
    let up = call(&sim, "POST", "/media/upload", Some(json!({"conversationId": "c-direct", "data": "aGVsbG8=", "mimeType": "image/png", "fileName": "pic.png"}))).await;
    assert_eq!(up.status, 200);
    let attachment = up.json()["attachment"].clone();
    assert_eq!(attachment["kind"], "image");
    assert_eq!(attachment["sizeBytes"], 5);
    let url = attachment["url"].as_str().unwrap().to_owned();
    let path = url.trim_start_matches(&sim.base_url()).to_owned();
    let file = raw(sim.addr(), "GET", &path, &[], None).await.unwrap();
    assert_eq!(file.status, 200);
    assert_eq!(file.body, b"hello");
    assert_eq!(file.header("content-type"), Some("image/png"));
    assert_eq!(
        file.header("cache-control"),
        Some("private, max-age=0, must-revalidate")
    );
    assert!(file
        .header("content-disposition")
        .unwrap()
        .contains("pic.png"));
    let bad_token = path.split("?token=").next().unwrap().to_owned() + "?token=nope";
    assert_eq!(
        raw(sim.addr(), "GET", &bad_token, &[], None)
            .await
            .unwrap()
            .status,
        403
    );
    assert_eq!(
        raw(sim.addr(), "GET", "/files/a/b/c?token=x", &[], None)
            .await
            .unwrap()
            .status,
        404
    );
    let sent = call(&sim, "POST", "/messages/send", Some(json!({"conversationId": "c-direct", "text": "", "contentType": "image", "attachments": [attachment]}))).await;
    assert_eq!(sent.status, 200);
    let bad = call(
        &sim,
        "POST",
        "/media/upload",
        Some(json!({"conversationId": "c-direct", "data": "not base64!", "mimeType": "image/png"})),
    )
    .await;
    assert_eq!(
        (bad.status, bad.code().as_deref()),
        (400, Some("INVALID_BASE64"))
    );
    assert!(sim.read_state(|s| s.media_auth_seen.is_empty()));
    sim.set_switches(|s| s.upload_legacy = true);
    let legacy = call(
        &sim,
        "POST",
        "/media/upload",
        Some(json!({"conversationId": "c-direct", "data": "aGk=", "mimeType": "text/plain"})),
    )
    .await;
    assert!(legacy.json().get("attachment").is_none());
    assert!(legacy.json()["url"].is_string());
}

#[tokio::test]
async fn uploads_over_ten_mebibytes_get_413() {
    let sim = sim().await;
    let data = "A".repeat((10 * 1024 * 1024 + 3) / 3 * 4);
    let r = call(&sim, "POST", "/media/upload", Some(json!({"conversationId": "c-direct", "data": data, "mimeType": "application/octet-stream"}))).await;
    assert_eq!(r.status, 413);
}

#[tokio::test]
async fn typing_is_validated_and_stored() {
    let sim = sim().await;
    let ok = call(
        &sim,
        "POST",
        "/typing",
        Some(json!({"conversationId": "c-direct", "typing": true, "status": "thinking"})),
    )
    .await;
    assert_eq!(ok.status, 200);
    for bad in [
        json!({"conversationId": "c-direct", "typing": "yes"}),
        json!({"conversationId": "c-direct", "typing": true, "status": "busy"}),
    ] {
        assert_eq!(call(&sim, "POST", "/typing", Some(bad)).await.status, 400);
    }
    assert_eq!(sim.read_state(|s| s.typing_history.len()), 1);
}

#[tokio::test]
async fn streaming_merges_and_clear_runs_the_salvage_rule() {
    let sim = sim().await;
    let set = |body: Value| call(&sim, "POST", "/streaming", Some(body));
    set(json!({"conversationId": "c-direct", "status": "streaming", "text": "partial", "messageId": "T1", "turnId": "T1"})).await;
    set(json!({"conversationId": "c-direct", "status": "streaming", "blocks": [{"id": "tool:1", "kind": "tool"}], "messageId": "T1", "turnId": "T1"})).await;
    let node = sim.read_state(|s| s.streaming["c-direct"].fields.clone());
    assert_eq!(node["text"], "partial");
    assert_eq!(node["blocks"].as_array().unwrap().len(), 1);
    let clear = call(
        &sim,
        "POST",
        "/streaming",
        Some(json!({"conversationId": "c-direct", "streaming": false})),
    )
    .await;
    assert_eq!(clear.json()["salvage"]["decision"], "salvaged");
    let salvaged = sim.read_state(|s| s.messages.back().unwrap().message.clone());
    assert_eq!(salvaged["text"], "partial");
    assert_eq!(salvaged["metadata"]["turnSemantics"], "progress");
    assert_eq!(salvaged["metadata"]["turnTrail"][0]["id"], "tool:1");
    // Blank then clear: nothing salvaged.
    set(json!({"conversationId": "c-direct", "status": "thinking", "text": "", "messageId": "T2", "turnId": "T2", "blocks": []})).await;
    let clear = call(
        &sim,
        "POST",
        "/streaming",
        Some(json!({"conversationId": "c-direct", "streaming": false})),
    )
    .await;
    assert_eq!(
        clear.json()["salvage"]["decision"],
        "empty_streaming_content"
    );
    // A durable turn_complete for the node's turn suppresses salvage.
    set(json!({"conversationId": "c-direct", "status": "streaming", "text": "answer", "turnId": "T3", "messageId": "T3"})).await;
    call(&sim, "POST", "/messages/send", Some(json!({"conversationId": "c-direct", "text": "answer", "metadata": {"turnSemantics": "turn_complete", "turnId": "T3"}}))).await;
    let clear = call(
        &sim,
        "POST",
        "/streaming",
        Some(json!({"conversationId": "c-direct", "streaming": false})),
    )
    .await;
    assert_eq!(clear.json()["salvage"]["decision"], "turn_complete_exists");
    let bad = set(json!({"conversationId": "c-direct", "status": "bogus"})).await;
    assert_eq!(bad.status, 400);
    let many: Vec<Value> = (0..40).map(|i| json!({"id": format!("b{i}")})).collect();
    set(json!({"conversationId": "c-direct", "status": "streaming", "blocks": many})).await;
    assert_eq!(
        sim.read_state(|s| s.streaming["c-direct"].fields["blocks"]
            .as_array()
            .unwrap()
            .len()),
        30
    );
}

#[tokio::test]
async fn open_turns_stamp_queued_and_dispositions_update_messages() {
    let sim = sim().await;
    let now = sim.now_ms();
    let turn = json!({"conversationId": "c-direct", "state": "thinking", "turnId": "T1", "queueDepth": 0, "capabilities": {}, "openedAt": now, "turnUpdatedAt": now});
    assert_eq!(
        call(&sim, "POST", "/runtime/turn", Some(turn)).await.status,
        200
    );
    let m = sim
        .inject_message(&Injection {
            text: Some("follow-up".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(m["metadata"]["inboundDisposition"], "queued");
    let interrupt = sim
        .inject_message(&Injection {
            text: Some("stop!".into()),
            metadata: Some(json!({"deliveryIntent": "interrupt"})),
            ..Default::default()
        })
        .unwrap();
    assert!(interrupt["metadata"].get("inboundDisposition").is_none());
    let mid = m["id"].as_str().unwrap();
    let path = format!("/conversations/c-direct/messages/{mid}/disposition");
    let r = call(
        &sim,
        "PATCH",
        &path,
        Some(json!({"inboundDisposition": "accepted_now"})),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        call(
            &sim,
            "PATCH",
            &path,
            Some(json!({"inboundDisposition": "accepted_now"}))
        )
        .await
        .status,
        200
    );
    let stored = sim.read_state(|s| s.find_message("c-direct", mid).unwrap().message.clone());
    assert_eq!(stored["metadata"]["inboundDisposition"], "accepted_now");
    assert_eq!(
        call(
            &sim,
            "PATCH",
            &path,
            Some(json!({"inboundDisposition": "maybe"}))
        )
        .await
        .status,
        400
    );
    assert_eq!(
        call(
            &sim,
            "PATCH",
            "/conversations/c-direct/messages/m-x/disposition",
            Some(json!({"inboundDisposition": "accepted_now"}))
        )
        .await
        .status,
        404
    );
    // A stale open state no longer stamps.
    sim.advance_clock(31 * 60 * 1000);
    let later = sim
        .inject_message(&Injection {
            text: Some("later".into()),
            ..Default::default()
        })
        .unwrap();
    assert!(later.get("metadata").is_none());
    let bad = call(
        &sim,
        "POST",
        "/runtime/turn",
        Some(json!({"conversationId": "c-direct", "state": "sleeping", "queueDepth": 0})),
    )
    .await;
    assert_eq!(bad.status, 400);
    let bad = call(
        &sim,
        "POST",
        "/runtime/turn",
        Some(json!({"conversationId": "c-direct", "state": "completed", "queueDepth": -1})),
    )
    .await;
    assert_eq!(bad.status, 400);
}

#[tokio::test]
async fn runtime_status_keeps_raw_body_and_public_projection() {
    let sim = sim().await;
    let body = json!({"runtime": "hermes", "hostMode": true, "runtimeDescriptor": {"coreControls": [], "supportsInterrupt": true, "streamingTextMode": "delta", "commands": [{"id": "stop", "label": "Stop"}]}});
    assert_eq!(
        call(&sim, "POST", "/runtime/status", Some(body.clone()))
            .await
            .status,
        200
    );
    let stored = sim.read_state(|s| s.runtime_status["a-hermes"].clone());
    assert_eq!(stored["raw"], body);
    assert!(stored["projection"].get("coreControls").is_none());
    assert_eq!(stored["projection"]["commands"][0]["id"], "stop");
}

#[tokio::test]
async fn signals_are_consumed_once_in_order() {
    let sim = sim().await;
    for s in ["interrupt", "new_session"] {
        control(
            &sim,
            "POST",
            "/signals",
            Some(json!({"conversationId": "c-direct", "signal": s, "updatedBy": "h-owner"})),
        )
        .await;
    }
    let body = Some(json!({"conversationId": "c-direct"}));
    let first = call(&sim, "POST", "/runtime/signal/consume", body.clone())
        .await
        .json();
    assert_eq!(
        (
            first["status"].as_str(),
            first["signal"].as_str(),
            first["updatedBy"].as_str()
        ),
        (Some("signal"), Some("interrupt"), Some("h-owner"))
    );
    assert!(first["signalId"].is_string());
    assert_eq!(
        call(&sim, "POST", "/runtime/signal/consume", body.clone())
            .await
            .json()["signal"],
        "new_session"
    );
    assert_eq!(
        call(&sim, "POST", "/runtime/signal/consume", body)
            .await
            .json(),
        json!({"status": "none"})
    );
    let bad = control(
        &sim,
        "POST",
        "/signals",
        Some(json!({"conversationId": "c-direct", "signal": "explode"})),
    )
    .await;
    assert_eq!(bad.status, 400);
}

fn input_request(sim: &canon_sim::SimHandle, id: &str, extra: Value) -> Value {
    let mut body = json!({"interactionKind": "input", "conversationId": "c-direct", "inputId": id, "kind": "clarify", "expiresAt": sim.now_ms() + 60_000, "title": "Clarification needed", "prompt": "Which?"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    body
}

#[tokio::test]
async fn input_interactions_validate_answer_and_are_single_use() {
    let sim = sim().await;
    let created = call(
        &sim,
        "POST",
        "/runtime-interaction/request",
        Some(input_request(&sim, "in-1", json!({}))),
    )
    .await;
    assert_eq!(created.status, 200);
    let c = created.json();
    assert_eq!(
        (
            c["status"].as_str(),
            c["inputId"].as_str(),
            c["responseUserId"].as_str()
        ),
        (Some("accepted"), Some("in-1"), Some("h-owner"))
    );
    assert!(c["messageId"].is_string());
    let again = call(
        &sim,
        "POST",
        "/runtime-interaction/request",
        Some(input_request(&sim, "in-1", json!({}))),
    )
    .await;
    assert_eq!(
        (again.status, again.code().as_deref()),
        (409, Some("RUNTIME_REQUEST_EXISTS"))
    );
    let consume =
        json!({"interactionKind": "input", "conversationId": "c-direct", "inputId": "in-1"});
    assert_eq!(
        call(
            &sim,
            "POST",
            "/runtime-interaction/consume",
            Some(consume.clone())
        )
        .await
        .json()["status"],
        "pending"
    );
    sim.respond_interaction(&Response {
        conversation_id: "c-direct".into(),
        kind: "input".into(),
        id: "in-1".into(),
        value: Some("blue".into()),
        ..Default::default()
    })
    .unwrap();
    let result = call(
        &sim,
        "POST",
        "/runtime-interaction/consume",
        Some(consume.clone()),
    )
    .await
    .json();
    assert_eq!(
        result,
        json!({"status": "submitted", "value": "blue", "respondedBy": "h-owner"})
    );
    let gone = call(
        &sim,
        "POST",
        "/runtime-interaction/consume",
        Some(consume.clone()),
    )
    .await;
    assert_eq!(
        (gone.status, gone.code().as_deref()),
        (404, Some("RUNTIME_INTERACTION_NOT_FOUND"))
    );
    sim.set_switches(|s| s.consume_replay = true);
    assert_eq!(
        call(&sim, "POST", "/runtime-interaction/consume", Some(consume))
            .await
            .json()["value"],
        "blue"
    );
    let cases = [
        (
            input_request(&sim, "in-2", json!({"expiresAt": sim.now_ms() + 500})),
            "EXPIRES_AT_OUT_OF_RANGE",
        ),
        (
            input_request(
                &sim,
                "in-3",
                json!({"expiresAt": sim.now_ms() + 31 * 60_000}),
            ),
            "EXPIRES_AT_OUT_OF_RANGE",
        ),
        (input_request(&sim, "bad id", json!({})), "INVALID_ID"),
        (
            input_request(&sim, "in-4", json!({"title": "t".repeat(161)})),
            "FIELD_TOO_LONG",
        ),
        (
            input_request(&sim, "in-5", json!({"responseUserId": "a-hermes"})),
            "INVALID_RESPONDER",
        ),
        (
            input_request(
                &sim,
                "in-6",
                json!({"choices": vec![json!({"label": "a", "value": "a"}); 13]}),
            ),
            "INVALID_CHOICES",
        ),
        (
            input_request(&sim, "in-7", json!({"kind": "other"})),
            "INVALID_INPUT_KIND",
        ),
    ];
    for (body, code) in cases {
        let r = call(
            &sim,
            "POST",
            "/runtime-interaction/request",
            Some(body.clone()),
        )
        .await;
        assert_eq!((r.status, r.code()), (400, Some(code.to_owned())), "{body}");
    }
}

#[tokio::test]
async fn inputs_cancel_and_time_out_on_the_sim_clock() {
    let sim = sim().await;
    call(
        &sim,
        "POST",
        "/runtime-interaction/request",
        Some(input_request(&sim, "in-c", json!({}))),
    )
    .await;
    call(
        &sim,
        "POST",
        "/runtime-interaction/request",
        Some(input_request(&sim, "in-t", json!({}))),
    )
    .await;
    let cancel = json!({"interactionKind": "input", "conversationId": "c-direct", "inputId": "in-c", "cancel": true});
    assert_eq!(
        call(
            &sim,
            "POST",
            "/runtime-interaction/consume",
            Some(cancel.clone())
        )
        .await
        .json()["status"],
        "cancelled"
    );
    assert_eq!(
        call(&sim, "POST", "/runtime-interaction/consume", Some(cancel))
            .await
            .json()["status"],
        "cancelled"
    );
    sim.advance_clock(61_000);
    let t = json!({"interactionKind": "input", "conversationId": "c-direct", "inputId": "in-t"});
    assert_eq!(
        call(&sim, "POST", "/runtime-interaction/consume", Some(t))
            .await
            .json(),
        json!({"status": "timeout"})
    );
}

fn approval(sim: &canon_sim::SimHandle, id: &str, ms: u64, extra: Value) -> Value {
    let mut body = json!({"interactionKind": "approval", "conversationId": "c-direct", "approvalId": id, "toolName": "Command", "toolSummary": "rm -rf /tmp/x", "expiresAt": sim.now_ms() + ms, "category": "command", "risk": "high", "riskLevel": "destructive", "allowSessionRule": true});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    body
}

#[tokio::test]
async fn approval_tombstones_replay_for_72_hours_to_the_same_agent_only() {
    let sim = sim().await;
    let r = call(
        &sim,
        "POST",
        "/runtime-interaction/request",
        Some(approval(
            &sim,
            "hermes-aaaaaaaaaaaaaaaaaaaa",
            3_600_000,
            json!({}),
        )),
    )
    .await
    .json();
    assert_eq!(
        r["allowSessionRule"], true,
        "owner responder may get session rules"
    );
    sim.respond_interaction(&Response {
        conversation_id: "c-direct".into(),
        kind: "approval".into(),
        id: "hermes-aaaaaaaaaaaaaaaaaaaa".into(),
        decision: Some("allow".into()),
        session_rule: Some(json!({"type": "approve-all"})),
        ..Default::default()
    })
    .unwrap();
    let consume = json!({"interactionKind": "approval", "conversationId": "c-direct", "approvalId": "hermes-aaaaaaaaaaaaaaaaaaaa"});
    let first = call(
        &sim,
        "POST",
        "/runtime-interaction/consume",
        Some(consume.clone()),
    )
    .await
    .json();
    assert_eq!(
        (first["status"].as_str(), first["respondedBy"].as_str()),
        (Some("allow"), Some("h-owner"))
    );
    assert_eq!(first["sessionRule"]["type"], "approve-all");
    sim.advance_clock(71 * 3_600_000);
    let replay = call(
        &sim,
        "POST",
        "/runtime-interaction/consume",
        Some(consume.clone()),
    )
    .await
    .json();
    assert_eq!(replay, json!({"status": "allow", "respondedBy": "h-owner"}));
    // Another agent in the same conversation gets 404.
    let other = sim.create_principal(PrincipalSpec {
        id: Some("a-2".into()),
        kind: "ai_agent".into(),
        owner_id: Some("h-owner".into()),
        ..Default::default()
    });
    sim.with_state(|s| {
        s.conversations
            .get_mut("c-direct")
            .unwrap()
            .member_ids
            .push(other.clone())
    });
    let key = sim.key_of(&other).unwrap();
    let r = call_as(
        &sim,
        &key,
        "POST",
        "/runtime-interaction/consume",
        Some(consume.clone()),
    )
    .await;
    assert_eq!(
        (r.status, r.code().as_deref()),
        (404, Some("RUNTIME_APPROVAL_NOT_FOUND"))
    );
    sim.advance_clock(2 * 3_600_000);
    assert_eq!(
        call(&sim, "POST", "/runtime-interaction/consume", Some(consume))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn approval_limits_ceilings_and_cap_modes() {
    let sim = sim().await;
    let too_long = call(
        &sim,
        "POST",
        "/runtime-interaction/request",
        Some(approval(&sim, "ap-1", 73 * 3_600_000, json!({}))),
    )
    .await;
    assert_eq!(too_long.code().as_deref(), Some("EXPIRES_AT_OUT_OF_RANGE"));
    let details = json!({"details": [{"label": "Command", "value": "x".repeat(501)}]});
    assert_eq!(
        call(
            &sim,
            "POST",
            "/runtime-interaction/request",
            Some(approval(&sim, "ap-2", 60_000, details.clone()))
        )
        .await
        .status,
        400
    );
    sim.set_switches(|s| s.lenient_details = true);
    assert_eq!(
        call(
            &sim,
            "POST",
            "/runtime-interaction/request",
            Some(approval(&sim, "ap-3", 60_000, details))
        )
        .await
        .status,
        200
    );
    sim.set_switches(|s| s.approval_cap_mode = canon_sim::config::ApprovalCapMode::Legacy);
    let legacy = call(
        &sim,
        "POST",
        "/runtime-interaction/request",
        Some(approval(&sim, "ap-4", 3_600_000, json!({}))),
    )
    .await;
    assert_eq!(legacy.status, 400);
    assert_eq!(
        call(
            &sim,
            "POST",
            "/runtime-interaction/request",
            Some(approval(&sim, "ap-5", 1_800_000, json!({})))
        )
        .await
        .status,
        200
    );
    sim.set_switches(|s| s.approval_cap_mode = canon_sim::config::ApprovalCapMode::Clamp);
    let clamped = call(
        &sim,
        "POST",
        "/runtime-interaction/request",
        Some(approval(&sim, "ap-6", 100 * 3_600_000, json!({}))),
    )
    .await
    .json();
    assert_eq!(clamped["expiresAt"], sim.now_ms() + 72 * 3_600_000);
    // A non-owner responder never gets session rules.
    sim.create_principal(PrincipalSpec {
        id: Some("h-2".into()),
        kind: "human".into(),
        ..Default::default()
    });
    sim.with_state(|s| {
        s.conversations
            .get_mut("c-direct")
            .unwrap()
            .member_ids
            .push("h-2".into())
    });
    let other = call(
        &sim,
        "POST",
        "/runtime-interaction/request",
        Some(approval(
            &sim,
            "ap-7",
            60_000,
            json!({"responseUserId": "h-2"}),
        )),
    )
    .await
    .json();
    assert_eq!(
        (
            other["allowSessionRule"].as_bool(),
            other["responseUserId"].as_str()
        ),
        (Some(false), Some("h-2"))
    );
}

#[tokio::test]
async fn cards_are_validated_with_canon_cards() {
    let sim = sim().await;
    let bad = call(&sim, "POST", "/runtime-interaction/request", Some(json!({"interactionKind": "card", "conversationId": "c-direct", "card": {"version": "nope"}}))).await;
    assert_eq!(
        (bad.status, bad.code().as_deref()),
        (400, Some("INVALID_CARD"))
    );
    // A card canon-cards accepts (fixtures/card-validation/parity.jsonl "action.fields.absent").
    let card = json!({"schema": "canon.card.v1", "title": "Probe", "fallbackText": "Probe card", "blocks": [{"kind": "actions", "actions": [{"id": "approve", "label": "Approve"}]}]});
    assert!(canon_cards::validate_card(&card).ok);
    let r = call(
        &sim,
        "POST",
        "/runtime-interaction/request",
        Some(json!({"interactionKind": "card", "conversationId": "c-direct", "card": card})),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.json()["cardId"]
        .as_str()
        .is_some_and(|id| id.starts_with("card-")));
    assert_eq!(r.json()["interactive"], true);
    sim.set_switches(|s| s.validate_cards = false);
    let lenient = call(&sim, "POST", "/runtime-interaction/request", Some(json!({"interactionKind": "card", "conversationId": "c-direct", "cardId": "card-1", "card": {"version": "nope"}}))).await;
    assert_eq!(lenient.status, 200);
}

#[tokio::test]
async fn agent_directory_pages_with_cursors_and_can_be_malformed() {
    let sim = sim().await;
    for i in 0..3 {
        sim.create_principal(PrincipalSpec {
            id: Some(format!("a-helper-{i}")),
            kind: "ai_agent".into(),
            display_name: Some(format!("Helper {i}")),
            owner_id: Some("h-owner".into()),
            ..Default::default()
        });
    }
    let page = call(&sim, "GET", "/agents/discover?query=help&limit=2", None)
        .await
        .json();
    assert_eq!(page["agents"].as_array().unwrap().len(), 2);
    assert_eq!(page["agents"][0]["owner"]["principalId"], "h-owner");
    assert_eq!(page["agents"][0]["shareable"], true);
    let cursor = page["nextCursor"].as_str().unwrap();
    let next = call(
        &sim,
        "GET",
        &format!("/agents/discover?query=help&limit=2&cursor={cursor}"),
        None,
    )
    .await
    .json();
    assert_eq!(next["agents"].as_array().unwrap().len(), 1);
    assert_eq!(next["nextCursor"], Value::Null);
    assert_eq!(
        call(&sim, "GET", "/agents/discover?limit=26", None)
            .await
            .status,
        400
    );
    sim.set_switches(|s| s.malformed_directory = true);
    let bad = call(&sim, "GET", "/agents/discover", None).await.json();
    assert!(bad["agents"][0].get("shareable").is_none());
}

#[tokio::test]
async fn reset_keeps_the_seed_so_keys_are_reproducible() {
    let sim = sim_with(|c| c.seed = 42).await;
    let key = sim.api_key();
    call(
        &sim,
        "POST",
        "/messages/send",
        Some(json!({"conversationId": "c-direct", "text": "x"})),
    )
    .await;
    sim.reset();
    assert_eq!(sim.api_key(), key);
    assert_eq!(sim.read_state(|s| s.messages.len()), 0);
}

#[tokio::test]
async fn agent_to_agent_sends_have_an_hourly_budget() {
    let sim = sim().await;
    sim.create_principal(PrincipalSpec {
        id: Some("a-peer".into()),
        kind: "ai_agent".into(),
        ..Default::default()
    });
    sim.create_conversation(ConversationSpec {
        id: Some("c-bots".into()),
        kind: "direct".into(),
        member_ids: vec!["a-hermes".into(), "a-peer".into()],
        ..Default::default()
    });
    for i in 0..30 {
        assert_eq!(call(&sim, "POST", "/messages/send", Some(json!({"conversationId": "c-bots", "text": format!("{i}"), "metadata": {"turnSemantics": "turn_complete"}}))).await.status, 200);
        sim.advance_clock(20_000);
    }
    let limited = call(
        &sim,
        "POST",
        "/messages/send",
        Some(json!({"conversationId": "c-bots", "text": "too many"})),
    )
    .await;
    assert_eq!(limited.status, 429);
    assert!(limited.json()["retryAfter"].as_u64().unwrap() > 0);
    // Human conversations are not affected by the agent-to-peer budget.
    assert_eq!(
        call(
            &sim,
            "POST",
            "/messages/send",
            Some(json!({"conversationId": "c-direct", "text": "fine"}))
        )
        .await
        .status,
        200
    );
}

#[tokio::test]
async fn card_answers_are_bounded() {
    let sim = sim().await;
    sim.set_switches(|s| s.validate_cards = false);
    call(&sim, "POST", "/runtime-interaction/request", Some(json!({"interactionKind": "card", "conversationId": "c-direct", "cardId": "card-d", "card": {"title": "t"}}))).await;
    let mut deep = json!("leaf");
    for _ in 0..9 {
        deep = json!({"n": deep});
    }
    let r = Response {
        conversation_id: "c-direct".into(),
        kind: "card".into(),
        id: "card-d".into(),
        action_id: Some("ok".into()),
        values: Some(deep),
        ..Default::default()
    };
    assert!(sim.respond_interaction(&r).is_err());
    let ok = Response {
        values: Some(json!({"choice": "a"})),
        ..r
    };
    assert!(sim.respond_interaction(&ok).is_ok());
    let consumed = call(
        &sim,
        "POST",
        "/runtime-interaction/consume",
        Some(json!({"interactionKind": "card", "conversationId": "c-direct", "cardId": "card-d"})),
    )
    .await
    .json();
    assert_eq!(
        consumed,
        json!({"status": "submitted", "actionId": "ok", "values": {"choice": "a"}, "respondedBy": "h-owner"})
    );
}

#[tokio::test]
async fn registrations_can_approve_themselves_after_n_polls() {
    let sim = sim_with(|c| c.switches.auto_approve_after_polls = Some(2)).await;
    let body =
        json!({"name": "Auto", "localRegistrationId": "hermes-auto", "requestedAgentId": "a-auto"})
            .to_string();
    let reg = raw(
        sim.addr(),
        "POST",
        "/agents/register",
        &[],
        Some(body.as_bytes()),
    )
    .await
    .unwrap()
    .json();
    let path = format!("/agents/status/{}", reg["requestId"].as_str().unwrap());
    let token = reg["pollToken"].as_str().unwrap().to_owned();
    let headers = [("x-canon-poll-token", token.as_str())];
    let poll = || raw(sim.addr(), "GET", &path, &headers, None);
    assert_eq!(poll().await.unwrap().json()["status"], "pending");
    let second = poll().await.unwrap().json();
    assert_eq!(
        (second["status"].as_str(), second["agentId"].as_str()),
        (Some("approved"), Some("a-auto"))
    );
}

#[tokio::test]
async fn card_answers_must_name_a_declared_action_and_its_required_fields() {
    let sim = sim().await;
    sim.set_switches(|s| s.validate_cards = false);
    let card = json!({"schema": "canon.card.v1", "title": "Form", "fallbackText": "Form", "blocks": [{"kind": "actions", "actions": [
        {"id": "send", "label": "Send", "fields": [{"id": "note", "label": "Note", "type": "text", "required": true}]}
    ]}]});
    call(&sim, "POST", "/runtime-interaction/request", Some(json!({"interactionKind": "card", "conversationId": "c-direct", "cardId": "card-f", "card": card}))).await;
    let answer = |action: &str, values: Value| Response {
        conversation_id: "c-direct".into(),
        kind: "card".into(),
        id: "card-f".into(),
        action_id: Some(action.into()),
        values: Some(values),
        ..Default::default()
    };
    assert_eq!(
        sim.respond_interaction(&answer("other", json!({})))
            .unwrap_err()
            .to_string(),
        "invalid control request: Unknown action: other"
    );
    assert!(sim
        .respond_interaction(&answer("send", json!({"note": " "})))
        .unwrap_err()
        .to_string()
        .contains("Note is required"));
    assert!(sim
        .respond_interaction(&answer("send", json!({"note": "x", "extra": 1})))
        .unwrap_err()
        .to_string()
        .contains("Unknown field: extra"));
    assert_eq!(
        sim.respond_interaction(&answer("send", json!({"note": "ok"})))
            .unwrap()["values"]["note"],
        "ok"
    );
}
