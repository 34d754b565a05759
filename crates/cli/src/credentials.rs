//! The one call of `canon_profiles::resolve_credentials` that `serve --stdio` (and through it
//! `send`) and `doctor` share, so the daemon and the diagnostics read the same inputs
//! (cli.md §5.1): the environment the caller layered (the process environment over
//! `<HERMES_HOME>/.env`), `agents.json` where `CANON_HOME`, `CANON_AGENTS_FILE` and
//! `CANON_AGENTS_PATH` put it, merged with `CANON_AGENTS_JSON_BOOTSTRAP`, and the platform config
//! when the caller has one (`doctor` never does).

use std::path::PathBuf;

use canon_profiles::files::{self, AgentProfiles, CanonPaths, BOOTSTRAP_ENV};
use canon_profiles::{
    resolve_credentials, CredentialError, EnvLookup, PlatformConfig, Resolution, StoreError,
};

/// The `agents.json` path shown when there is neither a home directory nor `CANON_HOME`: there
/// is no file to read, so resolution sees no profile.
const NO_HOME_AGENTS: &str = "~/.canon/agents.json";

/// Resolves the credentials (cli.md §5.1) from `env`, the files under `paths` (`None`: no home
/// directory and no `CANON_HOME`, so no `agents.json`) and the optional platform config.
/// `agents.json` is read (and bootstrapped) only when a profile is needed.
pub(crate) fn resolve(
    env: &dyn EnvLookup,
    paths: Option<&CanonPaths>,
    platform: Option<&PlatformConfig>,
) -> Result<Resolution, CredentialError> {
    let bootstrap = env.var(BOOTSTRAP_ENV);
    let mut load_agents = || -> Result<AgentProfiles, StoreError> {
        match paths {
            Some(paths) => files::load_agents(&paths.agents, bootstrap.as_deref()),
            None => Ok(AgentProfiles::empty(PathBuf::from(NO_HOME_AGENTS))),
        }
    };
    resolve_credentials(env, platform, &mut load_agents)
}
