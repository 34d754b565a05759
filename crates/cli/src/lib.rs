//! The `canon-hermes` program (spec `cli.md`): argv → command → exit code. Both binaries of the
//! package, `canon-hermes` and its compatibility alias `canon-hermes-plugin` (cli.md §1), are
//! [`run`]. This crate only wires: it reads argv and the environment, calls the library crates,
//! prints, and maps results to the exit codes of cli.md §1. It holds no Canon logic.
//!
//! Commands:
//! - `install [--setup] [--profile NAME] [--python PATH]` ([`install`]): write the Python shim,
//!   its manifest and the rich-cards skill into a Hermes profile and enable the plugin and the
//!   Canon platform there (cli.md §3); with `--setup`, go on into `setup` in the same profile.
//!   [`hermes`] finds the profile and the Hermes Python and runs Hermes' own config helpers in
//!   it; [`shim`] holds the embedded shim package.
//! - `uninstall [--profile NAME] [--python PATH] [--purge-credentials] [--yes]` ([`uninstall`]):
//!   disable the plugin and the Canon platform through the same config path as `install` and
//!   remove the shim directory (cli.md §3.5); the Canon credentials stay unless
//!   `--purge-credentials` is confirmed (on a terminal, or with `--yes`).
//! - `setup [--agent-id ID] [--profile NAME] [--python PATH] [answers…]` ([`setup`]): register or
//!   reconnect a Canon agent through the owner's approval, or bind an existing `agents.json`
//!   profile or a raw API key, with the prompts and texts of cli.md §4; flags answer prompts for
//!   unattended runs; exit 0 done or declined, 1 failed, 130 cancelled. [`canon`] holds the
//!   unauthenticated Canon calls it shares with `doctor --online` (health, registration).
//! - `doctor [--profile NAME] [--python PATH] [--online] [--json]` ([`doctor`]): the checks of
//!   cli.md §9 on a Hermes profile, one line each; exit 0 ready, 1 needs setup.
//! - `card validate [FILE|-]` (alias `cards validate`): validate one canon.card.v1 card and print
//!   `{"ok":…,"errors":[…]}` on stdout. Exit 0 valid, 1 invalid, 2 when the input cannot be read
//!   or is not JSON (cards.md §16.4).
//! - `send --to <conversation-id|home> [TEXT|-|--file PATH]` ([`send`]): the standalone sender for scripts
//!   and cron outside Hermes (hermes-host.md §15): the daemon's standalone path, one id group of
//!   byte-split parts, replayable with `--replay` after a failure.
//! - `dev [--python PATH] [--model-url URL --model NAME] [--script FILE] [--keep]` ([`dev`]):
//!   the embedded simulator and scripted model, a throwaway Hermes profile (a managed
//!   hermes-agent venv when none is found), `install`, the gateway, and a terminal chat in which
//!   the person typing is the Canon human; Ctrl-C stops everything it started.
//! - `completions <bash|zsh|fish|elvish|powershell>` ([`completions`]): the shell completion
//!   script, generated from this command line by `clap_complete`, on stdout.
//! - `serve --stdio` (hidden): the daemon the Python shim spawns; JSON lines of hermes-host.md §19
//!   on stdin/stdout, logs on stderr; exit 0 on stdin EOF.
//!
//! Argument parsing is `clap` (derive): usage errors exit 2, `--help` and `--version` exit 0.
//! Must not depend on xtask; the library crates it links are those of ARCHITECTURE.md.

mod canon;
mod card;
mod completions;
mod credentials;
mod dev;
mod doctor;
mod hermes;
mod install;
mod log_writer;
mod pipe_io;
mod send;
mod serve;
mod setup;
mod shim;
mod uninstall;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

/// Exit codes shared by every command (cli.md §1).
pub(crate) mod exit {
    /// The command did its job and the answer is "yes" (valid card, healthy check).
    pub(crate) const OK: u8 = 0;
    /// The command did its job and the answer is "no" (invalid card), or it failed with a
    /// printed error (cli.md §1).
    pub(crate) const REJECTED: u8 = 1;
    /// The command could not do its job: bad usage, unreadable input, not JSON.
    pub(crate) const FAILED: u8 = 2;
    /// `setup` was interrupted (Ctrl-C) or its input ended where an answer was needed
    /// (cli.md §1, §11).
    pub(crate) const CANCELLED: u8 = 130;
}

/// The program name used when argv[0] names none (cli.md §1).
const PROGRAM: &str = "canon-hermes";

/// The command line (cli.md §1).
#[derive(Debug, Parser)]
#[command(
    name = PROGRAM,
    version,
    about = "Connect a Hermes Agent gateway to Canon",
    subcommand_required = true,
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Enable the Canon Hermes plugin
    Install(install::InstallArgs),
    /// Disable the Canon Hermes plugin and remove its files
    Uninstall(uninstall::UninstallArgs),
    /// Register or reconnect a Canon agent profile
    Setup(Box<setup::SetupArgs>),
    /// Check Canon Hermes plugin setup
    Doctor(doctor::DoctorArgs),
    /// Validate canon.card.v1 cards
    #[command(
        alias = "cards",
        subcommand_required = true,
        arg_required_else_help = true
    )]
    Card {
        #[command(subcommand)]
        command: CardCommand,
    },
    /// Send a message to a Canon conversation from a script or cron job
    Send(send::SendArgs),
    /// Chat with a Hermes agent through a local Canon: no account, no model key needed
    Dev(dev::DevArgs),
    /// Print the shell completion script (bash, zsh, fish, elvish or powershell) on stdout
    Completions(completions::CompletionsArgs),
    /// Run the daemon the Hermes shim spawns (JSON lines on stdin and stdout)
    #[command(hide = true)]
    Serve {
        /// Speak the shim protocol on stdin and stdout
        #[arg(long, required = true)]
        stdio: bool,
    },
}

#[derive(Debug, Subcommand)]
enum CardCommand {
    /// Validate one card; prints {"ok":…,"errors":[…]}; exit 0 valid, 1 invalid, 2 unreadable
    Validate {
        /// The card's JSON file; stdin when FILE is - or absent
        #[arg(value_name = "FILE|-")]
        file: Option<String>,
    },
}

/// Runs the program with this process's argv and returns its exit code.
pub fn run() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let name = program_name(args.first());
    // Usage and `--version` name the binary that runs: the compatibility alias says
    // `canon-hermes-plugin` (cli.md §1).
    let command = Cli::command().bin_name(&name).display_name(&name);
    let matches = match command.try_get_matches_from(&args) {
        Ok(matches) => matches,
        Err(error) => return clap_exit(&error),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => return clap_exit(&error),
    };
    let code = match cli.command {
        Command::Install(args) => install::install_command(&args),
        Command::Uninstall(args) => uninstall::uninstall_command(&args),
        Command::Setup(args) => setup::setup_command(&args),
        Command::Doctor(args) => doctor::doctor_command(&args),
        Command::Card {
            command: CardCommand::Validate { file },
        } => card::validate_command(file.as_deref()),
        Command::Send(args) => {
            let code = send::send_command(&args);
            serve::flush_logs();
            code
        }
        Command::Dev(args) => dev::dev_command(&args),
        Command::Completions(args) => {
            completions::completions_command(&args, Cli::command(), &name)
        }
        Command::Serve { stdio: _ } => serve::serve_command(&["--stdio"]),
    };
    ExitCode::from(code)
}

/// The basename of argv[0], else `canon-hermes` (cli.md §1).
fn program_name(argv0: Option<&OsString>) -> String {
    argv0
        .and_then(|arg| std::path::Path::new(arg).file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| PROGRAM.to_owned())
}

/// Prints a clap outcome (help and version on stdout, usage errors on stderr) and returns its
/// exit code: 0 for help and version, 2 for a usage error (cli.md §1).
fn clap_exit(error: &clap::Error) -> ExitCode {
    let _ = error.print();
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(exit::FAILED))
}

/// Prints an error chain to stderr as `canon-hermes: outer: inner`.
pub(crate) fn report_error(error: &anyhow::Error) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{PROGRAM}: {error:#}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_name_is_the_basename_of_argv0() {
        let name = |arg: &str| program_name(Some(&OsString::from(arg)));
        assert_eq!(
            name("/usr/local/bin/canon-hermes-plugin"),
            "canon-hermes-plugin"
        );
        assert_eq!(name("canon-hermes"), "canon-hermes");
        assert_eq!(name(""), "canon-hermes");
        assert_eq!(program_name(None), "canon-hermes");
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn help_is_wrapped_to_the_width_it_is_given() {
        // clap's `wrap_help` takes the terminal's width; an 80-column terminal is the usual narrow one.
        let mut command = Cli::command().term_width(80);
        command.build();
        let mut commands = vec![command.clone()];
        commands.extend(command.get_subcommands().cloned());
        for mut command in commands {
            let name = command.get_name().to_owned();
            for help in [command.render_help(), command.render_long_help()] {
                let text = help.to_string();
                let widest = text.lines().map(|line| line.chars().count()).max();
                assert!(widest.is_some_and(|w| w <= 80), "{name}:\n{text}");
            }
        }
    }
}
