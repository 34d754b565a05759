//! Integration test modules.

mod daemon;
mod hardening;
mod support;
