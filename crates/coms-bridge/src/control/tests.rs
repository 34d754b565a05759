//! Controller tests.
