//! What the `dev` chat shows, as pure functions of Canon's JSON: the live bubble as appended
//! text, activity blocks as one line each, cards as text with numbered actions, and the
//! questions the agent asks (exec approvals, clarify questions, card requests) with the answer
//! the person types turned into the answer Canon records. No terminal and no I/O here, so every
//! rule has a unit test.

use serde_json::Value;

/// How the live bubble changed since the last look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LiveChange {
    /// Nothing new.
    None,
    /// The text grew: print this suffix after what is on screen.
    Append(String),
    /// The text was replaced (the bubble was blanked or rewritten): print it again on a new line.
    Restart(String),
}

/// The live bubble's text as far as it is on screen.
#[derive(Debug, Default)]
pub(crate) struct LiveText {
    shown: String,
}

/// Hermes' streaming cursor, which it appends to every live edit of the bubble.
const CURSOR: char = '▉';

/// The part of a live bubble's text worth drawing in a terminal: without the blank lines Hermes
/// puts before a segment that follows a tool call, and without its trailing cursor.
pub(crate) fn live_display(text: &str) -> &str {
    text.trim_start_matches(['\n', '\r'])
        .trim_end()
        .trim_end_matches(CURSOR)
        .trim_end()
}

impl LiveText {
    /// Compares Canon's whole accumulated text with what is shown and says what to print.
    pub(crate) fn update(&mut self, text: &str) -> LiveChange {
        let text = live_display(text);
        if text == self.shown {
            return LiveChange::None;
        }
        let change = match text.strip_prefix(self.shown.as_str()) {
            Some(suffix) => LiveChange::Append(suffix.to_owned()),
            None if text.is_empty() => LiveChange::None,
            None => LiveChange::Restart(text.to_owned()),
        };
        self.shown = text.to_owned();
        change
    }

    /// What is on screen.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// Forgets the text (a new turn starts a new bubble).
    pub(crate) fn reset(&mut self) {
        self.shown.clear();
    }
}

fn str_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// One activity block (turns.md §5: `kind`, `title`, `status`, `summary`, `text`) as one line,
/// or `None` for a speech block (`kind: text`), whose words the live bubble shows already.
pub(crate) fn activity_line(block: &Value) -> Option<String> {
    let kind = str_of(block, "kind").unwrap_or("status");
    if kind == "text" {
        return None;
    }
    let title = str_of(block, "title").unwrap_or(kind);
    let mut state: Vec<&str> = Vec::new();
    state.extend(str_of(block, "status"));
    state.extend(str_of(block, "summary"));
    let mut line = format!("⚙ {title}");
    if !state.is_empty() {
        line.push_str(&format!(" ({})", state.join(", ")));
    }
    if let Some(text) = str_of(block, "text") {
        line.push_str(": ");
        line.push_str(&one_line(text, 100));
    }
    Some(line)
}

/// The words of a finished speech block (`kind: text`, `status: completed`), as drawn.
pub(crate) fn finished_speech(block: &Value) -> Option<&str> {
    (str_of(block, "kind") == Some("text") && str_of(block, "status") == Some("completed"))
        .then(|| block.get("text").and_then(Value::as_str).map(live_display))
        .flatten()
        .filter(|t| !t.is_empty())
}

/// The key that tells one state of an activity block from another.
pub(crate) fn activity_key(block: &Value) -> String {
    format!(
        "{}|{}",
        str_of(block, "id").unwrap_or(""),
        str_of(block, "status").unwrap_or("")
    )
}

/// `text` on one line, cut to `max` characters with `…`.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// A `canon.card.v1` card as text lines: the title, each block by kind, and the actions
/// numbered from 1 (the number the person types to choose one). A card with no readable block
/// shows its `fallbackText`.
pub(crate) fn card_lines(card: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(title) = str_of(card, "title") {
        lines.push(format!("▣ {title}"));
    }
    if let Some(subtitle) = str_of(card, "subtitle") {
        lines.push(format!("  {subtitle}"));
    }
    let before = lines.len();
    for block in card
        .get("blocks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        block_lines(block, &mut lines);
    }
    if lines.len() == before {
        if let Some(fallback) = str_of(card, "fallbackText") {
            lines.push(format!("  {fallback}"));
        }
    }
    for (n, action) in card_actions(card).iter().enumerate() {
        lines.push(format!("  [{}] {}", n + 1, action.1));
    }
    lines
}

fn block_lines(block: &Value, lines: &mut Vec<String>) {
    let kind = str_of(block, "kind").unwrap_or("");
    if let Some(title) = str_of(block, "title") {
        lines.push(format!("  {title}"));
    }
    if let Some(text) = str_of(block, "text").or_else(|| str_of(block, "body")) {
        lines.push(format!("  {text}"));
    }
    let items = |key: &str| {
        block
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    match kind {
        "metricGrid" => {
            for metric in items("metrics") {
                let label = str_of(&metric, "label").unwrap_or("");
                let value = scalar(metric.get("value"));
                lines.push(format!("  • {label}: {value}"));
            }
        }
        "list" => {
            for item in items("items") {
                let title = str_of(&item, "label")
                    .or_else(|| str_of(&item, "title"))
                    .unwrap_or("");
                match str_of(&item, "status") {
                    Some(status) => lines.push(format!("  • {title} ({status})")),
                    None => lines.push(format!("  • {title}")),
                }
            }
        }
        "details" => {
            for row in items("rows") {
                let label = str_of(&row, "label").unwrap_or("");
                lines.push(format!("  {label}: {}", scalar(row.get("value"))));
            }
        }
        "table" => {
            let columns: Vec<String> = items("columns")
                .iter()
                .map(|c| {
                    str_of(c, "label")
                        .or_else(|| c.as_str())
                        .unwrap_or("")
                        .to_owned()
                })
                .collect();
            if !columns.is_empty() {
                lines.push(format!("  {}", columns.join(" | ")));
            }
            for row in items("rows") {
                let cells: Vec<String> = match &row {
                    Value::Array(cells) => cells.iter().map(|c| scalar(Some(c))).collect(),
                    Value::Object(_) => row
                        .get("cells")
                        .and_then(Value::as_array)
                        .map(|cells| cells.iter().map(|c| scalar(Some(c))).collect())
                        .unwrap_or_default(),
                    other => vec![scalar(Some(other))],
                };
                lines.push(format!("  {}", cells.join(" | ")));
            }
        }
        "chart" => lines.push("  (chart)".to_owned()),
        "mediaPreview" => {
            for media in items("media") {
                let name = str_of(&media, "name")
                    .or_else(|| str_of(&media, "title"))
                    .unwrap_or("media");
                lines.push(format!("  [media] {name}"));
            }
        }
        _ => {}
    }
}

/// A JSON scalar as display text (strings without quotes).
fn scalar(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The card's actions in order, as (id, label).
pub(crate) fn card_actions(card: &Value) -> Vec<(String, String)> {
    card.get("blocks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|block| str_of(block, "kind") == Some("actions"))
        .flat_map(|block| {
            block
                .get("actions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|action| {
            let id = str_of(&action, "id")?.to_owned();
            let label = str_of(&action, "label").unwrap_or(&id).to_owned();
            Some((id, label))
        })
        .collect()
}

/// A question the agent is waiting on, as the chat shows it and answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Question {
    /// An exec approval (`approval`): allow or deny.
    Approval,
    /// A clarify or input question (`input`): one of the choices, or free text.
    Input {
        /// The choices' values, in the order they are numbered.
        choices: Vec<String>,
    },
    /// A card request (`card`): one of the card's actions.
    Card {
        /// The action ids, in the order they are numbered.
        actions: Vec<String>,
    },
}

/// The answer typed to a [`Question`], in the shape Canon records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// `allow` or `deny`.
    Decision(&'static str),
    /// The input's value.
    Value(String),
    /// The card action's id.
    Action(String),
}

impl Question {
    /// The question for an interaction of `kind` with the request Canon stored.
    pub(crate) fn of(kind: &str, request: &Value) -> Option<Question> {
        match kind {
            "approval" => Some(Question::Approval),
            "input" => Some(Question::Input {
                choices: request
                    .get("choices")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| {
                        str_of(c, "value")
                            .or_else(|| str_of(c, "label"))
                            .or_else(|| c.as_str())
                            .map(str::to_owned)
                    })
                    .collect(),
            }),
            "card" => Some(Question::Card {
                actions: request
                    .get("card")
                    .map(card_actions)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(id, _)| id)
                    .collect(),
            }),
            _ => None,
        }
    }

    /// The lines that show the question, before the answer prompt.
    pub(crate) fn lines(&self, request: &Value) -> Vec<String> {
        let mut lines = Vec::new();
        match self {
            Question::Approval => {
                let tool = str_of(request, "toolName").unwrap_or("A tool");
                lines.push(format!("⚠ Approval needed: {tool}"));
                for detail in request
                    .get("details")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let label = str_of(detail, "label").unwrap_or("");
                    lines.push(format!("  {label}: {}", scalar(detail.get("value"))));
                }
            }
            Question::Input { choices } => {
                let title = str_of(request, "title").unwrap_or("Question");
                lines.push(format!("? {title}"));
                if let Some(prompt) = str_of(request, "prompt") {
                    lines.push(format!("  {prompt}"));
                }
                for (n, choice) in choices.iter().enumerate() {
                    lines.push(format!("  [{}] {choice}", n + 1));
                }
            }
            Question::Card { .. } => {
                lines.push("? The agent asks you to fill in a card".to_owned());
                if let Some(card) = request.get("card") {
                    lines.extend(card_lines(card));
                }
            }
        }
        lines
    }

    /// The prompt shown while the question waits for an answer.
    pub(crate) fn prompt(&self) -> String {
        match self {
            Question::Approval => "allow? [y/n] › ".to_owned(),
            Question::Input { choices } if choices.is_empty() => "answer › ".to_owned(),
            Question::Input { choices } => {
                format!("answer [1-{}] or type › ", choices.len())
            }
            Question::Card { actions } => format!("action [1-{}] › ", actions.len().max(1)),
        }
    }

    /// The answer `line` gives, or why it gives none (the chat says so and asks again).
    pub(crate) fn answer(&self, line: &str) -> Result<Answer, String> {
        let line = line.trim();
        match self {
            Question::Approval => match line.to_lowercase().as_str() {
                "y" | "yes" | "allow" | "a" | "approve" => Ok(Answer::Decision("allow")),
                "n" | "no" | "deny" | "d" => Ok(Answer::Decision("deny")),
                _ => Err("type y to allow or n to deny".to_owned()),
            },
            Question::Input { choices } => {
                if line.is_empty() {
                    return Err("type an answer".to_owned());
                }
                match line.parse::<usize>() {
                    Ok(n) if (1..=choices.len()).contains(&n) => {
                        Ok(Answer::Value(choices[n - 1].clone()))
                    }
                    _ => Ok(Answer::Value(line.to_owned())),
                }
            }
            Question::Card { actions } => match line.parse::<usize>() {
                Ok(n) if (1..=actions.len()).contains(&n) => {
                    Ok(Answer::Action(actions[n - 1].clone()))
                }
                _ => actions
                    .iter()
                    .find(|id| id.as_str() == line)
                    .map(|id| Answer::Action(id.clone()))
                    .ok_or_else(|| format!("type a number from 1 to {}", actions.len())),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn live_text_appends_growth_and_restarts_on_rewrite() {
        let mut live = LiveText::default();
        assert_eq!(live.update("Hello"), LiveChange::Append("Hello".into()));
        assert_eq!(live.update("Hello"), LiveChange::None);
        assert_eq!(
            live.update("Hello world"),
            LiveChange::Append(" world".into())
        );
        assert_eq!(live.update("Bye"), LiveChange::Restart("Bye".into()));
        // A blanked bubble prints nothing; what comes next starts over.
        assert_eq!(live.update(""), LiveChange::None);
        assert_eq!(live.update("Again"), LiveChange::Append("Again".into()));
        live.reset();
        assert_eq!(live.shown(), "");
    }

    #[test]
    fn the_live_bubble_is_drawn_without_hermes_cursor_and_leading_blank_lines() {
        assert_eq!(live_display("\n\nThe tool said ▉"), "The tool said");
        assert_eq!(live_display("Done."), "Done.");
        let mut live = LiveText::default();
        assert_eq!(live.update("Hello ▉"), LiveChange::Append("Hello".into()));
        assert_eq!(
            live.update("Hello world ▉"),
            LiveChange::Append(" world".into())
        );
        assert_eq!(live.update("Hello world"), LiveChange::None);
    }

    #[test]
    fn an_activity_block_is_one_line() {
        let block = json!({"id": "b1", "kind": "tool", "status": "completed",
                           "title": "terminal", "summary": "73 ms", "text": "echo   hi\nthere"});
        assert_eq!(
            activity_line(&block).as_deref(),
            Some("⚙ terminal (completed, 73 ms): echo hi there")
        );
        assert_eq!(activity_line(&json!({})).as_deref(), Some("⚙ status"));
        assert_eq!(
            activity_line(&json!({"kind": "text", "text": "words"})),
            None
        );
        assert_ne!(
            activity_key(&block),
            activity_key(&json!({"id": "b1", "status": "done"}))
        );
    }

    #[test]
    fn a_card_renders_blocks_and_numbered_actions() {
        let card = json!({
        "schema": "canon.card.v1", "title": "Deploy", "fallbackText": "Deploy card",
        "blocks": [
            {"kind": "summary", "title": "Release 1.2", "text": "Ready to ship"},
            {"kind": "metricGrid", "metrics": [{"label": "Tests", "value": 863}]},
            {"kind": "list", "items": [{"label": "Build", "status": "done"}]},
            {"kind": "details", "rows": [{"label": "Branch", "value": "main"}]},
            {"kind": "actions", "actions": [{"id": "ship", "label": "Ship it"},
                                            {"id": "hold", "label": "Hold"}]}
        ]});
        assert_eq!(
            card_lines(&card),
            vec![
                "▣ Deploy",
                "  Release 1.2",
                "  Ready to ship",
                "  • Tests: 863",
                "  • Build (done)",
                "  Branch: main",
                "  [1] Ship it",
                "  [2] Hold",
            ]
        );
        let bare = json!({"title": "T", "fallbackText": "Only text", "blocks": []});
        assert_eq!(card_lines(&bare), vec!["▣ T", "  Only text"]);
    }

    #[test]
    fn approvals_take_yes_or_no() {
        let q = Question::of("approval", &json!({})).unwrap();
        assert_eq!(q.answer(" Y "), Ok(Answer::Decision("allow")));
        assert_eq!(q.answer("deny"), Ok(Answer::Decision("deny")));
        assert!(q.answer("maybe").is_err());
        let lines = q.lines(&json!({"toolName": "Command",
            "details": [{"label": "Command", "value": "rm -rf /tmp/x"}]}));
        assert_eq!(
            lines,
            vec!["⚠ Approval needed: Command", "  Command: rm -rf /tmp/x"]
        );
    }

    #[test]
    fn inputs_take_a_choice_number_or_free_text() {
        let request = json!({"title": "Clarification needed", "prompt": "Which colour?",
            "choices": [{"label": "Red", "value": "red"}, {"label": "Blue", "value": "blue"}]});
        let q = Question::of("input", &request).unwrap();
        assert_eq!(q.answer("2"), Ok(Answer::Value("blue".into())));
        assert_eq!(q.answer("green"), Ok(Answer::Value("green".into())));
        assert_eq!(q.answer("3"), Ok(Answer::Value("3".into())));
        assert!(q.answer("  ").is_err());
        assert_eq!(q.prompt(), "answer [1-2] or type › ");
        assert_eq!(q.lines(&request)[2], "  [1] red");
    }

    #[test]
    fn card_requests_take_an_action_number_or_id() {
        let request = json!({"card": {"title": "Pick", "blocks": [
            {"kind": "actions", "actions": [{"id": "a", "label": "A"}, {"id": "b", "label": "B"}]}]}});
        let q = Question::of("card", &request).unwrap();
        assert_eq!(q.answer("2"), Ok(Answer::Action("b".into())));
        assert_eq!(q.answer("a"), Ok(Answer::Action("a".into())));
        assert!(q.answer("9").is_err());
        assert_eq!(Question::of("other", &request), None);
    }
}
