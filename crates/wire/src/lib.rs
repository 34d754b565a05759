//! canon-wire: the one vocabulary of Canon's agent API, with no I/O
//! (`docs/spec/canon-wire.md` §2–§5, §9).
//!
//! * [`types`]: the request and response shapes of the REST operations
//!   (request types serialize to the exact wire bodies; response types are
//!   read leniently and keep the raw object).
//! * [`events`]: the typed stream events ([`events::Event`], [`events::EventKind`],
//!   [`events::MessageCreated`] with its validated reply authority).
//! * [`sse`]: the incremental SSE frame parser ([`sse::SseParser`]).
//! * [`retry`]: which failures may be retried and how ([`retry::Classifier`],
//!   [`retry::FailureKind`], [`retry::RetryClass`]).
//! * [`authority`]: the reply authority, one type and one validator.
//! * [`endpoint`]: the canon-wire.md §1.1 rule every Canon URL follows (`https`, or `http` on a
//!   local host only).
//! * [`secret`]: the redacted credential and secret wrappers ([`secret::ApiKey`],
//!   [`secret::Secret`], [`secret::Opaque`]).
//!
//! Invariants: pure (no I/O, no clock, no randomness, no async runtime, as
//! `xtask tidy` checks); never panics on anything the network sends; secrets
//! never appear in `Debug` output. `canon-transport` performs the I/O over
//! these types; the daemon core decides with them.

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod authority;
pub mod endpoint;
pub mod events;
pub mod retry;
pub mod secret;
pub mod sse;
pub mod types;

pub use authority::ReplyAuthority;
pub use events::{Event, EventKind};
pub use retry::{Classifier, FailureKind, RetryClass};
pub use secret::{ApiKey, Opaque, Secret};
