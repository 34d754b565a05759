//! Tests of `env`: the `.env` reader against Hermes' format, and the setting sources of
//! cli.md §5.1.

use super::*;
use proptest::prelude::*;
use serde_json::json;

fn check(text: &str, expected: &[(&str, &str)]) {
    let parsed = parse_lines(text);
    let want: Vec<(String, String)> = expected
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    assert_eq!(parsed, want, "{text:?}");
}

#[test]
fn dotenv_lines_parse_as_hermes_load_env() {
    check("KEY=value\n", &[("KEY", "value")]);
    check("export KEY=value", &[("KEY", "value")]);
    check("  export   KEY = spaced  ", &[("KEY", "spaced")]);
    check("# comment\n\n   # indented comment\nA=1", &[("A", "1")]);
    check("no equals sign\nB=2", &[("B", "2")]);
    check("C=a=b=c", &[("C", "a=b=c")]);
    check("D=", &[("D", "")]);
    check("E=a # not a comment", &[("E", "a # not a comment")]);
    check(
        r#"F="quoted \"inner\" back\\slash""#,
        &[("F", r#"quoted "inner" back\slash"#)],
    );
    check(r#"G="keeps \n and \x""#, &[("G", r"keeps \n and \x")]);
    check(r#"H="trailing\""#, &[("H", r#"trailing\"#)]);
    check("I='single \\\" kept'", &[("I", "single \\\" kept")]);
    check("J=\"", &[("J", "\"")]);
    check("K=\"\"", &[("K", "")]);
    check("L=1\r\nM=2\rN=3\n", &[("L", "1"), ("M", "2"), ("N", "3")]);
    check("exportX=1", &[("exportX", "1")]);
    check("O=1\nO=2", &[("O", "1"), ("O", "2")]);
}

#[test]
fn last_assignment_wins_and_bom_is_skipped() {
    let env = DotEnv::parse("\u{feff}A=1\nA=2\nB=\"x y\"");
    assert_eq!(env.get("A"), Some("2"));
    assert_eq!(env.get("B"), Some("x y"));
    assert_eq!(env.get("C"), None);
    assert_eq!(env.len(), 2);
}

#[test]
fn dotenv_debug_shows_keys_only() {
    let env = DotEnv::parse("CANON_API_KEY=sk-secret-value\nCANON_AGENT=ops");
    let shown = format!("{env:?}");
    assert!(!shown.contains("sk-secret-value"), "{shown}");
    assert!(shown.contains("CANON_API_KEY"), "{shown}");
}

#[test]
fn reading_a_missing_file_is_empty_and_bad_utf8_is_replaced() {
    let dir = tempfile::tempdir().expect("temp dir");
    assert!(DotEnv::read(&dir.path().join("missing"))
        .expect("ok")
        .is_empty());
    let path = dir.path().join(".env");
    std::fs::write(&path, b"A=caf\xff\nB=2\n").expect("write");
    let env = DotEnv::read(&path).expect("read");
    assert_eq!(env.get("A"), Some("caf\u{fffd}"));
    assert_eq!(env.get("B"), Some("2"));
}

#[test]
fn quoting_follows_hermes_quote_env_value() {
    for (value, written) in [
        ("plain", "plain"),
        ("", ""),
        ("has space", "\"has space\""),
        ("hash#", "\"hash#\""),
        ("q\"uote", "\"q\\\"uote\""),
        ("back\\slash", "back\\slash"),
        ("back\\ slash", "\"back\\\\ slash\""),
        ("it's", "\"it's\""),
    ] {
        assert_eq!(quote_value(value), written, "{value:?}");
    }
}

fn table(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name: &str| map.get(name).cloned()
}

#[test]
fn setting_sources_in_order() {
    let platform = PlatformConfig {
        api_key: Some(ApiKey::new("  ")),
        token: Some(ApiKey::new(" from-token ")),
        extra: json!({"base_url": "https://extra", "canon_stream_url": " https://lower ",
                      "CANON_RTDB_URL": "https://upper", "environment_id": 7})
        .as_object()
        .cloned()
        .expect("object"),
    };
    let env = table(&[
        ("CANON_BASE_URL", " https://env "),
        ("CANON_API_KEY", "   "),
    ]);
    let get = |key: &str, name: &str| setting(&env, Some(&platform), key, name);
    assert_eq!(
        get("base_url", "CANON_BASE_URL").as_deref(),
        Some("https://env")
    );
    // A blank env value falls through; the platform's blank `api_key` too, then `token`.
    assert_eq!(
        get("api_key", "CANON_API_KEY").as_deref(),
        Some("from-token")
    );
    assert_eq!(
        get("stream_url", "CANON_STREAM_URL").as_deref(),
        Some("https://lower")
    );
    assert_eq!(
        get("rtdb_url", "CANON_RTDB_URL").as_deref(),
        Some("https://upper")
    );
    // Not a string: not a setting.
    assert_eq!(get("environment_id", "CANON_ENVIRONMENT_ID"), None);
    // `api_key`/`token` are read for the API key only.
    let only_token = PlatformConfig {
        token: Some(ApiKey::new("t")),
        ..PlatformConfig::default()
    };
    assert_eq!(
        setting(
            &env,
            Some(&only_token),
            "base_url",
            "CANON_FIREBASE_API_KEY"
        ),
        None
    );
    assert_eq!(setting(&env, None, "stream_url", "CANON_STREAM_URL"), None);
}

#[test]
fn platform_config_debug_hides_secrets() {
    let platform = PlatformConfig {
        api_key: Some(ApiKey::new("sk-one")),
        token: Some(ApiKey::new("sk-two")),
        extra: json!({"api_key": "sk-three"})
            .as_object()
            .cloned()
            .expect("object"),
    };
    let shown = format!("{platform:?}");
    for secret in ["sk-one", "sk-two", "sk-three"] {
        assert!(!shown.contains(secret), "{shown}");
    }
}

fn key_strategy() -> impl Strategy<Value = String> {
    "[A-Z_][A-Z0-9_]{0,12}"
}

/// Values Hermes can write: any text without line breaks (`save_env_value` removes them).
fn value_strategy() -> impl Strategy<Value = String> {
    any::<String>().prop_map(|v| v.replace(['\n', '\r'], ""))
}

proptest! {
    #[test]
    fn written_values_read_back(pairs in prop::collection::vec((key_strategy(), value_strategy()), 0..8)) {
        let mut text = String::new();
        for (key, value) in &pairs {
            text.push_str(&format!("{key}={}\n", quote_value(value)));
        }
        let env = DotEnv::parse(&text);
        let mut expected: HashMap<&str, &str> = HashMap::new();
        for (key, value) in &pairs {
            expected.insert(key, value);
        }
        for (key, value) in expected {
            // A value Hermes would write unquoted never has outer whitespace, so it reads back
            // as is; quoted values read back exactly.
            prop_assert_eq!(env.get(key), Some(value), "text {:?}", text);
        }
    }

    #[test]
    fn parser_never_panics_and_skips_comments(text in any::<String>()) {
        let parsed = parse_lines(&text);
        for (key, _) in &parsed {
            prop_assert!(!key.starts_with('#'));
        }
        let _ = DotEnv::parse(&text);
    }

    #[test]
    fn export_prefix_is_transparent(key in key_strategy(), value in value_strategy()) {
        let plain = DotEnv::parse(&format!("{key}={}", quote_value(&value)));
        let exported = DotEnv::parse(&format!("export {key}={}", quote_value(&value)));
        prop_assert_eq!(plain, exported);
    }
}
