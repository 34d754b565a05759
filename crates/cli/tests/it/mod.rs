//! Test modules of the `canon-hermes` binary.

mod card_validate;
mod gateway_support;
mod hermes_bursts;
mod hermes_busy;
mod hermes_gateway;
mod serve_hitl;
mod serve_media;
mod serve_outbound_media;
mod serve_stdio;
mod shim_constants;
mod shim_golden;
mod shim_support;
