//! Criterion benchmarks for canon-dispatch: wake-gate decisions per second
//! over the mix of cases in `fixtures/dispatch/gate-cases.jsonl`, the
//! authoritative-verdict path, and the full turns.md §9.1 pipeline.

// `criterion_group!` generates a public function that cannot carry a doc.
#![allow(missing_docs)]

use std::hint::black_box;
use std::path::PathBuf;

use canon_dispatch::gate::decide_wake;
use canon_dispatch::pipeline::{Context, Dispatcher};
use canon_dispatch::protocol::should_trigger_agent_turn;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};

fn fixture_cases() -> Vec<(Option<String>, Option<Value>)> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/dispatch/gate-cases.jsonl");
    let text = std::fs::read_to_string(&path).expect("gate fixture is readable");
    text.lines()
        .map(|line| {
            let case: Value = serde_json::from_str(line).expect("fixture line is JSON");
            let sender = case
                .get("sender_type")
                .and_then(Value::as_str)
                .map(str::to_owned);
            (sender, case.get("metadata").cloned())
        })
        .collect()
}

fn gate(c: &mut Criterion) {
    let cases = fixture_cases();
    let mut group = c.benchmark_group("gate");
    group.throughput(Throughput::Elements(cases.len() as u64));
    group.bench_function("should_trigger_agent_turn/fixture_mix", |b| {
        b.iter(|| {
            let mut allowed = 0usize;
            for (sender, metadata) in &cases {
                let d = should_trigger_agent_turn(
                    black_box(sender.as_deref()),
                    black_box(metadata.as_ref()),
                );
                allowed += usize::from(d.allow);
            }
            allowed
        })
    });
    let payloads: Vec<(Value, Value)> = cases
        .iter()
        .enumerate()
        .map(|(i, (sender, metadata))| {
            let mut message = json!({"id": format!("m{i}"), "text": "x"});
            if let Some(s) = sender {
                message["senderType"] = json!(s);
            }
            if let Some(m) = metadata {
                message["metadata"] = m.clone();
            }
            // Every fourth payload carries a verdict, as a current stream
            // service would.
            let payload = if i % 4 == 0 {
                json!({"conversationId": "c1", "turnDispatch": {"kind": "run_turn"}})
            } else {
                json!({"conversationId": "c1"})
            };
            (payload, message)
        })
        .collect();
    group.bench_function("decide_wake/fixture_mix", |b| {
        b.iter(|| {
            let mut woke = 0usize;
            for (payload, message) in &payloads {
                woke += usize::from(decide_wake(black_box(payload), black_box(message)).wake);
            }
            woke
        })
    });
    group.finish();

    let mut pipeline = c.benchmark_group("pipeline");
    let full: Vec<Value> = payloads
        .iter()
        .map(|(payload, message)| {
            let mut p = payload.clone();
            p["message"] = message.clone();
            p
        })
        .collect();
    pipeline.throughput(Throughput::Elements(full.len() as u64));
    pipeline.bench_function("handle_message_created/fixture_mix", |b| {
        b.iter(|| {
            // A fresh dispatcher per batch so de-duplication does not
            // short-circuit the later iterations.
            let mut d = Dispatcher::default();
            let ctx = Context {
                agent_id: Some("agent-1"),
                agent_name: Some("Hermes"),
                cached_conversation: None,
            };
            let mut woke = 0usize;
            for p in &full {
                woke += usize::from(matches!(
                    d.handle_message_created(black_box(p), ctx),
                    canon_dispatch::pipeline::Outcome::Wake(_)
                ));
            }
            woke
        })
    });
    pipeline.finish();
}

criterion_group!(benches, gate);
criterion_main!(benches);
