//! Detached approvals end to end (approvals.md §9–§16; scenario in `hermes_support.rs`): the
//! scripted model or a domain plugin asks for an approval and goes on; a human answers in
//! canon-sim, maybe while the gateway is stopped; the decision comes back as exactly one wake
//! turn, and `check_approval` afterwards answers from the registry without asking Canon again.
//! Counts come from the simulator's journal and the model's request log.
//!
//! | scenario | spec |
//! |---|---|
//! | answered while the gateway is stopped: one wake after the restart, then the cached decision; a check from another conversation refused | approvals.md §9, §11, §13, §14.1, Q3 |
//! | answered while running: the receipt wakes once; a domain plugin's token from another conversation is refused before Canon | approvals.md §12, §13, runtime-control.md §7.7–§7.8 |

use std::path::{Path, PathBuf};
use std::time::Duration;

use canon_sim::control::Injection;
use canon_sim::{DEFAULT_AGENT, DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};

use super::gateway_support::{restart_gateway, GatewayOptions, TURN};
use super::hermes_support::{live_clock_config, model_server, Scenario};
use super::hermes_turns::{create_group, GROUP};

/// The approval's question; the wake text ends with it.
const QUESTION: &str = "Pay invoice 12345 for 8,200 ILS?";

pub(super) fn tool_rule(keyword: &str, id: &str, args: Value) -> Value {
    json!({"match": {"role": "user", "contains": keyword},
           "reply": {"toolCall": {"name": "canon_runtime_control", "arguments": args, "id": id}}})
}

pub(super) fn echo_rule() -> Value {
    json!({"match": {"role": "tool"}, "reply": {"echoToolResult": true, "prefix": "Tool said: "}})
}

/// The wake turn's answer.
fn wake_rule() -> Value {
    json!({"match": {"role": "user", "contains": "Canon approval hermes-"},
           "reply": {"text": "Decision noted."}})
}

pub(super) fn fallback_rule() -> Value {
    json!({"match": {}, "reply": {"text": "unexpected"}})
}

/// `<HOME>/.canon/detached-approvals.json` of the scenario's gateway.
fn registry_path(sc: &Scenario) -> PathBuf {
    sc.gateway
        .home
        .path()
        .join(".canon/detached-approvals.json")
}

fn registry_entry(path: &Path, id: &str) -> Value {
    let text = std::fs::read_to_string(path).expect("the registry file");
    let registry: Value = serde_json::from_str(&text).expect("the registry is JSON");
    registry[id].clone()
}

/// How many consume calls reached Canon.
fn consumes(sc: &Scenario) -> usize {
    sc.sim
        .journal(0, Some("/runtime-interaction/consume"))
        .into_iter()
        .filter(|e| e.method == "POST")
        .count()
}

/// The model requests whose last message is a user message containing `text`: the turns Hermes
/// ran for it.
pub(super) fn turns_for(sc: &Scenario, text: &str) -> usize {
    sc.model
        .requests()
        .iter()
        .filter(|r| {
            r["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| {
                    m["role"] == "user" && m["content"].as_str().is_some_and(|c| c.contains(text))
                })
        })
        .count()
}

/// Waits for the tool result of `call_id`, parsed.
pub(super) async fn tool_result(sc: &Scenario, call_id: &str) -> Value {
    let deadline = std::time::Instant::now() + TURN;
    loop {
        let found = sc
            .model
            .requests()
            .iter()
            .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
            .and_then(|m| m["content"].as_str().map(str::to_owned));
        if let Some(found) = found {
            return serde_json::from_str(&found).unwrap_or_else(|_| sc.fail(&found));
        }
        if std::time::Instant::now() > deadline {
            sc.fail(&format!("no result for {call_id}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until Hermes ran a turn for a user message containing `text`.
pub(super) async fn wait_turn_for(sc: &Scenario, text: &str) {
    let deadline = std::time::Instant::now() + TURN;
    while turns_for(sc, text) == 0 {
        if std::time::Instant::now() > deadline {
            sc.fail(&format!("no turn for {text:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn agent_texts(sc: &Scenario, conversation: &str) -> Vec<String> {
    sc.agent_messages(conversation)
        .iter()
        .filter_map(|m| m["text"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_approval_answered_while_stopped_wakes_once_after_the_restart() {
    let mut sc = Scenario::start_full(
        live_clock_config(),
        json!([
            echo_rule(),
            tool_rule(
                "PAY",
                "call_pay",
                json!({
                "action": "request_approval", "title": "Pay", "question": QUESTION,
                "context": {"invoice": "12345", "amount": 8200}, "options": ["Pay now", "Wait"],
                "timeoutSeconds": 3600})
            ),
            wake_rule(),
            fallback_rule(),
        ]),
        GatewayOptions::default(),
        create_group,
        |_| {},
    )
    .await;
    sc.inject(Injection {
        text: Some("PAY the invoice".into()),
        ..Injection::default()
    });
    let asked = tool_result(&sc, "call_pay").await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    assert_eq!(asked["success"], true, "{asked}");
    assert_eq!(asked["status"], "pending", "{asked}");
    assert_eq!(asked["conversationId"], DEFAULT_CONVERSATION);
    assert_eq!(asked["responseUserId"], DEFAULT_OWNER, "{asked}");
    assert_eq!(
        asked["note"],
        "Approval requested. Do NOT block on it: the decision will arrive as a system message when the owner responds, or poll it later with action 'check_approval'."
    );
    let id = asked["approvalId"]
        .as_str()
        .unwrap_or_else(|| sc.fail("an approval id"))
        .to_owned();
    assert!(id.starts_with("hermes-"), "{id}");
    // What Canon was asked (approvals.md §9.3): the routing, no session rule, the details.
    let stored = sc.sim.read_state(|s| {
        s.interactions
            .values()
            .find(|i| i.kind == "approval" && i.id == id)
            .cloned()
    });
    let stored = stored.unwrap_or_else(|| sc.fail("the approval is in Canon"));
    assert_eq!(stored.request["toolName"], "Pay");
    assert_eq!(stored.request["toolSummary"], QUESTION);
    assert_eq!(stored.request["allowSessionRule"], false);
    assert_eq!(
        stored.request["details"],
        json!([{"label": "invoice", "value": "12345"}, {"label": "amount", "value": "8200"},
               {"label": "Options", "value": "Pay now, Wait"}])
    );
    assert_eq!(stored.response_user_id.as_deref(), Some(DEFAULT_OWNER));
    let registry = registry_path(&sc);
    assert_eq!(registry_entry(&registry, &id)["status"], "pending");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&registry)
            .expect("registry")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the registry is private");
    }

    // The gateway stops; the owner answers; the gateway starts again with a model that can
    // check this approval by id, here and from another conversation.
    sc.gateway.stop();
    sc.sim
        .respond_interaction(&canon_sim::interactions::Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "approval".into(),
            id: id.clone(),
            decision: Some("allow".into()),
            ..Default::default()
        })
        .expect("answered");
    let consumed_before = consumes(&sc);
    let model = model_server(json!([
        echo_rule(),
        tool_rule(
            "CHECK",
            "call_check",
            json!({"action": "check_approval", "approvalId": id})
        ),
        tool_rule(
            "PEEK",
            "call_peek",
            json!({"action": "check_approval", "approvalId": id})
        ),
        wake_rule(),
        fallback_rule(),
    ]))
    .await;
    let old_model = std::mem::replace(&mut sc.model, model);
    let old_gateway = std::mem::replace(&mut sc.gateway, placeholder_gateway());
    sc.gateway = tokio::task::block_in_place(|| {
        restart_gateway(
            old_gateway,
            &sc.sim,
            &old_model,
            &sc.model,
            &GatewayOptions::default(),
        )
    });
    tokio::task::block_in_place(|| sc.gateway.wait_settled());

    let wake = format!("Canon approval {id} resolved: allow \u{2014} {QUESTION}");
    wait_turn_for(&sc, &wake).await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    sc.wait("the wake delivered", |_| {
        registry_entry(&registry, &id)["wakeStatus"] == "delivered"
    })
    .await;
    let entry = registry_entry(&registry, &id);
    assert_eq!(entry["status"], "resolved", "{entry:#}");
    assert_eq!(entry["decision"], "allow", "{entry:#}");
    assert_eq!(entry["respondedBy"], DEFAULT_OWNER, "{entry:#}");
    assert_eq!(
        consumes(&sc),
        consumed_before + 1,
        "one consume at reconcile"
    );

    // The decision comes from the registry now: no further consume.
    sc.inject(Injection {
        text: Some("CHECK it".into()),
        ..Injection::default()
    });
    let checked = tool_result(&sc, "call_check").await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    assert_eq!(
        checked,
        json!({"success": true, "status": "resolved", "decision": "allow", "approvalId": id,
               "conversationId": DEFAULT_CONVERSATION, "respondedBy": DEFAULT_OWNER})
    );
    // A turn of another conversation cannot read it (approvals.md Q3).
    sc.inject(Injection {
        conversation_id: Some(GROUP.into()),
        text: Some("@Hermes PEEK at it".into()),
        mentions: vec![DEFAULT_AGENT.into()],
        ..Injection::default()
    });
    let peeked = tool_result(&sc, "call_peek").await;
    sc.wait_turn_closed(GROUP).await;
    assert_eq!(
        peeked,
        json!({"error": "Detached approval belongs to a different Canon conversation",
               "success": false})
    );
    assert_eq!(
        consumes(&sc),
        consumed_before + 1,
        "checks never consume again"
    );
    // Exactly one wake turn, and one answer to it.
    assert_eq!(turns_for(&sc, &wake), 1);
    let noted = agent_texts(&sc, DEFAULT_CONVERSATION)
        .iter()
        .filter(|t| t.as_str() == "Decision noted.")
        .count();
    assert_eq!(noted, 1, "{:?}", agent_texts(&sc, DEFAULT_CONVERSATION));
}

/// A stand-in for the gateway moved out of a scenario while it restarts: an already finished
/// process, so dropping it stops nothing.
fn placeholder_gateway() -> super::gateway_support::Gateway {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("true runs");
    let _ = child.wait();
    super::gateway_support::Gateway {
        child,
        home: tempfile::tempdir().expect("scratch dir"),
    }
}

/// A Hermes plugin whose `canon_approval_probe` tool runs the detached-approval helpers as the
/// file `CANON_APPROVAL_PROBE_IN` says (`{"mode": "request"}` or `{"mode": "check", "id": …}`)
/// and appends what they returned or raised to `CANON_APPROVAL_PROBE_OUT`.
const APPROVAL_PROBE_PLUGIN: &str = r#"import asyncio, json, os

SCHEMA = {"name": "canon_approval_probe", "description": "Exercise the Canon approval helpers.",
          "parameters": {"type": "object", "properties": {}}}


def probe(args, **kwargs):
    import canon_hermes_plugin as api
    with open(os.environ["CANON_APPROVAL_PROBE_IN"]) as f:
        order = json.load(f)
    record = {"mode": order["mode"]}
    try:
        if order["mode"] == "request":
            record["health"] = api.current_canon_runtime_health()
            record["value"] = asyncio.run(api.request_detached_approval_for_current_human(
                title="Deploy", question="Approve the deploy?", timeout_seconds=600))
        else:
            record["value"] = asyncio.run(api.check_detached_approval(order["id"]))
    except Exception as exc:
        record["error"] = "%s: %s" % (type(exc).__name__, exc)
    with open(os.environ["CANON_APPROVAL_PROBE_OUT"], "a") as out:
        out.write(json.dumps(record) + "\n")
    return json.dumps({"done": True})


def register(ctx):
    ctx.register_tool(name="canon_approval_probe", toolset="canon", schema=SCHEMA, handler=probe,
                      description=SCHEMA["description"])
"#;

fn add_approval_probe(hermes_home: &Path) {
    super::hermes_api::add_domain_plugin(
        hermes_home,
        "canon-approval-probe",
        APPROVAL_PROBE_PLUGIN,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_receipt_wakes_once_and_a_token_from_another_conversation_is_refused() {
    let scratch = tempfile::tempdir().expect("scratch");
    let (order, out) = (
        scratch.path().join("order.json"),
        scratch.path().join("probe.jsonl"),
    );
    let options = GatewayOptions {
        env: vec![
            (
                "CANON_APPROVAL_PROBE_IN".to_owned(),
                order.display().to_string(),
            ),
            (
                "CANON_APPROVAL_PROBE_OUT".to_owned(),
                out.display().to_string(),
            ),
        ],
        ..GatewayOptions::default()
    };
    let sc = Scenario::start_full(
        live_clock_config(),
        json!([
            {"match": {"role": "user", "contains": "PROBE"},
             "reply": {"toolCall": {"name": "canon_approval_probe", "arguments": {}}}},
            {"match": {"role": "tool"}, "reply": {"text": "Probed."}},
            wake_rule(),
            fallback_rule(),
        ]),
        options,
        create_group,
        add_approval_probe,
    )
    .await;
    let records = || -> Vec<Value> {
        std::fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON record"))
            .collect()
    };
    // The `n`-th record (from 1), once the probe wrote it.
    let record = |n: usize| {
        let records = &records;
        let sc = &sc;
        async move {
            let deadline = std::time::Instant::now() + TURN;
            loop {
                if let Some(found) = records().get(n - 1) {
                    return found.clone();
                }
                if std::time::Instant::now() > deadline {
                    sc.fail(&format!("no probe record {n}"));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };

    std::fs::write(&order, r#"{"mode": "request"}"#).expect("order");
    sc.inject(Injection {
        text: Some("PROBE request".into()),
        ..Injection::default()
    });
    let asked = record(1).await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    // Inside the turn, the daemon reports it healthy (durable-endpoint.md §11.1).
    assert_eq!(
        asked["health"],
        json!({"adapterCount": 1, "transportConnected": true, "openTurnCount": 1,
               "boundNativeTurnCount": 1, "orphanedTurnCount": 0, "activeTurnBound": true,
               "code": null, "eventGap": null}),
        "{asked:#}"
    );
    let value = &asked["value"];
    assert_eq!(value["status"], "pending", "{asked:#}");
    assert!(value.get("success").is_none(), "{asked:#}");
    assert_eq!(value["responseUserId"], DEFAULT_OWNER, "{asked:#}");
    let id = value["approvalId"].as_str().expect("an id").to_owned();

    // The owner denies while the gateway runs: the receipt wakes the agent once.
    sc.sim
        .respond_interaction(&canon_sim::interactions::Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "approval".into(),
            id: id.clone(),
            decision: Some("deny".into()),
            ..Default::default()
        })
        .expect("answered");
    let wake = format!("Canon approval {id} resolved: deny \u{2014} Approve the deploy?");
    wait_turn_for(&sc, &wake).await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    let registry = registry_path(&sc);
    sc.wait("the wake delivered", |_| {
        registry_entry(&registry, &id)["wakeStatus"] == "delivered"
    })
    .await;
    assert_eq!(consumes(&sc), 1, "the receipt's consume");

    // From the group, the token is refused before any lease, write or Canon call.
    let before = std::fs::read(&registry).expect("registry bytes");
    let journal_before = sc.sim.journal(0, None).len();
    std::fs::write(&order, json!({"mode": "check", "id": id}).to_string()).expect("order");
    sc.inject(Injection {
        conversation_id: Some(GROUP.into()),
        text: Some("@Hermes PROBE check".into()),
        mentions: vec![DEFAULT_AGENT.into()],
        ..Injection::default()
    });
    let refused = record(2).await;
    sc.wait_turn_closed(GROUP).await;
    assert_eq!(
        refused["error"],
        "PermissionError: Detached approval belongs to a different Canon conversation",
        "{refused:#}"
    );
    assert_eq!(std::fs::read(&registry).expect("registry bytes"), before);
    let interaction_calls = sc
        .sim
        .journal(0, None)
        .into_iter()
        .skip(journal_before)
        .filter(|e| e.path.starts_with("/runtime-interaction"))
        .count();
    assert_eq!(interaction_calls, 0, "no Canon call for a foreign token");

    // In its own conversation the decision is the cached one.
    sc.inject(Injection {
        text: Some("PROBE check".into()),
        ..Injection::default()
    });
    let checked = record(3).await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    assert_eq!(
        checked["value"],
        json!({"status": "resolved", "decision": "deny", "approvalId": id,
               "conversationId": DEFAULT_CONVERSATION, "respondedBy": DEFAULT_OWNER}),
        "{checked:#}"
    );
    assert_eq!(consumes(&sc), 1);
    assert_eq!(turns_for(&sc, &wake), 1, "one wake turn");
}

/// Figures for the closing note of the durable-approvals work: receipt → wake turn, from the
/// moment the human's answer is stored in canon-sim (its receipt goes out on the stream) to the
/// wake turn's request reaching the scripted model, over 12 approvals answered one after the
/// other in one gateway. Prints the median and the worst (p99 of 12); asserts only that every
/// answer woke exactly one turn. Resolution: the 2 ms poll of the model's request log.
#[tokio::test(flavor = "multi_thread")]
#[allow(clippy::print_stderr)] // the figures are this test's output, shown with --nocapture
async fn real_gateway_receipt_to_wake_turn_figures() {
    let sc = Scenario::start_full(
        live_clock_config(),
        json!([
            echo_rule(),
            {"match": {"role": "user", "contains": "PAY"},
             "reply": {"toolCall": {"name": "canon_runtime_control",
                                    "arguments": {"action": "request_approval", "question": QUESTION}}}},
            wake_rule(),
            fallback_rule(),
        ]),
        GatewayOptions::default(),
        |_| {},
        |_| {},
    )
    .await;
    let (mut latencies, mut baseline) = (Vec::new(), Vec::new());
    for n in 0..12 {
        let asked = std::time::Instant::now();
        let text = format!("PAY invoice {n}");
        sc.inject(Injection {
            text: Some(text.clone()),
            ..Injection::default()
        });
        while turns_for(&sc, &text) == 0 {
            assert!(asked.elapsed() < TURN, "no turn for {text}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        baseline.push(asked.elapsed().as_secs_f64() * 1000.0);
        let before = n;
        sc.wait("the approval is asked", move |s| {
            s.interactions
                .values()
                .filter(|i| i.kind == "approval")
                .count()
                > before
        })
        .await;
        sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
        let id = sc.sim.read_state(|s| {
            s.interactions
                .values()
                .find(|i| i.kind == "approval" && i.state == "pending")
                .map(|i| i.id.clone())
                .expect("a pending approval")
        });
        let wake = format!("Canon approval {id} resolved: allow");
        let start = std::time::Instant::now();
        sc.sim
            .respond_interaction(&canon_sim::interactions::Response {
                conversation_id: DEFAULT_CONVERSATION.into(),
                kind: "approval".into(),
                id: id.clone(),
                decision: Some("allow".into()),
                ..Default::default()
            })
            .expect("answered");
        while turns_for(&sc, &wake) == 0 {
            assert!(start.elapsed() < TURN, "no wake turn for {id}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        latencies.push(start.elapsed().as_secs_f64() * 1000.0);
        sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
        assert_eq!(turns_for(&sc, &wake), 1, "{id}");
    }
    let summary = |values: &[f64]| {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        format!(
            "median {:.1} ms, p99 {:.1} ms, all {:?}",
            sorted[sorted.len() / 2],
            sorted[sorted.len() - 1],
            values.iter().map(|l| l.round()).collect::<Vec<_>>()
        )
    };
    eprintln!(
        "receipt -> wake turn at the model, {} approvals: {}; for comparison, a human message -> its turn at the model: {}",
        latencies.len(),
        summary(&latencies),
        summary(&baseline)
    );
}
