//! Outbound media through the real `canon-hermes serve --stdio` against canon-sim
//! (hermes-host.md §8.3, §15, §19.6; canon-wire.md §4.4, §7.4; turns.md §7.6 media row and
//! turns.md OQ-6): an image file in an open turn is one upload and one durable `turn_complete`
//! under the turn's ordinal id, replayed without a duplicate after an ambiguous failure; a
//! document out of turn is a standalone id group with the attachment on the final part; a file
//! above 10 MiB is refused with nothing uploaded; `standalone.send` uploads its `media_files`
//! onto the final part; a silenced turn answers success and writes nothing; a turn that sent
//! media, resynced into a new daemon after a `kill -9`, still stores its final exactly once.

use std::path::{Path, PathBuf};

use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};
use canon_sim::{SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::{json, Value};

use super::serve_support::slow_drip_server;
use super::shim_support::{
    complete_turn, ctx, dm_event, open_turn, sim, start_turn, Shim, SESSION, WAIT,
};

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const PDF: &[u8] =
    b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n";

const LIMIT_ERROR: &str = "Canon media upload limit is 10MB";

/// Writes `bytes` to `name` in `dir`; the path.
fn file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write the media file");
    path
}

/// A sparse file one byte above the 10 MiB cap.
fn oversized(dir: &Path) -> PathBuf {
    let path = dir.join("huge.png");
    let f = std::fs::File::create(&path).expect("create");
    f.set_len(10 * 1024 * 1024 + 1).expect("sparse file");
    path
}

/// The agent's stored messages in the direct conversation: (client id, message).
fn stored(sim: &SimHandle) -> Vec<(Option<String>, Value)> {
    sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.conversation_id == DEFAULT_CONVERSATION)
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .map(|m| (m.client_id.clone(), m.message.clone()))
            .collect()
    })
}

/// The uploads the sim holds: (file name, MIME type, size).
fn uploads(sim: &SimHandle) -> Vec<(Option<String>, String, usize)> {
    sim.read_state(|s| {
        s.uploads
            .values()
            .map(|u| (u.file_name.clone(), u.mime_type.clone(), u.bytes.len()))
            .collect()
    })
}

/// `adapter.send_media`; the response.
async fn send_media(shim: &mut Shim, op: &str, path: &Path, caption: &str, ctx: Value) -> Value {
    shim.request(
        "adapter.send_media",
        json!({"op": op, "chat_id": DEFAULT_CONVERSATION, "path": path, "caption": caption,
               "reply_to": null, "metadata": null, "ctx": ctx}),
    )
    .await
}

fn fault(path: &str, nth: u64, action: FaultAction) -> FaultRule {
    FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            method: Some("POST".to_owned()),
            path: Some(path.to_owned()),
            agent: Some(DEFAULT_AGENT.to_owned()),
            nth: Some(vec![nth]),
            ..FaultMatcher::default()
        },
        action,
        seen: 0,
        fired: 0,
    }
}

/// turns.md OQ-6: an image file sent during an open turn is one upload and one durable
/// `turn_complete` carrying the attachment, the turn id and a `hermes-final-…` id of the turn's
/// ordinal sequence. The first `/messages/send` is processed and its connection dropped: the
/// replay carries the same id and Canon keeps one copy. The turn's final then takes the next
/// ordinal's id.
#[tokio::test(flavor = "multi_thread")]
async fn image_file_in_an_open_turn_is_one_durable_turn_complete_replayed_without_duplicates() {
    let sim = sim().await;
    sim.add_fault(fault("/messages/send", 1, FaultAction::ProcessThenDrop))
        .expect("fault installed");
    let dir = tempfile::tempdir().expect("temp dir");
    let png = file(dir.path(), "cat.png", PNG);
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "send me a cat").await;

    let sent = send_media(&mut shim, "image_file", &png, "A cat", ctx()).await;
    assert_eq!(sent["body"]["success"], true, "{sent}");

    assert_eq!(
        uploads(&sim),
        vec![(
            Some("cat.png".to_owned()),
            "image/png".to_owned(),
            PNG.len()
        )],
        "one upload"
    );
    let messages = stored(&sim);
    assert_eq!(messages.len(), 1, "one stored copy: {messages:?}");
    let (client_id, message) = &messages[0];
    let media_id = client_id.clone().expect("an operation-bound id");
    assert!(
        media_id.len() == 45 && media_id.starts_with("hermes-final-"),
        "{media_id}"
    );
    assert_eq!(sent["body"]["message_id"], message["id"]);
    assert_eq!(message["text"], "A cat");
    assert_eq!(message["contentType"], "image");
    let attachments = message["attachments"].as_array().expect("attachments");
    assert_eq!(attachments.len(), 1);
    assert_eq!(attachments[0]["kind"], "image");
    assert_eq!(attachments[0]["mimeType"], "image/png");
    let metadata = &message["metadata"];
    assert_eq!(metadata["turnSemantics"], "turn_complete", "{metadata}");
    assert_eq!(metadata["turnId"], json!(turn_id));

    let entries = sim.journal(0, Some("/messages/send"));
    let statuses: Vec<u16> = entries.iter().map(|e| e.status).collect();
    assert_eq!(statuses, vec![0, 200], "dropped, then replayed");
    assert!(entries
        .iter()
        .all(|e| e.body["messageId"] == json!(media_id) && e.body == entries[0].body));

    // The final of the same turn takes the next ordinal's id.
    let text = "Here is your cat.";
    let staged = shim
        .request(
            "adapter.send",
            json!({"chat_id": DEFAULT_CONVERSATION, "content": text,
                   "metadata": {"expect_edits": true}, "ctx": ctx()}),
        )
        .await;
    assert_eq!(staged["body"]["success"], true, "{staged}");
    let edited = shim
        .request(
            "adapter.edit",
            json!({"chat_id": DEFAULT_CONVERSATION, "message_id": turn_id, "content": text,
                   "finalize": true, "ctx": ctx()}),
        )
        .await;
    assert_eq!(edited["body"]["success"], true, "{edited}");
    complete_turn(&mut shim, &event_ref).await;
    let messages = stored(&sim);
    assert_eq!(messages.len(), 2, "{messages:?}");
    let final_id = messages[1].0.clone().expect("a final id");
    assert!(final_id.starts_with("hermes-final-") && final_id != media_id);
    assert_eq!(messages[1].1["text"], text);
    assert!(messages[1]
        .1
        .get("attachments")
        .is_none_or(|a| a.as_array().is_none_or(Vec::is_empty)));
    assert_eq!(shim.close().await, Some(0));
}

/// Out of turn (no session, as Hermes' cron or `send_message` through the live adapter): a
/// document is a fresh standalone id group through `send_to`, the attachment on the final part.
#[tokio::test(flavor = "multi_thread")]
async fn document_out_of_turn_is_a_standalone_group_with_the_attachment_on_the_final_part() {
    let sim = sim().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let pdf = file(dir.path(), "report.pdf", PDF);
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let caption = "Quarterly figures follow.\n".repeat(200);
    assert!(caption.len() > 3_800);
    let sent = shim
        .request(
            "adapter.send_media",
            json!({"op": "document", "chat_id": DEFAULT_CONVERSATION, "path": pdf,
                   "caption": caption, "file_name": "Q3 report.pdf", "reply_to": null,
                   "metadata": null, "ctx": {}}),
        )
        .await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    assert_eq!(
        uploads(&sim),
        vec![(
            Some("Q3 report.pdf".to_owned()),
            "application/pdf".to_owned(),
            PDF.len()
        )]
    );
    let parts = stored(&sim);
    assert_eq!(parts.len(), 2, "{parts:?}");
    let base = parts[0].1["metadata"]["messageChunk"]["groupId"]
        .as_str()
        .expect("a group id")
        .to_owned();
    for (i, (client_id, message)) in parts.iter().enumerate() {
        assert_eq!(
            client_id.as_deref(),
            Some(format!("{base}-part-{}", i + 1).as_str())
        );
        assert!(message["metadata"].get("turnId").is_none(), "{message}");
    }
    let no_media = |m: &Value| {
        m.get("attachments")
            .is_none_or(|a| a.as_array().is_none_or(Vec::is_empty))
    };
    assert!(no_media(&parts[0].1), "{}", parts[0].1);
    let last = &parts[1].1;
    assert_eq!(last["contentType"], "file");
    assert_eq!(last["attachments"][0]["kind"], "file");
    assert_eq!(last["attachments"][0]["fileName"], "Q3 report.pdf");
    assert_eq!(last["metadata"]["turnSemantics"], "turn_complete");
    assert_eq!(sent["body"]["message_id"], last["id"]);
    let sends = sim.journal(0, Some("/agent/verbs/send_to"));
    assert_eq!(sends.len(), 2);
    assert!(sim.journal(0, Some("/messages/send")).is_empty());
    assert_eq!(shim.close().await, Some(0));
}

/// A file above 10 MiB is refused before it is read: an error result, nothing uploaded or sent.
#[tokio::test(flavor = "multi_thread")]
async fn oversized_file_is_refused_and_nothing_is_uploaded() {
    let sim = sim().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let huge = oversized(dir.path());
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (_event_ref, _turn_id) = open_turn(&mut shim, &sim, "send the big one").await;
    let sent = send_media(&mut shim, "image_file", &huge, "", ctx()).await;
    assert_eq!(sent["body"]["success"], false, "{sent}");
    assert_eq!(sent["body"]["error"], LIMIT_ERROR);
    assert_eq!(sent["body"]["retryable"], false);
    let missing = send_media(&mut shim, "voice", &dir.path().join("nope.ogg"), "", ctx()).await;
    assert_eq!(missing["body"]["success"], false, "{missing}");
    assert!(uploads(&sim).is_empty());
    assert!(sim.journal(0, Some("/media/upload")).is_empty());
    assert!(stored(&sim).is_empty());
    assert_eq!(shim.close().await, Some(0));
}

/// hermes-host.md §15: `standalone.send` uploads every media file, then sends the text as one
/// standalone group with all attachments on the final part; `contentType` is the first
/// attachment's kind. An oversized file fails the whole send before anything is uploaded.
#[tokio::test(flavor = "multi_thread")]
async fn standalone_send_uploads_media_files_onto_the_final_part() {
    let sim = sim().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let png = file(dir.path(), "chart.png", PNG);
    let pdf = file(dir.path(), "data.pdf", PDF);
    let mut shim = Shim::spawn(&sim);
    shim.hello().await;
    let sent = shim
        .request(
            "standalone.send",
            json!({"pconfig": {"extra": {}, "home_channel": null}, "chat_id": DEFAULT_CONVERSATION,
                   "message": "Nightly report", "thread_id": null,
                   "media_files": [png, pdf], "force_document": false}),
        )
        .await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    assert_eq!(uploads(&sim).len(), 2);
    let parts = stored(&sim);
    assert_eq!(parts.len(), 1, "{parts:?}");
    let message = &parts[0].1;
    assert_eq!(message["text"], "Nightly report");
    assert_eq!(message["contentType"], "image");
    let kinds: Vec<&str> = message["attachments"]
        .as_array()
        .expect("attachments")
        .iter()
        .map(|a| a["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["image", "file"]);
    assert_eq!(sent["body"]["message_id"], message["id"]);

    let huge = oversized(dir.path());
    let refused = shim
        .request(
            "standalone.send",
            json!({"pconfig": {"extra": {}, "home_channel": null}, "chat_id": DEFAULT_CONVERSATION,
                   "message": "Too big", "thread_id": null,
                   "media_files": [png, huge], "force_document": false}),
        )
        .await;
    assert_eq!(
        refused["body"]["error"],
        format!("Canon standalone send failed: {LIMIT_ERROR}"),
        "{refused}"
    );
    assert_eq!(uploads(&sim).len(), 2, "nothing more uploaded");
    assert_eq!(stored(&sim).len(), 1);
    assert_eq!(shim.close().await, Some(0));
}

/// turns.md §7.6 media row: a turn silenced by `no_reply` answers media with success and
/// neither uploads nor writes anything.
#[tokio::test(flavor = "multi_thread")]
async fn silenced_turn_answers_media_with_success_and_writes_nothing() {
    let sim = sim().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let png = file(dir.path(), "cat.png", PNG);
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, _turn_id) = open_turn(&mut shim, &sim, "stay quiet").await;
    let tool = shim
        .request(
            "tool.call",
            json!({"name": "canon_runtime_control", "args": {"action": "no_reply"},
                   "ctx": ctx()}),
        )
        .await;
    assert_eq!(tool["ok"], true, "{tool}");
    let sent = send_media(&mut shim, "image_file", &png, "A cat", ctx()).await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    complete_turn(&mut shim, &event_ref).await;
    sim.wait_for("silence recorded", WAIT, |s| !s.no_replies.is_empty())
        .await
        .expect("the daemon records the silence");
    assert!(uploads(&sim).is_empty());
    assert!(stored(&sim).is_empty());
    assert_eq!(shim.close().await, Some(0));
}

/// canon-wire.md §7.4: `send_image` with a remote URL downloads it through the SSRF guard (here
/// a Canon-hosted loopback URL, allowed by `HERMES_ALLOW_PRIVATE_URLS`), uploads it and sends an
/// image message; without the opt-in the guard refuses the loopback address and nothing is
/// uploaded.
#[tokio::test(flavor = "multi_thread")]
async fn remote_image_url_is_downloaded_behind_the_guard_then_uploaded() {
    let sim = sim().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let png = file(dir.path(), "cat.png", PNG);
    let mut shim = Shim::spawn_with(&sim, &[("HERMES_ALLOW_PRIVATE_URLS", "1")]);
    shim.connect(&sim).await;
    let first = send_media(&mut shim, "image_file", &png, "", json!({})).await;
    assert_eq!(first["body"]["success"], true, "{first}");
    let url = stored(&sim)[0].1["attachments"][0]["url"]
        .as_str()
        .expect("a Canon media url")
        .to_owned();
    let image = |url: &str| {
        json!({"op": "image_url", "chat_id": DEFAULT_CONVERSATION, "url": url,
               "caption": "From the web", "reply_to": null, "metadata": null, "ctx": {}})
    };
    let sent = shim.request("adapter.send_media", image(&url)).await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    let all = uploads(&sim);
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all
        .iter()
        .all(|(_, mime, size)| mime == "image/png" && *size == PNG.len()));
    let messages = stored(&sim);
    let last = &messages.last().expect("a message").1;
    assert_eq!(last["text"], "From the web");
    assert_eq!(last["contentType"], "image");
    assert_eq!(last["attachments"][0]["kind"], "image");
    assert_eq!(shim.close().await, Some(0));

    let mut guarded = Shim::spawn_with(&sim, &[("HERMES_ALLOW_PRIVATE_URLS", "")]);
    guarded.connect(&sim).await;
    let blocked = guarded.request("adapter.send_media", image(&url)).await;
    assert_eq!(blocked["body"]["success"], false, "{blocked}");
    assert!(
        blocked["body"]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("Blocked unsafe URL (SSRF protection)")),
        "{blocked}"
    );
    assert_eq!(uploads(&sim).len(), 2, "nothing more uploaded");
    assert_eq!(guarded.close().await, Some(0));
}

/// An image URL whose server drips its body one byte at a time never trips the per-chunk read
/// timeout; only the download's total budget (shortened here to 1.5 s) frees its upload slot.
/// Nine such sends hold more than every upload slot; a local file sent after them is still
/// uploaded and stored, and each drip fails with a clear error.
#[tokio::test(flavor = "multi_thread")]
async fn a_dripping_image_url_times_out_and_frees_its_upload_slot() {
    let sim = sim().await;
    let drip = slow_drip_server(std::time::Duration::from_millis(200)).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let png = file(dir.path(), "cat.png", PNG);
    let mut shim = Shim::spawn_with(
        &sim,
        &[
            ("HERMES_ALLOW_PRIVATE_URLS", "1"),
            ("CANON_HERMES_MEDIA_DOWNLOAD_MS", "1500"),
        ],
    );
    shim.connect(&sim).await;
    let mut drips = Vec::new();
    for _ in 0..9 {
        let id = shim
            .send(
                "adapter.send_media",
                json!({"op": "image_url", "chat_id": DEFAULT_CONVERSATION, "url": drip,
                       "caption": "Never ends", "reply_to": null, "metadata": null,
                       "ctx": {}}),
            )
            .await;
        drips.push(id);
    }
    let local = send_media(&mut shim, "image_file", &png, "A cat", json!({})).await;
    assert_eq!(local["body"]["success"], true, "{local}");
    assert_eq!(uploads(&sim).len(), 1, "only the local file was uploaded");
    for id in drips {
        let (reply, _) = shim.reply(&id).await;
        assert_eq!(reply["body"]["success"], false, "{reply}");
        let error = reply["body"]["error"].as_str().unwrap_or_default();
        assert!(error.contains("took longer than 1.5 s"), "{reply}");
    }
    assert_eq!(shim.close().await, Some(0));
}

/// Upload tasks are capped (at the shim's 64 requests in flight): with every upload hung in
/// Canon, the 65th `adapter.send_media` fails at once with a clear error instead of queuing
/// one more task.
#[tokio::test(flavor = "multi_thread")]
async fn uploads_beyond_the_cap_fail_at_once() {
    let sim = sim().await;
    sim.add_fault(FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            method: Some("POST".to_owned()),
            path: Some("/media/upload".to_owned()),
            ..FaultMatcher::default()
        },
        action: FaultAction::DelayBefore { ms: 30_000 },
        seen: 0,
        fired: 0,
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let png = file(dir.path(), "cat.png", PNG);
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    for _ in 0..64 {
        shim.send(
            "adapter.send_media",
            json!({"op": "image_file", "chat_id": DEFAULT_CONVERSATION, "path": png,
                   "caption": "A cat", "reply_to": null, "metadata": null, "ctx": ctx()}),
        )
        .await;
    }
    let started = std::time::Instant::now();
    let refused = send_media(&mut shim, "image_file", &png, "One more", ctx()).await;
    assert_eq!(refused["body"]["success"], false, "{refused}");
    assert_eq!(
        refused["body"]["error"], "Too many Canon uploads are waiting; try again shortly",
        "{refused}"
    );
    assert!(
        started.elapsed() < WAIT,
        "answered without waiting for an upload"
    );
}

/// hermes-host.md §19.10: a turn sends an image (its own durable `turn_complete` under the
/// turn's ordinal 1), then its daemon is killed with SIGKILL. The shim's successor resyncs the
/// turn (same turn id) and the turn completes with an answer. The resumed ledger starts again
/// at ordinal 1, so the final's first id is the image's and Canon answers 409
/// `MESSAGE_ID_EXISTS`; before the fix the daemon logged "final delivery failed" and the answer
/// was lost. Now the final moves on to ordinal 2: Canon stores the image once and the answer
/// exactly once, and the journal shows the 409 followed by the store.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_resynced_after_a_kill_stores_its_final_once_past_the_media_ordinal() {
    use std::os::unix::process::ExitStatusExt;

    let sim = sim().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let png = file(dir.path(), "cat.png", PNG);
    let mut first = Shim::spawn(&sim);
    first.connect(&sim).await;
    sim.inject_message(&canon_sim::control::Injection {
        text: Some("send me a cat, then tell me about it".to_owned()),
        ..Default::default()
    })
    .expect("inject");
    let inbound = first.accept_inbound().await;
    let event_ref = inbound["body"]["event_ref"]
        .as_str()
        .expect("event_ref")
        .to_owned();
    let message_id = inbound["body"]["event"]["message_id"].clone();
    let turn_id = start_turn(&mut first, &event_ref, message_id.clone()).await;
    let sent = send_media(&mut first, "image_file", &png, "A cat", ctx()).await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    let media_id = stored(&sim)[0].0.clone().expect("an operation-bound id");

    first.child.start_kill().expect("SIGKILL sent");
    let status = tokio::time::timeout(WAIT, first.child.wait())
        .await
        .expect("the daemon dies")
        .expect("wait works");
    assert_eq!(status.signal(), Some(9), "{status}");

    // The shim's respawn: hello, the reconnect, then the resync of the open turn.
    let mut second = Shim::spawn(&sim);
    assert_eq!(second.hello().await["ok"], true);
    let connect = second
        .request(
            "adapter.connect",
            json!({"adapter_instance": 1, "is_reconnect": true,
                   "config": {"extra": {}, "typing_indicator": true},
                   "host": {"streaming_enabled": true}}),
        )
        .await;
    assert_eq!(connect["body"]["connected"], true, "{connect}");
    let resync = second
        .request(
            "resync",
            json!({"adapter_connected": true,
                   // The shim saw the image go out: a durable send of the turn.
                   "open_turns": [{"event_ref": event_ref, "session_key": SESSION,
                                   "turn_id": turn_id, "event": dm_event(message_id),
                                   "started_at_ms": 1, "durable_sent": true}],
                   "queue_depths": {SESSION: 0}}),
        )
        .await;
    assert_eq!(resync["ok"], true, "{resync}");

    let text = "That was a cat, as you asked.";
    let staged = second
        .request(
            "adapter.send",
            json!({"chat_id": DEFAULT_CONVERSATION, "content": text,
                   "metadata": {"expect_edits": true}, "ctx": ctx()}),
        )
        .await;
    assert_eq!(staged["body"]["message_id"], turn_id.as_str(), "{staged}");
    let edited = second
        .request(
            "adapter.edit",
            json!({"chat_id": DEFAULT_CONVERSATION, "message_id": turn_id, "content": text,
                   "finalize": true, "ctx": ctx()}),
        )
        .await;
    assert_eq!(edited["body"]["success"], true, "{edited}");
    // Answered once the final settled (or failed) and the turn closed.
    complete_turn(&mut second, &event_ref).await;

    let messages = stored(&sim);
    let ids: Vec<Option<String>> = messages.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(messages.len(), 2, "the image and the answer: {messages:?}");
    assert_eq!(ids[0].as_deref(), Some(media_id.as_str()));
    let (final_id, answer) = &messages[1];
    let final_id = final_id.clone().expect("an operation-bound id");
    assert!(final_id.starts_with("hermes-final-") && final_id != media_id);
    assert_eq!(answer["text"], text);
    assert_eq!(answer["metadata"]["turnSemantics"], "turn_complete");
    assert_eq!(answer["metadata"]["turnId"], json!(turn_id));
    let answers = messages.iter().filter(|(_, m)| m["text"] == text).count();
    assert_eq!(answers, 1, "the answer is stored exactly once");

    let sends: Vec<(u16, Value)> = sim
        .journal(0, Some("/messages/send"))
        .into_iter()
        .map(|e| (e.status, e.body["messageId"].clone()))
        .collect();
    assert_eq!(
        sends,
        vec![
            (200, json!(media_id)),
            (409, json!(media_id)),
            (200, json!(final_id)),
        ],
        "the image, the final refused under the image's id, the final under the next"
    );
    assert_eq!(second.close().await, Some(0));
}
