//! The request journal (canon-wire.md §11.1 S6): every request the simulator answered, with
//! the bearer value replaced by the principal it maps to, so tests can query and diff them.
//! It also holds [`canonical_json`], the key-sorted JSON text that both the idempotency
//! fingerprints of the handlers and the comparable journal form use.

use std::collections::VecDeque;

use serde::Serialize;
use serde_json::{Map, Value};

/// Microseconds since the Unix epoch now (0 if the clock reads before it).
pub fn unix_us_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Entries kept; older ones are evicted first (bounded memory).
pub const JOURNAL_CAP: usize = 20_000;

/// One answered request.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JournalEntry {
    /// Position in the journal (1-based, never reused).
    pub seq: u64,
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// Raw query string (empty when none).
    pub query: String,
    /// Request headers, lower-cased names, in arrival order; `authorization` reads
    /// `Bearer <principal id>` (or `Bearer <unknown>`), never the key.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON, else as a string, else null when empty. Upload bodies keep
    /// their fields but the `data` member is replaced by its length.
    pub body: Value,
    /// The status the simulator answered (0 when the connection was dropped).
    pub status: u16,
    /// The response body as JSON (null for streams, files and drops).
    pub response: Value,
    /// Sim-clock time of arrival.
    pub at_ms: u64,
    /// Wall-clock time the request had fully arrived, in microseconds since the Unix epoch.
    /// Not serialized (journals stay comparable across runs): the turn-latency bench
    /// (`crates/cli/benches/turn_floor.rs`) lines it up with timestamps taken in the gateway.
    #[serde(skip)]
    pub arrived_unix_us: u64,
    /// Connection id (one per TCP connection).
    pub connection_id: u64,
    /// The authenticated principal, when the bearer mapped to one.
    pub principal: Option<String>,
}

/// Headers dropped by [`canonical`] (canon-wire.md §12.4).
pub const VOLATILE_HEADERS: [&str; 5] =
    ["host", "user-agent", "content-length", "date", "connection"];

/// An entry in the comparable form of the journal differential (canon-wire.md §12.4): method,
/// path, query, headers without the volatile ones (sorted), body and response with object keys
/// sorted, status. Times and connection ids are left out. Mapping generated ids to
/// placeholders is the differential test's job.
pub fn canonical(entry: &JournalEntry) -> Value {
    let mut headers: Vec<(String, String)> = entry
        .headers
        .iter()
        .filter(|(k, _)| !VOLATILE_HEADERS.contains(&k.as_str()))
        .cloned()
        .collect();
    headers.sort();
    let sorted =
        |v: &Value| -> Value { serde_json::from_str(&canonical_json(v)).unwrap_or(Value::Null) };
    serde_json::json!({
        "method": entry.method,
        "path": entry.path,
        "query": entry.query,
        "headers": headers,
        "body": sorted(&entry.body),
        "status": entry.status,
        "response": sorted(&entry.response),
    })
}

/// Canonical JSON (object keys sorted recursively), the idempotency fingerprint of
/// canon-wire.md §13 Q20 and the sorted form [`canonical`] compares.
pub fn canonical_json(value: &Value) -> String {
    fn sort(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = Map::new();
                for k in keys {
                    out.insert(k.clone(), sort(&map[k]));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(value).to_string()
}

/// The bounded journal.
#[derive(Debug, Default)]
pub struct Journal {
    entries: VecDeque<JournalEntry>,
    next_seq: u64,
}

impl Journal {
    /// Appends an entry and returns its sequence number.
    pub fn push(&mut self, mut entry: JournalEntry) -> u64 {
        self.next_seq += 1;
        entry.seq = self.next_seq;
        if self.entries.len() >= JOURNAL_CAP {
            self.entries.pop_front();
        }
        self.entries.push_back(entry);
        self.next_seq
    }

    /// Entries with `seq > since` whose path starts with `path_prefix` (when given).
    pub fn since(&self, since: u64, path_prefix: Option<&str>) -> Vec<JournalEntry> {
        self.entries
            .iter()
            .filter(|e| e.seq > since)
            .filter(|e| path_prefix.is_none_or(|p| e.path.starts_with(p)))
            .cloned()
            .collect()
    }

    /// Number of entries matching `method` (when given) and path prefix.
    pub fn count(&self, method: Option<&str>, path_prefix: &str) -> usize {
        self.entries
            .iter()
            .filter(|e| method.is_none_or(|m| e.method.eq_ignore_ascii_case(m)))
            .filter(|e| e.path.starts_with(path_prefix))
            .count()
    }

    /// The last sequence number handed out.
    pub fn cursor(&self) -> u64 {
        self.next_seq
    }

    /// Empties the journal (sequence numbers keep increasing).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_form_drops_volatile_headers_and_sorts_keys() {
        let entry = JournalEntry {
            seq: 3,
            method: "POST".into(),
            path: "/typing".into(),
            query: String::new(),
            headers: vec![
                ("user-agent".into(), "x".into()),
                ("content-type".into(), "application/json".into()),
                ("authorization".into(), "Bearer a-hermes".into()),
                ("host".into(), "127.0.0.1:1".into()),
            ],
            body: json!({"typing": true, "conversationId": "c"}),
            status: 200,
            response: json!({}),
            at_ms: 1,
            arrived_unix_us: 1,
            connection_id: 9,
            principal: Some("a-hermes".into()),
        };
        let c = canonical(&entry);
        assert_eq!(
            c["headers"],
            json!([
                ["authorization", "Bearer a-hermes"],
                ["content-type", "application/json"]
            ])
        );
        assert_eq!(
            c["body"].to_string(),
            r#"{"conversationId":"c","typing":true}"#
        );
        assert!(c.get("at_ms").is_none());
    }
}
