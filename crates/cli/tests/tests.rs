//! The single integration-test binary of `canon-hermes` (style.md §6.6).

mod it;
