//! How `adapter.connect` is answered: which failure refuses the adapter
//! with which fatal code, message and retry flag, and what a terminal
//! event-stream failure tells Hermes.
//!
//! The shell runs the connect calls (resolve the media settings, build the
//! client, verify the environment, `GET /agents/me`, `GET /conversations`)
//! and describes the first failure as a [`ConnectFailure`]; [`refusal`]
//! decides the answer. The policy, from canon-wire.md §8.1: a 401 or 403
//! from Canon is `auth_failed` with a fixed text and is never retried; any
//! other failed call is `connect_failed`, retryable as the error says; a
//! refused environment is `environment_mismatch`; missing credentials and
//! an invalid inbound-media setting refuse before any network call.

use crate::protocol::{ConnectResult, Fatal};

/// The `auth_failed` message of `adapter.connect` (canon-wire.md §8.1; exact).
pub const AUTH_FAILED_MESSAGE: &str =
    "Canon rejected the configured agent credentials. Re-run Canon setup.";

/// The fatal code of an `adapter.connect` refused for an invalid inbound
/// media delivery setting (runtime-control.md §8.1; our code, the message
/// is exact).
pub const INVALID_CONFIG_CODE: &str = "invalid_config";

/// The fatal message when no credentials resolve (cli.md §5.1; exact).
pub const MISSING_CREDENTIALS_MESSAGE: &str =
    "CANON_API_KEY, config.api_key, or CANON_AGENT profile is required for the Canon platform";

/// The first thing that failed while connecting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectFailure {
    /// An inbound-media delivery setting was refused; the text says which.
    InvalidConfig(String),
    /// `CANON_API_KEY` or `CANON_BASE_URL` is empty.
    MissingCredentials,
    /// The Canon client could not be built (a bad base URL, TLS set-up).
    Client(String),
    /// Canon refused the configured environment id.
    Environment(String),
    /// The durable journal holds something its reader refuses. It fails closed, not
    /// retryable: the text names the file and what to do.
    InboxDamaged(String),
    /// The durable inbox could not be opened for now: another daemon holds its lock past the
    /// wait, or the file system refused (a full disk, EIO, a lock the file system lacks).
    /// Retryable: the agent comes back once the cause is gone, and it never runs without the
    /// inbox (that would lose what was sent while it was down, and replay what it handled).
    InboxUnavailable(String),
    /// `GET /agents/me` or `GET /conversations` failed.
    Call {
        /// The HTTP status, when Canon answered.
        status: Option<u16>,
        /// The error text.
        message: String,
        /// Whether the error says a retry may succeed.
        retryable: bool,
    },
}

/// The refused `adapter.connect` answer for a failure.
pub fn refusal(failure: ConnectFailure) -> ConnectResult {
    let (code, message, retryable) = match failure {
        ConnectFailure::InvalidConfig(message) => (INVALID_CONFIG_CODE, message, false),
        ConnectFailure::MissingCredentials => (
            "missing_api_key",
            MISSING_CREDENTIALS_MESSAGE.to_owned(),
            false,
        ),
        ConnectFailure::Client(message) => ("connect_failed", message, false),
        ConnectFailure::Environment(message) => ("environment_mismatch", message, false),
        ConnectFailure::InboxDamaged(message) => ("inbox_unreadable", message, false),
        ConnectFailure::InboxUnavailable(message) => ("inbox_unavailable", message, true),
        ConnectFailure::Call {
            status: Some(401 | 403),
            ..
        } => ("auth_failed", AUTH_FAILED_MESSAGE.to_owned(), false),
        ConnectFailure::Call {
            message, retryable, ..
        } => ("connect_failed", message, retryable),
    };
    ConnectResult {
        connected: false,
        agent_id: None,
        agent_name: None,
        fatal: Some(Fatal {
            code: code.to_owned(),
            message,
            retryable,
        }),
    }
}

/// The accepted `adapter.connect` answer.
pub fn connected(agent_id: Option<String>, agent_name: Option<String>) -> ConnectResult {
    ConnectResult {
        connected: true,
        agent_id,
        agent_name,
        fatal: None,
    }
}

/// The `adapter.fatal` of an event stream that stopped for good: the
/// stream gives up only on credentials Canon keeps refusing, so Hermes is
/// told `auth_failed`, not retryable, with the stream's own text.
pub fn stream_stopped(message: String) -> Fatal {
    Fatal {
        code: "auth_failed".to_owned(),
        message,
        retryable: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fatal(failure: ConnectFailure) -> (String, String, bool) {
        let result = refusal(failure);
        assert!(!result.connected);
        assert_eq!((result.agent_id, result.agent_name), (None, None));
        let fatal = result.fatal.expect("a refusal carries a fatal");
        (fatal.code, fatal.message, fatal.retryable)
    }

    fn call(status: Option<u16>, retryable: bool) -> ConnectFailure {
        ConnectFailure::Call {
            status,
            message: format!("Canon API returned {status:?}"),
            retryable,
        }
    }

    #[test]
    fn rejected_credentials_are_auth_failed_with_the_fixed_text_and_never_retried() {
        for status in [401, 403] {
            assert_eq!(
                fatal(call(Some(status), true)),
                ("auth_failed".into(), AUTH_FAILED_MESSAGE.into(), false)
            );
        }
    }

    #[test]
    fn other_failed_calls_are_connect_failed_and_keep_the_error_retry_flag() {
        assert_eq!(
            fatal(call(Some(503), true)),
            (
                "connect_failed".into(),
                "Canon API returned Some(503)".into(),
                true
            )
        );
        assert_eq!(
            fatal(call(Some(404), false)),
            (
                "connect_failed".into(),
                "Canon API returned Some(404)".into(),
                false
            )
        );
        assert_eq!(
            fatal(call(None, true)),
            (
                "connect_failed".into(),
                "Canon API returned None".into(),
                true
            )
        );
    }

    #[test]
    fn local_refusals_are_never_retryable() {
        assert_eq!(
            fatal(ConnectFailure::MissingCredentials),
            (
                "missing_api_key".into(),
                MISSING_CREDENTIALS_MESSAGE.into(),
                false
            )
        );
        assert_eq!(
            fatal(ConnectFailure::InvalidConfig("bad setting".into())),
            (INVALID_CONFIG_CODE.into(), "bad setting".into(), false)
        );
        assert_eq!(
            fatal(ConnectFailure::Client("bad url".into())),
            ("connect_failed".into(), "bad url".into(), false)
        );
        assert_eq!(
            fatal(ConnectFailure::Environment("mismatch".into())),
            ("environment_mismatch".into(), "mismatch".into(), false)
        );
    }

    #[test]
    fn connected_and_stream_stopped_answers() {
        let ok = connected(Some("a1".into()), Some("Hermes".into()));
        assert!(ok.connected && ok.fatal.is_none());
        assert_eq!(ok.agent_id.as_deref(), Some("a1"));
        let stopped = stream_stopped("gone".into());
        assert_eq!(
            (
                stopped.code.as_str(),
                stopped.message.as_str(),
                stopped.retryable
            ),
            ("auth_failed", "gone", false)
        );
    }
}
