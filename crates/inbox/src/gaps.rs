//! The record of stream gaps, `<CANON_HOME>/event-gaps-<scope>.json`: when Canon's event replay
//! expired, the messages in between are never sent again, so a runtime records each gap for the
//! operator (`canon-hermes doctor` reads it). One small JSON object, replaced whole on each gap:
//!
//! ```json
//! {"v": 1, "gaps": 3, "last": {"from": "2026-12-07T10:00:00.000Z", "to": "…", "conversationIds": ["c1"]}}
//! ```
//!
//! `gaps` counts every gap recorded in this Canon home for this scope (across restarts); `last`
//! is the newest gap as the runtime described it (an object; its fields are the runtime's).

use serde_json::{json, Map, Value};

/// The format's version.
pub const VERSION: u64 = 1;

/// Larger files are refused: the record holds one gap.
pub const MAX_BYTES: usize = 64 * 1024;

/// The file name of `scope`'s record.
pub fn file_name(scope: &str) -> String {
    format!("event-gaps-{scope}.json")
}

/// What the record holds.
#[derive(Debug, Clone, PartialEq)]
pub struct GapRecord {
    /// Gaps recorded so far.
    pub gaps: u64,
    /// The newest gap.
    pub last: Map<String, Value>,
}

/// Why a record was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GapRecordError {
    /// Larger than [`MAX_BYTES`].
    #[error("the gap record is larger than {MAX_BYTES} bytes")]
    TooLarge,
    /// Not the JSON object this format writes.
    #[error("the gap record is not one this version wrote: {0}")]
    Malformed(String),
}

impl GapRecord {
    /// The record after one more gap, `last`, on top of `previous` (a missing or unreadable
    /// previous record counts from zero).
    pub fn next(previous: Option<&GapRecord>, last: Map<String, Value>) -> GapRecord {
        GapRecord {
            gaps: previous.map_or(0, |p| p.gaps).saturating_add(1),
            last,
        }
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut text = json!({"v": VERSION, "gaps": self.gaps, "last": self.last}).to_string();
        text.push('\n');
        text
    }

    /// Reads a file's text.
    pub fn parse(text: &str) -> Result<GapRecord, GapRecordError> {
        if text.len() > MAX_BYTES {
            return Err(GapRecordError::TooLarge);
        }
        let value: Value = serde_json::from_str(text)
            .map_err(|error| GapRecordError::Malformed(error.to_string()))?;
        if value.get("v").and_then(Value::as_u64) != Some(VERSION) {
            return Err(GapRecordError::Malformed(format!("not version {VERSION}")));
        }
        let gaps = value
            .get("gaps")
            .and_then(Value::as_u64)
            .ok_or_else(|| GapRecordError::Malformed("no gap count".into()))?;
        let last = value
            .get("last")
            .and_then(Value::as_object)
            .cloned()
            .ok_or_else(|| GapRecordError::Malformed("no last gap".into()))?;
        Ok(GapRecord { gaps, last })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn json_leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "\\PC{0,40}".prop_map(Value::from),
        ]
    }

    proptest! {
        /// Whatever the writer writes, the reader reads back.
        #[test]
        fn a_rendered_record_parses_back(
            gaps in any::<u64>(),
            fields in proptest::collection::btree_map("\\PC{0,12}", json_leaf(), 0..8),
        ) {
            let last: Map<String, Value> = fields.into_iter().collect();
            let record = GapRecord { gaps, last };
            prop_assert_eq!(GapRecord::parse(&record.render()), Ok(record));
        }

        /// Any text: a record or a clear refusal, never a panic.
        #[test]
        fn any_text_is_read_or_refused(text in "\\PC{0,200}") {
            let _ = GapRecord::parse(&text);
        }
    }

    #[test]
    fn each_gap_counts_on_top_of_the_previous_record() {
        let first = GapRecord::next(None, Map::new());
        assert_eq!(first.gaps, 1);
        let second = GapRecord::next(Some(&first), Map::new());
        assert_eq!(second.gaps, 2);
        assert!(matches!(
            GapRecord::parse("{\"v\": 2, \"gaps\": 1, \"last\": {}}"),
            Err(GapRecordError::Malformed(_))
        ));
        assert_eq!(
            GapRecord::parse(&" ".repeat(MAX_BYTES + 1)),
            Err(GapRecordError::TooLarge)
        );
    }
}
