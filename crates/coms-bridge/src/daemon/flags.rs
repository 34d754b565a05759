//! The daemon's flags (coms-bridge.md §5.1). Every value flag may appear once; a repeat fails at
//! startup with `<flag> may only be specified once`. Millisecond values are integers 1 to
//! 2,147,483,647 (`core::outcome`).

use std::ffi::OsString;
use std::path::PathBuf;

use crate::core::outcome::{parse_ms, timeout_ms_from_env};
use crate::core::paths;
use crate::wire::names::{is_hermes_profile, validate_peer, validate_project};
use crate::wire::registry::Coms;

/// The flags as the command line gave them, each value flag with every occurrence.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawFlags {
    /// `--name`.
    pub name: Vec<String>,
    /// `--project`.
    pub project: Vec<String>,
    /// `--to`.
    pub to: Vec<String>,
    /// `--hermes-profile`.
    pub hermes_profile: Vec<String>,
    /// `--timeout`.
    pub timeout: Vec<String>,
    /// `--poll-ms`.
    pub poll_ms: Vec<String>,
    /// `--questions-dir`.
    pub questions_dir: Vec<OsString>,
    /// `--foreign-grace-ms`.
    pub foreign_grace_ms: Vec<String>,
    /// `--hermes-timeout-ms`.
    pub hermes_timeout_ms: Vec<String>,
    /// `--heartbeat-ms`.
    pub heartbeat_ms: Vec<String>,
}

/// What the daemon reads from its environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// `HOME`.
    pub home: PathBuf,
    /// `PI_COMS_DIR`.
    pub pi_coms_dir: Option<OsString>,
    /// `PI_COMS_TIMEOUT_MS`.
    pub pi_coms_timeout_ms: Option<String>,
    /// `HERDR_PANE_ID`, shown in the agent card.
    pub herdr_pane_id: Option<String>,
    /// The working directory.
    pub cwd: PathBuf,
}

/// A flag the daemon refuses; the message is printed after `coms-hermes-bridge: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FlagError(pub String);

/// The validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The requested peer name (the registered one may carry a suffix).
    pub name: String,
    /// The coms project.
    pub project: String,
    /// The `hermes send --to` target, verbatim.
    pub target: String,
    /// `hermes --profile <p>` for every send, when given.
    pub hermes_profile: Option<String>,
    /// The per-question timeout.
    pub timeout_ms: u64,
    /// The answer poll interval.
    pub poll_ms: u64,
    /// How long a foreign answer file is left in place.
    pub foreign_grace_ms: u64,
    /// The kill limit of one `hermes send`.
    pub hermes_timeout_ms: u64,
    /// How often the registry entry is rewritten.
    pub heartbeat_ms: u64,
    /// The questions directory.
    pub questions_dir: PathBuf,
    /// The ndjson log.
    pub log_path: PathBuf,
    /// The coms pool root.
    pub coms: Coms,
    /// The working directory, for the registry entry.
    pub cwd: PathBuf,
    /// The Herdr pane, for the agent card.
    pub pane_id: Option<String>,
}

/// `--poll-ms` default.
pub(crate) const DEFAULT_POLL_MS: u64 = 1000;
/// `--foreign-grace-ms` default.
pub(crate) const DEFAULT_FOREIGN_GRACE_MS: u64 = 30_000;
/// `--hermes-timeout-ms` default.
pub(crate) const DEFAULT_HERMES_TIMEOUT_MS: u64 = 120_000;
/// `--heartbeat-ms` default: every 30 s (coms-bridge.md §4.2).
pub(crate) const DEFAULT_HEARTBEAT_MS: u64 = 30_000;

fn once<'a, T>(flag: &str, values: &'a [T]) -> Result<Option<&'a T>, FlagError> {
    match values {
        [] => Ok(None),
        [value] => Ok(Some(value)),
        _ => Err(FlagError(format!("{flag} may only be specified once"))),
    }
}

fn ms(flag: &str, value: Option<&String>, default: u64) -> Result<u64, FlagError> {
    match value {
        None => Ok(default),
        Some(text) => {
            parse_ms(text).ok_or_else(|| FlagError(format!("{flag} must be a positive number")))
        }
    }
}

impl Config {
    /// Validates the flags against the environment.
    pub fn from_flags(raw: &RawFlags, env: &Environment) -> Result<Self, FlagError> {
        let name = once("--name", &raw.name)?;
        let project = once("--project", &raw.project)?;
        let to = once("--to", &raw.to)?;
        let profile = once("--hermes-profile", &raw.hermes_profile)?;
        let timeout = once("--timeout", &raw.timeout)?;
        let poll = once("--poll-ms", &raw.poll_ms)?;
        let questions = once("--questions-dir", &raw.questions_dir)?;
        let grace = once("--foreign-grace-ms", &raw.foreign_grace_ms)?;
        let hermes_timeout = once("--hermes-timeout-ms", &raw.hermes_timeout_ms)?;
        let heartbeat = once("--heartbeat-ms", &raw.heartbeat_ms)?;

        let name = name.map_or("user-remote", String::as_str);
        validate_peer(name).map_err(|e| FlagError(e.to_string()))?;
        let project = project.map_or("default", String::as_str);
        validate_project(project).map_err(|e| FlagError(e.to_string()))?;
        if profile.is_some_and(|p| !is_hermes_profile(p)) {
            return Err(FlagError(
                "--hermes-profile must be a safe profile name".into(),
            ));
        }
        let env_timeout = timeout_ms_from_env(env.pi_coms_timeout_ms.as_deref());
        let questions_dir = match questions {
            Some(dir) => PathBuf::from(dir),
            None => paths::questions_dir(&env.home),
        };
        Ok(Config {
            name: name.to_owned(),
            project: project.to_owned(),
            target: to.map_or("telegram", String::as_str).to_owned(),
            hermes_profile: profile.cloned(),
            timeout_ms: ms("--timeout", timeout, env_timeout)?,
            poll_ms: ms("--poll-ms", poll, DEFAULT_POLL_MS)?,
            foreign_grace_ms: ms("--foreign-grace-ms", grace, DEFAULT_FOREIGN_GRACE_MS)?,
            hermes_timeout_ms: ms(
                "--hermes-timeout-ms",
                hermes_timeout,
                DEFAULT_HERMES_TIMEOUT_MS,
            )?,
            heartbeat_ms: ms("--heartbeat-ms", heartbeat, DEFAULT_HEARTBEAT_MS)?,
            log_path: paths::log_path(&questions_dir),
            questions_dir,
            coms: Coms::from_env(env.pi_coms_dir.as_deref(), &env.home),
            cwd: env.cwd.clone(),
            pane_id: env.herdr_pane_id.clone().filter(|p| !p.is_empty()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn env() -> Environment {
        Environment {
            home: "/home/u".into(),
            cwd: "/work".into(),
            ..Environment::default()
        }
    }

    fn error(raw: RawFlags) -> String {
        Config::from_flags(&raw, &env())
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn defaults() {
        let config = Config::from_flags(&RawFlags::default(), &env()).expect("valid");
        assert_eq!(config.name, "user-remote");
        assert_eq!(config.project, "default");
        assert_eq!(config.target, "telegram");
        assert_eq!(config.hermes_profile, None);
        assert_eq!(config.timeout_ms, 1_800_000);
        assert_eq!(config.poll_ms, 1000);
        assert_eq!(config.foreign_grace_ms, 30_000);
        assert_eq!(config.hermes_timeout_ms, 120_000);
        assert_eq!(config.heartbeat_ms, 30_000);
        assert_eq!(
            std::time::Duration::from_millis(config.heartbeat_ms),
            crate::daemon::HEARTBEAT
        );
        assert_eq!(
            config.questions_dir,
            Path::new("/home/u/.pi/coms/hermes-bridge/questions")
        );
        assert_eq!(
            config.log_path,
            Path::new("/home/u/.pi/coms/hermes-bridge/log.ndjson")
        );
        assert_eq!(config.coms.root(), Path::new("/home/u/.pi/coms"));
    }

    #[test]
    fn values_and_the_environment() {
        let raw = RawFlags {
            to: vec!["telegram:123456789:1735".into()],
            timeout: vec!["5000".into()],
            questions_dir: vec!["/q/questions".into()],
            hermes_profile: vec!["gateway-prod".into()],
            ..RawFlags::default()
        };
        let env = Environment {
            pi_coms_dir: Some("/c".into()),
            pi_coms_timeout_ms: Some("120".into()),
            herdr_pane_id: Some("w1:p2".into()),
            ..env()
        };
        let config = Config::from_flags(&raw, &env).expect("valid");
        assert_eq!(config.target, "telegram:123456789:1735");
        assert_eq!(config.timeout_ms, 5000, "the flag wins");
        assert_eq!(config.log_path, Path::new("/q/log.ndjson"));
        assert_eq!(config.coms.root(), Path::new("/c"));
        assert_eq!(config.pane_id.as_deref(), Some("w1:p2"));
        assert_eq!(config.hermes_profile.as_deref(), Some("gateway-prod"));
        let config = Config::from_flags(&RawFlags::default(), &env).expect("valid");
        assert_eq!(config.timeout_ms, 120);
    }

    #[test]
    fn refusals() {
        let two = || vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(
            error(RawFlags {
                to: two(),
                ..RawFlags::default()
            }),
            "--to may only be specified once"
        );
        assert_eq!(
            error(RawFlags {
                name: two(),
                ..RawFlags::default()
            }),
            "--name may only be specified once"
        );
        assert_eq!(
            error(RawFlags {
                questions_dir: vec!["a".into(), "b".into()],
                ..RawFlags::default()
            }),
            "--questions-dir may only be specified once"
        );
        for bad in ["0", "-5", "1.5", "abc", "2147483648"] {
            assert_eq!(
                error(RawFlags {
                    timeout: vec![bad.into()],
                    ..RawFlags::default()
                }),
                "--timeout must be a positive number"
            );
            assert_eq!(
                error(RawFlags {
                    poll_ms: vec![bad.into()],
                    ..RawFlags::default()
                }),
                "--poll-ms must be a positive number"
            );
        }
        assert_eq!(
            error(RawFlags {
                hermes_profile: vec!["Gateway.Prod".into()],
                ..RawFlags::default()
            }),
            "--hermes-profile must be a safe profile name"
        );
        assert_eq!(
            error(RawFlags {
                project: vec!["../x".into()],
                ..RawFlags::default()
            }),
            r#"Invalid project name: "../x""#
        );
        assert_eq!(
            error(RawFlags {
                name: vec!["projects".into()],
                ..RawFlags::default()
            }),
            r#"Invalid reserved coms name: "projects""#
        );
    }
}
