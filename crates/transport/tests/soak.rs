//! The bounded soak test: while messages flow each way, the simulator closes
//! the event stream after every [`CLOSE_EVERY_FRAMES`] frames, the test
//! drops it (a clean close, then a reset, and so on) every
//! [`DROP_EVERY_INBOUND`] injected messages, and the sim fails a share of
//! sends ambiguously (processed, then the connection dropped or a 500
//! answered) or before processing (503). Every inbound message must reach
//! the consumer exactly once after dedup by message id, and every outbound
//! send must land exactly once in the sim state.
//!
//! CI runs [`DEFAULT_MESSAGES`] (1,000) each way in a few seconds. A longer
//! run: `CANON_SOAK_MESSAGES=20000 cargo test -p canon-transport --test tests
//! soak -- --nocapture` (the figures are printed to stderr).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use canon_sim::control::Injection;
use canon_sim::faults::{FaultAction, FaultRule, SseFault};
use canon_sim::state::StreamCmd;
use canon_transport::client::DurableRequest;
use canon_transport::stream::{ConnectionState, EventStream, StreamItem};
use canon_wire::events::EventKind;
use canon_wire::types::SendMessage;
use serde_json::json;

use crate::sim_support::{client, fast_stream, rule, sim_with, WAIT};

/// Messages each way in CI.
const DEFAULT_MESSAGES: usize = 1_000;
/// The sim closes every stream connection after this many frames.
const CLOSE_EVERY_FRAMES: u64 = 40;
/// The stream is also dropped (closed or reset, alternately) after every
/// this many inbound messages.
const DROP_EVERY_INBOUND: usize = 25;
/// Concurrent outbound senders.
const SENDERS: usize = 4;
/// Replays of one send by the caller before the test gives up.
const MAX_REPLAYS: usize = 20;

fn messages() -> usize {
    std::env::var("CANON_SOAK_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_MESSAGES)
}

fn send_rule(probability: f64, action: serde_json::Value) -> FaultRule {
    rule(
        json!({"matcher": {"method": "POST", "path": "/messages/send", "probability": probability},
                "action": action}),
    )
}

/// What one sender saw: (client id, returned message id) pairs and how many
/// times the caller had to replay a send the durable loop gave up on.
type SenderReport = (Vec<(String, String)>, usize);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_every_message_exactly_once_through_drops_and_ambiguous_failures() {
    let total = messages();
    let sim = Arc::new(
        sim_with(|c| {
            c.switches.rate_limits = false;
            // The replay buffer must outlive a reconnect gap; it is not under test.
            c.switches.replay_buffer_events = 4 * total + 1_000;
        })
        .await,
    );
    // Every stream connection is closed by the sim after this many frames.
    sim.add_fault(FaultRule {
        id: String::new(),
        matcher: serde_json::from_value(json!({"method": "GET", "path": "/agents/stream"}))
            .expect("matcher"),
        action: FaultAction::Sse(SseFault {
            close_after_frames: Some(CLOSE_EVERY_FRAMES),
            ..SseFault::default()
        }),
        seen: 0,
        fired: 0,
    });
    sim.add_fault(send_rule(0.08, json!({"type": "process_then_drop"})));
    sim.add_fault(send_rule(
        0.08,
        json!({"type": "process_then_status", "status": 500}),
    ));
    sim.add_fault(send_rule(0.04, json!({"type": "status", "status": 503})));
    let client = client(&sim);
    let started = Instant::now();
    let mut stream = EventStream::open(&client, fast_stream());
    // Messages written before the first connection are not back-filled
    // (canon-wire.md §5.7, no cursor yet), so inbound starts once it is open.
    sim.wait_for("the first stream connection", WAIT, |s| {
        !s.open_streams.is_empty()
    })
    .await
    .expect("stream connects");

    // Outbound: durable sends with operation-bound ids; a send the loop gave
    // up on is replayed by the caller with the same request (its bytes).
    let mut senders = Vec::new();
    for shard in 0..SENDERS {
        let client = client.clone();
        senders.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            let mut replays = 0;
            for i in (shard..total).step_by(SENDERS) {
                let id = format!("soak-out-{i:06}");
                let request = DurableRequest::message(&SendMessage {
                    conversation_id: "c-direct".into(),
                    text: format!("outbound {i}"),
                    message_id: Some(id.clone()),
                    ..SendMessage::default()
                })
                .expect("serializable");
                let mut attempt = 0;
                let message_id = loop {
                    match client.send_message(&request).await {
                        Ok(reply) => break reply.message_id.expect("a message id"),
                        Err(err) if attempt < MAX_REPLAYS && err.may_have_landed(1) => {
                            attempt += 1;
                            replays += 1;
                        }
                        Err(err) if attempt < MAX_REPLAYS && err.is_retryable() => {
                            attempt += 1;
                            replays += 1;
                        }
                        Err(err) => panic!("send {id} failed for good: {err:?}"),
                    }
                };
                sent.push((id, message_id));
            }
            (sent, replays)
        }));
    }

    // Inbound: the owner writes; every so often the stream is reset.
    let injector = {
        let sim = sim.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut drops = 0;
            for i in 0..total {
                let message = sim
                    .inject_message(&Injection {
                        text: Some(format!("inbound {i}")),
                        ..Injection::default()
                    })
                    .expect("injected");
                ids.push(message["id"].as_str().expect("id").to_owned());
                if (i + 1) % DROP_EVERY_INBOUND == 0 {
                    // Alternate a clean close and a reset of the connection.
                    let cmd = if (i + 1) % (2 * DROP_EVERY_INBOUND) == 0 {
                        StreamCmd::Reset
                    } else {
                        StreamCmd::Close
                    };
                    drops += sim.stream_control("a-hermes", cmd);
                }
                // Let the stream and the senders interleave with the injector.
                tokio::task::yield_now().await;
            }
            (ids, drops)
        })
    };

    // The consumer: dedup by message id, as the adapter does.
    let bound = Duration::from_secs(60) + Duration::from_millis(30 * total as u64);
    let mut delivered: HashMap<String, usize> = HashMap::new();
    let mut raw_inbound = 0usize;
    let mut disconnects = 0usize;
    let consume = async {
        while delivered.len() < total {
            match stream.next().await.expect("stream running") {
                StreamItem::Event(event) => {
                    if let EventKind::MessageCreated(created) = &event.kind {
                        if created.sender_id() == Some("h-owner") {
                            raw_inbound += 1;
                            let id = created.message_id().expect("id").to_owned();
                            *delivered.entry(id).or_default() += 1;
                        }
                    }
                }
                StreamItem::State(ConnectionState::Disconnected { .. }) => disconnects += 1,
                StreamItem::State(ConnectionState::Failed(err)) => panic!("fatal {err:?}"),
                StreamItem::State(_) => {}
            }
        }
    };
    let finished = tokio::time::timeout(bound, consume).await.is_ok();
    assert!(
        finished,
        "every inbound message within {bound:?}: {} of {total} delivered, {disconnects} disconnects",
        delivered.len()
    );
    let (injected, drops) = injector.await.expect("injector");
    let mut sent: Vec<(String, String)> = Vec::new();
    let mut replays = 0;
    for sender in senders {
        let (s, r): SenderReport = tokio::time::timeout(bound, sender)
            .await
            .expect("senders finish within the bound")
            .expect("sender");
        sent.extend(s);
        replays += r;
    }
    let elapsed = started.elapsed();

    // Inbound: exactly once after dedup, none lost, none foreign.
    let injected_set: HashSet<&String> = injected.iter().collect();
    let lost_in = injected
        .iter()
        .filter(|id| !delivered.contains_key(*id))
        .count();
    let foreign = delivered
        .keys()
        .filter(|id| !injected_set.contains(id))
        .count();
    let redelivered = raw_inbound - delivered.len();
    // Outbound: every client id stored exactly once, as the id returned.
    let stored: HashMap<String, Vec<String>> = sim.read_state(|s| {
        let mut map: HashMap<String, Vec<String>> = HashMap::new();
        for m in &s.messages {
            if let Some(cid) = m
                .client_id
                .as_deref()
                .filter(|c| c.starts_with("soak-out-"))
            {
                map.entry(cid.to_owned())
                    .or_default()
                    .push(m.message["id"].as_str().unwrap_or("").to_owned());
            }
        }
        map
    });
    let lost_out = sent
        .iter()
        .filter(|(cid, _)| !stored.contains_key(cid))
        .count();
    let duplicated_out: usize = stored.values().map(|v| v.len().saturating_sub(1)).sum();
    let mismatched = sent
        .iter()
        .filter(|(cid, mid)| stored.get(cid).is_some_and(|v| v.first() != Some(mid)))
        .count();
    // Rule 0 is the stream close, the others are the send faults.
    let fired: Vec<u64> = sim.read_state(|s| s.faults.list().iter().map(|r| r.fired).collect());
    let stream_closes = fired[0];
    let send_faults: u64 = fired[1..].iter().sum();
    report(&Figures {
        total,
        elapsed,
        stream_closes,
        drops,
        disconnects,
        send_faults,
        replays,
        lost: lost_in + lost_out,
        duplicated: duplicated_out,
        redelivered,
    });

    assert_eq!(injected.len(), total);
    assert_eq!(lost_in, 0, "inbound lost");
    assert_eq!(foreign, 0);
    assert!(delivered.values().all(|n| *n >= 1));
    assert_eq!(sent.len(), total);
    assert_eq!(lost_out, 0, "outbound lost");
    assert_eq!(duplicated_out, 0, "outbound duplicated");
    assert_eq!(mismatched, 0, "a replay returned another message");
    assert_eq!(stored.len(), total);
    // The faults really happened.
    assert!(stream_closes > 0 && drops > 0 && send_faults > 0);
    assert!(disconnects > 0);
}

struct Figures {
    total: usize,
    elapsed: Duration,
    stream_closes: u64,
    drops: usize,
    disconnects: usize,
    send_faults: u64,
    replays: usize,
    lost: usize,
    duplicated: usize,
    redelivered: usize,
}

// The soak figures are the test's report (visible with `--nocapture`).
#[allow(clippy::print_stderr)]
fn report(f: &Figures) {
    eprintln!(
        "soak: {} messages each way in {:.2?}; faults injected: {} stream closes after {} frames + \
         {} commanded stream drops (close/reset) ({} disconnects seen), {} failed send attempts (process-then-drop, process-then-500, 503), \
         {} caller replays; lost = {}, duplicated = {} (stream redeliveries before dedup: {})",
        f.total,
        f.elapsed,
        f.stream_closes,
        CLOSE_EVERY_FRAMES,
        f.drops,
        f.disconnects,
        f.send_faults,
        f.replays,
        f.lost,
        f.duplicated,
        f.redelivered,
    );
}
