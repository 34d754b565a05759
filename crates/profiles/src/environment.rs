//! Canon environments and connections (cli.md §5.2, §5.3; canon-wire.md §1.1–§1.2).
//!
//! * The packaged environments come from `runtime-endpoint-defaults.json`, embedded in the crate
//!   ([`packaged`], [`packaged_environments`], [`default_environment_id`]).
//! * [`resolve_connection`] turns an environment id and the endpoint overrides into a
//!   [`Connection`] (rules 1–5). A packaged id is bound to its project at once; a non-packaged
//!   id has no packaged project, so its RTDB binding (rule 5) is a separate step,
//!   [`Connection::bind_project`], run with the project the health check reported.
//! * [`verify_health_response`] is the pass rule of one health response, and [`verify_health`]
//!   the whole two-step check over both responses; the HTTP calls stay with the caller.

use std::fmt;
use std::net::IpAddr;
use std::sync::OnceLock;

use serde_json::Value;

use crate::text::{non_blank, py_strip};

/// The packaged environment table (cli.md §5.2), shipped verbatim.
const RUNTIME_ENDPOINT_DEFAULTS: &str = include_str!("runtime-endpoint-defaults.json");

/// The environment a setup prompt offers first (cli.md §4.2, `defaultEnvironmentId`).
pub const DEFAULT_ENVIRONMENT_ID: &str = "canon-prod-v1";

/// One packaged environment (cli.md §5.2 table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackagedEnvironment {
    /// `environmentId`.
    pub environment_id: String,
    /// `projectId`: the Firebase project the health bodies and the RTDB host must name.
    pub project_id: String,
    /// `region`.
    pub region: String,
    /// `apiBaseUrl`.
    pub api_base_url: String,
    /// `streamUrl`.
    pub stream_url: String,
    /// `rtdbUrl`.
    pub rtdb_url: String,
    /// `firebaseWebApiKey` (a public web key, not a secret).
    pub firebase_web_api_key: String,
}

struct Packaged {
    default_id: String,
    environments: Vec<PackagedEnvironment>,
}

fn table() -> &'static Packaged {
    static TABLE: OnceLock<Packaged> = OnceLock::new();
    TABLE.get_or_init(|| {
        parse_defaults(RUNTIME_ENDPOINT_DEFAULTS)
            .expect("the embedded runtime-endpoint-defaults.json is valid (unit test)")
    })
}

fn parse_defaults(text: &str) -> Option<Packaged> {
    let root: Value = serde_json::from_str(text).ok()?;
    let field = |env: &Value, key: &str| env.get(key)?.as_str().map(str::to_owned);
    let mut environments = Vec::new();
    for (id, env) in root.get("environments")?.as_object()? {
        environments.push(PackagedEnvironment {
            environment_id: id.clone(),
            project_id: field(env, "projectId")?,
            region: field(env, "region")?,
            api_base_url: field(env, "apiBaseUrl")?,
            stream_url: field(env, "streamUrl")?,
            rtdb_url: field(env, "rtdbUrl")?,
            firebase_web_api_key: field(env, "firebaseWebApiKey")?,
        });
    }
    Some(Packaged {
        default_id: root.get("defaultEnvironmentId")?.as_str()?.to_owned(),
        environments,
    })
}

/// Every packaged environment, in the file's order.
pub fn packaged_environments() -> &'static [PackagedEnvironment] {
    &table().environments
}

/// The packaged environment `environment_id` (compared after trimming), if any.
pub fn packaged(environment_id: &str) -> Option<&'static PackagedEnvironment> {
    let id = py_strip(environment_id);
    packaged_environments()
        .iter()
        .find(|e| e.environment_id == id)
}

/// The file's `defaultEnvironmentId` (`canon-prod-v1`).
pub fn default_environment_id() -> &'static str {
    &table().default_id
}

/// Which endpoint a connection error names (the spelling of the packaged table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndpointField {
    /// `apiBaseUrl` (`CANON_BASE_URL`).
    ApiBaseUrl,
    /// `streamUrl` (`CANON_STREAM_URL`).
    StreamUrl,
    /// `rtdbUrl` (`CANON_RTDB_URL`).
    RtdbUrl,
    /// `firebaseWebApiKey` (`CANON_FIREBASE_API_KEY`).
    FirebaseWebApiKey,
}

impl EndpointField {
    /// The field's name in errors.
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointField::ApiBaseUrl => "apiBaseUrl",
            EndpointField::StreamUrl => "streamUrl",
            EndpointField::RtdbUrl => "rtdbUrl",
            EndpointField::FirebaseWebApiKey => "firebaseWebApiKey",
        }
    }
}

impl fmt::Display for EndpointField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A connection that cannot be used (cli.md §5.2, §5.3). Every message is [parity] text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// A non-packaged id that is not `^[a-z0-9][a-z0-9-]{0,62}$` (cli.md §5.2 rule 2).
    #[error("Unsupported Canon environment ID: {environment_id}")]
    UnsupportedEnvironment {
        /// The id (trimmed).
        environment_id: String,
    },
    /// An endpoint with no value, override or packaged default (rules 2–4).
    #[error("Missing Canon runtime endpoint: {environment_id}.{field}")]
    MissingEndpoint {
        /// The environment.
        environment_id: String,
        /// Which endpoint.
        field: EndpointField,
    },
    /// A URL that is neither `https` nor `http` on a loopback host (rule 3).
    #[error("Canon runtime endpoint must use HTTPS (or local HTTP): {environment_id}.{field}")]
    InsecureEndpoint {
        /// The environment.
        environment_id: String,
        /// Which endpoint.
        field: EndpointField,
    },
    /// The RTDB host does not belong to the environment's project (rule 5).
    #[error("Canon RTDB endpoint for {environment_id} must belong to project {project_id}")]
    RtdbProject {
        /// The environment.
        environment_id: String,
        /// The project it must belong to.
        project_id: String,
    },
    /// A health response that does not prove the environment (cli.md §5.3).
    #[error("Canon runtime endpoint {url} does not match environment {environment_id}")]
    HealthMismatch {
        /// The health URL.
        url: String,
        /// The environment.
        environment_id: String,
    },
}

/// Endpoint values that replace the packaged defaults (`CANON_BASE_URL`, `CANON_STREAM_URL`,
/// `CANON_RTDB_URL`, `CANON_FIREBASE_API_KEY`, or a profile's stored snapshot). Blank counts
/// as absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionOverrides {
    /// `apiBaseUrl`.
    pub base_url: Option<String>,
    /// `streamUrl`.
    pub stream_url: Option<String>,
    /// `rtdbUrl`.
    pub rtdb_url: Option<String>,
    /// `firebaseWebApiKey`.
    pub firebase_api_key: Option<String>,
}

/// A validated connection (canon-wire.md §1.1): URLs trimmed and without trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// The environment id (trimmed).
    pub environment_id: String,
    /// The project: the packaged one, or the one a health check reported and
    /// [`Connection::bind_project`] accepted; `None` for a non-packaged environment not yet
    /// checked (which must not be used).
    pub project_id: Option<String>,
    /// The packaged region; empty for a non-packaged environment.
    pub region: String,
    /// REST base URL.
    pub base_url: String,
    /// SSE stream base URL.
    pub stream_url: String,
    /// Realtime Database URL (validated and stored, never contacted).
    pub rtdb_url: String,
    /// Firebase web API key (public; validated and stored).
    pub firebase_api_key: String,
}

impl Connection {
    /// Whether the environment is one of the packaged ones.
    pub fn is_packaged(&self) -> bool {
        packaged(&self.environment_id).is_some()
    }

    /// Rule 5 with `project_id` (for a non-packaged environment, the project the health check
    /// reported): the RTDB host must be loopback (`localhost` or a loopback IP literal), or
    /// its first DNS label must be the project or start with `<project>-` and the host must end
    /// with `.firebaseio.com` or `.firebasedatabase.app`. Returns the connection bound to it.
    pub fn bind_project(&self, project_id: &str) -> Result<Connection, ConnectionError> {
        check_rtdb_binding(&self.environment_id, &self.rtdb_url, project_id)?;
        Ok(Connection {
            project_id: Some(project_id.to_owned()),
            ..self.clone()
        })
    }
}

/// `^[a-z0-9][a-z0-9-]{0,62}$`.
fn is_valid_environment_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    let head = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (1..=63).contains(&bytes.len())
        && bytes.first().is_some_and(head)
        && bytes[1..].iter().all(|b| head(b) || *b == b'-')
}

/// Resolves `environment_id` and `overrides` into a connection (cli.md §5.2):
///
/// 1. The id is trimmed. A packaged id takes the packaged value for every override not given.
/// 2. A non-packaged id must match `^[a-z0-9][a-z0-9-]{0,62}$` and have all four values.
/// 3. Each URL is trimmed and loses its trailing `/`s; it must be `https`, or `http` on
///    `localhost`, `127.0.0.1` or `::1`.
/// 4. The Firebase key is trimmed and must be non-empty.
/// 5. A packaged id's RTDB host must belong to its project; a non-packaged id is left unbound
///    (`project_id: None`) for [`Connection::bind_project`] after the health check.
///
/// Fields are checked in the order `apiBaseUrl`, `streamUrl`, `rtdbUrl`, `firebaseWebApiKey`.
pub fn resolve_connection(
    environment_id: &str,
    overrides: &ConnectionOverrides,
) -> Result<Connection, ConnectionError> {
    let id = py_strip(environment_id).to_owned();
    let defaults = packaged(&id);
    if defaults.is_none() && !is_valid_environment_id(&id) {
        return Err(ConnectionError::UnsupportedEnvironment { environment_id: id });
    }
    let pick = |given: &Option<String>, default: fn(&PackagedEnvironment) -> &String| {
        given
            .as_deref()
            .and_then(non_blank)
            .map(str::to_owned)
            .or_else(|| defaults.map(|d| default(d).clone()))
    };
    let url = |given: &Option<String>, default, field| {
        let value = pick(given, default).unwrap_or_default();
        normalize_url(&id, &value, field)
    };
    let base_url = url(
        &overrides.base_url,
        |d| &d.api_base_url,
        EndpointField::ApiBaseUrl,
    )?;
    let stream_url = url(
        &overrides.stream_url,
        |d| &d.stream_url,
        EndpointField::StreamUrl,
    )?;
    let rtdb_url = url(&overrides.rtdb_url, |d| &d.rtdb_url, EndpointField::RtdbUrl)?;
    let firebase_api_key = pick(&overrides.firebase_api_key, |d| &d.firebase_web_api_key)
        .ok_or_else(|| ConnectionError::MissingEndpoint {
            environment_id: id.clone(),
            field: EndpointField::FirebaseWebApiKey,
        })?;
    let connection = Connection {
        environment_id: id.clone(),
        project_id: None,
        region: defaults.map(|d| d.region.clone()).unwrap_or_default(),
        base_url,
        stream_url,
        rtdb_url,
        firebase_api_key,
    };
    match defaults {
        Some(d) => connection.bind_project(&d.project_id),
        None => Ok(connection),
    }
}

/// Rule 3 for one URL: the normalized URL, or the error naming `field`.
fn normalize_url(
    environment_id: &str,
    raw: &str,
    field: EndpointField,
) -> Result<String, ConnectionError> {
    let url = py_strip(raw).trim_end_matches('/');
    if url.is_empty() {
        return Err(ConnectionError::MissingEndpoint {
            environment_id: environment_id.to_owned(),
            field,
        });
    }
    if !is_secure_or_local(url) {
        return Err(ConnectionError::InsecureEndpoint {
            environment_id: environment_id.to_owned(),
            field,
        });
    }
    Ok(url.to_owned())
}

/// Whether `url` is `https`, or `http` with the host exactly `localhost`, `127.0.0.1` or `::1`
/// (scheme and host compared case-insensitively, as Python's `urlparse` lower-cases them).
pub fn is_secure_or_local(url: &str) -> bool {
    let Some((scheme, _)) = url.split_once("://") else {
        return false;
    };
    match scheme.to_ascii_lowercase().as_str() {
        "https" => true,
        "http" => matches!(
            url_host(url).as_deref(),
            Some("localhost" | "127.0.0.1" | "::1")
        ),
        _ => false,
    }
}

/// The host of `scheme://[user@]host[:port]/…`, lower-cased, without IPv6 brackets; `None`
/// when there is no authority or it is empty.
pub fn url_host(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Rule 5: the RTDB host belongs to `project_id` or is loopback.
fn check_rtdb_binding(
    environment_id: &str,
    rtdb_url: &str,
    project_id: &str,
) -> Result<(), ConnectionError> {
    let host = url_host(rtdb_url).unwrap_or_default();
    let loopback = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    let label = host.split('.').next().unwrap_or_default();
    let owned = !project_id.is_empty()
        && (label == project_id || label.starts_with(&format!("{project_id}-")))
        && (host.ends_with(".firebaseio.com") || host.ends_with(".firebasedatabase.app"));
    if loopback || owned {
        Ok(())
    } else {
        Err(ConnectionError::RtdbProject {
            environment_id: environment_id.to_owned(),
            project_id: project_id.to_owned(),
        })
    }
}

/// One health response as the caller received it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HealthResponse<'a> {
    /// The URL requested (`{baseUrl}/healthz/` or `{streamUrl}/health`).
    pub url: &'a str,
    /// The HTTP status (deliberately not checked: a 503 with a correct body passes).
    pub status: u16,
    /// The `x-canon-environment-id` header, when present.
    pub environment_header: Option<&'a str>,
    /// The body parsed as JSON (`Value::Null` when it was not JSON).
    pub body: &'a Value,
}

/// The pass rule of one health response (cli.md §5.3, canon-wire.md §1.2): the
/// `x-canon-environment-id` header equals the connection's environment id, the body is an
/// object whose `environmentId` equals it too, and whose `projectId` equals the connection's
/// project; a connection without a project (non-packaged, not yet bound) accepts any non-empty
/// string. Returns the body's `projectId`. The status is ignored.
pub fn verify_health_response(
    url: &str,
    status: u16,
    environment_header: Option<&str>,
    body: &Value,
    connection: &Connection,
) -> Result<String, ConnectionError> {
    let _ = status;
    let mismatch = || ConnectionError::HealthMismatch {
        url: url.to_owned(),
        environment_id: connection.environment_id.clone(),
    };
    let environment = connection.environment_id.as_str();
    if environment_header != Some(environment) {
        return Err(mismatch());
    }
    if body.get("environmentId").and_then(Value::as_str) != Some(environment) {
        return Err(mismatch());
    }
    let project = body
        .get("projectId")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .ok_or_else(mismatch)?;
    match &connection.project_id {
        Some(expected) if expected != project => Err(mismatch()),
        _ => Ok(project.to_owned()),
    }
}

/// The whole check over both responses, in order: the API's (`GET {baseUrl}/healthz/`), then
/// the stream's (`GET {streamUrl}/health`), which must name the project the API named; then, for
/// a non-packaged environment, rule 5 with that project. Returns the bound connection.
pub fn verify_health(
    connection: &Connection,
    api: HealthResponse<'_>,
    stream: HealthResponse<'_>,
) -> Result<Connection, ConnectionError> {
    let check = |r: HealthResponse<'_>, c: &Connection| {
        verify_health_response(r.url, r.status, r.environment_header, r.body, c)
    };
    let project = check(api, connection)?;
    let learned = Connection {
        project_id: Some(project.clone()),
        ..connection.clone()
    };
    check(stream, &learned)?;
    match connection.project_id {
        Some(_) => Ok(learned),
        None => connection.bind_project(&project),
    }
}

#[cfg(test)]
mod tests;
