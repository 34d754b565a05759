//! The coms Hermes bridge (spec `coms-bridge.md`): a long-running coms peer named `user-remote`
//! that forwards questions from a pool of pi coding agents to a human on Telegram through
//! `hermes send`, reads the answer the Hermes gateway writes to a private file, and answers the
//! asking peer; plus the `set-hermes-telegram` controller that prepares the Hermes side and
//! starts or stops the bridge in a Herdr pane.
//!
//! Modules, each with a narrow API:
//!
//! - [`wire`]: the coms protocol (coms-bridge.md §4): ids, timestamps, names, envelopes, the
//!   registry with liveness and pruning, Unix-socket endpoints. Depends on nothing else here.
//! - [`core`]: pure (no I/O, no clock, no randomness): the qid rule, the Telegram question text,
//!   answer-file validation and mapping, states, log records, timeouts, and the sans-I/O
//!   state machine [`core::bridge::Bridge`] (coms-bridge.md §6).
//! - [`daemon`]: the tokio shell around that machine: flags, startup order, the socket server,
//!   `hermes send` runs, the answer poller, heartbeat, signals (coms-bridge.md §5, §6).
//! - [`control`]: the synchronous `set-hermes-telegram` controller (coms-bridge.md §9), with Hermes
//!   and Herdr behind traits so tests script them.
//!
//! Invariants: at most one response envelope per qid; the bridge never retries, re-dispatches or
//! recovers anything (a cancel only ends this side's wait); the controller never starts a gateway,
//! enables a toolset or sends a test message. Unix only. Errors are `thiserror` types; only the
//! binary (`src/main.rs`) uses `anyhow` and installs the `tracing` subscriber.

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

#[cfg(not(unix))]
compile_error!("coms-bridge is Unix-only (coms-bridge.md §2.1): coms endpoints are Unix sockets");

pub mod control;
pub mod core;
pub mod daemon;
pub mod wire;
