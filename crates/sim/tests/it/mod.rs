//! Test modules and shared helpers.

mod binary;
mod conformance;
mod control;
mod faults;
mod model;
mod rest_agents;
mod rest_cards;
mod rest_interactions;
mod rest_messages;
mod rest_runtime;
mod robustness;
mod stream;
mod support;
mod tls;
mod verbs;
