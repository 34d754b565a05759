//! `canon-hermes uninstall` (cli.md §3.5): take the Canon shim out of a Hermes profile.
//!
//! In order: locate the profile and the Hermes Python and probe the profile (`hermes`, an
//! unreadable config.yaml is refused as `install` refuses it; the host is not gated, so an
//! operator can uninstall after upgrading Hermes); check the plugin directory as `install` does
//! (no symbolic link, no plugin of another name); with `--purge-credentials`, find the Canon keys
//! `setup` writes into the profile's `.env` and the `agents.json` profile its `CANON_AGENT`
//! names, and ask before removing them (on a terminal; `--yes` answers for an unattended run, and
//! without either nothing is changed); then disable the plugin and the platform through the same
//! config path as `install` (`install::edit_config`: comments and layout kept, the original kept
//! once beside the file); then the credentials; then remove the plugin directory. A running
//! gateway keeps the plugin until it restarts, so the restart command is printed.
//!
//! Credentials stay by default: the `.env` keys and `~/.canon/agents.json` are not touched.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context as _};
use canon_profiles::files::{AgentProfiles, CanonPaths};
use canon_profiles::{DotEnv, HermesEnv};
use serde_json::{json, Value};

use crate::exit;
use crate::hermes::{self, HostEnv};
use crate::install::{self, Change};
use crate::shim;

/// `canon-hermes uninstall` (cli.md §3.5).
#[derive(Debug, clap::Args)]
pub(crate) struct UninstallArgs {
    /// The Hermes profile to uninstall from (default: the active profile, as `hermes` picks it)
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// The Python of the Hermes environment (default: $HERMES_PYTHON, the `python` beside this
    /// binary when it sits in a venv's bin/, the `hermes` launcher's interpreter,
    /// ~/.hermes/hermes-agent/venv/bin/python)
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// Also remove the Canon credentials setup saved: its CANON_* keys in the profile's .env and
    /// the agents.json profile CANON_AGENT names
    #[arg(long)]
    purge_credentials: bool,
    /// Remove the credentials without asking (needed without a terminal)
    #[arg(long)]
    yes: bool,
}

/// Runs `uninstall`; returns the exit code (cli.md §1: 0 done, 1 refused or failed).
pub(crate) fn uninstall_command(args: &UninstallArgs) -> u8 {
    let env = HostEnv::from_process();
    let mut out = std::io::stdout().lock();
    let stdin = std::io::stdin();
    let mut answer = Answer {
        terminal: stdin.is_terminal(),
        read: Box::new(move || {
            let mut line = String::new();
            stdin.lock().read_line(&mut line).map(|_| line)
        }),
    };
    let result = uninstall(args, &env, &mut out, &mut answer);
    let _ = out.flush();
    match result {
        Ok(()) => exit::OK,
        Err(error) => {
            let _ = writeln!(std::io::stderr().lock(), "{error:#}");
            exit::REJECTED
        }
    }
}

/// Where the confirmation of `--purge-credentials` comes from.
struct Answer {
    /// Whether stdin is a terminal.
    terminal: bool,
    /// Reads one line.
    read: Box<dyn FnMut() -> std::io::Result<String>>,
}

/// Writes one line to the operator's output, ignoring a closed pipe.
fn say(out: &mut dyn std::io::Write, line: &str) {
    let _ = writeln!(out, "{line}");
}

/// The Canon credentials `--purge-credentials` would remove.
#[derive(Debug, Default)]
struct Purge {
    /// The profile's `.env`.
    env_file: PathBuf,
    /// The keys `setup` writes ([`crate::setup::written_keys`]) that it defines.
    keys: Vec<&'static str>,
    /// `agents.json` and the profile `CANON_AGENT` names in it, when it is there and Hermes may
    /// use it.
    agent: Option<(PathBuf, String)>,
}

impl Purge {
    fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.agent.is_none()
    }

    /// What would go, for the confirmation question (names only, never a value).
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.keys.is_empty() {
            parts.push(format!(
                "{} from {}",
                self.keys.join(", "),
                self.env_file.display()
            ));
        }
        if let Some((path, name)) = &self.agent {
            parts.push(format!(
                "the Canon profile '{name}' from {}",
                path.display()
            ));
        }
        parts.join(" and ")
    }
}

/// The Canon keys of `<home>/.env` and the `agents.json` profile its `CANON_AGENT` names
/// (`CANON_HOME` and the `agents.json` overrides as `serve` reads them: the process environment
/// over that `.env`).
fn find_credentials(home: &Path, env: &HostEnv) -> anyhow::Result<Purge> {
    let env_file = home.join(".env");
    let dotenv = match DotEnv::read(&env_file) {
        Ok(dotenv) => dotenv,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => DotEnv::default(),
        Err(error) => {
            return Err(anyhow::Error::new(error).context(format!("reading {}", env_file.display())))
        }
    };
    let keys: Vec<&'static str> = crate::setup::written_keys()
        .filter(|key| dotenv.get(key).is_some())
        .collect();
    let name = dotenv
        .get("CANON_AGENT")
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned);
    let lookup = HermesEnv::new(dotenv);
    let agent = match (name, CanonPaths::from_env(&lookup, env.home.as_deref())) {
        (Some(name), Some(paths)) => {
            let profiles = AgentProfiles::read(&paths.agents)?;
            profiles
                .hermes_candidates()
                .contains(&name)
                .then_some((paths.agents, name))
        }
        _ => None,
    };
    Ok(Purge {
        env_file,
        keys,
        agent,
    })
}

fn uninstall(
    args: &UninstallArgs,
    env: &HostEnv,
    out: &mut dyn std::io::Write,
    answer: &mut Answer,
) -> anyhow::Result<()> {
    let profile = hermes::locate_profile(args.profile.as_deref(), env)?;
    say(out, &profile.line());
    let python = hermes::locate_python(args.python.as_deref(), env)?;
    let helpers = hermes::Helpers::new(python, profile.home.clone());
    let probe = helpers.call("host.probe", json!({}))?;
    if let Some(error) = probe["config_error"].as_str() {
        return Err(anyhow!("{error}"));
    }
    let dir = profile.home.join("plugins").join(shim::PLUGIN_NAME);
    install::check_plugin_dir(&dir, "remove")?;

    let purge = if args.purge_credentials {
        let purge = find_credentials(&profile.home, env)?;
        if !purge.is_empty() && !args.yes {
            if !answer.terminal {
                return Err(anyhow!(
                    "Refusing to remove Canon credentials without a confirmation: run canon-hermes \
                     uninstall --purge-credentials on a terminal, or add --yes"
                ));
            }
            let _ = write!(out, "Remove {}? [y/N] ", purge.describe());
            let _ = out.flush();
            let reply = (answer.read)().context("reading the answer")?;
            if !matches!(reply.trim().to_lowercase().as_str(), "y" | "yes") {
                return Err(anyhow!(
                    "Uninstall cancelled; nothing was changed (run it without \
                     --purge-credentials to keep the credentials)"
                ));
            }
        }
        Some(purge)
    } else {
        None
    };

    let config = install::edit_config(&helpers, &profile.home, Change::Uninstall)?;
    let (plugin, platform) = (shim::PLUGIN_NAME, shim::PLATFORM_NAME);
    say(
        out,
        &if config.answer["plugin_changed"] == true {
            format!("Disabled Hermes plugin: {plugin}")
        } else {
            format!("Hermes plugin not enabled: {plugin}")
        },
    );
    say(
        out,
        &if config.answer["platform_changed"] == true {
            format!("Disabled Hermes platform: {platform}")
        } else {
            format!("Hermes platform not enabled: {platform}")
        },
    );
    for note in config.notes() {
        say(out, &note);
    }
    let mut changed = config.saved();

    match &purge {
        Some(purge) => changed |= purge_credentials(purge, &helpers, out)?,
        None => {
            let kept = find_credentials(&profile.home, env).unwrap_or_default();
            if !kept.is_empty() {
                say(
                    out,
                    &format!(
                        "Kept Canon credentials ({}); canon-hermes uninstall --purge-credentials \
                         removes them",
                        kept.describe()
                    ),
                );
            }
        }
    }

    if dir.is_dir() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        say(out, &format!("Removed Canon shim: {}", dir.display()));
        changed = true;
    } else {
        say(out, &format!("Canon shim not installed: {}", dir.display()));
    }
    if changed {
        say(
            out,
            &format!(
                "Restart the Hermes gateway to unload the Canon plugin: {}",
                install::restart_command(&profile)
            ),
        );
    }
    Ok(())
}

/// Removes what `purge` names: the `.env` keys through Hermes' own `remove_env_value` (the
/// `env.set` helper, which keeps the original `.env` once), then the `agents.json` profile;
/// whether anything was removed.
fn purge_credentials(
    purge: &Purge,
    helpers: &hermes::Helpers,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<bool> {
    if purge.is_empty() {
        say(out, "No Canon credentials to remove.");
        return Ok(false);
    }
    if !purge.keys.is_empty() {
        let answer: Value = helpers
            .call("env.set", json!({"set": {}, "remove": purge.keys}))
            .with_context(|| format!("removing Canon keys from {}", purge.env_file.display()))?;
        if let Some(note) = install::env_backup_note(&answer) {
            say(out, &note);
        }
        let removed: Vec<&str> = answer["removed"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        say(
            out,
            &format!(
                "Removed Canon credentials from {}: {}",
                purge.env_file.display(),
                removed.join(", ")
            ),
        );
    }
    if let Some((path, name)) = &purge.agent {
        let mut profiles = AgentProfiles::read(path)?;
        if profiles.remove(name) {
            profiles.save()?;
            say(
                out,
                &format!("Removed Canon profile '{name}' from {}", path.display()),
            );
        }
    }
    Ok(true)
}
