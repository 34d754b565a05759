//! The daemon's Canon credentials as the session sees them, and when it
//! has them resolved again with a platform config (cli.md §5.1).
//!
//! The binary resolves the credentials once at start from the environment
//! alone; the platform config (`platforms.canon` of Hermes' config.yaml:
//! `api_key`, `token`, `extra`) only reaches the daemon later, with
//! `adapter.connect` and with a `probe` that carries a config. For each of
//! those the session asks the shell to resolve with it
//! ([`ResolveCall`]; the resolver itself is `canon-profiles`, run by the
//! shell) and continues with the [`CredentialFacts`] it reports. A connect
//! adopts the result: the daemon connects with it from then on. A probe only
//! answers from it: asking whether a config would work changes nothing.
//!
//! The session never holds the key: [`CredentialFacts`] says only whether
//! one is set. The platform config's own secrets travel as
//! [`canon_wire::secret::Secret`], whose `Debug` is redacted.

use canon_wire::secret::Secret;
use serde_json::Value;

use crate::protocol::{ConnectConfig, ProbeConfig};
use crate::session::ConnectCall;

/// What resolved credentials tell the session (never the key itself).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CredentialFacts {
    /// An API key is set.
    pub api_key_set: bool,
    /// The REST base URL (empty when nothing resolved).
    pub base_url: String,
    /// The event stream URL (empty when nothing resolved).
    pub stream_url: String,
    /// The environment id, when the credentials name one.
    pub environment_id: Option<String>,
    /// The `agents.json` profile they came from, when one did.
    pub profile: Option<String>,
    /// Why they did not resolve (a cli.md §5.1 message; never a secret).
    pub error: Option<String>,
}

impl CredentialFacts {
    /// Configured: a key and a base URL (cli.md §5.1: anything less
    /// refuses `adapter.connect` with `missing_api_key`).
    pub fn configured(&self) -> bool {
        self.api_key_set && !self.base_url.is_empty()
    }
}

/// The platform config as the resolver reads it (cli.md §5.1).
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformCredentials {
    /// `api_key`.
    pub api_key: Option<Secret>,
    /// `token`.
    pub token: Option<Secret>,
    /// `extra` (a JSON object; anything else holds no setting).
    pub extra: Value,
}

impl From<&ConnectConfig> for PlatformCredentials {
    fn from(config: &ConnectConfig) -> PlatformCredentials {
        PlatformCredentials {
            api_key: config.api_key.clone(),
            token: config.token.clone(),
            extra: config.extra.0.clone(),
        }
    }
}

impl From<&ProbeConfig> for PlatformCredentials {
    fn from(config: &ProbeConfig) -> PlatformCredentials {
        PlatformCredentials {
            api_key: config.api_key.clone(),
            token: config.token.clone(),
            extra: config.extra.0.clone(),
        }
    }
}

/// Resolve the credentials with this platform config; report
/// `SessionInput::CredentialsResolved` with the call and the facts.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolveCall {
    /// The platform config to resolve with.
    pub platform: PlatformCredentials,
    /// The daemon connects with the result from now on (the shell replaces
    /// its credentials and drops the client built from the old ones).
    pub adopt: bool,
    /// What waits for the result.
    pub purpose: ResolvePurpose,
}

/// What waits for a resolution.
#[derive(Debug, Clone, PartialEq)]
pub enum ResolvePurpose {
    /// An `adapter.connect`: its settings are checked and the connect calls
    /// made with the result.
    Connect(ConnectCall),
    /// A `probe` with a config, answered from the result.
    Probe {
        /// The request's id.
        id: String,
        /// Its type.
        re: &'static str,
        /// Whether it asked for a check of Canon.
        verify: bool,
    },
}

impl ResolveCall {
    /// `adapter.connect`: resolved with its platform config and adopted.
    pub fn connect(call: ConnectCall, config: &ConnectConfig) -> ResolveCall {
        ResolveCall {
            platform: PlatformCredentials::from(config),
            adopt: true,
            purpose: ResolvePurpose::Connect(call),
        }
    }

    /// A `probe` that carries a config: resolved with it, not adopted.
    pub fn probe(id: String, re: &'static str, verify: bool, config: &ProbeConfig) -> ResolveCall {
        ResolveCall {
            platform: PlatformCredentials::from(config),
            adopt: false,
            purpose: ResolvePurpose::Probe { id, re, verify },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canon_wire::secret::Opaque;
    use serde_json::json;

    #[test]
    fn a_connect_adopts_its_resolution_and_a_probe_does_not() {
        let config = ConnectConfig {
            extra: Opaque(json!({"agent": "ops"})),
            home_channel: None,
            typing_indicator: true,
            reply_to_mode: None,
            api_key: Some(Secret::new("sk-config")),
            token: None,
        };
        let call = ConnectCall {
            id: "s:1".into(),
            re: "adapter.connect",
            busy_handler: true,
            is_reconnect: false,
        };
        let connect = ResolveCall::connect(call.clone(), &config);
        assert!(connect.adopt);
        assert_eq!(connect.purpose, ResolvePurpose::Connect(call));
        assert_eq!(connect.platform.extra, json!({"agent": "ops"}));
        assert_eq!(
            connect.platform.api_key.as_ref().map(Secret::expose),
            Some("sk-config")
        );
        assert!(!format!("{connect:?}").contains("sk-config"));

        let probe = ProbeConfig {
            extra: Opaque(json!({})),
            api_key: None,
            token: Some(Secret::new("tok")),
            enabled: true,
        };
        let probe = ResolveCall::probe("s:2".into(), "probe", true, &probe);
        assert!(!probe.adopt);
        assert_eq!(
            probe.purpose,
            ResolvePurpose::Probe {
                id: "s:2".into(),
                re: "probe",
                verify: true
            }
        );
        assert_eq!(
            probe.platform.token.as_ref().map(Secret::expose),
            Some("tok")
        );
    }

    #[test]
    fn configured_needs_a_key_and_a_base_url() {
        let facts = |key: bool, base: &str| CredentialFacts {
            api_key_set: key,
            base_url: base.to_owned(),
            ..CredentialFacts::default()
        };
        assert!(facts(true, "https://api").configured());
        assert!(!facts(false, "https://api").configured());
        assert!(!facts(true, "").configured());
    }
}
