//! Connecting the real `canon-hermes serve --stdio` binary to canon-sim, through the fake shim
//! of `shim_support.rs` (hermes-host.md §19): the connect sequence and its conversation cache
//! behind `adapter.chat_info`, connect failures, the runtime status loop, and the conversation
//! re-fetch after `replay.expired`.

use std::time::Duration;

use canon_sim::state::StreamCmd;
use canon_sim::{SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::{json, Value};

use super::serve_support::{
    add_group, chat_info, disconnect, inject_text, journal, status_fault, GROUP,
};
use super::shim_support::{sim, Shim, WAIT};

#[tokio::test(flavor = "multi_thread")]
async fn connect_caches_the_conversations_for_chat_info() {
    let sim = sim().await;
    add_group(&sim);
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let paths: Vec<String> = sim.journal(0, None).into_iter().map(|e| e.path).collect();
    let me = paths.iter().position(|p| p == "/agents/me");
    let list = paths.iter().position(|p| p == "/conversations");
    assert!(
        me.is_some() && list.is_some() && me < list,
        "GET /agents/me, then GET /conversations: {paths:?}"
    );

    // No message arrived from the group: only `GET /conversations` can name it.
    let team = chat_info(&mut shim, GROUP).await;
    assert_eq!(
        team["body"],
        json!({"name": "Team", "type": "group", "id": GROUP}),
        "{team}"
    );
    let direct = chat_info(&mut shim, DEFAULT_CONVERSATION).await;
    assert_eq!(
        direct["body"],
        json!({"name": "Owner", "type": "dm", "id": DEFAULT_CONVERSATION})
    );
    let unknown = chat_info(&mut shim, "c-elsewhere").await;
    assert_eq!(
        unknown["body"],
        json!({"name": "c-elsewhere", "type": "dm", "id": "c-elsewhere"})
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_info_before_connect_falls_back_to_the_id() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    assert_eq!(shim.hello().await["ok"], true);
    let info = chat_info(&mut shim, DEFAULT_CONVERSATION).await;
    assert_eq!(
        info["body"],
        json!({"name": DEFAULT_CONVERSATION, "type": "dm", "id": DEFAULT_CONVERSATION})
    );
    assert!(
        sim.journal(0, None).is_empty(),
        "chat_info is answered locally"
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn rejected_conversation_list_fails_connect_as_auth_failed() {
    let sim = sim().await;
    sim.add_fault(status_fault("GET", "/conversations", 401))
        .expect("fault installed");
    let mut shim = Shim::spawn(&sim);
    let connect = shim.try_connect().await;
    assert_eq!(
        connect["body"],
        json!({"connected": false, "fatal": {
            "code": "auth_failed",
            "message": "Canon rejected the configured agent credentials. Re-run Canon setup.",
            "retryable": false,
        }}),
        "{connect}"
    );
    assert!(
        journal(&sim, "/agents/stream").is_empty(),
        "no stream after a failed connect"
    );
    assert!(journal(&sim, "/runtime/signal/consume").is_empty());
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_conversation_list_fails_connect_retryably() {
    let sim = sim().await;
    sim.add_fault(status_fault("GET", "/conversations", 503))
        .expect("fault installed");
    let mut shim = Shim::spawn(&sim);
    let connect = shim.try_connect().await;
    assert_eq!(connect["body"]["connected"], false, "{connect}");
    assert_eq!(connect["body"]["fatal"]["code"], "connect_failed");
    assert_eq!(connect["body"]["fatal"]["retryable"], true);
    assert!(journal(&sim, "/agents/stream").is_empty());
    assert_eq!(shim.close().await, Some(0));
}

/// The connect's calls are reads: a conversation list cut off mid-body or answered with a body
/// that is not JSON (a proxy's page) is refused as retryable, so Hermes tries again instead of
/// ending the gateway's start, and the retry connects.
#[tokio::test(flavor = "multi_thread")]
async fn a_cut_or_malformed_conversation_list_fails_connect_retryably() {
    use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule, MalformedKind};
    let sim = sim().await;
    let once = |action: FaultAction| FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            method: Some("GET".to_owned()),
            path: Some("/conversations".to_owned()),
            times: Some(1),
            ..FaultMatcher::default()
        },
        action,
        seen: 0,
        fired: 0,
    };
    let mut shim = Shim::spawn(&sim);
    assert_eq!(shim.hello().await["ok"], true);
    let body = json!({"adapter_instance": 1, "config": {"extra": {}, "typing_indicator": true},
                      "host": {"streaming_enabled": true}});
    for action in [
        FaultAction::ResetMidBody,
        FaultAction::Malformed {
            kind: MalformedKind::InvalidJson,
        },
    ] {
        sim.add_fault(once(action)).expect("fault installed");
        let refused = shim.request("adapter.connect", body.clone()).await;
        assert_eq!(refused["body"]["connected"], false, "{refused}");
        assert_eq!(
            refused["body"]["fatal"]["code"], "connect_failed",
            "{refused}"
        );
        assert_eq!(refused["body"]["fatal"]["retryable"], true, "{refused}");
    }
    let retried = shim.request("adapter.connect", body).await;
    assert_eq!(retried["body"]["connected"], true, "{retried}");
    assert_eq!(shim.close().await, Some(0));
}

/// How many requests the sim journal holds of exactly `method path`.
fn count_requests(sim: &SimHandle, method: &str, path: &str) -> usize {
    sim.journal(0, Some(path))
        .iter()
        .filter(|e| e.method == method && e.path == path)
        .count()
}

/// canon-wire.md §8.1 steps 6–7: T10 at connect, then again every status interval (shortened
/// here to 100 ms) until `adapter.disconnect` stops the loop.
#[tokio::test(flavor = "multi_thread")]
async fn runtime_status_is_republished_until_disconnect() {
    let sim = sim().await;
    let mut shim = Shim::spawn_with(&sim, &[("CANON_HERMES_STATUS_INTERVAL_MS", "100")]);
    shim.connect(&sim).await;
    // One publish at connect, at least two more from the loop.
    sim.wait_for("runtime status republished", WAIT, |s| {
        s.journal.count(Some("POST"), "/runtime/status") >= 3
    })
    .await
    .expect("the status loop publishes again");
    let published = journal(&sim, "/runtime/status");
    assert!(
        published
            .iter()
            .all(|(method, body)| method == "POST" && body.is_object() && *body == published[0].1),
        "every publish carries the same descriptor: {published:?}"
    );

    disconnect(&mut shim).await;
    // A publish already on the wire may still land; after that, ten intervals pass
    // without another one.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = count_requests(&sim, "POST", "/runtime/status");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(
        count_requests(&sim, "POST", "/runtime/status"),
        stopped,
        "no runtime status after disconnect"
    );
    assert_eq!(shim.close().await, Some(0));
}

/// Asks `adapter.chat_info` until it names `chat_id` as a group (the re-fetched list reaches
/// the loop after Canon answered it), at most for the wait; returns the last body.
async fn chat_info_once_known(shim: &mut Shim, chat_id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let info = chat_info(shim, chat_id).await;
        if info["body"]["type"] == "group" || tokio::time::Instant::now() >= deadline {
            return info["body"].clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Moves the daemon's stream cursor past one message, then makes the sim forget it and closes
/// the stream: the reconnect sends that cursor and gets `replay.expired`.
async fn expire_the_replay(shim: &mut Shim, sim: &SimHandle) {
    inject_text(sim, "before the gap");
    // The cursor moves before the event is handled, so it is set once this arrives.
    shim.accept_inbound().await;
    sim.expire_replay_buffer(DEFAULT_AGENT);
    assert_eq!(sim.stream_control(DEFAULT_AGENT, StreamCmd::Close), 1);
    sim.wait_for("stream reopened", WAIT, |s| {
        s.journal.count(Some("GET"), "/agents/stream") >= 2
    })
    .await
    .expect("the daemon reconnects the stream");
    let streams = sim.journal(0, Some("/agents/stream"));
    assert!(
        streams[1]
            .headers
            .iter()
            .any(|(name, value)| name == "last-event-id" && !value.is_empty()),
        "the reconnect resumes from the cursor: {:?}",
        streams[1].headers
    );
}

/// canon-wire.md §5.3: after `replay.expired` the daemon re-fetches `GET /conversations`, so a
/// conversation the stream never mentioned is known to `adapter.chat_info`.
#[tokio::test(flavor = "multi_thread")]
async fn replay_expired_refetches_the_conversation_list() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    // Created after connect; nothing on the stream names it.
    add_group(&sim);
    let unknown = chat_info(&mut shim, GROUP).await;
    assert_eq!(
        unknown["body"],
        json!({"name": GROUP, "type": "dm", "id": GROUP}),
        "not cached before the re-fetch"
    );
    assert_eq!(count_requests(&sim, "GET", "/conversations"), 1);

    expire_the_replay(&mut shim, &sim).await;
    sim.wait_for("conversations re-fetched", WAIT, |s| {
        s.journal
            .since(0, Some("/conversations"))
            .iter()
            .filter(|e| e.method == "GET" && e.path == "/conversations")
            .count()
            >= 2
    })
    .await
    .expect("replay.expired re-fetches the conversations");
    assert_eq!(
        chat_info_once_known(&mut shim, GROUP).await,
        json!({"name": "Team", "type": "group", "id": GROUP})
    );
    // The connection's conversations stay cached too.
    let direct = chat_info(&mut shim, DEFAULT_CONVERSATION).await;
    assert_eq!(
        direct["body"],
        json!({"name": "Owner", "type": "dm", "id": DEFAULT_CONVERSATION})
    );
    assert_eq!(shim.close().await, Some(0));
}

/// canon-wire.md §5.3: a failed re-fetch is not fatal: it is logged, the stream reconnects and
/// the daemon keeps delivering inbound messages.
#[tokio::test(flavor = "multi_thread")]
async fn failed_refetch_reconnects_the_stream_and_is_not_fatal() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    sim.add_fault(status_fault("GET", "/conversations", 503))
        .expect("fault installed");
    expire_the_replay(&mut shim, &sim).await;
    // Each stream opening logs an `agent.context` in the same step that makes it live; the
    // buffer was emptied before the second one, so two mean the third stream is live.
    sim.wait_for("stream reconnected after the failed re-fetch", WAIT, |s| {
        s.journal.count(Some("GET"), "/agents/stream") >= 3
            && s.events.get(DEFAULT_AGENT).is_some_and(|log| {
                log.events
                    .iter()
                    .filter(|e| e.name == "agent.context")
                    .count()
                    >= 2
            })
    })
    .await
    .expect("a failed re-fetch reconnects the stream");
    let lists: Vec<u16> = sim
        .journal(0, Some("/conversations"))
        .into_iter()
        .filter(|e| e.method == "GET" && e.path == "/conversations")
        .map(|e| e.status)
        .collect();
    assert!(
        lists.len() >= 2 && lists[1..].iter().all(|status| *status == 503),
        "the re-fetch was tried and failed: {lists:?}"
    );
    sim.clear_faults();

    inject_text(&sim, "after the gap");
    let inbound = shim.accept_inbound().await;
    assert_eq!(inbound["body"]["event"]["text"], "after the gap");
    assert!(
        shim.backlog().all(|f| f["type"] != "adapter.fatal"),
        "a failed re-fetch is not fatal: {:?}",
        shim.backlog().collect::<Vec<_>>()
    );
    assert_eq!(shim.close().await, Some(0));
}
