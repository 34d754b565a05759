//! Simulator configuration: seed, environment identity and the behaviour switches of
//! canon-wire.md §11 (every validation has a lenient switch, every server choice the spec
//! leaves open has a switch with the recommended default).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The environment the simulator impersonates (canon-wire.md §11.1 S4).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Environment {
    /// `environmentId` reported by the health checks.
    pub environment_id: String,
    /// `projectId` reported by the health checks.
    pub project_id: String,
}

impl Default for Environment {
    fn default() -> Self {
        Self {
            environment_id: "canon-dev-v1".to_owned(),
            project_id: "canonmail-dev".to_owned(),
        }
    }
}

/// How approval deadlines above the ceiling are handled (canon-wire.md §11.3).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalCapMode {
    /// Ceiling 72 h; above it 400 `EXPIRES_AT_OUT_OF_RANGE`.
    #[default]
    Strict,
    /// Ceiling 30 min (the legacy server cap that canon-wire.md §0.1 D2 retries against); above
    /// it 400.
    Legacy,
    /// Ceiling 72 h, silently clamped and echoed.
    Clamp,
}

/// Behaviour switches. Defaults follow today's server (parity) or the spec's recommendation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Switches {
    /// Emit non-waking messages with `turnDispatch:{kind:"suppress"}` instead of not at all.
    pub emit_suppressed: bool,
    /// Emit every message without `turnDispatch` (an older stream service).
    pub legacy_no_dispatch: bool,
    /// Stamp `inboundDisposition:"queued"` while the agent's turn is open (canon-wire.md §13 Q17).
    pub queued_stamping: bool,
    /// Emit receipts when a test answers an interaction.
    pub receipts: bool,
    /// Which interaction kinds emit receipts (`approval`, `input`, `card`).
    pub receipt_kinds: Vec<String>,
    /// Receipts carry `turnDispatch:{kind:"run_turn"}` (the strictest setting).
    pub receipts_run_turn: bool,
    /// Answer `GET /conversations` with a bare array.
    pub conversations_bare_array: bool,
    /// Answer uploads with the legacy `{url}` only.
    pub upload_legacy: bool,
    /// Heartbeat interval in ms (0 = off).
    pub heartbeat_ms: u64,
    /// Heartbeats as `event: heartbeat` frames instead of `: keepalive` comments.
    pub heartbeat_as_event: bool,
    /// Omit `outboundPolicy` from `agent.context`.
    pub agent_context_omit_policy: bool,
    /// Include `admissionId` in reply authorities.
    pub reply_authority_admission_id: bool,
    /// Issue malformed reply authorities: `short_token` or `wrong_source` (null = valid).
    pub reply_authority_fault: Option<String>,
    /// A repeat consume of an input/card replays the result instead of 404 (canon-wire.md §13 Q19).
    pub consume_replay: bool,
    /// Omit `respondedBy` from consume results.
    pub consume_omit_responded_by: bool,
    /// Report this principal as `respondedBy` instead of the real responder.
    pub consume_spoof_responded_by: Option<String>,
    /// Answer every consume with 409.
    pub consume_conflict: bool,
    /// Approval deadline ceiling handling.
    pub approval_cap_mode: ApprovalCapMode,
    /// Accept approval detail values up to 4000 chars instead of 500.
    pub lenient_details: bool,
    /// Validate cards with canon-cards on request.
    pub validate_cards: bool,
    /// Replay unread messages to a fresh stream without `Last-Event-ID` (canon-wire.md §13 Q16).
    pub backfill_unread_on_connect: bool,
    /// Ring the `runtime.control` doorbell when a signal is raised.
    pub doorbell: bool,
    /// Return a malformed agent directory from `GET /agents/discover`.
    pub malformed_directory: bool,
    /// Enforce the message rate limits.
    pub rate_limits: bool,
    /// Skip the message limit checks of canon-wire.md §4.3 (text, metadata, attachments, ids).
    pub lenient_messages: bool,
    /// Poll count after which a registration is approved on its own (null = never).
    pub auto_approve_after_polls: Option<u32>,
    /// Report this `projectId` from `GET /health` (the stream service's health path) instead of
    /// the environment's, as a stream service of another project would (canon-wire.md §1.2);
    /// null = the environment's.
    pub stream_health_project_id: Option<String>,
    /// Replay buffer size per agent.
    pub replay_buffer_events: usize,
    /// Replay buffer age limit (sim ms).
    pub replay_buffer_age_ms: u64,
    /// A stand-in for a wide-area network: every request but the control API's takes this many
    /// ms more, half before it is processed (the way in) and half after (the answer's way
    /// back); 0 = loopback as it is.
    pub rest_latency_ms: u64,
    /// Up to this many ms more, drawn per request from the seeded generator.
    pub rest_jitter_ms: u64,
}

impl Default for Switches {
    fn default() -> Self {
        Self {
            emit_suppressed: false,
            legacy_no_dispatch: false,
            queued_stamping: true,
            receipts: true,
            receipt_kinds: vec!["approval".to_owned(), "input".to_owned(), "card".to_owned()],
            receipts_run_turn: true,
            conversations_bare_array: false,
            upload_legacy: false,
            heartbeat_ms: 15_000,
            heartbeat_as_event: false,
            agent_context_omit_policy: false,
            reply_authority_admission_id: false,
            reply_authority_fault: None,
            consume_replay: false,
            consume_omit_responded_by: false,
            consume_spoof_responded_by: None,
            consume_conflict: false,
            approval_cap_mode: ApprovalCapMode::Strict,
            lenient_details: false,
            validate_cards: true,
            backfill_unread_on_connect: false,
            doorbell: true,
            malformed_directory: false,
            rate_limits: true,
            lenient_messages: false,
            auto_approve_after_polls: None,
            stream_health_project_id: None,
            replay_buffer_events: 1000,
            replay_buffer_age_ms: 3_600_000,
            rest_latency_ms: 0,
            rest_jitter_ms: 0,
        }
    }
}

/// Everything needed to start a simulator.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct SimConfig {
    /// Port on 127.0.0.1 (0 = any free port).
    pub port: u16,
    /// Seed of the id generator.
    pub seed: u64,
    /// Start with the clock frozen at this instant (epoch ms); null = follow the system time.
    pub frozen_clock_ms: Option<u64>,
    /// The environment impersonated.
    pub environment: Environment,
    /// Behaviour switches.
    pub switches: Switches,
    /// Create the default principals and conversation (owner, agent, direct chat).
    pub bootstrap: bool,
    /// Serve the stream on a second loopback port (proves a client keeps `baseUrl` and
    /// `streamUrl` apart; both ports serve every path).
    pub separate_stream_port: bool,
    /// Serve REST and SSE over TLS with this identity (canon-wire.md §11.1 S3); null = plain
    /// HTTP. The URLs then start with `https://`.
    pub tls: Option<TlsIdentity>,
}

/// The certificate and key the simulator serves TLS with (canon-wire.md §11.1 S3).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum TlsIdentity {
    /// The committed test identity of `crates/sim/tls/` (embedded at build time; covers
    /// `127.0.0.1` and `localhost`). Clients trust it through `tls::TEST_CA_PEM`.
    TestFixture,
    /// A PEM certificate chain (leaf first) and a PEM private key read from disk at start.
    Files {
        /// The certificate chain.
        cert: PathBuf,
        /// The private key (PKCS#8, PKCS#1 or SEC1).
        key: PathBuf,
    },
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            port: 0,
            seed: 1,
            frozen_clock_ms: None,
            environment: Environment::default(),
            switches: Switches::default(),
            bootstrap: true,
            separate_stream_port: false,
            tls: None,
        }
    }
}

impl SimConfig {
    /// The configuration tests use: seed 1, clock frozen at 2026-01-01T00:00:00Z,
    /// heartbeats off.
    pub fn for_tests() -> Self {
        let mut config = Self {
            frozen_clock_ms: Some(TEST_EPOCH_MS),
            ..Self::default()
        };
        config.switches.heartbeat_ms = 0;
        config
    }
}

/// 2026-01-01T00:00:00Z, the frozen start of [`SimConfig::for_tests`].
pub const TEST_EPOCH_MS: u64 = 1_767_225_600_000;
