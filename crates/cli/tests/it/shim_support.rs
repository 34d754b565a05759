//! The fake shim: the shim side of one real `canon-hermes serve --stdio` child over the
//! JSON-lines protocol (hermes-host.md §19), against canon-sim. Used by every `serve_*.rs`
//! (helpers several of them share on top of it are in `serve_support.rs`) and by
//! `benches/daemon.rs` (which includes this file with `#[path]`); a few helpers serve only one
//! of the two binaries and say so. The turn helpers at the end (the direct conversation's
//! session and `ctx`, opening and completing a turn, the published turn states) are shared by
//! the test modules, including the real-gateway `hermes_busy.rs`.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use canon_sim::config::SimConfig;
use canon_sim::control::Injection;
use canon_sim::state::State;
use canon_sim::{Sim, SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// How long any single wait of the shim lasts.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// A frame and the instant the reader task read its line from the daemon's stdout.
pub(crate) type Frame = (Value, Instant);

/// The shim side of one daemon child.
pub(crate) struct Shim {
    /// The daemon process.
    pub(crate) child: Child,
    /// The daemon's stdin, until [`Shim::close`].
    pub(crate) stdin: Option<ChildStdin>,
    /// Lines of the daemon's stdout with the instant each was read.
    lines: mpsc::UnboundedReceiver<(String, Instant)>,
    next_id: u64,
    /// Frames read while waiting for something else.
    backlog: VecDeque<Frame>,
    /// The daemon's own `CANON_HOME` (a fresh one unless the test named one), removed with the
    /// shim.
    home: Option<tempfile::TempDir>,
}

impl Shim {
    /// Spawns the daemon with `RUST_LOG=warn`, stderr inherited.
    pub(crate) fn spawn(sim: &SimHandle) -> Shim {
        Shim::spawn_with(sim, &[])
    }

    /// [`Shim::spawn`] with extra environment; an empty value removes the variable.
    pub(crate) fn spawn_with(sim: &SimHandle, env: &[(&str, &str)]) -> Shim {
        Shim::spawn_logged(sim, "warn", Stdio::inherit(), env)
    }

    /// Spawns with this `RUST_LOG`, stderr and extra environment (an empty value removes the
    /// variable).
    pub(crate) fn spawn_logged(
        sim: &SimHandle,
        log: &str,
        stderr: Stdio,
        env: &[(&str, &str)],
    ) -> Shim {
        // Every daemon gets a home of its own unless the test names one: a shared `~/.canon`
        // would hand one test's inbox (handled message ids, keyed by the sim's address, and
        // loopback ports are reused) to a later test, which then drops its first message.
        let own_home = (!env.iter().any(|(name, _)| *name == "CANON_HOME"))
            .then(|| tempfile::tempdir().expect("a temp CANON_HOME"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_canon-hermes"));
        if let Some(home) = &own_home {
            command.env("CANON_HOME", home.path());
        }
        command
            .args(["serve", "--stdio"])
            .env("CANON_API_KEY", sim.api_key())
            .env("CANON_BASE_URL", sim.base_url())
            .env("CANON_STREAM_URL", sim.stream_url())
            .env_remove("CANON_ENVIRONMENT_ID")
            .env_remove("CANON_AGENT")
            .env_remove("CANON_AGENTS_JSON_BOOTSTRAP")
            .env_remove("CANON_TURN_VERBOSITY")
            // Hermetic credentials: no developer's `~/.hermes/.env` or `~/.canon/agents.json`
            // can configure the daemon (tests that use a profile override both).
            .env("HERMES_HOME", "/nonexistent/canon-hermes-tests/hermes")
            .env(
                "CANON_AGENTS_FILE",
                "/nonexistent/canon-hermes-tests/agents.json",
            )
            .env_remove("CANON_HOME_CHANNEL")
            .env_remove("CANON_HERMES_PARENT_PID")
            .env_remove("CANON_HERMES_SIGNAL_POLL_MS")
            .env_remove("CANON_HERMES_STATUS_INTERVAL_MS")
            .env("RUST_LOG", log);
        for (name, value) in env {
            if value.is_empty() {
                command.env_remove(name);
            } else {
                command.env(name, value);
            }
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("the binary starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        // Read continuously, so every frame's instant is when it could first be read.
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send((line, Instant::now())).is_err() {
                    break;
                }
            }
        });
        Shim {
            child,
            stdin,
            lines,
            next_id: 0,
            backlog: VecDeque::new(),
            home: own_home,
        }
    }

    /// [`Shim::spawn_with`] with `home` as the daemon's `CANON_HOME`, kept as long as the shim.
    // Only `serve_media.rs` gives the daemon its own home; the bench does not.
    #[allow(dead_code)]
    pub(crate) fn spawn_in(sim: &SimHandle, home: tempfile::TempDir, env: &[(&str, &str)]) -> Shim {
        let path = home.path().to_str().expect("a UTF-8 temp dir").to_owned();
        let mut all = vec![("CANON_HOME", path.as_str())];
        all.extend_from_slice(env);
        let mut shim = Shim::spawn_with(sim, &all);
        shim.home = Some(home);
        shim
    }

    /// The daemon's `CANON_HOME` given to [`Shim::spawn_in`].
    // Only `serve_media.rs` gives the daemon its own home; the bench does not.
    #[allow(dead_code)]
    pub(crate) fn home(&self) -> &Path {
        self.home.as_ref().expect("spawned with a home").path()
    }

    /// The daemon's process id.
    // Only the bench reads the daemon's `/proc` figures.
    #[allow(dead_code)]
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().expect("the daemon is running")
    }

    /// Writes one frame as a line on the daemon's stdin.
    pub(crate) async fn write(&mut self, frame: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let mut line = frame.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).await.expect("write stdin");
        stdin.flush().await.expect("flush stdin");
    }

    /// The next frame from stdout (not the backlog), with the instant it was read.
    async fn read_frame(&mut self) -> Frame {
        let (line, at) = tokio::time::timeout(WAIT, self.lines.recv())
            .await
            .expect("a frame within the wait")
            .expect("stdout open");
        let frame = serde_json::from_str(&line).expect("stdout carries JSON frames only");
        (frame, at)
    }

    /// Writes a request; returns its id.
    pub(crate) async fn send(&mut self, kind: &str, body: Value) -> String {
        self.next_id += 1;
        let id = format!("s:{}", self.next_id);
        self.write(&json!({"v": 1, "type": kind, "id": id, "body": body}))
            .await;
        id
    }

    /// The reply to request `id` (from the backlog first), keeping other frames in the backlog.
    pub(crate) async fn reply(&mut self, id: &str) -> Frame {
        let is_reply = |f: &Value| f.get("id") == Some(&json!(id)) && f.get("ok").is_some();
        if let Some(i) = self.backlog.iter().position(|(f, _)| is_reply(f)) {
            return self.backlog.remove(i).expect("present");
        }
        loop {
            let frame = self.read_frame().await;
            if is_reply(&frame.0) {
                return frame;
            }
            self.backlog.push_back(frame);
        }
    }

    /// Sends a request and returns its response, keeping other frames in the backlog.
    pub(crate) async fn request(&mut self, kind: &str, body: Value) -> Value {
        let id = self.send(kind, body).await;
        self.reply(&id).await.0
    }

    /// The next frame of `kind` (from the backlog first), with the instant it was read.
    pub(crate) async fn expect_frame(&mut self, kind: &str) -> Frame {
        if let Some(i) = self.backlog.iter().position(|(f, _)| f["type"] == kind) {
            return self.backlog.remove(i).expect("present");
        }
        loop {
            let frame = self.read_frame().await;
            if frame.0["type"] == kind {
                return frame;
            }
            self.backlog.push_back(frame);
        }
    }

    /// The next frame of `kind` (from the backlog first).
    // The bench times its frames, so it uses `expect_frame` only.
    #[allow(dead_code)]
    pub(crate) async fn expect(&mut self, kind: &str) -> Value {
        self.expect_frame(kind).await.0
    }

    /// The next `inbound.message` (from the backlog first), accepted.
    // The bench times the frame, so it expects and answers it itself.
    #[allow(dead_code)]
    pub(crate) async fn accept_inbound(&mut self) -> Value {
        let inbound = self.expect("inbound.message").await;
        self.answer(&inbound, json!({"accepted": true})).await;
        inbound
    }

    /// The frames read while waiting for something else, oldest first.
    // Only the tests inspect the backlog; the bench does not.
    #[allow(dead_code)]
    pub(crate) fn backlog(&self) -> impl Iterator<Item = &Value> {
        self.backlog.iter().map(|(f, _)| f)
    }

    /// Drops the notifications read so far (they need no answer), keeping replies.
    // Only the bench, which runs many turns on one daemon, trims the backlog.
    #[allow(dead_code)]
    pub(crate) fn drop_notifications(&mut self) {
        self.backlog.retain(|(f, _)| {
            let reply = f.get("ok").is_some();
            assert!(reply || f.get("id").is_none(), "an unanswered request: {f}");
            reply
        });
    }

    /// Answers a daemon-originated request with `{ok: true, body}`.
    pub(crate) async fn answer(&mut self, request: &Value, body: Value) {
        self.write(
            &json!({"v": 1, "id": request["id"], "re": request["type"], "ok": true,
                           "body": body}),
        )
        .await;
    }

    /// The `hello` request (with the hash the installed shim would send); returns its response.
    pub(crate) async fn hello(&mut self) -> Value {
        self.request(
            "hello",
            json!({
                "protocols": [1],
                "manifest_sha256": shim_sha256(),
                "shim_version": env!("CARGO_PKG_VERSION"),
                "binary_version": env!("CARGO_PKG_VERSION"),
                "hermes_version": "0.19.0",
                "python_version": "3.11.7",
                "pid": 1,
                "hermes_home": "/tmp/hermes",
            }),
        )
        .await
    }

    /// `hello`, then `adapter.connect` with this `config` and `host`; the connect response.
    pub(crate) async fn try_connect_with(&mut self, config: Value, host: Value) -> Value {
        let hello = self.hello().await;
        assert_eq!(hello["ok"], true, "{hello}");
        self.request(
            "adapter.connect",
            json!({"adapter_instance": 1, "config": config, "host": host}),
        )
        .await
    }

    /// [`Shim::try_connect_with`] as Hermes connects: typing indicator and streaming on.
    pub(crate) async fn try_connect(&mut self) -> Value {
        self.try_connect_with(
            json!({"extra": {}, "typing_indicator": true}),
            json!({"streaming_enabled": true}),
        )
        .await
    }

    /// [`Shim::try_connect_with`], asserting the connect, then waits for the event stream.
    // Only `serve_media.rs` connects with its own platform settings.
    #[allow(dead_code)]
    pub(crate) async fn connect_with(&mut self, sim: &SimHandle, config: Value, host: Value) {
        let connect = self.try_connect_with(config, host).await;
        connected(sim, &connect).await;
    }

    /// [`Shim::try_connect`], asserting the connect, then waits for the event stream.
    pub(crate) async fn connect(&mut self, sim: &SimHandle) {
        let connect = self.try_connect().await;
        connected(sim, &connect).await;
    }

    /// Every frame not taken yet once the daemon's stdout closed (it exited or was killed):
    /// the backlog, then the rest of stdout.
    // Only the crash tests read a dead daemon's last frames.
    #[allow(dead_code)]
    pub(crate) async fn remaining_frames(&mut self) -> Vec<Value> {
        let mut frames: Vec<Value> = self.backlog.drain(..).map(|(f, _)| f).collect();
        while let Ok(Some((line, _))) = tokio::time::timeout(WAIT, self.lines.recv()).await {
            frames.push(serde_json::from_str(&line).expect("stdout carries JSON frames only"));
        }
        frames
    }

    /// Closes stdin, waits for the daemon to exit, and returns every frame not taken yet.
    // Only the crash tests count a daemon's last frames.
    #[allow(dead_code)]
    pub(crate) async fn close_and_drain(&mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let frames = self.remaining_frames().await;
        let _ = tokio::time::timeout(WAIT, self.child.wait()).await;
        frames
    }

    /// Closes stdin and returns the exit code.
    pub(crate) async fn close(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the daemon exits after EOF")
            .expect("wait works");
        status.code()
    }
}

/// Asserts a successful `adapter.connect` response and waits until the daemon opened the event
/// stream.
async fn connected(sim: &SimHandle, connect: &Value) {
    assert_eq!(connect["body"]["connected"], true, "{connect}");
    assert_eq!(connect["body"]["agent_id"], DEFAULT_AGENT);
    sim.wait_for("stream open", WAIT, |s| !s.open_streams.is_empty())
        .await
        .expect("the daemon opens the event stream");
}

/// A simulator with the test configuration.
pub(crate) async fn sim() -> SimHandle {
    Sim::start(SimConfig::for_tests())
        .await
        .expect("the simulator starts")
}

// The turn helpers below serve the test binary only: the bench opens and completes its turns
// itself, in conversations of its own.

/// The session key Hermes gives the owner's direct conversation.
#[allow(dead_code)]
pub(crate) const SESSION: &str = "agent:main:canon:dm:c-direct";

/// The `ctx` of a Hermes call in the owner's direct conversation.
#[allow(dead_code)]
pub(crate) fn ctx() -> Value {
    json!({"platform": "canon", "chat_id": DEFAULT_CONVERSATION, "session_key": SESSION})
}

/// [`ctx`] with the owner as `user_id`, as a human-in-the-loop call carries it.
#[allow(dead_code)]
pub(crate) fn ctx_with_owner() -> Value {
    json!({"platform": "canon", "chat_id": DEFAULT_CONVERSATION, "session_key": SESSION,
           "user_id": DEFAULT_OWNER})
}

/// The `event` of `turn.start` and `turn.accepted` for a message from the owner in the direct
/// conversation.
#[allow(dead_code)]
pub(crate) fn dm_event(message_id: impl Into<Value>) -> Value {
    json!({"chat_id": DEFAULT_CONVERSATION, "chat_type": "dm", "user_id": DEFAULT_OWNER,
           "message_id": message_id.into()})
}

/// Opens a turn of the owner in the direct conversation for `event_ref` and the message
/// `message_id` (no inbound event needed); the turn id.
#[allow(dead_code)]
pub(crate) async fn start_turn(
    shim: &mut Shim,
    event_ref: &str,
    message_id: impl Into<Value>,
) -> String {
    let started = shim
        .request(
            "turn.start",
            json!({"event_ref": event_ref, "session_key": SESSION, "event": dm_event(message_id)}),
        )
        .await;
    started["body"]["turn_id"]
        .as_str()
        .expect("turn id")
        .to_owned()
}

/// Injects a human message, answers the daemon's `inbound.message` and opens the turn:
/// (event_ref, turn id).
#[allow(dead_code)]
pub(crate) async fn open_turn(shim: &mut Shim, sim: &SimHandle, text: &str) -> (String, String) {
    let injection = Injection {
        text: Some(text.to_owned()),
        ..Injection::default()
    };
    open_turn_with(shim, sim, &injection).await
}

/// [`open_turn`] for a given injection (which must carry a text): asserts the inbound event
/// carries the text, then opens the turn for its message.
#[allow(dead_code)]
pub(crate) async fn open_turn_with(
    shim: &mut Shim,
    sim: &SimHandle,
    injection: &Injection,
) -> (String, String) {
    let text = injection.text.as_deref().expect("a text");
    sim.inject_message(injection).expect("inject");
    let inbound = shim.accept_inbound().await;
    let event = &inbound["body"]["event"];
    assert!(
        event["text"].as_str().is_some_and(|t| t.contains(text)),
        "{inbound}"
    );
    let event_ref = inbound["body"]["event_ref"]
        .as_str()
        .expect("event_ref")
        .to_owned();
    let message_id = event["message_id"].as_str().expect("message id").to_owned();
    let turn_id = start_turn(shim, &event_ref, message_id).await;
    (event_ref, turn_id)
}

/// Completes the turn of `event_ref` with `success`, asserting the answer.
#[allow(dead_code)]
pub(crate) async fn complete_turn(shim: &mut Shim, event_ref: &str) {
    let done = shim
        .request(
            "turn.complete",
            json!({"event_ref": event_ref, "session_key": SESSION, "outcome": "success"}),
        )
        .await;
    assert_eq!(done["ok"], true, "{done}");
}

/// The agent's published `/runtime/turn` records in `conversation`, in order:
/// (turn id, state).
#[allow(dead_code)]
fn turn_records(s: &State, conversation: &str) -> Vec<(String, String)> {
    s.turn_history
        .iter()
        .filter(|t| t["conversationId"] == conversation && t["agent"] == DEFAULT_AGENT)
        .map(|t| {
            (
                t["turnId"].as_str().unwrap_or_default().to_owned(),
                t["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The agent's `/runtime/turn` states in `conversation`, consecutive repeats collapsed.
#[allow(dead_code)]
pub(crate) fn turn_states(sim: &SimHandle, conversation: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, state) in sim.read_state(|s| turn_records(s, conversation)) {
        if out.last() != Some(&state) {
            out.push(state);
        }
    }
    out
}

/// The agent's `/runtime/turn` states in `conversation` per turn id, each turn's in order.
#[allow(dead_code)]
pub(crate) fn turn_states_by_turn(s: &State, conversation: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, state) in turn_records(s, conversation) {
        out.entry(id).or_default().push(state);
    }
    out
}

/// The hash a shim installed by this binary sends as `hello.manifest_sha256`: SHA-256 over the
/// package's `.py` files in byte order of their names, each as `<name> LF <length> LF <bytes>`
/// (the manifest's `shim_hash`), computed here from the source package.
pub(crate) fn shim_sha256() -> String {
    use sha2::{Digest as _, Sha256};
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/hermes/plugin/canon-hermes");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("the shim package")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".py"))
        .collect();
    names.sort();
    let mut hasher = Sha256::new();
    for name in names {
        let bytes = std::fs::read(dir.join(&name)).expect("a module");
        hasher.update(format!("{name}\n{}\n", bytes.len()).as_bytes());
        hasher.update(&bytes);
    }
    format!("{:x}", hasher.finalize())
}
