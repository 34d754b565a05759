//! Integration tests of the registry store (one test binary, style.md §6.6).
//!
//! * `corrupt`: damaged or unreadable registry files fail closed and stay untouched.
//! * `flows`: end-to-end operation sequences through [`Store`] against the file.
//! * `interop`: the lock excludes (and is excluded by) a Python process holding
//!   `flock` on the same lock file.
//! * `oracle`: validation verdicts match recorded canon-hermes-plugin 0.14.1 answers.
//! * `threads`: many threads with separate `Store`s on one registry lose nothing.
//!
//! Crash consistency and multi-process contention live in `process.rs`.

mod corrupt;
mod flows;
mod interop;
mod oracle;
mod threads;
mod util;
