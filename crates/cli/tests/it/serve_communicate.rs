//! `canon_communicate` through the real `canon-hermes serve --stdio` binary and the fake shim of
//! `shim_support.rs` (runtime-control.md §5): the `tool.availability` frames the shim's
//! `check_fn` answers from, and Canon's failures as the model gets them (exact texts, the
//! operator-approval result). The gateway scenarios are in `hermes_communicate.rs`.

use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule, MalformedKind};
use canon_sim::{PrincipalSpec, SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::{json, Value};

use super::serve_support::disconnect;
use super::shim_support::{sim, Shim};

/// The next `tool.availability` frame's body.
async fn availability(shim: &mut Shim) -> Value {
    shim.expect("tool.availability").await["body"].clone()
}

fn verdict(available: bool) -> Value {
    json!({"name": "canon_communicate", "available": available})
}

/// Sets the agent's outbound policy in Canon and pushes it in an `agent.context` frame.
fn set_policy(sim: &SimHandle, policy: &str) {
    sim.with_state(|s| {
        if let Some(agent) = s.principals.get_mut(DEFAULT_AGENT) {
            agent.outbound_policy = policy.into();
        }
    });
    sim.push_agent_context(DEFAULT_AGENT);
}

/// A `canon_communicate` call outside any turn; its result string, parsed.
async fn communicate(shim: &mut Shim, args: Value) -> Value {
    let answer = shim
        .request(
            "tool.call",
            json!({"name": "canon_communicate", "args": args, "ctx": {}}),
        )
        .await;
    assert_eq!(answer["ok"], true, "{answer}");
    serde_json::from_str(answer["body"]["result"].as_str().expect("a result")).expect("JSON")
}

fn fault(path: &str, action: FaultAction) -> FaultRule {
    FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            path: Some(path.to_owned()),
            times: Some(1),
            ..FaultMatcher::default()
        },
        action,
        seen: 0,
        fired: 0,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn availability_follows_the_connection_and_every_agent_context() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    // The simulator's agent is open.
    shim.connect(&sim).await;
    assert_eq!(availability(&mut shim).await, verdict(true));
    set_policy(&sim, "closed");
    assert_eq!(availability(&mut shim).await, verdict(false));
    // Closed at call time: refused before the arguments, and nothing reaches Canon.
    assert_eq!(
        communicate(&mut shim, json!({"action": "teleport"})).await,
        json!({"error": "Canon proactive communication is closed", "success": false})
    );
    set_policy(&sim, "approval-required");
    assert_eq!(availability(&mut shim).await, verdict(true));
    disconnect(&mut shim).await;
    assert_eq!(availability(&mut shim).await, verdict(false));
    assert_eq!(
        communicate(&mut shim, json!({"action": "discover_agents"})).await,
        json!({"error": "No unambiguous live Canon adapter owns this turn", "success": false})
    );
    assert!(sim.journal(0, Some("/agent/verbs/")).is_empty());
    assert!(sim.journal(0, Some("/agents/discover")).is_empty());
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn canon_failures_reach_the_model_with_their_exact_texts() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let message = json!({"action": "message_existing", "conversationId": DEFAULT_CONVERSATION,
                         "text": "hi"});

    sim.add_fault(fault(
        "/agent/verbs/send_to",
        FaultAction::Malformed {
            kind: MalformedKind::WrongWire,
        },
    ))
    .expect("a fault");
    assert_eq!(
        communicate(&mut shim, message.clone()).await,
        json!({"error": "Canon verb response has an unexpected wire version", "success": false})
    );

    sim.add_fault(fault(
        "/agent/verbs/send_to",
        FaultAction::Status {
            status: 500,
            body: Some(json!({"error": "boom", "code": "INTERNAL"})),
            retry_after: None,
            headers: Vec::new(),
        },
    ))
    .expect("a fault");
    assert_eq!(
        communicate(&mut shim, message.clone()).await,
        json!({"error": "Canon API returned 500: {\"error\":\"boom\",\"code\":\"INTERNAL\"}",
               "success": false})
    );

    // The operator's approval code maps to a result for the directory too.
    sim.add_fault(fault(
        "/agents/discover",
        FaultAction::Status {
            status: 403,
            body: Some(json!({"error": "ask", "code": "OUTBOUND_APPROVAL_REQUIRED"})),
            retry_after: None,
            headers: Vec::new(),
        },
    ))
    .expect("a fault");
    assert_eq!(
        communicate(&mut shim, json!({"action": "discover_agents"})).await,
        json!({"success": true, "status": "approval_required",
               "reason": "The agent operator must approve this outbound action."})
    );

    sim.create_principal(PrincipalSpec {
        kind: "ai_agent".into(),
        display_name: Some("Herald".into()),
        ..PrincipalSpec::default()
    });
    sim.set_switches(|s| s.malformed_directory = true);
    assert_eq!(
        communicate(
            &mut shim,
            json!({"action": "discover_agents", "query": "Her"})
        )
        .await,
        json!({"error": "Canon returned a malformed agent directory result", "success": false})
    );

    // A contact the agent does not have is Canon's refusal, word for word.
    let shared = communicate(
        &mut shim,
        json!({"action": "share_contact", "conversationId": DEFAULT_CONVERSATION,
               "contactUserId": "h-stranger"}),
    )
    .await;
    assert_eq!(shared["success"], false, "{shared}");
    assert!(
        shared["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("Canon API returned 403: ")
                && e.contains("CONTACT_NOT_SHAREABLE")),
        "{shared}"
    );

    // After all of that a well-formed call still works, once.
    let sent = communicate(&mut shim, message).await;
    assert_eq!(sent["status"], "messaged", "{sent}");
    let verbs = sim
        .journal(0, Some("/agent/verbs/"))
        .into_iter()
        .filter(|e| e.path != "/agent/verbs/no_reply")
        .count();
    assert_eq!(verbs, 4, "one attempt per call");
    assert_eq!(shim.close().await, Some(0));
}

/// A send Canon stored but whose answer was lost (the connection dropped after the commit)
/// reaches the model as an error; the model calls again with the same arguments in the same
/// turn. Both calls carry one idempotency key, derived from the turn and the call, so Canon
/// stores the message once; the same text in a later turn is a new message.
#[tokio::test(flavor = "multi_thread")]
async fn a_send_retried_in_its_turn_after_an_ambiguous_failure_is_stored_once() {
    use super::shim_support::{complete_turn, ctx, open_turn};
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let stored = |sim: &SimHandle, text: &str| {
        sim.read_state(|s| {
            s.messages
                .iter()
                .filter(|m| m.message["text"] == text && m.message["senderId"] == DEFAULT_AGENT)
                .count()
        })
    };
    let call = |text: &str| {
        json!({"name": "canon_communicate", "ctx": ctx(),
               "args": {"action": "message_existing", "conversationId": DEFAULT_CONVERSATION,
                        "text": text}})
    };
    let (event_ref, _) = open_turn(&mut shim, &sim, "tell them").await;
    sim.add_fault(fault("/agent/verbs/send_to", FaultAction::ProcessThenDrop))
        .expect("a fault");
    let first = shim.request("tool.call", call("Heads up")).await;
    let first: Value =
        serde_json::from_str(first["body"]["result"].as_str().expect("a result")).expect("JSON");
    assert_eq!(
        first["success"], false,
        "the model sees the failure: {first}"
    );
    assert_eq!(stored(&sim, "Heads up"), 1, "Canon stored it");
    let again = shim.request("tool.call", call("Heads up")).await;
    let again: Value =
        serde_json::from_str(again["body"]["result"].as_str().expect("a result")).expect("JSON");
    assert_eq!(again["status"], "messaged", "{again}");
    assert_eq!(stored(&sim, "Heads up"), 1, "the retry posted nothing new");
    complete_turn(&mut shim, &event_ref).await;

    let (later, _) = open_turn(&mut shim, &sim, "tell them again").await;
    let next = shim.request("tool.call", call("Heads up")).await;
    assert!(next["body"]["result"]
        .as_str()
        .is_some_and(|r| r.contains("messaged")));
    assert_eq!(stored(&sim, "Heads up"), 2, "another turn, another message");
    complete_turn(&mut shim, &later).await;
    assert_eq!(shim.close().await, Some(0));
}
