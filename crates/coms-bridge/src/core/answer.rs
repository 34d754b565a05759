//! Answer files (coms-bridge.md §6.8) and answer mapping (coms-bridge.md §6.9).
//!
//! An answer file is `<questions dir>/<qid>.answer.json` holding a JSON object with the string
//! keys `qid` (a valid ULID equal to the file name's), `answer` (any string), `answered_by`
//! (non-empty) and `at` (an ISO-8601 time, `wire::iso`); extra keys are ignored. Validation
//! checks, in this order, and the first failure wins: the suffix (`invalid_path`), the file
//! name's qid (`invalid_qid`), that the qid is pending (`foreign_qid`), JSON (`invalid_json`;
//! a leading BOM is invalid), the schema (`invalid_schema`), and the body qid (`qid_mismatch`).
//!
//! Mapping: the trimmed answer selects option n when it is ASCII digits with value 1…n (leading
//! zeros allowed), else the first option whose title equals it case-insensitively, else it is
//! free text.

use serde::Serialize;
use serde_json::Value;

use crate::core::question::QuestionOption;
use crate::core::text::js_trim;
use crate::wire::ids::is_ulid;
use crate::wire::iso;

/// The suffix of an answer file.
pub const ANSWER_SUFFIX: &str = ".answer.json";

/// Why an answer file was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The name does not end with `.answer.json`.
    InvalidPath,
    /// The name's qid is not a ULID.
    InvalidQid,
    /// The qid is not pending here.
    ForeignQid,
    /// The content is not JSON.
    InvalidJson,
    /// The content is not an object of the schema.
    InvalidSchema,
    /// The body qid differs from the name's.
    QidMismatch,
}

impl Reason {
    /// The reason as the log writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidPath => "invalid_path",
            Reason::InvalidQid => "invalid_qid",
            Reason::ForeignQid => "foreign_qid",
            Reason::InvalidJson => "invalid_json",
            Reason::InvalidSchema => "invalid_schema",
            Reason::QidMismatch => "qid_mismatch",
        }
    }
}

/// A rejected answer file: the reason and the qid it reports (the file name's, from the third
/// check on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Why.
    pub reason: Reason,
    /// The file name's qid, when the check got that far.
    pub qid: Option<String>,
}

/// A valid answer file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerFile {
    /// The qid.
    pub qid: String,
    /// The human's answer.
    pub answer: String,
    /// Who answered (`telegram:<user>` by convention).
    pub answered_by: String,
    /// When.
    pub at: String,
}

impl AnswerFile {
    /// The four schema keys as a JSON object.
    pub fn to_value(&self) -> Value {
        serde_json::json!({
            "qid": self.qid,
            "answer": self.answer,
            "answered_by": self.answered_by,
            "at": self.at,
        })
    }
}

/// The qid of an answer file name: `Some` when it ends with the suffix and the rest is a ULID.
pub fn qid_of_file_name(name: &str) -> Option<&str> {
    name.strip_suffix(ANSWER_SUFFIX).filter(|q| is_ulid(q))
}

/// Whether the bridge needs the bytes of the questions-directory entry `name` to decide about
/// it: only for an answer file whose qid is pending. Every other name is decided by the name
/// alone (a dot name is never touched; a name that is not `<ulid>.answer.json` fails the first
/// two checks of [`validate_answer_file`]; a qid that is not pending is a late answer or fails the
/// third), so the daemon opens nothing else.
pub fn content_needed(name: &str, is_pending: impl Fn(&str) -> bool) -> bool {
    !name.starts_with('.') && qid_of_file_name(name).is_some_and(is_pending)
}

/// Validates the answer file `name` with `content` against the pending qids.
pub fn validate_answer_file(
    name: &str,
    content: &[u8],
    is_pending: impl Fn(&str) -> bool,
) -> Result<AnswerFile, Rejection> {
    let reject = |reason, qid: Option<&str>| Rejection {
        reason,
        qid: qid.map(str::to_owned),
    };
    let Some(stem) = name.strip_suffix(ANSWER_SUFFIX) else {
        return Err(reject(Reason::InvalidPath, None));
    };
    if !is_ulid(stem) {
        return Err(reject(Reason::InvalidQid, None));
    }
    let qid = Some(stem);
    if !is_pending(stem) {
        return Err(reject(Reason::ForeignQid, qid));
    }
    let value: Value =
        serde_json::from_slice(content).map_err(|_| reject(Reason::InvalidJson, qid))?;
    let text = |key: &str| value.get(key).and_then(Value::as_str);
    let (Some(body_qid), Some(answer), Some(answered_by), Some(at)) =
        (text("qid"), text("answer"), text("answered_by"), text("at"))
    else {
        return Err(reject(Reason::InvalidSchema, qid));
    };
    if !is_ulid(body_qid) || answered_by.is_empty() || iso::parse_ms(at).is_none() {
        return Err(reject(Reason::InvalidSchema, qid));
    }
    if body_qid != stem {
        return Err(reject(Reason::QidMismatch, qid));
    }
    Ok(AnswerFile {
        qid: stem.to_owned(),
        answer: answer.to_owned(),
        answered_by: answered_by.to_owned(),
        at: at.to_owned(),
    })
}

/// The `ask_user`-style response the asking peer receives (its wrapper switches on `kind`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum AskResponse {
    /// One chosen option, by title.
    Selection {
        /// The chosen titles (always one).
        selections: Vec<String>,
    },
    /// Free text.
    Freeform {
        /// The trimmed answer.
        text: String,
    },
}

impl AskResponse {
    /// The response as JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a tagged enum of strings serializes")
    }
}

/// Maps an answer onto the question's options (coms-bridge.md §6.9).
pub fn map_answer(answer: &str, options: &[QuestionOption]) -> AskResponse {
    let text = js_trim(answer);
    let select = |option: &QuestionOption| AskResponse::Selection {
        selections: vec![option.title.clone()],
    };
    if !options.is_empty() && !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let digits = text.trim_start_matches('0');
        let index = if digits.len() > 6 {
            None
        } else {
            digits.parse::<usize>().ok()
        };
        if let Some(n) = index.filter(|n| (1..=options.len()).contains(n)) {
            return select(&options[n - 1]);
        }
    }
    let lower = text.to_lowercase();
    if let Some(option) = options.iter().find(|o| o.title.to_lowercase() == lower) {
        return select(option);
    }
    AskResponse::Freeform {
        text: text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const QID: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
    const OTHER: &str = "01BX5ZZKBKACTAV9WEVGEMMVRZ";

    fn file(body: &Value) -> Vec<u8> {
        body.to_string().into_bytes()
    }

    fn valid_body() -> Value {
        json!({"qid": QID, "answer": "Yes", "answered_by": "telegram:ann", "at": "2026-07-08T12:34:56.000Z"})
    }

    fn check(name: &str, content: &[u8]) -> Result<AnswerFile, (Reason, Option<String>)> {
        validate_answer_file(name, content, |q| q == QID).map_err(|r| (r.reason, r.qid))
    }

    fn name() -> String {
        format!("{QID}.answer.json")
    }

    #[test]
    fn a_valid_file_has_exactly_the_four_keys() {
        let mut body = valid_body();
        body["extra"] = json!(true);
        let answer = check(&name(), &file(&body)).expect("valid");
        assert_eq!(answer.to_value(), valid_body());
        let keys: Vec<_> = answer
            .to_value()
            .as_object()
            .expect("object")
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["qid", "answer", "answered_by", "at"]);
    }

    #[test]
    fn rejections_in_order() {
        let qid = || Some(QID.to_owned());
        assert_eq!(
            check("not-an-answer.json", b"{}"),
            Err((Reason::InvalidPath, None))
        );
        assert_eq!(
            check(&format!("{QID}.answer.json.tmp"), b"{}"),
            Err((Reason::InvalidPath, None))
        );
        assert_eq!(
            check(".hermes-tmp.abc123", b"{}"),
            Err((Reason::InvalidPath, None))
        );
        assert_eq!(
            check("not-a-ulid.answer.json", b"{}"),
            Err((Reason::InvalidQid, None))
        );
        assert_eq!(
            check(&format!("{}.answer.json", QID.to_lowercase()), b"{}"),
            Err((Reason::InvalidQid, None))
        );
        assert_eq!(
            check(&format!("{OTHER}.answer.json"), b"garbage"),
            Err((Reason::ForeignQid, Some(OTHER.to_owned())))
        );
        assert_eq!(check(&name(), b"{"), Err((Reason::InvalidJson, qid())));
        let mut bom = b"\xEF\xBB\xBF".to_vec();
        bom.extend(file(&valid_body()));
        assert_eq!(check(&name(), &bom), Err((Reason::InvalidJson, qid())));
        assert_eq!(
            check(&name(), &file(&json!({"qid": QID, "answer": "x"}))),
            Err((Reason::InvalidSchema, qid()))
        );
        let mismatched =
            json!({"qid": OTHER, "answer": "x", "answered_by": "t", "at": "2026-07-08"});
        assert_eq!(
            check(&name(), &file(&mismatched)),
            Err((Reason::QidMismatch, qid()))
        );
    }

    #[test]
    fn only_a_pending_answer_file_is_read() {
        let pending = |q: &str| q == QID;
        assert!(content_needed(&name(), pending));
        for name in [
            format!("{OTHER}.answer.json"),
            format!(".{QID}.answer.json"),
            format!("{QID}.answer.json.tmp"),
            QID.to_owned(),
            "not-an-answer.json".to_owned(),
            ".hermes-tmp.abc123".to_owned(),
        ] {
            assert!(!content_needed(&name, pending), "{name}");
        }
    }

    #[test]
    fn schema_details() {
        let with = |key: &str, value: Value| {
            let mut body = valid_body();
            body[key] = value;
            check(&name(), &file(&body)).map(|_| ()).map_err(|e| e.0)
        };
        assert_eq!(with("answer", json!("")), Ok(()));
        assert_eq!(with("answered_by", json!("")), Err(Reason::InvalidSchema));
        assert_eq!(with("at", json!("nope")), Err(Reason::InvalidSchema));
        assert_eq!(
            with("at", json!("July 8, 2026")),
            Err(Reason::InvalidSchema),
            "DEVIATION"
        );
        assert_eq!(with("at", json!("2026-07-08")), Ok(()));
        assert_eq!(
            with("qid", json!(QID.to_lowercase())),
            Err(Reason::InvalidSchema)
        );
        assert_eq!(with("answer", json!(5)), Err(Reason::InvalidSchema));
        for not_an_object in ["[]", "null", "\"x\"", "5"] {
            assert_eq!(
                check(&name(), not_an_object.as_bytes()).map_err(|e| e.0),
                Err(Reason::InvalidSchema)
            );
        }
    }

    fn options(titles: &[&str]) -> Vec<QuestionOption> {
        titles
            .iter()
            .map(|t| QuestionOption {
                title: (*t).into(),
                description: None,
            })
            .collect()
    }

    fn selection(title: &str) -> AskResponse {
        AskResponse::Selection {
            selections: vec![title.into()],
        }
    }

    fn freeform(text: &str) -> AskResponse {
        AskResponse::Freeform { text: text.into() }
    }

    #[test]
    fn mapping() {
        let ship = options(&["Approve", "Revise", "Stop"]);
        assert_eq!(map_answer("Let me think", &ship), freeform("Let me think"));
        assert_eq!(map_answer("2", &ship), selection("Revise"));
        assert_eq!(map_answer("approve", &ship), selection("Approve"));
        assert_eq!(map_answer("4", &ship), freeform("4"));
        assert_eq!(map_answer(" 01 ", &ship), selection("Approve"));
        assert_eq!(map_answer("0", &ship), freeform("0"));
        assert_eq!(map_answer("Approve ", &ship), selection("Approve"));
        assert_eq!(map_answer("APPROVE", &ship), selection("Approve"));
        assert_eq!(map_answer("", &ship), freeform(""));
        assert_eq!(map_answer("  hello  ", &ship), freeform("hello"));
        for unchanged in ["1.0", "+1", "١", "99999999999999999999999"] {
            assert_eq!(map_answer(unchanged, &ship), freeform(unchanged));
        }
        assert_eq!(
            map_answer("00000000000000000001", &ship),
            selection("Approve")
        );
        // The number rule comes before the title rule.
        assert_eq!(map_answer("2", &options(&["A", "2"])), selection("2"));
        assert_eq!(map_answer("2", &options(&["A", "B", "C"])), selection("B"));
        assert_eq!(map_answer("1", &[]), freeform("1"));
        assert_eq!(
            selection("Approve").to_value().to_string(),
            r#"{"kind":"selection","selections":["Approve"]}"#
        );
        assert_eq!(
            freeform("Yes").to_value().to_string(),
            r#"{"kind":"freeform","text":"Yes"}"#
        );
    }

    proptest! {
        #[test]
        fn validation_never_panics(name in "\\PC{0,40}", content in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = validate_answer_file(&name, &content, |_| true);
        }

        #[test]
        fn only_needed_content_can_change_the_verdict(
            name in prop_oneof![
                "\\PC{0,40}",
                Just(format!("{QID}.answer.json")),
                Just(format!("{OTHER}.answer.json")),
                Just(format!(".{QID}.answer.json")),
            ],
            content in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let pending = |q: &str| q == QID;
            if !content_needed(&name, pending) {
                prop_assert_eq!(
                    validate_answer_file(&name, &content, pending),
                    validate_answer_file(&name, b"", pending)
                );
            }
        }

        #[test]
        fn in_range_numbers_select(n in 1usize..=3, zeros in 0usize..4, pad in "[ \\t\\n]{0,3}") {
            let ship = options(&["Approve", "Revise", "Stop"]);
            let answer = format!("{pad}{}{n}{pad}", "0".repeat(zeros));
            prop_assert_eq!(map_answer(&answer, &ship), selection(&ship[n - 1].title));
        }

        #[test]
        fn freeform_text_is_the_trimmed_answer(answer in "\\PC{0,40}") {
            match map_answer(&answer, &[]) {
                AskResponse::Freeform { text } => prop_assert_eq!(text, js_trim(&answer)),
                AskResponse::Selection { .. } => prop_assert!(false, "no options, no selection"),
            }
        }
    }
}
