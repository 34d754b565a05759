//! Event-stream tests against a raw local TCP server (canon-wire.md §5): split
//! writes at every byte offset, cursor and `Last-Event-ID`, `replay.expired`,
//! the idle watchdog, backoff and `Retry-After`, and the fatal `auth_failed`.

use std::sync::Arc;
use std::time::Duration;

use canon_transport::client::{CanonClient, ClientConfig};
use canon_transport::stream::{ConnectionState, EventStream, StreamConfig, StreamItem};
use canon_transport::TransportError;
use canon_wire::events::EventKind;
use canon_wire::{ApiKey, FailureKind};
use tokio::io::AsyncWriteExt;

use crate::support::{write_parts, RawServer, SSE_HEAD};

fn fast_config() -> StreamConfig {
    StreamConfig {
        connect_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(2),
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(8),
        random: Arc::new(|| 0.5),
        ..StreamConfig::default()
    }
}

fn open(server: &RawServer, config: StreamConfig) -> EventStream {
    let client = CanonClient::new(ClientConfig::new(
        server.url(),
        server.url(),
        ApiKey::new("sk-stream"),
    ))
    .unwrap();
    EventStream::open(&client, config)
}

async fn next(stream: &mut EventStream) -> StreamItem {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("stream item within 10 s")
        .expect("stream still running")
}

/// Collects `(event name, id)` pairs until the stream reports a disconnect.
async fn events_until_disconnect(
    stream: &mut EventStream,
) -> (
    Vec<EventKind>,
    Vec<Option<String>>,
    Option<TransportError>,
    Duration,
) {
    let mut kinds = Vec::new();
    let mut ids = Vec::new();
    loop {
        match next(stream).await {
            StreamItem::Event(event) => {
                ids.push(event.id);
                kinds.push(event.kind);
            }
            StreamItem::State(ConnectionState::Disconnected { error, retry_in }) => {
                return (kinds, ids, error, retry_in)
            }
            StreamItem::State(ConnectionState::Failed(err)) => panic!("unexpected fatal {err:?}"),
            StreamItem::State(_) => {}
        }
    }
}

/// The canon-wire.md §5.2 vectors as one byte stream (mixed line endings, multi-byte text).
fn vector_bytes() -> Vec<u8> {
    let text = "event: message.created\r\ndata: {\"conversationId\":\"c\",\"message\":{\"id\":\"m-ü\"}}\r\n\r\n\
                data: {\"a\":1}\n\n\
                id: 7\revent: ping\rdata:  hello  \r\r\
                id: 8\n\n\
                event:x\ndata:1\ndata:2\n\n\
                : comment\nevent: heartbeat\ndata: {}\n\n\
                event: e\ndata\n\n\
                id:9\nevent: e\ndata: [1]\nretry: 5\n\n";
    text.as_bytes().to_vec()
}

#[tokio::test]
async fn vectors_survive_split_writes_at_every_byte_offset() {
    let bytes = vector_bytes();
    let total = bytes.len();
    let payload = bytes.clone();
    let server = RawServer::start(move |n, mut socket| {
        let payload = payload.clone();
        Box::pin(async move {
            let cut = n.min(payload.len());
            write_parts(&mut socket, &[SSE_HEAD, &payload[..cut], &payload[cut..]]).await;
        })
    })
    .await;
    let mut stream = open(&server, fast_config());
    for cut in 0..=total {
        let (kinds, ids, error, _) = events_until_disconnect(&mut stream).await;
        assert!(error.is_none(), "clean end at cut {cut}: {error:?}");
        let names: Vec<&str> = kinds
            .iter()
            .map(|k| match k {
                EventKind::MessageCreated(_) => "message.created",
                EventKind::Heartbeat(_) => "heartbeat",
                EventKind::Unknown { name, .. } => name.as_str(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            ["message.created", "ping", "x", "heartbeat", "e"],
            "cut {cut}"
        );
        assert_eq!(
            ids,
            [None, Some("7".into()), None, None, Some("9".into())],
            "cut {cut}"
        );
        if let EventKind::MessageCreated(created) = &kinds[0] {
            assert_eq!(created.message_id(), Some("m-ü"));
        }
    }
}

#[tokio::test]
async fn reconnect_sends_the_cursor_and_replay_expired_moves_it() {
    let server = RawServer::start(|n, mut socket| {
        Box::pin(async move {
            let body: &[u8] = match n {
                0 => b"event: connected\ndata: {}\n\nid: 1\nevent: a\ndata: 1\n\nid: 2\nevent: b\ndata: 2\n\n",
                1 => b"id: 3\nevent: c\ndata: 3\n\nevent: replay.expired\ndata: {\"lastAvailableId\":\"41\"}\n\n",
                2 => b"event: replay.expired\ndata: {}\n\n",
                _ => b"",
            };
            write_parts(&mut socket, &[SSE_HEAD, body]).await;
        })
    })
    .await;
    let mut stream = open(&server, fast_config());
    let (_, ids, _, _) = events_until_disconnect(&mut stream).await;
    assert_eq!(ids, [None, Some("1".into()), Some("2".into())]);
    assert_eq!(stream.cursor().as_deref(), Some("2"));
    let (kinds, _, _, _) = events_until_disconnect(&mut stream).await;
    assert_eq!(
        kinds[1],
        EventKind::ReplayExpired {
            last_available_id: Some("41".into())
        }
    );
    assert_eq!(stream.cursor().as_deref(), Some("41"));
    events_until_disconnect(&mut stream).await;
    assert_eq!(
        stream.cursor(),
        None,
        "replay.expired without lastAvailableId clears the cursor"
    );
    events_until_disconnect(&mut stream).await;
    let heads = server.heads();
    let cursor_of = |head: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix("last-event-id: ").map(str::to_owned))
    };
    assert_eq!(
        cursor_of(&heads[0]),
        None,
        "first connect has no Last-Event-ID"
    );
    assert_eq!(cursor_of(&heads[1]).as_deref(), Some("2"));
    assert_eq!(cursor_of(&heads[2]).as_deref(), Some("41"));
    assert_eq!(cursor_of(&heads[3]), None);
    let first = &heads[0];
    assert!(first.starts_with("GET /agents/stream?events=messages%2Ccontacts%2Ctyping_presence%2Cruntime_turn%2Cvoice HTTP/1.1\r\n"), "{first}");
    assert!(first.contains("authorization: Bearer sk-stream\r\n"));
    assert!(first.contains("accept: text/event-stream\r\n"));
}

#[tokio::test]
async fn idle_watchdog_drops_a_stalled_connection() {
    let server = RawServer::start(|_, mut socket| {
        Box::pin(async move {
            write_parts(&mut socket, &[SSE_HEAD, b"id: 5\nevent: a\ndata: 1\n\n"]).await;
            // Stall: keep the socket open without sending anything.
            tokio::time::sleep(Duration::from_secs(30)).await;
        })
    })
    .await;
    let config = StreamConfig {
        idle_timeout: Duration::from_millis(150),
        ..fast_config()
    };
    let mut stream = open(&server, config);
    let (kinds, _, error, _) = events_until_disconnect(&mut stream).await;
    assert_eq!(kinds.len(), 1);
    assert_eq!(error.map(|e| e.kind()), Some(FailureKind::ReadTimeout));
    // It reconnects with the cursor.
    events_until_disconnect(&mut stream).await;
    assert!(server.heads()[1].contains("last-event-id: 5\r\n"));
}

#[tokio::test]
async fn stalled_response_head_hits_the_connect_timeout() {
    let server = RawServer::start(|_, socket| {
        Box::pin(async move {
            // Hold the connection open without answering.
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(socket);
        })
    })
    .await;
    let config = StreamConfig {
        connect_timeout: Duration::from_millis(100),
        ..fast_config()
    };
    let mut stream = open(&server, config);
    let (_, _, error, _) = events_until_disconnect(&mut stream).await;
    let error = error.expect("a timeout");
    assert_eq!(error.kind(), FailureKind::ReadTimeout);
    assert!(error.is_retryable());
}

#[tokio::test]
async fn three_consecutive_401_end_the_stream_with_auth_failed() {
    let server = RawServer::start(|_, mut socket| {
        Box::pin(async move {
            let _ = socket
                .write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 17\r\nconnection: close\r\n\r\n{\"error\":\"nope\"}\n")
                .await;
        })
    })
    .await;
    let mut stream = open(&server, fast_config());
    let mut disconnects = 0;
    let fatal = loop {
        match next(&mut stream).await {
            StreamItem::State(ConnectionState::Disconnected { error, .. }) => {
                assert_eq!(error.and_then(|e| e.status()), Some(401));
                disconnects += 1;
            }
            StreamItem::State(ConnectionState::Failed(err)) => break err,
            _ => {}
        }
    };
    assert_eq!(disconnects, 2);
    assert!(matches!(fatal, TransportError::AuthFailed { status: 401 }));
    assert_eq!(
        fatal.to_string(),
        "Canon rejected the configured agent credentials. Re-run Canon setup."
    );
    assert!(tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
        .is_none());
    assert_eq!(server.heads().len(), 3);
}

#[tokio::test]
async fn auth_counter_resets_when_another_answer_arrives() {
    let server = RawServer::start(|n, mut socket| {
        Box::pin(async move {
            let reply: &[u8] = match n {
                0 | 1 | 3 | 4 => {
                    b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                }
                2 => b"HTTP/1.1 500 Oops\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                _ => b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nevent: a\ndata: 1\n\n",
            };
            let _ = socket.write_all(reply).await;
        })
    })
    .await;
    let mut stream = open(&server, fast_config());
    loop {
        if let StreamItem::Event(_) = next(&mut stream).await {
            break;
        }
    }
    assert_eq!(server.heads().len(), 6);
}

#[tokio::test]
async fn backoff_doubles_resets_after_a_frame_and_honours_retry_after() {
    let server = RawServer::start(|n, mut socket| {
        Box::pin(async move {
            let reply: &[u8] = match n {
                0..=2 => b"HTTP/1.1 500 Oops\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                3 => b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nevent: a\ndata: 1\n\n",
                4 => b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n",
                _ => b"HTTP/1.1 503 Busy\r\nretry-after: 2\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            };
            let _ = socket.write_all(reply).await;
        })
    })
    .await;
    let mut stream = open(&server, fast_config());
    let mut waits = Vec::new();
    while waits.len() < 6 {
        if let StreamItem::State(ConnectionState::Disconnected { retry_in, .. }) =
            next(&mut stream).await
        {
            waits.push(retry_in);
        }
    }
    let ms = Duration::from_millis;
    // 1, 2, 4 ms; reset to 1 ms after the frame; a clean end without frames
    // still waits (2 ms); Retry-After raises the wait to 2 s.
    assert_eq!(
        waits,
        [ms(1), ms(2), ms(4), ms(1), ms(2), Duration::from_secs(2)]
    );
}

#[tokio::test]
async fn jitter_stays_within_twenty_percent() {
    let server = RawServer::start(|_, mut socket| {
        Box::pin(async move {
            let _ = socket
                .write_all(b"HTTP/1.1 500 Oops\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
        })
    })
    .await;
    for (random, expected) in [(0.0, 800), (1.0, 1200)] {
        let config = StreamConfig {
            initial_backoff: Duration::from_secs(1),
            random: Arc::new(move || random),
            ..fast_config()
        };
        let mut stream = open(&server, config);
        let wait = loop {
            if let StreamItem::State(ConnectionState::Disconnected { retry_in, .. }) =
                next(&mut stream).await
            {
                break retry_in;
            }
        };
        assert_eq!(wait, Duration::from_millis(expected));
    }
}

#[tokio::test]
async fn oversize_frame_is_a_protocol_error_after_earlier_frames() {
    let server = RawServer::start(|_, mut socket| {
        Box::pin(async move {
            let mut body = b"id: 1\nevent: a\ndata: 1\n\nevent: big\ndata: ".to_vec();
            body.extend(std::iter::repeat_n(b'x', 2048));
            write_parts(&mut socket, &[SSE_HEAD, &body]).await;
        })
    })
    .await;
    let config = StreamConfig {
        max_frame_bytes: 1024,
        ..fast_config()
    };
    let mut stream = open(&server, config);
    let (kinds, _, error, _) = events_until_disconnect(&mut stream).await;
    assert_eq!(kinds.len(), 1);
    assert_eq!(error.map(|e| e.kind()), Some(FailureKind::Protocol));
    assert_eq!(stream.cursor().as_deref(), Some("1"));
}

#[tokio::test]
async fn reconnect_request_ends_the_current_connection() {
    let server = RawServer::start(|_, mut socket| {
        Box::pin(async move {
            write_parts(&mut socket, &[SSE_HEAD, b"id: 3\nevent: a\ndata: 1\n\n"]).await;
            tokio::time::sleep(Duration::from_secs(30)).await;
        })
    })
    .await;
    let mut stream = open(&server, fast_config());
    loop {
        if let StreamItem::Event(_) = next(&mut stream).await {
            break;
        }
    }
    stream.reconnect();
    let (_, _, error, _) = events_until_disconnect(&mut stream).await;
    assert!(error.is_none(), "a requested reconnect is a clean end");
    loop {
        if let StreamItem::Event(_) = next(&mut stream).await {
            break;
        }
    }
    assert!(server.heads()[1].contains("last-event-id: 3\r\n"));
}

#[tokio::test]
async fn keepalive_comments_feed_the_watchdog_and_odd_events_keep_the_stream_open() {
    let server = RawServer::start(|n, mut socket| {
        Box::pin(async move {
            if n > 0 {
                return;
            }
            let _ = socket.write_all(SSE_HEAD).await;
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if socket.write_all(b": keepalive\n\n").await.is_err() {
                    return;
                }
            }
            let _ = socket
                .write_all(b"event: error\ndata: {\"message\":\"x\"}\n\nevent: brand.new\ndata: raw text\n\nid: 1\nevent: done\ndata: {}\n\n")
                .await;
        })
    })
    .await;
    let config = StreamConfig {
        idle_timeout: Duration::from_millis(120),
        ..fast_config()
    };
    let mut stream = open(&server, config);
    let (kinds, ids, error, _) = events_until_disconnect(&mut stream).await;
    assert!(
        error.is_none(),
        "240 ms of keepalives under a 120 ms watchdog: {error:?}"
    );
    assert!(matches!(kinds[0], EventKind::Error(_)));
    assert_eq!(
        kinds[1],
        EventKind::Unknown {
            name: "brand.new".into(),
            data: serde_json::Value::String("raw text".into())
        }
    );
    assert_eq!(ids.last(), Some(&Some("1".to_owned())));
}
