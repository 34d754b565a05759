//! `canon-hermes card validate`: validate one card from a file or stdin (cards.md §16.4, Q6).

use std::io::{Read as _, Write as _};

use anyhow::Context as _;

use crate::{exit, report_error};

/// Runs `card validate [FILE|-]` and returns the exit code: `file` is the card's path, stdin when
/// it is `-` or absent.
pub(crate) fn validate_command(file: Option<&str>) -> u8 {
    let source = file.filter(|path| *path != "-");
    let text = match read_input(source) {
        Ok(text) => text,
        Err(error) => {
            report_error(&error);
            return exit::FAILED;
        }
    };
    match canon_cards::validate_card_text(&text) {
        Ok(validation) => {
            let mut json = serde_json::to_string(&validation)
                .unwrap_or_else(|_| String::from("{\"ok\":false,\"errors\":[]}"));
            json.push('\n');
            write_stdout(&json);
            if validation.ok {
                exit::OK
            } else {
                exit::REJECTED
            }
        }
        Err(error) => {
            let name = source.unwrap_or("stdin");
            report_error(&anyhow::Error::new(error).context(format!("cannot validate {name}")));
            exit::FAILED
        }
    }
}

fn read_input(source: Option<&str>) -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    match source {
        None => {
            std::io::stdin()
                .lock()
                .read_to_end(&mut bytes)
                .context("reading the card from stdin")?;
        }
        Some(path) => {
            bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
        }
    }
    let name = source.unwrap_or("stdin");
    String::from_utf8(bytes).with_context(|| format!("{name} is not UTF-8 text"))
}

/// Writes to stdout, ignoring a closed pipe (as `| head` would cause).
pub(crate) fn write_stdout(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}
