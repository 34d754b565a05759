//! Crash points for the crash tests: with `Config::crash_point` set (the environment variable
//! `CANON_HERMES_CRASH_POINT`, never in production), the daemon kills itself with SIGKILL — a
//! real `kill -9`, no destructor, no flush — the first time it reaches that named step (of a
//! detached approval or a turn). A marker file `<CANON_HOME>/.crash-<point>` makes it fire once per Canon
//! home, so a daemon started again with the same environment goes on.
//!
//! | point | where |
//! |---|---|
//! | `create.reserved` | the reservation is on disk, the create not sent |
//! | `create.sent` | Canon created the approval, the registry not activated |
//! | `consume.claimed` | the consume lease is on disk, the consume not sent |
//! | `consume.answered` | Canon answered the consume, the answer not recorded |
//! | `wake.claimed` | the wake lease is on disk, the wake not handed to Hermes |
//! | `wake.handed` | Hermes accepted the wake, the lease not finished |
//! | `turn.complete` | the shim's `turn.complete` arrived, nothing of it handled |
//! | `turn.published` | Canon took a turn's open (non-closing) state, before any other write |

use std::path::PathBuf;
use std::sync::OnceLock;

static ARMED: OnceLock<Option<(String, PathBuf)>> = OnceLock::new();

/// Arms the crash point of this daemon (once, at start).
pub(crate) fn arm(point: Option<&str>, canon_home: Option<&std::path::Path>) {
    let armed = match (point.map(str::trim).filter(|p| !p.is_empty()), canon_home) {
        (Some(point), Some(home)) => Some((point.to_owned(), home.join(format!(".crash-{point}")))),
        _ => None,
    };
    let _ = ARMED.set(armed);
}

/// Whether `point` is the armed crash point (a cheap check before a costlier test of whether
/// it was reached).
pub(crate) fn armed(point: &str) -> bool {
    matches!(ARMED.get(), Some(Some((armed, _))) if armed == point)
}

/// Kills the process when `point` is the armed one and has not fired in this Canon home yet.
pub(crate) fn crash_point(point: &str) {
    let Some(Some((armed, marker))) = ARMED.get() else {
        return;
    };
    if armed != point || marker.exists() {
        return;
    }
    if std::fs::write(marker, point).is_err() {
        return;
    }
    tracing::warn!(point, "crash point reached: killing the daemon");
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
}
