//! Resolving the daemon's credentials with a platform config
//! (cli.md §5.1): the binary's [`crate::config::CredentialResolver`], run
//! off the event loop because it may read `agents.json`.

use super::*;
use crate::config::ResolvedCredentials;
use canon_host::credentials::PlatformCredentials;
use canon_profiles::PlatformConfig;
use canon_wire::secret::ApiKey;

impl Driver {
    /// The credentials `platform` resolves to; the daemon's own when the
    /// binary gave no resolver (or the resolver failed, which is logged).
    pub(super) async fn resolve(&self, platform: &PlatformCredentials) -> ResolvedCredentials {
        let Some(resolver) = self.config.resolver.clone() else {
            return self.config.credentials();
        };
        let platform = platform_config(platform);
        match tokio::task::spawn_blocking(move || resolver(&platform)).await {
            Ok(resolved) => resolved,
            Err(error) => {
                tracing::error!(%error, "credential resolution failed; keeping the credentials");
                self.config.credentials()
            }
        }
    }
}

/// The resolver's view of a platform config: `extra` when it is an object
/// (anything else holds no setting).
fn platform_config(platform: &PlatformCredentials) -> PlatformConfig {
    let key = |secret: &Option<canon_wire::secret::Secret>| {
        secret.as_ref().map(|s| ApiKey::new(s.expose()))
    };
    PlatformConfig {
        api_key: key(&platform.api_key),
        token: key(&platform.token),
        extra: platform.extra.as_object().cloned().unwrap_or_default(),
    }
}
