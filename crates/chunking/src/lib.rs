//! canon-chunking: fit an agent's answer into Canon's byte-limited messages
//! and give every resulting message a stable, operation-bound id.
//!
//! Canon caps message text at 4,096 UTF-8 **bytes** (not characters), so a
//! long answer is cut into parts of at most 3,800 bytes, sent as leading
//! `progress` parts followed by one notifying `turn_complete` final part.
//! A replayed send must land on the same message, so every part gets a
//! deterministic id derived from (conversation, turn, ordinal, part index).
//!
//! # Modules
//!
//! * [`limits`]: the numeric limits of turns.md §1 and §3.9 that concern
//!   text sizing and ids.
//! * [`split`]: [`split::utf8_len`] and the normative splitter
//!   [`split::split_text`] (turns.md §3.1–§3.4), in two [`split::Boundary`]
//!   modes: `Grapheme` (production default, never splits an extended grapheme
//!   cluster at a hard cut) and `CodePoint` (exact parity with the 0.14.1
//!   reference).
//! * [`ids`]: the operation-bound base id `hermes-final-…` (turns.md §4.2), `-part-N`
//!   ids (turns.md §4.3), standalone id groups (§4.6) and the turn-id format (§4.1).
//! * [`metadata`]: wire vocabulary, the `messageChunk` descriptor, leading-part
//!   metadata (turns.md §3.6) and the chunked-final speech-block strip (§3.7).
//! * [`plan`]: [`plan::plan_answer`] puts the pieces together into the exact
//!   list of messages for one durable operation.
//!
//! # Invariants
//!
//! * Pure: no I/O, no clock, no randomness. Random values (turn ids,
//!   standalone tokens) are parameters; the durable ledger that decides
//!   ordinals lives in `canon-adapter`.
//! * Never panics on any input text. Every part is a borrowed, non-empty,
//!   valid UTF-8 slice of the input whose byte length fits the budget.
//! * No part cap: an answer of any size is split completely.
//! * Must not depend on tokio, hyper or any other I/O crate, nor on any other
//!   workspace crate.
//!
//! # Example
//!
//! ```
//! use canon_chunking::ids::{stable_final_message_id, Ordinal};
//! use canon_chunking::plan::{plan_answer, AnswerSpec};
//!
//! let base = stable_final_message_id("conv-1", Some("hermes-0123456789abcdef0123"), Ordinal::FIRST);
//! assert_eq!(base.as_deref(), Some("hermes-final-df21a8694795b86bba2a5e77c3660bfd"));
//!
//! let answer = "word ".repeat(1000);
//! let mut spec = AnswerSpec::new(answer.trim());
//! spec.base_id = base.as_deref();
//! spec.turn_id = Some("hermes-0123456789abcdef0123");
//! let plan = plan_answer(spec).unwrap();
//! assert_eq!(plan.parts().len(), 2);
//! assert_eq!(
//!     plan.final_part().message_id(),
//!     Some("hermes-final-df21a8694795b86bba2a5e77c3660bfd-part-2")
//! );
//! ```

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod ids;
pub mod limits;
pub mod metadata;
pub mod plan;
pub mod split;
