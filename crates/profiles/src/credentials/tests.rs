//! Tests of `credentials`: every rule of cli.md §5.1 and its exact error string.

use std::collections::HashMap;
use std::path::PathBuf;

use super::*;
use crate::files::AgentProfiles;
use serde_json::json;

const PATH: &str = "/home/u/.canon/agents.json";

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name: &str| map.get(name).cloned()
}

fn profile(extra: Value) -> Value {
    let mut base = json!({
        "apiKey": "sk-profile-secret",
        "agentId": "agent-1",
        "agentName": "Ops",
        "registeredAt": "2026-01-02T03:04:05Z",
        "clientType": "hermes",
        "environmentId": "canon-dev-v1",
        "baseUrl": "http://127.0.0.1:7000",
        "streamUrl": "http://127.0.0.1:7001",
        "rtdbUrl": "http://127.0.0.1:7000/rtdb",
        "firebaseApiKey": "fk",
    });
    if let (Value::Object(base), Value::Object(extra)) = (&mut base, extra) {
        for (k, v) in extra {
            if v.is_null() {
                base.remove(&k);
            } else {
                base.insert(k, v);
            }
        }
    }
    base
}

fn agents(file: Value) -> AgentProfiles {
    AgentProfiles::parse(&PathBuf::from(PATH), &file.to_string()).expect("valid agents.json")
}

fn resolve(
    pairs: &[(&str, &str)],
    platform: Option<&PlatformConfig>,
    file: Value,
) -> Result<Resolution, CredentialError> {
    let env = env(pairs);
    let mut calls = 0;
    let result = resolve_credentials(&env, platform, &mut || {
        calls += 1;
        Ok(agents(file.clone()))
    });
    assert!(calls <= 1, "agents.json is read at most once");
    result
}

fn configured(result: Result<Resolution, CredentialError>) -> Credentials {
    match result {
        Ok(Resolution::Configured(c)) => c,
        other => panic!("expected credentials, got {other:?}"),
    }
}

fn error(result: Result<Resolution, CredentialError>) -> String {
    match result {
        Err(e) => e.to_string(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn direct_key_needs_an_environment_id() {
    let e = error(resolve(&[("CANON_API_KEY", "sk-direct")], None, json!({})));
    assert_eq!(
        e,
        "CANON_ENVIRONMENT_ID is required when CANON_API_KEY is used directly"
    );
    assert!(!e.contains("sk-direct"));
}

#[test]
fn direct_key_with_a_packaged_environment_uses_the_packaged_urls() {
    let c = configured(resolve(
        &[
            ("CANON_API_KEY", " sk-direct "),
            ("CANON_ENVIRONMENT_ID", "canon-prod-v1"),
        ],
        None,
        json!({"ops": profile(json!({}))}),
    ));
    assert_eq!(c.api_key.expose(), "sk-direct");
    assert_eq!(c.source, CredentialSource::DirectKey);
    assert_eq!(c.profile_name(), None);
    assert_eq!(c.connection.base_url, "https://api.canonmail.com");
    assert_eq!(c.connection.stream_url, "https://stream.canonmail.com");
    assert_eq!(c.connection.project_id.as_deref(), Some("canonmail-prod"));
    assert!(!format!("{c:?}").contains("sk-direct"));
}

#[test]
fn direct_key_overrides_and_the_platform_config() {
    let c = configured(resolve(
        &[
            ("CANON_API_KEY", "sk"),
            ("CANON_ENVIRONMENT_ID", "canon-dev-v1"),
            ("CANON_BASE_URL", "http://127.0.0.1:9/"),
            ("CANON_STREAM_URL", "http://localhost:10"),
        ],
        None,
        json!({}),
    ));
    assert_eq!(c.connection.base_url, "http://127.0.0.1:9");
    assert_eq!(c.connection.stream_url, "http://localhost:10");

    // The key and every setting may come from the platform config instead of env.
    let platform = PlatformConfig {
        api_key: Some(ApiKey::new("sk-config")),
        token: None,
        extra: json!({"environment_id": "acme-v1", "base_url": "https://a", "CANON_STREAM_URL": "https://s",
                      "canon_rtdb_url": "https://acme.firebaseio.com", "firebase_api_key": "fk"})
        .as_object()
        .cloned()
        .expect("object"),
    };
    let c = configured(resolve(&[], Some(&platform), json!({})));
    assert_eq!(c.api_key.expose(), "sk-config");
    assert_eq!(c.connection.environment_id, "acme-v1");
    assert_eq!(c.connection.project_id, None);
    assert_eq!(c.connection.stream_url, "https://s");

    // A direct key with a non-packaged id and a missing endpoint.
    let e = error(resolve(
        &[("CANON_API_KEY", "sk"), ("CANON_ENVIRONMENT_ID", "acme-v1")],
        None,
        json!({}),
    ));
    assert_eq!(e, "Missing Canon runtime endpoint: acme-v1.apiBaseUrl");
    // And an insecure override.
    let e = error(resolve(
        &[
            ("CANON_API_KEY", "sk"),
            ("CANON_ENVIRONMENT_ID", "canon-prod-v1"),
            ("CANON_BASE_URL", "http://api.example"),
        ],
        None,
        json!({}),
    ));
    assert_eq!(
        e,
        "Canon runtime endpoint must use HTTPS (or local HTTP): canon-prod-v1.apiBaseUrl"
    );
}

#[test]
fn direct_key_never_reads_agents_json() {
    let env = env(&[
        ("CANON_API_KEY", "sk"),
        ("CANON_ENVIRONMENT_ID", "canon-prod-v1"),
    ]);
    let result = resolve_credentials(&env, None, &mut || {
        panic!("agents.json must not be read for a direct key")
    });
    assert!(matches!(result, Ok(Resolution::Configured(_))));
}

#[test]
fn named_profile() {
    let file = json!({"ops": profile(json!({})), "other": profile(json!({"agentId": "agent-2"}))});
    let c = configured(resolve(&[("CANON_AGENT", " ops ")], None, file.clone()));
    assert_eq!(c.api_key.expose(), "sk-profile-secret");
    assert_eq!(
        c.source,
        CredentialSource::Profile(ProfileIdentity {
            name: "ops".into(),
            agent_id: "agent-1".into(),
            agent_name: "Ops".into(),
            implicit: false,
        })
    );
    // The stored snapshot wins over env overrides and packaged defaults.
    assert_eq!(c.connection.base_url, "http://127.0.0.1:7000");
    assert_eq!(c.connection.project_id.as_deref(), Some("canonmail-dev"));
    // Named by the platform extras, in order.
    for key in PROFILE_NAME_EXTRAS {
        let platform = PlatformConfig {
            extra: json!({ key: "other" })
                .as_object()
                .cloned()
                .expect("object"),
            ..PlatformConfig::default()
        };
        let c = configured(resolve(&[], Some(&platform), file.clone()));
        assert_eq!(c.profile_name(), Some("other"), "{key}");
    }
    let e = error(resolve(&[("CANON_AGENT", "nope")], None, file));
    assert_eq!(
        e,
        "Canon profile \"nope\" not found in /home/u/.canon/agents.json. Set \
         CANON_AGENTS_JSON_BOOTSTRAP, set CANON_API_KEY, or re-run registration."
    );
}

#[test]
fn implicit_profile() {
    // One Hermes profile among other runtimes' profiles: used.
    let file = json!({"ops": profile(json!({"clientType": null})), "coms": profile(json!({"clientType": "coms"}))});
    let c = configured(resolve(&[], None, file));
    assert_eq!(c.profile_name(), Some("ops"));
    assert!(matches!(&c.source, CredentialSource::Profile(p) if p.implicit));
    // Several: an error.
    let file = json!({"a": profile(json!({})), "b": profile(json!({}))});
    assert_eq!(
        error(resolve(&[], None, file)),
        "Multiple Canon profiles are available. Set CANON_AGENT to choose one."
    );
    // None (no file, or only other runtimes'): unconfigured, no error.
    assert_eq!(
        resolve(&[], None, json!({})).expect("ok"),
        Resolution::Unconfigured
    );
    assert_eq!(
        resolve(
            &[],
            None,
            json!({"coms": profile(json!({"clientType": "coms"}))})
        )
        .expect("ok"),
        Resolution::Unconfigured
    );
    // A blank CANON_AGENT is no name.
    assert_eq!(
        resolve(&[("CANON_AGENT", "  ")], None, json!({})).expect("ok"),
        Resolution::Unconfigured
    );
}

#[test]
fn profile_rules_fail_closed() {
    let e = error(resolve(
        &[("CANON_AGENT", "coms")],
        None,
        json!({"coms": profile(json!({"clientType": "coms"}))}),
    ));
    assert_eq!(e, "Canon profile \"coms\" is not registered for Hermes");
    let e = error(resolve(
        &[("CANON_AGENT", "x")],
        None,
        json!({"x": profile(json!({"clientType": ""}))}),
    ));
    assert_eq!(e, "Canon profile \"x\" is not registered for Hermes");

    // An old unbound profile: only a key and an id.
    let e = error(resolve(
        &[("CANON_AGENT", "old")],
        None,
        json!({"old": {"apiKey": "sk-old", "agentId": "a"}}),
    ));
    assert_eq!(
        e,
        "Canon profile \"old\" is missing identity or environment binding: agentName, \
         registeredAt, environmentId, baseUrl, streamUrl, rtdbUrl, firebaseApiKey"
    );
    assert!(!e.contains("sk-old"));
    // Empty, blank and non-string values count as missing, listed in order.
    let e = error(resolve(
        &[("CANON_AGENT", "p")],
        None,
        json!({"p": profile(json!({"apiKey": "", "rtdbUrl": "  ", "agentName": 5, "baseUrl": null}))}),
    ));
    assert_eq!(
        e,
        "Canon profile \"p\" is missing identity or environment binding: apiKey, agentName, \
         baseUrl, rtdbUrl"
    );
    // The implicit profile obeys the same rules.
    let e = error(resolve(
        &[],
        None,
        json!({"p": profile(json!({"firebaseApiKey": null}))}),
    ));
    assert_eq!(
        e,
        "Canon profile \"p\" is missing identity or environment binding: firebaseApiKey"
    );
    // The stored snapshot is re-validated.
    for (stored, expected) in [
        (
            json!({"baseUrl": "http://api.example"}),
            "Canon runtime endpoint must use HTTPS (or local HTTP): canon-dev-v1.apiBaseUrl",
        ),
        (
            json!({"rtdbUrl": "https://evil.firebaseio.com"}),
            "Canon RTDB endpoint for canon-dev-v1 must belong to project canonmail-dev",
        ),
        (
            json!({"environmentId": "Bad"}),
            "Unsupported Canon environment ID: Bad",
        ),
    ] {
        let e = error(resolve(
            &[("CANON_AGENT", "p")],
            None,
            json!({"p": profile(stored.clone())}),
        ));
        assert_eq!(e, expected, "{stored}");
    }
    // A non-packaged stored environment resolves unbound (the health check binds it).
    let c = configured(resolve(
        &[("CANON_AGENT", "p")],
        None,
        json!({"p": profile(json!({"environmentId": "acme-v1"}))}),
    ));
    assert_eq!(c.connection.project_id, None);
}

#[test]
fn direct_key_wins_over_a_profile_name() {
    let c = configured(resolve(
        &[
            ("CANON_API_KEY", "sk"),
            ("CANON_ENVIRONMENT_ID", "canon-dev-v1"),
            ("CANON_AGENT", "ops"),
        ],
        None,
        json!({"ops": profile(json!({}))}),
    ));
    assert_eq!(c.source, CredentialSource::DirectKey);
}

#[test]
fn file_errors_pass_through() {
    let env = env(&[("CANON_AGENT", "ops")]);
    let result = resolve_credentials(&env, None, &mut || {
        Err(StoreError::NotAnObject {
            path: PathBuf::from(PATH),
        })
    });
    assert_eq!(
        result.expect_err("error").to_string(),
        "/home/u/.canon/agents.json must be a JSON object keyed by profile name"
    );
}

#[test]
fn saved_entry_resolves_back() {
    let connection =
        resolve_connection("canon-prod-v1", &ConnectionOverrides::default()).expect("ok");
    let entry = hermes_profile_entry(
        &ApiKey::new("sk-new"),
        "agent-9",
        "Nine",
        "2026-01-02T03:04:05Z",
        &connection,
    );
    let mut profiles = AgentProfiles::empty(PathBuf::from(PATH));
    profiles.insert("nine", entry);
    let c = profile_credentials(&profiles, "nine", false).expect("usable");
    assert_eq!(c.connection, connection);
    assert_eq!(c.api_key.expose(), "sk-new");
}

#[test]
fn only_credential_settings_of_a_platform_config_affect_resolution() {
    let with = |api_key: Option<&str>, token: Option<&str>, extra: Value| PlatformConfig {
        api_key: api_key.map(ApiKey::new),
        token: token.map(ApiKey::new),
        extra: extra.as_object().cloned().expect("object"),
    };
    // What the gateway hands a bare `enabled: true` block, and settings of other rules.
    for platform in [
        with(None, None, json!({})),
        with(
            None,
            None,
            json!({"group_sessions_per_user": true, "thread_sessions_per_user": false,
                   "turn_verbosity": "quiet", "inbound_image_delivery": "model"}),
        ),
        with(Some(" "), Some(""), json!({"agent": "  ", "base_url": 7})),
    ] {
        assert!(!platform_affects_resolution(&platform), "{platform:?}");
        // And indeed it resolves as no platform config does.
        let file = json!({"ops": profile(json!({}))});
        assert_eq!(
            configured(resolve(&[], Some(&platform), file.clone())),
            configured(resolve(&[], None, file))
        );
    }
    for platform in [
        with(Some("sk"), None, json!({})),
        with(None, Some("tok"), json!({})),
        with(None, None, json!({"agent": "ops"})),
        with(None, None, json!({"CANON_AGENT": "ops"})),
        with(None, None, json!({"environment_id": "canon-dev-v1"})),
        with(None, None, json!({"canon_stream_url": "https://s"})),
        with(None, None, json!({"CANON_FIREBASE_API_KEY": "fk"})),
        with(None, None, json!({"canon_api_key": "sk"})),
    ] {
        assert!(platform_affects_resolution(&platform), "{platform:?}");
    }
}
