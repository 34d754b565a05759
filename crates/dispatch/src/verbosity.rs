//! Turn verbosity (`turns.md` §6): how much of a turn's middle members see.
//!
//! Configuration is `auto`, `verbose` or `quiet` (trimmed, lowercased; empty
//! means `auto`). Any other non-empty value is refused with
//! [`VerbosityError::Invalid`], never silently ignored. Resolution: an
//! explicit `verbose` or `quiet` wins; `auto` takes the conversation type's
//! default (`direct` and `unknown` are verbose, `group` is quiet), so an
//! unknown conversation fails open to noise, never to silence.
//!
//! Per turns.md OQ-8 the adapter resolves once per turn, at turn open, and
//! keeps the result for the whole turn.

use std::fmt;

use serde_json::Value;

use crate::json::{is_truthy, str_field};
use crate::prompt::is_py_space;

/// The startup error message for a refused verbosity value (turns.md §6.1;
/// exact text).
pub const VERBOSITY_ERROR_MESSAGE: &str =
    "CANON_TURN_VERBOSITY must be 'auto', 'verbose', or 'quiet'";

/// Whether a quiet turn also drops `metadata.turnTrail` from its final
/// (turns.md §6.3).
pub const QUIET_SUPPRESSES_TURN_TRAIL: bool = true;

/// Environment variable consulted first (turns.md §6.1).
pub const VERBOSITY_ENV_VAR: &str = "CANON_TURN_VERBOSITY";

/// Refused verbosity configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerbosityError {
    /// A non-empty value other than `auto`, `verbose` or `quiet`.
    #[error("{}", VERBOSITY_ERROR_MESSAGE)]
    Invalid {
        /// The raw value as configured.
        value: String,
    },
}

/// A configured verbosity (turns.md §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VerbosityConfig {
    /// Unset: the conversation type decides.
    #[default]
    Auto,
    /// Always verbose.
    Verbose,
    /// Always quiet.
    Quiet,
}

/// A resolved verbosity (turns.md §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verbosity {
    /// Live narration and the final trail are published.
    Verbose,
    /// Typing dots, then the answer; no narration and no trail.
    Quiet,
}

impl Verbosity {
    /// `verbose` or `quiet`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Verbose => "verbose",
            Self::Quiet => "quiet",
        }
    }
}

impl fmt::Display for Verbosity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A normalized conversation type (turns.md §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConversationType {
    /// A direct chat (`direct` or `dm`).
    Direct,
    /// A group chat.
    Group,
    /// Not known.
    Unknown,
}

/// Parses one configured value: trimmed and lowercased; `None`, empty and
/// whitespace-only mean [`VerbosityConfig::Auto`].
pub fn parse_turn_verbosity_config(raw: Option<&str>) -> Result<VerbosityConfig, VerbosityError> {
    let Some(raw) = raw else {
        return Ok(VerbosityConfig::Auto);
    };
    match raw.trim_matches(is_py_space).to_lowercase().as_str() {
        "" | "auto" => Ok(VerbosityConfig::Auto),
        "verbose" => Ok(VerbosityConfig::Verbose),
        "quiet" => Ok(VerbosityConfig::Quiet),
        _ => Err(VerbosityError::Invalid {
            value: raw.to_owned(),
        }),
    }
}

/// The configured value from its sources, first non-empty wins
/// (turns.md §6.1): the environment variable, then the platform extras
/// `turn_verbosity`, `canon_turn_verbosity` and `CANON_TURN_VERBOSITY`.
///
/// "Non-empty" is judged before trimming, so a whitespace-only environment
/// variable masks the platform extras and then parses as `auto` (0.14.1
/// parity).
pub fn configured_turn_verbosity(
    env: Option<&str>,
    extra_turn_verbosity: Option<&str>,
    extra_canon_turn_verbosity: Option<&str>,
    extra_upper: Option<&str>,
) -> Result<VerbosityConfig, VerbosityError> {
    let raw = [
        env,
        extra_turn_verbosity,
        extra_canon_turn_verbosity,
        extra_upper,
    ]
    .into_iter()
    .flatten()
    .find(|v| !v.is_empty());
    parse_turn_verbosity_config(raw)
}

/// Folds a conversation type spelling (trimmed, lowercased) onto the three
/// types: `direct` and `dm` are direct, `group` is group, anything else is
/// unknown.
pub fn normalize_conversation_type(value: &str) -> ConversationType {
    match value.trim_matches(is_py_space).to_lowercase().as_str() {
        "direct" | "dm" => ConversationType::Direct,
        "group" => ConversationType::Group,
        _ => ConversationType::Unknown,
    }
}

/// Resolves the verbosity of a turn (turns.md §6.2).
pub fn resolve_turn_verbosity(
    configured: VerbosityConfig,
    conversation_type: ConversationType,
) -> Verbosity {
    match (configured, conversation_type) {
        (VerbosityConfig::Verbose, _) => Verbosity::Verbose,
        (VerbosityConfig::Quiet, _) => Verbosity::Quiet,
        (VerbosityConfig::Auto, ConversationType::Group) => Verbosity::Quiet,
        (VerbosityConfig::Auto, ConversationType::Direct | ConversationType::Unknown) => {
            Verbosity::Verbose
        }
    }
}

/// Whether the final may carry `metadata.turnTrail` (turns.md §6.3).
pub fn should_publish_turn_trail(verbosity: Verbosity) -> bool {
    verbosity != Verbosity::Quiet || !QUIET_SUPPRESSES_TURN_TRAIL
}

/// The conversation type a `message.created` payload declares in
/// `provenance.conversation.type`, when it is `direct`, `dm` or `group`
/// (trimmed, lowercased). `unknown` and anything else give `None`, so that
/// they never overwrite a known type (turns.md §6.2 source 1).
pub fn declared_conversation_type(payload: &Value) -> Option<ConversationType> {
    let declared = payload
        .get("provenance")?
        .get("conversation")?
        .get("type")?
        .as_str()?;
    match normalize_conversation_type(declared) {
        ConversationType::Unknown => None,
        known => Some(known),
    }
}

/// The conversation type a cached conversation object implies
/// (turns.md §6.2 source 2): `type == "group"` is group, any other truthy
/// `type` is direct, and no object or no truthy `type` gives `None`.
pub fn cached_conversation_type(conversation: Option<&Value>) -> Option<ConversationType> {
    let conversation = conversation.filter(|c| c.is_object())?;
    if !is_truthy(conversation.get("type")) {
        return None;
    }
    Some(if str_field(conversation, "type") == Some("group") {
        ConversationType::Group
    } else {
        ConversationType::Direct
    })
}

#[cfg(test)]
mod tests;
