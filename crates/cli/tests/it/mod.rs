//! Test modules of the `canon-hermes` binary.

mod card_validate;
mod hermes_gateway;
mod serve_stdio;
