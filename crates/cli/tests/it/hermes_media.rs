//! Media end to end with a real Hermes gateway (scenario in `hermes_support.rs`): an inbound
//! image reaches Hermes' cache and the model, and a `MEDIA:` tag in the answer becomes one
//! uploaded document of the turn.
//!
//! | scenario | spec |
//! |---|---|
//! | inbound PNG: Hermes' image cache, the model sees it, no hand-off file left | hermes-host.md §19.7, Q8 |
//! | `MEDIA:<path>` in the answer: Hermes calls `send_document`, one upload, a media `turn_complete` of the turn | hermes-host.md §8.3, §19.6, turns.md OQ-6 |

use std::path::Path;
use std::time::Duration;

use canon_sim::control::Injection;
use canon_sim::{DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::{json, Value};

use super::gateway_support::{GatewayOptions, ANSWER};
use super::hermes_support::{is_turn_complete, Scenario};

/// A 1×1 RGBA PNG.
const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==";

/// The regular files in `dir` and below (none when it does not exist).
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// hermes-host.md §19.7 and Q8: an inbound image goes daemon temp file (0600 under
/// `<CANON_HOME>/tmp/`) → shim → `cache_image_from_bytes` → `MessageEvent.media_urls`; Hermes
/// hands it to the model and the temp file is gone.
#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_inbound_image_reaches_hermes_cache() {
    let canon_home = tempfile::tempdir().expect("scratch dir");
    let options = GatewayOptions {
        env: vec![
            ("CANON_HOME".into(), canon_home.path().display().to_string()),
            ("HERMES_ALLOW_PRIVATE_URLS".into(), "true".into()),
        ],
        ..GatewayOptions::default()
    };
    let sc = Scenario::start(json!([{"match": {}, "reply": {"text": ANSWER}}]), options).await;
    sc.inject(Injection {
        text: Some("what is in this picture".into()),
        raw_attachments: vec![
            json!({"bytesBase64": PNG_BASE64, "mimeType": "image/png", "fileName": "dot.png"}),
        ],
        ..Injection::default()
    });
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let turns = sc.turn_history(DEFAULT_CONVERSATION);
    let ids: std::collections::BTreeSet<&str> =
        turns.iter().filter_map(|t| t["turnId"].as_str()).collect();
    assert_eq!(ids.len(), 1, "{turns:#?}");
    let messages = sc.agent_messages(DEFAULT_CONVERSATION);
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(is_turn_complete(&messages[0]), "{:#}", messages[0]);

    // Hermes cached the image under its own home …
    let hermes_home = sc.gateway.home.path().join("hermes");
    let cached: Vec<_> = files_under(&hermes_home)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("img_") && n.ends_with(".png"))
        })
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}\n{}", sc.gateway.log_tail());
    let bytes = std::fs::read(&cached[0]).expect("the cached image");
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} bytes",
        bytes.len()
    );
    // … and the model saw it. 0.19.0 routes images of a model without known native vision as
    // text: an auxiliary vision request carries the pixels as an `image_url` part, and the turn's
    // user message carries the description and the cached path.
    let cached_path = cached[0].to_str().expect("a UTF-8 path");
    let requests = sc.turn_requests();
    let data_url = format!("data:image/png;base64,{PNG_BASE64}");
    let has_pixels = |r: &Value| {
        r["messages"].as_array().into_iter().flatten().any(|m| {
            m["content"].as_array().into_iter().flatten().any(|part| {
                part["type"] == "image_url" && part["image_url"]["url"] == data_url.as_str()
            })
        })
    };
    assert!(requests.iter().any(has_pixels), "{requests:#?}");
    let turn_request = requests
        .iter()
        .rfind(|r| r.to_string().contains("what is in this picture"))
        .unwrap_or_else(|| sc.fail("no turn request"));
    let user = turn_request["messages"]
        .as_array()
        .and_then(|m| m.iter().rfind(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    assert!(
        user.contains(&format!("image_url: {cached_path}")),
        "{user}"
    );
    // The daemon wrote its hand-off under CANON_HOME/tmp, and nothing is left there.
    let tmp = canon_home.path().join("tmp");
    assert!(tmp.is_dir(), "the daemon used CANON_HOME");
    assert_eq!(files_under(&tmp), Vec::<std::path::PathBuf>::new());
}

/// hermes-host.md §8.3 and §19.6, turns.md OQ-6: the model's answer names a file with a
/// `MEDIA:<path>` tag; Hermes 0.19.0 extracts it after the turn's text and calls the adapter's
/// `send_document` while the turn is still open. The daemon uploads the file once and sends it as
/// its own durable `turn_complete` of that turn, with an operation-bound `hermes-final-…` id
/// distinct from the answer's.
#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_media_tag_in_the_answer_is_uploaded_as_a_turn_document() {
    const PDF: &[u8] =
        b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n";
    let dir = tempfile::tempdir().expect("scratch dir");
    let report = dir.path().join("report.pdf");
    std::fs::write(&report, PDF).expect("write the report");
    let answer = format!("Here is the report.\nMEDIA:{}", report.display());
    let sc = Scenario::start(
        json!([{"match": {}, "reply": {"text": answer}}]),
        GatewayOptions::default(),
    )
    .await;
    sc.inject(Injection {
        text: Some("send me the report".into()),
        ..Injection::default()
    });
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    sc.wait("the document message", |s| {
        s.messages.iter().any(|m| {
            m.message["senderId"] == DEFAULT_AGENT
                && m.message["attachments"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
        })
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let uploads: Vec<(Option<String>, String, Vec<u8>)> = sc.sim.read_state(|s| {
        s.uploads
            .values()
            .map(|u| (u.file_name.clone(), u.mime_type.clone(), u.bytes.clone()))
            .collect()
    });
    assert_eq!(
        uploads,
        vec![(
            Some("report.pdf".to_owned()),
            "application/pdf".to_owned(),
            PDF.to_vec()
        )],
        "{}",
        sc.gateway.log_tail()
    );
    let turns = sc.turn_history(DEFAULT_CONVERSATION);
    let turn_id = turns[0]["turnId"].as_str().expect("a turn id").to_owned();
    let messages = sc.agent_messages_with_ids(DEFAULT_CONVERSATION);
    let (media, text): (Vec<_>, Vec<_>) = messages
        .iter()
        .partition(|(_, m)| m["attachments"].as_array().is_some_and(|a| !a.is_empty()));
    assert_eq!(media.len(), 1, "{messages:#?}");
    let (media_id, document) = media[0];
    assert_eq!(document["contentType"], "file", "{document:#}");
    assert_eq!(document["attachments"][0]["kind"], "file");
    assert_eq!(document["attachments"][0]["fileName"], "report.pdf");
    assert!(is_turn_complete(document), "{document:#}");
    assert_eq!(document["metadata"]["turnId"], turn_id.as_str());
    let media_id = media_id.clone().expect("an operation-bound id");
    assert!(media_id.starts_with("hermes-final-") && media_id.len() == 45);
    assert_eq!(text.len(), 1, "{messages:#?}");
    let (answer_id, answer_message) = text[0];
    assert!(
        answer_message["text"]
            .as_str()
            .is_some_and(|t| t.contains("Here is the report.")),
        "{answer_message:#}"
    );
    assert_ne!(answer_id.as_deref(), Some(media_id.as_str()));
}
