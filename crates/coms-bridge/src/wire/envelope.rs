//! Envelopes and reply lines (coms-bridge.md §4.5). One connection carries one envelope line and
//! one reply line, both compact JSON with raw UTF-8.
//!
//! Shapes, in the field order the originals emit (receivers do not depend on it):
//!
//! - prompt: `type`, `msg_id`, `sender_session`, `sender_endpoint`, `hops`, `timestamp`,
//!   `prompt`, `sender_name`, `sender_cwd`, `conversation_id`, `response_schema`. A value is a
//!   prompt when `type` is `"prompt"`, `msg_id`, `prompt` and `sender_endpoint` are strings and
//!   `hops` is a number; other fields may be missing.
//! - response: `type`, `msg_id`, `sender_session`, `sender_endpoint`, `hops` (`0`), `timestamp`,
//!   `response` (any JSON, `null` on error), `error` (string or `null`).
//! - cancel (understood by bridge-style peers only): `type`, `msg_id`, `from`, `to`,
//!   `created_at`, `ref_msg_id`, all non-empty strings.
//! - ping: `type`, `msg_id`, `sender_session`, `sender_endpoint`, `hops`, `timestamp`; a bridge
//!   answers any object whose `type` is `"ping"`.
//! - replies: `{"type":"ack","msg_id"}`, `{"type":"nack","msg_id","error"}`,
//!   `{"type":"pong","msg_id","agent_card"}`.

use serde::Serialize;
use serde_json::{json, Value};

/// The nack text of a bridge for anything that is not a prompt, cancel or ping.
pub const BRIDGE_ACCEPTS: &str = "bridge accepts prompts, cancels, and pings";

/// The nack text for a line that is not JSON.
pub const INVALID_JSON: &str = "invalid json";

/// The nack text for a line longer than the cap.
pub const LINE_TOO_LARGE: &str = "line too large";

/// A prompt a bridge accepts (coms-bridge.md §4.5).
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The prompt's id; for a bridge, the qid.
    pub msg_id: String,
    /// Where the sender accepts the `response`.
    pub sender_endpoint: String,
    /// The question: text, or a JSON-encoded question object.
    pub prompt: String,
    /// The sender's display name, when it sent one.
    pub sender_name: Option<String>,
    /// The sender's working directory, when it sent one.
    pub sender_cwd: Option<String>,
}

/// A well-formed cancel envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// The cancel envelope's own id (acked).
    pub msg_id: String,
    /// The sender label (`ask-user-remote`).
    pub from: String,
    /// The target peer name; not checked by a bridge.
    pub to: String,
    /// When the cancel was made.
    pub created_at: String,
    /// The qid to cancel.
    pub ref_msg_id: String,
}

/// What a bridge-style server received on one line.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A valid prompt.
    Prompt(Prompt),
    /// A well-formed cancel.
    Cancel(Cancel),
    /// Any object whose `type` is `"ping"`; `msg_id` is `""` when it had none.
    Ping {
        /// The ping's id.
        msg_id: String,
    },
    /// Anything else; `msg_id` is `""` when it had none.
    Other {
        /// The envelope's id.
        msg_id: String,
    },
}

fn string(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Sorts one parsed line into the kinds a bridge handles (coms-bridge.md §6.1).
pub fn classify(value: &Value) -> Incoming {
    let kind = value.get("type").and_then(Value::as_str);
    let msg_id = string(value, "msg_id");
    if kind == Some("prompt") && value.get("hops").is_some_and(Value::is_number) {
        if let (Some(msg_id), Some(prompt), Some(sender_endpoint)) = (
            msg_id.clone(),
            string(value, "prompt"),
            string(value, "sender_endpoint"),
        ) {
            return Incoming::Prompt(Prompt {
                msg_id,
                sender_endpoint,
                prompt,
                sender_name: string(value, "sender_name"),
                sender_cwd: string(value, "sender_cwd"),
            });
        }
    }
    if kind == Some("cancel") {
        let field = |key| string(value, key).filter(|s| !s.is_empty());
        if let (Some(msg_id), Some(from), Some(to), Some(created_at), Some(ref_msg_id)) = (
            field("msg_id"),
            field("from"),
            field("to"),
            field("created_at"),
            field("ref_msg_id"),
        ) {
            return Incoming::Cancel(Cancel {
                msg_id,
                from,
                to,
                created_at,
                ref_msg_id,
            });
        }
    }
    let msg_id = msg_id.unwrap_or_default();
    if kind == Some("ping") {
        Incoming::Ping { msg_id }
    } else {
        Incoming::Other { msg_id }
    }
}

/// Who sends an envelope: the identity every peer puts in its prompts, responses and pings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The sender's session ULID.
    pub session_id: String,
    /// The sender's peer name.
    pub name: String,
    /// The sender's socket path.
    pub endpoint: String,
    /// The sender's working directory.
    pub cwd: String,
}

/// A prompt envelope as pi peers and coms-cli send it.
pub fn prompt_envelope(from: &Identity, msg_id: &str, prompt: &str, timestamp: &str) -> Value {
    json!({
        "type": "prompt",
        "msg_id": msg_id,
        "sender_session": from.session_id,
        "sender_endpoint": from.endpoint,
        "hops": 0,
        "timestamp": timestamp,
        "prompt": prompt,
        "sender_name": from.name,
        "sender_cwd": from.cwd,
        "conversation_id": null,
        "response_schema": null,
    })
}

/// A response envelope (`hops` is always `0`).
pub fn response_envelope(
    session_id: &str,
    endpoint: &str,
    msg_id: &str,
    timestamp: &str,
    response: Value,
    error: Option<&str>,
) -> Value {
    json!({
        "type": "response",
        "msg_id": msg_id,
        "sender_session": session_id,
        "sender_endpoint": endpoint,
        "hops": 0,
        "timestamp": timestamp,
        "response": response,
        "error": error,
    })
}

/// A cancel envelope, as ask-user-remote sends it.
pub fn cancel_envelope(msg_id: &str, from: &str, to: &str, created_at: &str, qid: &str) -> Value {
    json!({
        "type": "cancel",
        "msg_id": msg_id,
        "from": from,
        "to": to,
        "created_at": created_at,
        "ref_msg_id": qid,
    })
}

/// A ping envelope, as pi peers send it.
pub fn ping_envelope(from: &Identity, msg_id: &str, timestamp: &str) -> Value {
    json!({
        "type": "ping",
        "msg_id": msg_id,
        "sender_session": from.session_id,
        "sender_endpoint": from.endpoint,
        "hops": 0,
        "timestamp": timestamp,
    })
}

/// A response envelope as a receiver reads it: `type` is `"response"`, `msg_id` is a string and
/// the key `response` is present.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseIn {
    /// The id of the prompt it answers.
    pub msg_id: String,
    /// The answer (`null` on error).
    pub response: Value,
    /// The error text, when the peer failed.
    pub error: Option<String>,
}

/// Reads a response envelope, or `None` when `value` is not one.
pub fn parse_response(value: &Value) -> Option<ResponseIn> {
    if value.get("type").and_then(Value::as_str) != Some("response") {
        return None;
    }
    Some(ResponseIn {
        msg_id: string(value, "msg_id")?,
        response: value.get("response")?.clone(),
        error: string(value, "error"),
    })
}

/// The agent card inside a pong (coms-bridge.md §4.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentCard {
    /// The resolved peer name.
    pub name: String,
    /// What the peer is for.
    pub purpose: String,
    /// The peer's model label.
    pub model: String,
    /// The peer's colour, `#RRGGBB`.
    pub color: String,
    /// How full the peer's context is, in percent.
    pub context_used_pct: u32,
    /// How many questions are pending.
    pub queue_depth: usize,
    /// The Herdr pane the peer runs in, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pane_id: Option<String>,
    /// `idle`, `working` or `booting`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// A reply line.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The envelope was accepted.
    Ack {
        /// The received envelope's id.
        msg_id: String,
    },
    /// The envelope was refused.
    Nack {
        /// The received envelope's id, or `""`.
        msg_id: String,
        /// Why.
        error: String,
    },
    /// The answer to a ping.
    Pong {
        /// The ping's id, or `""`.
        msg_id: String,
        /// Who we are.
        agent_card: AgentCard,
    },
}

impl Reply {
    /// The reply as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            Reply::Ack { msg_id } => json!({"type": "ack", "msg_id": msg_id}),
            Reply::Nack { msg_id, error } => {
                json!({"type": "nack", "msg_id": msg_id, "error": error})
            }
            Reply::Pong { msg_id, agent_card } => {
                json!({"type": "pong", "msg_id": msg_id, "agent_card": agent_card})
            }
        }
    }

    /// The reply as one line, `\n` included.
    pub fn to_line(&self) -> String {
        let mut line = self.to_value().to_string();
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity {
            session_id: "01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            name: "claude-cli".into(),
            endpoint: "/tmp/c/sockets/01ARZ3NDEKTSV4RRFFQ69G5FAV.sock".into(),
            cwd: "/work".into(),
        }
    }

    #[test]
    fn prompt_shape_and_validation() {
        let prompt = prompt_envelope(
            &identity(),
            "01BX5ZZKBKACTAV9WEVGEMMVRZ",
            "Can you answer?",
            "2026-07-08T12:34:56.000Z",
        );
        assert_eq!(
            prompt.to_string(),
            r#"{"type":"prompt","msg_id":"01BX5ZZKBKACTAV9WEVGEMMVRZ","sender_session":"01ARZ3NDEKTSV4RRFFQ69G5FAV","sender_endpoint":"/tmp/c/sockets/01ARZ3NDEKTSV4RRFFQ69G5FAV.sock","hops":0,"timestamp":"2026-07-08T12:34:56.000Z","prompt":"Can you answer?","sender_name":"claude-cli","sender_cwd":"/work","conversation_id":null,"response_schema":null}"#
        );
        let Incoming::Prompt(parsed) = classify(&prompt) else {
            panic!("a prompt");
        };
        assert_eq!(parsed.msg_id, "01BX5ZZKBKACTAV9WEVGEMMVRZ");
        assert_eq!(parsed.sender_name.as_deref(), Some("claude-cli"));
        // Only type, msg_id, prompt, sender_endpoint and a numeric hops are required.
        let minimal =
            json!({"type":"prompt","msg_id":"x","prompt":"p","sender_endpoint":"e","hops":1.5});
        assert!(matches!(classify(&minimal), Incoming::Prompt(_)));
        for key in ["msg_id", "prompt", "sender_endpoint", "hops"] {
            let mut broken = minimal.clone();
            broken[key] = json!(7);
            if key == "hops" {
                broken[key] = json!("1");
            }
            assert_eq!(
                classify(&broken),
                Incoming::Other {
                    msg_id: if key == "msg_id" { "" } else { "x" }.into()
                },
                "{key}"
            );
            broken.as_object_mut().expect("object").remove(key);
            assert!(matches!(classify(&broken), Incoming::Other { .. }), "{key}");
        }
    }

    #[test]
    fn cancel_needs_all_six_non_empty_strings() {
        let cancel = cancel_envelope(
            "01BX5ZZKBKACTAV9WEVGEMMVRZ",
            "ask-user-remote",
            "user-remote",
            "2026-07-08T12:34:56.000Z",
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        );
        assert_eq!(
            cancel.to_string(),
            r#"{"type":"cancel","msg_id":"01BX5ZZKBKACTAV9WEVGEMMVRZ","from":"ask-user-remote","to":"user-remote","created_at":"2026-07-08T12:34:56.000Z","ref_msg_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}"#
        );
        assert!(
            matches!(classify(&cancel), Incoming::Cancel(c) if c.ref_msg_id == "01ARZ3NDEKTSV4RRFFQ69G5FAV")
        );
        for key in ["msg_id", "from", "to", "created_at", "ref_msg_id"] {
            for bad in [json!(""), json!(5), Value::Null] {
                let mut broken = cancel.clone();
                broken[key] = bad;
                assert!(matches!(classify(&broken), Incoming::Other { .. }), "{key}");
            }
            let mut missing = cancel.clone();
            missing.as_object_mut().expect("object").remove(key);
            assert!(
                matches!(classify(&missing), Incoming::Other { .. }),
                "{key}"
            );
        }
    }

    #[test]
    fn pings_and_everything_else() {
        assert_eq!(
            classify(&json!({"type":"ping"})),
            Incoming::Ping { msg_id: "".into() }
        );
        let ping = ping_envelope(&identity(), "01BX5ZZKBKACTAV9WEVGEMMVRZ", "t");
        assert_eq!(
            classify(&ping),
            Incoming::Ping {
                msg_id: "01BX5ZZKBKACTAV9WEVGEMMVRZ".into()
            }
        );
        for other in [
            json!({"type":"response","msg_id":"a","response":null}),
            json!([1, 2]),
            json!("ping"),
            json!(null),
            json!({"msg_id":"a"}),
        ] {
            assert!(
                matches!(classify(&other), Incoming::Other { .. }),
                "{other}"
            );
        }
    }

    #[test]
    fn response_shape_and_reading() {
        let response = response_envelope(
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "/s.sock",
            "01BX5ZZKBKACTAV9WEVGEMMVRZ",
            "2026-07-08T12:34:56.000Z",
            json!({"kind":"freeform","text":"ja — ✓"}),
            None,
        );
        assert_eq!(
            response.to_string(),
            r#"{"type":"response","msg_id":"01BX5ZZKBKACTAV9WEVGEMMVRZ","sender_session":"01ARZ3NDEKTSV4RRFFQ69G5FAV","sender_endpoint":"/s.sock","hops":0,"timestamp":"2026-07-08T12:34:56.000Z","response":{"kind":"freeform","text":"ja — ✓"},"error":null}"#
        );
        let read = parse_response(&response).expect("a response");
        assert_eq!(read.error, None);
        let failed = response_envelope("s", "e", "m", "t", Value::Null, Some("boom"));
        assert_eq!(
            parse_response(&failed).and_then(|r| r.error).as_deref(),
            Some("boom")
        );
        assert_eq!(
            parse_response(&json!({"type":"response","msg_id":"m"})),
            None
        );
    }

    #[test]
    fn reply_lines() {
        assert_eq!(
            Reply::Ack { msg_id: "a".into() }.to_line(),
            "{\"type\":\"ack\",\"msg_id\":\"a\"}\n"
        );
        assert_eq!(
            Reply::Nack {
                msg_id: "".into(),
                error: INVALID_JSON.into()
            }
            .to_line(),
            "{\"type\":\"nack\",\"msg_id\":\"\",\"error\":\"invalid json\"}\n"
        );
        let card = AgentCard {
            name: "user-remote".into(),
            purpose: "Remote human via Hermes/Telegram".into(),
            model: "hermes-bridge".into(),
            color: "#38BDF8".into(),
            context_used_pct: 0,
            queue_depth: 2,
            pane_id: None,
            status: Some("idle".into()),
        };
        assert_eq!(
            Reply::Pong { msg_id: "p".into(), agent_card: card }.to_line(),
            "{\"type\":\"pong\",\"msg_id\":\"p\",\"agent_card\":{\"name\":\"user-remote\",\"purpose\":\"Remote human via Hermes/Telegram\",\"model\":\"hermes-bridge\",\"color\":\"#38BDF8\",\"context_used_pct\":0,\"queue_depth\":2,\"status\":\"idle\"}}\n"
        );
    }
}
