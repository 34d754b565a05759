//! End to end with a real Hermes gateway (hermes-host.md §20): hermes-agent 0.19.0 from
//! `.cache/hermes-venv` (made by `scripts/hermes-venv.sh`) loads the Python shim from a fresh
//! `HERMES_HOME`, the shim spawns `canon-hermes serve --stdio`, canon-sim plays Canon and its
//! scripted model server plays the LLM. Each scenario asserts the simulator's Canon state.
//! `HERMES_VENV` overrides the venv path (as it does for the script); a missing venv fails.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use canon_sim::config::SimConfig;
use canon_sim::control::Injection;
use canon_sim::model::{ModelServer, Script};
use canon_sim::{Sim, SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::{json, Value};

const READY: Duration = Duration::from_secs(60);
const TURN: Duration = Duration::from_secs(45);
const ANSWER: &str = "Hello from the scripted model.";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// The venv's `hermes`; fails (never skips) when the venv is missing.
fn hermes_bin() -> PathBuf {
    let venv = std::env::var_os("HERMES_VENV").map_or_else(
        || workspace_root().join(".cache/hermes-venv"),
        PathBuf::from,
    );
    let bin = venv.join("bin/hermes");
    assert!(
        bin.is_file(),
        "the Hermes venv is missing ({}): run scripts/hermes-venv.sh first",
        bin.display()
    );
    bin
}

/// A running gateway; killed (with its process group) when dropped, even on panic.
struct Gateway {
    child: Child,
    home: tempfile::TempDir,
}

impl Gateway {
    fn log_tail(&self) -> String {
        let mut out = String::new();
        for name in ["gateway.out", "logs/gateway.log", "logs/errors.log"] {
            let text = fs::read_to_string(self.home.path().join(name)).unwrap_or_default();
            let start = text.len().saturating_sub(6000);
            let start = (start..text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(text.len());
            out.push_str(&format!("--- {name} ---\n{}\n", &text[start..]));
        }
        out
    }

    fn state(&self) -> Option<Value> {
        let text = fs::read_to_string(self.home.path().join("hermes/gateway_state.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Waits for `gateway_state.json`: gateway running and the canon platform connected.
    fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if let Some(state) = self.state() {
                if state["gateway_state"] == "running"
                    && state["platforms"]["canon"]["state"] == "connected"
                {
                    return;
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the gateway exited early ({status})\n{}", self.log_tail());
            }
            assert!(
                start.elapsed() < READY,
                "the gateway was not ready within {READY:?}; state {:?}\n{}",
                self.state(),
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // Only this child's id: SIGTERM first, then SIGKILL.
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(8);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

/// Installs the shim (plugin files + a manifest pinning this binary) into `hermes_home`.
fn install_shim(hermes_home: &Path) {
    let src = workspace_root().join("crates/cli/assets/hermes/plugin/canon-hermes");
    let dst = hermes_home.join("plugins/canon-hermes");
    for name in ["plugin.yaml", "__init__.py"] {
        let text = fs::read_to_string(src.join(name)).expect("shim file");
        write(&dst.join(name), &text);
    }
    let manifest = json!({
        "protocol": 1,
        "binary": env!("CARGO_BIN_EXE_canon-hermes"),
        "binary_version": env!("CARGO_PKG_VERSION"),
        "audited_host": {"hermes_agent": "0.19.0", "python": "3.11"},
        "platform": {"name": "canon", "label": "Canon", "max_message_length": 3900,
                     "allowed_users_env": "CANON_ALLOWED_USERS",
                     "allow_all_env": "CANON_ALLOW_ALL_USERS",
                     "cron_deliver_env_var": "CANON_HOME_CHANNEL"},
        "adapter": {"max_message_length": 3900, "streaming_overflow_limit": 60800,
                    "splits_long_messages": true, "requires_edit_finalize": true,
                    "authorization_is_upstream": true},
        "tools": [],
        "hooks": ["pre_tool_call", "post_tool_call", "subagent_stop"],
    });
    write(&dst.join("manifest.json"), &manifest.to_string());
}

/// hermes-host.md §20.2 config, with the real shim enabled.
fn config_yaml(model_base_url: &str) -> String {
    format!(
        "model:
  provider: custom
  base_url: {model_base_url}
  default: fake-model
  api_key: sk-fake-local
plugins:
  enabled: [canon-hermes]
platforms:
  canon:
    enabled: true
streaming:
  enabled: true
  transport: auto
approvals:
  mode: manual
gateway:
  multiplex_profiles: false
security:
  allow_lazy_installs: false
  tirith_enabled: false
display:
  busy_input_mode: queue
  platforms:
    canon:
      interim_assistant_messages: false
      tool_progress: \"off\"
      show_reasoning: false
"
    )
}

/// Starts a gateway in a fresh `HERMES_HOME` wired to `sim` and `model`.
fn start_gateway(sim: &SimHandle, model: &ModelServer) -> Gateway {
    let hermes = hermes_bin();
    let home = tempfile::tempdir().expect("scratch dir");
    let hermes_home = home.path().join("hermes");
    write(
        &hermes_home.join("config.yaml"),
        &config_yaml(&model.base_url()),
    );
    install_shim(&hermes_home);
    let out = fs::File::create(home.path().join("gateway.out")).expect("log file");
    let child = Command::new(hermes)
        .args(["gateway", "run", "-v"])
        .current_dir(home.path())
        .env("HERMES_HOME", &hermes_home)
        .env("HOME", home.path())
        .env("HERMES_DISABLE_LAZY_INSTALLS", "1")
        .env("CANON_HERMES_BIN", env!("CARGO_BIN_EXE_canon-hermes"))
        .env("CANON_API_KEY", sim.api_key())
        .env("CANON_BASE_URL", sim.base_url())
        .env("CANON_STREAM_URL", sim.stream_url())
        .env_remove("CANON_ENVIRONMENT_ID")
        .env_remove("CANON_HOME_CHANNEL")
        .env_remove("HERMES_SAFE_MODE")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup log"))
        .stderr(out)
        .spawn()
        .expect("the Hermes gateway starts");
    let mut gateway = Gateway { child, home };
    gateway.wait_ready();
    gateway
}

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
