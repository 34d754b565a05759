//! canon-transport's event stream against the simulator over real sockets
//! (canon-wire.md §5, §11.7): the §5.2 vectors through the sim's split-write
//! SSE fault at every byte offset, reconnect with the cursor after a clean
//! close, a reset and a stall, `replay.expired`, the idle watchdog, the status
//! rows of the stream column of canon-wire.md §2.5 and 401 ×3 → `auth_failed`.

use std::time::{Duration, Instant};

use canon_sim::faults::{FaultRule, LineEnding, SseFault};
use canon_sim::state::StreamCmd;
use canon_sim::SimHandle;
use canon_transport::stream::{ConnectionState, EventStream, StreamConfig, StreamItem};
use canon_transport::TransportError;
use canon_wire::events::EventKind;
use canon_wire::FailureKind;
use serde_json::json;

use crate::sim_support::{
    client, fast_stream, header, journal_at, journal_cursor, next_item, rule, sim, WAIT,
};

const AGENT: &str = "a-hermes";
const STREAM: &str = "/agents/stream";

/// The canon-wire.md §5.2 vector frames as one byte stream: CRLF, CR and
/// LF endings, a multi-byte message id, comments, discarded frames.
const VECTORS: &str = "event: message.created\r\ndata: {\"conversationId\":\"c-direct\",\"message\":{\"id\":\"m-ü€😀\"}}\r\n\r\n\
data: {\"a\":1}\n\n\
id: 7\revent: ping\rdata:  hello  \r\r\
id: 8\n\n\
event:x\ndata:1\ndata:2\n\n\
: comment\nevent: heartbeat\ndata: {}\n\n\
event: e\ndata\n\n\
id:9\nevent: e\ndata: [1]\nretry: 5\n\n";

fn sse_rule(fault: SseFault, extra: serde_json::Value) -> FaultRule {
    let mut matcher = json!({"method": "GET", "path": STREAM});
    if let (Some(m), Some(e)) = (matcher.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    FaultRule {
        id: String::new(),
        matcher: serde_json::from_value(matcher).expect("matcher"),
        action: canon_sim::faults::FaultAction::Sse(fault),
        seen: 0,
        fired: 0,
    }
}

fn open(sim: &SimHandle, config: StreamConfig) -> EventStream {
    EventStream::open(&client(sim), config)
}

fn name(kind: &EventKind) -> String {
    match kind {
        EventKind::Connected(_) => "connected".into(),
        EventKind::Heartbeat(_) => "heartbeat".into(),
        EventKind::Error(_) => "error".into(),
        EventKind::ReplayExpired { .. } => "replay.expired".into(),
        EventKind::AgentContext { .. } => "agent.context".into(),
        EventKind::MessageCreated(_) => "message.created".into(),
        EventKind::Unknown { name, .. } | EventKind::Ignored { name, .. } => name.clone(),
        other => format!("{other:?}"),
    }
}

/// Events up to the next disconnect, with the disconnect's error and wait.
async fn until_disconnect(
    stream: &mut EventStream,
) -> (
    Vec<(String, Option<String>)>,
    Option<TransportError>,
    Duration,
) {
    let mut events = Vec::new();
    loop {
        match next_item(stream).await {
            StreamItem::Event(event) => events.push((name(&event.kind), event.id)),
            StreamItem::State(ConnectionState::Disconnected { error, retry_in }) => {
                return (events, error, retry_in)
            }
            StreamItem::State(ConnectionState::Failed(err)) => panic!("unexpected fatal {err:?}"),
            StreamItem::State(_) => {}
        }
    }
}

/// Events until `want` ids of pushed `probe` events were seen.
async fn until_probe(stream: &mut EventStream, want: &str) -> Vec<(String, Option<String>)> {
    let mut events = Vec::new();
    loop {
        if let StreamItem::Event(event) = next_item(stream).await {
            let done = matches!(&event.kind, EventKind::Unknown { name, data } if name == "probe" && data["n"] == want);
            events.push((name(&event.kind), event.id));
            if done {
                return events;
            }
        }
    }
}

fn push_probe(sim: &SimHandle, n: &str) -> String {
    sim.push_event(AGENT, "probe", json!({"n": n}), true);
    sim.read_state(|s| s.events.get(AGENT).and_then(|l| l.newest_id()))
        .expect("a durable event has an id")
}

async fn wait_open_streams(sim: &SimHandle, n: usize) {
    sim.wait_for("open streams", WAIT, |s| {
        s.open_streams.values().filter(|o| o.agent == AGENT).count() >= n
    })
    .await
    .unwrap();
}

/// Every split size from 1 byte to the whole vector text: size `n` puts the
/// first cut at byte offset `n` (and then every `n` bytes), so together the
/// connections cut the stream at every byte offset, inside multi-byte UTF-8
/// sequences and between CR and LF. The sim's own frames (`connected`,
/// `agent.context`) are split the same way and cycle through LF, CRLF and CR.
#[tokio::test]
async fn vectors_survive_sim_split_writes_at_every_byte_offset() {
    let sim = sim().await;
    let total = VECTORS.len();
    let expected: Vec<(String, Option<String>)> = [
        ("message.created", None),
        ("ping", Some("7")),
        ("x", None),
        ("heartbeat", None),
        ("e", Some("9")),
        ("connected", None),
    ]
    .iter()
    .map(|(n, id)| (n.to_string(), id.map(str::to_owned)))
    .collect();
    let endings = [LineEnding::Lf, LineEnding::Crlf, LineEnding::Cr];
    for split in 1..=total {
        sim.clear_faults();
        sim.add_fault(sse_rule(
            SseFault {
                raw_prelude: Some(VECTORS.to_owned()),
                split_every: Some(split),
                line_ending: endings[split % 3],
                close_after_frames: Some(2),
                ..SseFault::default()
            },
            json!({"times": 1}),
        ));
        let mut stream = open(&sim, fast_stream());
        let (events, error, _) = until_disconnect(&mut stream).await;
        assert!(error.is_none(), "clean end at split {split}: {error:?}");
        assert_eq!(
            events.len(),
            expected.len() + 1,
            "split {split}: {events:?}"
        );
        assert_eq!(events[..expected.len()], expected[..], "split {split}");
        assert_eq!(events[expected.len()].0, "agent.context", "split {split}");
        drop(stream);
    }
}

#[tokio::test]
async fn vectors_keep_the_multibyte_message_id_across_one_byte_writes() {
    let sim = sim().await;
    sim.add_fault(sse_rule(
        SseFault {
            raw_prelude: Some(VECTORS.to_owned()),
            split_every: Some(1),
            line_ending: LineEnding::Crlf,
            ..SseFault::default()
        },
        json!({"times": 1}),
    ));
    let mut stream = open(&sim, fast_stream());
    loop {
        if let StreamItem::Event(event) = next_item(&mut stream).await {
            if let EventKind::MessageCreated(created) = event.kind {
                assert_eq!(created.message_id(), Some("m-ü€😀"));
                assert_eq!(created.conversation_id, "c-direct");
                break;
            }
        }
    }
}

/// Reconnects after `cut` with the cursor of the last event received; the
/// event pushed while disconnected is replayed exactly once.
async fn reconnects_with_cursor_after(
    cut: StreamCmd,
    expected: Option<FailureKind>,
    idle: Duration,
) {
    let sim = sim().await;
    let mut config = fast_stream();
    config.idle_timeout = idle;
    // A backoff long enough that the event below is usually pushed while the
    // client is away (the assertions hold either way).
    config.initial_backoff = Duration::from_millis(100);
    config.max_backoff = Duration::from_millis(100);
    let mut stream = open(&sim, config);
    wait_open_streams(&sim, 1).await;
    push_probe(&sim, "1");
    let last = push_probe(&sim, "2");
    let seen = until_probe(&mut stream, "2").await;
    assert_eq!(stream.cursor().as_deref(), Some(last.as_str()));
    assert_eq!(
        seen.iter().filter(|(n, _)| n == "probe").count(),
        2,
        "{seen:?}"
    );
    let since = journal_cursor(&sim);
    assert_eq!(sim.stream_control(AGENT, cut.clone()), 1);
    let (_, error, _) = until_disconnect(&mut stream).await;
    assert_eq!(
        error.as_ref().map(TransportError::kind),
        expected,
        "{cut:?}: {error:?}"
    );
    let missed = push_probe(&sim, "3");
    let after = until_probe(&mut stream, "3").await;
    assert_eq!(
        after
            .iter()
            .filter(|(n, _)| n == "probe")
            .collect::<Vec<_>>(),
        [&("probe".to_owned(), Some(missed.clone()))],
        "{cut:?}: exactly the missed event, once"
    );
    let reconnects = journal_at(&sim, since, STREAM);
    assert_eq!(reconnects.len(), 1, "{cut:?}");
    assert_eq!(header(&reconnects[0], "last-event-id"), Some(last.as_str()));
    assert_eq!(header(&reconnects[0], "accept"), Some("text/event-stream"));
    assert_eq!(
        reconnects[0].query,
        "events=messages%2Ccontacts%2Ctyping_presence%2Cruntime_turn%2Cvoice"
    );
}

/// Regression: the sim (like Canon) sends `agent.context` with a fresh id before it replays
/// missed events. A connection that ends right after that frame must not move the cursor past
/// the events it never replayed.
#[tokio::test]
async fn a_break_right_after_agent_context_loses_no_event() {
    let sim = sim().await;
    let mut config = fast_stream();
    config.initial_backoff = Duration::from_millis(100);
    config.max_backoff = Duration::from_millis(100);
    let mut stream = open(&sim, config);
    wait_open_streams(&sim, 1).await;
    let first = push_probe(&sim, "1");
    until_probe(&mut stream, "1").await;
    assert_eq!(stream.cursor().as_deref(), Some(first.as_str()));
    // The next connection ends after `connected` and `agent.context`.
    sim.add_fault(sse_rule(
        SseFault {
            close_after_frames: Some(2),
            ..SseFault::default()
        },
        json!({"times": 1}),
    ));
    assert_eq!(sim.stream_control(AGENT, StreamCmd::Close), 1);
    until_disconnect(&mut stream).await;
    let missed: Vec<Option<String>> = ["2", "3", "4"]
        .iter()
        .map(|n| Some(push_probe(&sim, n)))
        .collect();
    let (during_fault, _, _) = until_disconnect(&mut stream).await;
    assert!(
        during_fault
            .iter()
            .any(|(n, id)| n == "agent.context" && id.is_none()),
        "the faulty connection delivered agent.context, without the id that would move a \
         consumer's own cursor past the replay: {during_fault:?}"
    );
    assert_eq!(stream.cursor().as_deref(), Some(first.as_str()));
    let seen = until_probe(&mut stream, "4").await;
    let replayed: Vec<Option<String>> = seen
        .iter()
        .filter(|(n, _)| n == "probe")
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(replayed, missed, "every missed event, once, in order");
}

/// Regression (found by the fault harness): every connection stores one more `agent.context`
/// after the cursor, and a server that ends each connection after a few frames must not trap
/// the stream replaying old contexts: the contexts behind the first move the cursor, so an
/// event sent after many short connections still arrives.
#[tokio::test]
async fn short_connections_do_not_trap_the_stream_in_replayed_contexts() {
    let sim = sim().await;
    let mut config = fast_stream();
    config.initial_backoff = Duration::from_millis(20);
    config.max_backoff = Duration::from_millis(20);
    let mut stream = open(&sim, config);
    wait_open_streams(&sim, 1).await;
    push_probe(&sim, "1");
    until_probe(&mut stream, "1").await;
    // Every connection from now on ends after `connected` and four events; heartbeat frames
    // (which carry no id) end a connection that has nothing else to send.
    sim.set_switches(|s| {
        s.heartbeat_ms = 50;
        s.heartbeat_as_event = true;
    });
    sim.add_fault(sse_rule(
        SseFault {
            close_after_frames: Some(5),
            ..SseFault::default()
        },
        json!({}),
    ));
    assert_eq!(sim.stream_control(AGENT, StreamCmd::Close), 1);
    for _ in 0..8 {
        until_disconnect(&mut stream).await;
    }
    push_probe(&sim, "2");
    let seen = tokio::time::timeout(WAIT, until_probe(&mut stream, "2")).await;
    assert!(
        seen.is_ok(),
        "the probe never arrived: every connection replayed old contexts"
    );
}

#[tokio::test]
async fn reconnect_after_a_clean_close_sends_the_cursor() {
    reconnects_with_cursor_after(StreamCmd::Close, None, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn reconnect_after_a_reset_sends_the_cursor() {
    reconnects_with_cursor_after(
        StreamCmd::Reset,
        Some(FailureKind::Reset),
        Duration::from_secs(10),
    )
    .await;
}

#[tokio::test]
async fn reconnect_after_a_stall_sends_the_cursor() {
    // The sim goes silent for 5 s; the 1 s idle watchdog drops it first.
    reconnects_with_cursor_after(
        StreamCmd::Stall(5_000),
        Some(FailureKind::ReadTimeout),
        Duration::from_secs(1),
    )
    .await;
}

#[tokio::test]
async fn idle_watchdog_drops_a_silent_stream_and_resumes() {
    let sim = sim().await;
    sim.add_fault(sse_rule(
        SseFault {
            stall_ms: Some(5_000),
            ..SseFault::default()
        },
        json!({"times": 1}),
    ));
    let mut config = fast_stream();
    config.idle_timeout = Duration::from_millis(300);
    let mut stream = open(&sim, config);
    let started = Instant::now();
    let (events, error, _) = until_disconnect(&mut stream).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["connected", "agent.context"]);
    assert_eq!(
        error.as_ref().map(TransportError::kind),
        Some(FailureKind::ReadTimeout)
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    // The second connection (no fault) resumes from the cursor and delivers.
    wait_open_streams(&sim, 2).await;
    let id = push_probe(&sim, "after-idle");
    let seen = until_probe(&mut stream, "after-idle").await;
    assert_eq!(seen.last().unwrap().1.as_deref(), Some(id.as_str()));
    // (A loaded machine may idle out the quiet second connection too.)
    let connects = journal_at(&sim, 0, STREAM);
    assert!(connects.len() >= 2);
    // The stalled connection was opened without a cursor, so nothing was replayed behind its
    // `agent.context`: that context moved the cursor, and the reconnect resumes from it.
    let context_id = events[1].1.as_deref();
    assert!(context_id.is_some(), "{events:?}");
    assert_eq!(header(&connects[1], "last-event-id"), context_id);
}

#[tokio::test]
async fn replay_expired_moves_the_cursor_to_last_available_id() {
    let sim = sim().await;
    let newest = push_probe(&sim, "old");
    let mut config = fast_stream();
    config.initial_cursor = Some("e-999999".into());
    let mut stream = open(&sim, config);
    let expired = loop {
        if let StreamItem::Event(event) = next_item(&mut stream).await {
            if let EventKind::ReplayExpired { last_available_id } = event.kind {
                break last_available_id;
            }
        }
    };
    assert_eq!(expired.as_deref(), Some(newest.as_str()));
    assert_eq!(stream.cursor().as_deref(), Some(newest.as_str()));
    let first = journal_at(&sim, 0, STREAM);
    assert_eq!(header(&first[0], "last-event-id"), Some("e-999999"));
    // A reconnect now asks for what follows `lastAvailableId`.
    let since = journal_cursor(&sim);
    stream.reconnect();
    let (_, error, _) = until_disconnect(&mut stream).await;
    assert!(error.is_none());
    sim.wait_for("the reconnect", WAIT, |s| {
        s.journal.count(Some("GET"), STREAM) >= 2
    })
    .await
    .unwrap();
    let again = journal_at(&sim, since, STREAM);
    assert_eq!(header(&again[0], "last-event-id"), Some(newest.as_str()));
    // An expired buffer with nothing left clears the cursor.
    sim.expire_replay_buffer(AGENT);
    let mut config = fast_stream();
    config.initial_cursor = Some("e-000001".into());
    let mut cleared = open(&sim, config);
    loop {
        if let StreamItem::Event(event) = next_item(&mut cleared).await {
            if let EventKind::ReplayExpired { last_available_id } = event.kind {
                assert_eq!(last_available_id, None);
                break;
            }
        }
    }
    assert_eq!(cleared.cursor(), None);
}

#[tokio::test]
async fn connect_statuses_back_off_and_reconnect_with_retry_after() {
    let sim = sim().await;
    let statuses = [400u16, 404, 408, 409, 425, 429, 500, 502, 503];
    for (i, status) in statuses.iter().enumerate() {
        let retry_after = if *status == 503 {
            json!(1)
        } else {
            json!(null)
        };
        sim.add_fault(rule(json!({"matcher": {"method": "GET", "path": STREAM, "nth": [i + 1]},
                                  "action": {"type": "status", "status": status, "retryAfter": retry_after}})));
    }
    let mut stream = open(&sim, fast_stream());
    for status in statuses {
        let (events, error, retry_in) = until_disconnect(&mut stream).await;
        assert!(events.is_empty());
        assert_eq!(
            error.as_ref().and_then(TransportError::status),
            Some(status)
        );
        if status == 503 {
            assert!(retry_in >= Duration::from_secs(1), "{retry_in:?}");
        } else {
            assert!(retry_in < Duration::from_secs(1), "{status}: {retry_in:?}");
        }
    }
    // The attempt after the faults connects.
    loop {
        if let StreamItem::State(ConnectionState::Connected) = next_item(&mut stream).await {
            break;
        }
    }
    assert_eq!(journal_at(&sim, 0, STREAM).len(), statuses.len() + 1);
}

#[tokio::test]
async fn three_consecutive_401_or_403_end_the_stream_with_auth_failed() {
    let sim = sim().await;
    // A 401, a success, then 401, 403, 401: the success resets the count.
    for (nth, status) in [(1, 401), (3, 401), (4, 403), (5, 401)] {
        sim.add_fault(rule(
            json!({"matcher": {"method": "GET", "path": STREAM, "nth": [nth]},
                                  "action": {"type": "status", "status": status}}),
        ));
    }
    sim.add_fault(sse_rule(
        SseFault {
            close_after_frames: Some(2),
            ..SseFault::default()
        },
        json!({"nth": [2]}),
    ));
    let mut stream = open(&sim, fast_stream());
    let mut disconnects = Vec::new();
    let fatal = loop {
        match next_item(&mut stream).await {
            StreamItem::State(ConnectionState::Disconnected { error, .. }) => {
                disconnects.push(error.as_ref().and_then(TransportError::status))
            }
            StreamItem::State(ConnectionState::Failed(err)) => break err,
            _ => {}
        }
    };
    assert_eq!(disconnects, [Some(401), None, Some(401), Some(403)]);
    assert!(
        matches!(fatal, TransportError::AuthFailed { status: 401 }),
        "{fatal:?}"
    );
    assert!(!fatal.is_retryable());
    assert_eq!(
        fatal.to_string(),
        "Canon rejected the configured agent credentials. Re-run Canon setup."
    );
    // The stream stopped: no further item, no further connection attempt.
    assert!(tokio::time::timeout(WAIT, stream.next())
        .await
        .unwrap()
        .is_none());
    assert_eq!(journal_at(&sim, 0, STREAM).len(), 5);
}

#[tokio::test]
async fn an_unknown_key_ends_with_auth_failed_after_three_refusals() {
    let sim = sim().await;
    let config = canon_transport::ClientConfig::new(
        sim.base_url(),
        sim.stream_url(),
        canon_wire::ApiKey::new("sk-revoked-key"),
    );
    let client = canon_transport::CanonClient::new(config).unwrap();
    let mut stream = EventStream::open(&client, fast_stream());
    let fatal = loop {
        if let StreamItem::State(ConnectionState::Failed(err)) = next_item(&mut stream).await {
            break err;
        }
    };
    assert!(
        matches!(fatal, TransportError::AuthFailed { status: 401 }),
        "{fatal:?}"
    );
    let attempts = journal_at(&sim, 0, STREAM);
    assert_eq!(attempts.len(), 3);
    assert!(attempts
        .iter()
        .all(|a| a.status == 401 && a.principal.is_none()));
}
