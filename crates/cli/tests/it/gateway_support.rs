//! The real-gateway harness (hermes-host.md §20) shared by the end-to-end scenarios:
//! hermes-agent 0.19.0 from `.cache/hermes-venv` (made by `scripts/hermes-venv.sh`) loads the
//! Python shim from a fresh `HERMES_HOME`, the shim spawns `canon-hermes serve --stdio`,
//! canon-sim plays Canon and its scripted model server plays the LLM.
//! `HERMES_VENV` overrides the venv path (as it does for the script); a missing venv fails.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use canon_sim::model::ModelServer;
use canon_sim::SimHandle;
use serde_json::{json, Value};

pub(crate) const READY: Duration = Duration::from_secs(60);
pub(crate) const TURN: Duration = Duration::from_secs(45);
pub(crate) const ANSWER: &str = "Hello from the scripted model.";

pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// The venv's `hermes`; fails (never skips) when the venv is missing.
pub(crate) fn hermes_bin() -> PathBuf {
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
pub(crate) struct Gateway {
    pub(crate) child: Child,
    pub(crate) home: tempfile::TempDir,
}

impl Gateway {
    pub(crate) fn log_tail(&self) -> String {
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

    pub(crate) fn state(&self) -> Option<Value> {
        let text = fs::read_to_string(self.home.path().join("hermes/gateway_state.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Waits for `gateway_state.json`: gateway running and the canon platform connected.
    pub(crate) fn wait_ready(&mut self) {
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

pub(crate) fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

/// Installs the shim (plugin files + a manifest pinning this binary) into `hermes_home`.
pub(crate) fn install_shim(hermes_home: &Path) {
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

/// What a scenario changes in the §20.2 recipe.
#[derive(Debug, Clone)]
pub(crate) struct GatewayOptions {
    /// `display.busy_input_mode` (`queue`, `interrupt` or `steer`).
    pub(crate) busy_input_mode: &'static str,
    /// Extra lines under `platforms.canon` (indented four spaces), e.g. `    extra: …`.
    pub(crate) platform_lines: String,
    /// Extra environment variables of the gateway process.
    pub(crate) env: Vec<(String, String)>,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            busy_input_mode: "queue",
            platform_lines: String::new(),
            env: Vec::new(),
        }
    }
}

/// hermes-host.md §20.2 config, with the real shim enabled.
pub(crate) fn config_yaml(model_base_url: &str, options: &GatewayOptions) -> String {
    let busy = options.busy_input_mode;
    let platform_lines = &options.platform_lines;
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
{platform_lines}streaming:
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
  busy_input_mode: {busy}
  platforms:
    canon:
      interim_assistant_messages: false
      tool_progress: \"off\"
      show_reasoning: false
"
    )
}

/// Starts a gateway in a fresh `HERMES_HOME` wired to `sim` and `model` (§20.2 defaults).
pub(crate) fn start_gateway(sim: &SimHandle, model: &ModelServer) -> Gateway {
    start_gateway_with(sim, model, &GatewayOptions::default())
}

/// Starts a gateway with scenario options; returns once it is ready.
pub(crate) fn start_gateway_with(
    sim: &SimHandle,
    model: &ModelServer,
    options: &GatewayOptions,
) -> Gateway {
    let hermes = hermes_bin();
    let home = tempfile::tempdir().expect("scratch dir");
    let hermes_home = home.path().join("hermes");
    write(
        &hermes_home.join("config.yaml"),
        &config_yaml(&model.base_url(), options),
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
        .envs(options.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup log"))
        .stderr(out)
        .spawn()
        .expect("the Hermes gateway starts");
    let mut gateway = Gateway { child, home };
    gateway.wait_ready();
    gateway
}
