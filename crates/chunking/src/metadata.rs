//! Message metadata for split answers: wire vocabulary, the `messageChunk`
//! descriptor, leading-part metadata and the chunked-final speech-block strip
//! (turns.md §1, §3.6 and §3.7; canon-wire.md §6.2).
//!
//! Metadata is an open JSON object (gateway keys such as `hermes` are copied
//! through untouched), so it is a `serde_json` map. The workspace enables
//! `preserve_order`, and every function here keeps the key order the 0.14.1
//! reference produces: removed keys close up (`shift_remove`), replaced keys
//! keep their position, and new keys are appended. The descriptor itself is
//! a plain Rust type, [`MessageChunk`].

use serde_json::{Map, Value};

use crate::limits::COMPACT_TRAIL_TEXT_CHARS;

/// Metadata key of the turn semantics (turns.md §1).
pub const KEY_TURN_SEMANTICS: &str = "turnSemantics";
/// Metadata key of the mirror flag set next to `turn_complete` (turns.md §1).
pub const KEY_TURN_COMPLETE: &str = "turnComplete";
/// Metadata key of the turn id (turns.md §1).
pub const KEY_TURN_ID: &str = "turnId";
/// Metadata key of the bounded activity trail (turns.md §5.6).
pub const KEY_TURN_TRAIL: &str = "turnTrail";
/// Metadata key of the chunk descriptor (turns.md §3.6).
pub const KEY_MESSAGE_CHUNK: &str = "messageChunk";
/// Metadata key of the reply behaviour (turns.md §1).
pub const KEY_REPLY_BEHAVIOR: &str = "replyBehavior";

/// Keys a leading part never carries: they describe a completed turn
/// (turns.md §3.6, leading-part metadata step 1).
pub const LEADING_PART_STRIPPED_KEYS: [&str; 4] = [
    KEY_TURN_SEMANTICS,
    KEY_TURN_COMPLETE,
    KEY_TURN_TRAIL,
    KEY_MESSAGE_CHUNK,
];

/// `messageChunk.type` of a text part (turns.md §1).
pub const MESSAGE_CHUNK_TYPE_TEXT: &str = "text";

/// Trail block `kind` of a speech block (turns.md §1).
const TRAIL_KIND_TEXT: &str = "text";

/// The suffix of a compacted trail text (turns.md §5.5).
const COMPACTION_ELLIPSIS: &str = "...";

/// Values of `metadata.turnSemantics` (turns.md §1, contracts turnProtocol.js).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TurnSemantics {
    /// An intermediate message; leading parts of a split answer.
    Progress,
    /// The one notifying message that completes a turn; the final part.
    TurnComplete,
    /// A control message, never a turn.
    Control,
}

impl TurnSemantics {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnSemantics::Progress => "progress",
            TurnSemantics::TurnComplete => "turn_complete",
            TurnSemantics::Control => "control",
        }
    }
}

/// Values of `metadata.replyBehavior` (turns.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyBehavior {
    /// Other agents may reply automatically.
    AllowAutoReply,
    /// Other agents must not reply automatically; set on leading parts.
    SuppressAutoReply,
}

impl ReplyBehavior {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplyBehavior::AllowAutoReply => "allow_auto_reply",
            ReplyBehavior::SuppressAutoReply => "suppress_auto_reply",
        }
    }
}

/// The `messageChunk` descriptor of part `index` of `count` (turns.md §3.6).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MessageChunk {
    /// 1-based position of the part.
    pub index: usize,
    /// Number of parts of the answer.
    pub count: usize,
    /// The un-suffixed base id shared by every part; `None` when the send
    /// has no base id. An empty string is treated as `None`.
    pub group_id: Option<String>,
}

impl MessageChunk {
    /// A descriptor; an empty `group_id` is dropped, as the reference does.
    pub fn new(index: usize, count: usize, group_id: Option<&str>) -> MessageChunk {
        let group_id = group_id.filter(|id| !id.is_empty()).map(str::to_owned);
        MessageChunk {
            index,
            count,
            group_id,
        }
    }

    /// The JSON object, keys in wire order: `type`, `index`, `count`, then
    /// `groupId` when present and non-empty.
    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        object.insert("type".to_owned(), Value::from(MESSAGE_CHUNK_TYPE_TEXT));
        object.insert("index".to_owned(), Value::from(self.index));
        object.insert("count".to_owned(), Value::from(self.count));
        if let Some(group_id) = self.group_id.as_deref().filter(|id| !id.is_empty()) {
            object.insert("groupId".to_owned(), Value::from(group_id));
        }
        Value::Object(object)
    }
}

/// The base metadata of a durable `turn_complete` message: `extra` (the
/// candidate or gateway metadata), then `turnSemantics: "turn_complete"`,
/// `turnComplete: true` and, when present and non-empty, `turnId`
/// (turns.md §7.5 step 3, §4.6). Keys already in `extra` are overwritten in
/// place.
pub fn turn_complete_metadata(
    mut extra: Map<String, Value>,
    turn_id: Option<&str>,
) -> Map<String, Value> {
    extra.insert(
        KEY_TURN_SEMANTICS.to_owned(),
        Value::from(TurnSemantics::TurnComplete.as_str()),
    );
    extra.insert(KEY_TURN_COMPLETE.to_owned(), Value::Bool(true));
    if let Some(turn_id) = turn_id.filter(|id| !id.is_empty()) {
        extra.insert(KEY_TURN_ID.to_owned(), Value::from(turn_id));
    }
    extra
}

/// Metadata of a leading (non-final) part, derived from the final part's
/// metadata (turns.md §3.6): every key except [`LEADING_PART_STRIPPED_KEYS`]
/// is kept in order, then `turnSemantics: "progress"`,
/// `replyBehavior: "suppress_auto_reply"` and the descriptor are set.
pub fn leading_part_metadata(
    final_metadata: &Map<String, Value>,
    chunk: &MessageChunk,
) -> Map<String, Value> {
    let mut metadata: Map<String, Value> = final_metadata
        .iter()
        .filter(|(key, _)| !LEADING_PART_STRIPPED_KEYS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    metadata.insert(
        KEY_TURN_SEMANTICS.to_owned(),
        Value::from(TurnSemantics::Progress.as_str()),
    );
    metadata.insert(
        KEY_REPLY_BEHAVIOR.to_owned(),
        Value::from(ReplyBehavior::SuppressAutoReply.as_str()),
    );
    metadata.insert(KEY_MESSAGE_CHUNK.to_owned(), chunk.to_json());
    metadata
}

/// Removes the speech block that a chunked final would repeat
/// (turns.md §3.7). `answer` is the **whole** answer text, not the last part.
///
/// Only the last trail block with `kind == "text"` is examined. It is removed
/// when its `text` equals `answer`, or when it is the 280-cp compacted form
/// (ending in `"..."`) of a prefix of `answer`. Earlier speech, such as text
/// authored before a tool, always stays. A trail left empty is removed.
/// Returns whether a block was removed.
pub fn strip_chunked_final_text_blocks(metadata: &mut Map<String, Value>, answer: &str) -> bool {
    let Some(Value::Array(trail)) = metadata.get_mut(KEY_TURN_TRAIL) else {
        return false;
    };
    let latest_speech = trail.iter().rposition(|block| {
        block
            .as_object()
            .and_then(|object| object.get("kind"))
            .and_then(Value::as_str)
            == Some(TRAIL_KIND_TEXT)
    });
    let mut removed = false;
    if let Some(position) = latest_speech {
        let duplicates_answer = trail[position]
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|text| text == answer || is_compacted_prefix_of(text, answer));
        if duplicates_answer {
            trail.remove(position);
            removed = true;
        }
    }
    if trail.is_empty() {
        metadata.shift_remove(KEY_TURN_TRAIL);
    }
    removed
}

/// Whether `text` is the compacted (280 cp, `"..."`-terminated) form of a
/// prefix of `answer` (turns.md §3.7 step 4, §5.5).
fn is_compacted_prefix_of(text: &str, answer: &str) -> bool {
    text.strip_suffix(COMPACTION_ELLIPSIS).is_some_and(|kept| {
        text.chars().count() == COMPACT_TRAIL_TEXT_CHARS && answer.starts_with(kept)
    })
}

/// Length of the compact JSON serialization of `metadata` in UTF-16 code
/// units: the unit of the server's 4,096 metadata guard (turns.md §5.6,
/// turns.md OQ-10). Returns `usize::MAX` if the map cannot be serialized.
pub fn json_u16_len(metadata: &Map<String, Value>) -> usize {
    serde_json::to_string(metadata).map_or(usize::MAX, |json| json.encode_utf16().count())
}

#[cfg(test)]
mod tests;
