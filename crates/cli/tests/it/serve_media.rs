//! Inbound media through the real `canon-hermes serve --stdio` against canon-sim
//! (runtime-control.md §8.1–§8.3, §8.5, §8.6; hermes-host.md §19.7 and Q8): attachments are
//! downloaded behind the SSRF guard, handed to the shim as 0600 files under
//! `<CANON_HOME>/tmp/`, hidden under a trusted-only scope with the exact markers, skipped above
//! 10 MiB, kept in order per conversation, and invalid delivery settings refuse the connect.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use canon_sim::config::SimConfig;
use canon_sim::control::Injection;
use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};
use canon_sim::{Sim, SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const WAIT: Duration = Duration::from_secs(10);

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const PDF: &[u8] =
    b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n";

const IMAGE_WITHHELD: &str = "[1 image attachment was withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]";

/// The shim side of one daemon child with its own `CANON_HOME`.
struct Shim {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    home: tempfile::TempDir,
}

impl Shim {
    /// Spawns the daemon with a fresh `CANON_HOME`, loopback media allowed, and `env` on top
    /// (an empty value removes the variable).
    fn spawn(sim: &SimHandle, env: &[(&str, &str)]) -> Shim {
        Shim::spawn_in(sim, tempfile::tempdir().expect("temp dir"), env)
    }

    fn spawn_in(sim: &SimHandle, home: tempfile::TempDir, env: &[(&str, &str)]) -> Shim {
        let mut command = Command::new(env!("CARGO_BIN_EXE_canon-hermes"));
        command
            .args(["serve", "--stdio"])
            .env("CANON_API_KEY", sim.api_key())
            .env("CANON_BASE_URL", sim.base_url())
            .env("CANON_STREAM_URL", sim.stream_url())
            .env("CANON_HOME", home.path())
            .env("HERMES_ALLOW_PRIVATE_URLS", "1")
            .env_remove("CANON_ENVIRONMENT_ID")
            .env_remove("CANON_HOME_CHANNEL")
            .env_remove("CANON_HERMES_PARENT_PID")
            .env_remove("CANON_HERMES_SIGNAL_POLL_MS")
            .env_remove("CANON_INBOUND_IMAGE_DELIVERY")
            .env_remove("CANON_INBOUND_VISUAL_MEDIA_DELIVERY")
            .env("RUST_LOG", "warn");
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
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the binary starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        Shim {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next_id: 0,
            home,
        }
    }

    fn tmp(&self) -> PathBuf {
        self.home.path().join("tmp")
    }

    async fn write(&mut self, frame: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let mut line = frame.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).await.expect("write stdin");
        stdin.flush().await.expect("flush stdin");
    }

    async fn read(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("a frame within the wait")
            .expect("stdout readable")
            .expect("stdout open");
        serde_json::from_str(&line).expect("stdout carries JSON frames only")
    }

    /// Sends a request and returns its response, dropping notifications read meanwhile.
    async fn request(&mut self, kind: &str, body: Value) -> Value {
        self.next_id += 1;
        let id = format!("s:{}", self.next_id);
        self.write(&json!({"v": 1, "type": kind, "id": id, "body": body}))
            .await;
        loop {
            let frame = self.read().await;
            if frame.get("id") == Some(&json!(id)) && frame.get("ok").is_some() {
                return frame;
            }
            assert_ne!(frame["type"], "inbound.message", "unexpected {frame}");
        }
    }

    /// The next `inbound.message` (answered), skipping notifications.
    async fn inbound(&mut self) -> Value {
        loop {
            let frame = self.read().await;
            if frame["type"] == "inbound.message" {
                self.write(&json!({"v": 1, "id": frame["id"], "re": "inbound.message",
                                   "ok": true, "body": {"accepted": true}}))
                    .await;
                return frame;
            }
        }
    }

    async fn hello(&mut self) {
        let hello = self
            .request(
                "hello",
                json!({
                    "protocols": [1],
                    "manifest_sha256": "0".repeat(64),
                    "shim_version": env!("CARGO_PKG_VERSION"),
                    "binary_version": env!("CARGO_PKG_VERSION"),
                    "hermes_version": "0.19.0",
                    "python_version": "3.11.7",
                    "pid": 1,
                    "hermes_home": "/tmp/hermes",
                }),
            )
            .await;
        assert_eq!(hello["ok"], true, "{hello}");
    }

    /// `hello`, then `adapter.connect` with this platform extra; the connect response.
    async fn try_connect(&mut self, extra: Value) -> Value {
        self.hello().await;
        self.request(
            "adapter.connect",
            json!({"adapter_instance": 1, "config": {"extra": extra}, "host": {}}),
        )
        .await
    }

    async fn connect(&mut self, sim: &SimHandle, extra: Value) {
        let connect = self.try_connect(extra).await;
        assert_eq!(connect["body"]["connected"], true, "{connect}");
        assert_eq!(connect["body"]["agent_id"], DEFAULT_AGENT);
        sim.wait_for("stream open", WAIT, |s| !s.open_streams.is_empty())
            .await
            .expect("the daemon opens the event stream");
    }

    async fn close(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the daemon exits after EOF")
            .expect("wait works");
        status.code()
    }
}

async fn sim() -> SimHandle {
    Sim::start(SimConfig::for_tests())
        .await
        .expect("the simulator starts")
}

/// Standard base64 (the sim's raw-attachment encoding).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn raw(bytes: &[u8], mime: &str, name: &str) -> Value {
    json!({"bytesBase64": base64(bytes), "mimeType": mime, "fileName": name})
}

fn with_attachments(text: Option<&str>, raw_attachments: Vec<Value>) -> Injection {
    Injection {
        text: text.map(str::to_owned),
        raw_attachments,
        ..Injection::default()
    }
}

/// The regular files in `dir` (none when it does not exist).
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    files
}

/// Checks one listed medium: kind, MIME, name, bytes on disk, 0600, under `dir`.
fn check_media(media: &Value, dir: &Path, kind: &str, mime: &str, name: &str, bytes: &[u8]) {
    assert_eq!(media["kind"], kind, "{media}");
    assert_eq!(media["mime_type"], mime, "{media}");
    assert_eq!(media["file_name"], name, "{media}");
    let path = PathBuf::from(media["path"].as_str().expect("a path"));
    assert!(path.is_absolute(), "{media}");
    assert_eq!(path.parent(), Some(dir), "{media}");
    assert_eq!(
        std::fs::read(&path).expect("the hand-off file exists"),
        bytes
    );
    let mode = std::fs::metadata(&path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "{media}");
}

fn delay_files(ms: u64) -> FaultRule {
    FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            method: Some("GET".to_owned()),
            path: Some("/files/*".to_owned()),
            times: Some(1),
            ..FaultMatcher::default()
        },
        action: FaultAction::DelayBefore { ms },
        seen: 0,
        fired: 0,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn png_and_pdf_reach_the_shim_as_private_files() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim, &[]);
    shim.connect(&sim, json!({})).await;
    sim.inject_message(&with_attachments(
        None,
        vec![
            raw(PNG, "image/png", "photo.png"),
            raw(PDF, "application/pdf", "report.pdf"),
        ],
    ))
    .expect("inject");
    let inbound = shim.inbound().await;
    let event = &inbound["body"]["event"];
    let media = event["media"].as_array().expect("media listed");
    assert_eq!(media.len(), 2, "{inbound}");
    let dir = shim.tmp();
    check_media(&media[0], &dir, "image", "image/png", "photo.png", PNG);
    check_media(
        &media[1],
        &dir,
        "document",
        "application/pdf",
        "report.pdf",
        PDF,
    );
    assert_eq!(event["message_type"], "photo");
    // No trusted scope: the attachment labels stay the text.
    assert_eq!(
        event["text"],
        "[image attachment: photo.png; file attachment: report.pdf]"
    );
    assert_eq!(event["metadata"]["deliveryIntent"], "queue");
    assert_eq!(files_in(&dir).len(), 2);
    // Downloads carry no Authorization header (canon-wire.md §7.2).
    assert!(sim.read_state(|s| s.media_auth_seen.is_empty()));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn trusted_only_images_are_hidden_and_the_pdf_is_listed() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim, &[("CANON_INBOUND_IMAGE_DELIVERY", " Trusted-Only ")]);
    shim.connect(&sim, json!({})).await;
    sim.inject_message(&with_attachments(
        None,
        vec![
            raw(PNG, "image/png", "photo.png"),
            raw(PDF, "application/pdf", "report.pdf"),
        ],
    ))
    .expect("inject");
    let inbound = shim.inbound().await;
    let event = &inbound["body"]["event"];
    let media = event["media"].as_array().expect("media listed");
    assert_eq!(media.len(), 1, "{inbound}");
    let dir = shim.tmp();
    check_media(
        &media[0],
        &dir,
        "document",
        "application/pdf",
        "report.pdf",
        PDF,
    );
    assert_eq!(event["message_type"], "document");
    // No registry (§8.4 is not built): the hidden image is reported as withheld, and the marker
    // replaces the labels, so the image's name never reaches the model's text.
    assert_eq!(event["text"], IMAGE_WITHHELD);
    // The image was never written.
    assert_eq!(files_in(&dir).len(), 1);
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn platform_extra_scope_keeps_the_caption_and_demotes_interleave() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim, &[]);
    shim.connect(
        &sim,
        json!({"inbound_visual_media_delivery": "trusted-only"}),
    )
    .await;
    let mut injection = with_attachments(
        Some("what do you make of these?"),
        vec![
            raw(PDF, "application/pdf", "report.pdf"),
            raw(b"just text", "text/plain", "notes.txt"),
        ],
    );
    injection.metadata = Some(json!({"deliveryIntent": "interleave"}));
    sim.inject_message(&injection).expect("inject");
    let inbound = shim.inbound().await;
    let event = &inbound["body"]["event"];
    let media = event["media"].as_array().expect("media listed");
    assert_eq!(media.len(), 1, "{inbound}");
    check_media(
        &media[0],
        &shim.tmp(),
        "document",
        "text/plain",
        "notes.txt",
        b"just text",
    );
    assert_eq!(
        event["text"],
        "what do you make of these?\n\n[1 visual attachment was withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]"
    );
    assert_eq!(event["metadata"]["deliveryIntent"], "queue");
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn attachments_above_ten_mebibytes_are_skipped() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim, &[]);
    shim.connect(&sim, json!({})).await;
    let big = vec![b'x'; 10 * 1024 * 1024 + 1];
    sim.inject_message(&with_attachments(
        Some("two files"),
        vec![
            raw(&big, "application/octet-stream", "big.bin"),
            raw(b"small", "text/plain", "small.txt"),
        ],
    ))
    .expect("inject");
    let inbound = shim.inbound().await;
    let event = &inbound["body"]["event"];
    let media = event["media"].as_array().expect("media listed");
    assert_eq!(media.len(), 1, "{inbound}");
    check_media(
        &media[0],
        &shim.tmp(),
        "document",
        "text/plain",
        "small.txt",
        b"small",
    );
    assert_eq!(event["text"], "two files");
    assert_eq!(files_in(&shim.tmp()).len(), 1);
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_later_message_never_overtakes_earlier_media_in_its_conversation() {
    let sim = sim().await;
    const OTHER: &str = "c-other";
    sim.create_conversation(canon_sim::ConversationSpec {
        id: Some(OTHER.to_owned()),
        kind: "group".to_owned(),
        name: Some("Other".to_owned()),
        member_ids: vec![
            canon_sim::DEFAULT_OWNER.to_owned(),
            DEFAULT_AGENT.to_owned(),
        ],
        behavior: None,
    });
    let mut shim = Shim::spawn(&sim, &[]);
    shim.connect(&sim, json!({})).await;
    sim.add_fault(delay_files(1_500)).expect("fault installed");
    sim.inject_message(&with_attachments(
        Some("first, with a picture"),
        vec![raw(PNG, "image/png", "photo.png")],
    ))
    .expect("inject");
    sim.inject_message(&with_attachments(Some("second, text only"), Vec::new()))
        .expect("inject");
    sim.inject_message(&Injection {
        conversation_id: Some(OTHER.to_owned()),
        text: Some("elsewhere".to_owned()),
        turn_dispatch: Some("run_turn".to_owned()),
        ..Injection::default()
    })
    .expect("inject");
    let mut order = Vec::new();
    for _ in 0..3 {
        let inbound = shim.inbound().await;
        let event = &inbound["body"]["event"];
        order.push((
            event["source"]["chat_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            event["text"].as_str().unwrap_or_default().to_owned(),
            event["media"].as_array().map_or(0, Vec::len),
        ));
    }
    assert_eq!(
        order,
        vec![
            // Another conversation is not held up by the slow download.
            (OTHER.to_owned(), "elsewhere".to_owned(), 0),
            (
                DEFAULT_CONVERSATION.to_owned(),
                "first, with a picture".to_owned(),
                1
            ),
            (
                DEFAULT_CONVERSATION.to_owned(),
                "second, text only".to_owned(),
                0
            ),
        ]
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn private_media_urls_are_refused_without_the_opt_in() {
    let sim = sim().await;
    let mut shim = Shim::spawn(
        &sim,
        &[
            ("HERMES_ALLOW_PRIVATE_URLS", ""),
            ("CANON_INBOUND_VISUAL_MEDIA_DELIVERY", "trusted-only"),
        ],
    );
    shim.connect(&sim, json!({})).await;
    sim.inject_message(&with_attachments(
        None,
        vec![
            raw(PNG, "image/png", "photo.png"),
            raw(b"abc", "audio/ogg", "voice.ogg"),
        ],
    ))
    .expect("inject");
    let inbound = shim.inbound().await;
    let event = &inbound["body"]["event"];
    assert_eq!(event["media"], json!([]), "{inbound}");
    // Scope `visual`: every failed attachment counts, audio included [parity].
    assert_eq!(
        event["text"],
        "[2 visual attachments were withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]"
    );
    assert_eq!(event["message_type"], "text");
    let fetched = sim.journal(0, Some("/files/"));
    assert!(
        fetched.is_empty(),
        "the guard let a loopback download through"
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_delivery_values_refuse_the_connect() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim, &[("CANON_INBOUND_VISUAL_MEDIA_DELIVERY", "always")]);
    let connect = shim.try_connect(json!({})).await;
    assert_eq!(
        connect["body"],
        json!({"connected": false, "fatal": {
            "code": "invalid_config",
            "message": "CANON_INBOUND_VISUAL_MEDIA_DELIVERY must be 'model' or 'trusted-only'",
            "retryable": false,
        }})
    );
    assert!(sim.journal(0, Some("/agents/me")).is_empty());
    assert_eq!(shim.close().await, Some(0));

    // The platform extra is checked the same way, and the environment wins over it.
    let mut shim = Shim::spawn(&sim, &[]);
    let connect = shim
        .try_connect(json!({"inbound_image_delivery": "sometimes"}))
        .await;
    assert_eq!(
        connect["body"]["fatal"]["message"],
        "CANON_INBOUND_IMAGE_DELIVERY must be 'model' or 'trusted-only'"
    );
    assert_eq!(connect["body"]["fatal"]["retryable"], false);
    assert_eq!(shim.close().await, Some(0));
    let mut shim = Shim::spawn(&sim, &[("CANON_INBOUND_IMAGE_DELIVERY", "model")]);
    shim.connect(&sim, json!({"inbound_image_delivery": "sometimes"}))
        .await;
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn stale_hand_off_files_are_deleted_at_start() {
    let sim = sim().await;
    let home = tempfile::tempdir().expect("temp dir");
    let dir = home.path().join("tmp");
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let touch = |name: &str, age_s: u64| {
        let path = dir.join(name);
        let file = std::fs::File::create(&path).expect("created");
        file.set_modified(SystemTime::now() - Duration::from_secs(age_s))
            .expect("mtime set");
        path
    };
    let stale = touch("canon-inbound-0123-old.png", 2 * 3_600);
    let fresh = touch("canon-inbound-4567-new.png", 60);
    let foreign = touch("not-ours.txt", 2 * 3_600);
    let mut shim = Shim::spawn_in(&sim, home, &[]);
    // The sweep runs before the first frame is read.
    shim.hello().await;
    assert!(!stale.exists());
    assert!(fresh.exists());
    assert!(foreign.exists());
    assert_eq!(shim.close().await, Some(0));
}
