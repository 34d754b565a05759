//! The single integration-test binary of `canon-cards` (style.md §6.6): the parity fixtures,
//! the property tests and the submitted field values, one module each.
//!
//! proptest keeps the failure seeds of a module's property tests beside the module's file
//! (`properties.proptest-regressions` beside `properties.rs`), so the modules stay files of
//! their own in this directory.

mod parity;
mod properties;
mod values;
