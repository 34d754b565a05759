//! `canon-cards`: the canon.card.v1 ("rich card") validator, with verdicts and error strings
//! identical to Canon's TypeScript validator (`docs/spec/cards.md`).
//!
//! The entry points are [`validate_card`] for an already-parsed [`serde_json::Value`] and
//! [`validate_card_text`] for raw JSON text. Both return a [`Validation`], which serializes to
//! `{"ok":…,"errors":[…]}`. Validation collects every error in the spec's evaluation order; a
//! caller that fails fast reports `errors[0]`.
//!
//! Every limit, vocabulary and message template lives in the generated [`vocab`] module
//! (`cargo xtask codegen` writes it from `fixtures/rich-cards/registry.json`); the control flow
//! here is hand-written. JavaScript semantics the validator needs (UTF-16 lengths, ECMAScript
//! trim, own-key order, `Number::toString`, `String()`, the `JSON.stringify` byte length) are in
//! [`js`].
//!
//! [`values::validate_runtime_card_field_values`] is the related server check of cards.md §17.1:
//! it validates the `values` a human submitted for one action of an interactive card against the
//! action's `fields` and returns the first problem (or `None`), byte for byte as
//! backend-contracts 8.6.1 `validateRuntimeCardFieldValues`. Domain code calls it to revalidate
//! values before acting on them; `fixtures/card-values/cases.jsonl` pins it to the package.
//!
//! Invariants:
//! - No I/O, no clock, no global state; the same input always gives the same result.
//! - Never panics on any input, however deeply nested; recursion depth is bounded by the card
//!   schema, and the size measurement, the cache warm-up before the walk and `kind` rendering
//!   are iterative.
//! - Depends on nothing of ours and on neither tokio nor hyper.
//! - serde_json is built with `preserve_order` (M05 order follows the document) and
//!   `float_roundtrip` (numbers parse to the same doubles as `JSON.parse`).
//!
//! ```
//! let card = serde_json::json!({
//!     "schema": "canon.card.v1",
//!     "title": "Invoice 12345",
//!     "fallbackText": "Invoice 12345: 8,200 ILS",
//!     "blocks": [{"kind": "summary", "text": "Ready to file."}]
//! });
//! assert!(canon_cards::validate_card(&card).ok);
//! ```

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod js;
mod validate;
pub mod values;
pub mod vocab;

use serde::{Deserialize, Serialize};

pub use vocab::{RuntimeCardLimits, MAX_CARD_BYTES, RUNTIME_CARD_LIMITS};

/// The result of validating one card: `ok` is true exactly when `errors` is empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validation {
    /// Whether the card passed every rule.
    pub ok: bool,
    /// Every error, in evaluation order (cards.md §3).
    pub errors: Vec<String>,
}

impl Validation {
    fn from_errors(errors: Vec<String>) -> Validation {
        Validation {
            ok: errors.is_empty(),
            errors,
        }
    }
}

/// Why card text could not be validated at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CardError {
    /// The text is not JSON (or holds a number JSON.parse would not accept as finite).
    #[error("card is not valid JSON at line {line} column {column}: {message}")]
    NotJson {
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// The parser's description.
        message: String,
    },
}

/// Validates an already-parsed card (cards.md §3–§8, §11).
///
/// The 32 KiB cap is measured as the UTF-8 length of ECMAScript `JSON.stringify(card)`, which
/// is a function of the parsed value alone.
#[must_use]
pub fn validate_card(card: &serde_json::Value) -> Validation {
    validate::validate(card)
}

/// Parses `text` the way `JSON.parse` does (duplicate keys: last value wins at the first
/// position) and validates the result.
///
/// # Errors
///
/// [`CardError::NotJson`] when the text is not JSON.
pub fn validate_card_text(text: &str) -> Result<Validation, CardError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| CardError::NotJson {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    Ok(validate_card(&value))
}

/// Whether a card is interactive: some block is an object whose `kind` is `"actions"` and whose
/// `actions` is a non-empty array (cards.md §16.3).
#[must_use]
pub fn is_interactive(card: &serde_json::Value) -> bool {
    card.get("blocks")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|blocks| {
            blocks.iter().any(|block| {
                block.get("kind").and_then(serde_json::Value::as_str) == Some("actions")
                    && block
                        .get("actions")
                        .and_then(serde_json::Value::as_array)
                        .is_some_and(|a| !a.is_empty())
            })
        })
}
