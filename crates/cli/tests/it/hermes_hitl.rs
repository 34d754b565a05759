//! Human in the loop end to end with a real Hermes gateway (scenario in `hermes_support.rs`):
//! a clarify and an exec approval answered in Canon.
//!
//! | scenario | spec |
//! |---|---|
//! | clarify answered in Canon reaches the model; `waiting_input` then `tool` | runtime-control.md §6.4, turns.md §7.8 |
//! | dangerous command approved (runs) or denied (does not) in Canon | runtime-control.md §6.5, hermes-host.md §13.2, Q2, Q10 |

use std::time::Duration;

use canon_sim::control::Injection;
use canon_sim::{DEFAULT_AGENT, DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};

use super::gateway_support::GatewayOptions;
use super::hermes_support::{is_turn_complete, live_clock_config, state_sequence, Scenario};

impl Scenario {
    /// Asserts the turn in the direct conversation published `waiting_input`, then `tool`, and
    /// ended with exactly one `turn_complete`.
    fn assert_hitl_turn(&self) {
        let turns = self.turn_history(DEFAULT_CONVERSATION);
        let states = state_sequence(&turns);
        let waiting = states
            .iter()
            .position(|s| s == "waiting_input")
            .unwrap_or_else(|| self.fail("no waiting_input state"));
        assert_eq!(
            states.get(waiting + 1).map(String::as_str),
            Some("tool"),
            "{states:?}"
        );
        assert_eq!(
            states.last().map(String::as_str),
            Some("completed"),
            "{states:?}"
        );
        let turn_id = turns[0]["turnId"].clone();
        assert!(turns.iter().all(|t| t["turnId"] == turn_id), "{turns:#?}");
        let finals: Vec<Value> = self
            .agent_messages(DEFAULT_CONVERSATION)
            .into_iter()
            .filter(is_turn_complete)
            .collect();
        assert_eq!(finals.len(), 1, "{finals:#?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_clarify_is_answered_through_canon() {
    let sc = Scenario::start_full(
        live_clock_config(),
        json!([
            {"match": {"role": "user", "contains": "CLARIFY"},
             "reply": {"toolCall": {"name": "clarify",
                                    "arguments": {"question": "Which colour?",
                                                  "choices": ["Red", "Blue"]},
                                    "id": "call_clarify_1"}}},
            {"match": {"role": "tool"}, "reply": {"echoToolResult": true, "prefix": "Noted: "}},
            {"match": {}, "reply": {"text": "unexpected"}},
        ]),
        GatewayOptions::default(),
        |_| {},
        |_| {},
    )
    .await;
    sc.inject(Injection {
        text: Some("CLARIFY the colour".into()),
        ..Injection::default()
    });

    // Canon shows the clarify to the human who asked (runtime-control.md §6.4).
    let input = sc.wait_interaction("input").await;
    let request = &input.request;
    assert_eq!(request["kind"], "clarify", "{request:#}");
    assert_eq!(request["title"], "Clarification needed");
    assert_eq!(request["prompt"], "Which colour?");
    assert_eq!(
        request["choices"],
        json!([{"label": "Red", "value": "Red"}, {"label": "Blue", "value": "Blue"}])
    );
    assert_eq!(request["responseUserId"], DEFAULT_OWNER);
    assert_eq!(request["native"]["runtime"], "hermes");
    assert_eq!(request["native"]["method"], "clarify");
    assert_eq!(request["native"]["requestId"], input.id.as_str());
    assert!(
        request["native"]["sessionKey"]
            .as_str()
            .is_some_and(|k| k.contains(DEFAULT_CONVERSATION)),
        "{request:#}"
    );
    sc.wait("waiting_input", |s| {
        s.turn_history
            .iter()
            .any(|t| t["agent"] == DEFAULT_AGENT && t["state"] == "waiting_input")
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
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The answer reached the model as the clarify tool's result.
    let result = sc.tool_message("call_clarify_1");
    assert!(result.contains("Blue"), "{result}");
    assert!(!result.contains("did not respond"), "{result}");
    sc.assert_hitl_turn();
}

/// A scratch directory the approved command deletes, and the command.
fn scratch_command() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let dir = tempfile::tempdir().expect("scratch dir");
    let target = dir.path().join("scratch");
    std::fs::create_dir_all(target.join("inner")).expect("mkdir");
    std::fs::write(target.join("inner/file.txt"), "x").expect("write");
    let command = format!("rm -rf {}", target.display());
    (dir, target, command)
}

/// The model runs `command` with Hermes' terminal tool, then echoes the tool result.
fn terminal_rules(command: &str) -> Value {
    json!([
        {"match": {"role": "user", "contains": "DANGER"},
         "reply": {"toolCall": {"name": "terminal", "arguments": {"command": command},
                                "id": "call_terminal_1"}}},
        {"match": {"role": "tool"}, "reply": {"echoToolResult": true, "prefix": "Ran: "}},
        {"match": {}, "reply": {"text": "unexpected"}},
    ])
}

/// Answers the agent's exec approval with `decision` and waits for the turn to close.
async fn answer_exec_approval(sc: &Scenario, command: &str, decision: &str) {
    let approval = sc.wait_interaction("approval").await;
    let request = &approval.request;
    assert_eq!(request["toolName"], "Command", "{request:#}");
    assert_eq!(
        request["details"][0],
        json!({"label": "Command", "value": command, "monospace": true})
    );
    assert_eq!(request["details"][1]["label"], "Reason");
    assert_eq!(request["responseUserId"], DEFAULT_OWNER);
    assert_eq!(request["allowSessionRule"], true);
    assert_eq!(request["native"]["method"], "exec_approval");
    assert_eq!(request["native"]["requestId"], approval.id.as_str());
    // Hermes' own approvals.timeout (60 s by default)
    // bounds the Canon deadline (hermes-host.md Q10).
    let span = approval.expires_at.saturating_sub(sc.sim.now_ms());
    assert!(span <= 61_000, "{span}");
    sc.wait("waiting_input", |s| {
        s.turn_history
            .iter()
            .any(|t| t["agent"] == DEFAULT_AGENT && t["state"] == "waiting_input")
    })
    .await;
    sc.sim
        .respond_interaction(&canon_sim::interactions::Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "approval".into(),
            id: approval.id.clone(),
            decision: Some(decision.into()),
            ..Default::default()
        })
        .expect("answered");
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Hermes took the Canon path, not its text fallback (hermes-host.md §13.2).
    let log = std::fs::read_to_string(sc.gateway.home.path().join("logs/gateway.log"))
        .unwrap_or_default();
    assert!(
        !format!("{}{log}", sc.gateway.output()).contains("falling back to text"),
        "{}",
        sc.gateway.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_dangerous_command_runs_after_canon_approval() {
    let (_dir, target, command) = scratch_command();
    let sc = Scenario::start_full(
        live_clock_config(),
        terminal_rules(&command),
        GatewayOptions::default(),
        |_| {},
        |_| {},
    )
    .await;
    sc.inject(Injection {
        text: Some("DANGER clean up".into()),
        ..Injection::default()
    });
    answer_exec_approval(&sc, &command, "allow").await;

    assert!(!target.exists(), "the approved command ran");
    let result = sc.tool_message("call_terminal_1");
    assert!(!result.to_lowercase().contains("denied"), "{result}");
    sc.assert_hitl_turn();
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_dangerous_command_denied_in_canon_does_not_run() {
    let (_dir, target, command) = scratch_command();
    let sc = Scenario::start_full(
        live_clock_config(),
        terminal_rules(&command),
        GatewayOptions::default(),
        |_| {},
        |_| {},
    )
    .await;
    sc.inject(Injection {
        text: Some("DANGER clean up".into()),
        ..Injection::default()
    });
    answer_exec_approval(&sc, &command, "deny").await;

    assert!(target.exists(), "the denied command did not run");
    let result = sc.tool_message("call_terminal_1");
    assert!(result.to_lowercase().contains("denied"), "{result}");
    sc.assert_hitl_turn();
}
