//! The bridge's pure core (coms-bridge.md §6): everything the daemon decides, as values in and
//! values out. No I/O, no clock, no randomness: time is `now_ms: u64` and ids arrive as
//! parameters (tidy searches this directory for clock, I/O and runtime calls).
//!
//! - [`text`]: the JavaScript whitespace set, trimming, UTF-16 lengths and truncation, and the
//!   neutralisation of Hermes attachment directives.
//! - [`question`]: the qid rule, prompt-payload parsing, and the Telegram question text.
//! - [`answer`]: answer-file validation (six reasons, in order) and answer mapping.
//! - [`paths`]: where the questions directory, the log and answer files live.
//! - [`state`]: the per-qid state table and the bounded closed set.
//! - [`log`]: ndjson log records.
//! - [`outcome`]: timeouts (flags and `PI_COMS_TIMEOUT_MS`), notes, `hermes send` failures.
//! - [`bridge`]: the state machine the daemon drives: [`bridge::Bridge::handle`] takes one
//!   [`bridge::Input`] and returns the [`bridge::Effect`]s to perform, in order.
//!
//! Depends only on the pure parts of [`crate::wire`] (ULID check, timestamps, envelope shapes).

pub mod answer;
pub mod bridge;
pub mod log;
pub mod outcome;
pub mod paths;
pub mod question;
pub mod state;
pub mod text;
