//! Criterion benchmark `card_corpus`: one validation pass over the whole generated corpus of
//! 5,000 pre-parsed cards (`benches/corpus/`), and over its large cards (5 KB and up).
//!
//! Each pass validates every card exactly once, in corpus order, the way a server meets them:
//! no card is validated twice in a row, so caches and branch predictors are never trained on
//! one card. Before criterion's own figures the bench prints its own measurement of a pass
//! (median and best of many passes) as cards/s and MB/s; `scripts/bench-cards-reference.sh`
//! reads those lines and compares them with cards.py 0.14.1 on the same cards.
//!
//! Two ways of meeting the cards are measured:
//! * `all` and `large`: one bulk pass over cards parsed up front. The parsed corpus is about
//!   100 MB of `serde_json::Value`s, three times the last-level cache, so this pass mostly
//!   measures reading parsed trees back from memory.
//! * `server_all` and `server_large`: each card is parsed from its text and validated at once,
//!   as a server does with a request body, and only the validation is timed (a clock read
//!   before and after each card, whose cost is counted against us). The card is in cache, the
//!   validator has never seen it.

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

mod corpus;

use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use serde_json::Value;

/// Validates every card once; returns the number of valid cards so the work cannot be elided.
fn pass(cards: &[&Value]) -> usize {
    cards
        .iter()
        .filter(|card| canon_cards::validate_card(black_box(card)).ok)
        .count()
}

/// Median and best of the durations `timed_pass` reports, after 3 warm-up passes, over at
/// least 30 passes and 2 seconds.
fn measure_passes(mut timed_pass: impl FnMut() -> Duration) -> (Duration, Duration) {
    for _ in 0..3 {
        black_box(timed_pass());
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 30 || start.elapsed() < Duration::from_secs(2) {
        times.push(timed_pass());
    }
    times.sort_unstable();
    (times[times.len() / 2], times[0])
}

/// Median and best duration of one bulk pass.
fn measure(cards: &[&Value]) -> (Duration, Duration) {
    measure_passes(|| {
        let t = Instant::now();
        black_box(pass(cards));
        t.elapsed()
    })
}

/// One server-style pass: every text parsed, then validated at once; returns the time spent
/// validating only.
fn server_pass(texts: &[&str]) -> Duration {
    let mut validating = Duration::ZERO;
    for text in texts {
        let card: Value = serde_json::from_str(black_box(text)).expect("generated text is JSON");
        let t = Instant::now();
        black_box(canon_cards::validate_card(black_box(&card)).ok);
        validating += t.elapsed();
    }
    validating
}

/// Median and best validation time of one server-style pass.
fn measure_server(texts: &[&str]) -> (Duration, Duration) {
    measure_passes(|| server_pass(texts))
}

// A bench reports to the person running it; criterion prints its own figures the same way.
#[allow(clippy::print_stderr)]
fn report(name: &str, cards: &[&Value], bytes: usize) {
    print_pass(name, cards.len(), bytes, measure(cards));
}

fn report_server(name: &str, texts: &[&str], bytes: usize) {
    print_pass(name, texts.len(), bytes, measure_server(texts));
}

#[allow(clippy::print_stderr)]
fn print_pass(name: &str, count: usize, bytes: usize, (median, best): (Duration, Duration)) {
    let per_s = |d: Duration| count as f64 / d.as_secs_f64();
    let mb_s = |d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();
    eprintln!(
        "card_corpus/{name}: {} cards, {bytes} bytes per pass: median {:.3} ms = {:.0} cards/s, \
         {:.1} MB/s; best {:.3} ms = {:.0} cards/s, {:.1} MB/s",
        count,
        median.as_secs_f64() * 1e3,
        per_s(median),
        mb_s(median),
        best.as_secs_f64() * 1e3,
        per_s(best),
        mb_s(best),
    );
}

#[allow(clippy::print_stderr)]
fn card_corpus(c: &mut Criterion) {
    let cards = corpus::generate(corpus::SEED, corpus::COUNT);
    let problems = corpus::self_check(&cards);
    assert!(
        problems.is_empty(),
        "the corpus is not what it claims:\n{}",
        problems.join("\n")
    );
    let stats = corpus::stats(&cards);
    eprintln!("card_corpus: {stats}");
    // Parsed in corpus order, so each card's nodes sit together in memory as in a server that
    // has just parsed a request.
    let parsed: Vec<Value> = cards
        .iter()
        .map(|card| serde_json::from_str(&card.text).expect("generated text is JSON"))
        .collect();
    let all: Vec<&Value> = parsed.iter().collect();
    let large: Vec<&Value> = cards
        .iter()
        .zip(&parsed)
        .filter(|(card, _)| card.text.len() >= corpus::LARGE_BYTES)
        .map(|(_, value)| value)
        .collect();
    report("all", &all, stats.total_bytes);
    report("large", &large, stats.large_bytes);
    let texts: Vec<&str> = cards.iter().map(|card| card.text.as_str()).collect();
    let large_texts: Vec<&str> = texts
        .iter()
        .copied()
        .filter(|text| text.len() >= corpus::LARGE_BYTES)
        .collect();
    report_server("server_all", &texts, stats.total_bytes);
    report_server("server_large", &large_texts, stats.large_bytes);

    let mut group = c.benchmark_group("card_corpus");
    // A pass takes tens of milliseconds; 20 samples of up to 20 passes need this long.
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(12));
    group.throughput(Throughput::Bytes(stats.total_bytes as u64));
    group.bench_function("all", |b| b.iter(|| pass(&all)));
    group.throughput(Throughput::Bytes(stats.large_bytes as u64));
    group.bench_function("large", |b| b.iter(|| pass(&large)));
    group.finish();
}

criterion_group!(benches, card_corpus);
criterion_main!(benches);
