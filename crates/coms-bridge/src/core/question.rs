//! Questions: the qid rule (coms-bridge.md §6.2), the prompt payload (coms-bridge.md §6.4) and
//! the Telegram question text (coms-bridge.md §6.6).
//!
//! The text is built from these pieces, measured in UTF-16 code units and capped at
//! [`TELEGRAM_LIMIT`]:
//!
//! ```text
//! ❓ [HUB-Q:<qid>] <question>
//!
//! 📁 Project: <project>
//!
//! Context: <context>            (only when there is a context)
//!
//! Options:                      (only when there are options)
//! 1. <title> — <description>
//! 2. <title>
//!
//! ↩ Reply to this message, or type: HUB-Q:<qid>: <answer>
//! ```
//!
//! Only the context is shrunk to make room; a very long question pushes the rest out and the
//! whole text ends in `…`, keeping the `[HUB-Q:<qid>]` marker the liaison needs.

use serde_json::Value;

use crate::core::text::{collapse_whitespace, neutralise_directives, truncate_utf16, utf16_len};
use crate::wire::ids::is_ulid;

/// The error response for a prompt whose `msg_id` is not a qid.
pub const QID_ERROR: &str = "prompt msg_id must be a 26-character Crockford ULID qid";

/// Telegram's message limit in UTF-16 code units.
pub const TELEGRAM_LIMIT: usize = 4096;

/// The limit of the project shown in a question, in UTF-16 code units.
pub const PROJECT_LIMIT: usize = 128;

/// A `msg_id` that is not a qid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{QID_ERROR}")]
pub struct QidError;

/// The qid of a prompt: exactly its `msg_id`, which must match `^[0-9A-HJKMNP-TV-Z]{26}$`.
/// Nothing else (no conversation id, no id inside the payload) is ever the correlation key.
pub fn qid_of(msg_id: &str) -> Result<&str, QidError> {
    if is_ulid(msg_id) {
        Ok(msg_id)
    } else {
        Err(QidError)
    }
}

/// One answer option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionOption {
    /// The title, as written.
    pub title: String,
    /// An optional description.
    pub description: Option<String>,
}

/// A parsed prompt payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The question, verbatim.
    pub question: String,
    /// The context, when it has a non-whitespace character (kept untrimmed).
    pub context: Option<String>,
    /// The options, in order.
    pub options: Vec<QuestionOption>,
}

/// Parses a prompt: a JSON object with a string `question` (ask-user-remote's payload), or plain
/// text, whose context is then `From <sender_name> @ <sender_cwd>` (`unknown` for a missing one).
pub fn parse_payload(
    prompt: &str,
    sender_name: Option<&str>,
    sender_cwd: Option<&str>,
) -> Question {
    let parsed: Option<Value> = serde_json::from_str(prompt).ok();
    if let Some(question) = parsed
        .as_ref()
        .and_then(|v| v.get("question"))
        .and_then(Value::as_str)
    {
        let payload = parsed.as_ref().expect("a question implies an object");
        let context = payload
            .get("context")
            .and_then(Value::as_str)
            .filter(|c| !crate::core::text::js_trim(c).is_empty())
            .map(str::to_owned);
        let options = payload
            .get("options")
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(option_of).collect())
            .unwrap_or_default();
        return Question {
            question: question.to_owned(),
            context,
            options,
        };
    }
    Question {
        question: prompt.to_owned(),
        context: Some(format!(
            "From {} @ {}",
            sender_name.unwrap_or("unknown"),
            sender_cwd.unwrap_or("unknown")
        )),
        options: Vec::new(),
    }
}

fn option_of(item: &Value) -> Option<QuestionOption> {
    if let Some(title) = item.as_str() {
        return Some(QuestionOption {
            title: title.to_owned(),
            description: None,
        });
    }
    Some(QuestionOption {
        title: item.get("title")?.as_str()?.to_owned(),
        description: item
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// The Telegram text of a question (coms-bridge.md §6.6), with peer-supplied text neutralised.
pub fn format_question(qid: &str, project: &str, question: &Question) -> String {
    let project = match collapse_whitespace(project) {
        p if p.is_empty() => "default".to_owned(),
        p => truncate_utf16(&p, PROJECT_LIMIT),
    };
    let header = format!(
        "❓ [HUB-Q:{qid}] {}",
        neutralise_directives(&question.question)
    );
    let project_block = format!("\n\n📁 Project: {project}");
    let context = question
        .context
        .as_deref()
        .filter(|c| !c.is_empty())
        .map(neutralise_directives);
    let context_prefix = if context.is_some() {
        "\n\nContext: "
    } else {
        ""
    };
    let options_block = if question.options.is_empty() {
        String::new()
    } else {
        let lines: Vec<String> = question
            .options
            .iter()
            .enumerate()
            .map(|(i, option)| {
                let title = neutralise_directives(&option.title);
                match option.description.as_deref().filter(|d| !d.is_empty()) {
                    Some(d) => format!("{}. {title} — {}", i + 1, neutralise_directives(d)),
                    None => format!("{}. {title}", i + 1),
                }
            })
            .collect();
        format!("\n\nOptions:\n{}", lines.join("\n"))
    };
    let instruction = format!("\n\n↩ Reply to this message, or type: HUB-Q:{qid}: <answer>");
    let fixed = utf16_len(&header)
        + utf16_len(&project_block)
        + utf16_len(context_prefix)
        + utf16_len(&options_block)
        + utf16_len(&instruction);
    let budget = TELEGRAM_LIMIT.saturating_sub(fixed);
    let context = context
        .map(|c| truncate_utf16(&c, budget))
        .unwrap_or_default();
    let text =
        format!("{header}{project_block}{context_prefix}{context}{options_block}{instruction}");
    truncate_utf16(&text, TELEGRAM_LIMIT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const QID: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";

    fn ship_options() -> Vec<QuestionOption> {
        let option = |title: &str, description: Option<&str>| QuestionOption {
            title: title.into(),
            description: description.map(Into::into),
        };
        vec![
            option("Approve", Some("Ship it")),
            option("Revise", Some("Request changes")),
            option("Stop", None),
        ]
    }

    fn question(text: &str, context: Option<&str>) -> Question {
        Question {
            question: text.into(),
            context: context.map(Into::into),
            options: ship_options(),
        }
    }

    #[test]
    fn qid_comes_only_from_msg_id() {
        assert_eq!(qid_of(QID), Ok(QID));
        for bad in [
            "short",
            "01ARZ3NDEKTSV4RRFFQ69G5FAI",
            "01arz3ndektsv4rrffq69g5fav",
        ] {
            let error = qid_of(bad).expect_err(bad).to_string();
            assert!(error.contains("26-character Crockford ULID"), "{error}");
        }
        // Other ids in the payload never become the qid.
        let payload = json!({"question": "q", "qid": "01BX5ZZKBKACTAV9WEVGEMMVRZ", "msg_id": "x"});
        let parsed = parse_payload(&payload.to_string(), None, None);
        assert_eq!(parsed.question, "q");
        assert!(qid_of("01BX5ZZKBKACTAV9WEVGEMMVRZ").is_ok());
    }

    #[test]
    fn the_worked_example_is_exact() {
        let text = format_question(
            QID,
            "af",
            &question("Can we ship Phase 1?", Some("Build is green.")),
        );
        assert_eq!(
            text,
            "❓ [HUB-Q:01ARZ3NDEKTSV4RRFFQ69G5FAV] Can we ship Phase 1?\n\n📁 Project: af\n\nContext: Build is green.\n\nOptions:\n1. Approve — Ship it\n2. Revise — Request changes\n3. Stop\n\n↩ Reply to this message, or type: HUB-Q:01ARZ3NDEKTSV4RRFFQ69G5FAV: <answer>"
        );
        assert_eq!(utf16_len(&text), 244);
    }

    #[test]
    fn a_long_context_is_the_only_thing_shrunk() {
        let long = "x".repeat(10_000);
        let text = format_question(QID, "af", &question("Long context?", Some(&long)));
        assert_eq!(utf16_len(&text), 4096);
        assert!(text.starts_with("❓ [HUB-Q:01ARZ3NDEKTSV4RRFFQ69G5FAV] Long context?"));
        assert!(text.contains("\n\n📁 Project: af\n\nContext: "));
        assert!(text.contains(&format!(
            "Context: {}…\n\nOptions:\n1. Approve — Ship it",
            "x".repeat(3873)
        )));
        assert!(text.ends_with("HUB-Q:01ARZ3NDEKTSV4RRFFQ69G5FAV: <answer>"));
    }

    #[test]
    fn project_is_collapsed_defaulted_and_capped() {
        let shown = |project: &str| {
            let text = format_question(QID, project, &question("q", None));
            text.lines()
                .find_map(|l| l.strip_prefix("📁 Project: ").map(str::to_owned))
                .expect("project line")
        };
        assert_eq!(shown("  my \t proj\n x "), "my proj x");
        assert_eq!(shown("   "), "default");
        assert_eq!(shown(&"p".repeat(200)), format!("{}…", "p".repeat(127)));
    }

    #[test]
    fn a_very_long_question_keeps_the_marker() {
        let q = Question {
            question: "q".repeat(5000),
            context: Some("ctx".into()),
            options: Vec::new(),
        };
        let text = format_question(QID, "af", &q);
        assert_eq!(utf16_len(&text), 4096);
        assert!(text.ends_with("q…"));
        assert!(text.starts_with("❓ [HUB-Q:01ARZ3NDEKTSV4RRFFQ69G5FAV] qqq"));
    }

    #[test]
    fn context_and_options_are_optional() {
        let q = Question {
            question: "Plain?".into(),
            context: None,
            options: Vec::new(),
        };
        assert_eq!(
            format_question(QID, "af", &q),
            "❓ [HUB-Q:01ARZ3NDEKTSV4RRFFQ69G5FAV] Plain?\n\n📁 Project: af\n\n↩ Reply to this message, or type: HUB-Q:01ARZ3NDEKTSV4RRFFQ69G5FAV: <answer>"
        );
    }

    #[test]
    fn peer_text_is_neutralised_but_not_the_template() {
        let q = Question {
            question: "MEDIA:/etc/passwd".into(),
            context: Some("[[as_document]]".into()),
            options: vec![QuestionOption {
                title: "MEDIA :x".into(),
                description: Some("[[audio_as_voice]]".into()),
            }],
        };
        let text = format_question(QID, "af", &q);
        assert!(text.contains("] MEDIA\u{200B}:/etc/passwd"));
        assert!(text.contains("Context: [[\u{200B}as_document]]"));
        assert!(text.contains("1. MEDIA\u{200B} :x — [[\u{200B}audio_as_voice]]"));
    }

    #[test]
    fn payload_parsing() {
        let payload = json!({
            "question": "Ship?",
            "context": "  Build is green.  ",
            "options": ["A", {"title": "B", "description": "bee"}, {"title": "C", "description": 5}, 7, {"description": "no title"}, {"title": 3}],
        });
        let parsed = parse_payload(&payload.to_string(), Some("n"), Some("/c"));
        assert_eq!(parsed.question, "Ship?");
        assert_eq!(parsed.context.as_deref(), Some("  Build is green.  "));
        let titles: Vec<_> = parsed.options.iter().map(|o| o.title.as_str()).collect();
        assert_eq!(titles, ["A", "B", "C"]);
        assert_eq!(parsed.options[1].description.as_deref(), Some("bee"));
        assert_eq!(parsed.options[2].description, None);
        let blank = json!({"question": "q", "context": " \n ", "options": "nope"});
        let parsed = parse_payload(&blank.to_string(), None, None);
        assert_eq!(parsed.context, None);
        assert!(parsed.options.is_empty());

        let plain = parse_payload("Can you answer?", Some("claude-cli"), Some("/work"));
        assert_eq!(plain.question, "Can you answer?");
        assert_eq!(plain.context.as_deref(), Some("From claude-cli @ /work"));
        let not_a_question = parse_payload("{\"question\": 5}", None, None);
        assert_eq!(not_a_question.question, "{\"question\": 5}");
        assert_eq!(
            not_a_question.context.as_deref(),
            Some("From unknown @ unknown")
        );
    }

    proptest! {
        #[test]
        fn the_text_always_fits_and_keeps_its_header(
            text in "\\PC{0,300}",
            context in proptest::option::of("\\PC{0,300}"),
            project in "\\PC{0,40}",
            titles in proptest::collection::vec("\\PC{0,30}", 0..4),
            repeat in 1usize..30,
        ) {
            let q = Question {
                question: text.repeat(repeat),
                context: context.map(|c| c.repeat(repeat)),
                options: titles.into_iter().map(|t| QuestionOption { title: t, description: None }).collect(),
            };
            let out = format_question(QID, &project, &q);
            prop_assert!(utf16_len(&out) <= TELEGRAM_LIMIT);
            prop_assert!(out.starts_with("❓ [HUB-Q:01ARZ3NDEKTSV4RRFFQ69G5FAV] "));
            // A Rust string cannot hold a lone surrogate; re-encoding proves none was made.
            let units: Vec<u16> = out.encode_utf16().collect();
            prop_assert_eq!(String::from_utf16(&units).ok(), Some(out.clone()));
        }
    }
}
