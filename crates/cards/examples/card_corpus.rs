//! Writes the `card_corpus` bench corpus (`benches/corpus/`) as JSON lines, for measuring
//! other validators on exactly the same cards (`scripts/bench-cards-reference.sh`).
//!
//! Usage: `cargo run --release -p canon-cards --example card_corpus -- OUT.jsonl`
//!
//! Each line is `{"card":…,"expected":{"ok":…,"errors":[…]}}`: the card as the bench parses it
//! and this crate's verdict on it. A summary of the corpus goes to stderr.

#[path = "../benches/corpus/mod.rs"]
mod corpus;

use std::io::Write as _;

// This program's job is to report on the file it wrote.
#[allow(clippy::print_stderr)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args_os()
        .nth(1)
        .ok_or("usage: card_corpus OUT.jsonl")?;
    let cards = corpus::generate(corpus::SEED, corpus::COUNT);
    let problems = corpus::self_check(&cards);
    if !problems.is_empty() {
        return Err(format!("the corpus is not what it claims:\n{}", problems.join("\n")).into());
    }
    let mut file = std::io::BufWriter::new(std::fs::File::create(&out)?);
    for card in &cards {
        let value: serde_json::Value = serde_json::from_str(&card.text)?;
        let verdict = serde_json::to_string(&canon_cards::validate_card(&value))?;
        writeln!(file, "{{\"card\":{},\"expected\":{verdict}}}", card.text)?;
    }
    file.flush()?;
    eprintln!("card_corpus: {}", corpus::stats(&cards));
    eprintln!(
        "card_corpus: wrote {}",
        std::path::Path::new(&out).display()
    );
    Ok(())
}
