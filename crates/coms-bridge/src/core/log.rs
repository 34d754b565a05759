//! The ndjson log (coms-bridge.md §6.13): one compact JSON object per line,
//! `{"at","qid","event","detail"?}` in that key order, `qid` always a valid ULID. The core
//! events are the seven of [`crate::core::state::Event`]; the daemon also writes
//! `answer_rejected` for answer files it removed.

use serde_json::{Map, Value};

use crate::core::state::Event;
use crate::wire::ids::is_ulid;
use crate::wire::iso;

/// The daemon-only event for a removed answer file.
pub const ANSWER_REJECTED: &str = "answer_rejected";

/// The qid logged for a rejected file whose name has none.
pub const ZERO_QID: &str = "00000000000000000000000000";

/// A record the builder refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The qid is not a ULID.
    #[error("log record qid must be a 26-character Crockford ULID: {0}")]
    InvalidQid(String),
    /// The event is not a core event.
    #[error("unknown log event: {0}")]
    UnknownEvent(String),
}

/// One log record.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord {
    at: String,
    qid: String,
    event: String,
    detail: Option<Value>,
}

impl LogRecord {
    /// A record of a core event (refuses an invalid qid or an unknown event).
    pub fn new(
        at_ms: u64,
        qid: &str,
        event: &str,
        detail: Option<Value>,
    ) -> Result<Self, LogError> {
        if !Event::ALL.iter().any(|e| e.as_str() == event) {
            return Err(LogError::UnknownEvent(event.to_owned()));
        }
        Self::any(at_ms, qid, event, detail)
    }

    /// A record of a core event, typed.
    pub(crate) fn event(at_ms: u64, qid: &str, event: Event, detail: Value) -> Self {
        Self::any(at_ms, qid, event.as_str(), Some(detail)).unwrap_or_else(|_| {
            debug_assert!(false, "callers log valid qids only");
            Self::unchecked(at_ms, ZERO_QID, event.as_str(), None)
        })
    }

    /// An `answer_rejected` record.
    pub fn rejected(at_ms: u64, qid: &str, reason: &str, file: &str) -> Self {
        let qid = if is_ulid(qid) { qid } else { ZERO_QID };
        Self::unchecked(
            at_ms,
            qid,
            ANSWER_REJECTED,
            Some(serde_json::json!({"reason": reason, "file": file})),
        )
    }

    fn any(at_ms: u64, qid: &str, event: &str, detail: Option<Value>) -> Result<Self, LogError> {
        if !is_ulid(qid) {
            return Err(LogError::InvalidQid(qid.to_owned()));
        }
        Ok(Self::unchecked(at_ms, qid, event, detail))
    }

    fn unchecked(at_ms: u64, qid: &str, event: &str, detail: Option<Value>) -> Self {
        LogRecord {
            at: iso::format_ms(at_ms),
            qid: qid.to_owned(),
            event: event.to_owned(),
            detail,
        }
    }

    /// The qid.
    pub fn qid(&self) -> &str {
        &self.qid
    }

    /// The event.
    pub fn event_name(&self) -> &str {
        &self.event
    }

    /// The detail, when there is one.
    pub fn detail(&self) -> Option<&Value> {
        self.detail.as_ref()
    }

    /// The record as a JSON object.
    pub fn to_value(&self) -> Value {
        let mut object = Map::new();
        object.insert("at".into(), self.at.clone().into());
        object.insert("qid".into(), self.qid.clone().into());
        object.insert("event".into(), self.event.clone().into());
        if let Some(detail) = &self.detail {
            object.insert("detail".into(), detail.clone());
        }
        Value::Object(object)
    }

    /// The record as one line, `\n` included.
    pub fn render(&self) -> String {
        let mut line = self.to_value().to_string();
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const QID: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";

    #[test]
    fn the_core_events_in_order() {
        let names: Vec<_> = Event::ALL.iter().map(|e| e.as_str()).collect();
        assert_eq!(
            names,
            [
                "question_received",
                "delivered",
                "delivery_error",
                "answered",
                "cancelled",
                "timeout",
                "late_answer"
            ]
        );
    }

    #[test]
    fn every_event_renders_one_line_that_parses_back() {
        for event in Event::ALL {
            let record =
                LogRecord::new(0, QID, event.as_str(), Some(json!({"k": "v"}))).expect("valid");
            let line = record.render();
            assert!(line.ends_with('\n'));
            assert_eq!(line.matches('\n').count(), 1);
            let back: Value = serde_json::from_str(&line).expect("parses");
            assert_eq!(
                back,
                json!({"at": "1970-01-01T00:00:00.000Z", "qid": QID, "event": event.as_str(), "detail": {"k": "v"}})
            );
            let keys: Vec<_> = back.as_object().expect("object").keys().cloned().collect();
            assert_eq!(keys, ["at", "qid", "event", "detail"]);
        }
        let bare = LogRecord::new(0, QID, "answered", None)
            .expect("valid")
            .render();
        assert_eq!(bare, format!("{{\"at\":\"1970-01-01T00:00:00.000Z\",\"qid\":\"{QID}\",\"event\":\"answered\"}}\n"));
    }

    #[test]
    fn the_builder_refuses_bad_qids_and_events() {
        assert_eq!(
            LogRecord::new(0, "nope", "answered", None),
            Err(LogError::InvalidQid("nope".into()))
        );
        assert_eq!(
            LogRecord::new(0, QID, "answer_rejected", None),
            Err(LogError::UnknownEvent("answer_rejected".into()))
        );
        let rejected = LogRecord::rejected(0, "bad", "invalid_path", "x.json");
        assert_eq!(rejected.qid(), ZERO_QID);
        assert_eq!(
            rejected.detail(),
            Some(&json!({"reason": "invalid_path", "file": "x.json"}))
        );
    }
}
