//! Running `hermes send` (coms-bridge.md §6.7): `hermes [--profile P] send --to T <text>`, found
//! through `PATH`, stdin from the null device, output captured, killed after the kill limit
//! (coms-bridge.md §6.7 DEVIATION: the original waits for ever). Success is exit status 0;
//! failures are the messages of `core::outcome`.

use std::process::Stdio;
use std::time::Duration;

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
        let child = tokio::process::Command::new(&self.program)
            .args(self.args(text))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| error.to_string())?;
        match tokio::time::timeout(self.limit, child.wait_with_output()).await {
            Err(_) => Err(hermes_timed_out(
                u64::try_from(self.limit.as_millis()).unwrap_or(u64::MAX),
            )),
            Ok(Err(error)) => Err(error.to_string()),
            Ok(Ok(output)) if output.status.success() => Ok(()),
            Ok(Ok(output)) => Err(hermes_failure(
                output.status.code(),
                &String::from_utf8_lossy(&output.stderr),
                &String::from_utf8_lossy(&output.stdout),
            )),
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
}
