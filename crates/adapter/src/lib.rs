//! canon-adapter: the tokio shell of `canon-hermes serve --stdio`.
//!
//! [`driver`] reads the shim's JSON-lines frames on stdin and writes on
//! stdout, runs the turn machine and the rules of `canon-host`, talks to
//! Canon through `canon-transport`, feeds the SSE stream through
//! `canon_dispatch::pipeline`, and drives the timers the turn machine asks
//! for. The decisions it still makes in async code are being moved into
//! `canon-host` (ARCHITECTURE.md).
//!
//! # Invariants
//!
//! * Only this crate (and the binary) uses tokio, reads the clock and draws
//!   randomness; it passes `now_ms` and fresh `u128`s to the pure core.
//! * Never panics on outside input (host frames, Canon results).
//! * Secrets (reply-authority tokens, API keys, approval reasons) never
//!   appear in `Debug` output or logs.
//! * Depends on `canon-host`, `canon-wire`, `canon-chunking`,
//!   `canon-dispatch`, `canon-transport` and `canon-approvals` (for now only
//!   its `CANON_HOME` rule) among our crates (ARCHITECTURE.md); never on the
//!   cli, the simulator or xtask.

pub mod driver;
