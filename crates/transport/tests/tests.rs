//! Integration tests of canon-transport against local servers on 127.0.0.1:0
//! (one test binary; modules per area).

mod support;

mod media;
mod rest;
mod stream;
mod tls;

// Against the local Canon simulator (canon-sim) over real sockets.
mod sim_rest;
mod sim_stream;
mod sim_support;
mod sim_tls;
mod soak;
