//! The scenario of the real-gateway files `hermes_turns.rs`, `hermes_delivery.rs`,
//! `hermes_media.rs`, `hermes_hitl.rs` and `hermes_startup.rs` (hermes-host.md §20; the
//! gateway harness is `gateway_support.rs`): a simulator, a scripted model and a ready gateway,
//! with readers of the simulator's Canon state. Each scenario asserts that state: stored
//! messages with their metadata and client ids, `/streaming` writes, `/runtime/turn` states and
//! the request journal (canon-wire.md §8).

use std::path::Path;

use canon_sim::config::SimConfig;
use canon_sim::control::Injection;
use canon_sim::model::{ModelServer, Script};
use canon_sim::{Sim, SimHandle, State, DEFAULT_AGENT};
use serde_json::{json, Value};

use super::gateway_support::{
    start_gateway_prepared, start_gateway_with, Gateway, GatewayOptions, TURN,
};

pub(crate) async fn model_server(rules: Value) -> ModelServer {
    ModelServer::start(script_of(rules), 0)
        .await
        .expect("the model server starts")
}

fn script_of(rules: Value) -> Script {
    let mut all =
        vec![json!({"match": {"titleRequest": true}, "reply": {"text": "Scripted session"}})];
    all.extend(rules.as_array().cloned().unwrap_or_default());
    Script::parse(&json!({"model": "fake-model", "rules": all}).to_string()).expect("script")
}

/// A simulator, a scripted model and a ready gateway whose daemon holds the Canon stream.
pub(crate) struct Scenario {
    pub(crate) sim: SimHandle,
    pub(crate) model: ModelServer,
    pub(crate) gateway: Gateway,
}

impl Scenario {
    pub(crate) async fn start(rules: Value, options: GatewayOptions) -> Self {
        let sim = Sim::start(SimConfig::for_tests())
            .await
            .expect("the simulator starts");
        let model = model_server(rules).await;
        let gateway = tokio::task::block_in_place(|| start_gateway_with(&sim, &model, &options));
        Self::ready(sim, model, gateway).await
    }

    /// A scenario whose simulator is configured by `config` and `sim_setup` and whose
    /// `HERMES_HOME` is prepared by `home_setup` before the gateway starts.
    pub(crate) async fn start_full(
        config: SimConfig,
        rules: Value,
        options: GatewayOptions,
        sim_setup: impl FnOnce(&SimHandle),
        home_setup: impl FnOnce(&Path),
    ) -> Self {
        let sim = Sim::start(config).await.expect("the simulator starts");
        sim_setup(&sim);
        let model = model_server(rules).await;
        let gateway = tokio::task::block_in_place(|| {
            start_gateway_prepared(&sim, &model, &options, home_setup)
        });
        Self::ready(sim, model, gateway).await
    }

    /// Waits for the startup restore and the daemon's stream.
    pub(crate) async fn ready(sim: SimHandle, model: ModelServer, mut gateway: Gateway) -> Self {
        tokio::task::block_in_place(|| gateway.wait_settled());
        let scenario = Self {
            sim,
            model,
            gateway,
        };
        scenario
            .wait("stream open", |s| !s.open_streams.is_empty())
            .await;
        scenario
    }

    /// Waits for `f`, failing with the sim state and the gateway logs.
    pub(crate) async fn wait(&self, what: &str, f: impl Fn(&State) -> bool) {
        if let Err(e) = self.sim.wait_for(what, TURN, f).await {
            self.fail(&e.to_string());
        }
    }

    /// Fails with the sim's messages and turn records (never its keys or tokens) and the
    /// gateway logs.
    pub(crate) fn fail(&self, why: &str) -> ! {
        let state = self.sim.state();
        panic!(
            "{why}\nsim messages: {:#}\nturn states: {:#}\nmodel requests: {}\n{}",
            state["messages"],
            self.sim
                .read_state(|s| Value::from(s.turn_history.iter().cloned().collect::<Vec<_>>())),
            self.model.requests().len(),
            self.gateway.log_tail()
        );
    }

    pub(crate) fn inject(&self, injection: Injection) -> Value {
        self.sim.inject_message(&injection).expect("inject")
    }

    /// The agent's messages in `conversation`, in order.
    pub(crate) fn agent_messages(&self, conversation: &str) -> Vec<Value> {
        self.sim.read_state(|s| {
            s.messages
                .iter()
                .filter(|m| m.conversation_id == conversation)
                .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
                .map(|m| m.message.clone())
                .collect()
        })
    }

    /// `(client id, message)` of the agent's messages in `conversation`.
    pub(crate) fn agent_messages_with_ids(
        &self,
        conversation: &str,
    ) -> Vec<(Option<String>, Value)> {
        self.sim.read_state(|s| {
            s.messages
                .iter()
                .filter(|m| m.conversation_id == conversation)
                .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
                .map(|m| (m.client_id.clone(), m.message.clone()))
                .collect()
        })
    }

    /// The agent's `/runtime/turn` bodies in `conversation`, in order.
    pub(crate) fn turn_history(&self, conversation: &str) -> Vec<Value> {
        self.sim.read_state(|s| {
            s.turn_history
                .iter()
                .filter(|t| t["conversationId"] == conversation && t["agent"] == DEFAULT_AGENT)
                .cloned()
                .collect()
        })
    }

    /// The agent's `/streaming` bodies in `conversation`, in order.
    pub(crate) fn streaming_history(&self, conversation: &str) -> Vec<Value> {
        self.sim.read_state(|s| {
            s.streaming_history
                .iter()
                .filter(|t| t["conversationId"] == conversation && t["agent"] == DEFAULT_AGENT)
                .cloned()
                .collect()
        })
    }

    /// The model's chat requests for agent turns (the session-title calls left out).
    pub(crate) fn turn_requests(&self) -> Vec<Value> {
        self.model
            .requests()
            .into_iter()
            .filter(|r| !canon_sim::model::is_title_request(r))
            .collect()
    }

    /// The journal position of the agent's first POST to `path` whose body satisfies `f`.
    pub(crate) fn journal_seq(&self, path: &str, f: impl Fn(&Value) -> bool) -> u64 {
        self.sim
            .journal(0, Some(path))
            .iter()
            .find(|e| {
                e.method == "POST"
                    && e.path == path
                    && e.principal.as_deref() == Some(DEFAULT_AGENT)
                    && f(&e.body)
            })
            .unwrap_or_else(|| self.fail(&format!("no matching {path} request")))
            .seq
    }

    /// Waits until the agent's turn in `conversation` published a closing state.
    pub(crate) async fn wait_turn_closed(&self, conversation: &str) {
        let conversation = conversation.to_owned();
        self.wait("a closing turn state", move |s| {
            s.turn_history.iter().any(|t| {
                t["conversationId"] == conversation.as_str()
                    && t["agent"] == DEFAULT_AGENT
                    && matches!(t["state"].as_str(), Some("completed" | "interrupted"))
            })
        })
        .await;
    }
}

pub(crate) fn semantics(message: &Value) -> &str {
    message["metadata"]["turnSemantics"].as_str().unwrap_or("")
}

pub(crate) fn is_turn_complete(message: &Value) -> bool {
    semantics(message) == "turn_complete"
}

/// The states of `history`, consecutive repeats collapsed.
pub(crate) fn state_sequence(history: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in history {
        let state = t["state"].as_str().unwrap_or("").to_owned();
        if out.last() != Some(&state) {
            out.push(state);
        }
    }
    out
}

/// A simulator configuration whose clock follows the system time: the daemon computes
/// runtime-interaction deadlines from the real clock (runtime-control.md §6.4, §6.5).
pub(crate) fn live_clock_config() -> SimConfig {
    let mut config = SimConfig::for_tests();
    config.frozen_clock_ms = None;
    config
}

impl Scenario {
    /// Waits for the agent's first runtime interaction of `kind` and returns it.
    pub(crate) async fn wait_interaction(&self, kind: &str) -> canon_sim::state::Interaction {
        let wanted = kind.to_owned();
        self.wait(&format!("a {kind} interaction"), move |s| {
            s.interactions.values().any(|i| i.kind == wanted)
        })
        .await;
        self.sim.read_state(|s| {
            s.interactions
                .values()
                .find(|i| i.kind == kind)
                .cloned()
                .expect("present")
        })
    }

    /// The content of the tool message answering `call_id` in the model's requests.
    pub(crate) fn tool_message(&self, call_id: &str) -> String {
        self.model
            .requests()
            .iter()
            .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
            .and_then(|m| m["content"].as_str().map(str::to_owned))
            .unwrap_or_else(|| {
                self.fail(&format!("no tool result for {call_id} reached the model"))
            })
    }
}
