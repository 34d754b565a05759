//! Criterion benchmarks of canon-transport: SSE parse throughput (MB/s) over
//! a realistic `message.created` stream, raw frames and typed events.

use criterion::{BatchSize, Criterion, Throughput};

use canon_transport::events::Event;
use canon_transport::sse::SseParser;

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

fn main() {
    // Hand-written instead of `criterion_group!`, whose generated `pub fn` has no docs.
    let mut criterion = Criterion::default().configure_from_args();
    sse_parse(&mut criterion);
    criterion.final_summary();
}
