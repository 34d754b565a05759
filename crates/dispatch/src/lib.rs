//! canon-dispatch decides what an inbound Canon event means for the agent:
//! whether it wakes a turn, what background context travels with the turn
//! that does wake, how verbose that turn is, and which delivery intent the
//! sender asked for.
//!
//! # Modules and main types
//!
//! * [`protocol`]: the turn vocabulary of `turns.md` §1 and a port of the
//!   backend-contracts 8.6.1 turn protocol helpers:
//!   [`protocol::should_trigger_agent_turn`] (returning a
//!   [`protocol::Decision`]), [`protocol::normalize_turn_metadata`],
//!   [`protocol::resolve_turn_message_semantics`],
//!   [`protocol::should_promote_conversation_message`] and the runtime turn
//!   state staleness helpers.
//! * [`gate`]: the wake gate of turns.md §9.2, where the stream service's
//!   `turnDispatch` verdict is authoritative and the contracts rule is the
//!   fallback.
//! * [`buffer`]: the held `channel_context` buffer of turns.md §9.3 and
//!   the inert rendering of sender labels.
//! * [`prompt`]: the per-event channel prompt of turns.md §9.4 and the
//!   inbound text derivation used by step 8 of turns.md §9.1.
//! * [`pipeline`]: the ordered inbound pipeline of turns.md §9.1 as a
//!   small state machine, [`pipeline::Dispatcher`].
//! * [`intent`]: delivery-intent parsing (turns.md §10.1).
//! * [`verbosity`]: turn verbosity configuration and resolution (turns.md §6).
//! * [`trail`]: block compaction and the bounded final trail (turns.md §5.5–5.6).
//!
//! # Invariants
//!
//! * Pure: no I/O, no clock, no randomness. Where time matters it is the
//!   parameter `now_ms: u64` (epoch milliseconds).
//! * Never panics on outside input. Every function that reads a JSON value
//!   accepts any [`serde_json::Value`], including arrays, scalars and deep
//!   nesting, and answers the way the JavaScript contract does.
//! * All memory is bounded: the held buffer ([`buffer::ContextBuffer`]), the
//!   seen-message set and the conversation-type memory of
//!   [`pipeline::Dispatcher`] have fixed caps.
//! * Expected outcomes are values (a verdict with a reason); `Err` is used
//!   only for refused configuration ([`verbosity::VerbosityError`]).
//!
//! # Dependencies
//!
//! `serde_json` and `thiserror` only. This crate must not depend on tokio,
//! hyper or any crate that performs I/O (style.md §6.2).
//!
//! # Specification
//!
//! `turns.md` §1, §5.5–5.6, §6, §9 and §10.1, with the recommended decisions
//! of its "Open questions" section (turns.md OQ-8, OQ-11, OQ-13, OQ-17).
//!
//! # Example
//!
//! ```
//! use canon_dispatch::protocol::{should_trigger_agent_turn, TurnSemantics};
//! use serde_json::json;
//!
//! let metadata = json!({"turnSemantics": "progress"});
//! let decision = should_trigger_agent_turn(Some("ai_agent"), Some(&metadata));
//! assert!(!decision.allow);
//! assert_eq!(decision.semantics, TurnSemantics::Progress);
//! assert_eq!(
//!     decision.reason.as_str(),
//!     "non-final agent progress does not trigger other agents"
//! );
//! ```

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod buffer;
pub mod gate;
pub mod intent;
pub mod pipeline;
pub mod prompt;
pub mod protocol;
pub mod trail;
pub mod verbosity;

pub mod json;
#[cfg(test)]
mod test_support;
