//! Trusted inbound-media capture (runtime-control.md §8.3 step 7, §8.4):
//! the bytes of a message's successfully materialized attachments, kept
//! for the domain-plugin call `current_canon_inbound_media()`
//! (runtime-control.md §7.6) until the message's turn ends.
//!
//! * [`CaptureBatch`]: one message's captures while its attachments are
//!   materialized (at most 16 attachments and 32 MiB, else the whole batch
//!   overflows), dropped whole when a trusted batch has an unavailable
//!   attachment (fail closed).
//! * [`CaptureRegistry`]: the registry keyed by (conversation id, message
//!   id), bounded to 128 messages and 64 MiB, with idle expiry after
//!   3600 s and least-recently-used eviction, exactly as
//!   runtime-control.md §8.4 orders it.
//!
//! Invariants: pure (the clock is the `now_ms` parameter of every call);
//! the registry never holds more than its bounds after any call, its byte
//! count is always the sum of the stored batches, and a batch is stored
//! whole or not at all (proptests in `capture/tests.rs`). Bytes are shared
//! ([`Arc`]), so a read hands them out without copying.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::media::{normalize_mime, sanitize_file_name, MAX_ATTACHMENT_BYTES};

/// Messages kept at most (runtime-control.md §8.4).
pub const MAX_MESSAGES: usize = 128;

/// Bytes kept over all messages at most: 64 MiB (runtime-control.md §8.4).
pub const MAX_TOTAL_BYTES: usize = 64 * 1024 * 1024;

/// Attachments captured per message at most (runtime-control.md §8.4).
pub const MAX_MESSAGE_ATTACHMENTS: usize = 16;

/// Bytes captured per message at most: 32 MiB (runtime-control.md §8.4).
pub const MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// How long an entry lives without a read or write: 3600 s
/// (runtime-control.md §8.4).
pub const IDLE_EXPIRY_MS: u64 = 3_600_000;

/// Characters of each key part at most (runtime-control.md §8.4).
pub const MAX_KEY_CHARS: usize = 256;

/// Characters of a captured MIME type at most (runtime-control.md §8.4).
pub const MAX_MIME_CHARS: usize = 255;

/// The bounds of a registry; [`Default`] is runtime-control.md §8.4.
/// Tests use smaller ones so that properties can be explored cheaply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureLimits {
    /// Messages kept at most.
    pub messages: usize,
    /// Bytes kept over all messages at most.
    pub total_bytes: usize,
    /// Attachments per message at most.
    pub message_attachments: usize,
    /// Bytes per message at most.
    pub message_bytes: usize,
    /// Bytes per attachment at most (and always more than 0).
    pub attachment_bytes: usize,
    /// Idle expiry in milliseconds.
    pub idle_ms: u64,
}

impl Default for CaptureLimits {
    fn default() -> CaptureLimits {
        CaptureLimits {
            messages: MAX_MESSAGES,
            total_bytes: MAX_TOTAL_BYTES,
            message_attachments: MAX_MESSAGE_ATTACHMENTS,
            message_bytes: MAX_MESSAGE_BYTES,
            attachment_bytes: MAX_ATTACHMENT_BYTES,
            idle_ms: IDLE_EXPIRY_MS,
        }
    }
}

/// One captured attachment (runtime-control.md §7.1 `CanonInboundMedia`
/// without its message id, which is the registry key's).
#[derive(Clone, PartialEq, Eq)]
pub struct CapturedMedia {
    /// Position in the message's `attachments` array.
    pub index: usize,
    /// The MIME type (normalized when registered).
    pub mime_type: String,
    /// The file name (sanitized when registered).
    pub file_name: String,
    /// The bytes.
    pub data: Arc<[u8]>,
}

impl std::fmt::Debug for CapturedMedia {
    /// The bytes are left out (runtime-control.md §7.1 excludes `data` from
    /// the repr); only their length shows.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedMedia")
            .field("index", &self.index)
            .field("mime_type", &self.mime_type)
            .field("file_name", &self.file_name)
            .field("size_bytes", &self.data.len())
            .finish()
    }
}

/// One message's captures while its attachments are materialized
/// (runtime-control.md §8.3 step 7 and the fail-closed rule after it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureBatch {
    items: Vec<CapturedMedia>,
    bytes: usize,
    overflowed: bool,
}

impl CaptureBatch {
    /// Captures one successfully materialized attachment, unless the batch
    /// already overflowed. An attachment that would take the batch past
    /// [`MAX_MESSAGE_ATTACHMENTS`] or [`MAX_MESSAGE_BYTES`] overflows it:
    /// every capture of the message is dropped and none is taken after,
    /// so a partial set is never exposed.
    pub fn offer(&mut self, item: CapturedMedia) {
        self.offer_within(item, &CaptureLimits::default());
    }

    /// [`CaptureBatch::offer`] under other per-message limits.
    pub fn offer_within(&mut self, item: CapturedMedia, limits: &CaptureLimits) {
        if self.overflowed {
            return;
        }
        let bytes = self.bytes.saturating_add(item.data.len());
        if self.items.len() >= limits.message_attachments || bytes > limits.message_bytes {
            self.overflowed = true;
            self.items.clear();
            self.bytes = 0;
            return;
        }
        self.bytes = bytes;
        self.items.push(item);
    }

    /// Drops every capture: a trusted batch with an unavailable attachment
    /// exposes nothing (runtime-control.md §8.3, after the loop). Not an
    /// overflow: the marker counts the unavailable attachments instead.
    pub fn drop_all(&mut self) {
        self.items.clear();
        self.bytes = 0;
    }

    /// Whether the batch overflowed.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The captures, in the order offered.
    pub fn items(&self) -> &[CapturedMedia] {
        &self.items
    }

    /// The captures, taken.
    pub fn into_items(self) -> Vec<CapturedMedia> {
        self.items
    }

    /// Bytes captured.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// One stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    conversation_id: String,
    message_id: String,
    items: Vec<CapturedMedia>,
    bytes: usize,
    last_used_ms: u64,
}

/// The capture registry (runtime-control.md §8.4): stored batches in
/// least- to most-recently-used order. The bounds are small (128 entries),
/// so a vector with linear lookups is enough.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureRegistry {
    limits: CaptureLimits,
    entries: VecDeque<Entry>,
    bytes: usize,
}

/// A key part as stored: trimmed; `None` when blank or longer than
/// [`MAX_KEY_CHARS`] characters.
fn key_part(raw: &str) -> Option<&str> {
    let part = raw.trim();
    (!part.is_empty() && part.chars().count() <= MAX_KEY_CHARS).then_some(part)
}

/// A captured MIME type as stored (normalized), or `None` when it breaks
/// runtime-control.md §8.4: empty, without `/`, longer than
/// [`MAX_MIME_CHARS`] characters, or with a control character (below 0x20,
/// or 0x7F).
pub fn capture_mime(raw: &str) -> Option<String> {
    let mime = normalize_mime(raw)?;
    let control = mime.chars().any(|c| c < '\u{20}' || c == '\u{7f}');
    (mime.contains('/') && mime.chars().count() <= MAX_MIME_CHARS && !control).then_some(mime)
}

impl CaptureRegistry {
    /// An empty registry with these bounds.
    pub fn with_limits(limits: CaptureLimits) -> CaptureRegistry {
        CaptureRegistry {
            limits,
            entries: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Stores a message's batch under (conversation, message) at `now_ms`
    /// (runtime-control.md §8.4 "Register"). An invalid key stores nothing
    /// and changes nothing. Items are checked in order: the first one that
    /// breaks a per-attachment or per-message limit (a bad MIME type, no
    /// bytes, more than 10 MiB, past 16 attachments or 32 MiB) overflows
    /// the batch and nothing of it is stored. Then idle entries expire, any
    /// previous entry for the key is removed, the batch (when non-empty) is
    /// stored as most recently used, and the bounds are enforced. True only
    /// when a non-empty batch is stored and still present after eviction.
    pub fn register(
        &mut self,
        conversation_id: &str,
        message_id: &str,
        batch: Vec<CapturedMedia>,
        now_ms: u64,
    ) -> bool {
        let (Some(conversation_id), Some(message_id)) =
            (key_part(conversation_id), key_part(message_id))
        else {
            return false;
        };
        let items = self.validated(batch).unwrap_or_default();
        self.evict_idle(now_ms);
        self.remove(conversation_id, message_id);
        if !items.is_empty() {
            let bytes = items.iter().map(|i| i.data.len()).sum();
            self.bytes += bytes;
            self.entries.push_back(Entry {
                conversation_id: conversation_id.to_owned(),
                message_id: message_id.to_owned(),
                items,
                bytes,
                last_used_ms: now_ms,
            });
        }
        self.evict(now_ms);
        self.position(conversation_id, message_id).is_some()
    }

    /// The batch with normalized MIME types and sanitized names, or `None`
    /// when an item breaks a limit.
    fn validated(&self, batch: Vec<CapturedMedia>) -> Option<Vec<CapturedMedia>> {
        let limits = &self.limits;
        let mut bytes = 0usize;
        let mut items = Vec::with_capacity(batch.len());
        for (n, item) in batch.into_iter().enumerate() {
            let len = item.data.len();
            bytes = bytes.saturating_add(len);
            if n >= limits.message_attachments
                || len == 0
                || len > limits.attachment_bytes
                || bytes > limits.message_bytes
            {
                return None;
            }
            items.push(CapturedMedia {
                index: item.index,
                mime_type: capture_mime(&item.mime_type)?,
                file_name: sanitize_file_name(&item.file_name),
                data: item.data,
            });
        }
        Some(items)
    }

    /// The batch of (conversation, message) at `now_ms`, marked most
    /// recently used (runtime-control.md §8.4 "Read"): empty for a blank key,
    /// an unknown message, or one that expired (idle entries expire first).
    pub fn read(
        &mut self,
        conversation_id: &str,
        message_id: &str,
        now_ms: u64,
    ) -> Vec<CapturedMedia> {
        let (Some(conversation_id), Some(message_id)) =
            (key_part(conversation_id), key_part(message_id))
        else {
            return Vec::new();
        };
        self.evict_idle(now_ms);
        let Some(at) = self.position(conversation_id, message_id) else {
            return Vec::new();
        };
        let Some(mut entry) = self.entries.remove(at) else {
            return Vec::new();
        };
        entry.last_used_ms = now_ms;
        let items = entry.items.clone();
        self.entries.push_back(entry);
        items
    }

    /// Forgets the batch of (conversation, message): its turn finished
    /// (runtime-control.md §8.4 "Discard"). True when one was stored.
    pub fn discard(&mut self, conversation_id: &str, message_id: &str) -> bool {
        match (key_part(conversation_id), key_part(message_id)) {
            (Some(conversation_id), Some(message_id)) => self.remove(conversation_id, message_id),
            _ => false,
        }
    }

    /// Messages stored.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes stored over all messages.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The stored keys, least recently used first.
    pub fn keys(&self) -> Vec<(String, String)> {
        self.entries
            .iter()
            .map(|e| (e.conversation_id.clone(), e.message_id.clone()))
            .collect()
    }

    fn position(&self, conversation_id: &str, message_id: &str) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.conversation_id == conversation_id && e.message_id == message_id)
    }

    fn remove(&mut self, conversation_id: &str, message_id: &str) -> bool {
        let Some(entry) = self
            .position(conversation_id, message_id)
            .and_then(|at| self.entries.remove(at))
        else {
            return false;
        };
        self.bytes -= entry.bytes;
        true
    }

    fn pop_oldest(&mut self) {
        if let Some(entry) = self.entries.pop_front() {
            self.bytes -= entry.bytes;
        }
    }

    /// Drops entries from the least-recently-used end while they have been
    /// idle longer than the expiry; stops at the first one that has not.
    fn evict_idle(&mut self, now_ms: u64) {
        while self
            .entries
            .front()
            .is_some_and(|e| now_ms.saturating_sub(e.last_used_ms) > self.limits.idle_ms)
        {
            self.pop_oldest();
        }
    }

    /// Expires idle entries, then drops least-recently-used ones while more
    /// than the message or byte bound are stored.
    fn evict(&mut self, now_ms: u64) {
        self.evict_idle(now_ms);
        while self.entries.len() > self.limits.messages || self.bytes > self.limits.total_bytes {
            self.pop_oldest();
        }
    }
}

#[cfg(test)]
mod tests;
