//! The `/__sim/` control API over HTTP (canon-wire.md §11.5): wait_for, journal, clock, state.

use serde_json::json;

use super::support::{call, control, sim, Sse, WAIT};

#[tokio::test]
async fn wait_for_long_polls_until_a_message_exists_or_times_out() {
    let sim = sim().await;
    let timeout = control(
        &sim,
        "POST",
        "/wait_for",
        Some(json!({"timeoutMs": 20, "message": {"textContains": "never"}})),
    )
    .await;
    assert_eq!(
        (timeout.status, timeout.code().as_deref()),
        (408, Some("WAIT_TIMEOUT"))
    );
    let addr = sim.addr();
    let waiter = tokio::spawn(async move {
        let body = json!({"timeoutMs": 5000, "message": {"conversationId": "c-direct", "senderId": "a-hermes", "turnSemantics": "turn_complete"}}).to_string();
        super::support::raw(addr, "POST", "/__sim/wait_for", &[], Some(body.as_bytes())).await
    });
    call(&sim, "POST", "/messages/send", Some(json!({"conversationId": "c-direct", "text": "done", "metadata": {"turnSemantics": "turn_complete"}}))).await;
    let answered = waiter.await.unwrap().unwrap();
    assert_eq!(answered.json(), json!({"ok": true}));
}

#[tokio::test]
async fn rust_wait_for_reports_a_typed_timeout() {
    let sim = sim().await;
    let err = sim
        .wait_for("nothing", std::time::Duration::from_millis(10), |s| {
            s.messages.len() > 5
        })
        .await;
    assert!(matches!(err, Err(canon_sim::SimError::WaitTimeout { .. })));
}

#[tokio::test]
async fn journal_records_requests_with_the_bearer_replaced() {
    let sim = sim().await;
    call(&sim, "GET", "/agents/me", None).await;
    call(
        &sim,
        "POST",
        "/typing",
        Some(json!({"conversationId": "c-direct", "typing": false})),
    )
    .await;
    let j = control(&sim, "GET", "/journal?path=%2Ftyping", None)
        .await
        .json();
    let entries = j["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    let e = &entries[0];
    assert_eq!(
        e["body"],
        json!({"conversationId": "c-direct", "typing": false})
    );
    assert_eq!(e["status"], 200);
    assert_eq!(e["principal"], "a-hermes");
    let auth = e["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h[0] == "authorization")
        .unwrap();
    assert_eq!(auth[1], "Bearer a-hermes");
    assert!(!j.to_string().contains(&sim.api_key()));
    let since = control(
        &sim,
        "GET",
        &format!("/journal?since={}", j["cursor"]),
        None,
    )
    .await
    .json();
    assert!(since["entries"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn clock_switches_state_and_env_over_http() {
    let sim = sim().await;
    let start = sim.now_ms();
    let r = control(
        &sim,
        "POST",
        "/clock",
        Some(json!({"action": "advance", "ms": 1500})),
    )
    .await
    .json();
    assert_eq!(r["now"], start + 1500);
    assert_eq!(
        control(
            &sim,
            "POST",
            "/clock",
            Some(json!({"action": "set", "ms": 5}))
        )
        .await
        .json()["now"],
        5
    );
    assert_eq!(
        control(&sim, "POST", "/clock", Some(json!({"action": "warp"})))
            .await
            .status,
        400
    );
    let s = control(
        &sim,
        "POST",
        "/switches",
        Some(json!({"emitSuppressed": true})),
    )
    .await;
    assert_eq!(s.json()["emitSuppressed"], true);
    assert_eq!(
        control(&sim, "POST", "/switches", Some(json!({"noSuchSwitch": 1})))
            .await
            .status,
        400
    );
    let p = control(
        &sim,
        "POST",
        "/principals",
        Some(json!({"kind": "ai_agent", "displayName": "Second"})),
    )
    .await
    .json();
    assert!(p["apiKey"].as_str().unwrap().starts_with("canon_sim_"));
    let c = control(
        &sim,
        "POST",
        "/conversations",
        Some(json!({"kind": "group", "memberIds": ["h-owner", p["id"]]})),
    )
    .await
    .json();
    let state = control(&sim, "GET", "/state", None).await.json();
    assert!(state["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["id"] == c["id"]));
    let env = control(&sim, "GET", "/env", None).await.json();
    let lines: Vec<&str> = env
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    assert!(lines.contains(&"HERMES_ALLOW_PRIVATE_URLS=true"));
    assert!(lines.contains(&format!("CANON_API_KEY={}", sim.api_key()).as_str()));
    assert_eq!(control(&sim, "POST", "/reset", None).await.status, 200);
    assert_eq!(control(&sim, "GET", "/nope", None).await.status, 404);
}

#[tokio::test]
async fn stream_control_and_events_over_http() {
    let sim = sim().await;
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    sim.wait_for("stream open", WAIT, |s| s.open_streams.len() == 1)
        .await
        .unwrap();
    control(
        &sim,
        "POST",
        "/events",
        Some(json!({"agent": "a-hermes", "event": "mystery.event", "data": {"x": 1}})),
    )
    .await;
    assert_eq!(sse.next().await.unwrap().event, "mystery.event");
    control(&sim, "POST", "/messages", Some(json!({"text": "via http"}))).await;
    assert_eq!(
        sse.until("message.created").await.data["message"]["text"],
        "via http"
    );
    let r = control(
        &sim,
        "POST",
        "/streams",
        Some(json!({"agent": "a-hermes", "action": "close"})),
    )
    .await
    .json();
    assert_eq!(r["streams"], 1);
    assert!(sse.next().await.is_none());
}

/// The wide-area stand-in: with `restLatencyMs` set through the control API, a REST call takes
/// at least that long (half on the way in, half on the way back), and switching it off again
/// restores loopback.
#[tokio::test]
async fn the_latency_switch_holds_each_rest_call_for_a_round_trip() {
    let sim = sim().await;
    let set = control(
        &sim,
        "POST",
        "/switches",
        Some(json!({"restLatencyMs": 200, "restJitterMs": 50})),
    )
    .await;
    assert_eq!(set.status, 200, "{:?}", String::from_utf8_lossy(&set.body));
    let sent = std::time::Instant::now();
    let answer = call(&sim, "GET", "/agents/me", None).await;
    let took = sent.elapsed();
    assert_eq!(answer.status, 200);
    assert!(took >= std::time::Duration::from_millis(200), "{took:?}");
    sim.set_switches(|s| s.rest_latency_ms = 0);
    sim.set_switches(|s| s.rest_jitter_ms = 0);
    assert_eq!(sim.read_state(|s| s.config.switches.rest_latency_ms), 0);
}
