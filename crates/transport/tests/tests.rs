//! Integration tests of canon-transport against local servers on 127.0.0.1:0
//! (one test binary; modules per area).

mod support;

mod media;
mod rest;
mod stream;
mod tls;
