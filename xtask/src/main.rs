//! Project automation for canon-hermes.
//!
//! `cargo xtask codegen [--check]` regenerates every artifact derived from
//! `fixtures/rich-cards/registry.json` (the Rust vocabulary module of `canon-cards`, the Hermes
//! skill document and the card parity fixtures) and canon-profiles'
//! `runtime-endpoint-defaults.json` from the packaged environment table of
//! `codegen/environments.rs` (cli.md §5.2). `cargo xtask cards [--check]` is the same
//! generator under the name the cards spec uses. With `--check` nothing is written; the command
//! fails when a committed file differs from what the registry produces, or when the fixture set
//! misses a coverage requirement of cards.md §20.5.
//!
//! xtask never depends on a workspace crate: the generator must not be built from what it
//! generates (no bootstrapping).

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod codegen;
mod sync_contracts;
mod tidy;

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(command) = args.first() else {
        print_usage();
        anyhow::bail!("missing command");
    };
    let rest = &args[1..];
    match command.as_str() {
        "codegen" | "cards" => {
            let mut mode = codegen::Mode::Write;
            for arg in rest {
                match arg.as_str() {
                    "--check" => mode = codegen::Mode::Check,
                    other => anyhow::bail!("unknown argument to {command}: {other}"),
                }
            }
            codegen::run(&project_root(), mode)
        }
        "sync-contracts" => {
            if let Some(other) = rest.first() {
                anyhow::bail!("unknown argument to sync-contracts: {other}");
            }
            sync_contracts::run(&project_root())
        }
        "help" | "--help" | "-h" => {
            print_usage();
            Ok(())
        }
        other => {
            print_usage();
            anyhow::bail!("unknown command: {other}")
        }
    }
}

fn print_usage() {
    eprintln!(
        "usage: cargo xtask <command>\n\n\
         commands:\n  \
         codegen [--check]   regenerate (or check) everything derived from fixtures/rich-cards/registry.json\n                      and crates/profiles/src/runtime-endpoint-defaults.json\n  \
         cards [--check]     the same generator, under the name cards.md §19.3 uses\n  \
         sync-contracts      fetch @canonmsg/backend-contracts@8.6.1 into .cache/contracts/ (for canon-sim's conformance tests\n                      and the packaged environments' check)"
    );
}

/// The workspace root: xtask lives one level below it.
pub(crate) fn project_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .expect("xtask sits inside the workspace root")
        .to_path_buf()
}
