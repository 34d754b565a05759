//! `canon-hermes dev`: try canon-hermes on this machine with no Canon account and no model key.
//!
//! In order: start the embedded Canon simulator (`canon-sim`, in this process) and a scripted
//! OpenAI-compatible model (or point Hermes at a real one with `--model-url`); find the Hermes
//! environment `install` would use, or create a managed hermes-agent venv under the user's cache
//! directory when there is none (`dev/venv.rs`); write a throwaway Hermes profile and run
//! `canon-hermes install` into it, as an operator would; start `hermes gateway run` in it
//! (`dev/gateway.rs`) and wait until the Canon platform is connected; then open the terminal chat
//! of `dev/chat.rs`, where the person typing is the Canon human. Ctrl-C, `/quit` or end of input
//! stops the gateway and every process it started and removes the throwaway profile (`--keep`
//! keeps it). Nothing here touches the operator's own Hermes profile or `~/.canon`.

mod chat;
mod gateway;
mod render;
mod venv;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use canon_host::protocol::{AUDITED_HERMES, AUDITED_PYTHON};
use canon_sim::model::{ModelServer, Script};
use canon_sim::{Sim, SimConfig, SimHandle};
use console::style;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use self::chat::{say, Chat, LineOutcome};
use self::gateway::Gateway;
use crate::hermes::{self, HostEnv};
use crate::{exit, install};

/// The throwaway profile's config.yaml; `{{model_lines}}` is the model section.
const CONFIG_TEMPLATE: &str = include_str!("../assets/dev/config.yaml.tmpl");
/// The built-in model script; `{{demo_dir}}` is the directory the approval demo deletes.
const MODEL_SCRIPT: &str = include_str!("../assets/dev/model-script.json");
/// How long the gateway may take to connect to Canon before `dev` gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(180);
/// How often the chat looks at Canon's state.
const POLL: Duration = Duration::from_millis(30);
/// Exit code after Ctrl-C (cli.md §1).
const INTERRUPTED: u8 = 130;

/// `canon-hermes dev`.
#[derive(Debug, clap::Args)]
pub(crate) struct DevArgs {
    /// The Python of an existing hermes-agent 0.19.0 venv (default: the Hermes `install` would
    /// find, else a managed venv created once under ~/.cache/canon-hermes)
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// Use a real OpenAI-compatible model at this base URL instead of the scripted one
    /// (default: $OPENAI_BASE_URL when set; the key is read from $OPENAI_API_KEY)
    #[arg(long, value_name = "URL")]
    model_url: Option<String>,
    /// The model name at --model-url (default: $OPENAI_MODEL)
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// A model script (the JSON format of canon-sim's scripted model) instead of the built-in one
    #[arg(long, value_name = "FILE", conflicts_with = "model_url")]
    script: Option<PathBuf>,
    /// Keep the throwaway profile (HERMES_HOME, gateway log) and say where it is
    #[arg(long)]
    keep: bool,
    /// Write the simulator's whole Canon state as JSON to this file on exit (what the `dev`
    /// tests count from)
    #[arg(long, value_name = "FILE", hide = true)]
    state_file: Option<PathBuf>,
}

/// Which model Hermes talks to.
#[derive(Debug)]
enum ModelChoice {
    Scripted(Option<PathBuf>),
    Real {
        url: String,
        name: String,
        key: Option<String>,
    },
}

impl DevArgs {
    fn model_choice(&self) -> anyhow::Result<ModelChoice> {
        let env = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let url = match (&self.script, &self.model_url) {
            (Some(_), _) => None,
            (None, Some(url)) => Some(url.trim().to_owned()),
            (None, None) => env("OPENAI_BASE_URL"),
        };
        let Some(url) = url else {
            return Ok(ModelChoice::Scripted(self.script.clone()));
        };
        let name = self
            .model
            .clone()
            .or_else(|| env("OPENAI_MODEL"))
            .ok_or_else(|| {
                anyhow!("a real model at {url} needs a name: pass --model NAME or set OPENAI_MODEL")
            })?;
        Ok(ModelChoice::Real {
            url,
            name,
            key: env("OPENAI_API_KEY"),
        })
    }
}

/// What `dev` started, stopped in reverse order whatever way it ends.
#[derive(Default)]
struct Started {
    scratch: Option<tempfile::TempDir>,
    gateway: Option<Gateway>,
    sim: Option<SimHandle>,
    model: Option<ModelServer>,
}

/// Runs `dev`; returns the exit code (0 after `/quit` or end of input, 1 on failure, 130 after
/// Ctrl-C).
pub(crate) fn dev_command(args: &DevArgs) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            crate::report_error(&anyhow!(error).context("starting the async runtime"));
            return exit::REJECTED;
        }
    };
    let mut started = Started::default();
    let outcome = runtime.block_on(async {
        // Installed first, so a Ctrl-C at any step (the venv, install, the gateway's start)
        // ends in the cleanup below rather than killing `dev` and orphaning the gateway.
        let interrupted = tokio::signal::ctrl_c();
        tokio::select! {
            result = run(args, &mut started) => result,
            _ = interrupted => Err(Interrupted.into()),
        }
    });
    let code = match outcome {
        Ok(()) => exit::OK,
        Err(error) if error.is::<Interrupted>() => {
            say("");
            INTERRUPTED
        }
        Err(error) => {
            let _ = std::io::stdout().lock().flush();
            crate::report_error(&error);
            exit::REJECTED
        }
    };
    stop_everything(&mut started, args);
    // The stdin reader is a plain thread blocked in read(2); the runtime must not wait for it.
    runtime.shutdown_background();
    code
}

/// Ctrl-C, as an error value so that every step unwinds the same way.
#[derive(Debug)]
struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

fn stop_everything(started: &mut Started, args: &DevArgs) {
    if let Some(mut gateway) = started.gateway.take() {
        step("stopping the Hermes gateway and its Canon daemon");
        gateway.stop();
    }
    let model = started.model.take();
    if let (Some(sim), Some(path)) = (started.sim.take(), &args.state_file) {
        let mut state = sim.state();
        if let Some(model) = &model {
            state["modelRequests"] = serde_json::Value::from(model.requests());
        }
        let text = serde_json::to_string_pretty(&state).unwrap_or_default();
        if let Err(error) = std::fs::write(path, text) {
            detail(&format!("could not write {}: {error}", path.display()));
        }
    }
    if let Some(scratch) = started.scratch.take() {
        if args.keep {
            let path = scratch.keep();
            step(&format!("kept the throwaway profile in {}", path.display()));
        } else {
            let _ = scratch.close();
        }
    }
}

fn step(text: &str) {
    say(&format!("{} {text}", style("✓").green()));
}

fn detail(text: &str) {
    say(&style(format!("    {text}")).dim().to_string());
}

async fn run(args: &DevArgs, started: &mut Started) -> anyhow::Result<()> {
    let model_choice = args.model_choice()?;
    say(&format!(
        "{} — a local Canon, a Hermes agent and you, on this machine",
        style("canon-hermes dev").bold()
    ));

    let scratch = tempfile::Builder::new()
        .prefix("canon-hermes-dev-")
        .tempdir()
        .context("creating the throwaway profile directory")?;
    let root = scratch.path().to_path_buf();
    started.scratch = Some(scratch);
    let hermes_home = root.join("hermes");
    let home = root.join("home");
    let canon_home = root.join("canon");
    let demo_dir = root.join("demo-files");
    for dir in [&hermes_home, &home, &canon_home, &demo_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for name in ["notes.txt", "draft.md"] {
        std::fs::write(demo_dir.join(name), "a file the approval demo deletes\n")
            .context("writing the demo files")?;
    }

    let sim = Sim::start(SimConfig::default())
        .await
        .map_err(|e| anyhow!("starting the Canon simulator: {e}"))?;
    step(&format!("Canon simulator at {}", sim.base_url()));
    let canon_env: Vec<(String, String)> = sim
        .env_lines()
        .into_iter()
        .filter_map(|line| {
            let (k, v) = line.split_once('=')?;
            (!k.starts_with("CANON_SIM_")).then(|| (k.to_owned(), v.to_owned()))
        })
        .chain([("CANON_HOME".to_owned(), canon_home.display().to_string())])
        .collect();
    started.sim = Some(sim);

    let model_lines = match &model_choice {
        ModelChoice::Scripted(file) => {
            let script = match file {
                Some(path) => Script::load(path)
                    .map_err(|e| anyhow!("reading the model script {}: {e}", path.display()))?,
                None => builtin_script(&demo_dir)?,
            };
            let name = script.model.clone();
            let model = ModelServer::start(script, 0)
                .await
                .map_err(|e| anyhow!("starting the scripted model: {e}"))?;
            let url = model.base_url();
            step(&format!("scripted model at {url}"));
            started.model = Some(model);
            model_yaml(&url, &name, "sk-canon-dev-local")
        }
        ModelChoice::Real { url, name, key } => {
            step(&format!("model {name} at {url}"));
            model_yaml(url, name, key.as_deref().unwrap_or("none"))
        }
    };
    write_private(
        &hermes_home.join("config.yaml"),
        &CONFIG_TEMPLATE.replace("{{model_lines}}", &model_lines),
    )?;

    let flag = match &args.python {
        Some(path) => Some(std::path::absolute(path).context("resolving --python")?),
        None => None,
    };
    let python = hermes_python(flag, hermes_home.clone()).await?;
    let hermes_bin = python.with_file_name("hermes");
    if !hermes_bin.is_file() {
        bail!(
            "{} has no hermes launcher next to it ({}); pass --python <the Python of a hermes-agent {AUDITED_HERMES} venv>",
            python.display(),
            hermes_bin.display()
        );
    }
    step(&format!(
        "throwaway Hermes profile {}",
        hermes_home.display()
    ));

    run_install(&python, &hermes_home, &home).await?;

    let gateway = Gateway::start(
        &hermes_bin,
        &hermes_home,
        &home,
        &canon_env,
        root.join("gateway.log"),
    )?;
    started.gateway = Some(gateway);
    let sim = started.sim.as_ref().context("the simulator")?;
    let gateway = started.gateway.as_mut().context("the gateway")?;
    wait_connected(gateway, sim).await?;

    for line in chat::HELP {
        say(&style(line).dim().to_string());
    }
    chat_loop(sim, gateway).await
}

/// The built-in script with the demo directory filled in.
fn builtin_script(demo_dir: &Path) -> anyhow::Result<Script> {
    let quoted = serde_json::to_string(&demo_dir.display().to_string())?;
    let inner = &quoted[1..quoted.len() - 1];
    Script::parse(&MODEL_SCRIPT.replace("{{demo_dir}}", inner))
        .map_err(|e| anyhow!("the built-in model script: {e}"))
}

/// The config.yaml model section (JSON strings are valid YAML scalars, so values are quoted
/// that way).
fn model_yaml(url: &str, name: &str, key: &str) -> String {
    format!(
        "  provider: custom\n  base_url: {}\n  default: {}\n  api_key: {}",
        json!(url),
        json!(name),
        json!(key)
    )
}

/// Writes `text` to `path` readable by the owner only (the model key may be in it).
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// The Hermes Python: `--python`, else the one `install` would find when it is the audited
/// host, else the managed venv (created when missing).
async fn hermes_python(flag: Option<PathBuf>, hermes_home: PathBuf) -> anyhow::Result<PathBuf> {
    let explicit = flag.is_some();
    let env = HostEnv::from_process();
    let found = hermes::locate_python(flag.as_deref(), &env);
    let candidate = match found {
        Ok(python) => Some(python),
        Err(error) if explicit => return Err(error),
        Err(_) => None,
    };
    if let Some(python) = candidate {
        let probe_home = hermes_home.clone();
        let probed = blocking({
            let python = python.clone();
            move || hermes::Helpers::new(python, probe_home).call("host.probe", json!({}))
        })
        .await?;
        match probed.as_ref().map(install::host_refusal) {
            Ok(None) => {
                let version = probed
                    .as_ref()
                    .ok()
                    .and_then(|p| p["python_version"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                step(&format!(
                    "Hermes: hermes-agent {AUDITED_HERMES} on Python {version} ({})",
                    python.display()
                ));
                return Ok(python);
            }
            Ok(Some(refusal)) if explicit => bail!(refusal),
            Err(error) if explicit => return Err(anyhow!("{error:#}")),
            Ok(Some(refusal)) => detail(&format!("{} is not usable: {refusal}", python.display())),
            Err(error) => detail(&format!("{} is not usable: {error:#}", python.display())),
        }
    }
    let env_home = env.home.clone();
    let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
    let dir = venv::managed_dir(xdg.as_deref(), env_home.as_deref())
        .context("finding a cache directory for the managed Hermes environment (set HOME)")?;
    if let Some(python) = venv::ready_python(&dir) {
        step(&format!(
            "Hermes: the managed hermes-agent {AUDITED_HERMES} environment {}",
            dir.display()
        ));
        return Ok(python);
    }
    say(&format!(
        "No hermes-agent {AUDITED_HERMES} on Python {AUDITED_PYTHON} found; creating one in {}",
        dir.display()
    ));
    let spinner = spinner("installing hermes-agent");
    let started = Instant::now();
    let python = blocking({
        let spinner = spinner.clone();
        let dir = dir.clone();
        move || {
            let plain = spinner.is_hidden();
            venv::create(
                &dir,
                &mut |line| {
                    if plain {
                        detail(line);
                    }
                    spinner.set_message(line.to_owned());
                },
                &mut |line| {
                    if !line.is_empty() {
                        spinner.set_message(format!("pip: {line}"));
                    }
                },
            )
        }
    })
    .await?;
    spinner.finish_and_clear();
    let python = python?;
    step(&format!(
        "Hermes: created hermes-agent {AUDITED_HERMES} in {} ({:.0} s)",
        dir.display(),
        started.elapsed().as_secs_f64()
    ));
    Ok(python)
}

/// Runs `f` on a blocking thread, so the Ctrl-C handler keeps running meanwhile.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow!("a background step failed: {e}"))
}

/// A spinner with the elapsed time; hidden (and so silent) when stdout is not a terminal.
fn spinner(message: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(message.to_owned());
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// `canon-hermes install --python PYTHON` into the throwaway profile: this binary, as an
/// operator runs it.
async fn run_install(python: &Path, hermes_home: &Path, home: &Path) -> anyhow::Result<()> {
    let binary = std::env::current_exe().context("finding this binary")?;
    let mut command = Command::new(binary);
    command
        .arg("install")
        .arg("--python")
        .arg(python)
        .env("HERMES_HOME", hermes_home)
        .env("HOME", home)
        .env_remove("HERMES_PYTHON")
        .env_remove("CANON_ALLOWED_USERS")
        .env_remove("CANON_ALLOW_ALL_USERS")
        .env_remove("GATEWAY_MULTIPLEX_PROFILES")
        .env_remove("HERMES_S6_SUPERVISED_CHILD");
    let output = blocking(move || command.output())
        .await?
        .context("running canon-hermes install")?;
    if !output.status.success() {
        bail!(
            "canon-hermes install failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    step("canon-hermes install");
    // `dev` restarts the gateway and binds Canon itself, so install's advice on both is moot.
    for line in String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.starts_with("Next: ") && !l.starts_with("Restart the Hermes gateway"))
    {
        detail(line);
    }
    Ok(())
}

/// Waits until the gateway reports Canon connected and the daemon holds Canon's stream.
async fn wait_connected(gateway: &mut Gateway, sim: &SimHandle) -> anyhow::Result<()> {
    let spinner = spinner("starting the Hermes gateway");
    if spinner.is_hidden() {
        detail("starting the Hermes gateway");
    }
    let started = Instant::now();
    loop {
        if let Some(status) = gateway.exited() {
            spinner.finish_and_clear();
            bail!(
                "the Hermes gateway exited ({status}) before connecting to Canon; its last log lines:\n{}",
                gateway.log_tail(30)
            );
        }
        let streaming = sim.read_state(|s| !s.open_streams.is_empty());
        if streaming && gateway.canon_state().as_deref() == Some("connected") {
            break;
        }
        if started.elapsed() > CONNECT_TIMEOUT {
            spinner.finish_and_clear();
            bail!(
                "the Hermes gateway did not connect to Canon within {} s; its last log lines:\n{}",
                CONNECT_TIMEOUT.as_secs(),
                gateway.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    spinner.finish_and_clear();
    step(&format!(
        "Hermes gateway running (pid {}), Canon connected ({:.1} s)",
        gateway.pid(),
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// The chat until `/quit`, end of input, or the gateway's exit.
async fn chat_loop(sim: &SimHandle, gateway: &mut Gateway) -> anyhow::Result<()> {
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if lines_tx
                        .send(line.trim_end_matches(['\n', '\r']).to_owned())
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    let mut chat = Chat::new(sim);
    chat.show_prompt();
    let mut tick = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            line = lines.recv() => match line {
                Some(line) => {
                    if chat.on_line(&line) == LineOutcome::Quit {
                        return Ok(());
                    }
                }
                None => {
                    say("");
                    return Ok(());
                }
            },
            _ = tick.tick() => {
                chat.poll();
                if let Some(status) = gateway.exited() {
                    bail!(
                        "the Hermes gateway exited ({status}); its last log lines:\n{}",
                        gateway.log_tail(30)
                    );
                }
            }
        }
    }
}
