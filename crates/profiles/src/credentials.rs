//! Credential resolution (cli.md §5.1): which agent key and which connection a process uses.
//!
//! [`resolve_credentials`] tries, in order, a direct key (`CANON_API_KEY`, which then needs
//! `CANON_ENVIRONMENT_ID`), a named profile (`CANON_AGENT` or the platform extras), and the one
//! Hermes profile of `agents.json`; with none it answers [`Resolution::Unconfigured`]. A profile
//! must pass the profile rules of [`profile_credentials`], which fail closed.

use canon_wire::secret::ApiKey;
use serde_json::{Map, Value};

use crate::env::{extra_string, setting, EnvLookup, PlatformConfig};
use crate::environment::{resolve_connection, Connection, ConnectionError, ConnectionOverrides};
use crate::files::{AgentProfiles, StoreError};
use crate::text::non_blank;

/// The `clientType` of profiles this adapter may use (cli.md §6.1).
pub const HERMES_CLIENT_TYPE: &str = "hermes";

/// The keys a usable Hermes profile must hold, in the order the error lists them (cli.md §5.1).
pub const REQUIRED_PROFILE_KEYS: [&str; 9] = [
    "apiKey",
    "agentId",
    "agentName",
    "registeredAt",
    "environmentId",
    "baseUrl",
    "streamUrl",
    "rtdbUrl",
    "firebaseApiKey",
];

/// The platform extras that name a profile, in lookup order (cli.md §5.1 rule 2).
pub const PROFILE_NAME_EXTRAS: [&str; 4] = ["agent", "profile", "canon_agent", "CANON_AGENT"];

/// Credentials that do not resolve (cli.md §5.1). Messages are [parity] text; connection and
/// file errors keep their own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// `CANON_API_KEY` without `CANON_ENVIRONMENT_ID`.
    #[error("CANON_ENVIRONMENT_ID is required when CANON_API_KEY is used directly")]
    DirectKeyWithoutEnvironment,
    /// The named profile is not in `agents.json`.
    #[error(
        "Canon profile \"{name}\" not found in {path}. Set CANON_AGENTS_JSON_BOOTSTRAP, set \
         CANON_API_KEY, or re-run registration."
    )]
    ProfileNotFound {
        /// The profile name.
        name: String,
        /// The `agents.json` path, as displayed.
        path: String,
    },
    /// No name was given and more than one Hermes profile exists.
    #[error("Multiple Canon profiles are available. Set CANON_AGENT to choose one.")]
    MultipleProfiles {
        /// The candidates, sorted.
        names: Vec<String>,
    },
    /// The profile belongs to another Canon runtime.
    #[error("Canon profile \"{name}\" is not registered for Hermes")]
    NotForHermes {
        /// The profile name.
        name: String,
    },
    /// The profile lacks identity or environment fields (an older, unbound profile).
    #[error(
        "Canon profile \"{name}\" is missing identity or environment binding: {}",
        missing.join(", ")
    )]
    MissingBinding {
        /// The profile name.
        name: String,
        /// The missing keys, in [`REQUIRED_PROFILE_KEYS`] order.
        missing: Vec<&'static str>,
    },
    /// The connection (given, or a profile's stored snapshot) is invalid.
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    /// `agents.json` could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where resolved credentials came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// `CANON_API_KEY` (or the platform's `api_key`/`token`/extra): no profile.
    DirectKey,
    /// A profile of `agents.json`.
    Profile(ProfileIdentity),
}

/// The identity a profile holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileIdentity {
    /// The profile name (the `agents.json` key).
    pub name: String,
    /// `agentId`.
    pub agent_id: String,
    /// `agentName`.
    pub agent_name: String,
    /// Chosen as the only Hermes profile, without a name.
    pub implicit: bool,
}

/// Resolved credentials. `Debug` never shows the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The agent API key.
    pub api_key: ApiKey,
    /// The connection. A non-packaged environment is not bound yet (`project_id: None`): its
    /// project comes from the health check (cli.md §5.3).
    pub connection: Connection,
    /// Where they came from.
    pub source: CredentialSource,
}

impl Credentials {
    /// The profile name, when they came from a profile.
    pub fn profile_name(&self) -> Option<&str> {
        match &self.source {
            CredentialSource::Profile(identity) => Some(&identity.name),
            CredentialSource::DirectKey => None,
        }
    }
}

/// The outcome of resolution when nothing is wrong.
// Resolved once per process and matched at once: boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Credentials and a connection.
    Configured(Credentials),
    /// No key, no profile name, no Hermes profile: not an error (`configured: false`).
    Unconfigured,
}

/// The settings the resolver reads, as (key, variable) pairs (cli.md §5.1): the API key, the
/// environment id and the four endpoint overrides of rule 1. Each may come from env, and from a
/// platform config's extras under the key, the lowercased variable or the variable.
pub const CREDENTIAL_SETTINGS: [(&str, &str); 6] = [
    ("api_key", "CANON_API_KEY"),
    ("environment_id", "CANON_ENVIRONMENT_ID"),
    ("base_url", "CANON_BASE_URL"),
    ("stream_url", "CANON_STREAM_URL"),
    ("rtdb_url", "CANON_RTDB_URL"),
    ("firebase_api_key", "CANON_FIREBASE_API_KEY"),
];

/// The direct key's connection settings of cli.md §5.1 rule 1: the environment id and the four
/// endpoint overrides, each from env, then the platform extras.
fn direct_connection_inputs(
    env: &dyn EnvLookup,
    platform: Option<&PlatformConfig>,
) -> (Option<String>, ConnectionOverrides) {
    let [_, environment_id, base_url, stream_url, rtdb_url, firebase_api_key] =
        CREDENTIAL_SETTINGS.map(|(key, name)| setting(env, platform, key, name));
    (
        environment_id,
        ConnectionOverrides {
            base_url,
            stream_url,
            rtdb_url,
            firebase_api_key,
        },
    )
}

/// Whether resolving with `platform` can differ from resolving without it (cli.md §5.1): it
/// holds a non-blank `api_key` or `token`, or a non-blank string extra under a name the
/// resolver reads (a setting of [`CREDENTIAL_SETTINGS`] under any of its three spellings, or a
/// profile name of [`PROFILE_NAME_EXTRAS`]). Other extras (`turn_verbosity`, the gateway's
/// `group_sessions_per_user`) never change the credentials, so a caller that already resolved
/// without a platform config may keep that result.
pub fn platform_affects_resolution(platform: &PlatformConfig) -> bool {
    let secret = [&platform.api_key, &platform.token]
        .into_iter()
        .flatten()
        .any(|key| non_blank(key.expose()).is_some());
    let named = |key: &str| {
        platform
            .extra
            .get(key)
            .and_then(Value::as_str)
            .and_then(non_blank)
            .is_some()
    };
    secret
        || PROFILE_NAME_EXTRAS.into_iter().any(named)
        || CREDENTIAL_SETTINGS
            .into_iter()
            .any(|(key, name)| named(key) || named(&name.to_ascii_lowercase()) || named(name))
}

/// The named profile, if any: env `CANON_AGENT` (trimmed), else the first of the platform
/// extras `agent`, `profile`, `canon_agent`, `CANON_AGENT`.
pub fn profile_name(env: &dyn EnvLookup, platform: Option<&PlatformConfig>) -> Option<String> {
    env.var("CANON_AGENT")
        .as_deref()
        .and_then(non_blank)
        .map(str::to_owned)
        .or_else(|| extra_string(platform, &PROFILE_NAME_EXTRAS))
}

/// Resolves credentials (cli.md §5.1). `load_agents` reads `agents.json` (with the bootstrap
/// merge, see [`crate::files::load_agents`]); it is called only when a profile is needed, so a
/// direct key works whatever state that file is in.
///
/// 1. Direct key: `CANON_API_KEY` (or the platform's `api_key`, `token`, `extra.api_key`, …)
///    non-empty → `CANON_ENVIRONMENT_ID` is required, and the connection is that id with the
///    `CANON_BASE_URL`/`CANON_STREAM_URL`/`CANON_RTDB_URL`/`CANON_FIREBASE_API_KEY` overrides.
/// 2. Named profile ([`profile_name`]): it must exist, then pass [`profile_credentials`].
/// 3. No name: the profiles whose `clientType` is absent or `hermes`; exactly one is used (same
///    rules), more than one is an error, none is [`Resolution::Unconfigured`].
pub fn resolve_credentials(
    env: &dyn EnvLookup,
    platform: Option<&PlatformConfig>,
    load_agents: &mut dyn FnMut() -> Result<AgentProfiles, StoreError>,
) -> Result<Resolution, CredentialError> {
    let (key, name) = CREDENTIAL_SETTINGS[0];
    if let Some(key) = setting(env, platform, key, name) {
        let (environment_id, overrides) = direct_connection_inputs(env, platform);
        let environment_id = environment_id.ok_or(CredentialError::DirectKeyWithoutEnvironment)?;
        let connection = resolve_connection(&environment_id, &overrides)?;
        return Ok(Resolution::Configured(Credentials {
            api_key: ApiKey::new(key),
            connection,
            source: CredentialSource::DirectKey,
        }));
    }
    let profiles = match profile_name(env, platform) {
        Some(name) => {
            let profiles = load_agents()?;
            return profile_credentials(&profiles, &name, false).map(Resolution::Configured);
        }
        None => load_agents()?,
    };
    let candidates = profiles.hermes_candidates();
    match candidates.as_slice() {
        [] => Ok(Resolution::Unconfigured),
        [only] => profile_credentials(&profiles, only, true).map(Resolution::Configured),
        _ => Err(CredentialError::MultipleProfiles {
            names: candidates.clone(),
        }),
    }
}

/// Whether a profile's `clientType` allows Hermes: absent (or `null`) or exactly `hermes`.
pub(crate) fn is_for_hermes(entry: &Map<String, Value>) -> bool {
    match entry.get("clientType") {
        None | Some(Value::Null) => true,
        Some(value) => value.as_str() == Some(HERMES_CLIENT_TYPE),
    }
}

/// The profile rules (cli.md §5.1; setup's existing-profile check, cli.md §4.4 step 3): the
/// profile must exist; a `clientType` other than `hermes` refuses; every key of
/// [`REQUIRED_PROFILE_KEYS`] must be a non-blank string (a missing, empty, or non-string value
/// is listed as missing: older unbound profiles fail closed); and the stored snapshot is
/// re-validated with cli.md §5.2, packaged defaults never replacing a stored value.
pub fn profile_credentials(
    profiles: &AgentProfiles,
    name: &str,
    implicit: bool,
) -> Result<Credentials, CredentialError> {
    let entry = profiles
        .get(name)
        .ok_or_else(|| CredentialError::ProfileNotFound {
            name: name.to_owned(),
            path: profiles.path().display().to_string(),
        })?;
    if !is_for_hermes(entry) {
        return Err(CredentialError::NotForHermes {
            name: name.to_owned(),
        });
    }
    let field = |key: &str| entry.get(key).and_then(Value::as_str).and_then(non_blank);
    let missing: Vec<&'static str> = REQUIRED_PROFILE_KEYS
        .into_iter()
        .filter(|key| field(key).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(CredentialError::MissingBinding {
            name: name.to_owned(),
            missing,
        });
    }
    let text = |key: &str| field(key).unwrap_or_default().to_owned();
    let overrides = ConnectionOverrides {
        base_url: Some(text("baseUrl")),
        stream_url: Some(text("streamUrl")),
        rtdb_url: Some(text("rtdbUrl")),
        firebase_api_key: Some(text("firebaseApiKey")),
    };
    let connection = resolve_connection(&text("environmentId"), &overrides)?;
    Ok(Credentials {
        api_key: ApiKey::new(text("apiKey")),
        connection,
        source: CredentialSource::Profile(ProfileIdentity {
            name: name.to_owned(),
            agent_id: text("agentId"),
            agent_name: text("agentName"),
            implicit,
        }),
    })
}

/// The `agents.json` entry setup saves for an approved agent (cli.md §6.1): the identity,
/// `registeredAt` (UTC `YYYY-MM-DDTHH:MM:SSZ`, from the caller's clock), `clientType: hermes`
/// and the connection snapshot.
pub fn hermes_profile_entry(
    api_key: &ApiKey,
    agent_id: &str,
    agent_name: &str,
    registered_at: &str,
    connection: &Connection,
) -> Map<String, Value> {
    let mut entry = Map::new();
    let mut put = |key: &str, value: &str| {
        entry.insert(key.to_owned(), Value::String(value.to_owned()));
    };
    put("apiKey", api_key.expose());
    put("agentId", agent_id);
    put("agentName", agent_name);
    put("registeredAt", registered_at);
    put("clientType", HERMES_CLIENT_TYPE);
    put("environmentId", &connection.environment_id);
    put("baseUrl", &connection.base_url);
    put("streamUrl", &connection.stream_url);
    put("rtdbUrl", &connection.rtdb_url);
    put("firebaseApiKey", &connection.firebase_api_key);
    entry
}

#[cfg(test)]
mod tests;
