//! Data-driven tests of the turn machine: sequences of inputs paired with
//! the expected effects (style.md §6.6), plus proptests for "never panics"
//! and "at most one `turn_complete` per turn".
//!
//! Effects are compared through [`support::describe`], a one-line rendering:
//! turn ids `hermes-<n>000…` print as `T<n>`, message ids as `base`, `part-N`
//! or `none`. Tests that pin exact ids or metadata compare the full structs.
//!
//! The tests are grouped by topic, one module each, and share the helpers of
//! [`support`].

mod support;

mod activity;
mod finals;
mod follow_up;
mod ledger;
mod lifecycle;
mod media;
mod props;
mod resumed;
mod silence;
mod turnless;
mod typing;
