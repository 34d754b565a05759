//! End to end with a real Hermes gateway (hermes-host.md §20; harness in
//! `gateway_support.rs`). Each scenario asserts the simulator's Canon state.

use std::process::Command;
use std::time::Duration;

use canon_sim::config::SimConfig;
use canon_sim::control::Injection;
use canon_sim::model::{ModelServer, Script};
use canon_sim::{Sim, SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::json;

use super::gateway_support::{hermes_bin, start_gateway, workspace_root, ANSWER, TURN};

fn script() -> Script {
    Script::parse(
        &json!({"model": "fake-model", "rules": [
            {"match": {"titleRequest": true}, "reply": {"text": "Scripted session"}},
            {"match": {}, "reply": {"text": ANSWER}},
        ]})
        .to_string(),
    )
    .expect("script")
}

/// The agent's `turn_complete` messages in the direct conversation: their texts.
fn turn_completes(sim: &SimHandle) -> Vec<String> {
    sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.conversation_id == DEFAULT_CONVERSATION)
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .filter(|m| m.message["metadata"]["turnSemantics"] == "turn_complete")
            .map(|m| m.message["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_answers_a_direct_turn_with_one_turn_complete() {
    let sim = Sim::start(SimConfig::for_tests())
        .await
        .expect("the simulator starts");
    let model = ModelServer::start(script(), 0)
        .await
        .expect("the model server starts");
    let gateway = tokio::task::block_in_place(|| start_gateway(&sim, &model));
    sim.wait_for("stream open", TURN, |s| !s.open_streams.is_empty())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", gateway.log_tail()));

    sim.inject_message(&Injection {
        text: Some("hello hermes".into()),
        ..Injection::default()
    })
    .expect("inject");
    let done = sim
        .wait_for("one turn_complete", TURN, |s| {
            s.messages.iter().any(|m| {
                m.conversation_id == DEFAULT_CONVERSATION
                    && m.message["senderId"] == DEFAULT_AGENT
                    && m.message["metadata"]["turnSemantics"] == "turn_complete"
            })
        })
        .await;
    if let Err(e) = done {
        panic!(
            "{e}; sim messages: {}\n{}",
            sim.state()["messages"],
            gateway.log_tail()
        );
    }
    // Let any duplicate arrive before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let finals = turn_completes(&sim);
    assert_eq!(
        finals,
        vec![ANSWER.to_owned()],
        "exactly one turn_complete with the scripted answer\n{}",
        gateway.log_tail()
    );
    assert!(
        !model.requests().is_empty(),
        "the gateway asked the scripted model"
    );
    drop(gateway);
}

/// Runs `code` in the venv's Python with the shim loaded as module `shim`; returns stdout.
fn run_shim_python(code: &str) -> String {
    let python = hermes_bin().with_file_name("python");
    let shim = workspace_root().join("crates/cli/assets/hermes/plugin/canon-hermes/__init__.py");
    let home = tempfile::tempdir().expect("scratch dir");
    let prelude = format!(
        "import importlib.util, sys\n\
         spec = importlib.util.spec_from_file_location('shim', {shim:?})\n\
         shim = importlib.util.module_from_spec(spec)\n\
         spec.loader.exec_module(shim)\n"
    );
    let out = Command::new(python)
        .args(["-c", &format!("{prelude}{code}")])
        .env("HERMES_HOME", home.path())
        .env("HOME", home.path())
        .output()
        .expect("the venv python runs");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn shim_refuses_an_unaudited_host() {
    let out = run_shim_python(
        "assert shim.host_refusal() is None, shim.host_refusal()\n\
         shim.hermes_version = lambda: '0.18.2'\n\
         try:\n    shim.register(object())\n    print('registered')\n\
         except RuntimeError as exc:\n    print(exc)\n",
    );
    assert!(
        out.starts_with("Canon requires hermes-agent 0.19.0 on Python 3.11; found 0.18.2 on 3.11."),
        "{out}"
    );
}

#[test]
fn shim_refuses_a_multiplexing_gateway() {
    let out = run_shim_python(
        "import agent.secret_scope as scope\n\
         from gateway.config import PlatformConfig\n\
         cls = shim._make_adapter_class()\n\
         scope.is_multiplex_active = lambda: True\n\
         try:\n    cls(PlatformConfig(enabled=True))\n    print('constructed')\n\
         except RuntimeError as exc:\n    print(exc)\n",
    );
    assert_eq!(
        out.trim(),
        "Canon cannot start while Hermes gateway.multiplex_profiles is enabled. The Canon adapter \
         still uses process-global profile, credential, and hook state, so multiplexing could cross \
         profile boundaries. Set gateway.multiplex_profiles: false and run one Hermes gateway \
         process per Canon profile."
    );
}
