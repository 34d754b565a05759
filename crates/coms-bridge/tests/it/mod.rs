//! Integration test modules.

mod daemon;
mod support;
