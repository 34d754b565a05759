//! The coms wire (coms-bridge.md §4): what every pi coms peer shares, so this bridge is
//! indistinguishable from a pi peer to the rest of a pool.
//!
//! - [`ids`]: ULIDs (generation and the strict qid check of coms-bridge.md §4.1).
//! - [`iso`]: the JavaScript `toISOString` timestamp shape and the ISO-8601 subset we parse.
//! - [`names`]: project and peer name rules with their exact error texts.
//! - [`envelope`]: every envelope and reply line, and the classifier a bridge-style server uses.
//! - [`registry`]: registry entries under `COMS_DIR/projects/<project>/agents/`, liveness,
//!   pruning and unique names.
//! - [`socket`]: Unix stream endpoints: bind with the stale-socket check, the 64 KiB line cap,
//!   and the one-envelope client exchange.
//!
//! `ids` (validation), `iso`, `names` and `envelope` are pure; `registry` and `socket` do file and
//! socket I/O only. Nothing here depends on [`crate::core`] or [`crate::daemon`], so the module can
//! become a crate of its own when a second coms runtime needs it.

pub mod envelope;
pub mod ids;
pub mod iso;
pub mod names;
pub mod registry;
pub mod socket;
