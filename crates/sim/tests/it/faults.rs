//! Fault injection of canon-wire.md §11.6: each rule does what it says.

use canon_sim::control::Injection;
use canon_sim::faults::FaultRule;
use serde_json::{json, Value};

use super::support::{call, control, raw, sim, Sse};

fn rule(v: Value) -> FaultRule {
    serde_json::from_value(v).expect("valid rule")
}

fn send(text: &str) -> Value {
    json!({"conversationId": "c-direct", "text": text, "messageId": "hermes-final-f"})
}

#[tokio::test]
async fn status_before_processing_stores_nothing() {
    let sim = sim().await;
    sim.add_fault(rule(json!({"matcher": {"path": "/messages/send", "nth": [1]}, "action": {"type": "status", "status": 503, "retryAfter": 7}})));
    let r = call(&sim, "POST", "/messages/send", Some(send("x"))).await;
    assert_eq!((r.status, r.header("retry-after")), (503, Some("7")));
    assert_eq!(sim.read_state(|s| s.messages.len()), 0);
    assert_eq!(
        call(&sim, "POST", "/messages/send", Some(send("x")))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn process_then_fail_lands_once_and_the_replay_returns_it() {
    let sim = sim().await;
    sim.add_fault(rule(json!({"matcher": {"path": "/messages/send", "times": 1}, "action": {"type": "process_then_status", "status": 500}})));
    assert_eq!(
        call(&sim, "POST", "/messages/send", Some(send("x")))
            .await
            .status,
        500
    );
    let replay = call(&sim, "POST", "/messages/send", Some(send("x"))).await;
    assert_eq!(replay.status, 200);
    assert_eq!(sim.read_state(|s| s.messages.len()), 1);
    assert_eq!(
        replay.json()["messageId"],
        sim.read_state(|s| s.messages[0].message["id"].clone())
    );
    sim.add_fault(rule(json!({"matcher": {"path": "/typing", "times": 1}, "action": {"type": "process_then_drop"}})));
    let body = json!({"conversationId": "c-direct", "typing": true}).to_string();
    assert!(raw(
        sim.addr(),
        "POST",
        "/typing",
        &[("authorization", &format!("Bearer {}", sim.api_key()))],
        Some(body.as_bytes())
    )
    .await
    .is_err());
    assert_eq!(sim.read_state(|s| s.typing_history.len()), 1);
}

#[tokio::test]
async fn drops_resets_and_delays() {
    let sim = sim().await;
    let auth = format!("Bearer {}", sim.api_key());
    sim.add_fault(rule(
        json!({"matcher": {"path": "/agents/me", "nth": [1]}, "action": {"type": "drop"}}),
    ));
    sim.add_fault(rule(json!({"matcher": {"path": "/agents/me", "nth": [2]}, "action": {"type": "reset_mid_body"}})));
    sim.add_fault(rule(json!({"matcher": {"path": "/agents/me", "nth": [3]}, "action": {"type": "delay_before", "ms": 30}})));
    sim.add_fault(rule(json!({"matcher": {"path": "/agents/me", "nth": [4]}, "action": {"type": "delay_after", "ms": 30}})));
    let headers = [("authorization", auth.as_str())];
    let get = || raw(sim.addr(), "GET", "/agents/me", &headers, None);
    assert!(get().await.is_err(), "dropped");
    assert!(get().await.is_err(), "reset mid-body");
    let start = std::time::Instant::now();
    assert_eq!(get().await.unwrap().status, 200);
    assert_eq!(get().await.unwrap().status, 200);
    assert!(start.elapsed() >= std::time::Duration::from_millis(60));
    let journal = sim.journal(0, Some("/agents/me"));
    assert_eq!(
        journal.iter().map(|e| e.status).collect::<Vec<_>>(),
        vec![0, 0, 200, 200]
    );
}

/// A stalled request is dropped after its wait and never processed: nothing is stored.
#[tokio::test]
async fn a_stalled_request_is_dropped_without_being_processed() {
    let sim = sim().await;
    sim.add_fault(rule(json!({"matcher": {"path": "/messages/send", "times": 1}, "action": {"type": "stall", "ms": 40}})));
    let body = send("stalled").to_string();
    let start = std::time::Instant::now();
    assert!(raw(
        sim.addr(),
        "POST",
        "/messages/send",
        &[("authorization", &format!("Bearer {}", sim.api_key()))],
        Some(body.as_bytes())
    )
    .await
    .is_err());
    assert!(start.elapsed() >= std::time::Duration::from_millis(40));
    assert_eq!(sim.read_state(|s| s.messages.len()), 0, "nothing stored");
    let journal = sim.journal(0, Some("/messages/send"));
    assert_eq!(journal.iter().map(|e| e.status).collect::<Vec<_>>(), [0]);
    assert_eq!(sim.read_state(|s| s.faults.list()[0].fired), 1);
}

#[tokio::test]
async fn malformed_success_bodies() {
    let sim = sim().await;
    let kinds = [
        "invalid_json",
        "array",
        "empty",
        "wrong_wire",
        "wrong_verb",
        "non_object_value",
    ];
    for (i, kind) in kinds.iter().enumerate() {
        sim.add_fault(rule(json!({"matcher": {"path": "/agent/verbs/*", "nth": [i + 1]}, "action": {"type": "malformed", "kind": kind}})));
    }
    let body = json!({"wire": "canon.verb-wire.v1", "verb": "no_reply", "envelope": {}, "body": {"encoding": "json", "value": {}}});
    let mut seen = Vec::new();
    for _ in kinds {
        let r = call(&sim, "POST", "/agent/verbs/no_reply", Some(body.clone())).await;
        assert_eq!(r.status, 200);
        seen.push(String::from_utf8_lossy(&r.body).into_owned());
    }
    assert_eq!(seen[0], "{not json");
    assert_eq!(seen[1], "[]");
    assert_eq!(seen[2], "");
    let parsed: Vec<Value> = seen[3..]
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
    assert_eq!(parsed[0]["wire"], "canon.verb-wire.v0");
    assert_eq!(parsed[1]["verb"], "react");
    assert!(parsed[2]["result"]["value"].is_array());
}

#[tokio::test]
async fn sse_connect_status_and_immediate_close() {
    let sim = sim().await;
    sim.add_fault(rule(json!({"matcher": {"path": "/agents/stream", "nth": [1]}, "action": {"type": "status", "status": 429, "retryAfter": 3}})));
    sim.add_fault(rule(json!({"matcher": {"path": "/agents/stream", "nth": [2]}, "action": {"type": "sse", "closeImmediately": true}})));
    assert_eq!(Sse::open(&sim, None).await.status, 429);
    let mut closed = Sse::open(&sim, None).await;
    assert_eq!(closed.status, 200);
    assert!(closed.next().await.is_none());
    assert!(closed.ended);
}

#[tokio::test]
async fn sse_split_writes_with_crlf_decode_to_the_same_frames() {
    let sim = sim().await;
    sim.add_fault(rule(json!({"matcher": {"path": "/agents/stream"}, "action": {"type": "sse", "splitEvery": 3, "lineEnding": "crlf", "closeAfterFrames": 3}})));
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    sim.inject_message(&Injection {
        text: Some("héllo ש 👍".into()),
        ..Default::default()
    })
    .unwrap();
    let f = sse.until("message.created").await;
    assert_eq!(f.data["message"]["text"], "héllo ש 👍");
    assert!(
        sse.chunk_sizes.iter().all(|n| *n <= 3),
        "every write is at most 3 bytes"
    );
    assert!(sse.raw_text.contains("\r\n\r\n"));
    assert!(sse.next().await.is_none(), "closed after 3 frames");
}

#[tokio::test]
async fn sse_prelude_duplicates_oversize_and_cr_endings() {
    let sim = sim().await;
    let prelude =
        ": comment\n\nid: 99\n\ndata: {\"no\":\"event\"}\n\nevent: text\ndata: not json\n\n";
    sim.add_fault(rule(json!({"matcher": {"path": "/agents/stream"}, "action": {"type": "sse", "rawPrelude": prelude, "duplicate": true, "oversizeBytes": 5000, "lineEnding": "cr"}})));
    let mut sse = Sse::open(&sim, None).await;
    let text = sse.next().await.unwrap();
    assert_eq!(
        (text.event.as_str(), text.data.as_str()),
        ("text", Some("not json"))
    );
    let big = sse.next().await.unwrap();
    assert_eq!(big.event, "oversize");
    assert_eq!(big.data["padding"].as_str().unwrap().len(), 5000);
    sse.handshake().await;
    assert!(sse.raw_text.contains("\r\r"));
    sim.inject_message(&Injection {
        text: Some("dup".into()),
        ..Default::default()
    })
    .unwrap();
    let a = sse.until("message.created").await;
    let b = sse.until("message.created").await;
    assert_eq!(a, b, "duplicated frame, same id");
}

#[tokio::test]
async fn oversize_media_bodies_and_redirects() {
    let sim = sim().await;
    control(&sim, "POST", "/faults", Some(json!({"matcher": {"path": "/files/*", "nth": [1]}, "action": {"type": "oversize_body", "bytes": 11 * 1024 * 1024, "contentLength": true}}))).await;
    control(&sim, "POST", "/faults", Some(json!({"matcher": {"path": "/files/*", "nth": [2]}, "action": {"type": "status", "status": 302, "headers": [["location", "http://169.254.169.254/latest"]]}}))).await;
    let big = raw(sim.addr(), "GET", "/files/a/b/c", &[], None)
        .await
        .unwrap();
    assert_eq!(big.header("content-length"), Some("11534336"));
    assert_eq!(big.body.len(), 11 * 1024 * 1024);
    let redirect = raw(sim.addr(), "GET", "/files/a/b/c", &[], None)
        .await
        .unwrap();
    assert_eq!(
        (redirect.status, redirect.header("location")),
        (302, Some("http://169.254.169.254/latest"))
    );
    let listed = control(&sim, "GET", "/faults", None).await.json();
    assert_eq!(listed[0]["fired"], 1);
    assert_eq!(control(&sim, "DELETE", "/faults", None).await.status, 200);
}

#[tokio::test]
async fn probability_rules_are_seeded() {
    let count = |seed: u64| async move {
        let sim = super::support::sim_with(|c| c.seed = seed).await;
        sim.add_fault(rule(json!({"matcher": {"path": "/agents/me", "probability": 0.5}, "action": {"type": "status", "status": 500}})));
        let mut statuses = Vec::new();
        for _ in 0..20 {
            statuses.push(call(&sim, "GET", "/agents/me", None).await.status);
        }
        statuses
    };
    let a = count(3).await;
    assert_eq!(a, count(3).await);
    assert!(a.contains(&500) && a.contains(&200));
}

#[tokio::test]
async fn drip_and_stall_slow_things_down_without_changing_them() {
    let sim = sim().await;
    sim.add_fault(rule(json!({"matcher": {"path": "/healthz/"}, "action": {"type": "drip", "chunkBytes": 16, "delayMs": 5}})));
    let start = std::time::Instant::now();
    let r = raw(sim.addr(), "GET", "/healthz/", &[], None)
        .await
        .unwrap();
    assert!(start.elapsed() >= std::time::Duration::from_millis(20));
    assert_eq!(r.json()["environmentId"], "canon-dev-v1");
    assert_eq!(r.header("x-canon-environment-id"), Some("canon-dev-v1"));
    sim.add_fault(rule(
        json!({"matcher": {"path": "/agents/stream"}, "action": {"type": "sse", "stallMs": 40}}),
    ));
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    let stalled = std::time::Instant::now();
    sim.inject_message(&Injection {
        text: Some("after stall".into()),
        ..Default::default()
    })
    .unwrap();
    sse.until("message.created").await;
    assert!(stalled.elapsed() >= std::time::Duration::from_millis(30));
}

#[tokio::test]
async fn health_faults_can_keep_a_correct_body_with_503_or_lie() {
    let sim = sim().await;
    let body = json!({"environmentId": "canon-dev-v1", "projectId": "canonmail-dev", "status": "degraded"});
    sim.add_fault(rule(json!({"matcher": {"path": "/health", "nth": [1]}, "action": {"type": "status", "status": 503, "body": body, "headers": [["x-canon-environment-id", "canon-dev-v1"]]}})));
    sim.add_fault(rule(json!({"matcher": {"path": "/health", "nth": [2]}, "action": {"type": "status", "status": 200, "body": {"environmentId": "canon-dev-v1", "projectId": "someone-else"}, "headers": [["x-canon-environment-id", "canon-prod-v1"]]}})));
    let degraded = raw(sim.addr(), "GET", "/health", &[], None).await.unwrap();
    assert_eq!(
        (degraded.status, degraded.json()["projectId"].as_str()),
        (503, Some("canonmail-dev"))
    );
    let lying = raw(sim.addr(), "GET", "/health", &[], None).await.unwrap();
    assert_eq!(
        lying.header("x-canon-environment-id"),
        Some("canon-prod-v1")
    );
}
