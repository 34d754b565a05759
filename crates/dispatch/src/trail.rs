//! Activity-trail blocks (`turns.md` §5.1), their compaction (§5.5) and the bounded
//! final trail `metadata.turnTrail` (turns.md §5.6), plus the metadata guard.
//!
//! Invariants of [`build_bounded_turn_trail`]:
//!
//! * at most `max_blocks` blocks (default [`FINAL_TRAIL_MAX_BLOCKS`]);
//! * the compact JSON `{"turnTrail":[…]}` is at most `max_bytes` UTF-8
//!   bytes (default [`FINAL_TRAIL_MAX_BYTES`]);
//! * the result is a prefix of the compacted blocks in `sequence` order (a
//!   block that does not fit stops the trail; later, smaller blocks are not
//!   taken instead).
//!
//! JSON is measured as serde_json serializes it (compact, non-ASCII raw),
//! which matches JavaScript's `JSON.stringify` and Python's
//! `json.dumps(ensure_ascii=False, separators=(",", ":"))` for valid Unicode.

use std::fmt;

use serde_json::{Map, Value};

use crate::json::truncate_with_ellipsis;

/// Maximum blocks in the final trail (turns.md §1 Limits, §5.6).
pub const FINAL_TRAIL_MAX_BLOCKS: usize = 20;

/// Maximum UTF-8 bytes of `{"turnTrail":[…]}` (turns.md §1 Limits, §5.6).
pub const FINAL_TRAIL_MAX_BYTES: usize = 2_500;

/// Maximum blocks sent live with a `/streaming` write (turns.md §5.4).
pub const LIVE_MAX_BLOCKS: usize = 30;

/// Maximum serialized length of message metadata, in UTF-16 code units as
/// the server counts it (turns.md §1 Limits, §5.6, OQ-10).
pub const METADATA_MAX_U16: usize = 4_096;

/// Compacted `id` and `turnId` length, in code points (turns.md §5.5).
pub const COMPACT_ID_CHARS: usize = 120;

/// Compacted `title` length, in code points (turns.md §5.5).
pub const COMPACT_TITLE_CHARS: usize = 80;

/// Compacted `text` length, in code points (turns.md §5.5).
pub const COMPACT_TEXT_CHARS: usize = 280;

/// Compacted `summary` length, in code points (turns.md §5.5).
pub const COMPACT_SUMMARY_CHARS: usize = 120;

/// Trail block `kind` (turns.md §1, §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockKind {
    /// Speech.
    Text,
    /// A tool call.
    Tool,
    /// A plan.
    Plan,
    /// An approval.
    Approval,
    /// A request for input.
    Input,
    /// Any other status row (also every unknown kind).
    Status,
}

impl BlockKind {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Tool => "tool",
            Self::Plan => "plan",
            Self::Approval => "approval",
            Self::Input => "input",
            Self::Status => "status",
        }
    }

    /// Parses a kind; an unknown kind becomes [`BlockKind::Status`].
    pub fn parse_lenient(s: &str) -> Self {
        match s {
            "text" => Self::Text,
            "tool" => Self::Tool,
            "plan" => Self::Plan,
            "approval" => Self::Approval,
            "input" => Self::Input,
            _ => Self::Status,
        }
    }
}

impl fmt::Display for BlockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Trail block `status` (turns.md §1, §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BlockStatus {
    /// In progress (also every unknown or missing status).
    #[default]
    Running,
    /// Done.
    Completed,
    /// Failed.
    Failed,
    /// Waiting.
    Pending,
    /// Blocked.
    Blocked,
}

impl BlockStatus {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Pending => "pending",
            Self::Blocked => "blocked",
        }
    }

    /// Parses a status; an unknown or missing status becomes
    /// [`BlockStatus::Running`].
    pub fn parse_lenient(s: Option<&str>) -> Self {
        match s {
            Some("completed") => Self::Completed,
            Some("failed") => Self::Failed,
            Some("pending") => Self::Pending,
            Some("blocked") => Self::Blocked,
            _ => Self::Running,
        }
    }
}

impl fmt::Display for BlockStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One activity block (turns.md §5.1). Plain data; an empty optional field
/// is treated like an absent one when serialized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrailBlock {
    /// Block id (turns.md §5.2).
    pub id: String,
    /// Owning turn id.
    pub turn_id: String,
    /// Kind.
    pub kind: BlockKind,
    /// Status.
    pub status: BlockStatus,
    /// Position within the turn, starting at 1.
    pub sequence: u64,
    /// Title, if any.
    pub title: Option<String>,
    /// Text, if any.
    pub text: Option<String>,
    /// Summary, if any.
    pub summary: Option<String>,
}

impl TrailBlock {
    /// The block as JSON, keys in schema order, empty optional fields
    /// omitted.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("id".into(), Value::from(self.id.as_str()));
        out.insert("turnId".into(), Value::from(self.turn_id.as_str()));
        out.insert("kind".into(), Value::from(self.kind.as_str()));
        out.insert("status".into(), Value::from(self.status.as_str()));
        out.insert("sequence".into(), Value::from(self.sequence));
        for (key, value) in [
            ("title", &self.title),
            ("text", &self.text),
            ("summary", &self.summary),
        ] {
            if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                out.insert(key.into(), Value::from(v));
            }
        }
        Value::Object(out)
    }
}

/// `trim(v, n)` of turns.md §5.3: empty gives `None`, longer than `n` code
/// points is cut to `n - 3` plus `...`.
fn trim_field(value: Option<&str>, max: usize) -> Option<String> {
    value
        .filter(|v| !v.is_empty())
        .map(|v| truncate_with_ellipsis(v, max))
}

/// Compacts one block (turns.md §5.5): ids cut to 120 code points, `title`
/// to 80, `text` to 280 and `summary` to 120; empty optional fields dropped.
pub fn compact_trail_block(block: &TrailBlock) -> TrailBlock {
    TrailBlock {
        id: trim_field(Some(&block.id), COMPACT_ID_CHARS).unwrap_or_default(),
        turn_id: trim_field(Some(&block.turn_id), COMPACT_ID_CHARS).unwrap_or_default(),
        kind: block.kind,
        status: block.status,
        sequence: block.sequence,
        title: trim_field(block.title.as_deref(), COMPACT_TITLE_CHARS),
        text: trim_field(block.text.as_deref(), COMPACT_TEXT_CHARS),
        summary: trim_field(block.summary.as_deref(), COMPACT_SUMMARY_CHARS),
    }
}

/// UTF-8 byte length of the compact JSON serialization of `value`.
pub fn json_byte_length(value: &Value) -> usize {
    value.to_string().len()
}

/// The bounded final trail (turns.md §5.6): blocks sorted by `sequence`
/// (stable), compacted, taken while fewer than `max_blocks` are taken and
/// `{"turnTrail":[…taken…, candidate]}` stays within `max_bytes`; the first
/// block that does not fit ends the trail.
pub fn build_bounded_turn_trail(
    blocks: &[TrailBlock],
    max_blocks: usize,
    max_bytes: usize,
) -> Vec<TrailBlock> {
    let mut sorted: Vec<&TrailBlock> = blocks.iter().collect();
    sorted.sort_by_key(|b| b.sequence);
    // `{"turnTrail":[` plus `]}`; every block after the first adds a comma.
    const WRAPPER_BYTES: usize = r#"{"turnTrail":[]}"#.len();
    let mut used = WRAPPER_BYTES;
    let mut out = Vec::new();
    for block in sorted {
        if out.len() >= max_blocks {
            break;
        }
        let candidate = compact_trail_block(block);
        let separator = usize::from(!out.is_empty());
        let size = json_byte_length(&candidate.to_json()) + separator;
        if used + size > max_bytes {
            break;
        }
        used += size;
        out.push(candidate);
    }
    out
}

/// [`build_bounded_turn_trail`] with the final-trail limits (20 blocks,
/// 2,500 bytes).
pub fn final_turn_trail(blocks: &[TrailBlock]) -> Vec<TrailBlock> {
    build_bounded_turn_trail(blocks, FINAL_TRAIL_MAX_BLOCKS, FINAL_TRAIL_MAX_BYTES)
}

/// The live blocks of a verbose turn (turns.md §5.4): the first 30 blocks in
/// `sequence` order, not compacted.
pub fn live_blocks(blocks: &[TrailBlock]) -> Vec<Value> {
    let mut sorted: Vec<&TrailBlock> = blocks.iter().collect();
    sorted.sort_by_key(|b| b.sequence);
    sorted
        .into_iter()
        .take(LIVE_MAX_BLOCKS)
        .map(TrailBlock::to_json)
        .collect()
}

/// The trail as the JSON array that goes into `metadata.turnTrail`.
pub fn trail_to_json(trail: &[TrailBlock]) -> Value {
    Value::Array(trail.iter().map(TrailBlock::to_json).collect())
}

/// Length of `value`'s compact JSON in UTF-16 code units, as the server
/// counts `JSON.stringify(metadata).length`.
pub fn json_u16_length(value: &Value) -> usize {
    value.to_string().encode_utf16().count()
}

/// Applies the metadata guard (turns.md §5.6): returns a copy of `metadata`
/// with `turnTrail` set to `trail`, unless the trail is empty or the copy's
/// JSON would exceed [`METADATA_MAX_U16`] UTF-16 units, in which case the
/// copy carries no `turnTrail` at all. The flag tells whether it was
/// attached.
pub fn attach_turn_trail(
    metadata: &Map<String, Value>,
    trail: &[TrailBlock],
) -> (Map<String, Value>, bool) {
    let mut without = metadata.clone();
    // `retain` keeps the key order; `remove` may not under preserve_order.
    without.retain(|key, _| key != "turnTrail");
    if trail.is_empty() {
        return (without, false);
    }
    let mut with = without.clone();
    with.insert("turnTrail".into(), trail_to_json(trail));
    let with = Value::Object(with);
    if json_u16_length(&with) > METADATA_MAX_U16 {
        return (without, false);
    }
    match with {
        Value::Object(map) => (map, true),
        _ => (without, false),
    }
}

#[cfg(test)]
mod tests;
