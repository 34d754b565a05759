//! canon-adapter: the tokio shell of `canon-hermes serve --stdio`.
//!
//! Internal to canon-hermes, with no stability promise yet: it is published so that
//! `cargo install canon-hermes` builds from crates.io, and its API may change in any release.
//!
//! [`run`] reads the shim's JSON-lines frames on stdin and writes on
//! stdout, keeps a `canon_host::session::Session` (the daemon's pure state
//! and decisions) with its turn machine, talks to Canon through
//! `canon-transport`, feeds the SSE stream through the wake pipeline, runs
//! the background tasks (media downloads and uploads, the HITL polls, the
//! runtime-signal pass, the status loop), and drives the timers the turn
//! machine asks for. [`Config`] is what the binary reads from the
//! environment; [`config`] also holds the shell's timing constants.
//! [`standalone::send`] is the daemon's standalone send without the shim
//! (`canon-hermes send`): the same planning, client, environment check and
//! delivery, for one message.
//!
//! Layout: `shell` is the select loop and the driver's methods, split by
//! concern (`requests`, `stream`, `media`, `hitl`); `stdio` the line reader
//! and writer; `canon` the best-effort writes (one ordered lane per
//! conversation) and durable deliveries; `tasks` the background tasks and their reports;
//! `inbound_media` downloads and hand-off files; `outbound` uploads; `env`
//! the clock and randomness.
//!
//! # Invariants
//!
//! * Only this crate (and the binary) uses tokio, reads the clock and draws
//!   randomness for the daemon; the pure core gets `now_ms` and fresh
//!   `u128`s.
//! * Best-effort Canon writes stay in order in their conversation's lane,
//!   and a reply to a turn request queues behind the writes its input made
//!   before it, so one slow conversation delays no other; queuing never
//!   waits; `adapter.connect` pauses the loop; the
//!   stream is not read while too many inbound messages wait in lanes;
//!   every report has its own bounded channel; at exit (stdin EOF, parent
//!   gone, or the shutdown future the binary hands in on SIGTERM or SIGINT)
//!   the tasks are aborted and deliveries drained within
//!   `config::EXIT_GRACE`.
//! * Never panics on outside input; secrets never appear in `Debug` output
//!   or logs.
//! * Depends on `canon-host`, `canon-wire`, `canon-chunking`,
//!   `canon-dispatch`, `canon-transport` and `canon-approvals` among our
//!   crates (ARCHITECTURE.md); never on the cli, the simulator or xtask.

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

mod canon;
mod card_waits;
pub mod config;
mod detached;
mod env;
mod faults;
mod inbound_media;
mod inbox;
mod outbound;
mod shell;
pub mod standalone;
mod stdio;
mod tasks;

pub use config::Config;
pub use shell::run;
