//! The public domain-plugin API (runtime-control.md §7) from a domain plugin in a real Hermes
//! gateway: a small Hermes plugin beside the shim imports `canon_hermes_plugin` by the seed's
//! module name and, inside a Canon turn, calls the card helpers, `validate_card` and
//! `RUNTIME_CARD_LIMITS`; the test answers the card in canon-sim and reads what the plugin got.
//!
//! | scenario | spec |
//! |---|---|
//! | `validate_card`, `RUNTIME_CARD_LIMITS`, `current_canon_turn` | cards.md §10.1, runtime-control.md §7.2 |
//! | `send_card_to_current_conversation`: displayed; a card with actions refused | runtime-control.md §7.4 |
//! | `request_card_for_current_human`: the triggering human's answer comes back | runtime-control.md §7.3 |
//! | `upload_media_for_current_conversation`: the bytes land in Canon; bad input refused | runtime-control.md §7.5 |

use std::path::Path;

use canon_sim::control::Injection;
use canon_sim::{DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};

use super::gateway_support::GatewayOptions;
use super::hermes_support::{live_clock_config, Scenario};

/// A Hermes plugin whose `canon_card_probe` tool runs every card helper once and records what
/// each returned or raised, as one JSON line in `CANON_CARD_PROBE_OUT`.
const CARD_PROBE_PLUGIN: &str = r#"import asyncio, json, os

SCHEMA = {"name": "canon_card_probe", "description": "Exercise the Canon card helpers.",
          "parameters": {"type": "object", "properties": {}}}
INFO = {"schema": "canon.card.v1", "title": "Status", "fallbackText": "Status",
        "blocks": [{"kind": "summary", "title": "Build", "text": "green"}]}
ASK = {"schema": "canon.card.v1", "title": "Deploy?", "fallbackText": "Deploy?",
       "blocks": [{"kind": "actions", "actions": [{"id": "ship", "label": "Ship"}]}]}


def attempt(record, key, call):
    try:
        record[key] = call()
    except Exception as exc:
        record[key + "_error"] = "%s: %s" % (type(exc).__name__, exc)


def probe(args, **kwargs):
    import canon_hermes_plugin as api
    record = {"limits": dict(api.RUNTIME_CARD_LIMITS)}
    attempt(record, "valid", lambda: api.validate_card(INFO))
    attempt(record, "invalid", lambda: api.validate_card({"schema": "canon.card.v1"}))
    attempt(record, "human", lambda: api.current_canon_turn(require_human=True).user_id)
    attempt(record, "shown", lambda: asyncio.run(api.send_card_to_current_conversation(INFO)))
    attempt(record, "shown_with_actions", lambda: asyncio.run(api.send_card_to_current_conversation(ASK)))
    attempt(record, "answer", lambda: asyncio.run(api.request_card_for_current_human(ASK, timeout_seconds=60)))
    attempt(record, "uploaded", lambda: asyncio.run(api.upload_media_for_current_conversation(
        b"hello canon", "Text/Plain", file_name="hello.txt")))
    attempt(record, "upload_empty", lambda: asyncio.run(api.upload_media_for_current_conversation(b"", "text/plain")))
    attempt(record, "upload_no_mime", lambda: asyncio.run(api.upload_media_for_current_conversation(b"x", "plain")))
    with open(os.environ["CANON_CARD_PROBE_OUT"], "a") as out:
        out.write(json.dumps(record) + "\n")
    return json.dumps({"done": True})


def register(ctx):
    ctx.register_tool(name="canon_card_probe", toolset="canon", schema=SCHEMA, handler=probe,
                      description=SCHEMA["description"])
"#;

/// Writes a domain plugin `name` with `source` as its `__init__.py` into the profile and
/// enables it beside the shim.
pub(super) fn add_domain_plugin(hermes_home: &Path, name: &str, source: &str) {
    let plugin = hermes_home.join("plugins").join(name);
    std::fs::create_dir_all(&plugin).expect("plugin dir");
    std::fs::write(
        plugin.join("plugin.yaml"),
        format!(
            "name: {name}\nversion: 0.0.1\ndescription: test domain plugin\nkind: standalone\n"
        ),
    )
    .expect("plugin.yaml");
    std::fs::write(plugin.join("__init__.py"), source).expect("__init__.py");
    let config = hermes_home.join("config.yaml");
    let text = std::fs::read_to_string(&config).expect("config.yaml");
    assert!(text.contains("enabled: [canon-hermes]"), "{text}");
    std::fs::write(
        &config,
        text.replace(
            "enabled: [canon-hermes]",
            &format!("enabled: [canon-hermes, {name}]"),
        ),
    )
    .expect("config.yaml");
}

fn add_probe_plugin(hermes_home: &Path) {
    add_domain_plugin(hermes_home, "canon-card-probe", CARD_PROBE_PLUGIN);
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_domain_plugin_uses_the_card_helpers() {
    let scratch = tempfile::tempdir().expect("scratch");
    let out = scratch.path().join("probe.jsonl");
    let options = GatewayOptions {
        env: vec![("CANON_CARD_PROBE_OUT".to_owned(), out.display().to_string())],
        ..GatewayOptions::default()
    };
    let sc = Scenario::start_full(
        live_clock_config(),
        json!([
            {"match": {"role": "user", "contains": "PROBE"},
             "reply": {"toolCall": {"name": "canon_card_probe", "arguments": {}, "id": "call_probe"}}},
            {"match": {"role": "tool"}, "reply": {"text": "Probed."}},
            {"match": {}, "reply": {"text": "unexpected"}},
        ]),
        options,
        |_| {},
        add_probe_plugin,
    )
    .await;
    sc.inject(Injection {
        text: Some("PROBE the helpers".into()),
        ..Injection::default()
    });
    // The interactive card is asked of the triggering human; the owner answers it.
    sc.wait("the requested card", |s| {
        s.interactions
            .values()
            .any(|i| i.kind == "card" && i.request["card"]["title"] == "Deploy?")
    })
    .await;
    let asked = sc.sim.read_state(|s| {
        s.interactions
            .values()
            .find(|i| i.kind == "card" && i.request["card"]["title"] == "Deploy?")
            .cloned()
            .expect("present")
    });
    assert_eq!(asked.response_user_id.as_deref(), Some(DEFAULT_OWNER));
    sc.sim
        .respond_interaction(&canon_sim::interactions::Response {
            conversation_id: DEFAULT_CONVERSATION.into(),
            kind: "card".into(),
            id: asked.id.clone(),
            action_id: Some("ship".into()),
            ..Default::default()
        })
        .expect("answered");
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;

    let text = std::fs::read_to_string(&out).unwrap_or_else(|_| sc.fail("the probe ran"));
    let record: Value = serde_json::from_str(text.lines().next().expect("a record")).expect("JSON");
    assert_eq!(record["limits"]["blocks"], 24, "{record:#}");
    assert_eq!(
        record["limits"].as_object().map(serde_json::Map::len),
        Some(15)
    );
    assert_eq!(
        record["valid"],
        json!({"ok": true, "errors": []}),
        "{record:#}"
    );
    assert_eq!(record["invalid"]["ok"], false, "{record:#}");
    assert_eq!(record["human"], DEFAULT_OWNER, "{record:#}");
    assert_eq!(record["shown"]["status"], "displayed", "{record:#}");
    assert_eq!(record["shown"]["conversationId"], DEFAULT_CONVERSATION);
    assert!(record["shown"].get("success").is_none(), "{record:#}");
    assert_eq!(
        record["shown_with_actions_error"],
        "RuntimeError: send_card_to_current_conversation only accepts actionless cards; use request_card_for_current_human for interactive cards"
    );
    assert_eq!(record["answer"]["status"], "submitted", "{record:#}");
    assert_eq!(record["answer"]["actionId"], "ship", "{record:#}");
    assert_eq!(record["answer"]["respondedBy"], DEFAULT_OWNER, "{record:#}");
    // The upload landed in Canon; the plugin got its attachment and url.
    let url = record["uploaded"]["url"]
        .as_str()
        .unwrap_or_else(|| sc.fail("an upload url"));
    assert!(!url.is_empty());
    assert_eq!(
        record["uploaded"]["attachment"]["mimeType"], "text/plain",
        "{record:#}"
    );
    assert_eq!(sc.sim.read_state(|s| s.uploads.len()), 1);
    assert_eq!(
        record["upload_empty_error"],
        "ValueError: data must not be empty"
    );
    assert_eq!(
        record["upload_no_mime_error"],
        "RuntimeError: mime_type is required"
    );
}
