//! Stream behaviours of canon-wire.md §11.4: handshake, `message.created` with the
//! `canon_dispatch` verdict, reply authorities, replay after `Last-Event-ID`,
//! `replay.expired`, receipts, signals, stream control and heartbeats.

use canon_sim::control::{Injection, LongAnswer, Signal};
use canon_sim::interactions::Response;
use canon_sim::state::StreamCmd;
use canon_sim::{ConversationSpec, PrincipalSpec};
use serde_json::json;

use super::support::{call, sim, sim_with, Sse, WAIT};

async fn wait_open(sim: &canon_sim::SimHandle, n: usize) {
    sim.wait_for("stream open", WAIT, |s| s.open_streams.len() >= n)
        .await
        .unwrap();
}

#[tokio::test]
async fn human_message_arrives_with_run_turn_and_a_reply_authority() {
    let sim = sim().await;
    let mut sse = Sse::open(&sim, None).await;
    assert_eq!(sse.status, 200);
    let (connected, context) = sse.handshake().await;
    assert_eq!(connected.id, None);
    assert_eq!(connected.data["principalType"], "ai_agent");
    assert_eq!(
        context.data,
        json!({"agentId": "a-hermes", "ownerId": "h-owner", "outboundPolicy": "open"})
    );
    assert!(context.id.is_some());
    // The agent's own send is not delivered back to it.
    call(
        &sim,
        "POST",
        "/messages/send",
        Some(json!({"conversationId": "c-direct", "text": "mine"})),
    )
    .await;
    let m = sim
        .inject_message(&Injection {
            text: Some("hello agent".into()),
            ..Default::default()
        })
        .unwrap();
    let frame = sse.until("message.created").await;
    assert!(frame.id.as_deref().is_some_and(|i| i.starts_with("e-")));
    let d = &frame.data;
    assert_eq!(d["message"]["id"], m["id"]);
    assert_eq!(d["message"]["text"], "hello agent");
    assert_eq!(d["turnDispatch"], json!({"kind": "run_turn"}));
    assert_eq!(d["provenance"]["conversation"]["type"], "direct");
    let authority = &d["replyAuthority"];
    assert_eq!(authority["schema"], "canon.agent-reply-authority.v1");
    assert_eq!(authority["sourceMessageId"], m["id"]);
    assert_eq!(authority["token"].as_str().unwrap().len(), 43);
    assert!(authority["expiresAt"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn non_waking_agent_messages_follow_the_dispatch_switches() {
    let sim = sim().await;
    let peer = sim.create_principal(PrincipalSpec {
        id: Some("a-peer".into()),
        kind: "ai_agent".into(),
        ..Default::default()
    });
    sim.create_conversation(ConversationSpec {
        id: Some("c-group".into()),
        kind: "group".into(),
        member_ids: vec!["h-owner".into(), "a-hermes".into(), peer.clone()],
        behavior: Some(json!({"maxConsecutiveAgentTurns": 2})),
        ..Default::default()
    });
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    // A two-part answer from another agent: part 1 is progress (suppressed), part 2 wakes.
    sim.inject_long_agent_answer(&LongAnswer {
        conversation_id: "c-group".into(),
        sender_id: peer.clone(),
        parts: vec!["one".into(), "two".into()],
        turn_id: None,
    })
    .unwrap();
    let frame = sse.until("message.created").await;
    assert_eq!(frame.data["message"]["text"], "two");
    assert_eq!(
        frame.data["message"]["metadata"]["messageChunk"]["index"],
        2
    );
    assert_eq!(
        frame.data["behavior"]["participation"]["maxConsecutiveAgentTurns"],
        2
    );
    assert_eq!(frame.data["provenance"]["conversation"]["type"], "group");
    sim.set_switches(|s| s.emit_suppressed = true);
    sim.inject_message(&Injection {
        conversation_id: Some("c-group".into()),
        sender_id: Some(peer.clone()),
        text: Some("thinking aloud".into()),
        metadata: Some(json!({"turnSemantics": "progress"})),
        ..Default::default()
    })
    .unwrap();
    let suppressed = sse.until("message.created").await;
    assert_eq!(suppressed.data["turnDispatch"], json!({"kind": "suppress"}));
    assert!(suppressed.data.get("replyAuthority").is_none());
    sim.set_switches(|s| s.legacy_no_dispatch = true);
    sim.inject_message(&Injection {
        conversation_id: Some("c-group".into()),
        text: Some("old server".into()),
        mentions: vec!["a-hermes".into()],
        ..Default::default()
    })
    .unwrap();
    let legacy = sse.until("message.created").await;
    assert!(legacy.data.get("turnDispatch").is_none());
    assert_eq!(legacy.data["provenance"]["mentionedAgent"], true);
    // Per-message overrides.
    sim.set_switches(|s| s.legacy_no_dispatch = false);
    sim.inject_message(&Injection {
        text: Some("forced".into()),
        turn_dispatch: Some("custom_kind".into()),
        duplicate: true,
        ..Default::default()
    })
    .unwrap();
    let a = sse.until("message.created").await;
    let b = sse.until("message.created").await;
    assert_eq!(a.data["turnDispatch"]["kind"], "custom_kind");
    assert_eq!(a.data["message"]["id"], b.data["message"]["id"]);
    assert_ne!(a.id, b.id);
}

#[tokio::test]
async fn reconnect_with_last_event_id_replays_the_gap() {
    let sim = sim().await;
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    sim.inject_message(&Injection {
        text: Some("first".into()),
        ..Default::default()
    })
    .unwrap();
    let first = sse.until("message.created").await;
    drop(sse);
    sim.wait_for("stream closed", WAIT, |s| s.open_streams.is_empty())
        .await
        .unwrap();
    sim.inject_message(&Injection {
        text: Some("second".into()),
        ..Default::default()
    })
    .unwrap();
    sim.inject_message(&Injection {
        text: Some("third".into()),
        ..Default::default()
    })
    .unwrap();
    let mut again = Sse::open(&sim, first.id.as_deref()).await;
    again.handshake().await;
    let a = again.until("message.created").await;
    let b = again.until("message.created").await;
    assert_eq!(
        (
            a.data["message"]["text"].as_str(),
            b.data["message"]["text"].as_str()
        ),
        (Some("second"), Some("third"))
    );
    // Live delivery continues after the replay.
    sim.inject_message(&Injection {
        text: Some("live".into()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        again.until("message.created").await.data["message"]["text"],
        "live"
    );
}

#[tokio::test]
async fn unknown_or_evicted_cursor_gets_replay_expired() {
    let sim = sim_with(|c| c.switches.replay_buffer_events = 3).await;
    for i in 0..5 {
        sim.inject_message(&Injection {
            text: Some(format!("m{i}")),
            ..Default::default()
        })
        .unwrap();
    }
    let newest = sim.read_state(|s| s.events["a-hermes"].newest_id());
    let mut sse = Sse::open(&sim, Some("e-000001")).await;
    sse.handshake().await;
    let expired = sse.next().await.unwrap();
    assert_eq!(expired.event, "replay.expired");
    assert_eq!(expired.id, None);
    assert_eq!(expired.data["lastAvailableId"].as_str(), newest.as_deref());
    // Nothing older follows: the next frame is a live one.
    sim.inject_message(&Injection {
        text: Some("live".into()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        sse.until("message.created").await.data["message"]["text"],
        "live"
    );
    sim.expire_replay_buffer("a-hermes");
    let mut after = Sse::open(&sim, newest.as_deref()).await;
    after.handshake().await;
    let e = after.next().await.unwrap();
    assert_eq!(e.event, "replay.expired");
}

#[tokio::test]
async fn answering_an_approval_emits_a_waking_receipt() {
    let sim = sim().await;
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    let body = json!({"interactionKind": "approval", "conversationId": "c-direct", "approvalId": "ap-r", "toolName": "Command", "toolSummary": "ls", "expiresAt": sim.now_ms() + 60_000});
    assert_eq!(
        call(&sim, "POST", "/runtime-interaction/request", Some(body))
            .await
            .status,
        200
    );
    sim.respond_interaction(&Response {
        conversation_id: "c-direct".into(),
        kind: "approval".into(),
        id: "ap-r".into(),
        decision: Some("deny".into()),
        ..Default::default()
    })
    .unwrap();
    let receipt = sse.until("message.created").await;
    assert_eq!(
        receipt.data["message"]["metadata"],
        json!({"type": "approval_reply", "approvalId": "ap-r", "decision": "deny"})
    );
    assert_eq!(receipt.data["message"]["text"], "Denied");
    assert_eq!(receipt.data["turnDispatch"]["kind"], "run_turn");
}

#[tokio::test]
async fn signals_ring_the_doorbell_unless_told_not_to() {
    let sim = sim().await;
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    sim.raise_signal(&Signal {
        conversation_id: "c-direct".into(),
        signal: "interrupt".into(),
        doorbell: Some(false),
        ..Default::default()
    })
    .unwrap();
    sim.raise_signal(&Signal {
        conversation_id: "c-direct".into(),
        signal: "stop_and_drop".into(),
        ..Default::default()
    })
    .unwrap();
    let bell = sse.next().await.unwrap();
    assert_eq!(bell.event, "runtime.control");
    assert_eq!(
        bell.data,
        json!({"conversationId": "c-direct", "kind": "signal"})
    );
    assert_eq!(sim.read_state(|s| s.signals["c-direct"].len()), 2);
}

#[tokio::test]
async fn stream_control_closes_cleanly_or_resets() {
    let sim = sim().await;
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    wait_open(&sim, 1).await;
    assert_eq!(sim.stream_control("a-hermes", StreamCmd::Close), 1);
    assert!(sse.next().await.is_none());
    assert!(
        sse.ended && !sse.aborted,
        "clean close ends the chunked body"
    );
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    wait_open(&sim, 1).await;
    sim.stream_control("a-hermes", StreamCmd::Reset);
    assert!(sse.next().await.is_none());
    assert!(
        sse.aborted && !sse.ended,
        "reset never sends the terminating chunk"
    );
}

#[tokio::test]
async fn heartbeats_are_comments_or_events() {
    let sim = sim_with(|c| {
        c.switches.heartbeat_ms = 20;
        c.switches.heartbeat_as_event = true;
    })
    .await;
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    let hb = sse.next().await.unwrap();
    assert_eq!(hb.event, "heartbeat");
    assert_eq!(hb.id, None);
    assert_eq!(hb.data["timestamp"], sim.now_ms());
    sim.set_switches(|s| s.heartbeat_as_event = false);
    let mut comments = Sse::open(&sim, None).await;
    comments.handshake().await;
    sim.inject_message(&Injection {
        text: Some("after a beat".into()),
        ..Default::default()
    })
    .unwrap();
    comments.until("message.created").await;
    while !comments.raw_text.contains(": keepalive") {
        sim.inject_message(&Injection {
            text: Some("poke".into()),
            ..Default::default()
        })
        .unwrap();
        comments.until("message.created").await;
    }
}

#[tokio::test]
async fn agent_context_can_omit_the_outbound_policy_and_stream_needs_auth() {
    let sim = sim_with(|c| c.switches.agent_context_omit_policy = true).await;
    let mut sse = Sse::open(&sim, None).await;
    let (_, context) = sse.handshake().await;
    assert!(context.data.get("outboundPolicy").is_none());
    let denied = Sse::open_with_key(&sim, "bad", None).await;
    assert_eq!(denied.status, 401);
}

#[tokio::test]
async fn pushed_events_reach_the_stream() {
    let sim = sim().await;
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    sim.push_event("a-hermes", "error", json!({"message": "boom"}), false);
    sim.push_event(
        "a-hermes",
        "conversation.updated",
        json!({"conversationId": "c-direct", "changes": {"name": "New"}}),
        true,
    );
    let e = sse.next().await.unwrap();
    assert_eq!((e.event.as_str(), e.id.is_none()), ("error", true));
    let u = sse.next().await.unwrap();
    assert_eq!(u.event, "conversation.updated");
    assert!(u.id.is_some());
}

#[tokio::test]
async fn a_separate_stream_port_serves_the_same_stream() {
    let sim = sim_with(|c| c.separate_stream_port = true).await;
    assert_ne!(sim.base_url(), sim.stream_url());
    let addr = sim.stream_addr();
    let health = super::support::raw(addr, "GET", "/health", &[], None)
        .await
        .unwrap();
    assert_eq!(health.status, 200);
    let env = sim.env_lines();
    assert!(env.contains(&format!("CANON_STREAM_URL={}", sim.stream_url())));
}

#[tokio::test]
async fn group_participation_policy_shapes_the_verdict() {
    let sim = sim().await;
    let peer = sim.create_principal(PrincipalSpec {
        id: Some("a-peer".into()),
        kind: "ai_agent".into(),
        ..Default::default()
    });
    sim.create_principal(PrincipalSpec {
        id: Some("h-guest".into()),
        kind: "human".into(),
        ..Default::default()
    });
    let members = vec![
        "h-owner".to_owned(),
        "a-hermes".to_owned(),
        peer.clone(),
        "h-guest".to_owned(),
    ];
    sim.create_conversation(ConversationSpec {
        id: Some("c-mention".into()),
        kind: "group".into(),
        member_ids: members.clone(),
        behavior: Some(json!({"requireMentionForGroupReplies": true})),
        ..Default::default()
    });
    sim.create_conversation(ConversationSpec {
        id: Some("c-limit".into()),
        kind: "group".into(),
        member_ids: members,
        behavior: Some(json!({"maxConsecutiveAgentTurns": 2})),
        ..Default::default()
    });
    sim.set_switches(|s| s.emit_suppressed = true);
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    let inject = |conv: &str, sender: &str, text: &str, mentions: Vec<String>| Injection {
        conversation_id: Some(conv.into()),
        sender_id: Some(sender.into()),
        text: Some(text.into()),
        mentions,
        metadata: Some(json!({"turnSemantics": "turn_complete"})),
        ..Default::default()
    };
    sim.inject_message(&inject("c-mention", "h-guest", "no mention", vec![]))
        .unwrap();
    assert_eq!(
        sse.until("message.created").await.data["turnDispatch"]["kind"],
        "suppress"
    );
    sim.inject_message(&inject(
        "c-mention",
        "h-guest",
        "hey @hermes",
        vec!["a-hermes".into()],
    ))
    .unwrap();
    assert_eq!(
        sse.until("message.created").await.data["turnDispatch"]["kind"],
        "run_turn"
    );
    sim.inject_message(&inject("c-limit", "h-guest", "start", vec![]))
        .unwrap();
    assert_eq!(
        sse.until("message.created").await.data["turnDispatch"]["kind"],
        "run_turn"
    );
    sim.inject_message(&inject("c-limit", &peer, "agent 1", vec![]))
        .unwrap();
    assert_eq!(
        sse.until("message.created").await.data["turnDispatch"]["kind"],
        "run_turn"
    );
    sim.inject_message(&inject("c-limit", &peer, "agent 2", vec![]))
        .unwrap();
    assert_eq!(
        sse.until("message.created").await.data["turnDispatch"]["kind"],
        "suppress"
    );
}

#[tokio::test]
async fn reorder_fault_swaps_event_pairs_and_context_can_be_pushed() {
    let sim = sim().await;
    sim.add_fault(serde_json::from_value(json!({"matcher": {"path": "/agents/stream"}, "action": {"type": "sse", "reorder": true}})).unwrap());
    let mut sse = Sse::open(&sim, None).await;
    assert_eq!(sse.next().await.unwrap().event, "connected");
    sim.with_state(|s| s.principals.get_mut("a-hermes").unwrap().outbound_policy = "closed".into());
    sim.push_agent_context("a-hermes");
    // The initial agent.context is held back and follows the pushed one.
    let first = sse.next().await.unwrap();
    let second = sse.next().await.unwrap();
    assert_eq!(
        (first.event.as_str(), second.event.as_str()),
        ("agent.context", "agent.context")
    );
    assert_eq!(first.data["outboundPolicy"], "closed");
    assert_eq!(second.data["outboundPolicy"], "open");
    assert!(first.id > second.id);
}

#[tokio::test]
async fn backfill_switch_replays_unread_messages_to_a_fresh_stream() {
    let sim = sim_with(|c| c.switches.backfill_unread_on_connect = true).await;
    sim.inject_message(&Injection {
        text: Some("read already".into()),
        ..Default::default()
    })
    .unwrap();
    sim.advance_clock(10);
    call(&sim, "POST", "/conversations/c-direct/read", None).await;
    sim.advance_clock(10);
    sim.inject_message(&Injection {
        text: Some("unread".into()),
        ..Default::default()
    })
    .unwrap();
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    assert_eq!(
        sse.until("message.created").await.data["message"]["text"],
        "unread"
    );
}

#[tokio::test]
async fn reset_keeps_open_streams_delivering() {
    let sim = sim().await;
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    sim.inject_message(&Injection {
        text: Some("before".into()),
        ..Default::default()
    })
    .unwrap();
    let before = sse.until("message.created").await;
    sim.reset();
    sim.inject_message(&Injection {
        text: Some("after".into()),
        ..Default::default()
    })
    .unwrap();
    let after = sse.until("message.created").await;
    assert_eq!(after.data["message"]["text"], "after");
    assert!(
        after.id > before.id,
        "event ids keep increasing across a reset"
    );
}

#[tokio::test]
async fn delayed_answers_land_when_the_sim_clock_gets_there() {
    let sim = sim().await;
    let mut sse = Sse::open(&sim, None).await;
    sse.handshake().await;
    let body = json!({"interactionKind": "input", "conversationId": "c-direct", "inputId": "in-late", "kind": "clarify", "expiresAt": sim.now_ms() + 600_000});
    call(&sim, "POST", "/runtime-interaction/request", Some(body)).await;
    let scheduled = sim
        .respond_interaction(&Response {
            conversation_id: "c-direct".into(),
            kind: "input".into(),
            id: "in-late".into(),
            value: Some("later".into()),
            delay_ms: Some(5_000),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(scheduled["scheduledAt"], sim.now_ms() + 5_000);
    let consume =
        json!({"interactionKind": "input", "conversationId": "c-direct", "inputId": "in-late"});
    assert_eq!(
        call(
            &sim,
            "POST",
            "/runtime-interaction/consume",
            Some(consume.clone())
        )
        .await
        .json()["status"],
        "pending"
    );
    sim.advance_clock(5_000);
    let receipt = sse.until("message.created").await;
    assert_eq!(
        receipt.data["message"]["metadata"]["type"],
        "runtime_input_reply"
    );
    assert_eq!(
        call(&sim, "POST", "/runtime-interaction/consume", Some(consume))
            .await
            .json()["value"],
        "later"
    );
}

#[tokio::test]
async fn receipts_can_be_limited_to_some_interaction_kinds() {
    let sim = sim_with(|c| c.switches.receipt_kinds = vec!["approval".into()]).await;
    let body = json!({"interactionKind": "input", "conversationId": "c-direct", "inputId": "in-q", "kind": "clarify", "expiresAt": sim.now_ms() + 60_000});
    call(&sim, "POST", "/runtime-interaction/request", Some(body)).await;
    sim.respond_interaction(&Response {
        conversation_id: "c-direct".into(),
        kind: "input".into(),
        id: "in-q".into(),
        value: Some("x".into()),
        ..Default::default()
    })
    .unwrap();
    let receipts = sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.message.pointer("/metadata/type").is_some())
            .count()
    });
    assert_eq!(receipts, 0);
}
