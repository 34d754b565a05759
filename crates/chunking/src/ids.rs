//! Client message ids: operation-bound base ids, `-part-N` ids, standalone
//! id groups and the turn-id format (turns.md §4.1–§4.3 and §4.6,
//! canon-wire.md §2.7).
//!
//! Canon treats a caller-supplied `messageId` as an idempotency key, so every
//! id here is a pure function of its inputs: the same operation always gets
//! the same id, and a replay lands on the message already stored. The base
//! id is bound to (conversation, turn, ordinal), never to the payload, and
//! embeds no model text and no raw conversation or turn id.
//!
//! Randomness (turn ids, standalone tokens) is a parameter: callers pass a
//! random `u128`. Which ordinal an operation uses is decided by the durable
//! ledger in `canon-adapter` (turns.md §4.4), not here.

use std::fmt::Write as _;
use std::num::NonZeroU64;

use sha2::{Digest, Sha256};

use crate::limits::MESSAGE_ID_MAX_CHARS;

/// Domain-separation tag, the first hashed component (turns.md §4.2).
const FINAL_ID_DOMAIN: &str = "canon-hermes-final-v2";

/// Prefix of every base id (turns.md §4.2).
pub const FINAL_ID_PREFIX: &str = "hermes-final-";

/// Number of digest hex characters kept in a base id (turns.md §4.2).
pub const FINAL_ID_DIGEST_HEX_CHARS: usize = 32;

/// Length of a base id in bytes (and cp): prefix plus 32 hex characters.
pub const FINAL_ID_LEN: usize = FINAL_ID_PREFIX.len() + FINAL_ID_DIGEST_HEX_CHARS;

/// Prefix of a turn id (turns.md §4.1).
pub const TURN_ID_PREFIX: &str = "hermes-";

/// Number of hex characters in a turn id after its prefix (turns.md §4.1).
pub const TURN_ID_HEX_CHARS: usize = 20;

/// Prefix of a standalone invocation token (turns.md §4.6).
pub const STANDALONE_TOKEN_PREFIX: &str = "standalone:";

/// Why an id could not be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The operation ordinal was zero or negative. The message is the
    /// reference's parity string.
    #[error("operation_ordinal must be a positive integer")]
    InvalidOrdinal {
        /// The refused value.
        value: i128,
    },
}

/// The per-turn operation ordinal: an integer ≥ 1 (turns.md §4.2, §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ordinal(NonZeroU64);

impl Ordinal {
    /// Ordinal 1: a turn's first durable operation, and the only ordinal of a
    /// standalone invocation.
    pub const FIRST: Ordinal = Ordinal(NonZeroU64::MIN);

    /// Validates `value ≥ 1`.
    pub fn new(value: u64) -> Result<Ordinal, IdError> {
        NonZeroU64::new(value)
            .map(Ordinal)
            .ok_or(IdError::InvalidOrdinal {
                value: i128::from(value),
            })
    }

    /// The ordinal after the last settled one (`settled + 1`,
    /// turns.md §4.4); saturates at `u64::MAX`.
    pub fn after_settled(settled: u64) -> Ordinal {
        Ordinal(NonZeroU64::MIN.saturating_add(settled))
    }

    /// The next ordinal; saturates at `u64::MAX`.
    pub fn next(self) -> Ordinal {
        Ordinal(self.0.saturating_add(1))
    }

    /// The ordinal as an integer (always ≥ 1).
    pub fn get(self) -> u64 {
        self.0.get()
    }
}

impl TryFrom<i64> for Ordinal {
    type Error = IdError;

    fn try_from(value: i64) -> Result<Ordinal, IdError> {
        u64::try_from(value)
            .ok()
            .and_then(NonZeroU64::new)
            .map(Ordinal)
            .ok_or(IdError::InvalidOrdinal {
                value: i128::from(value),
            })
    }
}

/// The operation-bound base id `hermes-final-<32 hex>` (turns.md §4.2).
///
/// Returns `None` when `turn_id` is absent or empty: without a trusted turn
/// id (or an adapter-owned token, see [`StandaloneGroup`]) there is no safe
/// cross-call identity, and the message is sent without an id.
///
/// The id is the first 32 lowercase hex characters of SHA-256 over four
/// components, each preceded by its UTF-8 byte length as an 8-byte
/// big-endian integer: `canon-hermes-final-v2`, `conversation_id`,
/// `turn_id` and the decimal ordinal.
pub fn stable_final_message_id(
    conversation_id: &str,
    turn_id: Option<&str>,
    ordinal: Ordinal,
) -> Option<String> {
    let turn_id = turn_id.filter(|id| !id.is_empty())?;
    let mut hasher = Sha256::new();
    let ordinal = ordinal.get().to_string();
    for component in [FINAL_ID_DOMAIN, conversation_id, turn_id, ordinal.as_str()] {
        hasher.update((component.len() as u64).to_be_bytes());
        hasher.update(component.as_bytes());
    }
    let digest = hasher.finalize();
    let mut id = String::with_capacity(FINAL_ID_LEN);
    id.push_str(FINAL_ID_PREFIX);
    for byte in &digest[..FINAL_ID_DIGEST_HEX_CHARS / 2] {
        // Writing to a String cannot fail.
        let _ = write!(id, "{byte:02x}");
    }
    Some(id)
}

/// Domain-separation tag of [`call_idempotency_key`].
const CALL_KEY_DOMAIN: &str = "canon-hermes-call-v1";

/// Prefix of [`call_idempotency_key`].
pub const CALL_KEY_PREFIX: &str = "hermes-call-";

/// The idempotency key of an agent-initiated Canon call made inside turn `turn_id`, from the
/// call's own canonical text (`request`: what it asks Canon, the key left out):
/// `hermes-call-<32 hex>`, the first 32 lowercase hex characters of SHA-256 over
/// `canon-hermes-call-v1`, `turn_id` and `request`, each preceded by its UTF-8 byte length as
/// an 8-byte big-endian integer. The same call repeated in the same turn (a model's retry
/// after an error it could not judge, or a call sent again to a respawned daemon) gets the
/// same key, so Canon stores it once; the same text in another turn is a new message.
pub fn call_idempotency_key(turn_id: &str, request: &str) -> String {
    let mut hasher = Sha256::new();
    for component in [CALL_KEY_DOMAIN, turn_id, request] {
        hasher.update((component.len() as u64).to_be_bytes());
        hasher.update(component.as_bytes());
    }
    let digest = hasher.finalize();
    let mut key = String::with_capacity(CALL_KEY_PREFIX.len() + FINAL_ID_DIGEST_HEX_CHARS);
    key.push_str(CALL_KEY_PREFIX);
    for byte in &digest[..FINAL_ID_DIGEST_HEX_CHARS / 2] {
        // Writing to a String cannot fail.
        let _ = write!(key, "{byte:02x}");
    }
    key
}

/// The core-compatible id of part `index` (1-based) of a split message
/// (turns.md §4.3): the base truncated to `160 − len(suffix)` code points,
/// then `-part-<index>`. Returns `None` for an empty base (no base id, no
/// part id).
///
/// Base ids from [`stable_final_message_id`] are 45 characters, so the
/// truncation only matters for foreign bases.
pub fn part_message_id(base: &str, index: usize) -> Option<String> {
    if base.is_empty() {
        return None;
    }
    let suffix = format!("-part-{index}");
    let keep = MESSAGE_ID_MAX_CHARS.saturating_sub(suffix.len());
    let end = base
        .char_indices()
        .nth(keep)
        .map_or(base.len(), |(offset, _)| offset);
    Some(format!("{}{suffix}", &base[..end]))
}

/// The message id of part `index` of `count`: the bare base for a single
/// part answer, `base-part-<index>` for every part of a split answer,
/// including the final one (turns.md §4.3).
pub fn message_id_for_part(base: Option<&str>, index: usize, count: usize) -> Option<String> {
    let base = base.filter(|base| !base.is_empty())?;
    if count <= 1 {
        Some(base.to_owned())
    } else {
        part_message_id(base, index)
    }
}

/// A turn id, `hermes-` plus the first 20 lowercase hex characters of
/// `random` written as 32 hex digits (turns.md §4.1; the reference takes
/// the first 20 hex characters of a random UUID). The caller supplies the
/// random value; this crate has no randomness.
pub fn turn_id_from_random(random: u128) -> String {
    let hex = format!("{random:032x}");
    format!("{TURN_ID_PREFIX}{}", &hex[..TURN_ID_HEX_CHARS])
}

/// Whether `id` has the shape [`turn_id_from_random`] gives: `hermes-` and
/// 20 lowercase hex digits.
pub fn is_turn_id(id: &str) -> bool {
    id.strip_prefix(TURN_ID_PREFIX).is_some_and(|hex| {
        hex.len() == TURN_ID_HEX_CHARS
            && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The id group of one standalone (cron or out-of-turn) invocation
/// (turns.md §4.6): an adapter-owned token `standalone:<32 hex>` used as the
/// turn id with ordinal 1, and the base id derived from it.
///
/// Mint one group per invocation and reuse it for every retry inside that
/// invocation; two separately scheduled notifications never share one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StandaloneGroup {
    token: String,
    base_id: String,
}

impl StandaloneGroup {
    /// Derives the group for a send to `conversation_id` from a fresh random
    /// value supplied by the caller.
    pub fn new(conversation_id: &str, random: u128) -> StandaloneGroup {
        let token = format!("{STANDALONE_TOKEN_PREFIX}{random:032x}");
        let base_id = stable_final_message_id(conversation_id, Some(&token), Ordinal::FIRST)
            .expect("the standalone token is never empty");
        StandaloneGroup { token, base_id }
    }

    /// The invocation token, `standalone:<32 hex>`; it never appears on the
    /// wire.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The base id: `messageChunk.groupId`, and the message id (or
    /// `idempotencyKey`) of a single-part send.
    pub fn base_id(&self) -> &str {
        &self.base_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TURN: &str = "hermes-0123456789abcdef0123";

    #[test]
    fn a_call_key_is_stable_per_turn_and_request_and_a_valid_envelope_key() {
        let key = call_idempotency_key(TURN, "{\"text\":\"hi\"}");
        assert_eq!(key, call_idempotency_key(TURN, "{\"text\":\"hi\"}"));
        assert_ne!(key, call_idempotency_key(TURN, "{\"text\":\"hi!\"}"));
        assert_ne!(
            key,
            call_idempotency_key("hermes-0123456789abcdef0124", "{\"text\":\"hi\"}")
        );
        // The components are length-prefixed: moving a boundary changes the key.
        assert_ne!(
            call_idempotency_key("ab", "c"),
            call_idempotency_key("a", "bc")
        );
        assert_eq!(key.len(), CALL_KEY_PREFIX.len() + FINAL_ID_DIGEST_HEX_CHARS);
        assert!(key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c)));
    }

    proptest! {
        /// Every id [`turn_id_from_random`] makes has the turn-id shape; any
        /// text that is not such an id does not.
        #[test]
        fn turn_id_shape_matches_what_is_allocated(random in any::<u128>(), other in ".{0,40}") {
            prop_assert!(is_turn_id(&turn_id_from_random(random)));
            let allocated = other.len() == TURN_ID_PREFIX.len() + TURN_ID_HEX_CHARS
                && other.starts_with(TURN_ID_PREFIX)
                && other[TURN_ID_PREFIX.len()..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            prop_assert_eq!(is_turn_id(&other), allocated);
        }
    }

    #[test]
    fn turn_id_shape_refuses_near_misses() {
        assert!(is_turn_id(TURN));
        for id in [
            "hermes-0123456789ABCDEF0123",
            "hermes-0123456789abcdef012",
            "hermes-0123456789abcdef01234",
            "standalone:0123456789abcdef0123",
            "hermes-",
            "",
        ] {
            assert!(!is_turn_id(id), "{id}");
        }
    }

    fn check_final(
        conversation_id: &str,
        turn_id: Option<&str>,
        ordinal: u64,
        expected: Option<&str>,
    ) {
        let ordinal = Ordinal::new(ordinal).expect("positive ordinal");
        let id = stable_final_message_id(conversation_id, turn_id, ordinal);
        assert_eq!(id.as_deref(), expected);
        if let Some(id) = id {
            assert_eq!(id.len(), FINAL_ID_LEN);
            assert!(id.starts_with(FINAL_ID_PREFIX));
            assert!(id[FINAL_ID_PREFIX.len()..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        }
    }

    fn check_part(base: &str, index: usize, expected: Option<&str>) {
        let id = part_message_id(base, index);
        assert_eq!(id.as_deref(), expected);
        if let Some(id) = id {
            assert!(id.chars().count() <= MESSAGE_ID_MAX_CHARS);
        }
    }

    #[test]
    fn spec_4_2_and_wire_2_7_vectors() {
        check_final(
            "conv-1",
            Some(TURN),
            1,
            Some("hermes-final-df21a8694795b86bba2a5e77c3660bfd"),
        );
        check_final(
            "conv-1",
            Some(TURN),
            2,
            Some("hermes-final-cf33e9897fb815a572c0626e79be8e19"),
        );
        check_final(
            "conv-1",
            Some("standalone:00000000000000000000000000000000"),
            1,
            Some("hermes-final-8407b15cd11138229a5aabec0600b30a"),
        );
    }

    #[test]
    fn no_turn_id_means_no_id() {
        check_final("conv-1", None, 1, None);
        check_final("conv-1", Some(""), 1, None);
        assert_eq!(message_id_for_part(None, 1, 2), None);
        assert_eq!(message_id_for_part(Some(""), 1, 1), None);
    }

    #[test]
    fn ids_are_bound_to_every_component() {
        let ids = [
            stable_final_message_id("conv-1", Some(TURN), Ordinal::FIRST),
            stable_final_message_id("conv-2", Some(TURN), Ordinal::FIRST),
            stable_final_message_id("conv-1", Some("hermes-other"), Ordinal::FIRST),
            stable_final_message_id("conv-1", Some(TURN), Ordinal::FIRST.next()),
            stable_final_message_id("conv-1", Some(TURN), Ordinal::new(10).unwrap()),
            // Moving bytes between components changes the id (length prefix).
            stable_final_message_id(
                "conv-1h",
                Some("ermes-0123456789abcdef0123"),
                Ordinal::FIRST,
            ),
            stable_final_message_id("קבוצה-1", Some(TURN), Ordinal::FIRST),
        ];
        for (i, a) in ids.iter().enumerate() {
            assert!(a.is_some());
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn bad_ordinals_are_refused() {
        for value in [0i64, -1, i64::MIN] {
            let err = Ordinal::try_from(value).unwrap_err();
            assert_eq!(
                err,
                IdError::InvalidOrdinal {
                    value: i128::from(value)
                }
            );
            assert_eq!(
                err.to_string(),
                "operation_ordinal must be a positive integer"
            );
        }
        assert_eq!(Ordinal::new(0), Err(IdError::InvalidOrdinal { value: 0 }));
        assert_eq!(Ordinal::try_from(7).map(Ordinal::get), Ok(7));
        assert_eq!(Ordinal::after_settled(0), Ordinal::FIRST);
        assert_eq!(Ordinal::after_settled(4).get(), 5);
        assert_eq!(Ordinal::after_settled(u64::MAX).get(), u64::MAX);
        assert_eq!(Ordinal::new(u64::MAX).unwrap().next().get(), u64::MAX);
    }

    #[test]
    fn spec_4_3_part_ids() {
        let base = "hermes-final-df21a8694795b86bba2a5e77c3660bfd";
        check_part(
            base,
            1,
            Some("hermes-final-df21a8694795b86bba2a5e77c3660bfd-part-1"),
        );
        check_part(
            base,
            20,
            Some("hermes-final-df21a8694795b86bba2a5e77c3660bfd-part-20"),
        );
        check_part(
            "hermes-final-8407b15cd11138229a5aabec0600b30a",
            1,
            Some("hermes-final-8407b15cd11138229a5aabec0600b30a-part-1"),
        );
        check_part("", 1, None);
        // A 200-char foreign base with part 12 keeps 152 chars (exactly 160).
        let foreign = "f".repeat(200);
        let expected = format!("{}-part-12", "f".repeat(152));
        check_part(&foreign, 12, Some(&expected));
        assert_eq!(expected.len(), 160);
        // Truncation counts code points, not bytes.
        let wide = "ש".repeat(200);
        let expected = format!("{}-part-3", "ש".repeat(153));
        check_part(&wide, 3, Some(&expected));
        // The largest index still fits beside a short base.
        check_part("abc", usize::MAX, Some(&format!("abc-part-{}", usize::MAX)));
    }

    #[test]
    fn single_part_answers_use_the_bare_base() {
        let base = Some("hermes-final-df21a8694795b86bba2a5e77c3660bfd");
        assert_eq!(message_id_for_part(base, 1, 1).as_deref(), base);
        assert_eq!(
            message_id_for_part(base, 3, 3).as_deref(),
            Some("hermes-final-df21a8694795b86bba2a5e77c3660bfd-part-3")
        );
    }

    #[test]
    fn spec_4_6_standalone_group() {
        let group = StandaloneGroup::new("conv-1", 0);
        assert_eq!(group.token(), "standalone:00000000000000000000000000000000");
        assert_eq!(
            group.base_id(),
            "hermes-final-8407b15cd11138229a5aabec0600b30a"
        );
        let other = StandaloneGroup::new("conv-1", 1);
        assert_eq!(other.token(), "standalone:00000000000000000000000000000001");
        assert_ne!(other.base_id(), group.base_id());
        assert_eq!(StandaloneGroup::new("conv-1", 0), group);
    }

    #[test]
    fn spec_4_1_turn_id_format() {
        assert_eq!(
            turn_id_from_random(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
            "hermes-0123456789abcdef0123"
        );
        assert_eq!(turn_id_from_random(0), "hermes-00000000000000000000");
        assert_eq!(turn_id_from_random(u128::MAX).len(), 27);
    }
}
