//! Messages at the REST endpoints of canon-wire.md §11.3 (happy paths and documented 4xx):
//! idempotent sends and their limits, the conversation rate limit and the agent-to-agent
//! budget, reply authority, and uploads used as attachments.

use canon_sim::control::Injection;
use canon_sim::{ConversationSpec, PrincipalSpec};
use serde_json::{json, Value};

use super::support::{call, raw, sim};

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
