//! The Hermes gateway `dev` runs: `hermes gateway run` from the Hermes environment, in the
//! throwaway profile, in a process group of its own so that everything it starts (the shim's
//! `canon-hermes serve --stdio` daemon included) is stopped together, and so that the Ctrl-C the
//! terminal sends reaches `dev` alone and `dev` decides the order of shutdown.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rustix::process::{kill_process_group, Pid, Signal};
use serde_json::Value;

/// How long the gateway gets to stop after SIGTERM before its whole group is killed.
const STOP_GRACE: Duration = Duration::from_secs(8);

/// A running gateway. Dropping it stops the gateway and every process of its group.
#[derive(Debug)]
pub(crate) struct Gateway {
    child: Child,
    group: Pid,
    log: PathBuf,
    state_file: PathBuf,
    stopped: bool,
}

impl Gateway {
    /// Starts `hermes gateway run` with `HERMES_HOME=hermes_home`, the given environment
    /// additions, stdin closed and both output streams in `log`.
    pub(crate) fn start(
        hermes: &Path,
        hermes_home: &Path,
        home: &Path,
        env: &[(String, String)],
        log: PathBuf,
    ) -> anyhow::Result<Gateway> {
        use std::os::unix::process::CommandExt as _;
        let out = fs::File::create(&log)
            .with_context(|| format!("creating the gateway log {}", log.display()))?;
        let err = out.try_clone().context("opening the gateway log")?;
        let mut command = Command::new(hermes);
        command
            .args(["gateway", "run", "-v"])
            .current_dir(hermes_home)
            .env("HERMES_HOME", hermes_home)
            .env("HOME", home)
            .env("HERMES_DISABLE_LAZY_INSTALLS", "1")
            // The operator's own Canon settings must not leak into the throwaway profile.
            .env_remove("CANON_AGENT")
            .env_remove("CANON_HOME_CHANNEL")
            .env_remove("CANON_AGENTS_JSON_BOOTSTRAP")
            .env_remove("HERMES_PYTHON")
            .env_remove("HERMES_SAFE_MODE")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = command
            .spawn()
            .with_context(|| format!("starting {} gateway run", hermes.display()))?;
        let group = Pid::from_child(&child);
        Ok(Gateway {
            child,
            group,
            log,
            state_file: hermes_home.join("gateway_state.json"),
            stopped: false,
        })
    }

    /// The Canon platform's state in `gateway_state.json` once the gateway runs (`connected`
    /// when the daemon holds Canon's stream), else `None`.
    pub(crate) fn canon_state(&self) -> Option<String> {
        let text = fs::read_to_string(&self.state_file).ok()?;
        let state: Value = serde_json::from_str(&text).ok()?;
        if state.get("gateway_state").and_then(Value::as_str) != Some("running") {
            return None;
        }
        state
            .pointer("/platforms/canon/state")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    /// The gateway's exit status when it has exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The process id of the gateway (the leader of its group).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last `lines` lines of the gateway's log.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Stops the gateway: SIGTERM to its group, up to [`STOP_GRACE`] for the leader to exit,
    /// then SIGKILL to whatever of the group is left. Idempotent.
    pub(crate) fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let _ = kill_process_group(self.group, Signal::TERM);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The leader may be gone while the daemon it spawned still runs; the group outlives
        // its leader, so this reaches every process the gateway started.
        let _ = kill_process_group(self.group, Signal::KILL);
        let _ = self.child.wait();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop();
    }
}
