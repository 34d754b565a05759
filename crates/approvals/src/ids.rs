//! Identifiers used by the registry (approvals.md §2).
//!
//! Ids are built from caller-supplied random bytes, so this module stays pure:
//! [`crate::store`] draws the bytes from the kernel CSPRNG, tests pass fixed
//! ones. Invariants: an [`ApprovalId`] is always `hermes-` plus 20 lowercase
//! hex digits, a [`ClaimId`] is always 32 lowercase hex digits.

use std::fmt;

/// Prefix of every approval id (approvals.md §2).
pub const APPROVAL_ID_PREFIX: &str = "hermes-";

/// Number of hex digits after [`APPROVAL_ID_PREFIX`] (approvals.md §2).
pub const APPROVAL_ID_HEX_LEN: usize = 20;

/// Number of hex digits in a claim id or process instance id (approvals.md §2).
pub const CLAIM_ID_HEX_LEN: usize = 32;

/// A locally minted detached approval id, `hermes-` + 20 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ApprovalId(String);

impl ApprovalId {
    /// Builds an id from 80 random bits (any CSPRNG output is acceptable, approvals.md §2).
    pub fn from_random(bytes: [u8; 10]) -> Self {
        let mut text = String::with_capacity(APPROVAL_ID_PREFIX.len() + APPROVAL_ID_HEX_LEN);
        text.push_str(APPROVAL_ID_PREFIX);
        push_hex(&mut text, &bytes);
        ApprovalId(text)
    }

    /// Parses an id in the exact local format; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix(APPROVAL_ID_PREFIX)?;
        (hex.len() == APPROVAL_ID_HEX_LEN && is_lower_hex(hex)).then(|| ApprovalId(text.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ApprovalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A lease claim id or process instance id: 32 lowercase hex digits (UUIDv4 hex form).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimId(String);

impl ClaimId {
    /// Builds a UUIDv4-shaped id from 128 random bits (version and variant bits are forced).
    pub fn from_random(mut bytes: [u8; 16]) -> Self {
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let mut text = String::with_capacity(CLAIM_ID_HEX_LEN);
        push_hex(&mut text, &bytes);
        ClaimId(text)
    }

    /// Parses 32 lowercase hex digits; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == CLAIM_ID_HEX_LEN && is_lower_hex(text)).then(|| ClaimId(text.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClaimId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `text` matches the server's interaction id pattern `^[A-Za-z0-9_.:-]{1,160}$`
/// (canon-wire.md §10).
pub fn is_server_interaction_id(text: &str) -> bool {
    (1..=160).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approval_id_has_the_spec_shape() {
        let id =
            ApprovalId::from_random([0xe8, 0x8b, 0xe3, 0x7f, 0x46, 0x51, 0x45, 0xe3, 0x9a, 0x07]);
        assert_eq!(id.as_str(), "hermes-e88be37f465145e39a07");
        assert_eq!(id.as_str().len(), 27);
        assert!(is_server_interaction_id(id.as_str()));
        assert_eq!(ApprovalId::parse(id.as_str()), Some(id));
        assert_eq!(ApprovalId::parse("hermes-E88BE37F465145E39A07"), None);
        assert_eq!(ApprovalId::parse("hermes-e88be37f465145e39a0"), None);
    }

    #[test]
    fn claim_id_is_uuid4_hex() {
        let id = ClaimId::from_random([0xff; 16]);
        assert_eq!(id.as_str().len(), 32);
        assert_eq!(&id.as_str()[12..13], "4");
        assert!(matches!(&id.as_str()[16..17], "8" | "9" | "a" | "b"));
        assert_eq!(ClaimId::parse(id.as_str()), Some(id));
        assert_eq!(ClaimId::parse("xyz"), None);
    }

    #[test]
    fn server_id_pattern() {
        assert!(!is_server_interaction_id(""));
        assert!(!is_server_interaction_id("a b"));
        assert!(is_server_interaction_id(&"a".repeat(160)));
        assert!(!is_server_interaction_id(&"a".repeat(161)));
    }
}
