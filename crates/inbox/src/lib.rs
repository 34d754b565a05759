//! canon-inbox: what a Canon runtime must remember about its inbound stream so that a crash, a
//! restart or a reboot neither loses a message nor answers one twice.
//!
//! Canon's stream resumes after a `Last-Event-ID`. A runtime that keeps that cursor only in
//! memory loses every message sent while it was down; one that persists the cursor as soon as a
//! frame arrives loses the messages it had read but not yet handed to its agent. This crate
//! keeps the two facts that close both gaps:
//!
//! * [`tracker`]: the pure part. [`tracker::Tracker`] gives each frame a ticket on arrival and
//!   moves the *safe cursor* only across the settled prefix of the arrival order, so a
//!   successor resuming from it is replayed every frame whose handling was unfinished; the
//!   bounded [`tracker::HandledSet`] names the messages already handed over, which a replay
//!   must drop; [`tracker::OpenTurns`] names the turns that started and never ended, whose
//!   messages a successor hands to the host's resume of that session; [`tracker::RuntimeTurns`]
//!   names the Canon turns told open and never told closed, which a successor closes. No I/O,
//!   no clock (times are parameters).
//! * [`format`]: the journal's text, `<CANON_HOME>/inbox-<scope>.jsonl`: one JSON line per
//!   change, the header naming the format version and the scope (agent and Canon origin), the
//!   parser that drops a last line a crash cut short and refuses anything else it did not write
//!   (with the line number), and the compacted snapshot.
//! * [`gaps`]: the record of the stream's gaps, `<CANON_HOME>/event-gaps-<scope>.json` (Canon's
//!   replay expired, so messages in between were never sent), which an operator's tools read.
//!
//! The crate is pure: no I/O, no clock, no randomness; it depends on no async runtime, HTTP
//! crate or other workspace crate, and never logs. The file (lock, append, `fdatasync`, atomic
//! compaction) is the caller's: canon-adapter's `inbox.rs` is one.

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod format;
pub mod gaps;
pub mod tracker;

pub use format::{scope_key, Loaded};
pub use tracker::{
    HandledSet, OpenTurn, OpenTurns, Record, RuntimeTurn, RuntimeTurns, Ticket, Tracker,
};

#[cfg(test)]
mod tests;
