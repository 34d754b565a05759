//! canon-transport: the one crate that knows HTTP, SSE and the Canon wire
//! (canon-wire.md §1–§7, §9).
//!
//! * [`client::CanonClient`]: the typed REST operations of canon-wire.md §3 and §4
//!   with the headers, timeouts and decoding of canon-wire.md §2, the durable send
//!   of canon-wire.md §2.5/§2.7 ([`client::DurableRequest`] keeps the exact bytes
//!   until Canon settles) and the interaction poll engine of canon-wire.md §9.1.
//! * [`stream::EventStream`]: the SSE connection of canon-wire.md §5 as an
//!   async stream of typed `canon_wire::events::Event`s and
//!   [`stream::ConnectionState`] changes, with cursor, `Last-Event-ID`,
//!   `replay.expired` and the canon-wire.md §5.7 hardening.
//! * [`error::TransportError`] is the canon-wire.md §2.6 error model,
//!   classified by `canon_wire::retry`.
//! * [`media::MediaDownloader`]: the SSRF-guarded media download of
//!   canon-wire.md §7.2; [`net`] holds the address rules and the guarded connector.
//!
//! Every request, response and event shape, the SSE frame parser and the
//! retry classifiers live in `canon-wire`, which this crate performs I/O
//! over; this crate holds only the I/O.
//!
//! Invariants: never panics on anything the network sends; secrets (API keys,
//! reply-authority tokens, poll tokens) never appear in `Debug` output or logs; its only
//! workspace dependency is `canon-wire` (style.md §6.2); no Firebase/RTDB connection is
//! ever opened (canon-wire.md §1.1). The crate never reads the environment: switches
//! such as `HERMES_ALLOW_PRIVATE_URLS` are read by the binary and passed in. TLS is
//! rustls with the platform's native roots; the `testing` feature adds
//! `ClientConfig::trust_test_ca_pem` for the simulator's test CA.

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod client;
pub mod error;
pub mod http;
pub mod media;
pub mod net;
pub mod stream;

pub use client::{CanonClient, ClientConfig, DurableRequest};
pub use error::{HttpFailure, TransportError};
pub use stream::{ConnectionState, EventStream, StreamConfig, StreamItem};

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>() {}

    #[test]
    fn handles_can_cross_tasks() {
        assert_send_sync::<crate::CanonClient>();
        assert_send_sync::<crate::media::MediaDownloader>();
        assert_send_sync::<crate::TransportError>();
        assert_send::<crate::EventStream>();
        assert_send::<crate::StreamItem>();
    }
}
