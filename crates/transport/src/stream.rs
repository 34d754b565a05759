//! The event-stream connection of canon-wire.md §5 (T17).
//!
//! [`EventStream::open`] starts one background task that connects to
//! `GET {streamUrl}/agents/stream`, parses frames with [`SseParser`], types
//! them with [`Event::from_frame`] and delivers them, interleaved with
//! [`ConnectionState`] changes, through a bounded channel (backpressure: a
//! slow consumer slows the reading of the socket, nothing is dropped).
//!
//! Reconnect rules (canon-wire.md §5.7 with the \[target\] hardening):
//!
//! * the cursor is the id of the last accepted frame that had one, updated
//!   **before** the event is delivered, and sent as `Last-Event-ID`;
//!   the first `agent.context` of a connection opened with a cursor never
//!   moves it (it is sent before the replay, so a break right after it would
//!   otherwise lose the events still to be replayed) and reaches the consumer
//!   without its id, so a consumer's own durable cursor cannot jump past the
//!   replay either;
//!   `replay.expired` sets it to `lastAvailableId` or clears it;
//! * connect timeout (30 s) covers connecting and the response head; the idle
//!   watchdog (90 s) drops a connection that delivers no bytes at all;
//! * backoff starts at 1 s, doubles to 30 s, is reset once a connection
//!   delivered its first frame, carries ±20 % jitter and is also applied after
//!   a clean end (no hot loop); 429/503 `Retry-After` raises the wait (≤ 300 s);
//! * three consecutive 401/403 answers end the stream with a fatal
//!   [`TransportError::AuthFailed`].
//!
//! Re-fetching `GET /conversations` after `replay.expired` is the consumer's
//! job (it owns the conversation cache); the event is delivered after the
//! cursor change. Time comes from tokio, randomness from
//! [`StreamConfig::random`], so both can be controlled in tests.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::Method;
use tokio::sync::{mpsc, Notify};

use crate::client::CanonClient;
use crate::error::{HttpFailure, TransportError};
use crate::http::{read_body, BodyCap};
use canon_wire::events::{Event, EventKind};
use canon_wire::retry::RetryClass;
use canon_wire::sse::{SseParser, MAX_FRAME_BYTES};

/// The `events` query of canon-wire.md §5.1 (exact).
pub const STREAM_EVENTS: &str = "messages,contacts,typing_presence,runtime_turn,voice";

/// A source of uniform random numbers in `[0, 1)`.
pub type RandomSource = Arc<dyn Fn() -> f64 + Send + Sync>;

/// Tunables of the stream (defaults from canon-wire.md §5.7 \[target\]).
#[derive(Clone)]
pub struct StreamConfig {
    /// Connect + response-head timeout (30 s).
    pub connect_timeout: Duration,
    /// Idle watchdog: no bytes for this long → reconnect (90 s).
    pub idle_timeout: Duration,
    /// First and minimum backoff (1 s).
    pub initial_backoff: Duration,
    /// Backoff cap (30 s).
    pub max_backoff: Duration,
    /// Relative jitter (0.2 = ±20 %).
    pub jitter: f64,
    /// Cap for a server's `Retry-After` (300 s).
    pub retry_after_cap: Duration,
    /// Consecutive 401/403 answers before the fatal `auth_failed` (3).
    pub auth_failures_before_fatal: u32,
    /// Frame bound of the parser (4 MiB).
    pub max_frame_bytes: usize,
    /// Cursor to start from (normally `None`: the cursor lives in memory).
    pub initial_cursor: Option<String>,
    /// Items buffered for the consumer.
    pub channel_capacity: usize,
    /// Randomness for the jitter.
    pub random: RandomSource,
}

impl std::fmt::Debug for StreamConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamConfig")
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("jitter", &self.jitter)
            .field("initial_cursor", &self.initial_cursor)
            .finish_non_exhaustive()
    }
}

fn default_random() -> f64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            connect_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(90),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            jitter: 0.2,
            retry_after_cap: Duration::from_secs(300),
            auth_failures_before_fatal: 3,
            max_frame_bytes: MAX_FRAME_BYTES,
            initial_cursor: None,
            channel_capacity: 64,
            random: Arc::new(default_random),
        }
    }
}

/// Connection-state changes delivered between events.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectionState {
    /// A connection attempt starts.
    Connecting {
        /// 1-based attempt counter over the stream's life.
        attempt: u32,
        /// The `Last-Event-ID` sent, if any.
        cursor: Option<String>,
    },
    /// The server accepted the stream (status < 400).
    Connected,
    /// The connection ended; the next attempt starts after `retry_in`.
    Disconnected {
        /// Why (`None` for a clean end by the server).
        error: Option<TransportError>,
        /// The wait before the next attempt.
        retry_in: Duration,
    },
    /// The stream stopped for good (credentials rejected); no more items follow.
    Failed(TransportError),
}

/// One item of the stream.
#[derive(Debug)]
pub enum StreamItem {
    /// An event (the cursor already reflects it).
    Event(Event),
    /// A connection-state change.
    State(ConnectionState),
}

/// The running event stream; dropping it stops the background task.
#[derive(Debug)]
pub struct EventStream {
    rx: mpsc::Receiver<StreamItem>,
    cursor: Arc<Mutex<Option<String>>>,
    reconnect: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EventStream {
    /// Starts the stream task on the current tokio runtime.
    pub fn open(client: &CanonClient, config: StreamConfig) -> EventStream {
        let (tx, rx) = mpsc::channel(config.channel_capacity.max(1));
        let cursor = Arc::new(Mutex::new(config.initial_cursor.clone()));
        let reconnect = Arc::new(Notify::new());
        let runner = Runner {
            client: client.clone(),
            config,
            cursor: cursor.clone(),
            reconnect: reconnect.clone(),
            tx,
        };
        let task = tokio::spawn(runner.run());
        EventStream {
            rx,
            cursor,
            reconnect,
            task,
        }
    }

    /// The next item; `None` once the stream has stopped.
    pub async fn next(&mut self) -> Option<StreamItem> {
        self.rx.recv().await
    }

    /// The current cursor (the id a reconnect would send).
    pub fn cursor(&self) -> Option<String> {
        self.cursor.lock().ok().and_then(|c| c.clone())
    }

    /// Ends the current connection (or the next one, if none is open) as if
    /// the server had closed it; the stream reconnects with the cursor after
    /// the usual backoff. For example after the conversation re-fetch that
    /// follows `replay.expired` failed (canon-wire.md §5.3).
    pub fn reconnect(&self) {
        self.reconnect.notify_one();
    }

    /// Stops the stream.
    pub fn close(self) {
        drop(self);
    }
}

impl futures_core::Stream for EventStream {
    type Item = StreamItem;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamItem>> {
        self.get_mut().rx.poll_recv(cx)
    }
}

/// How one connection ended.
enum Outcome {
    Clean {
        got_frame: bool,
    },
    Failed {
        error: TransportError,
        got_frame: bool,
    },
    ConsumerGone,
}

struct Runner {
    client: CanonClient,
    config: StreamConfig,
    cursor: Arc<Mutex<Option<String>>>,
    reconnect: Arc<Notify>,
    tx: mpsc::Sender<StreamItem>,
}

impl Runner {
    fn cursor(&self) -> Option<String> {
        self.cursor.lock().ok().and_then(|c| c.clone())
    }

    fn set_cursor(&self, value: Option<String>) {
        if let Ok(mut cursor) = self.cursor.lock() {
            *cursor = value;
        }
    }

    async fn emit(&self, item: StreamItem) -> bool {
        self.tx.send(item).await.is_ok()
    }

    fn jittered(&self, base: Duration) -> Duration {
        let r = (self.config.random)().clamp(0.0, 1.0);
        let factor = (1.0 + self.config.jitter * (2.0 * r - 1.0)).max(0.0);
        Duration::try_from_secs_f64(base.as_secs_f64() * factor).unwrap_or(self.config.max_backoff)
    }

    async fn run(self) {
        let mut backoff = self.config.initial_backoff;
        let mut auth_failures = 0u32;
        let mut attempt = 0u32;
        loop {
            attempt = attempt.saturating_add(1);
            let cursor = self.cursor();
            if !self
                .emit(StreamItem::State(ConnectionState::Connecting {
                    attempt,
                    cursor: cursor.clone(),
                }))
                .await
            {
                return;
            }
            let outcome = self.connection(cursor).await;
            let (error, got_frame) = match outcome {
                Outcome::ConsumerGone => return,
                Outcome::Clean { got_frame } => (None, got_frame),
                Outcome::Failed { error, got_frame } => (Some(error), got_frame),
            };
            if got_frame {
                backoff = self.config.initial_backoff;
            }
            let status = error.as_ref().and_then(TransportError::status);
            if matches!(status, Some(401 | 403)) {
                auth_failures += 1;
                if auth_failures >= self.config.auth_failures_before_fatal {
                    tracing::error!(status, "canon stream rejected the credentials; giving up");
                    let fatal = TransportError::AuthFailed {
                        status: status.unwrap_or(401),
                    };
                    let _ = self
                        .emit(StreamItem::State(ConnectionState::Failed(fatal)))
                        .await;
                    return;
                }
            } else {
                auth_failures = 0;
            }
            let mut wait = self.jittered(backoff);
            if let (Some(429 | 503), Some(after)) = (
                status,
                error
                    .as_ref()
                    .and_then(|e| e.http())
                    .and_then(|h| h.retry_after),
            ) {
                wait = wait.max(after.min(self.config.retry_after_cap));
            }
            if let Some(err) = &error {
                tracing::warn!(error = %err, retry_in_ms = wait.as_millis() as u64, "Canon stream disconnected");
            }
            if !self
                .emit(StreamItem::State(ConnectionState::Disconnected {
                    error,
                    retry_in: wait,
                }))
                .await
            {
                return;
            }
            tokio::time::sleep(wait).await;
            backoff = backoff
                .saturating_mul(2)
                .min(self.config.max_backoff)
                .max(self.config.initial_backoff);
        }
    }

    async fn connection(&self, cursor: Option<String>) -> Outcome {
        let url = format!(
            "{}/agents/stream?events={}",
            self.client.stream_base(),
            STREAM_EVENTS.replace(',', "%2C")
        );
        let mut headers = vec![("accept", "text/event-stream")];
        if let Some(cursor) = cursor.as_deref() {
            headers.push(("last-event-id", cursor));
        }
        let failed = |error| Outcome::Failed {
            error,
            got_frame: false,
        };
        let request = match self.client.build(Method::GET, &url, true, None, &headers) {
            Ok(request) => request,
            Err(error) => return failed(error),
        };
        let response = match self
            .client
            .engine()
            .send_head(request, self.config.connect_timeout)
            .await
        {
            Ok(response) => response,
            Err(error) => return failed(error),
        };
        let status = response.status().as_u16();
        if status >= 400 {
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = read_body(
                response.into_body(),
                self.config.connect_timeout,
                Some(tokio::time::Instant::now() + self.config.connect_timeout),
                BodyCap::Protocol(64 * 1024),
            )
            .await
            .unwrap_or_default();
            let failure = HttpFailure::from_response(status, retry_after.as_deref(), &body);
            return failed(TransportError::Http {
                failure,
                retry: RetryClass::Retryable,
            });
        }
        if !self
            .emit(StreamItem::State(ConnectionState::Connected))
            .await
        {
            return Outcome::ConsumerGone;
        }
        let mut body = response.into_body();
        let mut parser = SseParser::with_max_frame_bytes(self.config.max_frame_bytes);
        let mut frames = Vec::new();
        let mut got_frame = false;
        // Only the connection's first `agent.context` precedes the replay (see `deliver`); a
        // connection opened without a cursor replays nothing, so its context moves the cursor
        // like any event (else a first connection would have no cursor to resume from until
        // its first later event).
        let mut context_pending = self.cursor().is_some();
        loop {
            let read = tokio::time::timeout(self.config.idle_timeout, body.frame());
            let next = tokio::select! {
                result = read => result,
                () = self.reconnect.notified() => return Outcome::Clean { got_frame },
            };
            let next = match next {
                Err(_) => {
                    let error = TransportError::ReadTimeout {
                        retry: RetryClass::Retryable,
                    };
                    return Outcome::Failed { error, got_frame };
                }
                Ok(None) => return Outcome::Clean { got_frame },
                Ok(Some(Err(err))) => {
                    let error = TransportError::Reset {
                        retry: RetryClass::Retryable,
                        source: Box::new(err),
                    };
                    return Outcome::Failed { error, got_frame };
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = next.into_data() else { continue };
            if let Err(err) = parser.push(&data, &mut frames) {
                // Deliver what completed before the oversize frame.
                for frame in frames.drain(..) {
                    if !self
                        .deliver(Event::from_frame(frame), &mut context_pending)
                        .await
                    {
                        return Outcome::ConsumerGone;
                    }
                }
                return Outcome::Failed {
                    error: TransportError::protocol(err.to_string()),
                    got_frame,
                };
            }
            for frame in frames.drain(..) {
                got_frame = true;
                if !self
                    .deliver(Event::from_frame(frame), &mut context_pending)
                    .await
                {
                    return Outcome::ConsumerGone;
                }
            }
        }
    }

    /// Applies the cursor rules, then hands the event to the consumer. `context_pending`: the
    /// connection's first `agent.context` has not arrived yet.
    async fn deliver(&self, mut event: Event, context_pending: &mut bool) -> bool {
        // A connection's first `agent.context` arrives with a fresh id *before* the replay of
        // missed events; if it moved the cursor, a connection that broke right after it would
        // skip those events for good. It is idempotent state, so replaying it again costs
        // nothing. Every later one (earlier connections' contexts in the replay, or a live
        // change) comes in order and moves the cursor: if none did, each connection would
        // replay one more stored context than the last, and a server that ends connections
        // after a few frames would then never get past them (a reconnect storm that delivers
        // nothing new).
        let is_context = matches!(event.kind, EventKind::AgentContext { .. });
        let moves_cursor = !(is_context && *context_pending);
        if is_context {
            *context_pending = false;
        }
        if !moves_cursor {
            // The consumer gets it without its id too: a consumer keeping a durable cursor of
            // its own (the daemon's inbox settles each frame with an id in arrival order) would
            // otherwise move that cursor past the whole replay that follows, and a daemon
            // killed before the replayed messages settled would never see them again.
            event.id = None;
        }
        if let (Some(id), true) = (&event.id, moves_cursor) {
            if usable_cursor(id) {
                self.set_cursor(Some(id.clone()));
            } else {
                tracing::warn!(
                    bytes = id.len(),
                    "canon stream event id cannot be sent back as Last-Event-ID; cursor kept"
                );
            }
        }
        match &event.kind {
            EventKind::ReplayExpired { last_available_id } => {
                self.set_cursor(last_available_id.clone().filter(|id| usable_cursor(id)))
            }
            EventKind::Error(data) => {
                let mut shown = data.to_string();
                if shown.len() > MAX_LOGGED_ERROR {
                    let mut cut = MAX_LOGGED_ERROR;
                    while !shown.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    shown.truncate(cut);
                }
                tracing::warn!(data = %shown, "canon stream error event")
            }
            _ => tracing::trace!(id = ?event.id, "canon stream event"),
        }
        self.emit(StreamItem::Event(event)).await
    }
}

/// The cursor rule lives in canon-wire (the daemon's durable inbox applies it too).
pub use canon_wire::sse::{usable_cursor, MAX_CURSOR_BYTES};

/// How much of an SSE `error` event's data is logged.
const MAX_LOGGED_ERROR: usize = 512;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_random_is_in_unit_interval() {
        for _ in 0..1000 {
            let r = default_random();
            assert!((0.0..1.0).contains(&r), "{r}");
        }
    }

    #[test]
    fn defaults_follow_the_spec() {
        let config = StreamConfig::default();
        assert_eq!(config.connect_timeout, Duration::from_secs(30));
        assert_eq!(config.idle_timeout, Duration::from_secs(90));
        assert_eq!(config.initial_backoff, Duration::from_secs(1));
        assert_eq!(config.max_backoff, Duration::from_secs(30));
        assert_eq!(config.retry_after_cap, Duration::from_secs(300));
        assert_eq!(config.auth_failures_before_fatal, 3);
    }
}
