//! `canon-hermes-plugin`: the compatibility alias of `canon-hermes` that the seed README promises
//! (cli.md §1). The same program as `src/main.rs`; usage text names whichever binary ran.

fn main() -> std::process::ExitCode {
    canon_hermes::run()
}
