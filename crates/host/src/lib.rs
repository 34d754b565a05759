//! canon-host: the pure core of the `canon-hermes serve --stdio` daemon,
//! the part that decides (the tokio shell in `canon-adapter` performs).
//!
//! Internal to canon-hermes, with no stability promise yet: it is published so that
//! `cargo install canon-hermes` builds from crates.io, and its API may change in any release.
//!
//! * [`protocol`]: the serde types of the shim ⇄ daemon JSON-lines protocol
//!   (`docs/spec/hermes-host.md` §19), documented beside the types,
//!   with golden lines in `fixtures/stdio/`. A leaf: it knows nothing of the
//!   turn machine.
//! * [`turn`]: the sans-I/O turn state machine (turns.md §7): host events and
//!   Canon results in as one closed [`turn::Input`] enum, Canon writes (as
//!   `canon-wire` types) and host replies out as [`turn::Effect`]s, timers
//!   through [`turn::TurnMachine::next_deadline`].
//! * [`answers`]: how turn-machine answers become protocol replies.
//! * [`media`]: the inbound-media rules (runtime-control.md §8: delivery
//!   settings, classification, file names, text markers, the trusted
//!   capture registry).
//! * [`api`]: the domain-plugin API calls the daemon answers
//!   (runtime-control.md §7).
//! * [`gaps`]: the event-stream gaps the daemon detects (Canon's replay
//!   expired), so none stays silent.
//! * [`credentials`]: what the session knows of the daemon's Canon
//!   credentials, and when it has them resolved again with the platform
//!   config of a connect or a probe (cli.md §5.1).
//! * [`hitl`]: the rules of Hermes' blocking clarify and exec-approval
//!   calls as Canon runtime interactions (timeouts, choices, request shapes,
//!   answer texts).
//! * [`tools`]: the model-facing Canon tools (runtime-control.md §2–§4): the
//!   schemas the manifest lists, argument checks against them, and
//!   `canon_runtime_control` as decisions (what Canon is asked, the exact
//!   result strings); the session runs its interactions like a clarify.
//! * [`communicate`]: `canon_communicate` (runtime-control.md §5): when it
//!   is offered, the call-time refusals, the exact argument checks, the one
//!   verb or directory call each action makes and the result mapping.
//!
//! # Invariants
//!
//! * Pure: no async runtime, no I/O, no clock reads, no randomness (the
//!   dependency closure and a source scan are checked by `xtask tidy`).
//!   Time is `now_ms: u64` (epoch ms); randomness arrives as `u128`
//!   parameters.
//! * Never panics on outside input (host frames, Canon results).
//! * Secrets (reply-authority tokens, API keys, approval reasons) never
//!   appear in `Debug` output or logs.
//! * Depends on `canon-wire`, `canon-chunking`, `canon-dispatch` and
//!   `canon-cards` among our crates (ARCHITECTURE.md).

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod answers;
pub mod api;
pub mod card_waits;
pub mod communicate;
pub mod connect;
pub mod conversations;
pub mod credentials;
pub mod delivery;
pub mod detached;
pub mod gaps;
pub mod hitl;
pub mod inbound;
pub mod media;
pub mod protocol;
pub mod requests;
pub mod session;
pub mod tools;
pub mod turn;
