//! Test modules of the `canon-hermes` binary.

mod card_validate;
mod serve_stdio;
