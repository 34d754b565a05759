//! The daemon test harness: a short temporary root holding `home/`, `coms/` (the pool) and
//! `bin/hermes` (a fake that records each call as one JSON line and fails on request), the
//! bridge process, and a coms peer that asks and awaits like `coms-cli send --await`.
//!
//! Nothing sleeps and hopes: every wait polls a condition with a deadline.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::AsyncWriteExt as _;
use tokio::net::UnixListener;

use coms_hermes_bridge::wire::envelope::{prompt_envelope, Identity};
use coms_hermes_bridge::wire::ids::new_ulid;
use coms_hermes_bridge::wire::iso;
use coms_hermes_bridge::wire::registry::Coms;
use coms_hermes_bridge::wire::socket::{exchange, Line, LineReader};

pub(crate) const PROJECT: &str = "hermes-bridge-test";
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// The real Python interpreter (not a version-manager shim, which is slow to start).
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let output = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 runs (the fake hermes is a Python script)");
        PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
    })
}

const FAKE_HERMES: &str = r#"
import datetime, json, os, sys, time
args = sys.argv[1:]
message = args[-1] if args else ""
log = os.environ.get("HERMES_FAKE_LOG")
if log:
    at = datetime.datetime.now(datetime.timezone.utc).isoformat()
    with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps({"at": at, "args": args, "message": message}, ensure_ascii=False) + "\n")
delay = os.environ.get("HERMES_FAKE_DELAY_MS")
if delay and message.startswith("\u2753"):
    time.sleep(int(delay) / 1000)
pattern = os.environ.get("HERMES_FAIL_PATTERN")
if pattern and pattern in message:
    sys.stderr.write("fake hermes failure for %s\n" % pattern)
    sys.exit(42)
"#;

/// Polls `check` every 10 ms until it gives a value or `WAIT` passes.
pub(crate) async fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) struct Sandbox {
    root: tempfile::TempDir,
}

impl Sandbox {
    pub(crate) fn new() -> Self {
        // Socket paths must fit 107 bytes: keep the root short (coms-bridge.md §3).
        let root = tempfile::Builder::new()
            .prefix("cb")
            .tempdir_in("/tmp")
            .expect("tempdir");
        for dir in ["home", "coms", "bin"] {
            std::fs::create_dir(root.path().join(dir)).expect("mkdir");
        }
        let hermes = root.path().join("bin/hermes");
        std::fs::write(
            &hermes,
            format!("#!{} -SE\n{FAKE_HERMES}", python().display()),
        )
        .expect("fake hermes");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&hermes, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Sandbox { root }
    }

    pub(crate) fn path(&self, relative: &str) -> PathBuf {
        self.root.path().join(relative)
    }

    pub(crate) fn coms(&self) -> Coms {
        Coms::new(self.path("coms"))
    }

    pub(crate) fn questions(&self) -> PathBuf {
        self.path("home/.pi/coms/hermes-bridge/questions")
    }

    pub(crate) fn entry_path(&self) -> PathBuf {
        self.coms().entry_path(PROJECT, "user-remote")
    }

    /// The bridge command with the sandbox environment and the test defaults (project, 25 ms
    /// polls, a 100 ms foreign grace) before `args`.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_coms-hermes-bridge"));
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        command
            .args([
                "--project",
                PROJECT,
                "--poll-ms",
                "25",
                "--foreign-grace-ms",
                "100",
            ])
            .args(args)
            .env("HOME", self.path("home"))
            .env("PI_COMS_DIR", self.path("coms"))
            .env("PATH", path)
            .env("HERMES_FAKE_LOG", self.path("hermes.log"))
            .env_remove("PI_COMS_TIMEOUT_MS")
            .env_remove("HERMES_FAIL_PATTERN")
            .env_remove("HERMES_FAKE_DELAY_MS")
            .env_remove("HERDR_PANE_ID")
            .env_remove("RUST_LOG")
            .current_dir(self.root.path())
            .stdin(Stdio::null());
        command
    }

    /// Starts the bridge and waits for its registry entry (the readiness signal).
    pub(crate) async fn start(&self, args: &[&str], env: &[(&str, &str)]) -> Bridge {
        self.spawn(self.command(args), env).await
    }

    /// As [`Sandbox::start`], with the bridge's address space capped at 2 GiB (`ulimit -v`),
    /// for tests whose failure mode is a bridge that reads without limit.
    pub(crate) async fn start_with_memory_cap(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Bridge {
        let bridge = self.command(args);
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg("ulimit -v 2097152 && exec \"$0\" \"$@\"")
            .arg(bridge.get_program())
            .args(bridge.get_args());
        for (key, value) in bridge.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        command.current_dir(self.root.path()).stdin(Stdio::null());
        self.spawn(command, env).await
    }

    async fn spawn(&self, mut command: Command, env: &[(&str, &str)]) -> Bridge {
        let stderr = std::fs::File::create(self.path("bridge.stderr")).expect("stderr file");
        command.stdout(Stdio::null()).stderr(stderr);
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn().expect("spawn the bridge");
        let entry = self.entry_path();
        wait_for("the registry entry", || entry.exists().then_some(())).await;
        let endpoint = wait_for("a parseable registry entry", || {
            let value: Value = serde_json::from_slice(&std::fs::read(&entry).ok()?).ok()?;
            value["endpoint"].as_str().map(PathBuf::from)
        })
        .await;
        Bridge { child, endpoint }
    }

    /// The `heartbeat_at` of the bridge's registry entry, when the entry can be read.
    pub(crate) fn heartbeat_at(&self) -> Option<String> {
        let entry: Value = serde_json::from_slice(&std::fs::read(self.entry_path()).ok()?).ok()?;
        entry["heartbeat_at"].as_str().map(str::to_owned)
    }

    /// Waits until the registry entry has been rewritten `times` more times.
    pub(crate) async fn heartbeats(&self, times: usize) {
        let mut seen = self.heartbeat_at();
        for _ in 0..times {
            seen = Some(
                wait_for("the heartbeat to advance", || {
                    self.heartbeat_at().filter(|now| Some(now) != seen.as_ref())
                })
                .await,
            );
        }
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.path("home/.pi/coms/hermes-bridge/log.ndjson")
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(self.path("bridge.stderr")).unwrap_or_default()
    }

    /// Every `hermes` call so far: `{"at","args","message"}`.
    pub(crate) fn hermes_calls(&self) -> Vec<Value> {
        read_lines(&self.path("hermes.log"))
    }

    /// Every log record so far.
    pub(crate) fn log(&self) -> Vec<Value> {
        read_lines(&self.log_path())
    }

    pub(crate) fn events(&self, qid: &str) -> Vec<String> {
        self.log()
            .iter()
            .filter(|r| r["qid"] == qid)
            .map(|r| r["event"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    pub(crate) fn has_event(&self, event: &str) -> bool {
        self.log().iter().any(|r| r["event"] == event)
    }

    pub(crate) fn answer_path(&self, qid: &str) -> PathBuf {
        self.questions().join(format!("{qid}.answer.json"))
    }

    pub(crate) fn write_answer(&self, qid: &str, answer: &str) {
        let body = serde_json::json!({
            "qid": qid, "answer": answer, "answered_by": "telegram:tester", "at": "2026-07-08T12:34:56.000Z",
        });
        self.write_file(&format!("{qid}.answer.json"), &body.to_string());
    }

    pub(crate) fn write_file(&self, name: &str, content: &str) {
        // Through a dot-prefixed temp and a rename, as Hermes' file tool writes.
        let temp = self.questions().join(format!(".tmp-{name}"));
        std::fs::write(&temp, content).expect("write");
        std::fs::rename(&temp, self.questions().join(name)).expect("rename");
    }

    /// The qid of the first Hermes message that carries a question marker.
    pub(crate) async fn asked_qid(&self) -> String {
        wait_for("a question on Telegram", || {
            self.hermes_calls().iter().find_map(|call| {
                let message = call["message"].as_str()?;
                let start = message.find("[HUB-Q:")? + "[HUB-Q:".len();
                message
                    .starts_with('❓')
                    .then(|| message[start..start + 26].to_owned())
            })
        })
        .await
    }

    pub(crate) async fn wait_event(&self, qid: &str, event: &str) {
        wait_for(&format!("{event} for {qid}"), || {
            self.events(qid).iter().any(|e| e == event).then_some(())
        })
        .await;
    }

    pub(crate) async fn wait_message(&self, needle: &str) -> Value {
        wait_for(&format!("a Hermes message containing {needle:?}"), || {
            self.hermes_calls()
                .into_iter()
                .find(|c| c["message"].as_str().is_some_and(|m| m.contains(needle)))
        })
        .await
    }
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

pub(crate) struct Bridge {
    child: Child,
    pub(crate) endpoint: PathBuf,
}

impl Bridge {
    pub(crate) fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid")
    }

    /// SIGTERM, then the exit status (within the deadline).
    pub(crate) async fn terminate(&mut self) -> ExitStatus {
        let pid = rustix::process::Pid::from_raw(self.pid()).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        wait_for("the bridge to exit", || {
            self.child.try_wait().ok().flatten()
        })
        .await
    }

    pub(crate) async fn send_raw(&self, line: &[u8]) -> String {
        let mut stream = tokio::net::UnixStream::connect(&self.endpoint)
            .await
            .expect("connect");
        stream.write_all(line).await.expect("write");
        match LineReader::default()
            .next_line(&mut stream)
            .await
            .expect("read")
        {
            Line::Text(text) => text,
            other => panic!("no reply line: {other:?}"),
        }
    }

    pub(crate) async fn send(&self, envelope: &Value) -> Value {
        exchange(&self.endpoint, envelope)
            .await
            .expect("the bridge replies")
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A coms peer that sends prompts and receives responses on its own endpoint.
pub(crate) struct Peer {
    listener: UnixListener,
    pub(crate) identity: Identity,
}

impl Peer {
    pub(crate) async fn new(sandbox: &Sandbox) -> Self {
        let session = new_ulid();
        let endpoint = sandbox.coms().endpoint(&session);
        std::fs::create_dir_all(endpoint.parent().expect("sockets dir")).expect("mkdir");
        Peer::at(&endpoint, &session)
    }

    /// A peer listening at `endpoint`, wherever that is, and naming it in its prompts.
    pub(crate) fn at(endpoint: &Path, session: &str) -> Self {
        let listener = UnixListener::bind(endpoint).expect("bind the peer");
        Peer {
            listener,
            identity: Identity {
                session_id: session.to_owned(),
                name: "claude-cli".into(),
                endpoint: endpoint.to_string_lossy().into_owned(),
                cwd: "/work".into(),
            },
        }
    }

    /// Finds `user-remote` in the pool as `coms-cli send user-remote` does, sends `text` and
    /// returns the prompt's `msg_id` (the ack is checked).
    pub(crate) async fn ask(&self, sandbox: &Sandbox, text: &str) -> String {
        let now = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_millis(),
        )
        .expect("fits");
        let entry = sandbox
            .coms()
            .find_peer(PROJECT, "user-remote", now)
            .expect("user-remote is live");
        let endpoint = PathBuf::from(entry["endpoint"].as_str().expect("endpoint"));
        let msg_id = new_ulid();
        self.ask_as(&endpoint, &msg_id, text).await;
        msg_id
    }

    pub(crate) async fn ask_as(&self, endpoint: &Path, msg_id: &str, text: &str) {
        let envelope = prompt_envelope(&self.identity, msg_id, text, &iso::format_ms(0));
        let ack = exchange(endpoint, &envelope)
            .await
            .expect("the prompt is acked");
        assert_eq!(ack, serde_json::json!({"type": "ack", "msg_id": msg_id}));
    }

    /// The next response envelope within `within`, acked; `None` when none came.
    pub(crate) async fn response(&self, within: Duration) -> Option<Value> {
        let accept = async {
            let (mut stream, _) = self.listener.accept().await.expect("accept");
            let Line::Text(line) = LineReader::default()
                .next_line(&mut stream)
                .await
                .expect("read")
            else {
                panic!("the bridge sent no line");
            };
            let envelope: Value = serde_json::from_str(&line).expect("JSON");
            let ack = serde_json::json!({"type": "ack", "msg_id": envelope["msg_id"]});
            stream
                .write_all(format!("{ack}\n").as_bytes())
                .await
                .expect("ack");
            envelope
        };
        tokio::time::timeout(within, accept).await.ok()
    }
}
