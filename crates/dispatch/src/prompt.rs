//! Pure text pieces of the inbound path: the per-event channel prompt
//! (`turns.md` §9.4), the text a message contributes to a turn
//! (`inbound_text`, turns.md §9.1 step 8 and `canon-wire.md` §5.4.2 step 7),
//! and the chat name and type handed to Hermes (turns.md §9.1 step 11).
//!
//! Invariants: every function is total over arbitrary JSON; the prompt never
//! contains raw turn-context JSON, transport ids or protocol mechanics, only
//! the fixed clauses below plus the agent's own display name and two
//! integers.

use serde_json::Value;

use crate::json::{as_record, first_nonempty_str, is_truthy, str_field};

/// Prompt for an agent sender outside a group (turns.md §9.4).
pub const AGENT_SENDER_PROMPT: &str = "The sender is another agent. Continue only if this usefully advances the user-directed task; otherwise call `canon_runtime_control` with the `no_reply` action to stay silent. Avoid open-ended agent-only loops.";

/// Whether the conversation object says it is a group: its `type` is exactly
/// `"group"`. Everything else, including an unknown conversation, is a
/// direct chat for Hermes (`dm`).
pub fn is_group_conversation(conversation: Option<&Value>) -> bool {
    conversation.and_then(|c| str_field(c, "type")) == Some("group")
}

/// The chat type handed to Hermes: `"group"` or `"dm"` (turns.md §9.1 step 11, §11).
pub fn hermes_chat_type(conversation: Option<&Value>) -> &'static str {
    if is_group_conversation(conversation) {
        "group"
    } else {
        "dm"
    }
}

/// The chat name handed to Hermes: the conversation's non-empty `name`,
/// else `topic`, else `id`.
pub fn chat_name(conversation: Option<&Value>) -> Option<&str> {
    first_nonempty_str(conversation?, &["name", "topic", "id"])
}

/// Renders the channel prompt for one inbound event (turns.md §9.4), or
/// `None` when there is none.
///
/// * `payload`: the `message.created` payload (its `message`, `provenance`,
///   `mentions` and `behavior` are read);
/// * `conversation`: `payload.conversation` when it is an object, else the
///   cached conversation;
/// * `agent_id`, `agent_name`: the own agent's id and display name, when
///   known (an empty name counts as unknown).
pub fn channel_prompt(
    payload: &Value,
    conversation: Option<&Value>,
    agent_id: Option<&str>,
    agent_name: Option<&str>,
) -> Option<String> {
    let message = payload.get("message").filter(|m| m.is_object())?;
    if !is_group_conversation(conversation) {
        return (str_field(message, "senderType") == Some("ai_agent"))
            .then(|| AGENT_SENDER_PROMPT.to_owned());
    }
    let name_note = match agent_name.filter(|n| !n.is_empty()) {
        Some(name) => format!(" ({name})"),
        None => String::new(),
    };
    let mut prompt = if is_mentioned(payload, message, agent_id) {
        format!("Canon group metadata: this message explicitly mentioned this agent{name_note}. Treat it as addressed to you.")
    } else {
        format!("Canon group metadata: this message did not structurally mention this agent{name_note}.")
    };
    let size = match conversation
        .and_then(|c| c.get("memberIds"))
        .and_then(Value::as_array)
    {
        Some(ids) if ids.len() == 1 => " with 1 member".to_owned(),
        Some(ids) => format!(" with {} members", ids.len()),
        None => String::new(),
    };
    prompt.push('\n');
    prompt.push_str(&format!(
        "This is a group chat{size}. Reply only when you add something; otherwise call `canon_runtime_control` with the `no_reply` action to stay silent — every message you post is seen by all members and may trigger other agents."
    ));
    if let Some(cap) = max_consecutive_agent_turns(payload) {
        prompt.push('\n');
        prompt.push_str(&format!(
            "At most {cap} agent replies in a row are allowed here before a person speaks again."
        ));
    }
    Some(prompt)
}

/// Whether the message addresses this agent: a truthy
/// `provenance.mentionedAgent` (provenance from the payload, else from the
/// message), or the agent id among the string items of `message.mentions`,
/// else of `payload.mentions` (the first truthy of the two is used).
fn is_mentioned(payload: &Value, message: &Value, agent_id: Option<&str>) -> bool {
    let provenance =
        as_record(payload.get("provenance")).or_else(|| as_record(message.get("provenance")));
    if provenance.is_some_and(|p| is_truthy(p.get("mentionedAgent"))) {
        return true;
    }
    let Some(agent_id) = agent_id.filter(|id| !id.is_empty()) else {
        return false;
    };
    let mentions = [message.get("mentions"), payload.get("mentions")]
        .into_iter()
        .find(|m| is_truthy(*m))
        .flatten();
    mentions
        .and_then(Value::as_array)
        .is_some_and(|items| items.iter().any(|item| item.as_str() == Some(agent_id)))
}

/// `payload.behavior.participation.maxConsecutiveAgentTurns` when it is a
/// JSON integer (booleans and fractions do not count).
fn max_consecutive_agent_turns(payload: &Value) -> Option<i128> {
    let n = payload
        .get("behavior")?
        .get("participation")?
        .get("maxConsecutiveAgentTurns")?
        .as_number()?;
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// The text a message contributes to a turn (turns.md §9.1 step 8), or the
/// empty string when it contributes nothing (the message is then ignored).
///
/// In order: a contact card; a non-blank `text` verbatim; attachment labels;
/// `[<contentType> message]` for a non-text content type; else empty.
pub fn inbound_text(message: &Value) -> String {
    let content_type = str_field(message, "contentType");
    if content_type == Some("contact_card") {
        return contact_card_text(message);
    }
    if let Some(text) =
        str_field(message, "text").filter(|t| !t.trim_matches(is_py_space).is_empty())
    {
        return text.to_owned();
    }
    if let Some(attachments) = message.get("attachments").and_then(Value::as_array) {
        let labels: Vec<String> = attachments
            .iter()
            .filter(|a| a.is_object())
            .map(|a| attachment_label(a, content_type))
            .collect();
        if !labels.is_empty() {
            return format!("[{}]", labels.join("; "));
        }
    }
    match content_type {
        Some(ct) if ct != "text" => format!("[{ct} message]"),
        _ => String::new(),
    }
}

fn attachment_label(attachment: &Value, content_type: Option<&str>) -> String {
    let kind = first_nonempty_str(attachment, &["kind"])
        .or(content_type.filter(|c| !c.is_empty()))
        .unwrap_or("file");
    let name = first_nonempty_str(attachment, &["fileName"])
        .filter(|n| !n.contains("://"))
        .map(basename)
        .filter(|n| !n.is_empty());
    match name {
        Some(name) => format!("{kind} attachment: {name}"),
        None => format!("{kind} attachment"),
    }
}

/// The last path component of `name` (with `\\` treated as `/`, empty and
/// `.` components skipped), trimmed of Python whitespace.
fn basename(name: &str) -> &str {
    name.split(['/', '\\'])
        .rfind(|c| !c.is_empty() && *c != ".")
        .map_or("", |c| c.trim_matches(is_py_space))
}

/// Python's `str.isspace` set: Unicode whitespace plus U+001C..U+001F.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn contact_card_text(message: &Value) -> String {
    let Some(card) = message.get("contactCard").filter(|c| c.is_object()) else {
        return "[Contact card]".to_owned();
    };
    let display_name = first_nonempty_str(card, &["displayName"])
        .map(|n| n.trim_matches(is_py_space))
        .filter(|n| !n.is_empty())
        .unwrap_or("Unknown");
    let mut parts: Vec<String> = Vec::new();
    if let Some(user_type) = first_nonempty_str(card, &["userType"]) {
        parts.push(user_type.to_owned());
    }
    if let Some(user_id) = first_nonempty_str(card, &["userId"]) {
        parts.push(format!("userId: {user_id}"));
    }
    if let Some(owner) = first_nonempty_str(card, &["ownerName"]) {
        parts.push(format!("owner: {owner}"));
    }
    if let Some(about) = first_nonempty_str(card, &["about"]) {
        parts.push(format!("about: {about}"));
    }
    let mut out = format!("[Contact card] \"{display_name}\"");
    if !parts.is_empty() {
        out.push_str(" - ");
        out.push_str(&parts.join("; "));
    }
    if let Some(caption) = str_field(message, "text")
        .map(|t| t.trim_matches(is_py_space))
        .filter(|t| !t.is_empty())
    {
        out.push('\n');
        out.push_str(caption);
    }
    out
}

#[cfg(test)]
mod tests;
