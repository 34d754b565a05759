//! Media end to end with a real Hermes gateway (scenario in `hermes_support.rs`): an inbound
//! image reaches Hermes' cache and the model, and a `MEDIA:` tag in the answer becomes one
//! uploaded document of the turn.
//!
//! | scenario | spec |
//! |---|---|
//! | inbound PNG: Hermes' image cache, the model sees it, no hand-off file left | hermes-host.md §19.7, Q8 |
//! | `MEDIA:<path>` in the answer: Hermes calls `send_document`, one upload, a media `turn_complete` of the turn | hermes-host.md §8.3, §19.6, turns.md OQ-6 |
//! | trusted-only image: a domain plugin's tool reads the bytes with `current_canon_inbound_media()`; the model sees only the marker | runtime-control.md §7.6, §8.1, §8.3, §8.5 |
//! | trusted-only visual media: the same for a PDF | runtime-control.md §8.1, §8.3, §8.5 |
//! | 17 attachments, and a failed download: nothing for the plugin, the `withheld` marker | runtime-control.md §8.3, §8.4, §8.5 |
//! | default `model` mode: the image still reaches the model, and the plugin reads it too | runtime-control.md §8.3 step 7, Q11 |

use std::path::Path;
use std::time::Duration;

use canon_sim::config::SimConfig;
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

/// The domain plugin of the trusted-media scenarios, as an operator would write one for the
/// Python plugin: a Hermes tool (toolset `canon`, so Canon turns see it) that imports the public
/// API by the seed's module name and records what `current_canon_inbound_media()` returned, one
/// JSON line per call, in the file named by `CANON_MEDIA_PROBE_OUT`.
const PROBE_PLUGIN: &str = r#"import hashlib, json, os

SCHEMA = {"name": "canon_media_probe", "description": "Inspect the trusted Canon attachments of this turn.",
          "parameters": {"type": "object", "properties": {}}}


def probe(args, **kwargs):
    from canon_hermes_plugin import CanonInboundMedia, current_canon_inbound_media
    try:
        media = current_canon_inbound_media()
        record = {"type": type(media).__name__, "media": [
            {"message_id": m.message_id, "attachment_index": m.attachment_index, "mime_type": m.mime_type,
             "file_name": m.file_name, "size_bytes": m.size_bytes, "sha256": hashlib.sha256(m.data).hexdigest(),
             "is_media": isinstance(m, CanonInboundMedia), "repr": repr(m)} for m in media]}
    except Exception as exc:
        record = {"error": "%s: %s" % (type(exc).__name__, exc)}
    with open(os.environ["CANON_MEDIA_PROBE_OUT"], "a") as out:
        out.write(json.dumps(record) + "\n")
    return json.dumps({"attachments": len(record.get("media", []))})


def register(ctx):
    ctx.register_tool(name="canon_media_probe", toolset="canon", schema=SCHEMA, handler=probe,
                      description=SCHEMA["description"])
"#;

/// The scripted model: a user message containing `PROBE` calls the probe tool, its result is
/// answered with the usual text.
fn probe_rules() -> Value {
    json!([
        {"match": {"role": "user", "contains": "PROBE"},
         "reply": {"toolCall": {"name": "canon_media_probe", "arguments": {}, "id": "call_probe"}}},
        {"match": {"role": "tool"}, "reply": {"text": ANSWER}},
        {"match": {}, "reply": {"text": ANSWER}}
    ])
}

/// A scenario with the probe plugin enabled beside the shim, `env` for the gateway, and the
/// daemon's `CANON_HOME` and the probe's record under `scratch`.
async fn probe_scenario(scratch: &Path, env: &[(&str, &str)]) -> Scenario {
    let mut all = vec![
        (
            "CANON_HOME".to_owned(),
            scratch.join("canon").display().to_string(),
        ),
        ("HERMES_ALLOW_PRIVATE_URLS".to_owned(), "true".to_owned()),
        (
            "CANON_MEDIA_PROBE_OUT".to_owned(),
            scratch.join("probe.jsonl").display().to_string(),
        ),
    ];
    all.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let options = GatewayOptions {
        env: all,
        ..GatewayOptions::default()
    };
    Scenario::start_full(
        SimConfig::for_tests(),
        probe_rules(),
        options,
        |_| {},
        |hermes_home| {
            let plugin = hermes_home.join("plugins/canon-media-probe");
            std::fs::create_dir_all(&plugin).expect("plugin dir");
            std::fs::write(
                plugin.join("plugin.yaml"),
                "name: canon-media-probe\nversion: 0.0.1\ndescription: test domain plugin\nkind: standalone\n",
            )
            .expect("plugin.yaml");
            std::fs::write(plugin.join("__init__.py"), PROBE_PLUGIN).expect("__init__.py");
            let config = hermes_home.join("config.yaml");
            let text = std::fs::read_to_string(&config).expect("config.yaml");
            assert!(text.contains("enabled: [canon-hermes]"), "{text}");
            let text = text.replace(
                "enabled: [canon-hermes]",
                "enabled: [canon-hermes, canon-media-probe]",
            );
            std::fs::write(&config, text).expect("config.yaml");
        },
    )
    .await
}

/// Injects `injection`, waits for its turn to close and returns the probe's records.
async fn probe_turn(sc: &Scenario, scratch: &Path, injection: Injection) -> (String, Vec<Value>) {
    let before = sc.turn_history(DEFAULT_CONVERSATION).len();
    let message = sc.inject(injection);
    let id = message["id"].as_str().expect("a message id").to_owned();
    sc.wait("the turn closed", move |s| {
        s.turn_history
            .iter()
            .filter(|t| t["conversationId"] == DEFAULT_CONVERSATION && t["agent"] == DEFAULT_AGENT)
            .skip(before)
            .any(|t| matches!(t["state"].as_str(), Some("completed" | "interrupted")))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let text = std::fs::read_to_string(scratch.join("probe.jsonl")).unwrap_or_default();
    let records = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON record"))
        .collect();
    (id, records)
}

/// The text of the user message of the scripted model's last turn request that contains
/// `needle`, without the `[System note: …]` Hermes appends to a user's very first message.
fn user_text(sc: &Scenario, needle: &str) -> String {
    let requests = sc.turn_requests();
    let request = requests
        .iter()
        .rfind(|r| r.to_string().contains(needle))
        .unwrap_or_else(|| sc.fail(&format!("no model request with {needle}")));
    request["messages"]
        .as_array()
        .and_then(|m| m.iter().rfind(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .split("\n\n[System note: ")
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Nothing of a hidden attachment reached the model: no image part and no data URL in any
/// request's messages, neither its name nor the simulator's file URL nor a hand-off path, and no
/// path under the gateway's home (where Hermes caches media) outside Hermes' system prompt.
fn assert_model_saw_no_media(sc: &Scenario, name: &str) {
    let home = sc.gateway.home.path().display().to_string();
    for request in sc.model.requests() {
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        for message in &messages {
            let parts = message["content"].as_array().cloned().unwrap_or_default();
            assert!(
                parts.iter().all(|p| p["type"] != "image_url"),
                "{message:#}"
            );
            let text = message.to_string();
            for needle in [
                name,
                "data:image",
                "data:application",
                "/files/",
                "canon-inbound-",
            ] {
                assert!(!text.contains(needle), "{needle} in {text}");
            }
            // Hermes' own system prompt names its home; no other message names a path in it.
            assert!(
                message["role"] == "system" || !text.contains(&home),
                "a Hermes path in {text}"
            );
        }
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn base64_of(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
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

fn png_bytes() -> Vec<u8> {
    canon_sim::http::decode_base64(PNG_BASE64).expect("valid base64")
}

/// One record of the probe with its attachments.
fn probed_media(records: &[Value]) -> &[Value] {
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["type"], "tuple", "{records:#?}");
    records[0]["media"].as_array().expect("a media list")
}

/// runtime-control.md §7.6, §8.1, §8.3, §8.5: with `CANON_INBOUND_IMAGE_DELIVERY=trusted-only`
/// the image never reaches Hermes' media path: the model's request carries the caption and the
/// exact marker, no image part, no name, URL or cache path; a domain plugin's tool reads the
/// bytes in the turn through `current_canon_inbound_media()`, and no hand-off file is left.
#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_trusted_only_image_reaches_the_domain_plugin_not_the_model() {
    let scratch = tempfile::tempdir().expect("scratch dir");
    let sc = probe_scenario(
        scratch.path(),
        &[("CANON_INBOUND_IMAGE_DELIVERY", "trusted-only")],
    )
    .await;
    let (message_id, records) = probe_turn(
        &sc,
        scratch.path(),
        Injection {
            text: Some("PROBE this picture".into()),
            raw_attachments: vec![
                json!({"bytesBase64": PNG_BASE64, "mimeType": "image/png", "fileName": "dot.png"}),
            ],
            ..Injection::default()
        },
    )
    .await;
    let media = probed_media(&records);
    let png = png_bytes();
    assert_eq!(media.len(), 1, "{records:#?}\n{}", sc.gateway.log_tail());
    assert_eq!(media[0]["message_id"], message_id.as_str());
    assert_eq!(media[0]["attachment_index"], 0);
    assert_eq!(media[0]["mime_type"], "image/png");
    assert_eq!(media[0]["file_name"], "dot.png");
    assert_eq!(media[0]["size_bytes"], png.len());
    assert_eq!(media[0]["sha256"], sha256_hex(&png));
    assert_eq!(media[0]["is_media"], true);
    let repr = media[0]["repr"].as_str().unwrap_or_default();
    assert!(
        repr.starts_with("CanonInboundMedia(") && !repr.contains("data="),
        "{repr}"
    );

    assert_eq!(
        user_text(&sc, "PROBE this picture"),
        "PROBE this picture\n\n[1 image attachment is available to trusted Canon tools and not sent to the model's general vision pipeline.]"
    );
    assert_model_saw_no_media(&sc, "dot.png");
    let hermes_home = sc.gateway.home.path().join("hermes");
    let cached: Vec<_> = files_under(&hermes_home)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("img_"))
        })
        .collect();
    assert_eq!(cached, Vec::<std::path::PathBuf>::new());
    assert_eq!(
        files_under(&scratch.path().join("canon/tmp")),
        Vec::<std::path::PathBuf>::new()
    );
    let messages = sc.agent_messages(DEFAULT_CONVERSATION);
    assert!(messages.iter().any(is_turn_complete), "{messages:#?}");
}

/// runtime-control.md §8.1, §8.3, §8.5: `CANON_INBOUND_VISUAL_MEDIA_DELIVERY=trusted-only` hides
/// a PDF the same way (sniffed by `%PDF-` even when declared as a generic file): the plugin reads
/// it, the model sees only the visual-media marker, and Hermes caches no document.
#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_trusted_only_pdf_reaches_the_domain_plugin_not_the_model() {
    const PDF: &[u8] =
        b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n";
    let scratch = tempfile::tempdir().expect("scratch dir");
    let sc = probe_scenario(
        scratch.path(),
        &[("CANON_INBOUND_VISUAL_MEDIA_DELIVERY", "trusted-only")],
    )
    .await;
    let (message_id, records) = probe_turn(
        &sc,
        scratch.path(),
        Injection {
            text: Some("PROBE this report".into()),
            raw_attachments: vec![json!({"bytesBase64": base64_of(PDF),
                "mimeType": "application/octet-stream", "fileName": "quarterly.bin"})],
            ..Injection::default()
        },
    )
    .await;
    let media = probed_media(&records);
    assert_eq!(media.len(), 1, "{records:#?}\n{}", sc.gateway.log_tail());
    assert_eq!(media[0]["message_id"], message_id.as_str());
    assert_eq!(media[0]["mime_type"], "application/octet-stream");
    assert_eq!(media[0]["file_name"], "quarterly.bin");
    assert_eq!(media[0]["sha256"], sha256_hex(PDF));
    assert_eq!(
        user_text(&sc, "PROBE this report"),
        "PROBE this report\n\n[1 visual attachment is available to trusted Canon tools and not sent to Hermes' general vision/document pipeline.]"
    );
    assert_model_saw_no_media(&sc, "quarterly");
    let hermes_home = sc.gateway.home.path().join("hermes");
    let cached: Vec<_> = files_under(&hermes_home)
        .into_iter()
        .filter(|p| {
            p.to_string_lossy().contains("quarterly") || p.extension().is_some_and(|e| e == "bin")
        })
        .collect();
    assert_eq!(cached, Vec::<std::path::PathBuf>::new());
    assert_eq!(
        files_under(&scratch.path().join("canon/tmp")),
        Vec::<std::path::PathBuf>::new()
    );
}

/// runtime-control.md §8.3, §8.4, §8.5: capture overflow (17 images, one more than a message may
/// capture) and a failed download (one of two images is gone) both fail closed: the plugin gets
/// an empty tuple, the model the `withheld` marker and no image, in a trusted-only gateway.
#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_trusted_overflow_and_failed_download_fail_closed() {
    let scratch = tempfile::tempdir().expect("scratch dir");
    let sc = probe_scenario(
        scratch.path(),
        &[("CANON_INBOUND_IMAGE_DELIVERY", "trusted-only")],
    )
    .await;
    let many = (0..17)
        .map(|i| json!({"bytesBase64": PNG_BASE64, "mimeType": "image/png", "fileName": format!("dot-{i}.png")}))
        .collect();
    let (_, records) = probe_turn(
        &sc,
        scratch.path(),
        Injection {
            text: Some("PROBE seventeen pictures".into()),
            raw_attachments: many,
            ..Injection::default()
        },
    )
    .await;
    assert_eq!(
        probed_media(&records),
        &[] as &[Value],
        "{}",
        sc.gateway.log_tail()
    );
    assert_eq!(
        user_text(&sc, "PROBE seventeen pictures"),
        "PROBE seventeen pictures\n\n[17 image attachments were withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]"
    );

    std::fs::remove_file(scratch.path().join("probe.jsonl")).expect("the first record");
    let origin = sc.sim.read_state(|s| s.origin.clone());
    let gone = json!({"kind": "image", "url": format!("{origin}/files/{DEFAULT_CONVERSATION}/nope/gone.png?token=x"),
                      "mimeType": "image/png", "fileName": "gone.png"});
    let (_, records) = probe_turn(
        &sc,
        scratch.path(),
        Injection {
            text: Some("PROBE two pictures".into()),
            attachments: vec![gone],
            raw_attachments: vec![
                json!({"bytesBase64": PNG_BASE64, "mimeType": "image/png", "fileName": "dot.png"}),
            ],
            ..Injection::default()
        },
    )
    .await;
    assert_eq!(
        probed_media(&records),
        &[] as &[Value],
        "{}",
        sc.gateway.log_tail()
    );
    assert_eq!(
        user_text(&sc, "PROBE two pictures"),
        "PROBE two pictures\n\n[2 image attachments were withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]"
    );
    assert_model_saw_no_media(&sc, "dot");
    assert_eq!(
        files_under(&scratch.path().join("canon/tmp")),
        Vec::<std::path::PathBuf>::new()
    );
}

/// runtime-control.md §8.3 step 7 and Q11: in the default `model` mode the image still takes
/// Hermes' normal path to the model (its pixels in a vision request), and the capture happens
/// all the same, so a domain plugin reads the bytes too.
#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_model_mode_delivers_the_image_and_still_captures_it() {
    let scratch = tempfile::tempdir().expect("scratch dir");
    let sc = probe_scenario(scratch.path(), &[]).await;
    let (message_id, records) = probe_turn(
        &sc,
        scratch.path(),
        Injection {
            text: Some("PROBE what is in this picture".into()),
            raw_attachments: vec![
                json!({"bytesBase64": PNG_BASE64, "mimeType": "image/png", "fileName": "dot.png"}),
            ],
            ..Injection::default()
        },
    )
    .await;
    let media = probed_media(&records);
    assert_eq!(media.len(), 1, "{records:#?}\n{}", sc.gateway.log_tail());
    assert_eq!(media[0]["message_id"], message_id.as_str());
    assert_eq!(media[0]["sha256"], sha256_hex(&png_bytes()));
    let data_url = format!("data:image/png;base64,{PNG_BASE64}");
    let has_pixels = |r: &Value| r.to_string().contains(&data_url);
    let requests = sc.turn_requests();
    assert!(requests.iter().any(has_pixels), "{requests:#?}");
    let user = user_text(&sc, "PROBE what is in this picture");
    assert!(!user.contains("trusted Canon tools"), "{user}");
    assert!(user.contains("image_url: "), "{user}");
}
