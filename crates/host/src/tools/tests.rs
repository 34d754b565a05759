//! `canon_runtime_control` decisions, one rule per test, against runtime-control.md §2–§4.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::*;
use crate::protocol::{ToolCall, TurnContext};

fn canon_ctx() -> TurnContext {
    TurnContext {
        platform: Some("canon".into()),
        chat_id: Some("c-1".into()),
        user_id: Some("h-alice".into()),
        session_key: Some("agent:main:canon:dm:c-1".into()),
        message_id: Some("m-1".into()),
        ..TurnContext::default()
    }
}

fn call(args: Value, ctx: TurnContext) -> ToolCall {
    ToolCall {
        name: RUNTIME_CONTROL_TOOL.into(),
        args: canon_wire::secret::Opaque(args),
        ctx,
        hook: Default::default(),
    }
}

fn answer(plan: Plan) -> Value {
    match plan {
        Plan::Answer(text) => serde_json::from_str(&text).expect("JSON result"),
        other => panic!("expected an answer, got {other:?}"),
    }
}

/// The interaction a plan creates: one interaction, or the card of a durable card wait (the
/// same create call; the shell keeps it durably and waits a bounded time).
fn interaction(plan: Plan) -> ToolInteraction {
    match plan {
        Plan::Interact(i) => *i,
        Plan::CardWait(call) => match *call {
            crate::card_waits::CardWaitCall::Request(i) => *i,
            other => panic!("expected a card request, got {other:?}"),
        },
        other => panic!("expected an interaction, got {other:?}"),
    }
}

#[test]
fn interactive_cards_of_the_tool_are_durable_card_waits_and_others_one_interaction() {
    let plan = |action: &str, actions: bool| {
        plan_runtime_control(
            &call(
                json!({"action": action, "card": valid_card(actions)}),
                canon_ctx(),
            ),
            None,
            0,
        )
    };
    for action in ["request_card", "send_card"] {
        assert!(matches!(plan(action, true), Plan::CardWait(_)), "{action}");
        assert!(matches!(plan(action, false), Plan::Interact(_)), "{action}");
    }
    let check = plan_runtime_control(
        &call(json!({"action": "check_card", "cardId": "k1"}), canon_ctx()),
        None,
        0,
    );
    assert_eq!(
        check,
        Plan::CardWait(Box::new(crate::card_waits::CardWaitCall::Check(
            crate::card_waits::CardCheck {
                conversation_id: "c-1".into(),
                card_id: Some("k1".into()),
                user_id: Some("h-alice".into()),
            }
        )))
    );
}

fn valid_card(with_actions: bool) -> Value {
    let mut blocks = vec![json!({"kind": "summary", "title": "Build", "text": "All green"})];
    if with_actions {
        blocks.push(json!({"kind": "actions", "actions": [{"id": "ok", "label": "OK"}]}));
    }
    json!({"schema": "canon.card.v1", "title": "Status", "fallbackText": "Build status",
           "blocks": blocks})
}

fn created(raw: Value) -> InteractionCreated {
    InteractionCreated::from_object(raw.as_object().cloned().unwrap_or_default())
}

fn result(raw: Value) -> InteractionResult {
    InteractionResult::from_object(raw.as_object().cloned().unwrap_or_default())
}

#[test]
fn the_envelope_puts_success_first_and_keeps_non_ascii() {
    let mut fields = Map::new();
    fields.insert("status".into(), "displayed".into());
    fields.insert("note".into(), "Grüße — ok".into());
    assert_eq!(
        success(fields),
        r#"{"success":true,"status":"displayed","note":"Grüße — ok"}"#
    );
    assert_eq!(failure("boom"), r#"{"error":"boom","success":false}"#);
}

#[test]
fn an_unknown_action_is_refused_with_the_exact_text_before_the_schema() {
    for args in [json!({"action": "dance"}), json!({}), json!({"action": 3})] {
        let got = answer(plan_runtime_control(&call(args, canon_ctx()), None, 0));
        assert_eq!(got, json!({"error": UNKNOWN_ACTION, "success": false}));
    }
}

#[test]
fn arguments_that_break_the_schema_are_refused_naming_the_argument() {
    let got = answer(plan_runtime_control(
        &call(
            json!({"action": "request_input", "inputId": "q1", "timeoutSeconds": "soon"}),
            canon_ctx(),
        ),
        None,
        0,
    ));
    let error = got["error"].as_str().unwrap();
    assert!(
        error.starts_with("Invalid canon_runtime_control arguments: timeoutSeconds: "),
        "{error}"
    );
    let extra = answer(plan_runtime_control(
        &call(json!({"action": "send_card", "bogus": 1}), canon_ctx()),
        None,
        0,
    ));
    assert!(
        extra["error"].as_str().unwrap().contains("bogus"),
        "{extra}"
    );
}

#[test]
fn timeouts_read_like_python_int_and_clamp() {
    let n = |v: Value| normalize_timeout(Some(&v), 300, 1800);
    assert_eq!(n(json!(60)), 60);
    assert_eq!(n(json!(1)), 5);
    assert_eq!(n(json!(99999)), 1800);
    assert_eq!(n(json!(12.9)), 12);
    assert_eq!(n(json!(-3.5)), 5);
    assert_eq!(n(json!(" 42 ")), 42);
    assert_eq!(n(json!("1_000")), 1000);
    assert_eq!(n(json!("+7")), 7);
    assert_eq!(n(json!("12.5")), 300);
    assert_eq!(n(json!("1__0")), 300);
    assert_eq!(n(json!("_1")), 300);
    assert_eq!(n(json!(true)), 5);
    assert_eq!(n(json!(null)), 300);
    assert_eq!(n(json!({"a": 1})), 300);
    assert_eq!(normalize_timeout(None, 259_200, 259_200), 259_200);
}

proptest! {
    #[test]
    fn every_timeout_lands_in_bounds(value in any::<i64>(), text in "\\PC{0,12}") {
        for v in [json!(value), json!(text), json!(value as f64 / 7.0)] {
            let t = normalize_timeout(Some(&v), 300, 1800);
            prop_assert!((5..=1800).contains(&t));
        }
    }
}

#[test]
fn conversations_come_from_the_target_the_turn_or_the_home_channel() {
    let ctx = canon_ctx();
    assert_eq!(
        resolve_conversation(Some(" canon: c-9 "), &ctx, None),
        Ok("c-9".into())
    );
    assert_eq!(
        resolve_conversation(Some("c-8"), &ctx, None),
        Ok("c-8".into())
    );
    assert_eq!(
        resolve_conversation(Some("canon:"), &ctx, None),
        Err(EMPTY_TARGET)
    );
    assert_eq!(
        resolve_conversation(None, &ctx, Some("home")),
        Ok("c-1".into())
    );
    let outside = TurnContext::default();
    assert_eq!(
        resolve_conversation(Some(" "), &outside, Some(" home ")),
        Ok("home".into())
    );
    assert_eq!(
        resolve_conversation(None, &outside, None),
        Err(NO_CONVERSATION)
    );
    let telegram = TurnContext {
        platform: Some("telegram".into()),
        ..canon_ctx()
    };
    assert_eq!(
        resolve_conversation(None, &telegram, None),
        Err(NO_CONVERSATION)
    );
    assert_eq!(trusted_user_id(&telegram), None);
    let shouting = TurnContext {
        platform: Some(" CANON ".into()),
        ..canon_ctx()
    };
    assert_eq!(trusted_user_id(&shouting).as_deref(), Some("h-alice"));
}

#[test]
fn a_card_that_is_not_an_object_or_not_valid_is_refused_before_canon() {
    let not_object = answer(plan_runtime_control(
        &call(json!({"action": "send_card"}), canon_ctx()),
        None,
        0,
    ));
    assert_eq!(not_object["error"], CARD_NOT_OBJECT);
    let invalid = answer(plan_runtime_control(
        &call(
            json!({"action": "send_card", "card": {"schema": "canon.card.v1"}}),
            canon_ctx(),
        ),
        None,
        0,
    ));
    let first = canon_cards::validate_card(&json!({"schema": "canon.card.v1"})).errors[0].clone();
    assert_eq!(
        invalid["error"],
        format!("Invalid canon.card.v1: {first}. Fix the card structure before retrying; do NOT resend the same payload — it will fail identically.")
    );
}

#[test]
fn a_card_goes_to_the_triggering_human_with_its_deadline_and_ids() {
    let i = interaction(plan_runtime_control(
        &call(
            json!({"action": "request_card", "card": valid_card(true), "timeoutSeconds": 60,
                   "cardId": "card-7", "turnId": "t-1", "responseUserId": "h-mallory"}),
            canon_ctx(),
        ),
        None,
        1_000,
    ));
    let body = i.request.to_body();
    assert_eq!(body["interactionKind"], "card");
    assert_eq!(body["conversationId"], "c-1");
    assert_eq!(body["cardId"], "card-7");
    assert_eq!(body["expiresAt"], 61_000);
    assert_eq!(body["turnId"], "t-1");
    // The model's responseUserId is ignored; the trusted human is asked.
    assert_eq!(body["responseUserId"], "h-alice");
    assert_eq!(i.responder.as_deref(), Some("h-alice"));
    assert!(i.has_actions);
}

#[test]
fn send_card_and_cards_without_actions_are_displayed_without_waiting() {
    for (action, with_actions) in [("send_card", true), ("request_card", false)] {
        let i = interaction(plan_runtime_control(
            &call(
                json!({"action": action, "card": valid_card(with_actions)}),
                canon_ctx(),
            ),
            None,
            0,
        ));
        let got = match i.after_create(Ok(&created(
            json!({"cardId": "card-1", "messageId": "m-9", "responseUserId": "h-alice"}),
        ))) {
            AfterCreate::Answer(text) => serde_json::from_str::<Value>(&text).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            got,
            json!({"success": true, "status": "displayed", "conversationId": "c-1",
                   "cardId": "card-1", "responseUserId": "h-alice",
                   "request": {"cardId": "card-1", "messageId": "m-9", "responseUserId": "h-alice"}})
        );
    }
}

#[test]
fn an_interactive_card_waits_under_canons_card_id_and_fails_without_one() {
    let i = interaction(plan_runtime_control(
        &call(
            json!({"action": "request_card", "card": valid_card(true)}),
            canon_ctx(),
        ),
        None,
        0,
    ));
    match i.after_create(Ok(&created(json!({"cardId": " card-srv "})))) {
        AfterCreate::Wait(consume) => {
            assert_eq!(consume.id, "card-srv");
            assert_eq!(consume.kind, InteractionKind::Card);
        }
        other => panic!("{other:?}"),
    }
    // Canon's `interactive: false` wins over the actions block.
    assert!(matches!(
        i.after_create(Ok(&created(json!({"cardId": "x", "interactive": false})))),
        AfterCreate::Answer(_)
    ));
    match i.after_create(Ok(&created(json!({})))) {
        AfterCreate::Answer(text) => assert_eq!(text, failure(NO_CARD_ID)),
        other => panic!("{other:?}"),
    }
    match i.after_create(Err("Canon API returned 403: no")) {
        AfterCreate::Answer(text) => assert_eq!(text, failure("Canon API returned 403: no")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_card_answer_must_come_from_the_human_asked() {
    let i = interaction(plan_runtime_control(
        &call(
            json!({"action": "request_card", "card": valid_card(true)}),
            canon_ctx(),
        ),
        None,
        0,
    ));
    let made = created(json!({"cardId": "card-1", "responseUserId": "h-alice"}));
    let ok = i.after_wait(
        &made,
        WaitOutcome::Answered(result(
            json!({"status": "submitted", "actionId": "ok", "values": {}, "respondedBy": "h-alice"}),
        )),
    );
    assert_eq!(
        serde_json::from_str::<Value>(&ok).unwrap(),
        json!({"success": true, "status": "submitted", "actionId": "ok", "values": {},
               "respondedBy": "h-alice", "conversationId": "c-1", "responseUserId": "h-alice"})
    );
    let other = i.after_wait(
        &made,
        WaitOutcome::Answered(result(
            json!({"status": "submitted", "respondedBy": "h-bob"}),
        )),
    );
    assert_eq!(other, failure(DIFFERENT_HUMAN));
    let anonymous = i.after_wait(
        &made,
        WaitOutcome::Answered(result(json!({"status": "submitted"}))),
    );
    assert_eq!(anonymous, failure(NO_RESPONDER_IDENTITY));
    let timeout = i.after_wait(&made, WaitOutcome::TimedOut);
    assert_eq!(
        serde_json::from_str::<Value>(&timeout).unwrap(),
        json!({"success": true, "status": "timeout", "conversationId": "c-1", "cardId": "card-1"})
    );
    assert_eq!(
        i.after_wait(
            &made,
            WaitOutcome::Failed("Canon API returned 500: x".into())
        ),
        failure("Canon API returned 500: x")
    );
}

#[test]
fn inputs_need_an_id_and_secret_kinds_go_to_the_owner() {
    let missing = answer(plan_runtime_control(
        &call(
            json!({"action": "request_input", "prompt": "Name?"}),
            canon_ctx(),
        ),
        None,
        0,
    ));
    assert_eq!(missing["error"], MISSING_INPUT_ID);
    let asked = interaction(plan_runtime_control(
        &call(
            json!({"action": "request_input", "inputId": "q1", "prompt": "Colour?", "title": " ",
                   "choices": [{"label": "Red"}, {"text": "Blue", "value": "blue"}, {}]}),
            canon_ctx(),
        ),
        None,
        0,
    ));
    let body = asked.request.to_body();
    assert_eq!(body["kind"], "clarify");
    assert_eq!(body["responseUserId"], "h-alice");
    assert_eq!(body["prompt"], "Colour?");
    assert!(body.get("title").is_none(), "{body}");
    assert_eq!(
        body["choices"],
        json!([{"label": "Red", "value": "Red"}, {"label": "Blue", "value": "blue"}])
    );
    for args in [
        json!({"action": "request_input", "inputId": "q2", "kind": "secret"}),
        json!({"action": "request_input", "inputId": "q2", "kind": "sudo"}),
        json!({"action": "request_input", "inputId": "q2", "sensitive": true}),
        json!({"action": "request_input", "inputId": "q2",
               "questions": [{"id": "pw", "isSecret": true}]}),
    ] {
        let i = interaction(plan_runtime_control(&call(args, canon_ctx()), None, 0));
        assert_eq!(i.responder, None);
        assert!(i.request.to_body().get("responseUserId").is_none());
    }
    assert!(matches!(
        asked.after_create(Ok(&created(json!({"messageId": "m-2"})))),
        AfterCreate::Wait(ref c) if c.id == "q1"
    ));
    let done = asked.after_wait(
        &created(json!({})),
        WaitOutcome::Answered(result(json!({"status": "submitted", "value": "blue"}))),
    );
    assert_eq!(
        serde_json::from_str::<Value>(&done).unwrap(),
        json!({"success": true, "status": "submitted", "value": "blue", "conversationId": "c-1"})
    );
}

#[test]
fn no_reply_is_the_turn_machines_and_approvals_go_to_the_detached_registry() {
    assert_eq!(
        plan_runtime_control(&call(json!({"action": "no_reply"}), canon_ctx()), None, 0),
        Plan::NoReply
    );
    let request = plan_runtime_control(
        &call(
            json!({"action": "request_approval", "question": "Pay?"}),
            canon_ctx(),
        ),
        None,
        0,
    );
    assert!(
        matches!(&request, Plan::Detached(call) if matches!(**call, crate::detached::DetachedCall::Request(_))),
        "{request:?}"
    );
    let check = answer(plan_runtime_control(
        &call(json!({"action": "check_approval"}), canon_ctx()),
        None,
        0,
    ));
    assert_eq!(check["error"], crate::detached::TOOL_ID_REQUIRED);
}

#[test]
fn the_manifest_lists_the_tool_with_its_schema() {
    let tools = manifest_tools();
    assert_eq!(tools[0]["name"], RUNTIME_CONTROL_TOOL);
    assert_eq!(tools[0]["toolset"], TOOLSET);
    assert_eq!(tools[0]["schema"]["name"], RUNTIME_CONTROL_TOOL);
    assert_eq!(
        tools[0]["schema"]["parameters"]["properties"]["action"]["enum"],
        json!([
            "request_card",
            "send_card",
            "request_input",
            "request_approval",
            "check_approval",
            "check_card",
            "no_reply"
        ])
    );
    assert!(tools[0]["description"]
        .as_str()
        .unwrap()
        .contains("no_reply ends this turn without posting"));
}

#[test]
fn card_helpers_check_the_card_then_its_actions_then_the_turn() {
    let plan = |helper, args: Value, ctx: TurnContext| plan_card_helper(helper, &args, &ctx, 0);
    let request = CardHelper::RequestForCurrentHuman;
    let send = CardHelper::SendToCurrentConversation;
    assert_eq!(
        plan(request, json!({"card": 3}), canon_ctx()).unwrap_err(),
        CARD_NOT_OBJECT
    );
    // Every validator error, joined, before anything about the turn.
    let broken = json!({"schema": "canon.card.v1"});
    let errors = canon_cards::validate_card(&broken).errors;
    assert!(errors.len() > 1, "{errors:?}");
    assert_eq!(
        plan(request, json!({"card": broken}), TurnContext::default()).unwrap_err(),
        format!("Invalid canon.card.v1: {}", errors.join("; "))
    );
    assert_eq!(
        plan(request, json!({"card": valid_card(false)}), canon_ctx()).unwrap_err(),
        HELPER_NEEDS_ACTIONS
    );
    assert_eq!(
        plan(send, json!({"card": valid_card(true)}), canon_ctx()).unwrap_err(),
        HELPER_NEEDS_ACTIONLESS
    );
    assert_eq!(
        plan(
            request,
            json!({"card": valid_card(true)}),
            TurnContext::default()
        )
        .unwrap_err(),
        crate::api::NO_CANON_CONVERSATION
    );
    let anonymous = TurnContext {
        user_id: None,
        ..canon_ctx()
    };
    assert_eq!(
        plan(
            request,
            json!({"card": valid_card(true)}),
            anonymous.clone()
        )
        .unwrap_err(),
        crate::api::NO_TRUSTED_HUMAN
    );
    // Sending needs a Canon turn, not a human, and asks nobody.
    let shown = plan(send, json!({"card": valid_card(false)}), anonymous).unwrap();
    assert_eq!(shown.responder, None);
    assert_eq!(shown.action, InteractionAction::SendCard);
    let asked = plan(
        request,
        json!({"card": valid_card(true), "timeout_seconds": 9999, "native": {"k": "v"}}),
        canon_ctx(),
    )
    .unwrap();
    let body = asked.request.to_body();
    assert_eq!(body["responseUserId"], "h-alice");
    assert_eq!(body["expiresAt"], 1_800_000);
    assert_eq!(body["native"], json!({"k": "v"}));
    assert!(asked.strict_responder);
}

#[test]
fn a_card_helper_refuses_a_responder_canon_changed_and_returns_fields_without_success() {
    let asked = plan_card_helper(
        CardHelper::RequestForCurrentHuman,
        &json!({"card": valid_card(true)}),
        &canon_ctx(),
        0,
    )
    .unwrap();
    match asked.after_create(Ok(&created(
        json!({"cardId": "c", "responseUserId": "h-bob"}),
    ))) {
        AfterCreate::Answer(text) => assert_eq!(text, failure(OTHER_RESPONDER)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        asked.after_create(Ok(&created(
            json!({"cardId": "c", "responseUserId": "h-alice"})
        ))),
        AfterCreate::Wait(_)
    ));
    assert_eq!(
        envelope_to_api(r#"{"success":true,"status":"displayed"}"#),
        Ok(json!({"status": "displayed"}))
    );
    assert_eq!(envelope_to_api(&failure("boom")), Err("boom".to_owned()));
}
