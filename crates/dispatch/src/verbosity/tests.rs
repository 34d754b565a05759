//! Tests for verbosity parsing and resolution: every spelling against every
//! conversation type.

use serde_json::json;

use super::*;

#[test]
fn parsing_accepts_the_three_values_in_any_case_and_padding() {
    for (raw, expected) in [
        (None, VerbosityConfig::Auto),
        (Some(""), VerbosityConfig::Auto),
        (Some("   "), VerbosityConfig::Auto),
        (Some("auto"), VerbosityConfig::Auto),
        (Some(" AUTO\n"), VerbosityConfig::Auto),
        (Some("verbose"), VerbosityConfig::Verbose),
        (Some("Verbose"), VerbosityConfig::Verbose),
        (Some("\tquiet "), VerbosityConfig::Quiet),
        (Some("QUIET"), VerbosityConfig::Quiet),
    ] {
        assert_eq!(parse_turn_verbosity_config(raw), Ok(expected), "{raw:?}");
    }
}

#[test]
fn unknown_values_are_refused_with_the_exact_message() {
    for raw in ["loud", "verbose!", "q", "silent", "auto verbose", "0"] {
        let err = parse_turn_verbosity_config(Some(raw)).expect_err(raw);
        assert_eq!(
            err,
            VerbosityError::Invalid {
                value: raw.to_owned()
            }
        );
        assert_eq!(err.to_string(), VERBOSITY_ERROR_MESSAGE);
    }
    assert_eq!(
        VERBOSITY_ERROR_MESSAGE,
        "CANON_TURN_VERBOSITY must be 'auto', 'verbose', or 'quiet'"
    );
}

#[test]
fn first_non_empty_source_wins_and_whitespace_env_masks_extras() {
    assert_eq!(
        configured_turn_verbosity(Some("quiet"), Some("verbose"), None, None),
        Ok(VerbosityConfig::Quiet)
    );
    assert_eq!(
        configured_turn_verbosity(Some(""), Some("verbose"), Some("quiet"), None),
        Ok(VerbosityConfig::Verbose)
    );
    assert_eq!(
        configured_turn_verbosity(None, None, Some("quiet"), Some("verbose")),
        Ok(VerbosityConfig::Quiet)
    );
    assert_eq!(
        configured_turn_verbosity(None, None, None, Some("verbose")),
        Ok(VerbosityConfig::Verbose)
    );
    assert_eq!(
        configured_turn_verbosity(Some("  "), Some("quiet"), None, None),
        Ok(VerbosityConfig::Auto)
    );
    assert_eq!(
        configured_turn_verbosity(None, None, None, None),
        Ok(VerbosityConfig::Auto)
    );
    assert!(configured_turn_verbosity(None, Some("nope"), Some("quiet"), None).is_err());
}

#[test]
fn every_spelling_times_every_conversation_type() {
    let types = [
        ("direct", ConversationType::Direct),
        ("dm", ConversationType::Direct),
        (" DM ", ConversationType::Direct),
        ("group", ConversationType::Group),
        ("Group", ConversationType::Group),
        ("unknown", ConversationType::Unknown),
        ("", ConversationType::Unknown),
        ("channel", ConversationType::Unknown),
    ];
    let configs = [
        ("auto", None),
        ("", None),
        ("verbose", Some(Verbosity::Verbose)),
        ("VERBOSE", Some(Verbosity::Verbose)),
        ("quiet", Some(Verbosity::Quiet)),
        (" Quiet ", Some(Verbosity::Quiet)),
    ];
    for (type_raw, conversation_type) in types {
        assert_eq!(
            normalize_conversation_type(type_raw),
            conversation_type,
            "{type_raw:?}"
        );
        for (config_raw, explicit) in configs {
            let configured = parse_turn_verbosity_config(Some(config_raw)).expect("valid spelling");
            let expected = explicit.unwrap_or(match conversation_type {
                ConversationType::Group => Verbosity::Quiet,
                ConversationType::Direct | ConversationType::Unknown => Verbosity::Verbose,
            });
            assert_eq!(
                resolve_turn_verbosity(configured, conversation_type),
                expected,
                "{config_raw:?} × {type_raw:?}"
            );
        }
    }
}

#[test]
fn trail_is_published_only_when_verbose() {
    assert!(should_publish_turn_trail(Verbosity::Verbose));
    assert!(!should_publish_turn_trail(Verbosity::Quiet));
}

#[test]
fn conversation_type_sources() {
    assert_eq!(
        declared_conversation_type(&json!({"provenance": {"conversation": {"type": " Group "}}})),
        Some(ConversationType::Group)
    );
    assert_eq!(
        declared_conversation_type(&json!({"provenance": {"conversation": {"type": "dm"}}})),
        Some(ConversationType::Direct)
    );
    assert_eq!(
        declared_conversation_type(&json!({"provenance": {"conversation": {"type": "unknown"}}})),
        None
    );
    assert_eq!(
        declared_conversation_type(&json!({"provenance": {"conversation": "group"}})),
        None
    );
    assert_eq!(declared_conversation_type(&json!({"provenance": []})), None);
    assert_eq!(
        cached_conversation_type(Some(&json!({"type": "group"}))),
        Some(ConversationType::Group)
    );
    assert_eq!(
        cached_conversation_type(Some(&json!({"type": "direct"}))),
        Some(ConversationType::Direct)
    );
    assert_eq!(
        cached_conversation_type(Some(&json!({"type": "channel"}))),
        Some(ConversationType::Direct)
    );
    assert_eq!(cached_conversation_type(Some(&json!({"type": ""}))), None);
    assert_eq!(cached_conversation_type(Some(&json!({}))), None);
    assert_eq!(cached_conversation_type(None), None);
}
