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
use serde_json::Value;

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
        self.stop();
    }
}

impl Gateway {
    /// Stops the gateway process and waits for it: SIGTERM first, then SIGKILL.
    pub(crate) fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
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

/// The shim's source directory: the package Hermes imports.
pub(crate) fn shim_source() -> PathBuf {
    workspace_root().join("crates/cli/assets/hermes/plugin/canon-hermes")
}

/// Python that loads the shim package in `dir` as module `shim`, the way Hermes loads a plugin
/// directory (so its relative imports resolve), without writing bytecode next to it.
pub(crate) fn shim_prelude(dir: &Path) -> String {
    let init = dir.join("__init__.py");
    format!(
        "import importlib.util, sys\n\
         sys.dont_write_bytecode = True\n\
         spec = importlib.util.spec_from_file_location('shim', {init:?},\n\
             submodule_search_locations=[{dir:?}])\n\
         shim = importlib.util.module_from_spec(spec)\n\
         sys.modules['shim'] = shim\n\
         spec.loader.exec_module(shim)\n"
    )
}

/// The venv's Python (beside its `hermes`).
pub(crate) fn hermes_python() -> PathBuf {
    hermes_bin().with_file_name("python")
}

/// Installs the shim into `hermes_home` the way an operator does: `canon-hermes install` with
/// the venv's Python (cli.md §3), which writes the package, its manifest pinning this binary and
/// the skill, and enables the plugin and the platform. `HOME` is the scratch directory around
/// the profile, so nothing reaches the real home. Returns the command's stdout.
pub(crate) fn install_shim(hermes_home: &Path) -> String {
    let home = hermes_home.parent().unwrap_or(hermes_home);
    let out = Command::new(env!("CARGO_BIN_EXE_canon-hermes"))
        .arg("install")
        .arg("--python")
        .arg(hermes_python())
        .current_dir(home)
        .env("HERMES_HOME", hermes_home)
        .env("HOME", home)
        .env_remove("HERMES_PYTHON")
        .env_remove("CANON_ALLOWED_USERS")
        .env_remove("CANON_ALLOW_ALL_USERS")
        .env_remove("GATEWAY_MULTIPLEX_PROFILES")
        .env_remove("HERMES_S6_SUPERVISED_CHILD")
        .stdin(Stdio::null())
        .output()
        .expect("canon-hermes install runs");
    assert!(
        out.status.success(),
        "canon-hermes install failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a scenario changes in the hermes-host.md §20.2 recipe.
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

/// The Hermes profile template shared with `scripts/watch-turn.sh`; its placeholders are
/// described in `fixtures/hermes/README.md`.
const CONFIG_TEMPLATE: &str = include_str!("../../../../fixtures/hermes/config.yaml.tmpl");

/// hermes-host.md §20.2 config, with the real shim enabled: the template with the model server's
/// URL and the scenario's platform lines and busy-input mode filled in.
pub(crate) fn config_yaml(model_base_url: &str, options: &GatewayOptions) -> String {
    CONFIG_TEMPLATE
        .replace("{{model_base_url}}", model_base_url)
        .replace("{{platform_lines}}\n", &options.platform_lines)
        .replace("{{busy_input_mode}}", options.busy_input_mode)
}

/// Starts a gateway in a fresh `HERMES_HOME` wired to
/// `sim` and `model` (hermes-host.md §20.2 defaults).
pub(crate) fn start_gateway(sim: &SimHandle, model: &ModelServer) -> Gateway {
    start_gateway_with(sim, model, &GatewayOptions::default())
}

/// Starts a gateway with scenario options; returns once it is ready.
pub(crate) fn start_gateway_with(
    sim: &SimHandle,
    model: &ModelServer,
    options: &GatewayOptions,
) -> Gateway {
    start_gateway_prepared(sim, model, options, |_| {})
}

impl Gateway {
    /// The gateway's combined stdout and stderr so far.
    pub(crate) fn output(&self) -> String {
        fs::read_to_string(self.home.path().join("gateway.out")).unwrap_or_default()
    }

    /// Waits until the gateway finished its startup restore (hermes-host.md §9.5): Hermes logs
    /// `gateway.run: Press Ctrl+C to stop` (not the banner line) once it drained the messages queued during the restore. A message
    /// injected earlier is processed twice (a no-op start/complete pair, then the real turn).
    pub(crate) fn wait_settled(&mut self) {
        let start = Instant::now();
        while !self.output().contains("gateway.run: Press Ctrl+C to stop") {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the gateway exited early ({status})\n{}", self.log_tail());
            }
            assert!(
                start.elapsed() < READY,
                "the gateway did not finish its startup restore within {READY:?}\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Gateway {
    /// The gateway's child processes (from `/proc`): pid, state letter and command line.
    fn children(&self) -> Vec<(u32, String, String)> {
        let parent = self.child.id();
        let mut children = Vec::new();
        for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // `pid (comm) state ppid …`: the fields after the last `)`.
            let mut fields = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace())
                .into_iter()
                .flatten();
            let state = fields.next().unwrap_or_default().to_owned();
            let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
            if ppid != Some(parent) {
                continue;
            }
            let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            children.push((pid, state, cmdline));
        }
        children
    }

    /// Process ids of the gateway's `canon-hermes serve --stdio` children.
    pub(crate) fn daemon_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .children()
            .into_iter()
            .filter(|(_, _, cmdline)| cmdline.contains("serve --stdio"))
            .map(|(pid, _, _)| pid)
            .collect();
        pids.sort_unstable();
        pids
    }

    /// Children of the gateway left as zombies (state `Z`: exited, never waited for).
    pub(crate) fn zombie_children(&self) -> Vec<u32> {
        self.children()
            .into_iter()
            .filter(|(_, state, _)| state == "Z")
            .map(|(pid, _, _)| pid)
            .collect()
    }

    /// `kill -9` every daemon child of this gateway (by pid); returns the pids killed.
    pub(crate) fn kill_daemons(&self) -> Vec<u32> {
        let pids = self.daemon_pids();
        for pid in &pids {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        pids
    }
}

/// Like [`start_gateway_with`], but runs `prepare` on the fresh `HERMES_HOME` (config and shim
/// already written) before the gateway starts, e.g. to create a cron job with the real
/// `hermes cron` CLI. Does not wait for the startup restore ([`Gateway::wait_settled`]).
pub(crate) fn start_gateway_prepared(
    sim: &SimHandle,
    model: &ModelServer,
    options: &GatewayOptions,
    prepare: impl FnOnce(&Path),
) -> Gateway {
    let home = tempfile::tempdir().expect("scratch dir");
    let hermes_home = home.path().join("hermes");
    write(
        &hermes_home.join("config.yaml"),
        &config_yaml(&model.base_url(), options),
    );
    install_shim(&hermes_home);
    prepare(&hermes_home);
    spawn_gateway(sim, home, options)
}

/// Runs `hermes gateway run` in the scratch dir `home` (its `hermes/` profile already written)
/// with the scenario's environment; returns once the gateway is ready.
fn spawn_gateway(sim: &SimHandle, home: tempfile::TempDir, options: &GatewayOptions) -> Gateway {
    let hermes = hermes_bin();
    let hermes_home = home.path().join("hermes");
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

/// Stops `gateway` (SIGTERM, as an operator would) and starts a new one on the same profile and
/// Canon home, with its model at `model` (config.yaml rewritten); returns once it is ready.
pub(crate) fn restart_gateway(
    mut gateway: Gateway,
    sim: &SimHandle,
    old_model: &ModelServer,
    model: &ModelServer,
    options: &GatewayOptions,
) -> Gateway {
    gateway.stop();
    let home = std::mem::replace(&mut gateway.home, tempfile::tempdir().expect("scratch dir"));
    drop(gateway);
    let config = home.path().join("hermes/config.yaml");
    let text = fs::read_to_string(&config).expect("config.yaml");
    write(
        &config,
        &text.replace(&old_model.base_url(), &model.base_url()),
    );
    // The first run's log stays beside the new one.
    let _ = fs::rename(
        home.path().join("gateway.out"),
        home.path().join("gateway.out.1"),
    );
    spawn_gateway(sim, home, options)
}

/// Runs the venv's `hermes` CLI with `args` against `hermes_home` (offline, like the gateway);
/// returns its stdout, failing on a non-zero exit.
pub(crate) fn hermes_cli(hermes_home: &Path, args: &[&str]) -> String {
    let home = hermes_home.parent().expect("the scratch dir");
    let out = Command::new(hermes_bin())
        .args(args)
        .current_dir(home)
        .env("HERMES_HOME", hermes_home)
        .env("HOME", home)
        .env("HERMES_DISABLE_LAZY_INSTALLS", "1")
        .stdin(Stdio::null())
        .output()
        .expect("the hermes CLI runs");
    assert!(
        out.status.success(),
        "hermes {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A venv made from the Hermes venv's Python, without Hermes, plus `site_files` (relative path
/// → content) in its site-packages; `see_hermes` adds a `.pth` that puts the real venv's
/// site-packages behind its own, so Hermes imports but the venv's own distributions win.
pub(crate) fn fake_venv(root: &Path, see_hermes: bool, site_files: &[(&str, &str)]) -> PathBuf {
    let venv = root.join("fake-venv");
    let made = Command::new(hermes_python())
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python -m venv runs");
    assert!(made.success());
    let site = venv.join("lib/python3.11/site-packages");
    if see_hermes {
        let real = hermes_python()
            .parent()
            .and_then(Path::parent)
            .expect("the venv")
            .join("lib/python3.11/site-packages");
        fs::write(site.join("zz-hermes.pth"), format!("{}\n", real.display())).expect("pth");
    }
    for (path, text) in site_files {
        let path = site.join(path);
        fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }
    venv.join("bin/python")
}
