//! The error model of canon-wire.md §2.6: [`TransportError`] keeps every
//! distinction the canon-wire.md §2.5 classifiers need, and carries the
//! retryability the call site's classifier reported as a field.

use std::time::Duration;

use canon_wire::retry::{Classifier, FailureKind, RetryClass};

/// A boxed cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Characters of the body shown in the display string (canon-wire.md §2.3).
const BODY_PREVIEW_CHARS: usize = 500;

/// A response with status ≥ 400 (canon-wire.md §2.3–§2.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpFailure {
    /// The HTTP status code.
    pub status: u16,
    /// The trimmed response text.
    pub body: String,
    /// `code` when the body is a JSON object with a string `code`.
    pub code: Option<String>,
    /// `error` when the body is a JSON object with a non-empty string `error`.
    pub message: Option<String>,
    /// `Retry-After` (seconds) or the body's `retryAfter`, whichever is present
    /// (the header wins).
    pub retry_after: Option<Duration>,
}

impl HttpFailure {
    /// Builds the failure from a status, the `Retry-After` header value and
    /// the raw body bytes.
    pub fn from_response(
        status: u16,
        retry_after_header: Option<&str>,
        body: &[u8],
    ) -> HttpFailure {
        let text = String::from_utf8_lossy(body).trim().to_owned();
        let parsed = serde_json::from_str::<serde_json::Value>(&text).ok();
        let object = parsed.as_ref().and_then(|v| v.as_object());
        let code = object
            .and_then(|o| o.get("code"))
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let message = object
            .and_then(|o| o.get("error"))
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let from_body = object.and_then(|o| o.get("retryAfter")).and_then(seconds);
        let from_header = retry_after_header
            .and_then(|h| h.trim().parse::<f64>().ok())
            .and_then(finite_seconds);
        HttpFailure {
            status,
            body: text,
            code,
            message,
            retry_after: from_header.or(from_body),
        }
    }

    /// `error_message` of canon-wire.md §2.4: the `error` field, else the raw body.
    pub fn error_message(&self) -> &str {
        self.message.as_deref().unwrap_or(&self.body)
    }
}

fn seconds(value: &serde_json::Value) -> Option<Duration> {
    match value {
        serde_json::Value::Number(n) => n.as_f64().and_then(finite_seconds),
        serde_json::Value::String(s) => s.trim().parse::<f64>().ok().and_then(finite_seconds),
        _ => None,
    }
}

fn finite_seconds(secs: f64) -> Option<Duration> {
    if secs.is_finite() && secs >= 0.0 {
        // Anything beyond a day is as good as a day for every cap we apply.
        Some(Duration::from_secs_f64(secs.min(86_400.0)))
    } else {
        None
    }
}

impl std::fmt::Display for HttpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let preview: String = self.body.chars().take(BODY_PREVIEW_CHARS).collect();
        write!(f, "Canon API returned {}: {}", self.status, preview)
    }
}

/// Everything that can go wrong talking to Canon (canon-wire.md §2.6).
///
/// Variants that may be retried carry `retry`: the verdict of the classifier the
/// operation uses (canon-wire.md §2.5), i.e. the retryability reported upward.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// A response with status ≥ 400.
    #[error("{failure}")]
    Http {
        /// Status, body and the parsed error fields.
        failure: HttpFailure,
        /// The reported retryability.
        retry: RetryClass,
    },
    /// HTTP 409 on a send that carried a client message id: the id is already
    /// used by a different payload (`MESSAGE_ID_EXISTS`). Never retried; the
    /// earlier request may have landed.
    #[error("message id {message_id} already names a different message ({failure})")]
    MessageIdConflict {
        /// The client id that conflicted.
        message_id: String,
        /// The 409 response.
        failure: HttpFailure,
    },
    /// TCP/TLS connection not established; nothing was sent.
    #[error("could not connect to canon")]
    Connect {
        /// The reported retryability.
        retry: RetryClass,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The connection was not established within the connect timeout.
    #[error("connecting to canon timed out")]
    ConnectTimeout {
        /// The reported retryability.
        retry: RetryClass,
    },
    /// The connection broke while the request was being sent.
    #[error("connection broke while sending the request")]
    WriteFailed {
        /// The reported retryability.
        retry: RetryClass,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// No response, or no body bytes, within the read timeout.
    #[error("no response from canon within the read timeout")]
    ReadTimeout {
        /// The reported retryability.
        retry: RetryClass,
    },
    /// The connection was closed or reset after the request was sent.
    #[error("connection closed after the request was sent")]
    Reset {
        /// The reported retryability.
        retry: RetryClass,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// Malformed HTTP, an oversize body or frame, or invalid UTF-8 where JSON
    /// was expected.
    #[error("protocol error: {detail}")]
    Protocol {
        /// What was wrong.
        detail: String,
        /// The reported retryability.
        retry: RetryClass,
    },
    /// Status < 400 but the body is not the JSON the operation requires.
    /// Exact messages for verb responses come from canon-wire.md §4.15.
    #[error("{detail}")]
    Decode {
        /// What was wrong.
        detail: String,
    },
    /// The SSRF guard refused a media URL or a redirect target (canon-wire.md §7.2).
    #[error("{}{}", if *.redirect { "Blocked redirect to private/internal address: " } else { "Blocked unsafe URL (SSRF protection): " }, .safe_url)]
    Blocked {
        /// The URL reduced to `scheme://host/.../last-segment`, ≤ 80 chars.
        safe_url: String,
        /// Whether the refused URL was a redirect target.
        redirect: bool,
    },
    /// Media over the size cap (canon-wire.md §7.2, §4.4).
    #[error("{}", if *.upload { "Canon media upload limit is 10MB" } else { "Canon media attachment exceeds 10MB" })]
    TooLarge {
        /// The cap in bytes.
        limit: u64,
        /// `true` for an upload, `false` for a download.
        upload: bool,
    },
    /// The request was refused locally before anything was sent.
    #[error("invalid request: {detail}")]
    InvalidRequest {
        /// What was wrong.
        detail: String,
    },
    /// The health check found an endpoint of another environment (canon-wire.md §1.2).
    #[error("Canon runtime endpoint {url} does not match environment {environment_id}")]
    EnvironmentMismatch {
        /// The probed URL.
        url: String,
        /// The expected environment id.
        environment_id: String,
    },
    /// The stream was rejected with 401/403 on consecutive attempts
    /// (canon-wire.md §5.7); fatal, the stream stopped reconnecting.
    #[error("Canon rejected the configured agent credentials. Re-run Canon setup.")]
    AuthFailed {
        /// The last status (401 or 403).
        status: u16,
    },
}

impl TransportError {
    /// The classifier input for this error.
    pub fn kind(&self) -> FailureKind {
        match self {
            TransportError::Http { failure, .. } => FailureKind::Http {
                status: failure.status,
            },
            TransportError::MessageIdConflict { failure, .. } => FailureKind::Http {
                status: failure.status,
            },
            TransportError::AuthFailed { status } => FailureKind::Http { status: *status },
            TransportError::Connect { .. } => FailureKind::Connect,
            TransportError::ConnectTimeout { .. } => FailureKind::ConnectTimeout,
            TransportError::WriteFailed { .. } => FailureKind::WriteFailed,
            TransportError::ReadTimeout { .. } => FailureKind::ReadTimeout,
            TransportError::Reset { .. } => FailureKind::Reset,
            TransportError::Protocol { .. } => FailureKind::Protocol,
            TransportError::Decode { .. } | TransportError::EnvironmentMismatch { .. } => {
                FailureKind::Decode
            }
            TransportError::Blocked { .. } => FailureKind::Blocked,
            TransportError::TooLarge { .. } => FailureKind::TooLarge,
            TransportError::InvalidRequest { .. } => FailureKind::Invalid,
        }
    }

    /// The reported retryability.
    pub fn retry_class(&self) -> RetryClass {
        match self {
            TransportError::Http { retry, .. }
            | TransportError::Connect { retry, .. }
            | TransportError::ConnectTimeout { retry }
            | TransportError::WriteFailed { retry, .. }
            | TransportError::ReadTimeout { retry }
            | TransportError::Reset { retry, .. }
            | TransportError::Protocol { retry, .. } => *retry,
            _ => RetryClass::NotRetryable,
        }
    }

    /// Whether the reported class is retryable.
    pub fn is_retryable(&self) -> bool {
        self.retry_class().is_retryable()
    }

    /// The HTTP status, when the failure is a response.
    pub fn status(&self) -> Option<u16> {
        match self.kind() {
            FailureKind::Http { status } => Some(status),
            _ => None,
        }
    }

    /// The parsed HTTP failure, when the failure is a response.
    pub fn http(&self) -> Option<&HttpFailure> {
        match self {
            TransportError::Http { failure, .. }
            | TransportError::MessageIdConflict { failure, .. } => Some(failure),
            _ => None,
        }
    }

    /// Re-applies `classifier` to the `retry` field.
    pub fn classified(mut self, classifier: Classifier) -> TransportError {
        let class = RetryClass::from_bool(classifier.allows(self.kind()));
        match &mut self {
            TransportError::Http { retry, .. }
            | TransportError::Connect { retry, .. }
            | TransportError::ConnectTimeout { retry }
            | TransportError::WriteFailed { retry, .. }
            | TransportError::ReadTimeout { retry }
            | TransportError::Reset { retry, .. }
            | TransportError::Protocol { retry, .. } => *retry = class,
            _ => {}
        }
        self
    }

    /// The "may have landed" rule of canon-wire.md §2.5 for a send of `parts` parts.
    pub fn may_have_landed(&self, parts: usize) -> bool {
        canon_wire::retry::may_have_landed(self.kind(), parts)
    }

    pub(crate) fn protocol(detail: impl Into<String>) -> TransportError {
        TransportError::Protocol {
            detail: detail.into(),
            retry: RetryClass::Retryable,
        }
    }

    pub(crate) fn decode(detail: impl Into<String>) -> TransportError {
        TransportError::Decode {
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_error_body_is_read_without_panicking(status in 400u16..600,
                                                     header in proptest::option::of(".{0,12}"),
                                                     body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let failure = HttpFailure::from_response(status, header.as_deref(), &body);
            prop_assert_eq!(failure.status, status);
            prop_assert!(failure.to_string().starts_with("Canon API returned "));
            prop_assert!(failure.retry_after.is_none_or(|d| d <= Duration::from_secs(86_400)));
        }
    }

    #[test]
    fn http_failure_parses_code_message_and_retry_after() {
        let body = br#"  {"error":"slow down","code":"RATE","retryAfter":7}  "#;
        let failure = HttpFailure::from_response(429, None, body);
        assert_eq!(failure.code.as_deref(), Some("RATE"));
        assert_eq!(failure.error_message(), "slow down");
        assert_eq!(failure.retry_after, Some(Duration::from_secs(7)));
        let header_wins = HttpFailure::from_response(503, Some("2"), body);
        assert_eq!(header_wins.retry_after, Some(Duration::from_secs(2)));
        let plain = HttpFailure::from_response(500, Some("soon"), b"oops\n");
        assert_eq!((plain.code.as_deref(), plain.retry_after), (None, None));
        assert_eq!(plain.error_message(), "oops");
        let hostile =
            HttpFailure::from_response(429, Some("-1"), br#"{"retryAfter":1e308,"error":""}"#);
        assert_eq!(hostile.retry_after, Some(Duration::from_secs(86_400)));
        assert_eq!(hostile.message, None);
    }

    #[test]
    fn display_matches_parity_string_and_caps_the_body() {
        let failure = HttpFailure::from_response(400, None, "é".repeat(600).as_bytes());
        let shown = failure.to_string();
        assert!(shown.starts_with("Canon API returned 400: é"));
        assert_eq!(
            shown.chars().count(),
            "Canon API returned 400: ".len() + 500
        );
    }

    #[test]
    fn blocked_and_too_large_messages_are_exact() {
        let blocked = TransportError::Blocked {
            safe_url: "http://10.0.0.1/x".into(),
            redirect: true,
        };
        assert_eq!(
            blocked.to_string(),
            "Blocked redirect to private/internal address: http://10.0.0.1/x"
        );
        let upload = TransportError::TooLarge {
            limit: 1,
            upload: true,
        };
        assert_eq!(upload.to_string(), "Canon media upload limit is 10MB");
    }

    #[test]
    fn classified_sets_the_retry_field() {
        let err = TransportError::ReadTimeout {
            retry: RetryClass::NotRetryable,
        };
        assert!(err.classified(Classifier::Report).is_retryable());
        let err = TransportError::Reset {
            retry: RetryClass::Retryable,
            source: "x".into(),
        };
        assert!(!err.classified(Classifier::Report).is_retryable());
    }
}
