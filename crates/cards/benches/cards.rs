//! Criterion benchmark `cards`: validation throughput on a typical 4-block card, a maximal card
//! at every entry limit, and a card of exactly 32 KiB (`benches/data/`, shared with the reference
//! measurement described in `benches/data/README.md`).

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use serde_json::Value;

fn load(name: &str) -> (String, Value) {
    let path = format!("{}/benches/data/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"));
    (text, value)
}

fn cards(c: &mut Criterion) {
    let mut group = c.benchmark_group("validate_card");
    for name in ["typical", "maximal", "size32k"] {
        let (text, card) = load(name);
        assert!(
            canon_cards::validate_card(&card).ok,
            "{name} must be a valid card"
        );
        group.throughput(Throughput::Elements(1));
        group.bench_function(name, |b| {
            b.iter(|| canon_cards::validate_card(black_box(&card)))
        });
        group.bench_function(format!("{name}/from_text"), |b| {
            b.iter(|| canon_cards::validate_card_text(black_box(&text)))
        });
    }
    group.finish();
}

criterion_group!(benches, cards);
criterion_main!(benches);
