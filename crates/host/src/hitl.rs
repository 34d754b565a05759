//! The pure rules of Hermes' blocking human-in-the-loop calls
//! (runtime-control.md §6.1–§6.5, hermes-host.md §13 and Q2, Q10,
//! canon-wire.md §9.2–§9.3): timeouts, choice normalization, the `sudo`
//! owner-only test, the request shapes of `send_clarify` and
//! `send_exec_approval`, the clarify answer text and the approval choice.
//! The driver does the I/O around them.

pub mod table;

use std::time::Duration;

use canon_wire::types::{ApprovalDetail, ApprovalRequest, Choice, InputRequest};
use serde_json::{Map, Value};

use crate::protocol::ApprovalChoice;

/// The timeout when `HERMES_CLARIFY_TIMEOUT` / `HERMES_APPROVAL_TIMEOUT`
/// are unset or unreadable (runtime-control.md §6.4, §6.5).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The shortest Canon-side HITL wait.
pub const MIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest Canon-side HITL wait (the 30-minute ceiling).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(1_800);

/// `title` of a clarify input (exact).
pub const CLARIFY_TITLE: &str = "Clarification needed";

/// The clarify answer after a Canon-side cancel (exact).
pub const CLARIFY_CANCELLED: &str = "[user cancelled the clarification]";

/// The clarify answer after a timeout, whatever the timeout (exact, runtime-control.md Q8).
pub const CLARIFY_TIMED_OUT: &str = "[user did not respond within 5m]";

/// `SendResult.error` when the adapter is not connected (exact).
pub const NOT_CONNECTED: &str = "Canon adapter is not connected";

/// Hermes' default approval description.
pub const DEFAULT_DESCRIPTION: &str = "dangerous command";

/// `toolSummary` when the description is empty (exact).
pub const EMPTY_SUMMARY: &str = "Command approval required";

/// The detail row added when Hermes' smart review denied the command
/// (hermes-host.md Q2; exact).
pub const SMART_DENIED_TEXT: &str =
    "The safety review denied this command. An override allows this operation once only.";

const MAX_CHOICES: usize = 12;
const MAX_LABEL_CHARS: usize = 160;
const MAX_VALUE_CHARS: usize = 400;
const MAX_COMMAND_CHARS: usize = 4_000;

/// A HITL timeout from its environment variable: an integer number of
/// seconds (surrounding spaces allowed), else [`DEFAULT_TIMEOUT`]; clamped
/// to [`MIN_TIMEOUT`]..=[`MAX_TIMEOUT`].
pub fn timeout_from_env(raw: Option<&str>) -> Duration {
    let secs = raw
        .and_then(|r| r.trim().parse::<i64>().ok())
        .unwrap_or(DEFAULT_TIMEOUT.as_secs() as i64);
    clamp(Duration::from_secs(secs.max(0) as u64))
}

/// The Canon expiry of an exec approval (hermes-host.md Q10): the smaller
/// of the environment timeout and Hermes' own `approvals.timeout` (when the
/// shim reported a positive one), clamped to 5..=1,800 s.
pub fn approval_timeout(env: Duration, host_seconds: Option<f64>) -> Duration {
    let host = host_seconds
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| Duration::from_secs_f64(s.min(MAX_TIMEOUT.as_secs_f64())));
    clamp(host.map_or(env, |h| env.min(h)))
}

fn clamp(d: Duration) -> Duration {
    d.clamp(MIN_TIMEOUT, MAX_TIMEOUT)
}

/// The first `max` characters of `s`.
fn first_chars(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// A choice field as text: strings as they are, numbers and booleans
/// printed; anything else (and blank text) absent, as Python's `or` skips
/// falsy values.
fn text_of(v: Option<&Value>) -> Option<String> {
    let text = match v? {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(true) => "True".to_owned(),
        _ => return None,
    };
    (!text.is_empty()).then_some(text)
}

/// Clarify choices (runtime-control.md §6.4): the first 12; an object's
/// label is `label` ∨ `text` ∨ `value` and its value `value` ∨ the label; a
/// string is both; trimmed; blank labels dropped; label ≤ 160 chars, value
/// ≤ 400. `None` when nothing is left.
pub fn normalize_choices(choices: &[Value]) -> Option<Vec<Choice>> {
    let out: Vec<Choice> = choices
        .iter()
        .take(MAX_CHOICES)
        .filter_map(|item| {
            let (label, value) = match item {
                Value::Object(o) => {
                    let label = text_of(o.get("label"))
                        .or_else(|| text_of(o.get("text")))
                        .or_else(|| text_of(o.get("value")))?;
                    let value = text_of(o.get("value")).unwrap_or_else(|| label.clone());
                    (label, value)
                }
                other => {
                    let s = text_of(Some(other))?;
                    (s.clone(), s)
                }
            };
            let label = label.trim();
            if label.is_empty() {
                return None;
            }
            let value = match value.trim() {
                "" => label,
                v => v,
            };
            Some(Choice {
                label: first_chars(label, MAX_LABEL_CHARS),
                value: first_chars(value, MAX_VALUE_CHARS),
                description: None,
            })
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether a command runs `sudo` (runtime-control.md §6.2): a caseless
/// `sudo` (`ſ` folds to `s`) not preceded by a word character or `-` and
/// followed by the end, whitespace or one of `;&|()`.
pub fn is_sudo_command(command: &str) -> bool {
    let chars: Vec<char> = command.chars().collect();
    let matches = |c: char, want: char| match want {
        's' => matches!(c, 's' | 'S' | '\u{17F}'),
        _ => c.to_ascii_lowercase() == want,
    };
    chars.windows(4).enumerate().any(|(i, w)| {
        w.iter()
            .zip("sudo".chars())
            .all(|(c, want)| matches(*c, want))
            && (i == 0 || !(is_word(chars[i - 1]) || chars[i - 1] == '-'))
            && chars
                .get(i + 4)
                .is_none_or(|c| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')'))
    })
}

/// The `native` correlation object of a blocking HITL request
/// (canon-wire.md §4.12.1).
fn native(method: &str, request_id: &str, session_key: &str) -> Map<String, Value> {
    let mut native = Map::new();
    native.insert("runtime".into(), "hermes".into());
    native.insert("method".into(), method.into());
    native.insert("requestId".into(), request_id.into());
    native.insert("sessionKey".into(), session_key.into());
    native
}

/// What `send_clarify` asks Canon for.
pub struct ClarifyAsk<'a> {
    /// The conversation.
    pub conversation_id: &'a str,
    /// Hermes' clarify id (also the `inputId`).
    pub clarify_id: &'a str,
    /// The question.
    pub question: &'a str,
    /// The choices as Hermes passed them.
    pub choices: &'a [Value],
    /// The responder (runtime-control.md §6.1), `None` for the owner.
    pub responder: Option<String>,
    /// The Hermes session key.
    pub session_key: &'a str,
    /// Absolute deadline, epoch ms.
    pub expires_at: u64,
}

/// The clarify input request (runtime-control.md §6.4).
pub fn clarify_request(ask: &ClarifyAsk<'_>) -> InputRequest {
    InputRequest {
        conversation_id: ask.conversation_id.to_owned(),
        input_id: ask.clarify_id.to_owned(),
        kind: "clarify".to_owned(),
        expires_at: ask.expires_at,
        title: Some(CLARIFY_TITLE.to_owned()),
        prompt: Some(ask.question.to_owned()),
        choices: normalize_choices(ask.choices),
        questions: None,
        response_user_id: ask.responder.clone(),
        native: Some(native("clarify", ask.clarify_id, ask.session_key)),
        sensitive: None,
        turn_id: None,
    }
}

/// What `send_exec_approval` asks Canon for.
pub struct ApprovalAsk<'a> {
    /// The conversation.
    pub conversation_id: &'a str,
    /// `hermes-` + 20 hex.
    pub approval_id: &'a str,
    /// The (Hermes-redacted) command.
    pub command: &'a str,
    /// Hermes' description (`None` → [`DEFAULT_DESCRIPTION`]).
    pub description: Option<&'a str>,
    /// The turn's responder (runtime-control.md §6.1) before the `sudo` rule.
    pub responder: Option<String>,
    /// The agent's owner (`GET /agents/me` `ownerId`).
    pub owner_id: Option<&'a str>,
    /// Hermes allows a session rule (hermes-host.md Q2; default true).
    pub allow_session: bool,
    /// Hermes' smart review denied the command.
    pub smart_denied: bool,
    /// The Hermes session key.
    pub session_key: &'a str,
    /// Absolute deadline, epoch ms.
    pub expires_at: u64,
}

/// The exec approval request (runtime-control.md §6.2, §6.3, §6.5,
/// hermes-host.md Q2): `sudo` commands go to the owner; a session rule is
/// requested only when Hermes allows one, the smart review did not deny,
/// and the responder is the owner or omitted; Hermes' permanent tier is
/// never offered.
pub fn approval_request(ask: &ApprovalAsk<'_>) -> ApprovalRequest {
    let responder = if is_sudo_command(ask.command) {
        None
    } else {
        ask.responder.clone()
    };
    let owner_rule = match &responder {
        None => true,
        Some(r) => ask.owner_id == Some(r.as_str()),
    };
    let description = ask.description.unwrap_or(DEFAULT_DESCRIPTION);
    let summary = if description.is_empty() {
        EMPTY_SUMMARY
    } else {
        description
    };
    let mut details = vec![
        ApprovalDetail {
            label: "Command".to_owned(),
            value: first_chars(ask.command, MAX_COMMAND_CHARS),
            monospace: Some(true),
        },
        ApprovalDetail {
            label: "Reason".to_owned(),
            value: description.to_owned(),
            monospace: None,
        },
    ];
    if ask.smart_denied {
        details.push(ApprovalDetail {
            label: "Smart approval".to_owned(),
            value: SMART_DENIED_TEXT.to_owned(),
            monospace: None,
        });
    }
    ApprovalRequest {
        conversation_id: ask.conversation_id.to_owned(),
        approval_id: ask.approval_id.to_owned(),
        tool_name: "Command".to_owned(),
        tool_summary: summary.to_owned(),
        expires_at: ask.expires_at,
        allow_session_rule: ask.allow_session && !ask.smart_denied && owner_rule,
        response_user_id: responder,
        details: Some(details),
        native: Some(native("exec_approval", ask.approval_id, ask.session_key)),
    }
}

/// Trimmed non-blank strings of one structured answer item (a list of
/// strings or one string).
fn answer_strings(item: &Value) -> Vec<String> {
    let item = match item {
        Value::Object(o) => o.get("answers").unwrap_or(&Value::Null),
        other => other,
    };
    let list: Vec<&Value> = match item {
        Value::Array(items) => items.iter().collect(),
        Value::String(_) => vec![item],
        _ => Vec::new(),
    };
    list.into_iter()
        .filter_map(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The text a submitted clarify resolves Hermes with
/// (runtime-control.md §6.4): a non-blank `value`; else the structured
/// `answers` (one question → `a, b`; several → one `id: a, b` line each);
/// else `value` as it is; else `choice.value` ∨ `choice.label`; else empty.
pub fn answer_text(result: &Map<String, Value>) -> String {
    if let Some(v) = result
        .get("value")
        .and_then(Value::as_str)
        .filter(|v| !v.trim().is_empty())
    {
        return v.to_owned();
    }
    if let Some(answers) = result.get("answers").and_then(Value::as_object) {
        let single = answers.len() == 1;
        let lines: Vec<String> = answers
            .iter()
            .filter_map(|(id, item)| {
                let strings = answer_strings(item);
                (!strings.is_empty()).then(|| {
                    let joined = strings.join(", ");
                    if single {
                        joined
                    } else {
                        format!("{id}: {joined}")
                    }
                })
            })
            .collect();
        if !lines.is_empty() {
            return lines.join("\n");
        }
    }
    if let Some(v) = result.get("value").and_then(Value::as_str) {
        return v.to_owned();
    }
    let choice = result.get("choice");
    ["value", "label"]
        .iter()
        .find_map(|key| {
            choice
                .and_then(|c| c.get(key))
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_default()
        .to_owned()
}

/// Hermes' choice for an answered approval (runtime-control.md §6.5,
/// canon-wire.md §9.3 and Q7b): `allow` from the expected human (the
/// requested responder, else the effective one Canon named, else the
/// owner; when none of them is known nobody is trusted) → `session` when
/// the effective session rule holds and the rule is `approve-all` or
/// `approve-tool`, else `once`; anything else → `deny`.
pub fn approval_choice(
    result: &Map<String, Value>,
    expected_responder: Option<&str>,
    allow_session_rule: bool,
) -> ApprovalChoice {
    if result.get("status").and_then(Value::as_str) != Some("allow") {
        return ApprovalChoice::Deny;
    }
    let responded_by = result
        .get("respondedBy")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|r| !r.is_empty());
    let trusted = match (responded_by, expected_responder) {
        (None, _) => false,
        (Some(by), Some(expected)) => by == expected,
        // Nobody known to expect (no responder requested, none echoed by Canon, no owner id):
        // an allow from anyone is not trusted (runtime-control.md §6.5, fail closed).
        (Some(_), None) => false,
    };
    if !trusted {
        return ApprovalChoice::Deny;
    }
    let rule = result
        .get("sessionRule")
        .and_then(|r| r.get("type"))
        .and_then(Value::as_str);
    if allow_session_rule && matches!(rule, Some("approve-all" | "approve-tool")) {
        ApprovalChoice::Session
    } else {
        ApprovalChoice::Once
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn timeouts_parse_default_and_clamp() {
        let secs = |raw: Option<&str>| timeout_from_env(raw).as_secs();
        assert_eq!(secs(None), 300);
        assert_eq!(secs(Some("bad")), 300);
        assert_eq!(secs(Some("12.5")), 300);
        assert_eq!(secs(Some(" 42 ")), 42);
        assert_eq!(secs(Some("1")), 5);
        assert_eq!(secs(Some("-3")), 5);
        assert_eq!(secs(Some("99999")), 1_800);
        let env = Duration::from_secs(300);
        assert_eq!(approval_timeout(env, None).as_secs(), 300);
        assert_eq!(approval_timeout(env, Some(60.0)).as_secs(), 60);
        assert_eq!(approval_timeout(env, Some(1.0)).as_secs(), 5);
        assert_eq!(approval_timeout(env, Some(0.0)).as_secs(), 300);
        assert_eq!(approval_timeout(env, Some(f64::NAN)).as_secs(), 300);
        assert_eq!(approval_timeout(env, Some(9e9)).as_secs(), 300);
    }

    #[test]
    fn choices_are_normalized() {
        let long = "x".repeat(500);
        let choices = normalize_choices(&[
            json!(" a "),
            json!({"text": "Bee", "value": "b"}),
            json!({"label": "", "text": "", "value": "only-value"}),
            json!({"label": "   "}),
            json!(""),
            json!(null),
            json!({"label": long.clone(), "value": long.clone()}),
        ])
        .expect("choices");
        let pairs: Vec<(usize, usize, &str)> = choices
            .iter()
            .map(|c| (c.label.chars().count(), c.value.chars().count(), &*c.label))
            .collect();
        assert_eq!(choices[0].label, "a");
        assert_eq!(choices[0].value, "a");
        assert_eq!(
            (choices[1].label.as_str(), choices[1].value.as_str()),
            ("Bee", "b")
        );
        assert_eq!(choices[2].label, "only-value");
        assert_eq!(choices[2].value, "only-value");
        assert_eq!((pairs[3].0, pairs[3].1), (160, 400));
        assert_eq!(choices.len(), 4);
        let many: Vec<Value> = (0..20).map(|i| json!(format!("c{i}"))).collect();
        assert_eq!(normalize_choices(&many).expect("some").len(), 12);
        assert_eq!(normalize_choices(&[]), None);
        assert_eq!(normalize_choices(&[json!(" ")]), None);
    }

    #[test]
    fn sudo_detection_follows_the_word_rule() {
        for yes in [
            "sudo rm -rf /",
            "/usr/bin/sudo ls",
            "x.sudo",
            "SUDO;ls",
            "\u{17F}udo ls",
            "echo hi && sudo(x)",
            "a|sudo",
        ] {
            assert!(is_sudo_command(yes), "{yes}");
        }
        for no in ["pseudo ls", "a-sudo", "sudo-x", "sudoers", "_sudo", "ls"] {
            assert!(!is_sudo_command(no), "{no}");
        }
    }

    #[test]
    fn answer_text_prefers_value_then_answers_then_choice() {
        assert_eq!(answer_text(&obj(json!({"value": "b"}))), "b");
        assert_eq!(
            answer_text(&obj(
                json!({"value": " ", "answers": {"q": {"answers": [" x ", "", "y"]}}})
            )),
            "x, y"
        );
        assert_eq!(
            answer_text(&obj(json!({"answers": {"q1": ["a"], "q2": "b", "q3": []}}))),
            "q1: a\nq2: b"
        );
        assert_eq!(answer_text(&obj(json!({"value": "  "}))), "  ");
        assert_eq!(
            answer_text(&obj(json!({"choice": {"value": " ", "label": "L"}}))),
            "L"
        );
        assert_eq!(answer_text(&obj(json!({"status": "submitted"}))), "");
    }

    #[test]
    fn approval_choice_maps_allow_and_checks_the_responder() {
        let allow = obj(json!({"status": "allow", "respondedBy": "u1",
                               "sessionRule": {"type": "approve-all"}}));
        assert_eq!(
            approval_choice(&allow, Some("u1"), true),
            ApprovalChoice::Session
        );
        assert_eq!(
            approval_choice(&allow, Some("u1"), false),
            ApprovalChoice::Once
        );
        assert_eq!(
            approval_choice(&allow, Some("u2"), true),
            ApprovalChoice::Deny
        );
        // No expected human known: an allow from anyone is denied (fail closed).
        assert_eq!(approval_choice(&allow, None, true), ApprovalChoice::Deny);
        let deny_tool = obj(json!({"status": "allow", "respondedBy": "u1",
                                   "sessionRule": {"type": "deny-tool"}}));
        assert_eq!(
            approval_choice(&deny_tool, Some("u1"), true),
            ApprovalChoice::Once
        );
        let anonymous = obj(json!({"status": "allow"}));
        assert_eq!(
            approval_choice(&anonymous, None, true),
            ApprovalChoice::Deny
        );
        for status in ["deny", "timeout", "pending", ""] {
            let r = obj(json!({"status": status, "respondedBy": "u1"}));
            assert_eq!(approval_choice(&r, Some("u1"), true), ApprovalChoice::Deny);
        }
    }

    #[test]
    fn approval_requests_apply_the_routing_rules() {
        let ask = |command: &'static str, responder: Option<&str>, smart: bool, session: bool| {
            approval_request(&ApprovalAsk {
                conversation_id: "c",
                approval_id: "hermes-0123456789abcdef0123",
                command,
                description: Some(""),
                responder: responder.map(str::to_owned),
                owner_id: Some("owner"),
                allow_session: session,
                smart_denied: smart,
                session_key: "k",
                expires_at: 1,
            })
        };
        let r = ask("ls", Some("u1"), false, true);
        assert_eq!(r.response_user_id.as_deref(), Some("u1"));
        assert!(!r.allow_session_rule);
        assert_eq!(r.tool_summary, EMPTY_SUMMARY);
        assert_eq!(r.details.as_ref().map(Vec::len), Some(2));
        let r = ask("sudo ls", Some("u1"), false, true);
        assert_eq!(r.response_user_id, None);
        assert!(r.allow_session_rule);
        let r = ask("ls", Some("owner"), false, true);
        assert!(r.allow_session_rule);
        let r = ask("ls", Some("owner"), false, false);
        assert!(!r.allow_session_rule);
        let r = ask("ls", Some("owner"), true, true);
        assert!(!r.allow_session_rule);
        let rows = r.details.expect("details");
        assert_eq!(rows[2].label, "Smart approval");
        assert_eq!(rows[2].value, SMART_DENIED_TEXT);
    }
}
