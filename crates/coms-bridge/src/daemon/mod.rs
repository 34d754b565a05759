//! The daemon (coms-bridge.md §5, §6): the tokio shell around [`crate::core::bridge::Bridge`].
//!
//! [`Config::from_flags`] validates the command line; [`run`] performs the startup sequence of
//! coms-bridge.md §5.2 in order (directories, session id and unique name, bind, timers, signal
//! handlers, then the registry entry as the readiness signal, then the `listening` line) and
//! loops until SIGTERM or SIGINT, then shuts down cleanly: the socket file and the registry
//! entry are removed, pending questions are abandoned without a response, a note or a log record.
//!
//! One task owns the bridge state; connections, `hermes send` runs, response deliveries and scans
//! of the questions directory (on the blocking pool) are tasks of their own that report back over
//! channels. Log appends and answer-file deletions run on the owning task, in effect order, so a
//! rejected file is gone before its log line exists.

mod flags;
mod hermes;
mod log_file;
mod poller;
mod shell;

pub use flags::{Config, Environment, FlagError, RawFlags};
pub use hermes::HermesSend;
pub use shell::{run, DaemonError};

/// The program name in every diagnostic line.
pub const PROGRAM: &str = "coms-hermes-bridge";

/// How often the registry entry is rewritten by default (`--heartbeat-ms`).
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(30);

/// Writes `coms-hermes-bridge: <message>` on stderr.
pub fn diagnostic(message: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{PROGRAM}: {message}");
}
