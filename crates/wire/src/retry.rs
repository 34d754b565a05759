//! Retry classification of canon-wire.md §2.5 as pure functions.
//!
//! A failure is first reduced to a [`FailureKind`] (the distinctions of
//! canon-wire.md §2.6); each call site then picks one of the four named
//! classifiers. Nothing here does I/O or reads the clock: the durable retry
//! schedule is data ([`DURABLE_SEND_BACKOFF`]) and the `Retry-After` rule is
//! [`durable_retry_delay`].

use std::time::Duration;

/// What kind of failure happened, with only the facts the classifiers need
/// (canon-wire.md §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// A response with status ≥ 400.
    Http {
        /// The HTTP status code.
        status: u16,
    },
    /// TCP/TLS connection not established (nothing was sent).
    Connect,
    /// The connection was not established within the connect timeout.
    ConnectTimeout,
    /// The connection broke while the request was being sent.
    WriteFailed,
    /// No response (or no body bytes) within the read timeout.
    ReadTimeout,
    /// The connection was closed or reset after the request was sent.
    Reset,
    /// Malformed HTTP, an oversize frame, or invalid UTF-8 in a JSON body.
    Protocol,
    /// Status < 400 but the body is not what the operation requires.
    Decode,
    /// The SSRF guard refused a URL (never retried).
    Blocked,
    /// Media over the size cap (never retried).
    TooLarge,
    /// The request was refused before anything was sent (invalid input).
    Invalid,
}

/// Which classifier a call site uses (canon-wire.md §2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Classifier {
    /// `is_retryable`: reads and non-idempotent operations that only *report*
    /// retryability upward.
    Report,
    /// `is_retryable_idempotent_write`: a write carrying a stable client id.
    IdempotentWrite,
    /// `is_safe_to_retry_write`: a write without a client id.
    UnsafeWrite,
}

impl Classifier {
    /// Applies this classifier to `kind`.
    pub fn allows(self, kind: FailureKind) -> bool {
        match self {
            Classifier::Report => is_retryable(kind),
            Classifier::IdempotentWrite => is_retryable_idempotent_write(kind),
            Classifier::UnsafeWrite => is_safe_to_retry_write(kind),
        }
    }
}

/// The retryability reported with a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryClass {
    /// The caller may retry the operation.
    Retryable,
    /// Retrying cannot help (or could duplicate work).
    NotRetryable,
}

impl RetryClass {
    /// `Retryable` when `retryable` is true.
    pub fn from_bool(retryable: bool) -> RetryClass {
        if retryable {
            RetryClass::Retryable
        } else {
            RetryClass::NotRetryable
        }
    }

    /// Whether the class is [`RetryClass::Retryable`].
    pub fn is_retryable(self) -> bool {
        self == RetryClass::Retryable
    }
}

/// `retryable` (HTTP status): 408, 425, 429 and every status ≥ 500.
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 425 | 429) || status >= 500
}

/// `is_retryable`: retryable statuses, connect error, connect timeout, read
/// timeout, protocol error.
pub fn is_retryable(kind: FailureKind) -> bool {
    match kind {
        FailureKind::Http { status } => retryable_status(status),
        FailureKind::Connect
        | FailureKind::ConnectTimeout
        | FailureKind::ReadTimeout
        | FailureKind::Protocol => true,
        _ => false,
    }
}

/// Whether a read (a `GET`) that failed this way is worth another try: a read changes nothing,
/// so every transport failure is, and so is an answer whose body was not what the read needs
/// (a proxy's page, a body cut short and closed cleanly); retryable statuses too. Used where a
/// failed read would otherwise end the caller for good (the connect's reads).
pub fn is_retryable_read(kind: FailureKind) -> bool {
    is_retryable_idempotent_write(kind) || kind == FailureKind::Decode
}

/// `is_retryable_idempotent_write`: retryable statuses and any transport
/// error.
pub fn is_retryable_idempotent_write(kind: FailureKind) -> bool {
    match kind {
        FailureKind::Http { status } => retryable_status(status),
        FailureKind::Connect
        | FailureKind::ConnectTimeout
        | FailureKind::WriteFailed
        | FailureKind::ReadTimeout
        | FailureKind::Reset
        | FailureKind::Protocol => true,
        _ => false,
    }
}

/// `is_safe_to_retry_write`: only failures that prove the request was not
/// processed — HTTP 429 or 503, connect error, connect timeout.
pub fn is_safe_to_retry_write(kind: FailureKind) -> bool {
    match kind {
        FailureKind::Http { status } => matches!(status, 429 | 503),
        FailureKind::Connect | FailureKind::ConnectTimeout => true,
        _ => false,
    }
}

/// The "may have landed" rule for a failed turn-bound send
/// (canon-wire.md §2.5, turns.md §4.4): `true` means the reservation must
/// be kept and the exact request replayed later.
pub fn may_have_landed(kind: FailureKind, parts: usize) -> bool {
    if parts > 1 {
        return true;
    }
    if is_safe_to_retry_write(kind) {
        return false;
    }
    match kind {
        FailureKind::Http { status } => status == 409 || retryable_status(status),
        // Refused before sending: nothing can have landed.
        FailureKind::Blocked | FailureKind::TooLarge | FailureKind::Invalid => false,
        _ => true,
    }
}

/// Attempts of the durable send loop (canon-wire.md §2.5).
pub const DURABLE_SEND_ATTEMPTS: u32 = 3;

/// Sleeps between durable send attempts: 0.4 s, then 0.8 s (canon-wire.md §2.5).
pub const DURABLE_SEND_BACKOFF: [Duration; 2] =
    [Duration::from_millis(400), Duration::from_millis(800)];

/// Cap for a server-requested wait inside the durable loop (canon-wire.md §2.5 \[target\]).
pub const DURABLE_RETRY_AFTER_CAP: Duration = Duration::from_secs(30);

/// The sleep after failed attempt `attempt` (1-based): the schedule, raised
/// to `Retry-After` for 429/503 and capped at 30 s.
pub fn durable_retry_delay(
    attempt: u32,
    kind: FailureKind,
    retry_after: Option<Duration>,
) -> Duration {
    durable_retry_delay_with(DURABLE_SEND_BACKOFF, attempt, kind, retry_after)
}

/// [`durable_retry_delay`] over a custom two-step schedule (tests shorten it).
pub fn durable_retry_delay_with(
    schedule: [Duration; 2],
    attempt: u32,
    kind: FailureKind,
    retry_after: Option<Duration>,
) -> Duration {
    let base = if attempt <= 1 {
        schedule[0]
    } else {
        schedule[1]
    };
    match (kind, retry_after) {
        (FailureKind::Http { status: 429 | 503 }, Some(wait)) => {
            base.max(wait.min(DURABLE_RETRY_AFTER_CAP))
        }
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FailureKind as K;

    fn http(status: u16) -> FailureKind {
        K::Http { status }
    }

    /// One row of the canon-wire.md §2.5 status matrix for the two
    /// durable-send columns: (failure, retried with id, retried without id,
    /// reported-retryable for a send without id).
    fn check_row(kind: FailureKind, with_id: bool, without_id: bool, reported_without_id: bool) {
        assert_eq!(
            is_retryable_idempotent_write(kind),
            with_id,
            "{kind:?} with id"
        );
        assert_eq!(
            is_safe_to_retry_write(kind),
            without_id,
            "{kind:?} without id"
        );
        assert_eq!(is_retryable(kind), reported_without_id, "{kind:?} reported");
    }

    #[test]
    fn a_read_retries_every_transport_failure_and_an_undecodable_body() {
        for kind in [
            K::Connect,
            K::ConnectTimeout,
            K::WriteFailed,
            K::ReadTimeout,
            K::Reset,
            K::Protocol,
            K::Decode,
            http(429),
            http(503),
        ] {
            assert!(is_retryable_read(kind), "{kind:?}");
        }
        for kind in [
            http(400),
            http(401),
            http(403),
            http(404),
            K::Blocked,
            K::TooLarge,
            K::Invalid,
        ] {
            assert!(!is_retryable_read(kind), "{kind:?}");
        }
    }

    #[test]
    fn row_400_fails_non_retryable() {
        check_row(http(400), false, false, false);
    }

    #[test]
    fn row_401_403_fail_non_retryable() {
        check_row(http(401), false, false, false);
        check_row(http(403), false, false, false);
    }

    #[test]
    fn row_404_fails_non_retryable() {
        check_row(http(404), false, false, false);
    }

    #[test]
    fn row_408_425_retried_with_id_reported_retryable_without() {
        check_row(http(408), true, false, true);
        check_row(http(425), true, false, true);
    }

    #[test]
    fn row_409_fails_and_may_have_landed() {
        check_row(http(409), false, false, false);
        assert!(may_have_landed(http(409), 1));
    }

    #[test]
    fn row_429_retried_both() {
        check_row(http(429), true, true, true);
    }

    #[test]
    fn row_503_retried_both() {
        check_row(http(503), true, true, true);
    }

    #[test]
    fn row_other_5xx_retried_with_id_only() {
        for status in [500, 502, 504, 599] {
            check_row(http(status), true, false, true);
        }
    }

    #[test]
    fn row_read_timeout_and_reset() {
        // Read timeout: reported retryable; reset: reported non-retryable.
        check_row(K::ReadTimeout, true, false, true);
        check_row(K::Reset, true, false, false);
        check_row(K::Protocol, true, false, true);
        check_row(K::WriteFailed, true, false, false);
    }

    #[test]
    fn row_connect_error_and_timeout_retried_both() {
        check_row(K::Connect, true, true, true);
        check_row(K::ConnectTimeout, true, true, true);
    }

    #[test]
    fn refusals_are_never_retried() {
        for kind in [K::Blocked, K::TooLarge, K::Decode, K::Invalid] {
            check_row(kind, false, false, false);
        }
    }

    #[test]
    fn retryable_status_table() {
        for status in [408, 425, 429, 500, 501, 503, 599, 999] {
            assert!(retryable_status(status), "{status}");
        }
        for status in [200, 301, 400, 401, 403, 404, 409, 413, 422, 426, 499] {
            assert!(!retryable_status(status), "{status}");
        }
    }

    #[test]
    fn classifier_enum_dispatches_to_named_functions() {
        assert!(Classifier::Report.allows(K::ReadTimeout));
        assert!(!Classifier::Report.allows(K::Reset));
        assert!(Classifier::IdempotentWrite.allows(K::Reset));
        assert!(!Classifier::UnsafeWrite.allows(K::ReadTimeout));
    }

    #[test]
    fn may_have_landed_rule_in_order() {
        // (1) multi-part plans always keep the reservation.
        assert!(may_have_landed(http(400), 2));
        // (2) provably not processed.
        for kind in [http(429), http(503), K::Connect, K::ConnectTimeout] {
            assert!(!may_have_landed(kind, 1), "{kind:?}");
        }
        // (3) other HTTP errors.
        for status in [408, 425, 500, 502, 409] {
            assert!(may_have_landed(http(status), 1), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422] {
            assert!(!may_have_landed(http(status), 1), "{status}");
        }
        // (4) everything after the connection was made.
        for kind in [
            K::WriteFailed,
            K::ReadTimeout,
            K::Reset,
            K::Protocol,
            K::Decode,
        ] {
            assert!(may_have_landed(kind, 1), "{kind:?}");
        }
    }

    #[test]
    fn durable_delay_schedule_and_retry_after() {
        assert_eq!(
            durable_retry_delay(1, http(500), None),
            Duration::from_millis(400)
        );
        assert_eq!(
            durable_retry_delay(2, http(500), None),
            Duration::from_millis(800)
        );
        let five = Some(Duration::from_secs(5));
        assert_eq!(
            durable_retry_delay(1, http(429), five),
            Duration::from_secs(5)
        );
        assert_eq!(
            durable_retry_delay(1, http(500), five),
            Duration::from_millis(400)
        );
        let long = Some(Duration::from_secs(300));
        assert_eq!(
            durable_retry_delay(2, http(503), long),
            Duration::from_secs(30)
        );
        let short = Some(Duration::from_millis(10));
        assert_eq!(
            durable_retry_delay(2, http(503), short),
            Duration::from_millis(800)
        );
    }
}
