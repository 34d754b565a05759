//! canon-adapter: the Canon side of a Hermes agent.
//!
//! This crate will hold the whole adapter; today it holds its pure core and
//! the daemon driver:
//!
//! * [`turn`]: the sans-I/O turn state machine of turns.md §7 (host events
//!   and Canon results in as one closed [`turn::Input`] enum, Canon writes
//!   and host replies out as [`turn::Effect`]s, timers through
//!   [`turn::TurnMachine::next_deadline`]).
//! * [`protocol`]: the serde types of the shim ⇄ daemon JSON-lines protocol
//!   of hermes-host.md §19, documented beside the types.
//! * [`secret`]: redacting wrappers for tokens, keys and opaque host JSON.
//! * [`media`]: the pure inbound-media rules of runtime-control.md §8
//!   (delivery settings, classification, file names, text markers).
//! * [`driver`]: the tokio driver of `canon-hermes serve --stdio`: stdin and
//!   stdout frames, the turn machine, Canon through `canon-transport`, the
//!   SSE stream through `canon_dispatch::pipeline`, and the timer loop.
//!
//! # Invariants
//!
//! * `turn`, `protocol` and `media` are pure: no tokio, no I/O, no clock reads, no
//!   randomness. Time is `now_ms: u64` (epoch ms); randomness arrives as
//!   `u128` parameters. Only [`driver`] uses tokio, reads the clock and draws
//!   randomness.
//! * Never panics on outside input (host frames, Canon results).
//! * Secrets (reply-authority tokens, API keys, approval reasons) never
//!   appear in `Debug` output or logs.
//! * Depends on `canon-chunking`, `canon-dispatch`, `canon-transport` and
//!   `canon-approvals` (for now only its `CANON_HOME` rule) among our crates
//!   (ARCHITECTURE.md); never on the cli, the simulator or xtask.
//!
//! # Specification
//!
//! turns.md §2, §4–§11 and its open questions OQ-3, OQ-4, OQ-5, OQ-8,
//! OQ-18; hermes-host.md §19 and Q8; runtime-control.md §8.1–§8.3, §8.5,
//! §8.6 (inbound media, without the §8.4 capture registry).

pub mod driver;
pub mod media;
pub mod protocol;
pub mod turn;
