//! Durable card waits end to end (durable-endpoint.md §10; scenario in `hermes_support.rs`): the
//! scripted model asks for an interactive card, the tool's bounded wait (shortened here) ends
//! with `pending` and the card id, the human answers later, the receipt wakes the session once,
//! the model resumes the card with `check_card` and gets the decision, and a second check says
//! it was already claimed. `send_card` of an interactive card answers `pending` at once.
//! Counts come from the simulator's journal and the model's request log.

use canon_sim::control::Injection;
use canon_sim::{DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};

use super::gateway_support::GatewayOptions;
use super::hermes_approvals::{
    echo_rule, fallback_rule, tool_result, tool_rule, turns_for, wait_turn_for,
};
use super::hermes_support::{live_clock_config, Scenario};

/// durable-endpoint.md §10.7, exact.
const PENDING_NOTE: &str = "The existing card is still awaiting its designated human. Use check_card with this cardId to resume; do not issue another card or substitute verbal permission. Pending is not approval. Continue independent work while waiting.";

fn card(id: &str) -> Value {
    json!({"schema": "canon.card.v1", "title": "Deploy", "fallbackText": "Deploy 1.2", "cardId": id,
           "blocks": [{"kind": "summary", "title": "Deploy 1.2", "text": "Ready"},
                      {"kind": "actions", "actions": [{"id": "ship", "label": "Ship"},
                                                      {"id": "hold", "label": "Hold"}]}]})
}

fn card_consumes(sc: &Scenario, card_id: &str) -> usize {
    sc.sim
        .journal(0, Some("/runtime-interaction/consume"))
        .into_iter()
        .filter(|e| e.method == "POST" && e.body["cardId"] == card_id)
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_card_comes_back_pending_then_the_receipt_wakes_check_card_once() {
    let options = GatewayOptions {
        env: vec![("CANON_HERMES_CARD_WAIT_MS".to_owned(), "1500".to_owned())],
        ..GatewayOptions::default()
    };
    let sc = Scenario::start_full(
        live_clock_config(),
        json!([
            echo_rule(),
            tool_rule(
                "PICK",
                "call_pick",
                json!({"action": "request_card", "card": card("deploy-1"),
                                                  "timeoutSeconds": 600})
            ),
            tool_rule(
                "Canon card deploy-1 received a response",
                "call_resume",
                json!({"action": "check_card", "cardId": "deploy-1"})
            ),
            tool_rule(
                "AGAIN",
                "call_again",
                json!({"action": "check_card", "cardId": "deploy-1"})
            ),
            tool_rule("LIST", "call_list", json!({"action": "check_card"})),
            tool_rule(
                "SHOW",
                "call_show",
                json!({"action": "send_card", "card": card("deploy-2")})
            ),
            fallback_rule(),
        ]),
        options,
        |_| {},
        |_| {},
    )
    .await;
    sc.inject(Injection {
        text: Some("PICK a deploy".into()),
        ..Injection::default()
    });
    let pending = tool_result(&sc, "call_pick").await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    assert_eq!(pending["success"], true, "{pending}");
    assert_eq!(pending["status"], "pending", "{pending}");
    assert_eq!(pending["cardId"], "deploy-1");
    assert_eq!(pending["responseUserId"], DEFAULT_OWNER);
    assert_eq!(pending["note"], PENDING_NOTE);
    // The turn showed that it waited for its human.
    assert!(
        sc.turn_history(DEFAULT_CONVERSATION)
            .iter()
            .any(|t| t["state"] == "waiting_input"),
        "{:#?}",
        sc.turn_history(DEFAULT_CONVERSATION)
    );
    let waited = card_consumes(&sc, "deploy-1");
    assert!(waited >= 1, "the bounded wait consumed at least once");
    // The card is still open on Canon, kept in the card-wait store.
    let open = sc.sim.read_state(|s| {
        s.interactions
            .values()
            .find(|i| i.kind == "card" && i.id == "deploy-1")
            .map(|i| i.state.clone())
    });
    assert_eq!(open.as_deref(), Some("pending"));

    // The list shows it.
    sc.inject(Injection {
        text: Some("LIST my cards".into()),
        ..Injection::default()
    });
    let listed = tool_result(&sc, "call_list").await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    assert_eq!(listed["status"], "listed", "{listed}");
    assert_eq!(listed["cards"][0]["cardId"], "deploy-1", "{listed}");

    // The owner answers later: the receipt wakes the session, which resumes the card.
    sc.sim
        .respond_interaction(&canon_sim::interactions::Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "card".into(),
            id: "deploy-1".into(),
            action_id: Some("ship".into()),
            ..Default::default()
        })
        .expect("answered");
    let wake = "Canon card deploy-1 received a response. Resume its pending task by calling canon_runtime_control with action check_card and cardId deploy-1.";
    wait_turn_for(&sc, wake).await;
    let resumed = tool_result(&sc, "call_resume").await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    assert_eq!(resumed["success"], true, "{resumed}");
    assert_eq!(resumed["status"], "submitted", "{resumed}");
    assert_eq!(resumed["actionId"], "ship", "{resumed}");
    assert_eq!(resumed["respondedBy"], DEFAULT_OWNER, "{resumed}");
    assert_eq!(turns_for(&sc, wake), 1, "one wake turn");

    // The decision is handed out once.
    sc.inject(Injection {
        text: Some("AGAIN please".into()),
        ..Injection::default()
    });
    let again = tool_result(&sc, "call_again").await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    assert_eq!(again["status"], "consumed", "{again}");
    assert!(again.get("actionId").is_none(), "{again}");
    let consumed_total = card_consumes(&sc, "deploy-1");
    assert_eq!(
        consumed_total,
        waited + 1,
        "one consume after the wake, none for the settled check"
    );

    // send_card of an interactive card: pending at once, with the request it made.
    sc.inject(Injection {
        text: Some("SHOW the second".into()),
        ..Injection::default()
    });
    let shown = tool_result(&sc, "call_show").await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    assert_eq!(shown["status"], "pending", "{shown}");
    assert_eq!(shown["cardId"], "deploy-2", "{shown}");
    assert!(shown["request"].is_object(), "{shown}");
    assert_eq!(card_consumes(&sc, "deploy-2"), 0, "send_card does not wait");
}
