//! The `set-hermes-telegram` controller (coms-bridge.md §9): `status` checks the Hermes side,
//! `install` puts the packaged `hub-liaison` skill into a Hermes profile, `on` and `off` start
//! and stop the bridge daemon in a Herdr pane.
//!
//! [`parse_request`] validates the command line; [`run`] carries out a [`Request`] with Hermes
//! and Herdr behind the [`Runner`] trait ([`ProcessRunner`] runs the real programs; tests script
//! them) and returns an [`Outcome`], which [`Outcome::render`] prints.
//!
//! Boundaries (coms-bridge.md §1): the controller never sends a test Telegram message, never
//! starts a stopped gateway (`--restart` only restarts a running one), never enables a skill or
//! toolset (it prints the command instead), and never guesses a profile: without `--profile` it
//! requires exactly one running gateway, and the profile's directory always comes from
//! `hermes profile show`. Synchronous: every call is a short child process.

mod parse;
mod skill;

use std::path::{Path, PathBuf};

use serde_json::Value;

pub use parse::{
    herdr_json, profile_path, project_from_process_info, running_gateways, skill_enabled,
    strip_ansi, tool_enabled,
};
pub use skill::{ensure_real_dir, fingerprint_dir, install_tree, SkillTree};

use crate::wire::iso;
use crate::wire::names::{is_hermes_profile, quoted, validate_project};

/// The program name in usage lines and remedies.
pub const PROGRAM: &str = "coms-hermes-bridge";

/// The Herdr label of the bridge pane.
pub const PANE_LABEL: &str = "hermes-bridge";

/// The `Usage:` block appended to usage errors.
pub const USAGE: &str = "Usage:
  coms-hermes-bridge set-hermes-telegram install [--profile NAME] [--force] [--restart]
  coms-hermes-bridge set-hermes-telegram status  [--profile NAME]
  coms-hermes-bridge set-hermes-telegram on  <telegram-id[:topic-id]> [--profile NAME]
  coms-hermes-bridge set-hermes-telegram off <telegram-id[:topic-id]> [--profile NAME]";

/// Why the controller stopped. The message is printed after `coms-hermes-bridge: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// Bad usage; the [`USAGE`] block follows the message.
    #[error("{0}\n{USAGE}")]
    Usage(String),
    /// The action failed.
    #[error("{0}")]
    Failed(String),
}

/// The four actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read-only readiness check.
    Status,
    /// Install the skill.
    Install,
    /// Start the bridge in a Herdr pane.
    On,
    /// Close the bridge panes.
    Off,
}

impl Action {
    /// The action's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Status => "status",
            Action::Install => "install",
            Action::On => "on",
            Action::Off => "off",
        }
    }
}

/// A validated command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// What to do.
    pub action: Action,
    /// `telegram:<id>` for `on` and `off`.
    pub target: Option<String>,
    /// `--profile`, trimmed, when given and non-empty.
    pub profile: Option<String>,
    /// `--force` (install only).
    pub force: bool,
    /// `--restart` (install only).
    pub restart: bool,
}

/// Whether `id` is digits, optionally `:` and digits (coms-bridge.md §9.1).
pub fn is_telegram_id(id: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match id.split_once(':') {
        Some((chat, topic)) => digits(chat) && digits(topic),
        None => digits(id),
    }
}

/// Validates the positionals and flags of `set-hermes-telegram`.
pub fn parse_request(
    positionals: &[String],
    profile: Option<&str>,
    force: bool,
    restart: bool,
) -> Result<Request, ControlError> {
    let shape = || {
        ControlError::Usage(
            "Expected install, status, or an on/off action with one Telegram ID.".into(),
        )
    };
    let (action, id) = match positionals {
        [a] if a == "install" => (Action::Install, None),
        [a] if a == "status" => (Action::Status, None),
        [a, id] if a == "on" => (Action::On, Some(id)),
        [a, id] if a == "off" => (Action::Off, Some(id)),
        _ => return Err(shape()),
    };
    if (force || restart) && action != Action::Install {
        return Err(ControlError::Usage(
            "--force and --restart are valid only with install.".into(),
        ));
    }
    if id.is_some_and(|id| !is_telegram_id(id)) {
        return Err(ControlError::Usage(
            "Telegram ID must be digits, optionally followed by a colon and a numeric topic ID."
                .into(),
        ));
    }
    Ok(Request {
        action,
        target: id.map(|id| format!("telegram:{id}")),
        profile: profile
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned),
        force,
        restart,
    })
}

/// Runs one external program (`hermes` or `herdr`): `Ok(stdout)` on exit status 0, else the
/// error text of coms-bridge.md §9.2.
pub trait Runner {
    /// Runs the program with `args`.
    fn run(&mut self, args: &[String]) -> Result<String, String>;
}

/// A [`Runner`] for a real program found through `PATH`, with no shell.
#[derive(Debug, Clone)]
pub struct ProcessRunner {
    program: String,
}

impl ProcessRunner {
    /// A runner of `program`.
    pub fn new(program: &str) -> Self {
        ProcessRunner {
            program: program.to_owned(),
        }
    }
}

impl Runner for ProcessRunner {
    fn run(&mut self, args: &[String]) -> Result<String, String> {
        let output = std::process::Command::new(&self.program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("failed to run {}: {e}", self.program))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            return Ok(stdout);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let message = match (stderr.trim(), stdout.trim()) {
            ("", "") => format!("{} {} failed", self.program, args.join(" ")),
            ("", out) => out.to_owned(),
            (err, _) => err.to_owned(),
        };
        Err(strip_ansi(&message))
    }
}

/// Everything an action needs from outside.
pub struct Context<'a> {
    /// Runs `hermes`.
    pub hermes: &'a mut dyn Runner,
    /// Runs `herdr`.
    pub herdr: &'a mut dyn Runner,
    /// The absolute path of this program, which `on` starts in the new pane.
    pub executable: PathBuf,
    /// `HERDR_PANE_ID`.
    pub pane_id: Option<String>,
    /// `PI_COMS_PROJECT`.
    pub pi_coms_project: Option<String>,
    /// The working directory (the split's `--cwd` when the pane reports none).
    pub cwd: PathBuf,
    /// Now, for the backup name.
    pub now_ms: u64,
    /// A random token for the temp directory's name.
    pub nonce: String,
    /// The skill tree `install` ships.
    pub skill: SkillTree,
}

/// Whether the installed skill matches the packaged one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillState {
    /// Not installed.
    Missing,
    /// Identical to the packaged tree.
    Current,
    /// Different from it.
    Drifted,
}

impl SkillState {
    /// `missing`, `current` or `drifted`.
    pub fn as_str(self) -> &'static str {
        match self {
            SkillState::Missing => "missing",
            SkillState::Current => "current",
            SkillState::Drifted => "drifted",
        }
    }
}

/// What `status` learns about a Hermes profile (coms-bridge.md §9.3, §9.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// The profile name.
    pub profile: String,
    /// Its directory, as Hermes reports it.
    pub path: PathBuf,
    /// Whether its gateway runs.
    pub gateway_running: bool,
    /// The installed skill against the packaged one.
    pub skill_state: SkillState,
    /// Whether Hermes lists `hub-liaison` as enabled.
    pub skill_enabled: bool,
    /// Whether the `terminal` toolset is enabled for Telegram.
    pub terminal: bool,
    /// Whether the `file` toolset is enabled for Telegram.
    pub file: bool,
}

impl Inspection {
    /// Current and enabled skill, both toolsets, and a running gateway.
    pub fn ready(&self) -> bool {
        self.skill_state == SkillState::Current && self.tools_and_gateway_ready()
    }

    fn tools_and_gateway_ready(&self) -> bool {
        self.skill_enabled && self.terminal && self.file && self.gateway_running
    }
}

/// What `install` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallReport {
    /// The profile after the install.
    pub inspection: Inspection,
    /// Whether files were copied.
    pub changed: bool,
    /// Where the previous tree went.
    pub backup_dir: Option<PathBuf>,
    /// Whether the gateway was restarted (`--restart`).
    pub restarted: bool,
    /// Whether a running gateway still needs a restart to load the new skill.
    pub restart_required: bool,
    /// Enabled skill, both toolsets, running gateway.
    pub ready: bool,
}

/// What `on` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnReport {
    /// The Hermes profile the bridge sends with.
    pub hermes_profile: String,
    /// The new pane.
    pub pane_id: String,
    /// The coms project.
    pub project: String,
    /// `telegram:<id>`.
    pub target: String,
    /// The Herdr workspace.
    pub workspace: String,
    /// Bridge panes closed first.
    pub closed: Vec<String>,
}

/// What `off` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffReport {
    /// The closed bridge panes.
    pub closed: Vec<String>,
    /// The coms project.
    pub project: String,
    /// `telegram:<id>` (only echoed).
    pub target: String,
    /// The Herdr workspace.
    pub workspace: String,
}

/// The result of an action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `status`.
    Status(Inspection),
    /// `install`.
    Install(InstallReport),
    /// `on`.
    On(OnReport),
    /// `off`.
    Off(OffReport),
}

fn enabled(on: bool) -> &'static str {
    if on {
        "enabled"
    } else {
        "disabled"
    }
}

fn running(on: bool) -> &'static str {
    if on {
        "running"
    } else {
        "stopped"
    }
}

impl Outcome {
    /// The text printed on stdout.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut line = |text: String| {
            out.push_str(&text);
            out.push('\n');
        };
        match self {
            Outcome::Status(i) => {
                line(format!("Hermes Telegram status ({})", i.profile));
                line(format!("  profile: {}", i.path.display()));
                line(format!("  gateway: {}", running(i.gateway_running)));
                line(format!(
                    "  hub-liaison: {}, {}",
                    i.skill_state.as_str(),
                    enabled(i.skill_enabled)
                ));
                line(format!(
                    "  Telegram tools: terminal={}, file={}",
                    enabled(i.terminal),
                    enabled(i.file)
                ));
                line(format!("  ready: {}", if i.ready() { "yes" } else { "no" }));
                if i.skill_state != SkillState::Current {
                    let force = if i.skill_state == SkillState::Drifted {
                        " --force"
                    } else {
                        ""
                    };
                    line(format!(
                        "  next: {PROGRAM} set-hermes-telegram install --profile {}{force}",
                        i.profile
                    ));
                }
            }
            Outcome::Install(r) => {
                let i = &r.inspection;
                let p = &i.profile;
                line(format!(
                    "✓ hub-liaison is {} in Hermes profile {p}.",
                    i.skill_state.as_str()
                ));
                line(if r.changed {
                    "  installed packaged coms-hermes-bridge copy".into()
                } else {
                    "  no skill files changed".into()
                });
                if let Some(dir) = &r.backup_dir {
                    line(format!("  backup: {}", dir.display()));
                }
                line(format!("  gateway: {}", running(i.gateway_running)));
                line(format!(
                    "  Telegram tools: terminal={}, file={}",
                    enabled(i.terminal),
                    enabled(i.file)
                ));
                if !i.skill_enabled {
                    line(format!("  action required: enable hub-liaison with: hermes --profile {p} skills config"));
                }
                if !(i.terminal && i.file) {
                    line(format!("  action required: hermes --profile {p} tools enable --platform telegram terminal file"));
                }
                if !i.gateway_running {
                    line(format!(
                        "  action required: hermes --profile {p} gateway start"
                    ));
                }
                if r.restarted {
                    line("  gateway restarted by explicit --restart".into());
                } else if r.restart_required {
                    line(format!(
                        "  restart required: hermes --profile {p} gateway restart"
                    ));
                }
                let ready = r.ready && !r.restart_required;
                line(format!(
                    "  ready: {}",
                    if ready {
                        "yes"
                    } else {
                        "pending actions above"
                    }
                ));
            }
            Outcome::On(r) => {
                line(format!("✓ Hermes Telegram bridge is on: {}", r.target));
                line(format!("  project: {}", r.project));
                line(format!("  Hermes profile: {}", r.hermes_profile));
                line(format!("  workspace: {}", r.workspace));
                line(format!("  pane: {} ({PANE_LABEL})", r.pane_id));
            }
            Outcome::Off(r) if r.closed.is_empty() => {
                line(format!(
                    "✓ Hermes Telegram bridge is already off in {}.",
                    r.workspace
                ));
            }
            Outcome::Off(r) => {
                line(format!(
                    "✓ Hermes Telegram bridge is off in {} (closed {}).",
                    r.workspace,
                    r.closed.join(", ")
                ));
            }
        }
        out
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn hermes(ctx: &mut Context<'_>, list: &[&str]) -> Result<String, ControlError> {
    ctx.hermes.run(&args(list)).map_err(ControlError::Failed)
}

/// Resolves the profile and inspects it (coms-bridge.md §9.3, §9.4). Read-only.
pub fn inspect(ctx: &mut Context<'_>, profile: Option<&str>) -> Result<Inspection, ControlError> {
    let gateways = running_gateways(&hermes(ctx, &["gateway", "list"])?);
    let profile = match profile {
        Some(p) => p.to_owned(),
        None => match gateways.as_slice() {
            [only] => only.clone(),
            other => {
                return Err(ControlError::Failed(format!(
                    "cannot infer Hermes profile: expected exactly one running gateway, found {}; pass --profile NAME",
                    other.len()
                )))
            }
        },
    };
    if !is_hermes_profile(&profile) {
        return Err(ControlError::Failed(format!(
            "Invalid Hermes profile: {}",
            quoted(&profile)
        )));
    }
    let show = hermes(ctx, &["profile", "show", &profile])?;
    let path = profile_path(&show, &profile).ok_or_else(|| {
        ControlError::Failed(format!(
            "Hermes returned an invalid profile description for {profile}"
        ))
    })?;
    let path = PathBuf::from(path);
    let real_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_dir());
    if !real_dir {
        return Err(ControlError::Failed(format!(
            "unsafe or missing Hermes profile directory: {}",
            path.display()
        )));
    }
    let installed = path.join("skills").join("hub-liaison");
    let skill_state = if std::fs::symlink_metadata(&installed).is_err() {
        SkillState::Missing
    } else if fingerprint_dir(&installed)? == ctx.skill.fingerprint() {
        SkillState::Current
    } else {
        SkillState::Drifted
    };
    let skills = hermes(
        ctx,
        &["--profile", &profile, "skills", "list", "--enabled-only"],
    )?;
    let tools = hermes(
        ctx,
        &[
            "--profile",
            &profile,
            "tools",
            "list",
            "--platform",
            "telegram",
        ],
    )?;
    Ok(Inspection {
        gateway_running: gateways.contains(&profile),
        profile,
        path,
        skill_state,
        skill_enabled: skill_enabled(&skills),
        terminal: tool_enabled(&tools, "terminal"),
        file: tool_enabled(&tools, "file"),
    })
}

/// Carries out `request`.
pub fn run(request: &Request, ctx: &mut Context<'_>) -> Result<Outcome, ControlError> {
    match request.action {
        Action::Status => inspect(ctx, request.profile.as_deref()).map(Outcome::Status),
        Action::Install => install(request, ctx).map(Outcome::Install),
        Action::On => turn_on(request, ctx).map(Outcome::On),
        Action::Off => turn_off(request, ctx).map(Outcome::Off),
    }
}

fn install(request: &Request, ctx: &mut Context<'_>) -> Result<InstallReport, ControlError> {
    let before = inspect(ctx, request.profile.as_deref())?;
    let profile = before.profile.clone();
    if before.skill_state == SkillState::Drifted && !request.force {
        return Err(ControlError::Failed(format!(
            "hub-liaison differs from the packaged coms-hermes-bridge version in profile {profile}; re-run with --force to back it up and replace it"
        )));
    }
    let mut backup_dir = None;
    let changed = before.skill_state != SkillState::Current;
    if changed {
        let stamp = iso::format_ms(ctx.now_ms).replace([':', '.'], "-");
        backup_dir = install_tree(&before.path, &ctx.skill, &stamp, &ctx.nonce)?;
    }
    let inspection = inspect(ctx, Some(&profile))?;
    if inspection.skill_state != SkillState::Current {
        return Err(ControlError::Failed(
            "hub-liaison verification failed after install".into(),
        ));
    }
    let restarted = request.restart && inspection.gateway_running;
    if restarted {
        hermes(ctx, &["--profile", &profile, "gateway", "restart"])?;
    }
    Ok(InstallReport {
        restart_required: changed && inspection.gateway_running && !restarted,
        ready: inspection.tools_and_gateway_ready(),
        inspection,
        changed,
        backup_dir,
        restarted,
    })
}

fn herdr(ctx: &mut Context<'_>, list: &[&str]) -> Result<Value, ControlError> {
    let stdout = ctx.herdr.run(&args(list)).map_err(ControlError::Failed)?;
    herdr_json(&stdout).ok_or_else(|| {
        ControlError::Failed(format!(
            "herdr returned invalid JSON for {} {}",
            list.first().unwrap_or(&""),
            list.get(1).unwrap_or(&"")
        ))
    })
}

struct Workspace {
    current: String,
    workspace: String,
    cwd: Option<String>,
    project: String,
    closed: Vec<String>,
}

/// Steps 1–4 of coms-bridge.md §9.6: resolve the workspace and project, close bridge panes.
fn close_bridges(ctx: &mut Context<'_>) -> Result<Workspace, ControlError> {
    let current = ctx
        .pane_id
        .clone()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| {
            ControlError::Failed(
                "HERDR_PANE_ID is required; run this command inside a Herdr pane".into(),
            )
        })?;
    let pane = herdr(ctx, &["pane", "get", &current])?;
    let workspace = pane
        .pointer("/result/pane/workspace_id")
        .and_then(Value::as_str)
        .filter(|w| !w.is_empty())
        .ok_or_else(|| {
            ControlError::Failed(format!(
                "cannot resolve workspace for current pane {current}"
            ))
        })?
        .to_owned();
    let cwd = pane
        .pointer("/result/pane/cwd")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let info = herdr(ctx, &["pane", "process-info", "--pane", &current])?;
    let project = project_from_process_info(&info)
        .or_else(|| {
            ctx.pi_coms_project
                .as_deref()
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "default".into());
    if validate_project(&project).is_err() {
        return Err(ControlError::Failed(format!(
            "Invalid project inferred from the current pane: {}",
            quoted(&project)
        )));
    }
    let panes = herdr(ctx, &["pane", "list", "--workspace", &workspace])?;
    let bridges: Vec<String> = panes
        .pointer("/result/panes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|p| p.get("label").and_then(Value::as_str) == Some(PANE_LABEL))
        .filter_map(|p| p.get("pane_id").and_then(Value::as_str))
        .filter(|id| *id != current)
        .map(str::to_owned)
        .collect();
    for id in &bridges {
        herdr(ctx, &["pane", "close", id])?;
    }
    Ok(Workspace {
        current,
        workspace,
        cwd,
        project,
        closed: bridges,
    })
}

/// `value` single-quoted for a POSIX shell (a `'` becomes `'"'"'`).
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\"'\"'"))
}

fn turn_on(request: &Request, ctx: &mut Context<'_>) -> Result<OnReport, ControlError> {
    if ctx.pane_id.as_deref().is_none_or(str::is_empty) {
        return Err(ControlError::Failed(
            "HERDR_PANE_ID is required; run this command inside a Herdr pane".into(),
        ));
    }
    let inspection = inspect(ctx, request.profile.as_deref())?;
    if !inspection.ready() {
        let p = &inspection.profile;
        let mut problems = Vec::new();
        if inspection.skill_state != SkillState::Current {
            problems.push(format!(
                "hub-liaison is {}",
                inspection.skill_state.as_str()
            ));
        }
        if !inspection.skill_enabled {
            problems.push("hub-liaison is not enabled".into());
        }
        if !(inspection.terminal && inspection.file) {
            problems.push("Telegram terminal/file tools are not both enabled".into());
        }
        if !inspection.gateway_running {
            problems.push(format!("gateway profile {p} is not running"));
        }
        let force = if inspection.skill_state == SkillState::Drifted {
            " --force"
        } else {
            ""
        };
        return Err(ControlError::Failed(format!(
            "{}. Run: {PROGRAM} set-hermes-telegram install --profile {p}{force}",
            problems.join("; ")
        )));
    }
    let target = request.target.clone().unwrap_or_default();
    let space = close_bridges(ctx)?;
    let cwd = space
        .cwd
        .clone()
        .unwrap_or_else(|| ctx.cwd.to_string_lossy().into_owned());
    let split = herdr(
        ctx,
        &[
            "pane",
            "split",
            &space.current,
            "--direction",
            "right",
            "--ratio",
            "0.3",
            "--cwd",
            &cwd,
            "--no-focus",
        ],
    )?;
    let new = split
        .pointer("/result/pane/pane_id")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ControlError::Failed("herdr did not return the new bridge pane ID".into()))?
        .to_owned();
    let command = format!(
        "{} --project {} --hermes-profile {} --timeout 1800000 --to {}",
        shell_quote(&ctx.executable.to_string_lossy()),
        shell_quote(&space.project),
        shell_quote(&inspection.profile),
        shell_quote(&target),
    );
    let started = herdr(ctx, &["pane", "rename", &new, PANE_LABEL])
        .and_then(|_| herdr(ctx, &["pane", "run", &new, &command]));
    if let Err(error) = started {
        let _ = herdr(ctx, &["pane", "close", &new]);
        return Err(error);
    }
    Ok(OnReport {
        hermes_profile: inspection.profile,
        pane_id: new,
        project: space.project,
        target,
        workspace: space.workspace,
        closed: space.closed,
    })
}

fn turn_off(request: &Request, ctx: &mut Context<'_>) -> Result<OffReport, ControlError> {
    let space = close_bridges(ctx)?;
    Ok(OffReport {
        closed: space.closed,
        project: space.project,
        target: request.target.clone().unwrap_or_default(),
        workspace: space.workspace,
    })
}

/// The absolute path of a program path (the current directory joined when relative).
pub fn absolute(path: &Path, cwd: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        cwd.join(path)
    }
}

#[cfg(test)]
mod tests;
