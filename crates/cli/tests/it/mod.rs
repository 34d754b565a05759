//! Test modules of the `canon-hermes` binary.

mod card_validate;
mod doctor;
mod gateway_support;
mod hermes_bursts;
mod hermes_busy;
mod hermes_delivery;
mod hermes_hitl;
mod hermes_media;
mod hermes_startup;
mod hermes_support;
mod hermes_turns;
mod install;
mod serve_config;
mod serve_connect;
mod serve_handshake;
mod serve_hitl;
mod serve_lifecycle;
mod serve_media;
mod serve_outbound_media;
mod serve_sends;
mod serve_signals;
mod serve_support;
mod serve_turns;
mod shim_constants;
mod shim_golden;
mod shim_support;
