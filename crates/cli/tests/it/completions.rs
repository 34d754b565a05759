//! `canon-hermes completions <shell>`: the completion script of the real binary's command line
//! on stdout, for each shell clap_complete knows; an unknown shell is a usage error.

use std::process::{Command, Output};

fn completions(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_canon-hermes"))
        .arg("completions")
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn bash_completions_name_every_subcommand() {
    let out = completions(&["bash"]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let script = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(script.contains("complete -F _canon__hermes"), "{script}");
    let root = script
        .lines()
        .find(|l| l.trim_start().starts_with("opts=\"-h -V --help --version"))
        .unwrap_or_else(|| panic!("the top-level word list: {script}"));
    for subcommand in ["install", "doctor", "card", "send", "completions"] {
        assert!(
            root.split_whitespace()
                .any(|w| w.trim_matches('"') == subcommand),
            "{subcommand}: {root}"
        );
    }
    // And their own options.
    for option in ["--profile", "--online", "--to"] {
        assert!(script.contains(option), "{option}");
    }
}

#[test]
fn every_shell_gets_a_script_and_an_unknown_one_is_a_usage_error() {
    for (shell, marker) in [
        ("zsh", "#compdef canon-hermes"),
        ("fish", "complete -c canon-hermes"),
        ("elvish", "canon-hermes"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let out = completions(&[shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(script.contains("doctor"), "{shell}");
    }
    let out = completions(&["tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid value 'tcsh'"),
        "{out:?}"
    );
}
