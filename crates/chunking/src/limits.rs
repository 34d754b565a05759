//! Numeric limits for answer sizing and client message ids.
//!
//! Values come from turns.md §1 ("Limits") and §3.9; each constant cites its
//! row. Byte values are UTF-8 bytes, "cp" values are Unicode scalar values
//! (Rust `char`s), "u16" values are UTF-16 code units.

/// Server cap on message `text`, in bytes (turns.md §1, contracts
/// `messageTextBytes`). The splitter never uses a larger budget.
pub const CANON_MESSAGE_TEXT_MAX_BYTES: usize = 4_096;

/// Working budget for one part of a split answer, in bytes (turns.md §1 and §3.1;
/// the reference's `CHUNKED_TEXT_MAX_BYTES`). The default `max_bytes`.
pub const CHUNKED_TEXT_MAX_BYTES: usize = 3_800;

/// Smallest accepted `max_bytes`: one code point may need 4 bytes
/// (turns.md §3.1).
pub const MIN_MAX_BYTES: usize = 4;

/// How far back from the cut a paragraph, line or word boundary is still
/// taken, in cp (turns.md §1 and §3.2 step 3).
pub const BOUNDARY_WINDOW_CHARS: usize = 400;

/// Per-message ceiling declared to Hermes, in bytes: the part budget plus a
/// 100-byte margin (turns.md §1 and §3.9, `MAX_MESSAGE_LENGTH`).
pub const HOST_MAX_MESSAGE_LENGTH: usize = CHUNKED_TEXT_MAX_BYTES + 100;

/// Parts per consumer segment (turns.md §1). It only sizes
/// [`STREAMED_ANSWER_MAX_BYTES`]; it is **not** a cap on the number of parts
/// of an answer, which is unbounded.
pub const CONSUMER_SEGMENT_PARTS: usize = 16;

/// Consumer accumulation ceiling declared to Hermes as
/// `streaming_overflow_limit()`, in bytes (turns.md §1 and §3.9).
pub const STREAMED_ANSWER_MAX_BYTES: usize = CHUNKED_TEXT_MAX_BYTES * CONSUMER_SEGMENT_PARTS;

/// Maximum length of a client message id, in cp (turns.md §1 and §4.3,
/// contracts `messageIdChars`).
pub const MESSAGE_ID_MAX_CHARS: usize = 160;

/// Maximum length of a client message id, in bytes (turns.md §1, contracts
/// `messageIdBytes`).
pub const MESSAGE_ID_MAX_BYTES: usize = 256;

/// Maximum length of the compact JSON serialization of message metadata, in
/// u16 (turns.md §1 and §5.6, contracts `messageMetadataJsonChars`).
pub const METADATA_MAX_U16: usize = 4_096;

/// Length, in cp, of a trail text block compacted by the adapter
/// (turns.md §3.7 step 4 and §5.5): the chunked-final strip recognises this form.
pub const COMPACT_TRAIL_TEXT_CHARS: usize = 280;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_limits_match_the_spec_table() {
        assert_eq!(HOST_MAX_MESSAGE_LENGTH, 3_900);
        assert_eq!(STREAMED_ANSWER_MAX_BYTES, 60_800);
        const { assert!(CHUNKED_TEXT_MAX_BYTES <= CANON_MESSAGE_TEXT_MAX_BYTES) };
    }
}
