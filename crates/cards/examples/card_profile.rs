//! Validates the `card_corpus` bench corpus (`benches/corpus/`) a few times, for a profiler:
//! `valgrind --tool=callgrind --toggle-collect=card_profile::pass` counts only the passes.
//!
//! Usage: `cargo run --release -p canon-cards --example card_profile -- [PASSES]` (default 3).

// The bench's generator; this program needs only part of it.
#[allow(dead_code)]
#[path = "../benches/corpus/mod.rs"]
mod corpus;

/// One pass over every card; kept out of line so a profiler can collect exactly this.
#[inline(never)]
fn pass(cards: &[serde_json::Value]) -> usize {
    cards
        .iter()
        .filter(|card| canon_cards::validate_card(std::hint::black_box(card)).ok)
        .count()
}

// This program's job is to report the count it validated.
#[allow(clippy::print_stderr)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let passes: usize = std::env::args().nth(1).map_or(Ok(3), |p| p.parse())?;
    let cards = corpus::generate(corpus::SEED, corpus::COUNT);
    let parsed = cards
        .iter()
        .map(|card| serde_json::from_str(&card.text))
        .collect::<Result<Vec<serde_json::Value>, _>>()?;
    let mut valid = 0;
    for _ in 0..passes {
        valid = pass(&parsed);
    }
    eprintln!(
        "card_profile: {passes} passes over {} cards, {valid} valid",
        parsed.len()
    );
    Ok(())
}
