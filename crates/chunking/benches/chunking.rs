//! Splitting throughput for a 1 MiB answer (ASCII, Hebrew, emoji-heavy) in
//! both boundary modes, plus planning the whole answer. Run with
//! `cargo bench -p canon-chunking`.

use std::hint::black_box;

use canon_chunking::limits::CHUNKED_TEXT_MAX_BYTES;
use canon_chunking::plan::{plan_answer, AnswerSpec};
use canon_chunking::split::{split_text, Boundary};
use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};

const MIB: usize = 1 << 20;

/// Repeats `unit` until the text is at least 1 MiB.
fn mebibyte_of(unit: &str) -> String {
    unit.repeat(MIB.div_ceil(unit.len()))
}

fn corpora() -> Vec<(&'static str, String)> {
    vec![
        (
            "ascii",
            mebibyte_of(
                "The quick brown fox jumps over the lazy dog; splitting prose at word boundaries.\n",
            ),
        ),
        ("hebrew", mebibyte_of("שָׁלוֹם עוֹלָם, זוהי תשובה ארוכה בעברית עם ניקוד.\n\n")),
        // No separators at all: every cut is a hard cut inside a run of
        // ZWJ sequences, flags and skin tones, the worst case for Grapheme.
        ("emoji", mebibyte_of("👨\u{200d}👩\u{200d}👧\u{200d}👦🇮🇱👋🏽😀")),
    ]
}

fn split_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("split_1mib");
    for (name, text) in corpora() {
        group.throughput(Throughput::Bytes(text.len() as u64));
        for (mode, boundary) in [
            ("grapheme", Boundary::Grapheme),
            ("codepoint", Boundary::CodePoint),
        ] {
            group.bench_with_input(BenchmarkId::new(mode, name), &text, |b, text| {
                b.iter(|| {
                    split_text(black_box(text), CHUNKED_TEXT_MAX_BYTES, boundary)
                        .map(|parts| parts.len())
                })
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("plan_1mib");
    for (name, text) in corpora() {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_with_input(BenchmarkId::new("grapheme", name), &text, |b, text| {
            b.iter(|| {
                let mut spec = AnswerSpec::new(black_box(text));
                spec.base_id = Some("hermes-final-df21a8694795b86bba2a5e77c3660bfd");
                spec.turn_id = Some("hermes-0123456789abcdef0123");
                plan_answer(spec).map(|plan| plan.parts().len())
            })
        });
    }
    group.finish();
}

/// Runs every group of this file; written out instead of
/// `criterion_group!` so the generated function carries a doc comment.
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    split_benches(&mut criterion);
}

criterion_main!(benches);
