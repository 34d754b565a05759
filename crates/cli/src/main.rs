//! `canon-hermes`: the command-line entry point of canon-hermes, the Canon platform adapter for
//! Hermes Agent. All of it is [`canon_hermes::run`]; `canon-hermes-plugin` is the same program
//! under its compatibility name (cli.md §1).

fn main() -> std::process::ExitCode {
    canon_hermes::run()
}
