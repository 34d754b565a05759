//! A turn's runtime writes at the REST endpoints of canon-wire.md §11.3 (happy paths and
//! documented 4xx): typing, streaming and its clear, turn states with inbound dispositions, the
//! runtime status, and signals.

use canon_sim::control::Injection;
use serde_json::{json, Value};

use super::support::{call, control, sim};

#[tokio::test]
async fn typing_is_validated_and_stored() {
    let sim = sim().await;
    let ok = call(
        &sim,
        "POST",
        "/typing",
        Some(json!({"conversationId": "c-direct", "typing": true, "status": "thinking"})),
    )
    .await;
    assert_eq!(ok.status, 200);
    for bad in [
        json!({"conversationId": "c-direct", "typing": "yes"}),
        json!({"conversationId": "c-direct", "typing": true, "status": "busy"}),
    ] {
        assert_eq!(call(&sim, "POST", "/typing", Some(bad)).await.status, 400);
    }
    assert_eq!(sim.read_state(|s| s.typing_history.len()), 1);
}

#[tokio::test]
async fn streaming_merges_and_clear_runs_the_salvage_rule() {
    let sim = sim().await;
    let set = |body: Value| call(&sim, "POST", "/streaming", Some(body));
    set(json!({"conversationId": "c-direct", "status": "streaming", "text": "partial", "messageId": "T1", "turnId": "T1"})).await;
    set(json!({"conversationId": "c-direct", "status": "streaming", "blocks": [{"id": "tool:1", "kind": "tool"}], "messageId": "T1", "turnId": "T1"})).await;
    let node = sim.read_state(|s| s.streaming["c-direct"].fields.clone());
    assert_eq!(node["text"], "partial");
    assert_eq!(node["blocks"].as_array().unwrap().len(), 1);
    let clear = call(
        &sim,
        "POST",
        "/streaming",
        Some(json!({"conversationId": "c-direct", "streaming": false})),
    )
    .await;
    assert_eq!(clear.json()["salvage"]["decision"], "salvaged");
    let salvaged = sim.read_state(|s| s.messages.back().unwrap().message.clone());
    assert_eq!(salvaged["text"], "partial");
    assert_eq!(salvaged["metadata"]["turnSemantics"], "progress");
    assert_eq!(salvaged["metadata"]["turnTrail"][0]["id"], "tool:1");
    // Blank then clear: nothing salvaged.
    set(json!({"conversationId": "c-direct", "status": "thinking", "text": "", "messageId": "T2", "turnId": "T2", "blocks": []})).await;
    let clear = call(
        &sim,
        "POST",
        "/streaming",
        Some(json!({"conversationId": "c-direct", "streaming": false})),
    )
    .await;
    assert_eq!(
        clear.json()["salvage"]["decision"],
        "empty_streaming_content"
    );
    // A durable turn_complete for the node's turn suppresses salvage.
    set(json!({"conversationId": "c-direct", "status": "streaming", "text": "answer", "turnId": "T3", "messageId": "T3"})).await;
    call(&sim, "POST", "/messages/send", Some(json!({"conversationId": "c-direct", "text": "answer", "metadata": {"turnSemantics": "turn_complete", "turnId": "T3"}}))).await;
    let clear = call(
        &sim,
        "POST",
        "/streaming",
        Some(json!({"conversationId": "c-direct", "streaming": false})),
    )
    .await;
    assert_eq!(clear.json()["salvage"]["decision"], "turn_complete_exists");
    let bad = set(json!({"conversationId": "c-direct", "status": "bogus"})).await;
    assert_eq!(bad.status, 400);
    let many: Vec<Value> = (0..40).map(|i| json!({"id": format!("b{i}")})).collect();
    set(json!({"conversationId": "c-direct", "status": "streaming", "blocks": many})).await;
    assert_eq!(
        sim.read_state(|s| s.streaming["c-direct"].fields["blocks"]
            .as_array()
            .unwrap()
            .len()),
        30
    );
}

#[tokio::test]
async fn open_turns_stamp_queued_and_dispositions_update_messages() {
    let sim = sim().await;
    let now = sim.now_ms();
    let turn = json!({"conversationId": "c-direct", "state": "thinking", "turnId": "T1", "queueDepth": 0, "capabilities": {}, "openedAt": now, "turnUpdatedAt": now});
    assert_eq!(
        call(&sim, "POST", "/runtime/turn", Some(turn)).await.status,
        200
    );
    let m = sim
        .inject_message(&Injection {
            text: Some("follow-up".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(m["metadata"]["inboundDisposition"], "queued");
    let interrupt = sim
        .inject_message(&Injection {
            text: Some("stop!".into()),
            metadata: Some(json!({"deliveryIntent": "interrupt"})),
            ..Default::default()
        })
        .unwrap();
    assert!(interrupt["metadata"].get("inboundDisposition").is_none());
    let mid = m["id"].as_str().unwrap();
    let path = format!("/conversations/c-direct/messages/{mid}/disposition");
    let r = call(
        &sim,
        "PATCH",
        &path,
        Some(json!({"inboundDisposition": "accepted_now"})),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        call(
            &sim,
            "PATCH",
            &path,
            Some(json!({"inboundDisposition": "accepted_now"}))
        )
        .await
        .status,
        200
    );
    let stored = sim.read_state(|s| s.find_message("c-direct", mid).unwrap().message.clone());
    assert_eq!(stored["metadata"]["inboundDisposition"], "accepted_now");
    assert_eq!(
        call(
            &sim,
            "PATCH",
            &path,
            Some(json!({"inboundDisposition": "maybe"}))
        )
        .await
        .status,
        400
    );
    assert_eq!(
        call(
            &sim,
            "PATCH",
            "/conversations/c-direct/messages/m-x/disposition",
            Some(json!({"inboundDisposition": "accepted_now"}))
        )
        .await
        .status,
        404
    );
    // A stale open state no longer stamps.
    sim.advance_clock(31 * 60 * 1000);
    let later = sim
        .inject_message(&Injection {
            text: Some("later".into()),
            ..Default::default()
        })
        .unwrap();
    assert!(later.get("metadata").is_none());
    let bad = call(
        &sim,
        "POST",
        "/runtime/turn",
        Some(json!({"conversationId": "c-direct", "state": "sleeping", "queueDepth": 0})),
    )
    .await;
    assert_eq!(bad.status, 400);
    let bad = call(
        &sim,
        "POST",
        "/runtime/turn",
        Some(json!({"conversationId": "c-direct", "state": "completed", "queueDepth": -1})),
    )
    .await;
    assert_eq!(bad.status, 400);
}

#[tokio::test]
async fn runtime_status_keeps_raw_body_and_public_projection() {
    let sim = sim().await;
    let body = json!({"runtime": "hermes", "hostMode": true, "runtimeDescriptor": {"coreControls": [], "supportsInterrupt": true, "streamingTextMode": "delta", "commands": [{"id": "stop", "label": "Stop"}]}});
    assert_eq!(
        call(&sim, "POST", "/runtime/status", Some(body.clone()))
            .await
            .status,
        200
    );
    let stored = sim.read_state(|s| s.runtime_status["a-hermes"].clone());
    assert_eq!(stored["raw"], body);
    assert!(stored["projection"].get("coreControls").is_none());
    assert_eq!(stored["projection"]["commands"][0]["id"], "stop");
}

#[tokio::test]
async fn signals_are_consumed_once_in_order() {
    let sim = sim().await;
    for s in ["interrupt", "new_session"] {
        control(
            &sim,
            "POST",
            "/signals",
            Some(json!({"conversationId": "c-direct", "signal": s, "updatedBy": "h-owner"})),
        )
        .await;
    }
    let body = Some(json!({"conversationId": "c-direct"}));
    let first = call(&sim, "POST", "/runtime/signal/consume", body.clone())
        .await
        .json();
    assert_eq!(
        (
            first["status"].as_str(),
            first["signal"].as_str(),
            first["updatedBy"].as_str()
        ),
        (Some("signal"), Some("interrupt"), Some("h-owner"))
    );
    assert!(first["signalId"].is_string());
    assert_eq!(
        call(&sim, "POST", "/runtime/signal/consume", body.clone())
            .await
            .json()["signal"],
        "new_session"
    );
    assert_eq!(
        call(&sim, "POST", "/runtime/signal/consume", body)
            .await
            .json(),
        json!({"status": "none"})
    );
    let bad = control(
        &sim,
        "POST",
        "/signals",
        Some(json!({"conversationId": "c-direct", "signal": "explode"})),
    )
    .await;
    assert_eq!(bad.status, 400);
}
