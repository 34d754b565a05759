//! Test modules and shared helpers.

mod binary;
mod conformance;
mod control;
mod faults;
mod model;
mod rest;
mod robustness;
mod stream;
mod support;
mod tls;
mod verbs;
