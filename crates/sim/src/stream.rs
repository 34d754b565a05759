//! `GET /agents/stream`: the SSE stream of canon-wire.md §11.4 — `connected`, `agent.context`,
//! replay after `Last-Event-ID` or `replay.expired`, live events, heartbeats, stream control
//! commands and the SSE faults of canon-wire.md §11.6.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::body::{Aborted, SimBody};
use crate::faults::{LineEnding, SseFault};
use crate::shared::Shared;
use crate::state::{LoggedEvent, OpenStream, StreamCmd};

/// Formats one SSE frame with the chosen line endings.
pub fn format_frame(id: Option<&str>, event: &str, data: &Value, ending: LineEnding) -> String {
    let eol = match ending {
        LineEnding::Lf => "\n",
        LineEnding::Crlf => "\r\n",
        LineEnding::Cr => "\r",
    };
    let mut out = String::new();
    if let Some(id) = id {
        out.push_str(&format!("id: {id}{eol}"));
    }
    out.push_str(&format!("event: {event}{eol}data: {data}{eol}{eol}"));
    out
}

struct Writer {
    tx: mpsc::Sender<Result<Bytes, Aborted>>,
    fault: SseFault,
    frames: u64,
    held: Option<LoggedEvent>,
}

impl Writer {
    /// Writes raw text, split as the fault asks. False when the client is gone.
    async fn raw(&mut self, text: &str) -> bool {
        let bytes = text.as_bytes();
        match self.fault.split_every.filter(|n| *n > 0) {
            Some(n) => {
                for piece in bytes.chunks(n) {
                    if self
                        .tx
                        .send(Ok(Bytes::copy_from_slice(piece)))
                        .await
                        .is_err()
                    {
                        return false;
                    }
                    // Give hyper a chance to flush each piece as its own write.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                true
            }
            None => self
                .tx
                .send(Ok(Bytes::copy_from_slice(bytes)))
                .await
                .is_ok(),
        }
    }

    /// Writes one frame (twice when duplicating). False when the stream must end.
    async fn frame(&mut self, id: Option<&str>, event: &str, data: &Value) -> bool {
        let text = format_frame(id, event, data, self.fault.line_ending);
        let copies = if self.fault.duplicate && id.is_some() {
            2
        } else {
            1
        };
        for _ in 0..copies {
            if !self.raw(&text).await {
                return false;
            }
            self.frames += 1;
            if self
                .fault
                .close_after_frames
                .is_some_and(|n| self.frames >= n)
            {
                return false;
            }
        }
        true
    }

    async fn event(&mut self, e: &LoggedEvent) -> bool {
        if self.fault.reorder && e.id.is_some() {
            match self.held.take() {
                None => {
                    self.held = Some(e.clone());
                    return true;
                }
                Some(first) => {
                    return self.frame(e.id.as_deref(), &e.name, &e.data).await
                        && self
                            .frame(first.id.as_deref(), &first.name, &first.data)
                            .await;
                }
            }
        }
        self.frame(e.id.as_deref(), &e.name, &e.data).await
    }
}

/// Opens a stream for `agent` on connection `conn_id`.
pub fn open(
    shared: Arc<Shared>,
    conn_id: u64,
    agent: String,
    last_event_id: Option<String>,
    fault: Option<SseFault>,
) -> Response<SimBody> {
    let (tx, body) = SimBody::channel();
    let (cmd_tx, mut cmd_rx) = mpsc::channel::<StreamCmd>(8);
    let fault = fault.unwrap_or_default();
    let mut version = shared.subscribe();
    // Everything the stream starts with is computed in one critical section, so no event is
    // lost or duplicated between the replay and the live phase.
    let (connected, context_seq, replay, expired, heartbeat_ms, heartbeat_as_event) =
        shared.with(|s| {
            s.open_streams.insert(
                conn_id,
                OpenStream {
                    agent: agent.clone(),
                    commands: cmd_tx,
                },
            );
            let connection_id = s.ids.seq("conn");
            let connected = json!({
                "protocol": "canon.sim.v1",
                "connectionId": connection_id,
                "agentId": agent,
                "principalId": agent,
                "principalType": "ai_agent",
            });
            let log = s.events.entry(agent.clone()).or_default().clone();
            let mut expired = None;
            let replay: Vec<LoggedEvent> = match &last_event_id {
                Some(id) => match log.seq_of(id) {
                    Some(seq) => log
                        .events
                        .iter()
                        .filter(|e| e.seq > seq && e.id.is_some())
                        .cloned()
                        .collect(),
                    None => {
                        expired = Some(log.newest_id());
                        Vec::new()
                    }
                },
                None if s.config.switches.backfill_unread_on_connect => log
                    .events
                    .iter()
                    .filter(|e| e.id.is_some() && e.name == "message.created")
                    // Back-fill (canon-wire.md §13 Q16) only what
                    // is newer than the agent's read marker.
                    .filter(|e| {
                        let read = e
                            .data
                            .get("conversationId")
                            .and_then(serde_json::Value::as_str)
                            .and_then(|c| s.conversations.get(c))
                            .and_then(|c| c.last_read.get(&agent).copied());
                        read.is_none_or(|r| e.at_ms > r)
                    })
                    .cloned()
                    .collect(),
                None => Vec::new(),
            };
            let principal = s.principals.get(&agent);
            let mut context = json!({
                "agentId": agent,
                "ownerId": principal.and_then(|p| p.owner_id.clone()),
            });
            if !s.config.switches.agent_context_omit_policy {
                context["outboundPolicy"] = json!(principal.map(|p| p.outbound_policy.clone()));
            }
            let context_seq = s.emit(&agent, "agent.context", context, true);
            (
                connected,
                context_seq,
                replay,
                expired,
                s.config.switches.heartbeat_ms,
                s.config.switches.heartbeat_as_event,
            )
        });
    let task_shared = Arc::clone(&shared);
    tokio::spawn(async move {
        let mut w = Writer {
            tx,
            fault,
            frames: 0,
            held: None,
        };
        let run = async {
            if w.fault.close_immediately {
                return;
            }
            if let Some(prelude) = w.fault.raw_prelude.clone() {
                if !w.raw(&prelude).await {
                    return;
                }
            }
            if let Some(n) = w.fault.oversize_bytes {
                let big = json!({"padding": "x".repeat(n)});
                if !w.frame(None, "oversize", &big).await {
                    return;
                }
            }
            if !w.frame(None, "connected", &connected).await {
                return;
            }
            let mut pos = context_seq - 1;
            let first = task_shared.read(|s| {
                s.events.get(&agent).map(|l| {
                    l.events
                        .iter()
                        .filter(|e| e.seq >= context_seq)
                        .cloned()
                        .collect::<Vec<_>>()
                })
            });
            // agent.context first, then the replay, then whatever arrived meanwhile.
            let mut initial: Vec<LoggedEvent> = first.unwrap_or_default();
            let context = initial
                .iter()
                .position(|e| e.seq == context_seq)
                .map(|i| initial.remove(i));
            if let Some(c) = context {
                if !w.event(&c).await {
                    return;
                }
                pos = c.seq;
            }
            if let Some(newest) = expired {
                let mut data = json!({});
                if let Some(id) = newest {
                    data["lastAvailableId"] = json!(id);
                }
                if !w.frame(None, "replay.expired", &data).await {
                    return;
                }
            }
            for e in &replay {
                if !w.event(e).await {
                    return;
                }
            }
            if let Some(ms) = w.fault.stall_ms {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let mut heartbeat = (heartbeat_ms > 0).then(|| {
                let mut i = tokio::time::interval(Duration::from_millis(heartbeat_ms));
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                i
            });
            if let Some(h) = heartbeat.as_mut() {
                h.tick().await;
            }
            loop {
                let pending: Vec<LoggedEvent> = task_shared.read(|s| {
                    s.events
                        .get(&agent)
                        .map(|l| l.events.iter().filter(|e| e.seq > pos).cloned().collect())
                        .unwrap_or_default()
                });
                for e in &pending {
                    pos = pos.max(e.seq);
                    if !w.event(e).await {
                        return;
                    }
                }
                tokio::select! {
                    changed = version.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    cmd = cmd_rx.recv() => match cmd {
                        Some(StreamCmd::Close) | None => return,
                        Some(StreamCmd::Reset) => {
                            let _ = w.tx.send(Err(Aborted)).await;
                            return;
                        }
                        Some(StreamCmd::Stall(ms)) => tokio::time::sleep(Duration::from_millis(ms)).await,
                    },
                    _ = async {
                        match heartbeat.as_mut() {
                            Some(h) => { h.tick().await; }
                            None => std::future::pending::<()>().await,
                        }
                    } => {
                        let ok = if heartbeat_as_event {
                            let ts = task_shared.read(|s| s.now());
                            w.frame(None, "heartbeat", &json!({"timestamp": ts})).await
                        } else {
                            w.raw(": keepalive\n\n").await
                        };
                        if !ok {
                            return;
                        }
                    }
                    _ = w.tx.closed() => return,
                }
            }
        };
        run.await;
        task_shared.with(|s| {
            s.open_streams.remove(&conn_id);
        });
    });
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap_or_else(|_| Response::new(SimBody::full("")))
}
