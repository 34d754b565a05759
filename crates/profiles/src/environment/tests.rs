//! Tests of `environment`: the packaged table, cli.md §5.2 rules 1–5 with their exact strings,
//! and the health rule of cli.md §5.3.

use super::*;
use serde_json::json;

const PROD_RTDB: &str = "https://canonmail-prod-default-rtdb.europe-west1.firebasedatabase.app";
const DEV_RTDB: &str = "https://canonmail-dev-default-rtdb.europe-west1.firebasedatabase.app";

#[test]
fn packaged_table_is_the_spec_table() {
    assert_eq!(default_environment_id(), DEFAULT_ENVIRONMENT_ID);
    let ids: Vec<&str> = packaged_environments()
        .iter()
        .map(|e| e.environment_id.as_str())
        .collect();
    assert_eq!(ids, ["canon-dev-v1", "canon-prod-v1"]);
    assert_eq!(
        packaged("canon-prod-v1"),
        Some(&PackagedEnvironment {
            environment_id: "canon-prod-v1".into(),
            project_id: "canonmail-prod".into(),
            region: "europe-west1".into(),
            api_base_url: "https://api.canonmail.com".into(),
            stream_url: "https://stream.canonmail.com".into(),
            rtdb_url: PROD_RTDB.into(),
            firebase_web_api_key: "AIzaSyDnX6AERXfdtZxf7qM9JjyMmYxF_ovPL78".into(),
        })
    );
    assert_eq!(
        packaged(" canon-dev-v1 "),
        Some(&PackagedEnvironment {
            environment_id: "canon-dev-v1".into(),
            project_id: "canonmail-dev".into(),
            region: "europe-west1".into(),
            api_base_url: "https://dev.api.canonmail.com".into(),
            stream_url: "https://dev.stream.canonmail.com".into(),
            rtdb_url: DEV_RTDB.into(),
            firebase_web_api_key: "AIzaSyA9i7PpZ-93CWmojEn5Ez9t8tboc5-1ELc".into(),
        })
    );
    assert_eq!(packaged("canon-staging-v1"), None);
}

fn overrides(base: &str, stream: &str, rtdb: &str, key: &str) -> ConnectionOverrides {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    ConnectionOverrides {
        base_url: some(base),
        stream_url: some(stream),
        rtdb_url: some(rtdb),
        firebase_api_key: some(key),
    }
}

fn err(id: &str, o: &ConnectionOverrides) -> String {
    resolve_connection(id, o)
        .expect_err("the connection is refused")
        .to_string()
}

#[test]
fn packaged_ids_fall_back_to_packaged_values() {
    let c = resolve_connection(" canon-prod-v1 ", &ConnectionOverrides::default()).expect("ok");
    assert_eq!(
        c,
        Connection {
            environment_id: "canon-prod-v1".into(),
            project_id: Some("canonmail-prod".into()),
            region: "europe-west1".into(),
            base_url: "https://api.canonmail.com".into(),
            stream_url: "https://stream.canonmail.com".into(),
            rtdb_url: PROD_RTDB.into(),
            firebase_api_key: "AIzaSyDnX6AERXfdtZxf7qM9JjyMmYxF_ovPL78".into(),
        }
    );
    assert!(c.is_packaged());
    // Overrides win, each one alone; blank overrides count as absent.
    let c = resolve_connection(
        "canon-dev-v1",
        &overrides(" http://127.0.0.1:8080/// ", "   ", "", " key "),
    )
    .expect("ok");
    assert_eq!(c.base_url, "http://127.0.0.1:8080");
    assert_eq!(c.stream_url, "https://dev.stream.canonmail.com");
    assert_eq!(c.rtdb_url, DEV_RTDB);
    assert_eq!(c.firebase_api_key, "key");
    assert_eq!(c.project_id.as_deref(), Some("canonmail-dev"));
}

#[test]
fn non_packaged_ids_need_all_four_endpoints_and_a_valid_id() {
    let full = overrides(
        "https://api.example.test",
        "https://stream.example.test/",
        "https://acme-default-rtdb.firebaseio.com",
        "fk",
    );
    let c = resolve_connection("acme-v1", &full).expect("ok");
    assert_eq!(c.project_id, None, "bound only after the health check");
    assert_eq!(c.region, "");
    assert_eq!(c.stream_url, "https://stream.example.test");
    assert!(!c.is_packaged());
    for (id, o, expected) in [
        (
            "acme-v1",
            overrides("", "https://s", "https://r", "k"),
            "Missing Canon runtime endpoint: acme-v1.apiBaseUrl",
        ),
        (
            "acme-v1",
            overrides("https://a", "", "https://r", "k"),
            "Missing Canon runtime endpoint: acme-v1.streamUrl",
        ),
        (
            "acme-v1",
            overrides("https://a", "https://s", " / ", "k"),
            "Missing Canon runtime endpoint: acme-v1.rtdbUrl",
        ),
        (
            "acme-v1",
            overrides("https://a", "https://s", "https://r", " "),
            "Missing Canon runtime endpoint: acme-v1.firebaseWebApiKey",
        ),
        (
            "Acme",
            full.clone(),
            "Unsupported Canon environment ID: Acme",
        ),
        (
            "-acme",
            full.clone(),
            "Unsupported Canon environment ID: -acme",
        ),
        (
            "acme_v1",
            full.clone(),
            "Unsupported Canon environment ID: acme_v1",
        ),
        ("", full.clone(), "Unsupported Canon environment ID: "),
        ("   ", full.clone(), "Unsupported Canon environment ID: "),
        // The id is checked before the endpoints.
        (
            "bad id",
            ConnectionOverrides::default(),
            "Unsupported Canon environment ID: bad id",
        ),
    ] {
        assert_eq!(err(id, &o), expected, "{id:?} {o:?}");
    }
    let longest = format!("a{}", "-".repeat(62));
    assert!(resolve_connection(&longest, &full).is_ok());
    let too_long = format!("a{}", "b".repeat(63));
    assert_eq!(
        err(&too_long, &full),
        format!("Unsupported Canon environment ID: {too_long}")
    );
}

#[test]
fn urls_must_be_https_or_local_http() {
    let insecure = |field: &str| {
        format!("Canon runtime endpoint must use HTTPS (or local HTTP): canon-dev-v1.{field}")
    };
    for (base, ok) in [
        ("https://api.example", true),
        ("HTTPS://api.example", true),
        ("http://localhost:9", true),
        ("http://LOCALHOST", true),
        ("http://127.0.0.1:9/x", true),
        ("http://[::1]:9", true),
        ("http://user@127.0.0.1", true),
        ("http://127.0.0.2", false),
        ("http://localhost.example", false),
        ("http://10.0.0.1", false),
        ("http://api.example", false),
        ("ftp://api.example", false),
        ("api.example", false),
        ("ws://127.0.0.1", false),
    ] {
        let result = resolve_connection("canon-dev-v1", &overrides(base, "", "", ""));
        match ok {
            true => assert!(result.is_ok(), "{base}: {result:?}"),
            false => assert_eq!(
                result.expect_err(base).to_string(),
                insecure("apiBaseUrl"),
                "{base}"
            ),
        }
    }
    assert_eq!(
        err("canon-dev-v1", &overrides("", "http://s.example", "", "")),
        insecure("streamUrl")
    );
    assert_eq!(
        err("canon-dev-v1", &overrides("", "", "http://r.example", "")),
        insecure("rtdbUrl")
    );
}

#[test]
fn rtdb_host_must_belong_to_the_project() {
    let wrong = "Canon RTDB endpoint for canon-prod-v1 must belong to project canonmail-prod";
    for (rtdb, ok) in [
        ("https://canonmail-prod.firebaseio.com", true),
        ("https://canonmail-prod-default-rtdb.firebaseio.com", true),
        (
            "https://CANONMAIL-PROD-x.europe-west1.firebasedatabase.app",
            true,
        ),
        ("http://127.0.0.1:9000", true),
        ("http://localhost:9000", true),
        ("https://127.0.0.5", true),
        ("https://[::1]", true),
        (
            "https://canonmail-dev-default-rtdb.europe-west1.firebasedatabase.app",
            false,
        ),
        ("https://canonmail-production.firebaseio.com", false),
        ("https://canonmail-prod.example.com", false),
        ("https://x.canonmail-prod.firebaseio.com", false),
        ("https://canonmail-prod.firebaseio.com.evil.test", false),
        ("https://10.0.0.1", false),
    ] {
        let result = resolve_connection("canon-prod-v1", &overrides("", "", rtdb, ""));
        match ok {
            true => assert!(result.is_ok(), "{rtdb}: {result:?}"),
            false => assert_eq!(result.expect_err(rtdb).to_string(), wrong, "{rtdb}"),
        }
    }
}

#[test]
fn bind_project_is_rule_five_for_a_learned_project() {
    let c = resolve_connection(
        "acme-v1",
        &overrides(
            "https://a",
            "https://s",
            "https://acme-rtdb.firebaseio.com",
            "k",
        ),
    )
    .expect("ok");
    assert_eq!(
        c.bind_project("acme").expect("bound").project_id.as_deref(),
        Some("acme")
    );
    assert_eq!(
        c.bind_project("other").expect_err("refused").to_string(),
        "Canon RTDB endpoint for acme-v1 must belong to project other"
    );
    assert_eq!(
        c.bind_project("").expect_err("refused").to_string(),
        "Canon RTDB endpoint for acme-v1 must belong to project "
    );
}

fn dev() -> Connection {
    resolve_connection("canon-dev-v1", &ConnectionOverrides::default()).expect("ok")
}

#[test]
fn health_response_rule() {
    let url = "https://dev.api.canonmail.com/healthz/";
    let mismatch = format!("Canon runtime endpoint {url} does not match environment canon-dev-v1");
    let good = json!({"environmentId": "canon-dev-v1", "projectId": "canonmail-dev"});
    let c = dev();
    assert_eq!(
        verify_health_response(url, 200, Some("canon-dev-v1"), &good, &c).as_deref(),
        Ok("canonmail-dev")
    );
    // The status is not checked.
    assert!(verify_health_response(url, 503, Some("canon-dev-v1"), &good, &c).is_ok());
    for (header, body) in [
        (None, good.clone()),
        (Some("canon-prod-v1"), good.clone()),
        (Some("canon-dev-v1 "), good.clone()),
        (Some("canon-dev-v1"), Value::Null),
        (Some("canon-dev-v1"), json!(["canon-dev-v1"])),
        (
            Some("canon-dev-v1"),
            json!({"environmentId": "canon-prod-v1", "projectId": "canonmail-dev"}),
        ),
        (Some("canon-dev-v1"), json!({"projectId": "canonmail-dev"})),
        (
            Some("canon-dev-v1"),
            json!({"environmentId": "canon-dev-v1", "projectId": "canonmail-prod"}),
        ),
        (
            Some("canon-dev-v1"),
            json!({"environmentId": "canon-dev-v1"}),
        ),
        (
            Some("canon-dev-v1"),
            json!({"environmentId": "canon-dev-v1", "projectId": 1}),
        ),
    ] {
        let got = verify_health_response(url, 200, header, &body, &c);
        assert_eq!(
            got.expect_err("mismatch").to_string(),
            mismatch,
            "{header:?} {body}"
        );
    }
}

fn response<'a>(url: &'a str, header: Option<&'a str>, body: &'a Value) -> HealthResponse<'a> {
    HealthResponse {
        url,
        status: 200,
        environment_header: header,
        body,
    }
}

#[test]
fn whole_check_learns_and_binds_a_non_packaged_project() {
    let custom = resolve_connection(
        "acme-v1",
        &overrides(
            "https://a",
            "https://s",
            "https://acme-default-rtdb.firebaseio.com",
            "k",
        ),
    )
    .expect("ok");
    let acme = json!({"environmentId": "acme-v1", "projectId": "acme"});
    let other = json!({"environmentId": "acme-v1", "projectId": "other"});
    let empty = json!({"environmentId": "acme-v1", "projectId": ""});
    let api = |b| response("https://a/healthz/", Some("acme-v1"), b);
    let stream = |b| response("https://s/health", Some("acme-v1"), b);
    let bound = verify_health(&custom, api(&acme), stream(&acme)).expect("bound");
    assert_eq!(bound.project_id.as_deref(), Some("acme"));
    assert_eq!(
        verify_health(&custom, api(&empty), stream(&acme))
            .expect_err("no project")
            .to_string(),
        "Canon runtime endpoint https://a/healthz/ does not match environment acme-v1"
    );
    assert_eq!(
        verify_health(&custom, api(&acme), stream(&other))
            .expect_err("stream differs")
            .to_string(),
        "Canon runtime endpoint https://s/health does not match environment acme-v1"
    );
    // Both services agree on a project the RTDB host does not belong to.
    assert_eq!(
        verify_health(&custom, api(&other), stream(&other))
            .expect_err("rtdb")
            .to_string(),
        "Canon RTDB endpoint for acme-v1 must belong to project other"
    );
    // A packaged connection keeps its packaged project.
    let good = json!({"environmentId": "canon-dev-v1", "projectId": "canonmail-dev"});
    let c = dev();
    let checked = verify_health(
        &c,
        response("https://a/healthz/", Some("canon-dev-v1"), &good),
        response("https://s/health", Some("canon-dev-v1"), &good),
    )
    .expect("ok");
    assert_eq!(checked, c);
}
