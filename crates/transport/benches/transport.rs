//! Criterion benchmarks of canon-transport: SSE parse throughput (MB/s) over
//! a realistic `message.created` stream, raw frames and typed events; event
//! latency from the simulator to the consumer on loopback (p50/p99 printed
//! from every sample); durable sends per second against the simulator.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput};

use canon_sim::{Sim, SimConfig, SimHandle};
use canon_transport::client::{CanonClient, ClientConfig, DurableRequest};
use canon_transport::stream::{ConnectionState, EventStream, StreamConfig, StreamItem};
use canon_wire::events::{Event, EventKind};
use canon_wire::sse::SseParser;
use canon_wire::types::SendMessage;
use canon_wire::ApiKey;

/// About 1 MiB of `message.created` frames with ids, comments and CRLF.
fn corpus() -> Vec<u8> {
    let mut out = Vec::new();
    let mut n = 0u64;
    while out.len() < 1024 * 1024 {
        n += 1;
        let frame = format!(
            "id: {n}\r\nevent: message.created\r\ndata: {{\"conversationId\":\"conv-{c}\",\"message\":{{\"id\":\"msg-{n}\",\
             \"senderId\":\"user-1\",\"senderType\":\"human\",\"contentType\":\"text\",\"text\":\"Hello there, could you \
             summarise the last report? Grüße 👋 {n}\",\"attachments\":[],\"mentions\":[],\"createdAt\":\"2026-01-01T00:00:00Z\",\
             \"metadata\":{{\"deliveryIntent\":\"queue\"}}}},\"turnDispatch\":{{\"kind\":\"run_turn\"}},\"provenance\":\
             {{\"conversation\":{{\"type\":\"direct\"}}}}}}\r\n\r\n: keepalive\r\n\r\n",
            c = n % 7
        );
        out.extend_from_slice(frame.as_bytes());
    }
    out
}

fn sse_parse(c: &mut Criterion) {
    let bytes = corpus();
    let mut group = c.benchmark_group("sse_parse");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    for chunk in [1460usize, 16 * 1024] {
        group.bench_function(format!("frames_chunk_{chunk}"), |b| {
            b.iter_batched(
                SseParser::new,
                |mut parser| {
                    let mut out = Vec::new();
                    for piece in bytes.chunks(chunk) {
                        parser.push(piece, &mut out).expect("valid corpus");
                    }
                    out.len()
                },
                BatchSize::SmallInput,
            )
        });
    }
    // Framing alone: the same bytes with the JSON made unparseable, so the
    // data stays text and serde_json fails on the first byte.
    let text_only: Vec<u8> = String::from_utf8_lossy(&bytes)
        .replace("data: {", "data: <")
        .into_bytes();
    group.bench_function("framing_only_chunk_16384", |b| {
        b.iter_batched(
            SseParser::new,
            |mut parser| {
                let mut out = Vec::new();
                for piece in text_only.chunks(16 * 1024) {
                    parser.push(piece, &mut out).expect("valid corpus");
                }
                out.len()
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("typed_events_chunk_16384", |b| {
        b.iter_batched(
            SseParser::new,
            |mut parser| {
                let mut out = Vec::new();
                for piece in bytes.chunks(16 * 1024) {
                    parser.push(piece, &mut out).expect("valid corpus");
                }
                out.into_iter().map(Event::from_frame).count()
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// A runtime with a simulator (rate limits off) and a client for its default agent.
fn sim_and_client() -> (tokio::runtime::Runtime, SimHandle, CanonClient) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let sim = runtime.block_on(async {
        let mut config = SimConfig::for_tests();
        config.switches.rate_limits = false;
        Sim::start(config).await.expect("sim starts")
    });
    let client = CanonClient::new(ClientConfig::new(
        sim.base_url(),
        sim.stream_url(),
        ApiKey::new(sim.api_key()),
    ))
    .expect("sim urls");
    (runtime, sim, client)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

// The percentiles are this benchmark's report; criterion has no p99.
#[allow(clippy::print_stderr)]
fn report_latency(samples: &mut [Duration]) {
    if samples.is_empty() {
        return;
    }
    samples.sort();
    eprintln!(
        "sim_to_consumer latency over {} events: p50 {:?}, p99 {:?}, max {:?}",
        samples.len(),
        percentile(samples, 0.50),
        percentile(samples, 0.99),
        samples[samples.len() - 1],
    );
}

/// Time from `push_event` on the simulator to the typed event in the consumer's hands.
fn event_latency(c: &mut Criterion) {
    let (runtime, sim, client) = sim_and_client();
    let mut stream = runtime.block_on(async {
        let mut stream = EventStream::open(&client, StreamConfig::default());
        loop {
            match stream.next().await {
                Some(StreamItem::State(ConnectionState::Connected)) => break stream,
                Some(_) => {}
                None => panic!("stream ended before connecting"),
            }
        }
    });
    let samples: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let mut n = 0u64;
    let mut group = c.benchmark_group("stream");
    group.throughput(Throughput::Elements(1));
    group.bench_function("event_latency_sim_to_consumer", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    let started = Instant::now();
                    sim.push_event(
                        canon_sim::DEFAULT_AGENT,
                        "probe",
                        serde_json::json!({ "n": n }),
                        true,
                    );
                    loop {
                        match stream.next().await {
                            Some(StreamItem::Event(Event {
                                kind: EventKind::Unknown { data, .. },
                                ..
                            })) if data["n"] == n => break,
                            Some(_) => {}
                            None => panic!("stream ended"),
                        }
                    }
                    let took = started.elapsed();
                    total += took;
                    if let Ok(mut all) = samples.lock() {
                        all.push(took);
                    }
                }
                total
            })
        })
    });
    group.finish();
    let mut all = samples.lock().map(|s| s.clone()).unwrap_or_default();
    report_latency(&mut all);
}

/// Durable `POST /messages/send` round trips per second (one at a time).
fn sends_per_second(c: &mut Criterion) {
    let (runtime, _sim, client) = sim_and_client();
    let mut n = 0u64;
    let mut group = c.benchmark_group("rest");
    group.throughput(Throughput::Elements(1));
    group.bench_function("durable_send_against_sim", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let started = Instant::now();
                for _ in 0..iters {
                    n += 1;
                    let request = DurableRequest::message(&SendMessage {
                        conversation_id: canon_sim::DEFAULT_CONVERSATION.into(),
                        text: format!("bench message {n}"),
                        message_id: Some(format!("hermes-final-bench-{n}")),
                        ..SendMessage::default()
                    })
                    .expect("serializable");
                    client.send_message(&request).await.expect("send");
                }
                started.elapsed()
            })
        })
    });
    group.finish();
}

fn main() {
    // Hand-written instead of `criterion_group!`, whose generated `pub fn` has no docs.
    let mut criterion = Criterion::default().configure_from_args();
    sse_parse(&mut criterion);
    event_latency(&mut criterion);
    sends_per_second(&mut criterion);
    criterion.final_summary();
}
