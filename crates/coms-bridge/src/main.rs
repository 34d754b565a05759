//! `coms-hermes-bridge`: the coms Hermes bridge daemon (no subcommand) and its
//! `set-hermes-telegram` controller (coms-bridge.md §2.1). This file only wires: it reads argv
//! (clap derive) and the environment, installs the stderr `tracing` subscriber, calls the
//! library, prints, and maps results to exit codes: 0 done, 1 any error (usage errors included,
//! as one `coms-hermes-bridge: <message>` line on stderr).

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{ArgAction, Args, Parser, Subcommand};

use coms_hermes_bridge::control::{self, Context, ProcessRunner, SkillTree};
use coms_hermes_bridge::daemon::{self, Config, Environment, RawFlags, PROGRAM};

/// The coms Hermes bridge: a user-remote coms peer that asks a human on Telegram
#[derive(Debug, Parser)]
#[command(name = PROGRAM, version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// The daemon's flags; each value flag may be given once (checked by the library, which
/// words the error).
#[derive(Debug, Args)]
struct DaemonArgs {
    /// Peer name to register (default user-remote)
    #[arg(long, value_name = "NAME", action = ArgAction::Append)]
    name: Vec<String>,
    /// coms project (default default)
    #[arg(long, value_name = "PROJECT", action = ArgAction::Append)]
    project: Vec<String>,
    /// hermes send --to target (default telegram)
    #[arg(long, value_name = "TARGET", action = ArgAction::Append)]
    to: Vec<String>,
    /// Run every send as hermes --profile NAME
    #[arg(long, value_name = "NAME", action = ArgAction::Append)]
    hermes_profile: Vec<String>,
    /// Question timeout in ms (default PI_COMS_TIMEOUT_MS or 1800000)
    #[arg(long, value_name = "MS", action = ArgAction::Append, allow_hyphen_values = true)]
    timeout: Vec<String>,
    /// Answer poll interval in ms (default 1000)
    #[arg(long, value_name = "MS", action = ArgAction::Append, allow_hyphen_values = true)]
    poll_ms: Vec<String>,
    /// Answer directory (default ~/.pi/coms/hermes-bridge/questions)
    #[arg(long, value_name = "DIR", action = ArgAction::Append)]
    questions_dir: Vec<OsString>,
    /// How long a foreign answer file is left in place, in ms (default 30000)
    #[arg(long, value_name = "MS", action = ArgAction::Append, allow_hyphen_values = true)]
    foreign_grace_ms: Vec<String>,
    /// Kill limit of one hermes send, in ms (default 120000)
    #[arg(long, value_name = "MS", action = ArgAction::Append, allow_hyphen_values = true)]
    hermes_timeout_ms: Vec<String>,
    /// How often the registry entry is rewritten, in ms (default 30000); peers count an entry
    /// stale after 90 s, so only shorter intervals make sense (hidden: for tests)
    #[arg(long, value_name = "MS", action = ArgAction::Append, allow_hyphen_values = true, hide = true)]
    heartbeat_ms: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check and prepare Hermes for Telegram questions; start or stop the bridge in Herdr
    SetHermesTelegram(ControlArgs),
}

#[derive(Debug, Args)]
struct ControlArgs {
    /// install | status | on <telegram-id[:topic-id]> | off <telegram-id[:topic-id]>
    #[arg(value_name = "ACTION")]
    positionals: Vec<String>,
    /// Hermes profile (default: the one running gateway)
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// install: back up and replace a differing hub-liaison
    #[arg(long)]
    force: bool,
    /// install: restart a running gateway afterwards
    #[arg(long)]
    restart: bool,
}

fn fail(message: &str) -> ExitCode {
    daemon::diagnostic(message);
    ExitCode::from(1)
}

fn env_string(key: &str) -> Option<String> {
    std::env::var_os(key).map(|v| v.to_string_lossy().into_owned())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            use clap::error::ErrorKind;
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) {
                let _ = error.print();
                return ExitCode::SUCCESS;
            }
            let rendered = error.render().to_string();
            let first = rendered.lines().next().unwrap_or("usage error");
            let message = first.strip_prefix("error: ").unwrap_or(first);
            return fail(&format!("{message} (see {PROGRAM} --help)"));
        }
    };
    // Colour only on a terminal: a log redirected to a file or a pipe gets no escape codes
    // (tracing-subscriber itself only checks NO_COLOR).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match cli.command {
        Some(Command::SetHermesTelegram(args)) => controller(&args),
        None => run_daemon(cli.daemon),
    }
}

fn run_daemon(args: DaemonArgs) -> ExitCode {
    let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
        return fail("HOME is not set");
    };
    let env = Environment {
        home: PathBuf::from(home),
        pi_coms_dir: std::env::var_os("PI_COMS_DIR"),
        pi_coms_timeout_ms: env_string("PI_COMS_TIMEOUT_MS"),
        herdr_pane_id: env_string("HERDR_PANE_ID"),
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
    };
    let raw = RawFlags {
        name: args.name,
        project: args.project,
        to: args.to,
        hermes_profile: args.hermes_profile,
        timeout: args.timeout,
        poll_ms: args.poll_ms,
        questions_dir: args.questions_dir,
        foreign_grace_ms: args.foreign_grace_ms,
        hermes_timeout_ms: args.hermes_timeout_ms,
        heartbeat_ms: args.heartbeat_ms,
    };
    let config = match Config::from_flags(&raw, &env) {
        Ok(config) => config,
        Err(error) => return fail(&error.to_string()),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&format!("cannot start the runtime: {error}")),
    };
    let outcome = runtime.block_on(daemon::run(config));
    // Dropping a runtime waits for its blocking tasks; a scan of the questions directory stuck
    // in the file system (a hung network home) must not keep a stopped daemon alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&format!("{:#}", anyhow::Error::from(error))),
    }
}

fn controller(args: &ControlArgs) -> ExitCode {
    let request = match control::parse_request(
        &args.positionals,
        args.profile.as_deref(),
        args.force,
        args.restart,
    ) {
        Ok(request) => request,
        Err(error) => return fail(&error.to_string()),
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let executable = std::env::current_exe()
        .map(|exe| control::absolute(&exe, &cwd))
        .unwrap_or_else(|_| PathBuf::from(PROGRAM));
    let mut hermes = ProcessRunner::new("hermes");
    let mut herdr = ProcessRunner::new("herdr");
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut ctx = Context {
        hermes: &mut hermes,
        herdr: &mut herdr,
        executable,
        pane_id: env_string("HERDR_PANE_ID"),
        pi_coms_project: env_string("PI_COMS_PROJECT"),
        cwd,
        now_ms,
        nonce: coms_hermes_bridge::wire::ids::new_ulid().to_lowercase(),
        skill: SkillTree::packaged(),
    };
    match control::run(&request, &mut ctx) {
        Ok(outcome) => {
            let _ = std::io::stdout()
                .lock()
                .write_all(outcome.render().as_bytes());
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error.to_string()),
    }
}
