//! canon-adapter: the Canon side of a Hermes agent.
//!
//! This crate will hold the whole adapter; today it holds its pure core:
//!
//! * [`turn`]: the sans-I/O turn state machine of turns.md §7 (host events
//!   and Canon results in as one closed [`turn::Input`] enum, Canon writes
//!   and host replies out as [`turn::Effect`]s, timers through
//!   [`turn::TurnMachine::next_deadline`]).
//! * [`protocol`]: the serde types of the shim ⇄ daemon JSON-lines protocol
//!   of hermes-host.md §19, documented beside the types.
//! * [`secret`]: redacting wrappers for tokens, keys and opaque host JSON.
//!
//! # Invariants
//!
//! * Pure so far: no tokio, no I/O, no clock reads, no randomness. Time is
//!   `now_ms: u64` (epoch ms); randomness arrives as `u128` parameters.
//! * Never panics on outside input (host frames, Canon results).
//! * Secrets (reply-authority tokens, API keys, approval reasons) never
//!   appear in `Debug` output or logs.
//! * Depends on `canon-chunking` and `canon-dispatch` only among our crates;
//!   the driver (tokio, `canon-transport`, `canon-approvals`) comes later
//!   (ARCHITECTURE.md).
//!
//! # Specification
//!
//! turns.md §2, §4–§11 and its open questions OQ-3, OQ-4, OQ-5, OQ-8,
//! OQ-18; hermes-host.md §19.

pub mod protocol;
pub mod secret;
pub mod turn;
