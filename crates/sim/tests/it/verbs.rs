//! `POST /agent/verbs/{verb}` (canon-wire.md §4.15, §11.3).

use canon_sim::PrincipalSpec;
use serde_json::{json, Value};

use super::support::{call, sim};

pub(crate) fn wire(verb: &str, envelope: Value, value: Value) -> Value {
    json!({"wire": "canon.verb-wire.v1", "verb": verb, "envelope": envelope, "body": {"encoding": "json", "value": value}})
}

pub(crate) async fn verb(
    sim: &canon_sim::SimHandle,
    verb: &str,
    body: Value,
) -> super::support::Resp {
    call(sim, "POST", &format!("/agent/verbs/{verb}"), Some(body)).await
}

fn result(r: &super::support::Resp) -> Value {
    assert_eq!(r.status, 200, "{:?}", r.json());
    let j = r.json();
    assert_eq!(j["wire"], "canon.verb-wire.v1");
    assert_eq!(j["result"]["encoding"], "json");
    j["result"]["value"].clone()
}

#[tokio::test]
async fn wire_shape_violations_are_refused() {
    let sim = sim().await;
    let ok = wire("no_reply", json!({"conversationId": "c-direct"}), json!({}));
    let mut extra = ok.clone();
    extra["x"] = json!(1);
    let mut wrong_wire = ok.clone();
    wrong_wire["wire"] = json!("canon.verb-wire.v2");
    let cases = [
        ("no_reply", extra),
        ("no_reply", wrong_wire),
        ("send_to", ok.clone()),
        (
            "no_reply",
            wire("no_reply", json!({"memberIds": ["x"]}), json!({})),
        ),
        (
            "no_reply",
            wire("no_reply", json!({"conversationId": "bad id"}), json!({})),
        ),
        (
            "forward",
            wire("forward", json!({"conversationId": "c-direct"}), json!({})),
        ),
        (
            "no_reply",
            json!({"wire": "canon.verb-wire.v1", "verb": "no_reply", "envelope": {}, "body": {"encoding": "json", "value": []}}),
        ),
    ];
    for (path, body) in cases {
        let r = verb(&sim, path, body.clone()).await;
        assert_eq!(
            (r.status, r.code().as_deref()),
            (400, Some("INVALID_VERB_WIRE")),
            "{body}"
        );
    }
    let unsupported = verb(
        &sim,
        "react",
        wire(
            "react",
            json!({"conversationId": "c-direct", "messageId": "m"}),
            json!({}),
        ),
    )
    .await;
    assert_eq!(unsupported.code().as_deref(), Some("VERB_NOT_SUPPORTED"));
}

#[tokio::test]
async fn no_reply_acknowledges_and_never_stores_the_reason() {
    let sim = sim().await;
    let r = verb(
        &sim,
        "no_reply",
        wire(
            "no_reply",
            json!({"conversationId": "c-direct", "messageId": "m-1"}),
            json!({"reason": "secret musings"}),
        ),
    )
    .await;
    let v = result(&r);
    assert_eq!(
        v,
        json!({"status": "acknowledged", "conversationId": "c-direct", "note": "Acknowledged — nothing was posted to the conversation."})
    );
    let state = sim.state().to_string();
    assert!(!state.contains("secret musings"));
    let journal = serde_json::to_string(&sim.journal(0, None)).unwrap();
    assert!(
        journal.contains("secret musings"),
        "the journal records the request as sent"
    );
    assert_eq!(
        sim.read_state(|s| s.no_replies[0]["hasReason"].clone()),
        json!(true)
    );
    assert_eq!(sim.read_state(|s| s.messages.len()), 0);
}

#[tokio::test]
async fn send_to_a_conversation_is_idempotent_by_key() {
    let sim = sim().await;
    let body = wire(
        "send_to",
        json!({"conversationId": "c-direct", "idempotencyKey": "hermes-final-x", "turn": {"turnSemantics": "turn_complete"}}),
        json!({"text": "cron says hi", "messageOptions": {"metadata": {"turnComplete": true}}}),
    );
    let first = result(&verb(&sim, "send_to", body.clone()).await);
    assert_eq!(first["status"], "messaged");
    assert_eq!(result(&verb(&sim, "send_to", body.clone()).await), first);
    let stored = sim.read_state(|s| s.messages.back().unwrap().message.clone());
    assert_eq!(
        stored["metadata"],
        json!({"turnComplete": true, "turnSemantics": "turn_complete"})
    );
    let mut changed = body;
    changed["body"]["value"]["text"] = json!("other");
    let r = verb(&sim, "send_to", changed).await;
    assert_eq!(
        (r.status, r.code().as_deref()),
        (409, Some("MESSAGE_ID_EXISTS"))
    );
}

#[tokio::test]
async fn send_to_users_follows_admission_and_outbound_policy() {
    let sim = sim().await;
    for (id, policy) in [
        ("h-open", "open"),
        ("h-ask", "approval-required"),
        ("h-closed", "closed"),
    ] {
        sim.create_principal(PrincipalSpec {
            id: Some(id.into()),
            kind: "human".into(),
            inbound_policy: Some(policy.into()),
            ..Default::default()
        });
    }
    let to = |target: &str, sel: Option<Value>| {
        let mut env = json!({"targetUserId": target});
        if let Some(s) = sel {
            env["sessionSelection"] = s;
        }
        wire("send_to", env, json!({"text": "hi"}))
    };
    let created = result(&verb(&sim, "send_to", to("h-open", None)).await);
    assert_eq!(
        (created["status"].as_str(), created["created"].as_bool()),
        (Some("messaged"), Some(true))
    );
    let reused = result(
        &verb(
            &sim,
            "send_to",
            to("h-open", Some(json!({"mode": "continue_latest"}))),
        )
        .await,
    );
    assert_eq!(reused["conversationId"], created["conversationId"]);
    assert_eq!(reused["reused"], true);
    let fresh = result(&verb(&sim, "send_to", to("h-open", Some(json!({"mode": "new"})))).await);
    assert_ne!(fresh["conversationId"], created["conversationId"]);
    assert_eq!(
        result(&verb(&sim, "send_to", to("h-ask", None)).await)["status"],
        "requested"
    );
    assert_eq!(
        result(&verb(&sim, "send_to", to("h-closed", None)).await),
        json!({"status": "unavailable", "reason": "closed"})
    );
    sim.with_state(|s| {
        s.principals.get_mut("a-hermes").unwrap().outbound_policy = "approval-required".into()
    });
    let r = verb(&sim, "send_to", to("h-open", None)).await;
    assert_eq!(
        (r.status, r.code().as_deref()),
        (403, Some("OUTBOUND_APPROVAL_REQUIRED"))
    );
}

#[tokio::test]
async fn groups_members_forwards_and_contacts() {
    let sim = sim().await;
    for (id, policy) in [
        ("h-a", "open"),
        ("h-b", "approval-required"),
        ("h-c", "closed"),
    ] {
        sim.create_principal(PrincipalSpec {
            id: Some(id.into()),
            kind: "human".into(),
            group_join_policy: Some(policy.into()),
            ..Default::default()
        });
    }
    let g = result(
        &verb(
            &sim,
            "create_group",
            wire(
                "create_group",
                json!({"memberIds": ["h-a", "h-b", "h-c", "h-zz"]}),
                json!({"name": "Team"}),
            ),
        )
        .await,
    );
    assert_eq!(g["added"], json!(["h-a"]));
    assert_eq!(g["pending"][0]["userId"], "h-b");
    assert_eq!(g["skipped"].as_array().unwrap().len(), 2);
    let none = verb(
        &sim,
        "create_group",
        wire(
            "create_group",
            json!({"memberIds": ["h-c"]}),
            json!({"name": "Nope"}),
        ),
    )
    .await;
    assert_eq!(
        (none.status, none.code().as_deref()),
        (400, Some("CREATE_GROUP_NO_ADDABLE_MEMBERS"))
    );
    let gid = g["conversationId"].as_str().unwrap().to_owned();
    assert_eq!(
        result(
            &verb(
                &sim,
                "add_member",
                wire(
                    "add_member",
                    json!({"conversationId": gid, "targetUserId": "h-owner"}),
                    json!({})
                )
            )
            .await
        )["status"],
        "added"
    );
    assert_eq!(
        result(
            &verb(
                &sim,
                "add_member",
                wire(
                    "add_member",
                    json!({"conversationId": gid, "targetUserId": "h-b"}),
                    json!({})
                )
            )
            .await
        )["status"],
        "pending"
    );
    assert_eq!(
        result(
            &verb(
                &sim,
                "remove_member",
                wire(
                    "remove_member",
                    json!({"conversationId": gid, "targetUserId": "h-a"}),
                    json!({})
                )
            )
            .await
        )["status"],
        "removed"
    );
    let m = call(
        &sim,
        "POST",
        "/messages/send",
        Some(json!({"conversationId": "c-direct", "text": "fwd me"})),
    )
    .await
    .json();
    let f = result(&verb(&sim, "forward", wire("forward", json!({"sourceConversationId": "c-direct", "conversationId": gid, "messageId": m["id"]}), json!({}))).await);
    assert_eq!(f["targetConversationId"], gid.as_str());
    let stored = sim.read_state(|s| {
        s.find_message(&gid, f["messageId"].as_str().unwrap())
            .unwrap()
            .message
            .clone()
    });
    assert_eq!(
        (stored["text"].as_str(), stored["forwarded"].as_bool()),
        (Some("fwd me"), Some(true))
    );
    let share = verb(
        &sim,
        "share_contact",
        wire(
            "share_contact",
            json!({"conversationId": "c-direct", "contactUserId": "h-a"}),
            json!({}),
        ),
    )
    .await;
    assert_eq!(share.status, 403);
    sim.with_state(|s| {
        s.principals
            .get_mut("a-hermes")
            .unwrap()
            .contacts
            .push("h-a".into())
    });
    let shared = result(
        &verb(
            &sim,
            "share_contact",
            wire(
                "share_contact",
                json!({"conversationId": "c-direct", "contactUserId": "h-a"}),
                json!({"text": "meet h-a"}),
            ),
        )
        .await,
    );
    assert_eq!(shared["status"], "shared");
}
