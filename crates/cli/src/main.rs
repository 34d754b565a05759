//! `canon-hermes`: the command-line entry point of canon-hermes, the Canon platform adapter for
//! Hermes Agent. This binary only wires: it reads argv, calls the library crates and maps results
//! to exit codes.
//!
//! Commands so far:
//! - `canon-hermes card validate [FILE|-]` (alias `cards validate`): validate one canon.card.v1
//!   card and print `{"ok":…,"errors":[…]}` on stdout. Exit 0 valid, 1 invalid, 2 when the input
//!   cannot be read or is not JSON (the reason goes to stderr).
//! - `canon-hermes serve --stdio`: the daemon the Python shim spawns; JSON lines of
//!   hermes-host.md §19 on stdin/stdout, logs on stderr; exit 0 on stdin EOF.

mod card;
mod serve;

use std::process::ExitCode;

/// Exit codes shared by every command.
pub(crate) mod exit {
    /// The command did its job and the answer is "yes" (valid card, healthy check).
    pub(crate) const OK: u8 = 0;
    /// The command did its job and the answer is "no" (invalid card).
    pub(crate) const REJECTED: u8 = 1;
    /// The command could not do its job: bad usage, unreadable input, not JSON.
    pub(crate) const FAILED: u8 = 2;
}

const USAGE: &str = "usage: canon-hermes <command>

commands:
  card validate [FILE|-]   validate a canon.card.v1 card (stdin when FILE is - or absent);
                           prints {\"ok\":…,\"errors\":[…]}; exit 0 valid, 1 invalid, 2 unreadable
  serve --stdio            run the daemon for the Hermes shim (JSON lines on stdin/stdout)
  help                     show this text";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["card" | "cards", "validate", rest @ ..] => card::validate_command(rest),
        ["serve", rest @ ..] => serve::serve_command(rest),
        ["help" | "--help" | "-h"] => {
            usage_to_stdout();
            exit::OK
        }
        ["--version" | "-V"] => {
            card::write_stdout(&format!("canon-hermes {}\n", env!("CARGO_PKG_VERSION")));
            exit::OK
        }
        _ => {
            report_error(&anyhow::anyhow!("unknown or missing command\n\n{USAGE}"));
            exit::FAILED
        }
    };
    ExitCode::from(code)
}

fn usage_to_stdout() {
    card::write_stdout(&format!("{USAGE}\n"));
}

/// Prints an error chain to stderr as `canon-hermes: outer: inner`.
pub(crate) fn report_error(error: &anyhow::Error) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "canon-hermes: {error:#}");
}
