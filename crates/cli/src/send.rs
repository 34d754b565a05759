//! `canon-hermes send --to <conversation-id|home> [TEXT|-|--file PATH]`: the standalone sender
//! for scripts and cron outside Hermes (hermes-host.md §15, turns.md §4.6, canon-wire.md §8.8).
//!
//! This module only wires. The Hermes home is the profile `--profile`, `HERMES_HOME` or the
//! `hermes` CLI's rules pick (`hermes::locate_profile`, cli.md §2.1); the configuration is the one
//! `serve --stdio` builds, from the process environment and that home's `.env`
//! (`serve::config_in_home`, cli.md §5); the send is `canon_adapter::standalone::send`, the
//! daemon's own standalone path (one id group, byte-split parts through `send_to`, the with-id
//! retries). Output: one line on stdout when the message landed; on failure one line on stderr
//! (`canon-hermes: <safe error>`) and one saying what to do next. The API key is never printed:
//! every error text comes from `canon_profiles`, `canon_host` or `canon_transport`, which never
//! put a secret in one.

use std::io::{IsTerminal as _, Read as _, Write as _};
use std::path::{Path, PathBuf};

use canon_adapter::standalone::{self, StandaloneError, StandaloneRequest};
use canon_host::connect::MISSING_CREDENTIALS_MESSAGE;
use canon_host::turn::FailureClass;

use crate::exit;
use crate::hermes::{self, HostEnv};
use crate::serve;

/// The largest message `send` reads (our number, 1 MiB): the parts are not capped, but a script
/// that pipes a runaway stream should get an error, not an exhausted memory.
pub(crate) const MAX_TEXT_BYTES: usize = 1 << 20;

/// The `--to` value that names `CANON_HOME_CHANNEL`.
const HOME: &str = "home";

/// Help text after the options.
const AFTER_HELP: &str = "\
The text is split by UTF-8 bytes into parts under Canon's limit and sent as one id group with \
the parts' ids as idempotency keys, so a retry inside the run never duplicates a part. A run that \
fails after parts may have landed prints an id group token: running the same command (same --to, \
same text) again with --replay <token> sends only what is missing.

Credentials are resolved as the Canon platform resolves them in Hermes: the process environment, \
then <HERMES_HOME>/.env of the profile (--profile, HERMES_HOME or the active profile): \
CANON_AGENT or the one Hermes profile of agents.json, or CANON_API_KEY with \
CANON_ENVIRONMENT_ID. `--to home` sends to CANON_HOME_CHANNEL from the same places. \
The message is TEXT, the UTF-8 file --file PATH, or stdin (TEXT - or none). Trailing line \
breaks are dropped; an empty message is refused.

Exit status: 0 sent (stdout: `Sent <n> part(s) to <conversation>; last message <id>`), 1 failed \
(stderr says why and what to do next), 2 usage error, nothing to send, or a message that cannot \
be read (a missing file, text that is not UTF-8).

Examples:
  canon-hermes send --to home \"Backup finished\"
  df -h | canon-hermes send --to c-1234 -
  canon-hermes send --to home --file /var/log/backup-summary.txt";

/// `canon-hermes send` (hermes-host.md §15).
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct SendArgs {
    /// The Canon conversation id to send to, or `home` for CANON_HOME_CHANNEL
    #[arg(long, value_name = "CONVERSATION-ID|home", value_parser = conversation)]
    to: String,
    /// The message; read from stdin when TEXT is - or absent (and there is no --file)
    #[arg(value_name = "TEXT|-")]
    text: Option<String>,
    /// Read the message from this UTF-8 text file instead of TEXT or stdin
    #[arg(long, value_name = "PATH", conflicts_with = "text")]
    file: Option<PathBuf>,
    /// Finish an earlier send that failed: the id group token it printed (standalone:<32 hex>)
    #[arg(long, value_name = "TOKEN", value_parser = replay_token)]
    replay: Option<u128>,
    /// The Hermes profile whose .env holds the Canon settings (default: the active profile, as
    /// `hermes` picks it)
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
}

/// `--to`: a non-blank value, trimmed.
fn conversation(raw: &str) -> Result<String, String> {
    let value = raw.trim();
    if value.is_empty() {
        return Err("the conversation id is empty".to_owned());
    }
    Ok(value.to_owned())
}

/// `--replay`: a token exactly as a failed `send` printed it.
fn replay_token(raw: &str) -> Result<u128, String> {
    standalone::parse_token(raw).ok_or_else(|| {
        "expected the token a failed send printed: standalone:<32 lowercase hex>".to_owned()
    })
}

/// Why the message could not be read (a usage error, exit 2).
#[derive(Debug, PartialEq, Eq)]
enum TextError {
    Empty,
    /// `--file` names an empty (or blank) file.
    EmptyFile(PathBuf),
    TooLong,
    /// Not UTF-8: on stdin (`None`) or in this file.
    NotUtf8(Option<PathBuf>),
    /// Reading failed: stdin (`None`) or this file, and the error's text.
    Read(Option<PathBuf>, String),
}

impl std::fmt::Display for TextError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TextError::Empty => f.write_str(
                "nothing to send: the message is empty; pass TEXT or pipe the message on stdin",
            ),
            TextError::EmptyFile(path) => {
                write!(f, "nothing to send: {} is empty", path.display())
            }
            TextError::TooLong => write!(
                f,
                "the message is longer than {MAX_TEXT_BYTES} bytes; send it in several runs"
            ),
            TextError::NotUtf8(None) => f.write_str("the message on stdin is not UTF-8 text"),
            TextError::NotUtf8(Some(path)) => {
                write!(f, "the message in {} is not UTF-8 text", path.display())
            }
            TextError::Read(None, error) => {
                write!(f, "could not read the message from stdin: {error}")
            }
            TextError::Read(Some(path), error) => {
                write!(
                    f,
                    "could not read the message from {}: {error}",
                    path.display()
                )
            }
        }
    }
}

/// The message: the file `--file` names, TEXT, or stdin for `-` or no TEXT (at most
/// [`MAX_TEXT_BYTES`]; clap refuses TEXT beside `--file`).
fn read_text(arg: Option<&str>, file: Option<&Path>) -> Result<String, TextError> {
    if let Some(path) = file {
        let bytes = std::fs::File::open(path)
            .and_then(read_capped)
            .map_err(|error| TextError::Read(Some(path.to_owned()), error.to_string()))?;
        let raw = utf8(bytes, Some(path))?;
        return message(raw).map_err(|error| match error {
            TextError::Empty => TextError::EmptyFile(path.to_owned()),
            other => other,
        });
    }
    let raw = match arg {
        Some(text) if text != "-" => text.to_owned(),
        _ => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "Reading the message from stdin; end it with Ctrl-D."
                );
            }
            let bytes = read_capped(stdin.lock())
                .map_err(|error| TextError::Read(None, error.to_string()))?;
            utf8(bytes, None)?
        }
    };
    message(raw)
}

/// At most one byte more than [`MAX_TEXT_BYTES`] of `input`, so a longer message is noticed
/// without reading all of it.
fn read_capped(input: impl std::io::Read) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let limit = u64::try_from(MAX_TEXT_BYTES).map_or(u64::MAX, |max| max + 1);
    input.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The bytes as text: too long, or not UTF-8 (from stdin, `None`, or the file), is refused.
fn utf8(bytes: Vec<u8>, path: Option<&Path>) -> Result<String, TextError> {
    if bytes.len() > MAX_TEXT_BYTES {
        return Err(TextError::TooLong);
    }
    String::from_utf8(bytes).map_err(|_| TextError::NotUtf8(path.map(Path::to_owned)))
}

/// The text to send: trailing line breaks dropped (as a shell's `$(…)` does), refused when
/// nothing but whitespace is left or when longer than [`MAX_TEXT_BYTES`].
fn message(raw: String) -> Result<String, TextError> {
    let text = raw.trim_end_matches(['\n', '\r']);
    if text.trim().is_empty() {
        return Err(TextError::Empty);
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(TextError::TooLong);
    }
    Ok(text.to_owned())
}

/// Prints `canon-hermes: <error>` and the next step on stderr.
fn fail(error: &str, next: &str) -> u8 {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{}: {error}", crate::PROGRAM);
    let _ = writeln!(err, "{next}");
    exit::REJECTED
}

/// Runs `send`; returns the exit code (cli.md §1: 0 sent, 1 failed, 2 usage).
pub(crate) fn send_command(args: &SendArgs) -> u8 {
    let text = match read_text(args.text.as_deref(), args.file.as_deref()) {
        Ok(text) => text,
        Err(error) => {
            crate::report_error(&anyhow::anyhow!("{error}"));
            return exit::FAILED;
        }
    };
    if std::env::var_os("RUST_LOG").is_some_and(|v| !v.is_empty()) {
        serve::install_logging();
    }
    let profile = match hermes::locate_profile(args.profile.as_deref(), &HostEnv::from_process()) {
        Ok(profile) => profile,
        Err(error) => {
            return fail(
                &format!("{error:#}"),
                "Pass --profile NAME or set HERMES_HOME to the Hermes home that holds the Canon settings.",
            )
        }
    };
    let dotenv = profile.home.join(".env");
    let (config, error) = serve::config_in_home(&profile.home);
    if let Some(error) = error {
        return fail(
            &error,
            &format!(
                "Fix the Canon settings in the environment or in {}, then run the command again.",
                dotenv.display()
            ),
        );
    }
    if config.api_key.expose().is_empty() || config.base_url.is_empty() {
        return fail(
            MISSING_CREDENTIALS_MESSAGE,
            &format!(
                "Set CANON_AGENT (a profile of agents.json), or CANON_API_KEY with \
                 CANON_ENVIRONMENT_ID, in the environment or in {}.",
                dotenv.display()
            ),
        );
    }
    let chat_id = if args.to == HOME {
        if config.home_channel.is_none() {
            return fail(
                "--to home: CANON_HOME_CHANNEL is not set",
                &format!(
                    "Set CANON_HOME_CHANNEL to a conversation id in the environment or in {}, \
                     or pass --to <conversation-id>.",
                    dotenv.display()
                ),
            );
        }
        None
    } else {
        Some(args.to.clone())
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            return fail(
                &format!("starting the tokio runtime: {error}"),
                "Nothing was sent; run the command again.",
            )
        }
    };
    let request = StandaloneRequest {
        chat_id,
        text,
        group: args.replay,
    };
    let report = runtime.block_on(standalone::send(&config, request));
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match report.result {
        Ok(message_id) => {
            let mut line = format!(
                "Sent {} part(s) to {}",
                report.parts,
                report.conversation_id.as_deref().unwrap_or_default()
            );
            if let Some(id) = message_id {
                line.push_str("; last message ");
                line.push_str(&id);
            }
            let _ = writeln!(std::io::stdout().lock(), "{line}");
            exit::OK
        }
        // Refused by Canon's handler (a 4xx that no retry follows): a single part was not
        // stored. A 429 or 503 after the retries is not this: an earlier attempt may have landed.
        Err(StandaloneError::Delivery {
            error,
            class: FailureClass::Rejected,
        }) if report.parts == 1 => fail(
            &error,
            "Nothing was stored; check the conversation id and the Canon settings, then run the \
             command again.",
        ),
        Err(StandaloneError::Delivery { error, .. }) => fail(
            &error,
            &format!(
                "Parts that landed are not sent twice: run the same command (same --to, same \
                 text) again with --replay {} to send the rest.",
                report.token
            ),
        ),
        Err(error) => fail(
            &error.to_string(),
            "Nothing was sent; check the network and the Canon settings, then run the command \
             again.",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: &str, expected: Result<&str, TextError>) {
        assert_eq!(
            message(raw.to_owned()),
            expected.map(str::to_owned),
            "{raw:?}"
        );
    }

    #[test]
    fn the_message_keeps_everything_but_trailing_line_breaks() {
        check("hello", Ok("hello"));
        check("hello\n", Ok("hello"));
        check("hello\r\n\n", Ok("hello"));
        check("  two\n\nparagraphs  \n", Ok("  two\n\nparagraphs  "));
        check("", Err(TextError::Empty));
        check("\n", Err(TextError::Empty));
        check(" \t\n ", Err(TextError::Empty));
        check(&"x".repeat(MAX_TEXT_BYTES), Ok(&"x".repeat(MAX_TEXT_BYTES)));
        check(&"x".repeat(MAX_TEXT_BYTES + 1), Err(TextError::TooLong));
    }

    #[test]
    fn a_file_is_read_as_utf8_text_with_its_path_in_every_refusal() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = |name: &str| dir.path().join(name);
        std::fs::write(path("ok.txt"), "Backup finished\nall good\n").expect("write");
        std::fs::write(path("latin1.txt"), b"caf\xe9\n").expect("write");
        std::fs::write(path("blank.txt"), " \n\n").expect("write");
        std::fs::write(path("big.txt"), "x".repeat(MAX_TEXT_BYTES + 1)).expect("write");
        let read = |name: &str| read_text(None, Some(&path(name)));
        assert_eq!(read("ok.txt"), Ok("Backup finished\nall good".to_owned()));
        assert_eq!(
            read("latin1.txt"),
            Err(TextError::NotUtf8(Some(path("latin1.txt"))))
        );
        assert_eq!(
            read("blank.txt"),
            Err(TextError::EmptyFile(path("blank.txt")))
        );
        assert_eq!(read("big.txt"), Err(TextError::TooLong));
        let missing = read("missing.txt").expect_err("no such file");
        assert!(
            matches!(&missing, TextError::Read(Some(p), _) if *p == path("missing.txt")),
            "{missing:?}"
        );
        assert_eq!(
            missing.to_string(),
            format!(
                "could not read the message from {}: No such file or directory (os error 2)",
                path("missing.txt").display()
            )
        );
        assert_eq!(
            TextError::NotUtf8(Some(path("latin1.txt"))).to_string(),
            format!(
                "the message in {} is not UTF-8 text",
                path("latin1.txt").display()
            )
        );
    }

    #[test]
    fn to_is_trimmed_and_never_blank() {
        assert_eq!(conversation(" c-1 "), Ok("c-1".to_owned()));
        assert!(conversation("  ").is_err());
        assert!(replay_token("standalone:00000000000000000000000000000000").is_ok());
        assert!(replay_token("standalone:0").is_err());
    }
}
