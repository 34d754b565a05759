//! `canon-profiles`: the one place that decides which Canon agent credentials and which Canon
//! environment a process uses (cli.md §5, §6), so `serve --stdio`, the shim's readiness `probe`
//! (answered by the daemon from what `serve` resolved), `doctor` and `setup` can never disagree.
//!
//! The API, in the order a caller meets it:
//!
//! * [`env`]: [`EnvLookup`](env::EnvLookup), the environment as the resolver sees it (the process
//!   environment first, then `<HERMES_HOME>/.env` read by [`DotEnv`](env::DotEnv) in Hermes'
//!   format), and the optional platform config ([`PlatformConfig`](env::PlatformConfig):
//!   `api_key`, `token`, `extra`).
//! * [`environment`]: the packaged environments (`runtime-endpoint-defaults.json`, embedded),
//!   [`resolve_connection`](environment::resolve_connection) (cli.md §5.2 rules 1–5), the RTDB
//!   project binding as its own step ([`Connection::bind_project`](environment::Connection::bind_project))
//!   and the health-response rule (cli.md §5.3) as a pure function
//!   ([`verify_health_response`](environment::verify_health_response)); the HTTP calls stay
//!   with the caller.
//! * [`credentials`]: [`resolve_credentials`](credentials::resolve_credentials) (cli.md §5.1):
//!   a direct key, a named profile, the one implicit profile, or unconfigured.
//! * [`files`]: `CANON_HOME`, the `agents.json` path and its reader with the
//!   `CANON_AGENTS_JSON_BOOTSTRAP` merge, `pending-registrations.json`, and the write procedure
//!   of cli.md §6.1 (Python `json.dumps(indent=2, sort_keys=True)` bytes, temp file, `0600`,
//!   rename); [`pyjson`] is that byte layout.
//! * [`naming`]: the default local profile name (cli.md §4.3 step 1) and `localRegistrationId`.
//! * [`timestamp`]: the `YYYY-MM-DDTHH:MM:SSZ` text of `registeredAt` and `submittedAt` for a
//!   time the caller read.
//!
//! Errors are three `thiserror` enums, one per family: [`ConnectionError`], [`CredentialError`]
//! and [`StoreError`]. Messages the spec marks [parity] are reproduced byte for byte.
//!
//! Invariants: API keys are [`canon_wire::secret::ApiKey`] and never reach `Debug`, `Display` or
//! an error; nothing here panics on outside input (environment, `.env`, JSON files, health
//! bodies). File I/O is synchronous and limited to [`files`] and [`DotEnv::read`](env::DotEnv::read);
//! there is no network, no clock and no randomness (random numbers are parameters). Must not
//! depend on tokio, hyper or any workspace crate but `canon-wire`.

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod credentials;
pub mod env;
pub mod environment;
pub mod files;
pub mod naming;
pub mod pyjson;
mod text;
pub mod timestamp;

pub use credentials::{
    platform_affects_resolution, resolve_credentials, CredentialError, CredentialSource,
    Credentials, ProfileIdentity, Resolution,
};
pub use env::{DotEnv, EnvLookup, HermesEnv, PlatformConfig};
pub use environment::{
    resolve_connection, verify_health, verify_health_response, Connection, ConnectionError,
    ConnectionOverrides, EndpointField, HealthResponse,
};
pub use files::{AgentProfiles, CanonPaths, PendingRegistrations, StoreError};
pub use naming::{local_registration_id, profile_slug};
