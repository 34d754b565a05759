//! The exact list of messages for one durable answer operation
//! (turns.md §3.6–§3.8, §4.3, §4.6; canon-wire.md §6.2).
//!
//! [`plan_answer`] splits the answer and gives every part its text, client
//! message id and metadata:
//!
//! * a single-part answer is one `turn_complete` message under the bare base
//!   id, with no `messageChunk`;
//! * a split answer of `N` parts sends parts `1..N−1` as leading parts
//!   (`progress`, `suppress_auto_reply`, no trail) and part `N` as the one
//!   `turn_complete` final part carrying the trail; every part has the id
//!   `<base>-part-<i>` and the descriptor's `groupId` is the bare base id.
//!
//! The plan is pure data. The adapter's ledger (turns.md §4.4) stores it
//! (as serialized request bodies) and sends it; options are the adapter's
//! too: see [`PartRole`] for which options each part carries.
//!
//! Invariants: the plan has at least one part; exactly the last part has the
//! [`PartRole::Final`] role and `turnSemantics: "turn_complete"`; the number
//! of parts is not capped.

use serde_json::{Map, Value};

use crate::ids::{message_id_for_part, StandaloneGroup};
use crate::limits::{CHUNKED_TEXT_MAX_BYTES, METADATA_MAX_U16};
use crate::metadata::{
    json_u16_len, leading_part_metadata, strip_chunked_final_text_blocks, turn_complete_metadata,
    MessageChunk, KEY_MESSAGE_CHUNK, KEY_TURN_TRAIL,
};
use crate::split::{split_parts, Boundary, SplitError};

/// Everything [`plan_answer`] needs. Fields have no invariants; build one
/// with [`AnswerSpec::new`] or [`AnswerSpec::standalone`] and adjust the
/// fields.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerSpec<'a> {
    /// The whole answer text (for a turn: the staged durable text, turns.md §7.4).
    pub text: &'a str,
    /// Part budget in bytes; clamped to 4,096, refused below 4 (turns.md §3.1).
    pub max_bytes: usize,
    /// Hard-cut mode (turns.md §3.4).
    pub boundary: Boundary,
    /// The operation's base id (turns.md §4.2), or `None` for a send
    /// without an id. An empty string counts as `None`.
    pub base_id: Option<&'a str>,
    /// The turn id, added as `turnId` to every part's metadata; `None` for a
    /// standalone send.
    pub turn_id: Option<&'a str>,
    /// The candidate or gateway metadata the final part starts from
    /// (turns.md §7.5 step 3). `turnSemantics`, `turnComplete` and `turnId`
    /// are set over it.
    pub metadata: Map<String, Value>,
    /// The bounded final trail (turns.md §5.6), already compacted and bounded by
    /// the adapter; empty means no trail. It is attached to the final part only
    /// if the metadata stays within 4,096 u16 (turns.md §5.6 metadata guard).
    pub turn_trail: Vec<Value>,
}

impl<'a> AnswerSpec<'a> {
    /// A spec with the production defaults: 3,800-byte parts, grapheme-safe
    /// hard cuts, no ids, no metadata and no trail.
    pub fn new(text: &'a str) -> AnswerSpec<'a> {
        AnswerSpec {
            text,
            max_bytes: CHUNKED_TEXT_MAX_BYTES,
            boundary: Boundary::default(),
            base_id: None,
            turn_id: None,
            metadata: Map::new(),
            turn_trail: Vec::new(),
        }
    }

    /// A standalone (cron or out-of-turn) send under `group`
    /// (turns.md §4.6): the group's base id, no `turnId` and no trail.
    pub fn standalone(text: &'a str, group: &'a StandaloneGroup) -> AnswerSpec<'a> {
        AnswerSpec {
            base_id: Some(group.base_id()),
            ..AnswerSpec::new(text)
        }
    }
}

/// Whether a part leads or completes the answer; decides which send options
/// it carries (turns.md §3.6 "Leading-part options").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartRole {
    /// Parts `1..N−1`: `progress`, no notification. They carry no content
    /// options (`contentType`, `attachments`); only the turn's
    /// `replyAuthority` and `replyTo`.
    Leading,
    /// Part `N` (or the only part): the one `turn_complete`. It carries the
    /// trail, the content options, `replyAuthority` and `replyTo`.
    Final,
}

/// One message of an [`AnswerPlan`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedPart<'a> {
    index: usize,
    role: PartRole,
    text: &'a str,
    message_id: Option<String>,
    metadata: Map<String, Value>,
}

impl<'a> PlannedPart<'a> {
    /// 1-based position of the part.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Leading or final.
    pub fn role(&self) -> PartRole {
        self.role
    }

    /// The part's text, a slice of the answer.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// The client message id (`messageId`, or `idempotencyKey` for
    /// `send_to`); `None` when the plan has no base id.
    pub fn message_id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }

    /// The message metadata, keys in wire order.
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.metadata
    }
}

/// The messages of one durable answer operation, in send order.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerPlan<'a> {
    base_id: Option<String>,
    parts: Vec<PlannedPart<'a>>,
    trail_dropped: bool,
}

impl<'a> AnswerPlan<'a> {
    /// The un-suffixed base id (`groupId`), if any.
    pub fn base_id(&self) -> Option<&str> {
        self.base_id.as_deref()
    }

    /// All parts in send order; never empty.
    pub fn parts(&self) -> &[PlannedPart<'a>] {
        &self.parts
    }

    /// Parts `1..N−1`; empty for a single-part answer.
    pub fn leading_parts(&self) -> &[PlannedPart<'a>] {
        &self.parts[..self.parts.len() - 1]
    }

    /// Part `N`, the one `turn_complete`.
    pub fn final_part(&self) -> &PlannedPart<'a> {
        self.parts
            .last()
            .expect("a plan always has at least one part")
    }

    /// Whether the answer was split (`N ≥ 2`).
    pub fn is_split(&self) -> bool {
        self.parts.len() > 1
    }

    /// Whether a non-empty trail was left off because the final metadata
    /// would have exceeded 4,096 u16 (turns.md §5.6 metadata guard).
    pub fn trail_dropped(&self) -> bool {
        self.trail_dropped
    }

    /// Whether two plans would send the same texts: the ledger's test for
    /// reusing a pending operation (turns.md §4.4 "Reserve").
    pub fn same_texts(&self, other: &AnswerPlan<'_>) -> bool {
        self.parts.len() == other.parts.len()
            && self
                .parts
                .iter()
                .zip(&other.parts)
                .all(|(a, b)| a.text == b.text)
    }
}

/// Plans one durable answer operation (turns.md §3.6–§3.8).
///
/// Final-part metadata is built in the reference's order: the spec's metadata,
/// `turnSemantics: "turn_complete"`, `turnComplete: true`, `turnId`, then
/// `messageChunk` when split, then `turnTrail` (subject to the 4,096-u16
/// guard), then the chunked-final strip of turns.md §3.7 when split. Leading
/// parts derive their metadata from the final part's (turns.md §3.6).
///
/// Fails only when `max_bytes < 4`.
pub fn plan_answer(spec: AnswerSpec<'_>) -> Result<AnswerPlan<'_>, SplitError> {
    let AnswerSpec {
        text,
        max_bytes,
        boundary,
        base_id,
        turn_id,
        metadata,
        turn_trail,
    } = spec;
    let texts: Vec<&str> = split_parts(text, max_bytes, boundary)?
        .map(|part| part.text)
        .collect();
    let count = texts.len();
    let base_id = base_id.filter(|id| !id.is_empty());

    let mut final_metadata = turn_complete_metadata(metadata, turn_id);
    if count > 1 {
        let chunk = MessageChunk::new(count, count, base_id);
        final_metadata.insert(KEY_MESSAGE_CHUNK.to_owned(), chunk.to_json());
    }
    let trail_dropped = !turn_trail.is_empty() && !attach_trail(&mut final_metadata, turn_trail);
    if count > 1 {
        strip_chunked_final_text_blocks(&mut final_metadata, text);
    }

    let mut parts = Vec::with_capacity(count);
    for (position, part_text) in texts.iter().enumerate() {
        let index = position + 1;
        let (role, metadata) = if index == count {
            (PartRole::Final, std::mem::take(&mut final_metadata))
        } else {
            let chunk = MessageChunk::new(index, count, base_id);
            (
                PartRole::Leading,
                leading_part_metadata(&final_metadata, &chunk),
            )
        };
        parts.push(PlannedPart {
            index,
            role,
            text: part_text,
            message_id: message_id_for_part(base_id, index, count),
            metadata,
        });
    }
    Ok(AnswerPlan {
        base_id: base_id.map(str::to_owned),
        parts,
        trail_dropped,
    })
}

/// Adds `turnTrail` unless the metadata would then exceed 4,096 u16
/// (turns.md §5.6 metadata guard). Returns whether the trail was attached.
fn attach_trail(metadata: &mut Map<String, Value>, trail: Vec<Value>) -> bool {
    let mut candidate = metadata.clone();
    candidate.insert(KEY_TURN_TRAIL.to_owned(), Value::Array(trail));
    if json_u16_len(&candidate) > METADATA_MAX_U16 {
        return false;
    }
    *metadata = candidate;
    true
}

#[cfg(test)]
mod tests;
