//! Integration tests of canon-sim: one test binary with one module per area (style.md §6.6).

mod it;
