//! Inbound media through the real `canon-hermes serve --stdio` against canon-sim
//! (runtime-control.md §8.1–§8.3, §8.5, §8.6; hermes-host.md §19.7 and Q8): attachments are
//! downloaded behind the SSRF guard, handed to the shim as 0600 files under
//! `<CANON_HOME>/tmp/`, hidden under a trusted-only scope with the exact markers, skipped above
//! 10 MiB, given up after a total deadline when the server drips the body, kept in order per
//! conversation, and invalid delivery settings refuse the connect.
//! Trusted captures (runtime-control.md §7.6, §8.4) are read back with `api.inbound_media` in
//! the turn of their message, fail closed when a trusted batch is incomplete or too large, and
//! are gone once the turn completes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use canon_sim::control::Injection;
use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};
use canon_sim::{SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::{json, Value};

use super::serve_support::slow_drip_server;
use super::shim_support::{complete_turn, sim, start_turn, Shim, SESSION, WAIT};

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const PDF: &[u8] =
    b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n";

const IMAGE_AVAILABLE: &str = "[1 image attachment is available to trusted Canon tools and not sent to the model's general vision pipeline.]";

/// The fake shim with the daemon in its own `CANON_HOME`.
impl Shim {
    /// Spawns the daemon with a fresh `CANON_HOME`, loopback media allowed, and `env` on top
    /// (an empty value removes the variable).
    fn media(sim: &SimHandle, env: &[(&str, &str)]) -> Shim {
        Shim::media_in(sim, tempfile::tempdir().expect("temp dir"), env)
    }

    /// [`Shim::media`] in the given `CANON_HOME`.
    fn media_in(sim: &SimHandle, home: tempfile::TempDir, env: &[(&str, &str)]) -> Shim {
        let mut all = vec![
            ("HERMES_ALLOW_PRIVATE_URLS", "1"),
            ("CANON_INBOUND_IMAGE_DELIVERY", ""),
            ("CANON_INBOUND_VISUAL_MEDIA_DELIVERY", ""),
        ];
        all.extend_from_slice(env);
        Shim::spawn_in(sim, home, &all)
    }

    /// The hand-off directory, `<CANON_HOME>/tmp`.
    fn tmp(&self) -> PathBuf {
        self.home().join("tmp")
    }

    /// `hello`, then `adapter.connect` with this platform extra; the connect response.
    async fn try_connect_extra(&mut self, extra: Value) -> Value {
        self.try_connect_with(json!({"extra": extra}), json!({}))
            .await
    }

    /// [`Shim::try_connect_extra`], asserting the connect, then waits for the event stream.
    async fn connect_extra(&mut self, sim: &SimHandle, extra: Value) {
        self.connect_with(sim, json!({"extra": extra}), json!({}))
            .await;
    }
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

/// A PNG photo and a PDF report.
fn png_and_pdf() -> Vec<Value> {
    vec![
        raw(PNG, "image/png", "photo.png"),
        raw(PDF, "application/pdf", "report.pdf"),
    ]
}

/// Injects a human message with these raw attachments into the direct conversation.
fn inject_attachments(sim: &SimHandle, text: Option<&str>, raw_attachments: Vec<Value>) {
    sim.inject_message(&with_attachments(text, raw_attachments))
        .expect("inject");
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

/// The media listed by an `inbound.message`, asserting there are `count`.
fn listed_media(inbound: &Value, count: usize) -> &[Value] {
    let media = inbound["body"]["event"]["media"]
        .as_array()
        .expect("media listed");
    assert_eq!(media.len(), count, "{inbound}");
    media
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
    let mut shim = Shim::media(&sim, &[]);
    shim.connect_extra(&sim, json!({})).await;
    inject_attachments(&sim, None, png_and_pdf());
    let inbound = shim.accept_inbound().await;
    let event = &inbound["body"]["event"];
    let media = listed_media(&inbound, 2);
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
    let mut shim = Shim::media(&sim, &[("CANON_INBOUND_IMAGE_DELIVERY", " Trusted-Only ")]);
    shim.connect_extra(&sim, json!({})).await;
    inject_attachments(&sim, None, png_and_pdf());
    let inbound = shim.accept_inbound().await;
    let event = &inbound["body"]["event"];
    let media = listed_media(&inbound, 1);
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
    // The hidden image is captured for trusted tools, and the marker replaces the labels, so the
    // image's name never reaches the model's text.
    assert_eq!(event["text"], IMAGE_AVAILABLE);
    // The image was never written.
    assert_eq!(files_in(&dir).len(), 1);
    assert_eq!(shim.close().await, Some(0));
}

/// `api.inbound_media` in the turn of `message_id`: the answer's body.
async fn inbound_media(shim: &mut Shim, message_id: &str) -> Value {
    let ctx = json!({"platform": "canon", "chat_id": DEFAULT_CONVERSATION,
                     "session_key": SESSION, "message_id": message_id});
    let answer = shim.request("api.inbound_media", json!({"ctx": ctx})).await;
    assert_eq!(answer["ok"], true, "{answer}");
    answer["body"].clone()
}

/// Reads (and deletes, as the shim does) the hand-off files of an `api.inbound_media` answer:
/// (index, MIME, name, bytes).
fn read_captures(body: &Value, dir: &Path) -> Vec<(u64, String, String, Vec<u8>)> {
    let media = body["media"].as_array().expect("a media list");
    media
        .iter()
        .map(|m| {
            let path = PathBuf::from(m["path"].as_str().expect("a path"));
            assert_eq!(path.parent(), Some(dir), "{m}");
            let mode = std::fs::metadata(&path)
                .expect("metadata")
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o600, "{m}");
            let bytes = std::fs::read(&path).expect("the hand-off file");
            std::fs::remove_file(&path).expect("deleted");
            assert_eq!(m["size_bytes"], bytes.len(), "{m}");
            (
                m["attachment_index"].as_u64().expect("an index"),
                m["mime_type"].as_str().unwrap_or_default().to_owned(),
                m["file_name"].as_str().unwrap_or_default().to_owned(),
                bytes,
            )
        })
        .collect()
}

/// runtime-control.md §7.6, §8.3 step 7, §8.4: the hidden image of a trusted-only message is
/// read back in its turn (as often as asked) from new 0600 files, the listed PDF too (capture
/// happens in every mode); the context decides the batch; once the turn completes it is gone.
#[tokio::test(flavor = "multi_thread")]
async fn the_turn_of_a_message_reads_its_captured_attachments_until_it_completes() {
    let sim = sim().await;
    let mut shim = Shim::media(&sim, &[("CANON_INBOUND_IMAGE_DELIVERY", "trusted-only")]);
    shim.connect_extra(&sim, json!({})).await;
    inject_attachments(&sim, Some("look"), png_and_pdf());
    let inbound = shim.accept_inbound().await;
    let event = &inbound["body"]["event"];
    assert_eq!(event["text"], format!("look\n\n{IMAGE_AVAILABLE}"));
    let message_id = event["message_id"]
        .as_str()
        .expect("a message id")
        .to_owned();
    let event_ref = inbound["body"]["event_ref"]
        .as_str()
        .expect("a ref")
        .to_owned();
    let listed = listed_media(&inbound, 1)[0]["path"]
        .as_str()
        .expect("a path")
        .to_owned();
    std::fs::remove_file(listed).expect("the shim takes the listed file");
    start_turn(&mut shim, &event_ref, message_id.as_str()).await;

    let dir = shim.tmp();
    let expected = vec![
        (
            0,
            "image/png".to_owned(),
            "photo.png".to_owned(),
            PNG.to_vec(),
        ),
        (
            1,
            "application/pdf".to_owned(),
            "report.pdf".to_owned(),
            PDF.to_vec(),
        ),
    ];
    for _ in 0..2 {
        let body = inbound_media(&mut shim, &message_id).await;
        assert!(body["media"]
            .as_array()
            .is_some_and(|m| m.iter().all(|m| m["message_id"] == message_id.as_str())));
        assert_eq!(read_captures(&body, &dir), expected);
    }
    assert_eq!(files_in(&dir), Vec::<PathBuf>::new());

    // Another message id, or a context that is no Canon turn, reads nothing of it.
    assert_eq!(
        inbound_media(&mut shim, "m-other").await,
        json!({"media": []})
    );
    let answer = shim
        .request("api.inbound_media", json!({"ctx": {"platform": "telegram", "chat_id": DEFAULT_CONVERSATION, "message_id": message_id}}))
        .await;
    assert_eq!(
        answer["body"],
        json!({"media": [], "error": "This operation requires an active Canon conversation"})
    );
    let answer = shim
        .request(
            "api.inbound_media",
            json!({"ctx": {"platform": "canon", "chat_id": DEFAULT_CONVERSATION}}),
        )
        .await;
    assert_eq!(
        answer["body"]["error"],
        "This operation requires a Canon turn with trusted message provenance"
    );

    complete_turn(&mut shim, &event_ref).await;
    assert_eq!(
        inbound_media(&mut shim, &message_id).await,
        json!({"media": []})
    );
    assert_eq!(files_in(&dir), Vec::<PathBuf>::new());
    assert_eq!(shim.close().await, Some(0));
}

/// runtime-control.md §8.3 step 7, §8.4, §8.5: four 9 MiB images pass the 10 MiB download limit
/// one by one but overflow the 32 MiB a message may capture: nothing is captured and every
/// hidden image is reported withheld.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_above_32_mebibytes_captures_nothing() {
    let sim = sim().await;
    let mut shim = Shim::media(&sim, &[("CANON_INBOUND_IMAGE_DELIVERY", "trusted-only")]);
    shim.connect_extra(&sim, json!({})).await;
    let mut big = PNG.to_vec();
    big.resize(9 * 1024 * 1024, 0);
    let raws = (0..4)
        .map(|i| raw(&big, "image/png", &format!("big-{i}.png")))
        .collect();
    inject_attachments(&sim, None, raws);
    let inbound = shim.accept_inbound().await;
    let event = &inbound["body"]["event"];
    assert_eq!(
        event["text"],
        "[4 image attachments were withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]"
    );
    assert_eq!(event["media"], json!([]));
    let message_id = event["message_id"]
        .as_str()
        .expect("a message id")
        .to_owned();
    assert_eq!(
        inbound_media(&mut shim, &message_id).await,
        json!({"media": []})
    );
    assert_eq!(shim.close().await, Some(0));
}

/// runtime-control.md §8.3 (after the loop), §8.6: in a trusted scope, one failed download drops
/// the whole trusted batch (the image that did arrive is withheld too), and with nothing
/// registered an `interleave` message keeps its intent.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_download_in_a_trusted_batch_drops_every_capture() {
    let sim = sim().await;
    let mut shim = Shim::media(&sim, &[("CANON_INBOUND_IMAGE_DELIVERY", "trusted-only")]);
    shim.connect_extra(&sim, json!({})).await;
    let good = sim.read_state(|s| s.origin.clone());
    let missing = json!({"kind": "image", "url": format!("{good}/files/c-direct/nope/gone.png?token=x"),
                         "mimeType": "image/png", "fileName": "gone.png"});
    let mut injection = with_attachments(
        Some("two pictures"),
        vec![raw(PNG, "image/png", "photo.png")],
    );
    injection.attachments = vec![missing];
    injection.metadata = Some(json!({"deliveryIntent": "interleave"}));
    sim.inject_message(&injection).expect("inject");
    let inbound = shim.accept_inbound().await;
    let event = &inbound["body"]["event"];
    assert_eq!(
        event["text"],
        "two pictures\n\n[2 image attachments were withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]"
    );
    assert_eq!(event["metadata"]["deliveryIntent"], "interleave");
    let message_id = event["message_id"]
        .as_str()
        .expect("a message id")
        .to_owned();
    assert_eq!(
        inbound_media(&mut shim, &message_id).await,
        json!({"media": []})
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn platform_extra_scope_keeps_the_caption_and_demotes_interleave() {
    let sim = sim().await;
    let mut shim = Shim::media(&sim, &[]);
    shim.connect_extra(
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
    let inbound = shim.accept_inbound().await;
    let event = &inbound["body"]["event"];
    let media = listed_media(&inbound, 1);
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
        "what do you make of these?\n\n[1 visual attachment is available to trusted Canon tools and not sent to Hermes' general vision/document pipeline.]"
    );
    assert_eq!(event["metadata"]["deliveryIntent"], "queue");
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn attachments_above_ten_mebibytes_are_skipped() {
    let sim = sim().await;
    let mut shim = Shim::media(&sim, &[]);
    shim.connect_extra(&sim, json!({})).await;
    let big = vec![b'x'; 10 * 1024 * 1024 + 1];
    inject_attachments(
        &sim,
        Some("two files"),
        vec![
            raw(&big, "application/octet-stream", "big.bin"),
            raw(b"small", "text/plain", "small.txt"),
        ],
    );
    let inbound = shim.accept_inbound().await;
    let event = &inbound["body"]["event"];
    let media = listed_media(&inbound, 1);
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
    let mut shim = Shim::media(&sim, &[]);
    shim.connect_extra(&sim, json!({})).await;
    sim.add_fault(delay_files(1_500)).expect("fault installed");
    inject_attachments(
        &sim,
        Some("first, with a picture"),
        vec![raw(PNG, "image/png", "photo.png")],
    );
    inject_attachments(&sim, Some("second, text only"), Vec::new());
    sim.inject_message(&Injection {
        conversation_id: Some(OTHER.to_owned()),
        text: Some("elsewhere".to_owned()),
        turn_dispatch: Some("run_turn".to_owned()),
        ..Injection::default()
    })
    .expect("inject");
    let mut order = Vec::new();
    for _ in 0..3 {
        let inbound = shim.accept_inbound().await;
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
    let mut shim = Shim::media(
        &sim,
        &[
            ("HERMES_ALLOW_PRIVATE_URLS", ""),
            ("CANON_INBOUND_VISUAL_MEDIA_DELIVERY", "trusted-only"),
        ],
    );
    shim.connect_extra(&sim, json!({})).await;
    inject_attachments(
        &sim,
        None,
        vec![
            raw(PNG, "image/png", "photo.png"),
            raw(b"abc", "audio/ogg", "voice.ogg"),
        ],
    );
    let inbound = shim.accept_inbound().await;
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
    let mut shim = Shim::media(&sim, &[("CANON_INBOUND_VISUAL_MEDIA_DELIVERY", "always")]);
    let connect = shim.try_connect_extra(json!({})).await;
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
    let mut shim = Shim::media(&sim, &[]);
    let connect = shim
        .try_connect_extra(json!({"inbound_image_delivery": "sometimes"}))
        .await;
    assert_eq!(
        connect["body"]["fatal"]["message"],
        "CANON_INBOUND_IMAGE_DELIVERY must be 'model' or 'trusted-only'"
    );
    assert_eq!(connect["body"]["fatal"]["retryable"], false);
    assert_eq!(shim.close().await, Some(0));
    let mut shim = Shim::media(&sim, &[("CANON_INBOUND_IMAGE_DELIVERY", "model")]);
    shim.connect_extra(&sim, json!({"inbound_image_delivery": "sometimes"}))
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
    let mut shim = Shim::media_in(&sim, home, &[]);
    // The sweep runs before the first frame is read.
    shim.hello().await;
    assert!(!stale.exists());
    assert!(fresh.exists());
    assert!(foreign.exists());
    assert_eq!(shim.close().await, Some(0));
}

/// Hand-off files the shim never took (a refused message, a batch nobody read) must not pile
/// up for a long-running daemon's lifetime: the sweep repeats while it runs (every
/// `CANON_HERMES_HANDOFF_SWEEP_MS`, shortened here), deleting only its own stale files.
#[tokio::test(flavor = "multi_thread")]
async fn stale_hand_off_files_are_deleted_while_the_daemon_runs() {
    let sim = sim().await;
    let home = tempfile::tempdir().expect("temp dir");
    let dir = home.path().join("tmp");
    let mut shim = Shim::media_in(&sim, home, &[("CANON_HERMES_HANDOFF_SWEEP_MS", "50")]);
    shim.hello().await;
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let touch = |name: &str, age_s: u64| {
        let path = dir.join(name);
        let file = std::fs::File::create(&path).expect("created");
        file.set_modified(SystemTime::now() - Duration::from_secs(age_s))
            .expect("mtime set");
        path
    };
    // Made after the start's sweep.
    let stale = touch("canon-inbound-89ab-old.png", 2 * 3_600);
    let fresh = touch("canon-inbound-cdef-new.png", 60);
    let deadline = std::time::Instant::now() + WAIT;
    while stale.exists() {
        assert!(std::time::Instant::now() < deadline, "never swept");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(fresh.exists());
    assert_eq!(shim.close().await, Some(0));
}

/// canon-wire.md §2.2 [target]: an attachment whose server drips its body one byte at a time
/// never trips a read timeout, so only a total deadline per download (shortened here to 1.5 s)
/// frees its download slot. Four such messages, in four conversations, hold every slot
/// (`MEDIA_CONCURRENCY`): the daemon must still hand the shim a fifth conversation's message
/// with its picture, each slow message without its attachment (as a failed download does), and
/// the slow conversation's next message after its first.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_drip_attachment_times_out_and_every_conversation_goes_on() {
    let sim = sim().await;
    let slow: Vec<String> = (0..4).map(|i| format!("c-slow-{i}")).collect();
    const OTHER: &str = "c-other";
    for id in slow.iter().map(String::as_str).chain([OTHER]) {
        sim.create_conversation(canon_sim::ConversationSpec {
            id: Some(id.to_owned()),
            kind: "group".to_owned(),
            name: Some(id.to_owned()),
            member_ids: vec![
                canon_sim::DEFAULT_OWNER.to_owned(),
                DEFAULT_AGENT.to_owned(),
            ],
            behavior: None,
        });
    }
    let drip = slow_drip_server(Duration::from_millis(200)).await;
    let mut shim = Shim::media(&sim, &[("CANON_HERMES_MEDIA_DOWNLOAD_MS", "1500")]);
    shim.connect_extra(&sim, json!({})).await;
    let message = |conversation: &str, text: &str| Injection {
        conversation_id: Some(conversation.to_owned()),
        text: Some(text.to_owned()),
        turn_dispatch: Some("run_turn".to_owned()),
        ..Injection::default()
    };
    for conversation in &slow {
        let mut injection = message(conversation, "a picture that never ends");
        injection.attachments = vec![json!({"kind": "image", "url": drip,
                                            "mimeType": "image/png", "fileName": "slow.png"})];
        sim.inject_message(&injection).expect("inject");
    }
    let mut picture = message(OTHER, "a picture that arrives");
    picture.raw_attachments = vec![raw(PNG, "image/png", "photo.png")];
    sim.inject_message(&picture).expect("inject");
    sim.inject_message(&message(&slow[0], "and a second message"))
        .expect("inject");

    let mut seen = Vec::new();
    for _ in 0..6 {
        let inbound = shim.accept_inbound().await;
        let event = &inbound["body"]["event"];
        seen.push((
            event["source"]["chat_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            event["text"].as_str().unwrap_or_default().to_owned(),
            event["media"].as_array().map_or(0, Vec::len),
        ));
    }
    let of = |chat: &str| -> Vec<(String, usize)> {
        seen.iter()
            .filter(|(c, _, _)| c == chat)
            .map(|(_, text, media)| (text.clone(), *media))
            .collect()
    };
    assert_eq!(
        of(OTHER),
        [("a picture that arrives".to_owned(), 1)],
        "{seen:?}"
    );
    let without = ("a picture that never ends".to_owned(), 0);
    assert_eq!(
        of(&slow[0]),
        [without.clone(), ("and a second message".to_owned(), 0)],
        "{seen:?}"
    );
    for conversation in &slow[1..] {
        assert_eq!(of(conversation), std::slice::from_ref(&without), "{seen:?}");
    }
    assert_eq!(
        files_in(&shim.tmp()).len(),
        1,
        "only the picture that arrived"
    );
    assert_eq!(shim.close().await, Some(0));
}
