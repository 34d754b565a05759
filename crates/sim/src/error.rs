//! The simulator's error type. Expected outcomes (a rejected request, a failed predicate) are
//! HTTP responses or values; `SimError` means the simulator could not do the work asked of it.

use std::time::Duration;

/// Why the simulator could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// Binding the loopback listener failed.
    #[error("could not bind 127.0.0.1:{port}")]
    Bind {
        /// The requested port (0 = any).
        port: u16,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A refused address: the simulator only listens on loopback.
    #[error("refusing to listen on non-loopback address {addr}")]
    NotLoopback {
        /// The refused address.
        addr: String,
    },
    /// `wait_for` reached its timeout before the predicate held.
    #[error("condition not met within {timeout:?}: {what}")]
    WaitTimeout {
        /// The timeout that passed.
        timeout: Duration,
        /// The predicate, described.
        what: String,
    },
    /// A control request was malformed.
    #[error("invalid control request: {0}")]
    Control(String),
    /// A model script could not be read or parsed.
    #[error("invalid model script: {0}")]
    Script(String),
    /// The TLS certificate or key could not be used (canon-wire.md §11.1 S3).
    #[error("invalid TLS identity: {0}")]
    Tls(String),
    /// Reading a file failed.
    #[error("could not read {path}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}
