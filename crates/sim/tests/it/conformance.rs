//! Contract conformance: the simulator's verb handling against
//! `@canonmsg/backend-contracts@8.6.1`'s `canon-verb-wire.schema.json` and
//! `canon-verbs.schema.json` (canon-wire.md §12.3), validated with the `jsonschema` crate.
//!
//! The package is not committed (it states no license): `cargo xtask sync-contracts` unpacks
//! it into `.cache/contracts/`. Without it these tests fail and say so.

use std::path::PathBuf;

use canon_sim::PrincipalSpec;
use serde_json::{json, Value};

use super::support::sim;
use super::verbs::{verb, wire};

fn package_dir() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.join(".cache/contracts/backend-contracts-8.6.1/package/dist")
}

fn load(name: &str) -> Value {
    let path = package_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} is missing ({e}): run `cargo xtask sync-contracts` first to fetch \
             @canonmsg/backend-contracts@8.6.1 into .cache/contracts/",
            path.display()
        )
    });
    serde_json::from_str(&text).expect("schema is JSON")
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::validator_for(schema).expect("schema compiles")
}

/// A validator for `$defs/<name>` of the verbs schema.
fn def_validator(verbs: &Value, name: &str) -> jsonschema::Validator {
    let mut schema = verbs.clone();
    assert!(
        schema["$defs"].get(name).is_some(),
        "schema has no $defs/{name}"
    );
    schema["$ref"] = json!(format!("#/$defs/{name}"));
    validator(&schema)
}

#[tokio::test]
async fn accepted_requests_match_the_wire_schema_and_results_match_the_verb_schema() {
    let wire_schema = validator(&load("canon-verb-wire.schema.json"));
    let verbs = load("canon-verbs.schema.json");
    let sim = sim().await;
    for (id, kind) in [("h-peer", "human"), ("h-join", "human")] {
        sim.create_principal(PrincipalSpec {
            id: Some(id.into()),
            kind: kind.into(),
            ..Default::default()
        });
    }
    sim.with_state(|s| {
        s.principals
            .get_mut("a-hermes")
            .unwrap()
            .contacts
            .push("h-peer".into())
    });
    let m = super::support::call(
        &sim,
        "POST",
        "/messages/send",
        Some(json!({"conversationId": "c-direct", "text": "source"})),
    )
    .await
    .json();
    let mid = m["id"].as_str().unwrap().to_owned();
    let requests = vec![
        wire(
            "send_to",
            json!({"conversationId": "c-direct", "idempotencyKey": "hermes-final-c1", "turn": {"turnSemantics": "turn_complete"}}),
            json!({"text": "hi", "messageOptions": {"metadata": {"turnComplete": true}}}),
        ),
        wire(
            "send_to",
            json!({"targetUserId": "h-peer", "sessionSelection": {"mode": "continue_or_create"}}),
            json!({"text": "hello"}),
        ),
        wire(
            "send_to",
            json!({"targetUserId": "h-peer", "sessionSelection": {"mode": "new"}}),
            json!({"text": "again"}),
        ),
        wire(
            "create_group",
            json!({"memberIds": ["h-peer", "h-join"]}),
            json!({"name": "Team"}),
        ),
        wire(
            "forward",
            json!({"sourceConversationId": "c-direct", "conversationId": "c-direct", "messageId": mid}),
            json!({"text": "look"}),
        ),
        wire(
            "share_contact",
            json!({"conversationId": "c-direct", "contactUserId": "h-peer", "idempotencyKey": "share-1"}),
            json!({}),
        ),
        wire(
            "add_member",
            json!({"conversationId": "c-direct", "targetUserId": "h-join"}),
            json!({}),
        ),
        wire(
            "remove_member",
            json!({"conversationId": "c-direct", "targetUserId": "h-join"}),
            json!({}),
        ),
        wire(
            "no_reply",
            json!({"conversationId": "c-direct", "messageId": mid}),
            json!({"reason": "given"}),
        ),
        wire("no_reply", json!({}), json!({})),
    ];
    for request in requests {
        let name = request["verb"].as_str().unwrap().to_owned();
        assert!(
            wire_schema.is_valid(&request),
            "test request must be schema-valid: {request}"
        );
        let r = verb(&sim, &name, request.clone()).await;
        assert_eq!(r.status, 200, "{request} → {:?}", r.json());
        let value = r.json()["result"]["value"].clone();
        let intent = sim
            .read_state(|s| s.verbs.back().map(|v| v["intent"].clone()))
            .unwrap();
        let input_schema = def_validator(&verbs, &format!("{name}_input"));
        let errors: Vec<String> = input_schema
            .iter_errors(&intent)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "{name} merged intent {intent} violates the contract: {errors:?}"
        );
        let result_schema = def_validator(&verbs, &format!("{name}_result"));
        let errors: Vec<String> = result_schema
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "{name} result {value} violates the contract: {errors:?}"
        );
    }
}

#[tokio::test]
async fn schema_invalid_requests_are_refused() {
    let wire_schema = validator(&load("canon-verb-wire.schema.json"));
    let sim = sim().await;
    let base = wire("no_reply", json!({"conversationId": "c-direct"}), json!({}));
    let mutations: Vec<(&str, Value)> = vec![
        ("extra top-level member", {
            let mut v = base.clone();
            v["extra"] = json!(1);
            v
        }),
        ("wrong wire", {
            let mut v = base.clone();
            v["wire"] = json!("canon.verb-wire.v2");
            v
        }),
        ("unknown verb", {
            let mut v = base.clone();
            v["verb"] = json!("dance");
            v
        }),
        ("missing envelope", {
            let mut v = base.clone();
            v.as_object_mut().unwrap().remove("envelope");
            v
        }),
        ("unknown envelope field", {
            let mut v = base.clone();
            v["envelope"]["color"] = json!("red");
            v
        }),
        ("bad conversation id", {
            let mut v = base.clone();
            v["envelope"]["conversationId"] = json!("a b");
            v
        }),
        (
            "reserved idempotency key",
            wire(
                "send_to",
                json!({"conversationId": "c-direct", "idempotencyKey": ".."}),
                json!({"text": "x"}),
            ),
        ),
        (
            "bad session selection",
            wire(
                "send_to",
                json!({"targetUserId": "h-owner", "sessionSelection": {"mode": "latest"}}),
                json!({"text": "x"}),
            ),
        ),
        (
            "bad turn semantics",
            wire(
                "send_to",
                json!({"conversationId": "c-direct", "turn": {"turnSemantics": "final"}}),
                json!({"text": "x"}),
            ),
        ),
        (
            "empty member list",
            wire(
                "create_group",
                json!({"memberIds": []}),
                json!({"name": "x"}),
            ),
        ),
        ("non-object value", {
            let mut v = base.clone();
            v["body"]["value"] = json!("text");
            v
        }),
        ("unknown encoding", {
            let mut v = base.clone();
            v["body"] = json!({"encoding": "xml", "value": {}});
            v
        }),
        ("extra body member", {
            let mut v = base.clone();
            v["body"]["x"] = json!(1);
            v
        }),
    ];
    for (what, request) in mutations {
        assert!(
            !wire_schema.is_valid(&request),
            "{what}: the contract schema must reject {request}"
        );
        let path_verb = request["verb"]
            .as_str()
            .filter(|v| *v != "dance")
            .unwrap_or("no_reply")
            .to_owned();
        let r = verb(&sim, &path_verb, request.clone()).await;
        assert_eq!(r.status, 400, "{what}: the simulator must reject {request}");
    }
}
