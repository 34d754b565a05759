//! The environment as the resolver sees it (cli.md §5.1): an [`EnvLookup`], the `.env` file of
//! the Hermes profile in Hermes' own format ([`DotEnv`]), the two layered as Hermes' own
//! `get_env_value` does ([`HermesEnv`]: the process environment first, then the file), and the
//! optional platform config ([`PlatformConfig`]).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::Path;

use canon_wire::secret::ApiKey;
use serde_json::{Map, Value};

use crate::text::{non_blank, py_strip};

/// Where the resolver reads environment variables. Implemented for [`HermesEnv`],
/// [`DotEnv`] and any `Fn(&str) -> Option<String>` (tests pass a table).
pub trait EnvLookup {
    /// The raw value of `name`, `None` when it is not set.
    fn var(&self, name: &str) -> Option<String>;
}

impl<F: Fn(&str) -> Option<String>> EnvLookup for F {
    fn var(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// The variables of a Hermes `.env` file, parsed as hermes-agent 0.19.0's
/// `hermes_cli.config.load_env` does: lines end at `\n`, `\r\n` or `\r`; each line is stripped;
/// blank lines, lines starting with `#` and lines without `=` are skipped; an `export ` prefix
/// is dropped; the key is the stripped text before the first `=`; the value is stripped, and a
/// value wrapped in double quotes has its `\"` and `\\` escapes undone (any other backslash is
/// kept), one wrapped in single quotes is taken literally. The last assignment of a key wins.
/// There are no inline comments: `KEY=a # b` is `a # b`. A leading byte-order mark is skipped
/// and invalid UTF-8 is replaced, as Hermes reads the file with `utf-8-sig` and
/// `errors="replace"`. (Hermes also repairs two kinds of corruption before parsing: several
/// known `KEY=` assignments run together on one line, and `KEY=***` placeholders. Files it wrote
/// itself never hold either, so they are not reproduced.)
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DotEnv {
    vars: HashMap<String, String>,
}

impl DotEnv {
    /// Parses the text of a `.env` file.
    pub fn parse(text: &str) -> DotEnv {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut vars = HashMap::new();
        for (key, value) in parse_lines(text) {
            vars.insert(key, value);
        }
        DotEnv { vars }
    }

    /// Reads and parses `path`; a missing file is empty.
    pub fn read(path: &Path) -> io::Result<DotEnv> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(DotEnv::parse(&String::from_utf8_lossy(&bytes))),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(DotEnv::default()),
            Err(error) => Err(error),
        }
    }

    /// The value of `name`, when the file assigns it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// How many keys the file assigns.
    pub fn len(&self) -> usize {
        self.vars.len()
    }

    /// Whether the file assigns nothing.
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }
}

impl fmt::Debug for DotEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A `.env` holds API keys: show only which keys are set.
        let mut keys: Vec<&str> = self.vars.keys().map(String::as_str).collect();
        keys.sort_unstable();
        f.debug_struct("DotEnv").field("keys", &keys).finish()
    }
}

impl EnvLookup for DotEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).map(str::to_owned)
    }
}

/// The assignments of a `.env` text, in file order (see [`DotEnv`]).
pub fn parse_lines(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for raw in text.split("\r\n").flat_map(|l| l.split(['\n', '\r'])) {
        let line = py_strip(raw);
        if line.is_empty() || line.starts_with('#') || !line.contains('=') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        out.push((py_strip(key).to_owned(), parse_value(value)));
    }
    out
}

/// One value as Hermes' `_parse_env_value` reads it.
fn parse_value(raw: &str) -> String {
    let value = py_strip(raw);
    let quoted = |q: char| value.len() >= 2 && value.starts_with(q) && value.ends_with(q);
    if quoted('"') {
        let inner = &value[1..value.len() - 1];
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\\' {
                if let Some(&next) = chars.peek() {
                    if next == '"' || next == '\\' {
                        out.push(next);
                        chars.next();
                        continue;
                    }
                }
            }
            out.push(c);
        }
        return out;
    }
    if quoted('\'') {
        return value[1..value.len() - 1].to_owned();
    }
    value.to_owned()
}

/// A value as Hermes' `_quote_env_value` writes it: quoted (with `\\` and `\"` escaped) when it
/// holds `#`, a quote, or any whitespace; else as is. The inverse of the parser for values
/// without line breaks (Hermes removes those before writing).
pub fn quote_value(value: &str) -> String {
    let needs_quoting = value.contains(['#', '"', '\''])
        || value.chars().any(crate::text::is_py_space)
        || py_strip(value) != value;
    if value.is_empty() || !needs_quoting {
        return value.to_owned();
    }
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The process environment layered over a Hermes `.env`, as hermes-agent's `get_env_value`
/// reads a setting: a variable present in the process environment wins (even when empty), else
/// the file's value. The gateway has already loaded the same file into its environment at
/// start; reading it again covers a daemon, `doctor` or `setup` started without it.
#[derive(Debug, Clone, Default)]
pub struct HermesEnv {
    dotenv: DotEnv,
}

impl HermesEnv {
    /// The process environment over this `.env`.
    pub fn new(dotenv: DotEnv) -> HermesEnv {
        HermesEnv { dotenv }
    }

    /// The `.env` layer.
    pub fn dotenv(&self) -> &DotEnv {
        &self.dotenv
    }
}

impl EnvLookup for HermesEnv {
    fn var(&self, name: &str) -> Option<String> {
        match std::env::var(name) {
            Ok(value) => Some(value),
            Err(std::env::VarError::NotUnicode(raw)) => Some(raw.to_string_lossy().into_owned()),
            Err(std::env::VarError::NotPresent) => self.dotenv.var(name),
        }
    }
}

/// The platform config (`platforms.canon` of Hermes' `config.yaml`, hermes-host.md §7.2) as far
/// as the resolver reads it. `doctor` and `setup` resolve without one.
#[derive(Clone, Default)]
pub struct PlatformConfig {
    /// `api_key`.
    pub api_key: Option<ApiKey>,
    /// `token` (read as the API key when `api_key` is empty).
    pub token: Option<ApiKey>,
    /// `extra` (may hold any setting under its key or its variable's name).
    pub extra: Map<String, Value>,
}

impl fmt::Debug for PlatformConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `extra` may hold a key under any name: show only its key names.
        let keys: Vec<&str> = self.extra.keys().map(String::as_str).collect();
        f.debug_struct("PlatformConfig")
            .field("api_key", &self.api_key)
            .field("token", &self.token)
            .field("extra_keys", &keys)
            .finish()
    }
}

/// The sources of one setting in cli.md §5.1's order: env `name` when non-blank; for the API key
/// only, the platform's `api_key` then `token`; then `extra[key]`, `extra[lowercase(name)]`,
/// `extra[name]` (string values only; other JSON types are not a setting); else `None`. Values
/// come back trimmed.
pub(crate) fn setting(
    env: &dyn EnvLookup,
    platform: Option<&PlatformConfig>,
    key: &str,
    name: &str,
) -> Option<String> {
    if let Some(value) = env.var(name).as_deref().and_then(non_blank) {
        return Some(value.to_owned());
    }
    let platform = platform?;
    if key == "api_key" {
        for secret in [&platform.api_key, &platform.token].into_iter().flatten() {
            if let Some(value) = non_blank(secret.expose()) {
                return Some(value.to_owned());
            }
        }
    }
    [key, name.to_ascii_lowercase().as_str(), name]
        .into_iter()
        .find_map(|k| platform.extra.get(k)?.as_str().and_then(non_blank))
        .map(str::to_owned)
}

/// The first non-blank string among `extra[keys…]`, trimmed.
pub(crate) fn extra_string(platform: Option<&PlatformConfig>, keys: &[&str]) -> Option<String> {
    let extra = &platform?.extra;
    keys.iter()
        .find_map(|k| extra.get(*k)?.as_str().and_then(non_blank))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests;
