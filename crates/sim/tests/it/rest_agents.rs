//! Agents and their access at the REST endpoints of canon-wire.md §11.3 (happy paths and
//! documented 4xx): health, registration and its auto-approval, authentication and
//! membership, `me` and the conversation list, the agent directory, and a reset that keeps the
//! seed.

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
async fn the_stream_health_path_can_report_another_project() {
    let sim = sim_with(|c| c.switches.stream_health_project_id = Some("elsewhere".into())).await;
    let api = raw(sim.addr(), "GET", "/healthz/", &[], None)
        .await
        .unwrap();
    assert_eq!(api.json()["projectId"], "canonmail-dev");
    let stream = raw(sim.addr(), "GET", "/health", &[], None).await.unwrap();
    assert_eq!(
        stream.header("x-canon-environment-id"),
        Some("canon-dev-v1")
    );
    assert_eq!(
        stream.json(),
        json!({"environmentId": "canon-dev-v1", "projectId": "elsewhere", "status": "ok"})
    );
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
