//! Cards at the REST endpoints of canon-wire.md §11.3 (happy paths and documented 4xx):
//! validation with canon-cards, and answers that are bounded and name a declared action with
//! its required fields.

use canon_sim::interactions::Response;
use serde_json::{json, Value};

use super::support::{call, sim};

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
