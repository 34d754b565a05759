//! The reply authority: the server-issued permission for one reply turn
//! (canon-wire.md §5.5). One type and one validator for the whole workspace;
//! its `Debug` output redacts the token.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Schema name of a reply authority (canon-wire.md §5.5).
pub const REPLY_AUTHORITY_SCHEMA: &str = "canon.agent-reply-authority.v1";

/// Minimum token length of an accepted reply authority (canon-wire.md §5.5).
pub const REPLY_AUTHORITY_MIN_TOKEN_CHARS: usize = 32;

/// The server-issued permission for one reply turn (canon-wire.md §5.5).
/// Only the four wire fields are kept; `Debug` redacts the token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplyAuthority {
    /// Always [`REPLY_AUTHORITY_SCHEMA`].
    pub schema: String,
    /// The inbound message this authority answers.
    pub source_message_id: String,
    /// The opaque token (secret).
    pub token: String,
    /// Expiry as sent by the server (ISO-8601 string).
    pub expires_at: String,
}

impl ReplyAuthority {
    /// Accepts `value` only when every canon-wire.md §5.5 rule holds for message `message_id`.
    pub fn accept(value: &Value, message_id: &str) -> Option<ReplyAuthority> {
        let object = value.as_object()?;
        let text = |key: &str| object.get(key).and_then(Value::as_str);
        let schema = text("schema")?;
        let source = text("sourceMessageId")?;
        let token = text("token")?;
        let expires_at = text("expiresAt")?;
        let ok = schema == REPLY_AUTHORITY_SCHEMA
            && source == message_id
            && token.chars().count() >= REPLY_AUTHORITY_MIN_TOKEN_CHARS
            && !expires_at.is_empty();
        ok.then(|| ReplyAuthority {
            schema: schema.to_owned(),
            source_message_id: source.to_owned(),
            token: token.to_owned(),
            expires_at: expires_at.to_owned(),
        })
    }
}

impl std::fmt::Debug for ReplyAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyAuthority")
            .field("schema", &self.schema)
            .field("source_message_id", &self.source_message_id)
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reply_authority_acceptance_rules() {
        let good = json!({"schema": REPLY_AUTHORITY_SCHEMA, "sourceMessageId": "m1",
                          "token": "x".repeat(32), "expiresAt": "soon", "admissionId": "a"});
        let accepted = ReplyAuthority::accept(&good, "m1").expect("valid");
        assert_eq!(
            serde_json::to_value(&accepted).unwrap(),
            json!({"schema": REPLY_AUTHORITY_SCHEMA, "sourceMessageId": "m1", "token": "x".repeat(32), "expiresAt": "soon"})
        );
        assert!(ReplyAuthority::accept(&good, "m2").is_none());
        let mut short = good.clone();
        short["token"] = json!("x".repeat(31));
        assert!(ReplyAuthority::accept(&short, "m1").is_none());
        let mut schema = good.clone();
        schema["schema"] = json!("other");
        assert!(ReplyAuthority::accept(&schema, "m1").is_none());
        let mut expiry = good.clone();
        expiry["expiresAt"] = json!("");
        assert!(ReplyAuthority::accept(&expiry, "m1").is_none());
        assert!(ReplyAuthority::accept(&json!("nope"), "m1").is_none());
    }

    #[test]
    fn reply_authority_checks() {
        let good = json!({"schema": REPLY_AUTHORITY_SCHEMA, "sourceMessageId": "m1", "token": "k".repeat(32), "expiresAt": "x"});
        assert!(ReplyAuthority::accept(&good, "m1").is_some());
        assert!(ReplyAuthority::accept(&good, "m2").is_none());
        let tweak = |key: &str, value: Value| {
            let mut v = good.clone();
            v[key] = value;
            ReplyAuthority::accept(&v, "m1")
        };
        assert!(tweak("schema", json!("canon.agent-reply-authority.v2")).is_none());
        assert!(tweak("token", json!("k".repeat(31))).is_none());
        // The length counts code points, not bytes.
        assert!(tweak("token", json!("é".repeat(32))).is_some());
        assert!(tweak("token", json!(12345)).is_none());
        assert!(tweak("expiresAt", json!("")).is_none());
        assert!(tweak("expiresAt", json!(1)).is_none());
        assert!(ReplyAuthority::accept(&json!([good]), "m1").is_none());
    }

    #[test]
    fn serializes_to_the_four_wire_fields_and_debug_redacts_the_token() {
        let token = "t".repeat(32);
        let value = json!({"schema": REPLY_AUTHORITY_SCHEMA, "sourceMessageId": "m1", "token": token, "expiresAt": "2026-01-01T00:00:00Z", "admissionId": "a1"});
        let authority = ReplyAuthority::accept(&value, "m1").expect("valid authority");
        assert_eq!(
            serde_json::to_value(&authority).unwrap(),
            json!({"schema": "canon.agent-reply-authority.v1", "sourceMessageId": "m1", "token": "t".repeat(32), "expiresAt": "2026-01-01T00:00:00Z"})
        );
        assert!(
            !format!("{authority:?}").contains(&token),
            "Debug must redact the token"
        );
    }
}
