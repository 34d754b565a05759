//! `canon_runtime_control` end to end (scenario in `hermes_support.rs`): a real Hermes gateway
//! loads the installed shim, which registers the tool from the manifest; the scripted model
//! calls it; the daemon validates, asks Canon and answers the model.
//!
//! | scenario | spec |
//! |---|---|
//! | send_card shows a card; an invalid card is refused before any Canon call | runtime-control.md §4.6 |
//! | request_input asks the triggering human; the answer reaches the model | runtime-control.md §4.7, §6.6 |
//! | a secret input a guest's turn asks goes to the owner | runtime-control.md §6.2 |
//! | request_card answered by someone else fails closed; an unanswered one times out | runtime-control.md §4.6 steps 10–11 |
//! | no_reply in a group posts nothing, even the text after it | runtime-control.md §4.10 |

use std::time::Duration;

use canon_sim::control::Injection;
use canon_sim::{DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};

use super::gateway_support::GatewayOptions;
use super::hermes_support::{live_clock_config, Scenario};
use super::hermes_turns::{create_group, GROUP};

/// A card with one summary block, and with an actions block when `actions`.
fn card(actions: bool) -> Value {
    let mut blocks = vec![json!({"kind": "summary", "title": "Deploy 1.2", "text": "Ready"})];
    if actions {
        blocks.push(json!({"kind": "actions",
                           "actions": [{"id": "ship", "label": "Ship"}, {"id": "hold", "label": "Hold"}]}));
    }
    json!({"schema": "canon.card.v1", "title": "Deploy", "fallbackText": "Deploy 1.2", "blocks": blocks})
}

/// The model calls the tool with `args` when the human's text contains `keyword`, then echoes
/// the tool's result.
fn tool_rule(keyword: &str, id: &str, args: Value) -> Value {
    json!({"match": {"role": "user", "contains": keyword},
           "reply": {"toolCall": {"name": "canon_runtime_control", "arguments": args, "id": id}}})
}

fn echo_rule() -> Value {
    json!({"match": {"role": "tool"}, "reply": {"echoToolResult": true, "prefix": "Tool said: "}})
}

/// The tool result the model got for `call_id`, parsed.
fn result_of(sc: &Scenario, call_id: &str) -> Value {
    let text = sc.tool_message(call_id);
    serde_json::from_str(&text).unwrap_or_else(|_| sc.fail(&format!("not JSON: {text}")))
}

/// How many runtime interactions the daemon asked Canon to create.
fn interaction_requests(sc: &Scenario) -> usize {
    sc.sim
        .journal(0, Some("/runtime-interaction/request"))
        .into_iter()
        .filter(|e| e.method == "POST")
        .count()
}

async fn started(rules: Value) -> Scenario {
    let mut all = vec![echo_rule()];
    all.extend(rules.as_array().cloned().unwrap_or_default());
    all.push(json!({"match": {}, "reply": {"text": "unexpected"}}));
    Scenario::start_full(
        live_clock_config(),
        Value::from(all),
        GatewayOptions::default(),
        |_| {},
        |_| {},
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_send_card_shows_a_card_and_refuses_an_invalid_one_before_canon() {
    let sc = started(json!([
        tool_rule(
            "SHOW",
            "call_show",
            json!({"action": "send_card", "card": card(false)})
        ),
        tool_rule(
            "BROKEN",
            "call_broken",
            json!({"action": "send_card", "card": {"schema": "canon.card.v1", "title": "x"}})
        ),
    ]))
    .await;
    sc.inject(Injection {
        text: Some("SHOW the deploy".into()),
        ..Injection::default()
    });
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    let shown = result_of(&sc, "call_show");
    assert_eq!(shown["success"], true, "{shown}");
    assert_eq!(shown["status"], "displayed", "{shown}");
    assert_eq!(shown["conversationId"], DEFAULT_CONVERSATION);
    let card_id = shown["cardId"].as_str().expect("a card id").to_owned();
    let stored = sc.sim.read_state(|s| {
        s.interactions
            .values()
            .find(|i| i.kind == "card" && i.id == card_id)
            .cloned()
    });
    let stored = stored.unwrap_or_else(|| sc.fail("the card is in Canon"));
    assert_eq!(stored.request["card"]["title"], "Deploy");
    assert_eq!(stored.response_user_id.as_deref(), Some(DEFAULT_OWNER));
    assert_eq!(interaction_requests(&sc), 1);

    sc.inject(Injection {
        text: Some("BROKEN card now".into()),
        ..Injection::default()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(45);
    let broken = loop {
        let found = sc
            .model
            .requests()
            .iter()
            .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_broken")
            .and_then(|m| m["content"].as_str().map(str::to_owned));
        if let Some(found) = found {
            break serde_json::from_str::<Value>(&found).expect("JSON");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no result for call_broken"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(broken["success"], false, "{broken}");
    let error = broken["error"].as_str().expect("an error");
    assert!(error.starts_with("Invalid canon.card.v1: card."), "{error}");
    assert!(
        error.ends_with("do NOT resend the same payload — it will fail identically."),
        "{error}"
    );
    // Nothing reached Canon for the invalid card.
    assert_eq!(interaction_requests(&sc), 1);

    // The model was offered the tool and told what it does in Canon.
    let request = sc
        .model
        .requests()
        .into_iter()
        .find(|r| r["tools"].is_array())
        .unwrap_or_else(|| sc.fail("a model request with tools"));
    let offered: Vec<&str> = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"canon_runtime_control"), "{offered:?}");
    let system = request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        system.contains("Before authoring a rich card, load the plugin skill canon-hermes:rich-cards with skill_view. With the canon_runtime_control tool you can show a card"),
        "{system}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_request_input_asks_the_triggering_human() {
    let sc = started(json!([tool_rule(
        "ASK",
        "call_ask",
        json!({"action": "request_input", "inputId": "colour-1", "title": "Colour",
               "prompt": "Which colour?", "choices": [{"label": "Red"}, {"label": "Blue"}]})
    )]))
    .await;
    sc.inject(Injection {
        text: Some("ASK me".into()),
        ..Injection::default()
    });
    let input = sc.wait_interaction("input").await;
    assert_eq!(input.id, "colour-1");
    assert_eq!(input.response_user_id.as_deref(), Some(DEFAULT_OWNER));
    assert_eq!(input.request["prompt"], "Which colour?");
    sc.wait("waiting_input", |s| {
        s.turn_history.iter().any(|t| t["state"] == "waiting_input")
    })
    .await;
    sc.sim
        .respond_interaction(&canon_sim::interactions::Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "input".into(),
            id: input.id.clone(),
            value: Some("Blue".into()),
            ..Default::default()
        })
        .expect("answered");
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    let answered = result_of(&sc, "call_ask");
    assert_eq!(answered["success"], true, "{answered}");
    assert_eq!(answered["status"], "submitted", "{answered}");
    assert_eq!(answered["value"], "Blue", "{answered}");
    assert_eq!(answered["conversationId"], DEFAULT_CONVERSATION);
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_request_card_fails_closed_for_another_human_and_times_out_unanswered() {
    let sc = started(json!([
        tool_rule(
            "PICK",
            "call_pick",
            json!({"action": "request_card", "card": card(true)})
        ),
        tool_rule(
            "WAIT",
            "call_wait",
            json!({"action": "request_card", "card": card(true), "timeoutSeconds": 5})
        ),
    ]))
    .await;
    sc.inject(Injection {
        text: Some("PICK one".into()),
        ..Injection::default()
    });
    let asked = sc.wait_interaction("card").await;
    assert_eq!(asked.response_user_id.as_deref(), Some(DEFAULT_OWNER));
    sc.sim
        .respond_interaction(&canon_sim::interactions::Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "card".into(),
            id: asked.id.clone(),
            action_id: Some("ship".into()),
            responded_by: Some("h-mallory".into()),
            ..Default::default()
        })
        .expect("answered");
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    let refused = result_of(&sc, "call_pick");
    assert_eq!(
        refused,
        json!({"error": "Canon card was answered by a different human", "success": false})
    );

    sc.inject(Injection {
        text: Some("WAIT for me".into()),
        ..Injection::default()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(45);
    let timed_out = loop {
        let found = sc
            .model
            .requests()
            .iter()
            .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_wait")
            .and_then(|m| m["content"].as_str().map(str::to_owned));
        if let Some(found) = found {
            break serde_json::from_str::<Value>(&found).expect("JSON");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no result for call_wait"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(timed_out["status"], "timeout", "{timed_out}");
    assert_eq!(timed_out["success"], true, "{timed_out}");
    // The deadline cancelled the card on Canon.
    let card_id = timed_out["cardId"].as_str().expect("a card id").to_owned();
    let state = sc.sim.read_state(|s| {
        s.interactions
            .values()
            .find(|i| i.id == card_id)
            .map(|i| i.state.clone())
    });
    assert_ne!(state.as_deref(), Some("pending"), "{state:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_no_reply_in_a_group_posts_nothing() {
    let sc = Scenario::start_full(
        live_clock_config(),
        json!([
            {"match": {"role": "tool"}, "reply": {"text": "This trailing text must never be posted."}},
            {"match": {"role": "user"},
             "reply": {"toolCall": {"name": "canon_runtime_control",
                                    "arguments": {"action": "no_reply", "reason": "private: nothing to add"},
                                    "id": "call_quiet"}}},
        ]),
        GatewayOptions::default(),
        create_group,
        |_| {},
    )
    .await;
    sc.inject(Injection {
        conversation_id: Some(GROUP.into()),
        text: Some("@Hermes anything?".into()),
        mentions: vec![canon_sim::DEFAULT_AGENT.into()],
        ..Injection::default()
    });
    sc.wait_turn_closed(GROUP).await;
    let acknowledged = result_of(&sc, "call_quiet");
    assert_eq!(
        acknowledged,
        json!({"success": true, "status": "acknowledged", "conversationId": GROUP,
               "note": "Acknowledged — nothing was posted to the conversation."})
    );
    // Give a stray final the time a real one needs; none may appear.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        sc.agent_messages(GROUP).is_empty(),
        "{:#?}",
        sc.agent_messages(GROUP)
    );
    let reports = sc
        .sim
        .read_state(|s| s.no_replies.iter().cloned().collect::<Vec<_>>());
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert!(
        !serde_json::to_string(&reports)
            .unwrap()
            .contains("nothing to add"),
        "the reason never leaves the daemon: {reports:#?}"
    );
}

/// The round trip of one tool call as the model sees it: from the request whose answer was the
/// call (the call goes out at once) to the request carrying the call's result, in ms.
fn round_trip_ms(sc: &Scenario, call_id: &str) -> f64 {
    let requests = sc.model.requests();
    let arrivals = sc.model.arrivals_us();
    let is_title = |r: &Value| {
        r["messages"][0]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with(canon_sim::model::TITLE_PROMPT_PREFIX))
    };
    let result_at = requests
        .iter()
        .position(|r| {
            r["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        })
        .unwrap_or_else(|| sc.fail(&format!("no request carries the result of {call_id}")));
    let call_at = (0..result_at)
        .rev()
        .find(|&i| !is_title(&requests[i]))
        .unwrap_or_else(|| sc.fail("no request before the result"));
    (arrivals[result_at] - arrivals[call_at]) as f64 / 1000.0
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Figures for the closing note of the tools work: `canon_runtime_control` (`send_card`, one
/// Canon create through the daemon) against Hermes' own in-process `todo` tool, three calls
/// each through the same gateway. Prints them; asserts only that every call succeeded.
#[tokio::test(flavor = "multi_thread")]
#[allow(clippy::print_stderr)] // the figures are this test's output, shown with --nocapture
async fn real_gateway_tool_round_trip_figures() {
    let mut rules = Vec::new();
    for n in 0..3 {
        rules.push(tool_rule(
            &format!("SHOW{n}"),
            &format!("call_show_{n}"),
            json!({"action": "send_card", "card": card(false)}),
        ));
        rules.push(
            json!({"match": {"role": "user", "contains": format!("TODO{n}")},
                          "reply": {"toolCall": {"name": "todo", "arguments": {},
                                                 "id": format!("call_todo_{n}")}}}),
        );
    }
    let sc = started(Value::from(rules)).await;
    let (mut canon, mut builtin) = (Vec::new(), Vec::new());
    for n in 0..3 {
        for (word, call, into) in [
            ("SHOW", "call_show", &mut canon),
            ("TODO", "call_todo", &mut builtin),
        ] {
            sc.inject(Injection {
                text: Some(format!("{word}{n} now")),
                ..Injection::default()
            });
            let id = format!("{call}_{n}");
            let deadline = std::time::Instant::now() + Duration::from_secs(45);
            while !sc.model.requests().iter().any(|r| {
                r["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .is_some_and(|m| m["tool_call_id"] == id.as_str())
            }) {
                assert!(std::time::Instant::now() < deadline, "no result for {id}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
            into.push(round_trip_ms(&sc, &id));
        }
        assert_eq!(
            result_of(&sc, &format!("call_show_{n}"))["status"],
            "displayed"
        );
    }
    eprintln!(
        "tool round trip (model emits the call -> result back at the model), median of 3: canon_runtime_control send_card {:.1} ms {canon:?}; Hermes todo {:.1} ms {builtin:?}",
        median(canon.clone()),
        median(builtin.clone())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_a_secret_input_asked_by_a_guest_goes_to_the_owner() {
    // runtime-control.md §6.2: a secret (like a sudo) input is the owner's to answer, whoever
    // triggered the turn; a clarify goes to the human who wrote.
    let sc = Scenario::start_full(
        live_clock_config(),
        json!([
            echo_rule(),
            tool_rule("SECRET", "call_secret",
                      json!({"action": "request_input", "inputId": "token-1", "kind": "secret",
                             "title": "Token", "prompt": "Paste the deploy token"})),
            {"match": {}, "reply": {"text": "unexpected"}},
        ]),
        GatewayOptions::default(),
        create_group,
        |_| {},
    )
    .await;
    sc.inject(Injection {
        conversation_id: Some(GROUP.into()),
        sender_id: Some("h-guest".into()),
        text: Some("@Hermes SECRET please".into()),
        mentions: vec![canon_sim::DEFAULT_AGENT.into()],
        ..Injection::default()
    });
    let input = sc.wait_interaction("input").await;
    assert_eq!(input.id, "token-1");
    assert_eq!(
        input.response_user_id.as_deref(),
        Some(DEFAULT_OWNER),
        "the owner, not the guest"
    );
    sc.sim
        .respond_interaction(&canon_sim::interactions::Response {
            conversation_id: GROUP.into(),
            kind: "input".into(),
            id: input.id.clone(),
            value: Some("tok-123".into()),
            ..Default::default()
        })
        .expect("answered");
    sc.wait_turn_closed(GROUP).await;
    let answered = result_of(&sc, "call_secret");
    assert_eq!(answered["success"], true, "{answered}");
    assert_eq!(answered["status"], "submitted", "{answered}");
    assert_eq!(answered["conversationId"], GROUP);
}
