//! `canon-hermes serve --stdio`: the daemon the Python shim spawns (hermes-host.md §19.3).
//! Reads its configuration from the environment (credentials through `canon_profiles`, the
//! resolver `setup` and `doctor` share), gives the adapter a resolver for the platform config
//! that `adapter.connect` and a `probe` may carry (cli.md §5.1), installs the stderr log
//! subscriber and runs `canon_adapter::run` over stdin and stdout until EOF, SIGTERM or SIGINT.
//! The API key never reaches a log line.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use canon_adapter::config::{self, Config, CredentialResolver, ResolvedCredentials};
use canon_host::hitl;
use canon_profiles::files::CanonPaths;
use canon_profiles::{
    platform_affects_resolution, DotEnv, EnvLookup, HermesEnv, PlatformConfig, Resolution,
};
use canon_wire::endpoint::is_secure_or_local;
use canon_wire::ApiKey;

use crate::{credentials, exit};

/// The daemon's environment: the process environment, then `<HERMES_HOME>/.env` (cli.md §5.1,
/// read by `canon_profiles`), where every Canon setting may also live.
#[derive(Clone)]
struct DaemonEnv {
    lookup: HermesEnv,
    home_dir: Option<PathBuf>,
}

impl DaemonEnv {
    /// Reads `<HERMES_HOME>/.env` (`HERMES_HOME`, else `~/.hermes`, cli.md §2.1 rule 4); an
    /// unreadable file is skipped with a warning.
    fn load() -> DaemonEnv {
        let hermes_home = std::env::var_os("HERMES_HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| home_dir().map(|h| h.join(".hermes")));
        DaemonEnv::in_home(hermes_home.as_deref())
    }

    /// Reads `<hermes_home>/.env` beside the process environment; an unreadable file is
    /// skipped with a warning.
    fn in_home(hermes_home: Option<&Path>) -> DaemonEnv {
        let home_dir = home_dir();
        let dotenv = match hermes_home {
            Some(dir) => DotEnv::read(&dir.join(".env")).unwrap_or_else(|error| {
                tracing::warn!(%error, "ignoring the Hermes .env: it cannot be read");
                DotEnv::default()
            }),
            None => DotEnv::default(),
        };
        DaemonEnv {
            lookup: HermesEnv::new(dotenv),
            home_dir,
        }
    }

    /// One variable; empty or whitespace-only counts as unset.
    fn get(&self, name: &str) -> Option<String> {
        self.lookup.var(name).filter(|v| !v.trim().is_empty())
    }

    /// One variable as set (only unset is `None`).
    fn raw(&self, name: &str) -> Option<String> {
        self.lookup.var(name)
    }
}

/// `HOME`, when set.
fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// `CANON_HERMES_PARENT_PID`, the shim's process (hermes-host.md §19.3). A value that is not
/// a positive process id is ignored with a warning: the stdin EOF still ends the daemon.
fn parent_pid(env: &DaemonEnv) -> Option<u32> {
    let raw = env.get("CANON_HERMES_PARENT_PID")?;
    match raw.trim().parse::<u32>() {
        Ok(pid) if pid > 0 && i32::try_from(pid).is_ok() => Some(pid),
        _ => {
            tracing::warn!("ignoring CANON_HERMES_PARENT_PID: not a process id");
            None
        }
    }
}

/// An interval in milliseconds from the test hook `name`; unset or unreadable keeps `default`.
/// `CANON_HERMES_SIGNAL_POLL_MS` shortens the 15 s runtime signal poll (canon-wire.md §4.9),
/// `CANON_HERMES_STATUS_INTERVAL_MS` the 30 s runtime status loop (canon-wire.md §8.1),
/// `CANON_HERMES_HITL_POLL_MS` the 1 s poll of blocking clarifies and approvals
/// (canon-wire.md §9.1).
fn interval_ms(env: &DaemonEnv, name: &str, default: Duration) -> Duration {
    env.get(name)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(default, Duration::from_millis)
}

/// The credentials and connection (cli.md §5.1, §5.2) from the environment and, when given, a
/// platform config: at start without one, and again with the platform config of each
/// `adapter.connect` and of a `probe` that carries one ([`resolver`]).
///
/// Decision: a key with an explicit `CANON_BASE_URL` and `CANON_STREAM_URL` but no
/// `CANON_ENVIRONMENT_ID` is the direct test mode the daemon has always had (canon-sim on
/// loopback, the whole-binary and gateway tests): the URLs are used as given and no environment
/// is verified. cli.md §5.1 would refuse that key for want of an environment id; a key without
/// both URLs still is refused, so a production key alone never skips the trust check. The URLs
/// must still be `https` or loopback `http`, so the key never travels in clear to another host.
/// The test mode is read from the environment only (its variables win over the platform config
/// anyway). Every other case goes through `credentials::resolve`. A resolution error is logged
/// (no secret reaches it) and leaves the result unconfigured, with the error's text: `probe`
/// answers `configured: false` with it, `adapter.connect` the missing-credentials fatal, `send`
/// prints it.
fn resolve_canon(
    env: &DaemonEnv,
    paths: Option<&CanonPaths>,
    platform: Option<&PlatformConfig>,
) -> ResolvedCredentials {
    let value = |name: &str| env.get(name).map(|v| v.trim().to_owned());
    if let (Some(key), None, Some(base_url), Some(stream_url)) = (
        value("CANON_API_KEY"),
        value("CANON_ENVIRONMENT_ID"),
        value("CANON_BASE_URL"),
        value("CANON_STREAM_URL"),
    ) {
        if !is_secure_or_local(&base_url) || !is_secure_or_local(&stream_url) {
            tracing::error!(
                "CANON_BASE_URL and CANON_STREAM_URL must use HTTPS (or local HTTP); \
                 the Canon platform stays unconfigured"
            );
            return ResolvedCredentials {
                error: Some(
                    "CANON_BASE_URL and CANON_STREAM_URL must use HTTPS (or local HTTP)".into(),
                ),
                ..ResolvedCredentials::default()
            };
        }
        tracing::info!("Canon credentials: CANON_API_KEY with explicit URLs, no environment check");
        return ResolvedCredentials {
            api_key: ApiKey::new(key),
            base_url,
            stream_url,
            ..ResolvedCredentials::default()
        };
    }
    match credentials::resolve(&env.lookup, paths, platform) {
        Ok(Resolution::Configured(credentials)) => {
            let profile = credentials.profile_name().map(str::to_owned);
            let connection = credentials.connection;
            tracing::info!(
                environment_id = %connection.environment_id,
                profile = profile.as_deref().unwrap_or(""),
                "Canon credentials resolved"
            );
            ResolvedCredentials {
                api_key: credentials.api_key,
                base_url: connection.base_url.clone(),
                stream_url: connection.stream_url.clone(),
                environment_id: Some(connection.environment_id.clone()),
                connection: Some(connection),
                profile,
                error: None,
            }
        }
        Ok(Resolution::Unconfigured) => {
            tracing::info!("no Canon credentials configured (CANON_API_KEY or CANON_AGENT)");
            ResolvedCredentials::default()
        }
        Err(error) => {
            tracing::error!(%error, "Canon credentials do not resolve; the Canon platform stays unconfigured");
            ResolvedCredentials {
                error: Some(error.to_string()),
                ..ResolvedCredentials::default()
            }
        }
    }
}

/// The daemon's resolver of a platform config: [`resolve_canon`] over the environment read at
/// start. A config that holds no setting the resolver reads (the gateway's own extras, the turn
/// verbosity: `canon_profiles::platform_affects_resolution`) resolves as no config does, so the
/// start's result is kept, without reading `agents.json` or logging it again.
fn resolver(
    env: DaemonEnv,
    paths: Option<CanonPaths>,
    at_start: ResolvedCredentials,
) -> CredentialResolver {
    Arc::new(move |platform: &PlatformConfig| {
        if platform_affects_resolution(platform) {
            resolve_canon(&env, paths.as_ref(), Some(platform))
        } else {
            at_start.clone()
        }
    })
}

/// The daemon configuration: the credentials and connection of [`resolve_canon`]
/// (`CANON_API_KEY`, `CANON_AGENT`, `CANON_AGENTS_JSON_BOOTSTRAP`, `CANON_AGENTS_FILE`,
/// `CANON_AGENTS_PATH`, `CANON_ENVIRONMENT_ID`, `CANON_BASE_URL`, `CANON_STREAM_URL`,
/// `CANON_RTDB_URL`, `CANON_FIREBASE_API_KEY`), `CANON_HOME_CHANNEL`, `CANON_HOME_CHANNEL_NAME`,
/// `HERMES_ALLOW_PRIVATE_URLS`, `CANON_INBOUND_IMAGE_DELIVERY`,
/// `CANON_INBOUND_VISUAL_MEDIA_DELIVERY` and `CANON_TURN_VERBOSITY` (checked at
/// `adapter.connect`, where they win over the platform extras), `CANON_HOME`,
/// `CANON_HERMES_PARENT_PID`, `CANON_HERMES_SIGNAL_POLL_MS`, `CANON_HERMES_STATUS_INTERVAL_MS`,
/// `CANON_HERMES_HITL_POLL_MS`, `CANON_HERMES_MEDIA_DOWNLOAD_MS` (the total deadline of one
/// inbound attachment's download, default 90 s), and `HERMES_CLARIFY_TIMEOUT` and
/// `HERMES_APPROVAL_TIMEOUT`
/// (runtime-control.md §6.4, §6.5; default 300 s, 5..1,800 s). Each is read from the process
/// environment, else `<HERMES_HOME>/.env`.
fn config_from_env() -> Config {
    config_in(&DaemonEnv::load()).0
}

/// The daemon configuration [`config_from_env`] reads, with `<hermes_home>/.env` as the file
/// (`send`, whose Hermes home is the profile `--profile` or the `hermes` CLI's rules pick), and
/// the text of a credential resolution error, if any (the configuration is then unconfigured).
pub(crate) fn config_in_home(hermes_home: &Path) -> (Config, Option<String>) {
    config_in(&DaemonEnv::in_home(Some(hermes_home)))
}

fn config_in(env: &DaemonEnv) -> (Config, Option<String>) {
    let paths = CanonPaths::from_env(&env.lookup, env.home_dir.as_deref());
    let canon = resolve_canon(env, paths.as_ref(), None);
    let error = canon.error.clone();
    let config = Config {
        base_url: canon.base_url.clone(),
        stream_url: canon.stream_url.clone(),
        api_key: canon.api_key.clone(),
        environment_id: canon.environment_id.clone(),
        connection: canon.connection.clone(),
        profile: canon.profile.clone(),
        credential_error: canon.error.clone(),
        resolver: Some(resolver(env.clone(), paths.clone(), canon)),
        turn_verbosity: env.raw("CANON_TURN_VERBOSITY"),
        allow_private_urls: env.get("HERMES_ALLOW_PRIVATE_URLS").is_some_and(|v| {
            matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes")
        }),
        inbound_image_delivery: env.get("CANON_INBOUND_IMAGE_DELIVERY"),
        inbound_visual_media_delivery: env.get("CANON_INBOUND_VISUAL_MEDIA_DELIVERY"),
        canon_home: paths.map(|p| p.canon_home),
        home_channel: env.get("CANON_HOME_CHANNEL"),
        home_channel_name: env.get("CANON_HOME_CHANNEL_NAME"),
        // The hash of the shim this binary installs: any other shim (an upgraded binary without
        // a new `install`, a hand-edited module) is refused as stale at `hello`.
        manifest_sha256: Some(crate::shim::shim_sha256()),
        durable_backoff: None,
        parent_pid: parent_pid(env),
        signal_poll: interval_ms(env, "CANON_HERMES_SIGNAL_POLL_MS", config::SIGNAL_POLL),
        status_interval: interval_ms(
            env,
            "CANON_HERMES_STATUS_INTERVAL_MS",
            config::STATUS_INTERVAL,
        ),
        clarify_timeout: hitl::timeout_from_env(env.get("HERMES_CLARIFY_TIMEOUT").as_deref()),
        approval_timeout: hitl::timeout_from_env(env.get("HERMES_APPROVAL_TIMEOUT").as_deref()),
        hitl_poll: interval_ms(env, "CANON_HERMES_HITL_POLL_MS", config::HITL_POLL),
        card_wait: interval_ms(env, "CANON_HERMES_CARD_WAIT_MS", config::CARD_WAIT),
        inbox_lock_wait: interval_ms(
            env,
            "CANON_HERMES_INBOX_LOCK_WAIT_MS",
            config::INBOX_LOCK_WAIT,
        ),
        crash_point: env.get("CANON_HERMES_CRASH_POINT"),
        clock_offset_ms: env
            .get("CANON_HERMES_CLOCK_OFFSET_MS")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0),
        media_download_budget: interval_ms(
            env,
            "CANON_HERMES_MEDIA_DOWNLOAD_MS",
            config::MEDIA_DOWNLOAD_BUDGET,
        ),
        handoff_sweep: interval_ms(env, "CANON_HERMES_HANDOFF_SWEEP_MS", config::HANDOFF_SWEEP),
    };
    (config, error)
}

/// Installs the stderr subscriber (`RUST_LOG`, default `info`): plain `LEVEL target: message`
/// lines without colours or timestamps, which the shim parses (hermes-host.md §19.3). The lines
/// go through a writer thread that drops (and counts) what a stalled reader cannot take, so a
/// full stderr pipe never stops the daemon (src/log_writer.rs).
pub(crate) fn install_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let writer = LOG_WRITER.get_or_init(|| {
        crate::log_writer::QueuedStderr::start(std::io::stderr(), crate::log_writer::QUEUE_LINES)
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer.clone())
        .with_ansi(false)
        .without_time()
        .try_init();
}

/// The log writer [`install_logging`] started, for [`flush_logs`].
static LOG_WRITER: std::sync::OnceLock<crate::log_writer::QueuedStderr> =
    std::sync::OnceLock::new();

/// Lets the log writer write what is queued (at most 500 ms) before the process exits.
pub(crate) fn flush_logs() {
    if let Some(writer) = LOG_WRITER.get() {
        writer.flush(std::time::Duration::from_millis(500));
    }
}

/// Resolves with the signal's name at the first SIGTERM or SIGINT, which then end the daemon
/// as stdin EOF does (in-flight Canon writes get the exit grace) instead of killing it
/// mid-write (hermes-host.md §19.3). Never resolves when the handlers cannot be installed
/// (logged).
async fn termination() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        },
        (Err(error), _) | (_, Err(error)) => {
            tracing::warn!(%error, "SIGTERM and SIGINT kill the daemon: no handler installed");
            std::future::pending().await
        }
    }
}

/// `serve [--stdio]`; returns the exit code.
pub(crate) fn serve_command(args: &[&str]) -> u8 {
    if args != ["--stdio"] {
        crate::report_error(&anyhow::anyhow!("usage: canon-hermes serve --stdio"));
        return exit::FAILED;
    }
    install_logging();
    let config = config_from_env();
    tracing::info!(
        base_url = %config.base_url,
        parent_pid = config.parent_pid,
        "canon-hermes daemon starting"
    );
    // One thread: the daemon's work per gateway call is small and its cost was the hand-offs
    // between threads (src/pipe_io.rs says how it was measured). Blocking work still has the
    // blocking pool (`spawn_blocking`: the approvals store, file reads), and the inbox journal
    // its own writer thread.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            crate::report_error(&anyhow::Error::new(error).context("starting the tokio runtime"));
            return exit::FAILED;
        }
    };
    let code = runtime.block_on(async {
        // A file-size limit (RLIMIT_FSIZE) raises SIGXFSZ, which would kill the daemon at its
        // next journal or registry write; with a handler installed the write fails with EFBIG
        // instead, and is handled as a full disk is (the agent stays online).
        let _file_size_limit = tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::from_raw(rustix::process::Signal::XFSZ.as_raw()),
        )
        .inspect_err(|error| tracing::debug!(%error, "no SIGXFSZ handler"));
        canon_adapter::run(
            config,
            tokio::io::BufReader::new(crate::pipe_io::stdin()),
            crate::pipe_io::stdout(),
            termination(),
        )
        .await
    });
    // Background tasks (the SSE stream) must not keep the process alive after EOF.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    flush_logs();
    u8::try_from(code).unwrap_or(exit::FAILED)
}
