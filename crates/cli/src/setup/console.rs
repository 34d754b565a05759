//! The operator's side of `setup`: Hermes' prompt and message conventions (cli.md §4,
//! hermes-agent 0.19.0 `hermes_cli/setup.py` and `cli_output.py`), reproduced byte for byte, and
//! Ctrl-C.
//!
//! * Messages: info `  <text>`, success `✓ <text>`, warning `⚠ <text>`, error `✗ <text>`; the
//!   texts of cli.md §4 carry their own leading two spaces, so most lines print with four.
//! * A prompt prints `<question> [<default>]: ` (or `<question>: `) and returns the trimmed answer,
//!   else the default; a yes/no prompt prints `<question> [Y/n]: ` or `[y/N]: `; a choice menu
//!   prints the question, `  ● <choice>` for the default and `  ○ <choice>` for the others, the
//!   `Enter for default` hint and `  Select [1-N] (<default+1>): `, asking again after a bad
//!   answer with Hermes' error lines.
//! * Colours as Hermes uses them, only when stdout is a terminal, `NO_COLOR` is unset and `TERM`
//!   is not `dumb` (`hermes_cli/colors.py`); without them the bytes are exactly Hermes'.
//! * Answers are lines of stdin. On a terminal that is the operator typing (the terminal echoes
//!   it); otherwise a script's lines, which are not echoed, as Python's `input()` does not echo
//!   them either. A secret prompt on a terminal reads through rpassword, which shows a `*` per
//!   character as Hermes' masked prompt does; without a terminal it reads a line like any other.
//! * Cancelling: end of input in a text or choice prompt, or SIGINT (Ctrl-C) at any point the
//!   flow awaits, is [`Cancelled`] (cli.md §1: a blank line, `Canon setup cancelled.`, exit 130,
//!   the cli.md Q2/§11 recommendation). End of input at a yes/no prompt is its default, as in
//!   Hermes. SIGINT is caught for the whole of `setup` (tokio's handler replaces the default
//!   action), so it never kills the process half-way through a write.
//!
//! Every line passes through [`Console::redact`] first: the secrets setup has seen (API keys,
//! the poll token) are replaced before anything is written.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use tokio::signal::unix::{signal, Signal, SignalKind};

/// The operator cancelled (Ctrl-C, or end of input where an answer was needed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cancelled;

/// Hermes' colour codes (`hermes_cli/colors.py`).
mod ansi {
    pub(super) const RESET: &str = "\x1b[0m";
    pub(super) const DIM: &str = "\x1b[2m";
    pub(super) const RED: &str = "\x1b[31m";
    pub(super) const GREEN: &str = "\x1b[32m";
    pub(super) const YELLOW: &str = "\x1b[33m";
    pub(super) const CYAN: &str = "\x1b[36m";
}

/// What replaces a secret that would otherwise be printed.
const REDACTED: &str = "[redacted]";

/// `setup`'s output and input.
pub(crate) struct Console {
    out: std::io::Stdout,
    color: bool,
    stdin_terminal: bool,
    stdout_terminal: bool,
    noninteractive: bool,
    interrupt: Signal,
    secrets: Vec<String>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("color", &self.color)
            .field("stdin_terminal", &self.stdin_terminal)
            .field("stdout_terminal", &self.stdout_terminal)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// The process's stdin and stdout, with SIGINT caught from now on. Must run inside a tokio
    /// runtime with its I/O driver enabled.
    pub(crate) fn new() -> std::io::Result<Console> {
        let out = std::io::stdout();
        let stdout_terminal = out.is_terminal();
        let env = |name: &str| std::env::var_os(name);
        let color = stdout_terminal
            && env("NO_COLOR").is_none()
            && env("TERM").is_none_or(|term| term != "dumb");
        // `HERMES_NONINTERACTIVE` makes Hermes' yes/no prompts answer their default unasked.
        let noninteractive = std::env::var("HERMES_NONINTERACTIVE").is_ok_and(|value| {
            matches!(
                value.trim().to_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        });
        Ok(Console {
            out,
            color,
            stdin_terminal: std::io::stdin().is_terminal(),
            stdout_terminal,
            noninteractive,
            interrupt: signal(SignalKind::interrupt())?,
            secrets: Vec::new(),
        })
    }

    /// Whether stdout is a terminal (the approval wait then draws a live line instead of dots).
    pub(crate) fn stdout_is_terminal(&self) -> bool {
        self.stdout_terminal
    }

    /// Remembers a secret so that no line ever shows it.
    pub(crate) fn secret(&mut self, value: &str) {
        let value = value.trim();
        if !value.is_empty() && !self.secrets.iter().any(|s| s == value) {
            self.secrets.push(value.to_owned());
        }
    }

    /// `text` with every remembered secret replaced.
    pub(crate) fn redact(&self, text: &str) -> String {
        self.secrets.iter().fold(text.to_owned(), |text, secret| {
            text.replace(secret, REDACTED)
        })
    }

    fn paint(&self, text: &str, code: &str) -> String {
        if self.color {
            format!("{code}{text}{}", ansi::RESET)
        } else {
            text.to_owned()
        }
    }

    /// Writes `text` as it is (no newline added) and flushes; a closed stdout is ignored.
    pub(crate) fn write(&mut self, text: &str) {
        let text = self.redact(text);
        let _ = self.out.write_all(text.as_bytes());
        let _ = self.out.flush();
    }

    /// One line.
    pub(crate) fn line(&mut self, text: &str) {
        self.write(&format!("{text}\n"));
    }

    /// An empty line (Python's `print()`).
    pub(crate) fn blank(&mut self) {
        self.write("\n");
    }

    /// The header of cli.md §4.1 step 1: a blank line, `  --- Canon Setup ---`, a blank line.
    pub(crate) fn header(&mut self) {
        let title = self.paint("  --- Canon Setup ---", ansi::CYAN);
        self.write(&format!("\n{title}\n\n"));
    }

    /// Hermes `print_info`.
    pub(crate) fn info(&mut self, text: &str) {
        let line = self.paint(&format!("  {text}"), ansi::DIM);
        self.line(&line);
    }

    /// Hermes `print_success`.
    pub(crate) fn success(&mut self, text: &str) {
        let line = self.paint(&format!("✓ {text}"), ansi::GREEN);
        self.line(&line);
    }

    /// Hermes `print_warning`.
    pub(crate) fn warning(&mut self, text: &str) {
        let line = self.paint(&format!("⚠ {text}"), ansi::YELLOW);
        self.line(&line);
    }

    /// Hermes `print_error`.
    pub(crate) fn error(&mut self, text: &str) {
        let line = self.paint(&format!("✗ {text}"), ansi::RED);
        self.line(&line);
    }

    /// The end of a cancelled run (cli.md §1): a newline, then `Canon setup cancelled.`.
    pub(crate) fn cancelled(&mut self) {
        self.write("\nCanon setup cancelled.\n");
    }

    /// Resolves when SIGINT arrives (at once when one arrived since the last call).
    pub(crate) async fn interrupted(&mut self) {
        // `recv` answers `None` only when the driver is gone, which ends the runtime anyway.
        let _ = self.interrupt.recv().await;
    }

    /// Runs `work` unless SIGINT arrives first.
    pub(crate) async fn or_cancel<T>(
        &mut self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, Cancelled> {
        tokio::select! {
            biased;
            () = self.interrupted() => Err(Cancelled),
            value = work => Ok(value),
        }
    }

    /// Prints `display` and reads one answer: the line without its line ending, `None` at end of
    /// input. A secret on a terminal is read with rpassword (`*` per character); anything else
    /// is a line of stdin.
    async fn read(&mut self, display: &str, secret: bool) -> Result<Option<String>, Cancelled> {
        self.write(display);
        if secret && self.stdin_terminal {
            let saved = TerminalState::save();
            let read = tokio::task::spawn_blocking(|| {
                rpassword::read_password_with_config(
                    rpassword::ConfigBuilder::new()
                        .password_feedback_mask('*')
                        .build(),
                )
            });
            return match self.or_cancel(read).await {
                // rpassword restores the terminal itself when it returns; a SIGINT that did
                // not come from the keyboard leaves it reading in raw mode, so restore here.
                Err(Cancelled) => {
                    saved.restore();
                    Err(Cancelled)
                }
                Ok(Ok(Ok(value))) => Ok(Some(value)),
                Ok(Ok(Err(error))) if error.kind() == std::io::ErrorKind::Interrupted => {
                    // Ctrl-C typed into the secret prompt: rpassword raised SIGINT itself.
                    Err(Cancelled)
                }
                Ok(_) => Ok(None),
            };
        }
        let read = tokio::task::spawn_blocking(|| {
            let mut bytes = Vec::new();
            match std::io::stdin().lock().read_until(b'\n', &mut bytes) {
                Ok(0) | Err(_) => None,
                Ok(_) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            }
        });
        let line = self.or_cancel(read).await?.ok().flatten();
        Ok(line.map(|line| {
            let line = line.strip_suffix('\n').unwrap_or(&line);
            line.strip_suffix('\r').unwrap_or(line).to_owned()
        }))
    }

    /// Hermes `prompt(question, default)`: the trimmed answer, else the default, else empty.
    /// End of input cancels.
    pub(crate) async fn prompt(
        &mut self,
        question: &str,
        default: Option<&str>,
    ) -> Result<String, Cancelled> {
        self.ask(question, default, false).await
    }

    /// Hermes `prompt(question, password=True)`: as [`Console::prompt`], masked on a terminal.
    pub(crate) async fn secret_prompt(&mut self, question: &str) -> Result<String, Cancelled> {
        self.ask(question, None, true).await
    }

    async fn ask(
        &mut self,
        question: &str,
        default: Option<&str>,
        secret: bool,
    ) -> Result<String, Cancelled> {
        let default = default.filter(|d| !d.is_empty());
        let display = match default {
            Some(default) => format!("{question} [{default}]: "),
            None => format!("{question}: "),
        };
        let display = self.paint(&display, ansi::YELLOW);
        let raw = self.read(&display, secret).await?.ok_or(Cancelled)?;
        Ok(answer(&raw, default))
    }

    /// Hermes `prompt_yes_no`: `[Y/n]` or `[y/N]`; blank is the default, `y`/`yes` and `n`/`no`
    /// (any case) answer, anything else asks again. End of input prints a newline and is the
    /// default.
    pub(crate) async fn yes_no(
        &mut self,
        question: &str,
        default: bool,
    ) -> Result<bool, Cancelled> {
        if self.noninteractive {
            return Ok(default);
        }
        let hint = if default { "Y/n" } else { "y/N" };
        let display = self.paint(&format!("{question} [{hint}]: "), ansi::YELLOW);
        loop {
            let Some(raw) = self.read(&display, false).await? else {
                self.blank();
                return Ok(default);
            };
            match py_strip(&raw).to_lowercase().as_str() {
                "" => return Ok(default),
                "y" | "yes" => return Ok(true),
                "n" | "no" => return Ok(false),
                _ => self.error("Please enter 'y' or 'n'"),
            }
        }
    }

    /// Hermes `prompt_choice` (its numbered menu): the index chosen. End of input cancels.
    pub(crate) async fn choice(
        &mut self,
        question: &str,
        choices: &[&str],
        default: usize,
    ) -> Result<usize, Cancelled> {
        let question = self.paint(question, ansi::YELLOW);
        self.line(&question);
        for (index, choice) in choices.iter().enumerate() {
            if index == default {
                let line = self.paint(&format!("  ● {choice}"), ansi::GREEN);
                self.line(&line);
            } else {
                self.line(&format!("  ○ {choice}"));
            }
        }
        self.info(&format!(
            "  Enter for default ({})  Ctrl+C to exit",
            default + 1
        ));
        let count = choices.len();
        let display = self.paint(
            &format!("  Select [1-{count}] ({}): ", default + 1),
            ansi::DIM,
        );
        loop {
            let raw = self.read(&display, false).await?.ok_or(Cancelled)?;
            if raw.is_empty() {
                return Ok(default);
            }
            match parse_py_int(&raw) {
                Some(number) if (1..=count as i128).contains(&number) => {
                    return Ok(usize::try_from(number - 1).unwrap_or(default));
                }
                Some(_) => self.error(&format!("Please enter a number between 1 and {count}")),
                None => self.error("Please enter a number"),
            }
        }
    }
}

/// An answer as Hermes' `prompt` makes it from a raw line (or from a flag that stands for one):
/// bracketed-paste markers removed (`_sanitize_pasted_input`), trimmed, else the default, else
/// empty.
pub(crate) fn answer(raw: &str, default: Option<&str>) -> String {
    let cleaned = strip_paste_markers(raw);
    let trimmed = py_strip(&cleaned);
    if trimmed.is_empty() {
        default.unwrap_or_default().to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// Python's `str.strip()` whitespace: Unicode whitespace plus U+001C..U+001F.
fn py_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// Removes `ESC [ <spaces> 200~` and `ESC [ <spaces> 201~` (`_BRACKETED_PASTE_PATTERN`).
fn strip_paste_markers(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let digits = after.trim_start_matches(char::is_whitespace);
        match digits
            .strip_prefix("200~")
            .or_else(|| digits.strip_prefix("201~"))
        {
            Some(tail) => rest = tail,
            None => {
                out.push_str("\x1b[");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Python's `int(text)` for the menu: optional surrounding whitespace, an optional sign, decimal
/// digits with single `_` between them; `None` when Python would raise `ValueError`.
fn parse_py_int(text: &str) -> Option<i128> {
    let text = py_strip(text);
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return None;
    }
    let value: i128 = digits.replace('_', "").parse().ok()?;
    Some(if negative { -value } else { value })
}

/// The controlling terminal's settings before a secret prompt, to put back when the prompt is
/// abandoned while rpassword holds the terminal in raw mode.
struct TerminalState(Option<(std::fs::File, rustix::termios::Termios)>);

impl TerminalState {
    fn save() -> TerminalState {
        let saved = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .ok()
            .and_then(|tty| {
                let termios = rustix::termios::tcgetattr(&tty).ok()?;
                Some((tty, termios))
            });
        TerminalState(saved)
    }

    fn restore(&self) {
        if let Some((tty, termios)) = &self.0 {
            let _ = rustix::termios::tcsetattr(tty, rustix::termios::OptionalActions::Now, termios);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_trimmed_unpasted_or_the_default() {
        assert_eq!(answer("  Ops  ", Some("Hermes")), "Ops");
        assert_eq!(answer("", Some("Hermes")), "Hermes");
        assert_eq!(answer(" \t", None), "");
        assert_eq!(answer("\x1b[200~+15550100\x1b[201~", None), "+15550100");
        assert_eq!(answer("\x1b[ 200~x", None), "x");
        assert_eq!(answer("a\x1b[31mb", None), "a\x1b[31mb");
    }

    #[test]
    fn menu_numbers_parse_as_python_int_does() {
        for (text, value) in [
            ("2", Some(2)),
            (" 3 ", Some(3)),
            ("+1", Some(1)),
            ("-1", Some(-1)),
            ("0002", Some(2)),
            ("1_0", Some(10)),
            ("", None),
            (" ", None),
            ("1.0", None),
            ("_1", None),
            ("1__0", None),
            ("one", None),
        ] {
            assert_eq!(parse_py_int(text), value, "{text:?}");
        }
    }
}
