//! Timeouts, notes and `hermes send` failures (coms-bridge.md §5.1, §6.7, §6.10, §6.11).
//!
//! Millisecond values (flags and `PI_COMS_TIMEOUT_MS`) are decimal integers from 1 to
//! 2,147,483,647, surrounding whitespace allowed: the original took any positive JavaScript
//! number, and its timer turned values past that range into an immediate timeout
//! (coms-bridge.md §5.1 DEVIATION).

use crate::core::text::js_trim;

/// The question timeout when neither `--timeout` nor a valid `PI_COMS_TIMEOUT_MS` gives one.
pub const DEFAULT_TIMEOUT_MS: u64 = 1_800_000;

/// The largest millisecond value we accept.
pub const MAX_MS: u64 = 2_147_483_647;

/// The most characters of Hermes' output a failure message carries (coms-bridge.md §6.7
/// DEVIATION: the message travels in an envelope, and receivers cap lines at 64 KiB).
pub const DETAIL_LIMIT: usize = 2000;

/// A millisecond value: decimal digits (whitespace around them allowed), 1…[`MAX_MS`].
pub fn parse_ms(text: &str) -> Option<u64> {
    let digits = js_trim(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = digits.trim_start_matches('0');
    if digits.len() > 10 {
        return None;
    }
    digits.parse().ok().filter(|ms| (1..=MAX_MS).contains(ms))
}

/// The timeout `PI_COMS_TIMEOUT_MS` gives: its value when valid, else [`DEFAULT_TIMEOUT_MS`]
/// (silently, as the original).
pub fn timeout_ms_from_env(value: Option<&str>) -> u64 {
    value.and_then(parse_ms).unwrap_or(DEFAULT_TIMEOUT_MS)
}

/// What a timeout produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeoutOutcome {
    /// The response envelope's `error`; its `response` is `null`.
    pub error: String,
    /// The note sent to Telegram.
    pub telegram_note: String,
}

/// The outcome of a question timing out after `ms`.
pub fn timeout_outcome(qid: &str, ms: u64) -> TimeoutOutcome {
    TimeoutOutcome {
        error: format!("no remote answer within {ms}ms"),
        telegram_note: format!("⌛ [HUB-Q:{qid}] The question timed out after {ms}ms."),
    }
}

/// The note sent when a question is cancelled.
pub fn cancel_note(qid: &str) -> String {
    format!("✖ [HUB-Q:{qid}] The question was cancelled — it was answered from the console.")
}

/// The note sent for an answer to a closed question.
pub fn late_note(qid: &str) -> String {
    format!("ℹ [HUB-Q:{qid}] This question is already closed; the late answer was ignored.")
}

/// The failure message of a `hermes send` that exited with `code` (`None`: killed by a signal):
/// `hermes send failed (<code>): <detail>`, detail = trimmed stderr, else trimmed stdout, capped
/// at [`DETAIL_LIMIT`] characters; `: <detail>` is left out when both are empty.
pub fn hermes_failure(code: Option<i32>, stderr: &str, stdout: &str) -> String {
    let detail = match js_trim(stderr) {
        "" => js_trim(stdout),
        text => text,
    };
    let mut message = String::from("hermes send failed");
    if let Some(code) = code {
        message.push_str(&format!(" ({code})"));
    }
    if !detail.is_empty() {
        message.push_str(": ");
        message.extend(detail.chars().take(DETAIL_LIMIT));
    }
    message
}

/// The failure message of a `hermes send` killed after `ms`.
pub fn hermes_timed_out(ms: u64) -> String {
    format!("hermes send failed: timed out after {ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const QID: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";

    #[test]
    fn timeout_from_env() {
        assert_eq!(timeout_ms_from_env(None), 1_800_000);
        assert_eq!(timeout_ms_from_env(Some("45000")), 45_000);
        assert_eq!(timeout_ms_from_env(Some("nope")), 1_800_000);
        assert_eq!(timeout_ms_from_env(Some(" 500 ")), 500);
        for fallback in ["0", "-5", "", "12.5", "0x10", "1e3", "2147483648", "+5"] {
            assert_eq!(timeout_ms_from_env(Some(fallback)), 1_800_000, "{fallback}");
        }
        assert_eq!(timeout_ms_from_env(Some("2147483647")), 2_147_483_647);
        assert_eq!(parse_ms("000120"), Some(120));
    }

    #[test]
    fn outcomes_and_notes() {
        assert_eq!(
            timeout_outcome(QID, 45_000),
            TimeoutOutcome {
                error: "no remote answer within 45000ms".into(),
                telegram_note:
                    "⌛ [HUB-Q:01ARZ3NDEKTSV4RRFFQ69G5FAV] The question timed out after 45000ms."
                        .into(),
            }
        );
        assert_eq!(
            cancel_note(QID),
            "✖ [HUB-Q:01ARZ3NDEKTSV4RRFFQ69G5FAV] The question was cancelled — it was answered from the console."
        );
        assert_eq!(
            late_note(QID),
            "ℹ [HUB-Q:01ARZ3NDEKTSV4RRFFQ69G5FAV] This question is already closed; the late answer was ignored."
        );
    }

    #[test]
    fn hermes_failure_messages() {
        assert_eq!(
            hermes_failure(Some(42), " fake hermes failure for x \n", "out"),
            "hermes send failed (42): fake hermes failure for x"
        );
        assert_eq!(
            hermes_failure(Some(1), "", " out "),
            "hermes send failed (1): out"
        );
        assert_eq!(hermes_failure(Some(2), "", ""), "hermes send failed (2)");
        assert_eq!(hermes_failure(None, "boom", ""), "hermes send failed: boom");
        assert_eq!(hermes_failure(None, "", ""), "hermes send failed");
        let long = hermes_failure(Some(1), &"é".repeat(5000), "");
        assert_eq!(
            long.chars().count(),
            "hermes send failed (1): ".len() + DETAIL_LIMIT
        );
        assert_eq!(
            hermes_timed_out(120_000),
            "hermes send failed: timed out after 120000ms"
        );
    }

    proptest! {
        #[test]
        fn parse_ms_accepts_exactly_the_range(n in 0u64..=4_294_967_296) {
            let expected = (1..=MAX_MS).contains(&n).then_some(n);
            prop_assert_eq!(parse_ms(&n.to_string()), expected);
        }

        #[test]
        fn parse_ms_never_panics(text in "\\PC{0,20}") {
            let _ = parse_ms(&text);
        }
    }
}
