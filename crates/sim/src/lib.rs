//! canon-sim: a local, in-memory, Canon-compatible server (canon-wire.md §11) and a scripted
//! OpenAI-compatible model server (hermes-host.md §20.2 item 6), so transport, adapter, CLI and
//! end-to-end tests run offline and deterministically.
//!
//! Internal to canon-hermes, with no stability promise yet: it is published so that
//! `cargo install canon-hermes` builds from crates.io, and its API may change in any release.
//!
//! # Main types
//!
//! * [`Sim::start`] binds `127.0.0.1:<port>` (0 = any) and returns a [`SimHandle`]: URLs, the
//!   default agent's API key, and the test control API of canon-wire.md §11.5 as methods (inject
//!   messages, answer interactions, raise signals, faults, clock, journal, state,
//!   [`SimHandle::wait_for`]). The same control API is served over HTTP under `/__sim/`
//!   ([`control`]).
//! * [`config::SimConfig`] / [`config::Switches`]: seed, environment and behaviour switches.
//! * [`faults::FaultRule`]: fault injection of canon-wire.md §11.6.
//! * [`model::ModelServer`] / [`model::Script`]: the scripted model.
//! * [`config::TlsIdentity`]: optional TLS (canon-wire.md §11.1 S3); [`tls::TEST_CA_PEM`] is
//!   the committed test CA a test client trusts.
//! * [`journal::JournalEntry`] and [`journal::canonical`] (the comparable form of
//!   canon-wire.md §12.4); [`verbs::merge_intent`] (the verb intent a wire request stands
//!   for, logged per verb).
//!
//! Module map: [`server`] (hyper plumbing, faults, journaling) dispatches to [`api`] (REST, which
//! routes on to [`interactions`] and [`verbs`]), [`stream`] (SSE) and [`control`] (`/__sim/`),
//! after the optional TLS handshake of [`tls`]; they all reach the state through
//! [`shared::Shared`]. [`http`] (request and reply types) and [`checks`] (the request checks the
//! handlers share) are helpers the handlers import; [`state`] holds the canon-wire.md §11.2 model
//! and the canon-wire.md §11.4 emission rule.
//!
//! # Invariants
//!
//! * Loopback only: the listener binds 127.0.0.1 and the simulator never opens an outbound
//!   connection, with or without TLS.
//! * Bounded memory: messages, histories, the journal, replay buffers, uploads and fault rules
//!   have fixed caps (see the `*_CAP` constants).
//! * Deterministic: ids and tokens come from the seed; every deadline reads the controllable
//!   clock ([`clock::SimClock`]).
//! * Never panics on request input; refusals are the HTTP answers Canon would give.
//! * The server-side wake verdict is computed by `canon_dispatch` (the contracts rule), and
//!   cards are validated by `canon_cards`.
//!
//! # Dependencies
//!
//! canon-dispatch and canon-cards only among our crates (never transport, adapter or cli);
//! tokio, hyper, hyper-util, http-body-util and bytes for serving; rustls (ring provider, no
//! default features) and tokio-rustls for the optional TLS mode.

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod api;
pub mod body;
pub mod checks;
pub mod clock;
pub mod config;
pub mod control;
pub mod error;
pub mod faults;
pub mod http;
pub mod ids;
pub mod interactions;
pub mod journal;
pub mod model;
pub mod server;
pub mod shared;
pub mod state;
pub mod stream;
pub mod tls;
pub mod verbs;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

pub use config::{SimConfig, Switches, TlsIdentity};
pub use error::SimError;
pub use state::{ConversationSpec, PrincipalSpec, State};

use crate::faults::FaultRule;
use crate::journal::JournalEntry;
use crate::shared::Shared;
use crate::state::StreamCmd;

/// The id of the default agent created at start.
pub const DEFAULT_AGENT: &str = "a-hermes";
/// The id of the default human owner.
pub const DEFAULT_OWNER: &str = "h-owner";
/// The id of the default direct conversation.
pub const DEFAULT_CONVERSATION: &str = "c-direct";

/// Entry point.
#[derive(Debug)]
pub struct Sim;

impl Sim {
    /// Starts a simulator on the current tokio runtime.
    pub async fn start(config: SimConfig) -> Result<SimHandle, SimError> {
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let (shared, addr, stream_addr, stop) = server::start(config).await?;
        Ok(SimHandle {
            shared,
            addr,
            stream_addr,
            scheme,
            stop,
        })
    }
}

/// A running simulator. Dropping it stops the listener.
#[derive(Debug)]
pub struct SimHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stream_addr: SocketAddr,
    /// `http` or `https` (with [`SimConfig::tls`]).
    scheme: &'static str,
    stop: watch::Sender<bool>,
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl SimHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The REST base URL (`http://127.0.0.1:<port>`, `https://` with [`SimConfig::tls`]).
    pub fn base_url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.addr.port())
    }

    /// The stream base URL (the REST origin unless `separate_stream_port` is set).
    pub fn stream_url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.stream_addr.port())
    }

    /// The stream listener's address.
    pub fn stream_addr(&self) -> SocketAddr {
        self.stream_addr
    }

    /// A ready `agents.json` (canon-wire.md §1.3) with one profile, `profile_name`, for the
    /// default agent (canon-wire.md §11.1 S4).
    pub fn agents_json(&self, profile_name: &str) -> Value {
        self.shared
            .read(|s| control::agents_json(s, DEFAULT_AGENT, profile_name))
    }

    /// The API key of the default agent.
    pub fn api_key(&self) -> String {
        self.key_of(DEFAULT_AGENT).unwrap_or_default()
    }

    /// The first API key of `agent`.
    pub fn key_of(&self, agent: &str) -> Option<String> {
        self.shared.read(|s| s.key_of(agent))
    }

    /// The `--print-env` lines for the default agent.
    pub fn env_lines(&self) -> Vec<String> {
        self.shared.read(|s| control::env_lines(s, DEFAULT_AGENT))
    }

    /// Runs `f` on the state (announces a change, waking `wait_for` and streams).
    pub fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        self.shared.with(f)
    }

    /// Reads the state.
    pub fn read_state<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        self.shared.read(f)
    }

    /// Empties all state, keeps the seed.
    pub fn reset(&self) {
        self.shared.with(State::reset);
    }

    /// Creates a principal; returns its id.
    pub fn create_principal(&self, spec: PrincipalSpec) -> String {
        self.shared.with(|s| s.create_principal(spec))
    }

    /// Creates a conversation; returns its id.
    pub fn create_conversation(&self, spec: ConversationSpec) -> String {
        self.shared.with(|s| s.create_conversation(spec))
    }

    /// Injects a message; returns the serialized message.
    pub fn inject_message(&self, injection: &control::Injection) -> Result<Value, SimError> {
        self.shared
            .with(|s| control::inject(s, injection))
            .map_err(SimError::Control)
    }

    /// Injects another agent's N-part answer.
    pub fn inject_long_agent_answer(
        &self,
        answer: &control::LongAnswer,
    ) -> Result<Vec<Value>, SimError> {
        self.shared
            .with(|s| control::inject_long_answer(s, answer))
            .map_err(SimError::Control)
    }

    /// Answers a pending interaction (and emits the receipt).
    pub fn respond_interaction(
        &self,
        response: &interactions::Response,
    ) -> Result<Value, SimError> {
        self.shared
            .with(|s| interactions::respond(s, response))
            .map_err(SimError::Control)
    }

    /// Raises a signal.
    pub fn raise_signal(&self, signal: &control::Signal) -> Result<Value, SimError> {
        self.shared
            .with(|s| control::raise_signal(s, signal))
            .map_err(SimError::Control)
    }

    /// Emits an arbitrary event to `agent`'s stream.
    pub fn push_event(&self, agent: &str, event: &str, data: Value, durable: bool) -> u64 {
        self.shared.with(|s| s.emit(agent, event, data, durable))
    }

    /// Emits `agent.context` with `agent`'s current owner and outbound policy (after a test
    /// changed them), honouring the `agentContextOmitPolicy` switch.
    pub fn push_agent_context(&self, agent: &str) -> u64 {
        self.shared.with(|s| {
            let p = s.principals.get(agent);
            let mut data = serde_json::json!({
                "agentId": agent,
                "ownerId": p.and_then(|p| p.owner_id.clone()),
            });
            if !s.config.switches.agent_context_omit_policy {
                data["outboundPolicy"] = serde_json::json!(p.map(|p| p.outbound_policy.clone()));
            }
            s.emit(agent, "agent.context", data, true)
        })
    }

    /// Approves a pending registration; returns the new agent id.
    pub fn approve_registration(&self, request_id: &str) -> Option<String> {
        self.shared
            .with(|s| api::approve_registration(s, request_id))
    }

    /// Rejects a pending registration.
    pub fn reject_registration(&self, request_id: &str) -> bool {
        self.shared
            .with(|s| api::reject_registration(s, request_id))
    }

    /// Advances the sim clock.
    pub fn advance_clock(&self, ms: u64) {
        self.shared.with(|s| s.clock.advance(ms));
    }

    /// Sets the sim clock.
    pub fn set_clock(&self, at_ms: u64) {
        self.shared.with(|s| s.clock.set(at_ms));
    }

    /// Sim time now.
    pub fn now_ms(&self) -> u64 {
        self.shared.read(State::now)
    }

    /// Sends a command to every open stream of `agent`; returns how many got it.
    pub fn stream_control(&self, agent: &str, cmd: StreamCmd) -> usize {
        self.shared
            .with(|s| control::stream_command(s, agent, &cmd))
    }

    /// Drops `agent`'s replay buffer.
    pub fn expire_replay_buffer(&self, agent: &str) {
        self.shared.with(|s| s.expire_replay_buffer(agent));
    }

    /// Changes switches at run time.
    pub fn set_switches(&self, f: impl FnOnce(&mut Switches)) {
        self.shared.with(|s| f(&mut s.config.switches));
    }

    /// Installs a fault rule; returns its id (None when the cap is reached).
    pub fn add_fault(&self, rule: FaultRule) -> Option<String> {
        self.shared.with(|s| s.faults.add(rule))
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.shared.with(|s| s.faults.clear());
    }

    /// Journal entries after `since`, optionally under a path prefix.
    pub fn journal(&self, since: u64, path_prefix: Option<&str>) -> Vec<JournalEntry> {
        self.shared.read(|s| s.journal.since(since, path_prefix))
    }

    /// A JSON snapshot of the state.
    pub fn state(&self) -> Value {
        self.shared.read(control::snapshot)
    }

    /// Waits until `f` holds, without sleeping blindly: the check re-runs on every state
    /// change. Errors with [`SimError::WaitTimeout`] after `timeout` (real time).
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        f: impl Fn(&State) -> bool,
    ) -> Result<(), SimError> {
        if control::wait(&self.shared, timeout, f).await {
            Ok(())
        } else {
            Err(SimError::WaitTimeout {
                timeout,
                what: what.to_owned(),
            })
        }
    }
}
