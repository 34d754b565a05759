//! Running `hermes send` (coms-bridge.md §6.7): `hermes [--profile P] send --to T <text>`, found
//! through `PATH`, stdin from the null device, output captured, killed after the kill limit
//! (coms-bridge.md §6.7 DEVIATION: the original waits for ever). Success is exit status 0;
//! failures are the messages of `core::outcome`.
//!
//! `hermes` runs in a process group of its own, and a run that times out or is dropped (the
//! daemon stopping) kills the whole group: whatever `hermes` started (a gateway client, a
//! shell pipeline) ends with it instead of living on, holding the output pipes open.

use std::process::Stdio;
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::io::{AsyncRead, AsyncReadExt as _};

use crate::core::outcome::{hermes_failure, hermes_timed_out};

/// One configured `hermes send`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HermesSend {
    /// The program, `hermes`.
    pub program: String,
    /// `--profile <p>` first, when set.
    pub profile: Option<String>,
    /// `--to <target>`.
    pub target: String,
    /// The kill limit.
    pub limit: Duration,
}

impl HermesSend {
    /// The argv after the program name: `[--profile P] send --to T <text>`.
    pub fn args(&self, text: &str) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(profile) = &self.profile {
            args.extend(["--profile".to_owned(), profile.clone()]);
        }
        args.extend([
            "send".to_owned(),
            "--to".to_owned(),
            self.target.clone(),
            text.to_owned(),
        ]);
        args
    }

    /// Sends `text`; `Err` holds the failure message.
    pub async fn send(&self, text: &str) -> Result<(), String> {
        let mut child = tokio::process::Command::new(&self.program)
            .args(self.args(text))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| error.to_string())?;
        let group = GroupKill::of(&child);
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let run = async {
            let (status, out, err) = tokio::join!(child.wait(), read_all(stdout), read_all(stderr));
            Ok::<_, std::io::Error>((status?, out?, err?))
        };
        let outcome = tokio::time::timeout(self.limit, run).await;
        match outcome {
            Err(_) => {
                // The group goes first: it still has a member (`hermes` not yet reaped, or
                // whatever holds its pipes open), so its id cannot have been reused. Then
                // `hermes` itself is reaped.
                drop(group);
                let _ = child.start_kill();
                let _ = child.wait().await;
                Err(hermes_timed_out(
                    u64::try_from(self.limit.as_millis()).unwrap_or(u64::MAX),
                ))
            }
            Ok(finished) => {
                // Every pipe reached its end and `hermes` was reaped: what is left of the group
                // closed its output and is not ours to stop, and once the group is empty its id
                // may be reused, so no late kill.
                group.disarm();
                match finished {
                    Err(error) => Err(error.to_string()),
                    Ok((status, _, _)) if status.success() => Ok(()),
                    Ok((status, out, err)) => Err(hermes_failure(
                        status.code(),
                        &String::from_utf8_lossy(&err),
                        &String::from_utf8_lossy(&out),
                    )),
                }
            }
        }
    }
}

async fn read_all(pipe: Option<impl AsyncRead + Unpin>) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    if let Some(mut pipe) = pipe {
        pipe.read_to_end(&mut bytes).await?;
    }
    Ok(bytes)
}

/// Kills the process group `hermes` leads when dropped, unless disarmed.
struct GroupKill {
    leader: Option<Pid>,
}

impl GroupKill {
    fn of(child: &tokio::process::Child) -> Self {
        let leader = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw);
        GroupKill { leader }
    }

    fn disarm(mut self) {
        self.leader = None;
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(leader) = self.leader {
            let _ = rustix::process::kill_process_group(leader, Signal::KILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_is_profile_then_send() {
        let send = HermesSend {
            program: "hermes".into(),
            profile: Some("gateway-prod".into()),
            target: "telegram:1:2".into(),
            limit: Duration::from_secs(1),
        };
        assert_eq!(
            send.args("❓ q"),
            [
                "--profile",
                "gateway-prod",
                "send",
                "--to",
                "telegram:1:2",
                "❓ q"
            ]
        );
        let plain = HermesSend {
            profile: None,
            ..send
        };
        assert_eq!(plain.args("x"), ["send", "--to", "telegram:1:2", "x"]);
    }

    #[test]
    fn outcomes_of_real_children() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        // A stand-in `hermes` that runs its message as a shell script: `send --to T <text>`.
        let program = dir.path().join("hermes");
        std::fs::write(&program, "#!/bin/sh\neval \"$4\"\n").expect("script");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let send = |limit_ms| HermesSend {
            program: program.to_string_lossy().into_owned(),
            profile: None,
            target: "telegram".into(),
            limit: Duration::from_millis(limit_ms),
        };
        runtime.block_on(async {
            assert_eq!(send(5000).send("exit 0").await, Ok(()));
            assert_eq!(
                send(5000).send("echo out; echo oops >&2; exit 42").await,
                Err("hermes send failed (42): oops".into())
            );
            assert_eq!(
                send(5000).send("echo only-out; exit 1").await,
                Err("hermes send failed (1): only-out".into())
            );
            assert_eq!(
                send(5000).send("kill -TERM $$").await,
                Err("hermes send failed".into())
            );
            assert_eq!(
                send(50).send("sleep 5").await,
                Err("hermes send failed: timed out after 50ms".into())
            );
            let missing = HermesSend {
                program: "/nonexistent/hermes".into(),
                ..send(1000)
            };
            let error = missing.send("x").await.expect_err("no such program");
            assert!(error.contains("No such file or directory"), "{error}");
        });
    }

    /// Whether `pid` has ended. A zombie waiting for a parent to reap it has ended too; only
    /// `/proc` tells it apart, so elsewhere signal 0 decides.
    fn ended(pid: Pid) -> bool {
        match std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())) {
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z')),
            Err(_) if std::path::Path::new("/proc/self/stat").exists() => true,
            Err(_) => rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH),
        }
    }

    /// Polls `check` every 10 ms until it gives a value or 10 s pass.
    async fn within_deadline<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(value) = check() {
                return value;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A stand-in `hermes` that runs its message as a shell script, and a script that starts a
    /// sleeping grandchild, records both pids and waits.
    struct Family {
        dir: tempfile::TempDir,
    }

    impl Family {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("tempdir");
            let program = dir.path().join("hermes");
            std::fs::write(&program, "#!/bin/sh\neval \"$4\"\n").expect("script");
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
            Family { dir }
        }

        fn send(&self, limit: Duration) -> HermesSend {
            HermesSend {
                program: self
                    .dir
                    .path()
                    .join("hermes")
                    .to_string_lossy()
                    .into_owned(),
                profile: None,
                target: "telegram".into(),
                limit,
            }
        }

        fn script(&self) -> String {
            let d = self.dir.path().display();
            format!("sleep 600 & echo $! > {d}/grandchild.tmp; mv {d}/grandchild.tmp {d}/grandchild; echo $$ > {d}/child.tmp; mv {d}/child.tmp {d}/child; wait")
        }

        fn pid(&self, name: &str) -> Option<Pid> {
            let text = std::fs::read_to_string(self.dir.path().join(name)).ok()?;
            Pid::from_raw(text.trim().parse().ok()?)
        }

        fn pids(&self) -> Option<[Pid; 2]> {
            Some([self.pid("child")?, self.pid("grandchild")?])
        }
    }

    impl Drop for Family {
        fn drop(&mut self) {
            // Whatever the outcome, no sleeper outlives the test.
            if let Some(pid) = self.pid("grandchild") {
                let _ = rustix::process::kill_process(pid, Signal::KILL);
            }
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn a_timed_out_send_kills_what_hermes_started_too() {
        let family = Family::new();
        runtime().block_on(async {
            let outcome = family
                .send(Duration::from_secs(1))
                .send(&family.script())
                .await;
            assert_eq!(
                outcome,
                Err("hermes send failed: timed out after 1000ms".into())
            );
            let pids = family
                .pids()
                .expect("both pids were recorded within the limit");
            within_deadline("hermes and its grandchild to end", || {
                pids.iter().all(|&pid| ended(pid)).then_some(())
            })
            .await;
        });
    }

    #[test]
    fn a_dropped_send_kills_what_hermes_started_too() {
        let family = Family::new();
        runtime().block_on(async {
            let send = family.send(Duration::from_secs(600));
            let script = family.script();
            let pids = tokio::select! {
                outcome = send.send(&script) => panic!("the send ended by itself: {outcome:?}"),
                pids = within_deadline("both pids", || family.pids()) => pids,
            };
            within_deadline("hermes and its grandchild to end", || {
                pids.iter().all(|&pid| ended(pid)).then_some(())
            })
            .await;
        });
    }
}
