//! The request checks shared by the REST handlers, the verbs and the interactions: wire id and
//! message id rules, text lengths, authentication by API key, conversation membership, the
//! attachment and message limits of a send, the reply-authority check and the attachment kind
//! of a MIME type. It reads the state but never changes it, and it imports only the HTTP types
//! and the state model.

use serde_json::{json, Map, Value};

use crate::http::{bad, ApiRequest, Handled, Reply};
use crate::state::{State, RECEIPT_TYPES, REPLY_AUTHORITY_SCHEMA};

/// Whether `s` matches `^[A-Za-z0-9_.:-]{1,max}$`.
pub fn is_wire_id(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// The message id rule of canon-wire.md §2.7.
pub fn is_valid_message_id(s: &str) -> bool {
    is_wire_id(s, 160)
        && s != "."
        && s != ".."
        && !(s.len() >= 4 && s.starts_with("__") && s.ends_with("__"))
}

/// Length of `JSON.stringify(value)` in UTF-16 units.
pub fn json_utf16_len(value: &Value) -> usize {
    value.to_string().encode_utf16().count()
}

/// Character count (code points).
pub fn chars(s: &str) -> usize {
    s.chars().count()
}

/// The authenticated agent, else 401 (canon-wire.md §11.3).
pub fn authenticate(state: &State, req: &ApiRequest) -> Handled<String> {
    req.bearer()
        .and_then(|k| state.principal_for_key(k))
        .filter(|p| p.is_agent())
        .map(|p| p.id.clone())
        .ok_or_else(|| Reply::error(401, "UNAUTHENTICATED", "missing or invalid API key"))
}

/// The conversation must exist (404) and `agent` must be a member (403).
pub fn require_member(state: &State, agent: &str, conversation: &str) -> Handled<()> {
    let conv = state
        .conversations
        .get(conversation)
        .ok_or_else(|| Reply::error(404, "CONVERSATION_NOT_FOUND", "conversation not found"))?;
    if conv.member_ids.iter().any(|m| m == agent) {
        Ok(())
    } else {
        Err(Reply::error(
            403,
            "NOT_A_MEMBER",
            "not a member of this conversation",
        ))
    }
}

/// Validates the attachments of a send (canon-wire.md §4.3, §7.1): at most 10, every element
/// well formed and issued by this simulator. Returns the normalized list.
pub fn validate_attachments(state: &State, value: Option<&Value>) -> Handled<Vec<Value>> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let items = value
        .as_array()
        .ok_or_else(|| bad("INVALID_ATTACHMENTS", "attachments must be an array"))?;
    if items.len() > 10 {
        return Err(bad(
            "TOO_MANY_ATTACHMENTS",
            "at most 10 attachments per message",
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let obj = item
            .as_object()
            .ok_or_else(|| bad("INVALID_ATTACHMENTS", "attachment must be an object"))?;
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        if !matches!(kind, "image" | "audio" | "video" | "file") {
            return Err(bad("INVALID_ATTACHMENTS", "attachment kind is invalid"));
        }
        let url = obj.get("url").and_then(Value::as_str).unwrap_or("");
        if !state.uploads.values().any(|u| u.url == url) {
            return Err(bad(
                "ATTACHMENT_URL_NOT_ALLOWED",
                "attachment url was not issued by Canon",
            ));
        }
        let mut clean = Map::new();
        clean.insert("kind".into(), json!(kind));
        clean.insert("url".into(), json!(url));
        for key in ["uploadId", "mimeType", "fileName", "thumbnailUrl"] {
            if let Some(s) = obj
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                clean.insert(key.into(), json!(s));
            }
        }
        // Numeric fields: kept when finite and non-negative,
        // otherwise dropped (canon-wire.md §7.1).
        for key in ["sizeBytes", "width", "height", "durationMs"] {
            if let Some(v) = obj
                .get(key)
                .filter(|v| v.as_f64().is_some_and(|n| n.is_finite() && n >= 0.0))
            {
                clean.insert(key.into(), v.clone());
            }
        }
        if let Some(s) = obj.get("processingStatus").and_then(Value::as_str) {
            if matches!(s, "processing" | "ready" | "failed") {
                clean.insert("processingStatus".into(), json!(s));
            }
        }
        out.push(Value::Object(clean));
    }
    Ok(out)
}

/// Validated parts of a message send shared by `/messages/send` and `send_to`.
pub struct SendParts {
    /// Text.
    pub text: String,
    /// Metadata.
    pub metadata: Option<Value>,
    /// Attachments.
    pub attachments: Vec<Value>,
    /// Content type.
    pub content_type: Option<String>,
    /// Mentions.
    pub mentions: Vec<String>,
    /// Reply-to.
    pub reply_to: Option<String>,
    /// Reply-to position.
    pub reply_to_position: Option<Value>,
}

/// Validates message limits (canon-wire.md §4.3).
pub fn validate_send(
    state: &State,
    conversation: &str,
    text: Option<&Value>,
    metadata: Option<&Value>,
    attachments: Option<&Value>,
    content_type: Option<&Value>,
    mentions: Option<&Value>,
) -> Handled<SendParts> {
    let lenient = state.config.switches.lenient_messages;
    let text = match text {
        Some(Value::String(s)) => s.clone(),
        None if attachments.is_some() => String::new(),
        _ => return Err(bad("INVALID_TEXT", "text must be a string")),
    };
    if !lenient && text.len() > 4096 {
        return Err(bad("TEXT_TOO_LONG", "text exceeds 4096 bytes"));
    }
    let metadata = match metadata {
        None | Some(Value::Null) => None,
        Some(m @ Value::Object(obj)) => {
            if !lenient && json_utf16_len(m) > 4096 {
                return Err(bad(
                    "METADATA_TOO_LARGE",
                    "metadata exceeds 4096 characters",
                ));
            }
            if let Some(t) = obj.get("type").and_then(Value::as_str) {
                if RECEIPT_TYPES.contains(&t) {
                    return Err(bad(
                        "METADATA_TYPE_RESERVED",
                        "metadata type is server-owned",
                    ));
                }
            }
            Some(m.clone())
        }
        Some(_) => return Err(bad("INVALID_METADATA", "metadata must be an object")),
    };
    let attachments = validate_attachments(state, attachments)?;
    let content_type = match content_type {
        None => None,
        Some(Value::String(s))
            if matches!(s.as_str(), "text" | "image" | "audio" | "video" | "file") =>
        {
            Some(s.clone())
        }
        Some(_) => return Err(bad("INVALID_CONTENT_TYPE", "contentType is invalid")),
    };
    let members = state
        .conversations
        .get(conversation)
        .map(|c| c.member_ids.clone())
        .unwrap_or_default();
    let mentions = match mentions {
        None => Vec::new(),
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for m in items {
                match m.as_str() {
                    Some(s) if members.iter().any(|x| x == s) => out.push(s.to_owned()),
                    _ => {
                        return Err(bad(
                            "INVALID_MENTIONS",
                            "mentions must be conversation members",
                        ))
                    }
                }
            }
            out
        }
        Some(_) => return Err(bad("INVALID_MENTIONS", "mentions must be an array")),
    };
    Ok(SendParts {
        text,
        metadata,
        attachments,
        content_type,
        mentions,
        reply_to: None,
        reply_to_position: None,
    })
}

/// Checks the `replyAuthority` of a send against the authority this simulator issued: the
/// schema, the source message, the agent and the conversation must match, the authority must
/// not have expired, and no other turn may have claimed it; otherwise the answer is 403
/// `REPLY_AUTHORITY_INVALID`.
pub fn check_reply_authority(
    state: &State,
    agent: &str,
    conversation: &str,
    authority: &Value,
    turn: &str,
) -> Handled<()> {
    let invalid = || {
        Reply::error(
            403,
            "REPLY_AUTHORITY_INVALID",
            "reply authority is not valid",
        )
    };
    let token = authority
        .get("token")
        .and_then(Value::as_str)
        .ok_or_else(invalid)?;
    let issued = state.authorities.get(token).ok_or_else(invalid)?;
    let schema_ok = authority.get("schema").and_then(Value::as_str) == Some(REPLY_AUTHORITY_SCHEMA);
    let source_ok = authority.get("sourceMessageId").and_then(Value::as_str)
        == Some(issued.source_message_id.as_str());
    if !schema_ok
        || !source_ok
        || issued.agent != agent
        || issued.conversation_id != conversation
        || state.now() > issued.expires_at
        || issued.claimed_by.as_deref().is_some_and(|t| t != turn)
    {
        return Err(invalid());
    }
    Ok(())
}

/// Attachment kind from a MIME type.
pub fn kind_of_mime(mime: &str) -> &'static str {
    if mime.starts_with("image/") {
        "image"
    } else if mime.starts_with("audio/") {
        "audio"
    } else if mime.starts_with("video/") {
        "video"
    } else {
        "file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_follow_the_server_rule() {
        assert!(is_valid_message_id("hermes-final-abc"));
        assert!(!is_valid_message_id(".."));
        assert!(!is_valid_message_id("__x__"));
        assert!(!is_valid_message_id("a b"));
        assert!(!is_valid_message_id(&"a".repeat(161)));
    }
}
