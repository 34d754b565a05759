//! Normalization of `request_approval` inputs (approvals.md §9.1).
//!
//! Pure functions that turn the model's (or a domain plugin's) loosely typed
//! arguments into the values the registry and the server create need: the
//! summary, `toolName`, `toolSummary`, the detail rows and the clamped timeout.
//! Python semantics are reproduced where the spec fixes them (truthiness,
//! `str()`, `int()`, code-point cuts).

use serde_json::Value;

use crate::text::{cut_chars, is_truthy, py_str, py_strip};

/// Default and maximum detached-approval timeout, 72 h (approvals.md §9.1, A9).
pub const MAX_TIMEOUT_SECONDS: u64 = 259_200;

/// Minimum detached-approval timeout (approvals.md §9.1).
pub const MIN_TIMEOUT_SECONDS: u64 = 5;

/// `toolName` cap in chars (approvals.md §9.1).
pub const TOOL_NAME_MAX_CHARS: usize = 128;

/// `toolSummary` cap in chars (approvals.md §9.1).
pub const TOOL_SUMMARY_MAX_CHARS: usize = 1000;

/// Detail label cap in chars (approvals.md §9.1).
pub const DETAIL_LABEL_MAX_CHARS: usize = 80;

/// Detail value cap in chars (approvals.md §9.1).
pub const DETAIL_VALUE_MAX_CHARS: usize = 500;

/// Context members turned into rows (approvals.md §9.1).
pub const MAX_CONTEXT_ROWS: usize = 6;

/// Options items folded into the `Options` row (approvals.md §9.1).
pub const MAX_OPTION_ITEMS: usize = 8;

/// Error text when neither question nor title is usable (approvals.md §9.1).
pub const MISSING_SUMMARY_MESSAGE: &str = "request_approval requires a title or question";

fn text_of(value: Option<&Value>) -> String {
    match value {
        Some(v) if is_truthy(v) => py_strip(&py_str(v)).to_owned(),
        _ => String::new(),
    }
}

/// The approval summary: `question` trimmed, else `title` trimmed; `None` when both
/// are empty (the caller reports [`MISSING_SUMMARY_MESSAGE`]). Not yet cut.
pub fn summary(question: Option<&Value>, title: Option<&Value>) -> Option<String> {
    let question = text_of(question);
    if !question.is_empty() {
        return Some(question);
    }
    let title = text_of(title);
    (!title.is_empty()).then_some(title)
}

/// `toolName`: the title trimmed, or `Approval`, cut to 128 chars.
pub fn tool_name(title: Option<&Value>) -> String {
    let title = text_of(title);
    let name = if title.is_empty() { "Approval" } else { &title };
    cut_chars(name, TOOL_NAME_MAX_CHARS).to_owned()
}

/// `toolSummary`: the summary cut to 1000 chars.
pub fn tool_summary(summary: &str) -> String {
    cut_chars(summary, TOOL_SUMMARY_MAX_CHARS).to_owned()
}

/// Python `int()` of a JSON value; `None` when it would raise.
fn py_int(value: &Value) -> Option<i128> {
    match value {
        Value::Bool(b) => Some(i128::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(i128::from(i))
            } else if let Some(u) = n.as_u64() {
                Some(i128::from(u))
            } else {
                let f = n.as_f64()?.trunc();
                // Saturating conversion: huge values are clamped below anyway.
                Some(f as i128)
            }
        }
        Value::String(s) => parse_py_int_literal(py_strip(s)),
        _ => None,
    }
}

fn parse_py_int_literal(text: &str) -> Option<i128> {
    let (negative, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let mut value: i128 = 0;
    for b in digits.bytes() {
        match b {
            b'_' => {}
            b'0'..=b'9' => {
                value = value
                    .saturating_mul(10)
                    .saturating_add(i128::from(b - b'0'));
            }
            _ => return None,
        }
    }
    Some(if negative { -value } else { value })
}

/// The detached timeout in seconds: `int(timeoutSeconds)`, default 72 h when absent
/// or unparseable, then clamped to 5 s ..= 72 h (approvals.md §9.1, A9).
pub fn clamp_timeout_seconds(timeout_seconds: Option<&Value>) -> u64 {
    let parsed = timeout_seconds
        .and_then(py_int)
        .unwrap_or(i128::from(MAX_TIMEOUT_SECONDS));
    let clamped = parsed.clamp(
        i128::from(MIN_TIMEOUT_SECONDS),
        i128::from(MAX_TIMEOUT_SECONDS),
    );
    u64::try_from(clamped).unwrap_or(MAX_TIMEOUT_SECONDS)
}

/// The requested deadline `floor((now_s + timeout) × 1000)`, in exact integer ms.
pub fn requested_expires_at_ms(now_ms: u64, timeout_seconds: u64) -> u64 {
    now_ms.saturating_add(timeout_seconds.saturating_mul(1000))
}

/// The legacy 30-minute deadline cap (approvals.md §9.5, Q2).
pub const LEGACY_CAP_SECONDS: u64 = 1_800;

/// `fail_creation` reason when no client could be built (approvals.md §9.3).
pub const CLIENT_UNAVAILABLE_REASON: &str = "Canon client was unavailable before server creation";

/// Note of a successful `request_approval` result (approvals.md §9.4).
pub const REQUESTED_NOTE: &str = "Approval requested. Do NOT block on it: the decision will arrive as a system message when the owner responds, or poll it later with action 'check_approval'.";

/// How a failed server create is treated (approvals.md §9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateFailure {
    /// HTTP 400–499 except 408, 409, 425, 429: nothing was committed; close the entry
    /// with `fail_creation` (after the approvals.md §9.5 retry, when it applies).
    Definitive,
    /// Anything else (timeouts, 408/409/425/429, 5xx, transport, cancellation): the
    /// create may have committed; leave the entry `creating` for recovery.
    Ambiguous,
}

impl CreateFailure {
    /// Classifies an HTTP status; `None` (no response at all) is ambiguous.
    pub fn classify(http_status: Option<u16>) -> Self {
        match http_status {
            Some(408 | 409 | 425 | 429) => CreateFailure::Ambiguous,
            Some(400..=499) => CreateFailure::Definitive,
            _ => CreateFailure::Ambiguous,
        }
    }
}

/// The `fail_creation` reason after a definitive rejection (approvals.md §9.3).
pub fn rejected_reason(http_status: u16) -> String {
    format!("Canon rejected approval creation ({http_status})")
}

/// Whether the one \[seed\] legacy-cap retry applies (approvals.md §9.5): only after a
/// definitive rejection of the first attempt, only when more than 30 minutes were
/// requested. Returns the retry's `expiresAt`, else `None`.
pub fn legacy_cap_retry(
    failure: CreateFailure,
    first_attempt: bool,
    requested_timeout_seconds: u64,
    now_ms: u64,
) -> Option<u64> {
    (failure == CreateFailure::Definitive
        && first_attempt
        && requested_timeout_seconds > LEGACY_CAP_SECONDS)
        .then(|| requested_expires_at_ms(now_ms, LEGACY_CAP_SECONDS))
}

/// The effective responder after a create (approvals.md §9.4): the echoed
/// `responseUserId` trimmed if non-empty, else the one sent.
pub fn effective_responder<'a>(
    echoed: Option<&'a Value>,
    sent: Option<&'a str>,
) -> Option<&'a str> {
    echoed
        .and_then(Value::as_str)
        .map(py_strip)
        .filter(|s| !s.is_empty())
        .or(sent)
}

/// The successful `request_approval` result (approvals.md §9.4), built from the
/// activated registry entry.
pub fn requested_result(entry: &crate::state::Entry) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("status".into(), "pending".into());
    out.insert("approvalId".into(), entry.approval_id().into());
    out.insert("conversationId".into(), entry.conversation_id().into());
    out.insert("expiresAt".into(), entry.expires_at().clone());
    if let Some(responder) = entry.response_user_id() {
        out.insert("responseUserId".into(), responder.into());
    }
    out.insert("note".into(), REQUESTED_NOTE.into());
    Value::Object(out)
}

/// One `details` row of the server create body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetailRow {
    /// Label, ≤ 80 chars.
    pub label: String,
    /// Value, ≤ 500 chars.
    pub value: String,
}

/// Detail rows from `context` and `options` (approvals.md §9.1 table). Empty means
/// `details` is omitted.
pub fn detail_rows(context: Option<&Value>, options: Option<&Value>) -> Vec<DetailRow> {
    let mut rows = Vec::new();
    match context {
        Some(Value::Object(map)) => {
            for (key, value) in map.iter().take(MAX_CONTEXT_ROWS) {
                let label = cut_chars(py_strip(key), DETAIL_LABEL_MAX_CHARS);
                let rendered = py_str(value);
                let value = cut_chars(py_strip(&rendered), DETAIL_VALUE_MAX_CHARS);
                if !label.is_empty() && !value.is_empty() {
                    rows.push(DetailRow {
                        label: label.to_owned(),
                        value: value.to_owned(),
                    });
                }
            }
        }
        Some(Value::String(text)) if !py_strip(text).is_empty() => rows.push(DetailRow {
            label: "Context".to_owned(),
            value: cut_chars(py_strip(text), DETAIL_VALUE_MAX_CHARS).to_owned(),
        }),
        _ => {}
    }
    if let Some(Value::Array(items)) = options {
        let parts: Vec<String> = items
            .iter()
            .take(MAX_OPTION_ITEMS)
            .map(|item| py_strip(&py_str(item)).to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        let joined = parts.join(", ");
        let value = cut_chars(&joined, DETAIL_VALUE_MAX_CHARS);
        if !value.is_empty() {
            rows.push(DetailRow {
                label: "Options".to_owned(),
                value: value.to_owned(),
            });
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check_timeout(input: Option<Value>, expected: u64) {
        assert_eq!(clamp_timeout_seconds(input.as_ref()), expected, "{input:?}");
    }

    #[test]
    fn timeout_follows_python_int_then_clamp() {
        check_timeout(None, 259_200);
        check_timeout(Some(json!(null)), 259_200);
        check_timeout(Some(json!(3600)), 3600);
        check_timeout(Some(json!(3600.9)), 3600);
        check_timeout(Some(json!(-3600.9)), 5);
        check_timeout(Some(json!(" +1_800 ")), 1800);
        check_timeout(Some(json!("1__800")), 259_200);
        check_timeout(Some(json!("_1")), 259_200);
        check_timeout(Some(json!("12.5")), 259_200);
        check_timeout(Some(json!(true)), 5);
        check_timeout(Some(json!(1)), 5);
        check_timeout(Some(json!(10_000_000)), 259_200);
        check_timeout(
            Some(json!("99999999999999999999999999999999999999999")),
            259_200,
        );
        check_timeout(Some(json!([60])), 259_200);
        assert_eq!(requested_expires_at_ms(1_000, 5), 6_000);
    }

    #[test]
    fn summary_and_names() {
        assert_eq!(
            summary(Some(&json!("  Q? ")), Some(&json!("T"))),
            Some("Q?".into())
        );
        assert_eq!(
            summary(Some(&json!("   ")), Some(&json!(" T "))),
            Some("T".into())
        );
        assert_eq!(summary(Some(&json!(0)), Some(&json!(false))), None);
        assert_eq!(summary(Some(&json!(42)), None), Some("42".into()));
        assert_eq!(tool_name(None), "Approval");
        assert_eq!(
            tool_name(Some(&json!("x".repeat(200)))).chars().count(),
            128
        );
        assert_eq!(tool_summary(&"é".repeat(1200)).chars().count(), 1000);
    }

    #[test]
    fn create_failures_are_classified() {
        for (status, expected) in [
            (Some(400), CreateFailure::Definitive),
            (Some(403), CreateFailure::Definitive),
            (Some(499), CreateFailure::Definitive),
            (Some(408), CreateFailure::Ambiguous),
            (Some(409), CreateFailure::Ambiguous),
            (Some(425), CreateFailure::Ambiguous),
            (Some(429), CreateFailure::Ambiguous),
            (Some(500), CreateFailure::Ambiguous),
            (None, CreateFailure::Ambiguous),
        ] {
            assert_eq!(CreateFailure::classify(status), expected, "{status:?}");
        }
        assert_eq!(
            rejected_reason(422),
            "Canon rejected approval creation (422)"
        );
        assert_eq!(
            legacy_cap_retry(CreateFailure::Definitive, true, 259_200, 1_000),
            Some(1_801_000)
        );
        assert_eq!(
            legacy_cap_retry(CreateFailure::Definitive, false, 259_200, 1_000),
            None
        );
        assert_eq!(
            legacy_cap_retry(CreateFailure::Definitive, true, 1_800, 1_000),
            None
        );
        assert_eq!(
            legacy_cap_retry(CreateFailure::Ambiguous, true, 259_200, 1_000),
            None
        );
        assert_eq!(
            effective_responder(Some(&json!(" h2 ")), Some("h1")),
            Some("h2")
        );
        assert_eq!(
            effective_responder(Some(&json!(" ")), Some("h1")),
            Some("h1")
        );
        assert_eq!(effective_responder(Some(&json!(5)), None), None);
    }

    #[test]
    fn detail_rows_follow_the_table() {
        let context = json!({"a": 1, " ": "skipped", "b": true, "c": null, "d": "x", "e": "", "f": "y", "g": "seventh"});
        let rows = detail_rows(Some(&context), Some(&json!([" one ", "", 2, null])));
        let got: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.label.as_str(), r.value.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", "1"),
                ("b", "True"),
                ("c", "None"),
                ("d", "x"),
                ("Options", "one, 2, None")
            ]
        );
        let rows = detail_rows(Some(&json!("  why  ")), None);
        assert_eq!(
            rows,
            vec![DetailRow {
                label: "Context".into(),
                value: "why".into()
            }]
        );
        assert!(detail_rows(Some(&json!("  ")), Some(&json!("not a list"))).is_empty());
    }
}
