//! `canon-hermes serve --stdio`: the daemon the Python shim spawns (hermes-host.md §19.3).
//! Reads its configuration from the environment, installs the stderr log subscriber and runs
//! `canon_adapter::run` over stdin and stdout. The API key never reaches a log line.

use std::path::PathBuf;
use std::time::Duration;

use canon_adapter::config::{self, Config};
use canon_approvals::store::resolve_canon_home;
use canon_host::hitl;
use canon_wire::ApiKey;

use crate::exit;

/// Reads one environment variable; empty counts as unset.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `CANON_HERMES_PARENT_PID`, the shim's process (hermes-host.md §19.3). A value that is not
/// a positive process id is ignored with a warning: the stdin EOF still ends the daemon.
fn parent_pid() -> Option<u32> {
    let raw = env("CANON_HERMES_PARENT_PID")?;
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
fn interval_ms(name: &str, default: Duration) -> Duration {
    env(name)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(default, Duration::from_millis)
}

/// `CANON_HOME` (trimmed, `~` expanded) else `~/.canon` (cli.md §6), by the approvals store's
/// rule; `None` when neither `CANON_HOME` nor `HOME` gives a directory.
fn canon_home() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    resolve_canon_home(std::env::var("CANON_HOME").ok().as_deref(), home.as_deref())
}

/// The daemon configuration from `CANON_API_KEY`, `CANON_BASE_URL`, `CANON_STREAM_URL`
/// (defaults to the base URL), `CANON_ENVIRONMENT_ID`, `CANON_HOME_CHANNEL`,
/// `HERMES_ALLOW_PRIVATE_URLS`, `CANON_INBOUND_IMAGE_DELIVERY`,
/// `CANON_INBOUND_VISUAL_MEDIA_DELIVERY` (checked at `adapter.connect`, where they win over the
/// platform extras), `CANON_HOME`, `CANON_HERMES_PARENT_PID`, `CANON_HERMES_SIGNAL_POLL_MS`,
/// `CANON_HERMES_STATUS_INTERVAL_MS`, `CANON_HERMES_HITL_POLL_MS`, and `HERMES_CLARIFY_TIMEOUT`
/// and `HERMES_APPROVAL_TIMEOUT` (runtime-control.md §6.4, §6.5; default 300 s, 5..1,800 s).
fn config_from_env() -> Config {
    let base_url = env("CANON_BASE_URL").unwrap_or_default();
    let stream_url = env("CANON_STREAM_URL").unwrap_or_else(|| base_url.clone());
    Config {
        base_url,
        stream_url,
        api_key: ApiKey::new(env("CANON_API_KEY").unwrap_or_default()),
        environment_id: env("CANON_ENVIRONMENT_ID"),
        allow_private_urls: env("HERMES_ALLOW_PRIVATE_URLS").is_some_and(|v| {
            matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes")
        }),
        inbound_image_delivery: env("CANON_INBOUND_IMAGE_DELIVERY"),
        inbound_visual_media_delivery: env("CANON_INBOUND_VISUAL_MEDIA_DELIVERY"),
        canon_home: canon_home(),
        home_channel: env("CANON_HOME_CHANNEL"),
        manifest_sha256: None,
        durable_backoff: None,
        parent_pid: parent_pid(),
        signal_poll: interval_ms("CANON_HERMES_SIGNAL_POLL_MS", config::SIGNAL_POLL),
        status_interval: interval_ms("CANON_HERMES_STATUS_INTERVAL_MS", config::STATUS_INTERVAL),
        clarify_timeout: hitl::timeout_from_env(env("HERMES_CLARIFY_TIMEOUT").as_deref()),
        approval_timeout: hitl::timeout_from_env(env("HERMES_APPROVAL_TIMEOUT").as_deref()),
        hitl_poll: interval_ms("CANON_HERMES_HITL_POLL_MS", config::HITL_POLL),
    }
}

/// Installs the stderr subscriber (`RUST_LOG`, default `info`): plain `LEVEL target: message`
/// lines without colours or timestamps, which the shim parses (hermes-host.md §19.3).
fn install_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .try_init();
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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            crate::report_error(&anyhow::Error::new(error).context("starting the tokio runtime"));
            return exit::FAILED;
        }
    };
    let code = runtime.block_on(canon_adapter::run(
        config,
        tokio::io::BufReader::new(tokio::io::stdin()),
        tokio::io::stdout(),
    ));
    // Background tasks (the SSE stream) must not keep the process alive after EOF.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    u8::try_from(code).unwrap_or(exit::FAILED)
}
