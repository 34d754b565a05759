//! Runtime interactions at the REST endpoints of canon-wire.md §11.3 (happy paths and
//! documented 4xx): inputs (answers, single use, cancel and timeout on the sim clock) and
//! approvals (tombstones, limits, ceilings and cap modes).

use canon_sim::interactions::Response;
use canon_sim::PrincipalSpec;
use serde_json::{json, Value};

use super::support::{call, call_as, sim};

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
