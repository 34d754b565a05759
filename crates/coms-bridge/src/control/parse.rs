//! Pure readers of Hermes and Herdr output for the controller (coms-bridge.md §9.3, §9.4, §9.6):
//! ANSI stripping, the running-gateway list, the tools and skills listings, `profile show`,
//! Herdr's JSON, and project inference from a pane's foreground processes.

use serde_json::Value;

/// `text` without ANSI escape sequences (CSI `ESC [ … final`, and two-character `ESC x`).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                // OSC: up to BEL or ESC \.
                while let Some(c) = chars.next() {
                    if c == '\u{7}' || (c == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The line after leading whitespace and `✓` and at least one whitespace, or `None`.
fn after_check(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix('✓')?;
    let trimmed = rest.trim_start();
    (trimmed.len() < rest.len()).then_some(trimmed)
}

/// The profiles `hermes gateway list` shows as running: lines `^\s*✓\s+(<name>)(\s|$)` with a
/// name of `[A-Za-z0-9][A-Za-z0-9._-]*`.
pub fn running_gateways(listing: &str) -> Vec<String> {
    strip_ansi(listing)
        .lines()
        .filter_map(|line| {
            let rest = after_check(line)?;
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
                .unwrap_or(rest.len());
            let (name, tail) = rest.split_at(end);
            let starts_well = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric());
            let ends_well = tail.chars().next().is_none_or(char::is_whitespace);
            (starts_well && ends_well).then(|| name.to_owned())
        })
        .collect()
}

/// Whether the `tools list --platform telegram` output enables `toolset`: a line
/// `^\s*✓\s+enabled\s+<toolset>\b`.
pub fn tool_enabled(listing: &str, toolset: &str) -> bool {
    strip_ansi(listing).lines().any(|line| {
        let Some(rest) = after_check(line).and_then(|r| r.strip_prefix("enabled")) else {
            return false;
        };
        let trimmed = rest.trim_start();
        trimmed.len() < rest.len()
            && trimmed
                .strip_prefix(toolset)
                .is_some_and(|tail| !tail.starts_with(word_char))
    })
}

/// Whether `skills list --enabled-only` shows `hub-liaison` enabled: one line holds both
/// `hub-liaison` and the whole word `enabled` (any case).
pub fn skill_enabled(listing: &str) -> bool {
    strip_ansi(listing).lines().any(|line| {
        let lower = line.to_lowercase();
        lower.contains("hub-liaison")
            && lower.match_indices("enabled").any(|(at, word)| {
                let before = lower[..at].chars().next_back();
                let after = lower[at + word.len()..].chars().next();
                !before.is_some_and(word_char) && !after.is_some_and(word_char)
            })
    })
}

/// The profile path of `hermes profile show <profile>`: it needs a line `Profile: <profile>`
/// and a line `Path: <absolute path>`.
pub fn profile_path(show: &str, profile: &str) -> Option<String> {
    let text = strip_ansi(show);
    let mut named = false;
    let mut path = None;
    for line in text.lines().map(str::trim) {
        if line.strip_prefix("Profile:").map(str::trim) == Some(profile) {
            named = true;
        }
        if let Some(p) = line.strip_prefix("Path:").map(str::trim) {
            if p.starts_with('/') {
                path = Some(p.to_owned());
            }
        }
    }
    path.filter(|_| named)
}

/// Herdr's stdout as JSON: empty output is `{"result":{}}`.
pub fn herdr_json(stdout: &str) -> Option<Value> {
    if stdout.trim().is_empty() {
        return Some(serde_json::json!({"result": {}}));
    }
    serde_json::from_str(stdout).ok()
}

/// The first `--project <v>` or `--project=<v>` in the foreground processes' argv, in order.
pub fn project_from_process_info(info: &Value) -> Option<String> {
    let processes = info
        .pointer("/result/process_info/foreground_processes")
        .and_then(Value::as_array)?;
    for process in processes {
        let argv: Vec<&str> = process
            .get("argv")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (i, arg) in argv.iter().enumerate() {
            if *arg == "--project" {
                if let Some(value) = argv.get(i + 1) {
                    return Some((*value).to_owned());
                }
            } else if let Some(value) = arg.strip_prefix("--project=") {
                return Some(value.to_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn gateways() {
        let listing = "Gateways:\n  ✓ default (current) — PID 4242\n  ✗ dev — not running\n";
        assert_eq!(running_gateways(listing), ["default"]);
        let two = "\u{1b}[32m  ✓ default\u{1b}[0m — PID 1\n  ✓ work.prod — PID 2\n✓bad\n  ✓ -x\n";
        assert_eq!(running_gateways(two), ["default", "work.prod"]);
        assert!(running_gateways("").is_empty());
    }

    #[test]
    fn tools() {
        let listing = "  ✓ enabled  terminal  Terminal\n  ✗ disabled  file  Files\n  ✓ enabled  terminals  x\n";
        assert!(tool_enabled(listing, "terminal"));
        assert!(!tool_enabled(listing, "file"));
        assert!(tool_enabled("\u{1b}[1m✓\u{1b}[0m enabled file", "file"));
        assert!(!tool_enabled("  ✓ enabled  terminalx", "terminal"));
        assert!(!tool_enabled("  ✗ enabled  terminal", "terminal"));
    }

    #[test]
    fn skills() {
        assert!(skill_enabled("│ hub-liaison │ local │ Enabled │"));
        assert!(!skill_enabled("│ hub-liaison │ local │ disabled │"));
        assert!(!skill_enabled("│ other │ enabled │\n│ hub-liaison │ │"));
        assert!(!skill_enabled("hub-liaison not_enabled"));
    }

    #[test]
    fn profile_show() {
        let show = "Profile: default\nPath: /home/u/.hermes\nModel: x\n";
        assert_eq!(
            profile_path(show, "default").as_deref(),
            Some("/home/u/.hermes")
        );
        assert_eq!(profile_path(show, "dev"), None);
        assert_eq!(
            profile_path("Profile: default\nPath: relative\n", "default"),
            None
        );
        assert_eq!(profile_path("Profile: default\n", "default"), None);
    }

    #[test]
    fn herdr_output() {
        assert_eq!(herdr_json(""), Some(json!({"result": {}})));
        assert_eq!(herdr_json(" \n"), Some(json!({"result": {}})));
        assert_eq!(
            herdr_json("{\"result\":{\"pane\":{}}}"),
            Some(json!({"result": {"pane": {}}}))
        );
        assert_eq!(herdr_json("nope"), None);
    }

    #[test]
    fn project_inference_takes_the_first_flag_in_order() {
        let info = |processes: Value| json!({"result": {"process_info": {"foreground_processes": processes}}});
        let both = info(json!([
            {"argv": ["pi", "--model", "x"]},
            {"argv": ["pi", "--project", "af"]},
            {"argv": ["pi", "--project=later"]},
        ]));
        assert_eq!(project_from_process_info(&both).as_deref(), Some("af"));
        let eq = info(json!([{"argv": ["pi", "--project=acme.prod", "--project", "x"]}]));
        assert_eq!(project_from_process_info(&eq).as_deref(), Some("acme.prod"));
        assert_eq!(project_from_process_info(&info(json!([]))), None);
        assert_eq!(
            project_from_process_info(&info(json!([{"argv": ["pi", "--project"]}]))),
            None
        );
        assert_eq!(project_from_process_info(&json!({"result": {}})), None);
    }

    proptest! {
        #[test]
        fn parsers_never_panic(text in "\\PC{0,80}") {
            let _ = strip_ansi(&text);
            let _ = running_gateways(&text);
            let _ = tool_enabled(&text, "terminal");
            let _ = skill_enabled(&text);
            let _ = profile_path(&text, "default");
            let _ = herdr_json(&text);
        }

        #[test]
        fn stripping_leaves_plain_text_alone(text in "[a-z ✓✗—:]{0,40}") {
            prop_assert_eq!(strip_ansi(&text), text.clone());
            let coloured = format!("\u{1b}[1;32m{text}\u{1b}[0m");
            prop_assert_eq!(strip_ansi(&coloured), text);
        }
    }
}
