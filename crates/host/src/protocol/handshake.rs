//! The handshake (hermes-host.md §19.5): the shim's `hello`, the daemon's answer with the
//! announced limits, and [`negotiate`], which checks a `hello` against the daemon's
//! [`HandshakePolicy`].

use serde::{Deserialize, Serialize};

use super::{
    ErrorBody, ErrorCode, Seams, MAX_FRAME_BYTES, MAX_INFLIGHT, MULTIPLEX_MESSAGE,
    PROTOCOL_VERSION, STALE_SHIM_MESSAGE,
};

/// `hello` (hermes-host.md §19.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Protocol versions the shim speaks.
    pub protocols: Vec<u32>,
    /// SHA-256 of the shim's installed code (its `.py` files, as
    /// `canon-hermes install` records it in `manifest.json` `shim_sha256`).
    pub manifest_sha256: String,
    /// The shim's version.
    pub shim_version: String,
    /// The binary version the manifest pins.
    pub binary_version: String,
    /// `hermes-agent` version.
    pub hermes_version: String,
    /// Python version, e.g. `3.11.7`.
    pub python_version: String,
    /// The shim's process id.
    pub pid: u32,
    /// The resolved `HERMES_HOME`.
    pub hermes_home: String,
    /// The active profile.
    #[serde(default)]
    pub profile_name: Option<String>,
    /// Whether `gateway.multiplex_profiles` is active.
    #[serde(default)]
    pub multiplex_active: bool,
    /// Seams (filled at connect; false in hello).
    #[serde(default)]
    pub seams: Seams,
}

/// `hello` success body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloOk {
    /// The chosen protocol.
    pub protocol: u32,
    /// The daemon's version.
    pub daemon_version: String,
    /// A random 16-hex epoch of this child.
    pub epoch: String,
    /// Limits.
    pub limits: Limits,
}

/// Limits announced at handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// [`MAX_FRAME_BYTES`].
    pub max_frame_bytes: u64,
    /// [`MAX_INFLIGHT`].
    pub max_inflight: u32,
}

/// What the daemon checks a `hello` against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakePolicy<'a> {
    /// The daemon's version.
    pub daemon_version: &'a str,
    /// SHA-256 of the shim code the daemon's binary installs.
    pub manifest_sha256: &'a str,
    /// The audited `hermes-agent` version (e.g. `0.19.0`).
    pub audited_hermes: &'a str,
    /// The audited Python `major.minor` (e.g. `3.11`).
    pub audited_python: &'a str,
}

/// Applies hermes-host.md §19.5 to a `hello`: the success body with the
/// given `epoch` (16 random hex from the caller), or the error to answer.
pub fn negotiate(
    hello: &Hello,
    policy: &HandshakePolicy<'_>,
    epoch: &str,
) -> Result<HelloOk, ErrorBody> {
    let refuse = |code, message: String| ErrorBody {
        code,
        message,
        retryable: false,
    };
    let Some(protocol) = hello
        .protocols
        .iter()
        .copied()
        .filter(|p| *p == PROTOCOL_VERSION)
        .max()
    else {
        return Err(refuse(
            ErrorCode::UnsupportedProtocol,
            format!("no common protocol; the daemon speaks {PROTOCOL_VERSION}"),
        ));
    };
    if hello.binary_version != policy.daemon_version
        || hello.manifest_sha256 != policy.manifest_sha256
    {
        return Err(refuse(ErrorCode::StaleShim, STALE_SHIM_MESSAGE.to_owned()));
    }
    let python_matches = hello.python_version == policy.audited_python
        || hello
            .python_version
            .strip_prefix(policy.audited_python)
            .is_some_and(|rest| rest.starts_with('.'));
    if hello.hermes_version != policy.audited_hermes || !python_matches {
        return Err(refuse(
            ErrorCode::UnsupportedHost,
            format!(
                "Canon requires hermes-agent {} on Python {}; found {} on {}",
                policy.audited_hermes,
                policy.audited_python,
                hello.hermes_version,
                hello.python_version
            ),
        ));
    }
    if hello.multiplex_active {
        return Err(refuse(
            ErrorCode::UnsupportedHost,
            MULTIPLEX_MESSAGE.to_owned(),
        ));
    }
    Ok(HelloOk {
        protocol,
        daemon_version: policy.daemon_version.to_owned(),
        epoch: epoch.to_owned(),
        limits: Limits {
            max_frame_bytes: MAX_FRAME_BYTES as u64,
            max_inflight: MAX_INFLIGHT,
        },
    })
}
