//! Tests of `files`: paths, the `agents.json` reader and bootstrap merge with their exact errors,
//! the write procedure (bytes, modes, atomicity, other entries kept), and
//! `pending-registrations.json`.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt as _;

use super::*;
use crate::environment::{resolve_connection, ConnectionOverrides};
use proptest::prelude::*;
use serde_json::json;

fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name: &str| map.get(name).cloned()
}

#[test]
fn canon_home_rule() {
    let home = Path::new("/home/u");
    for (value, expected) in [
        (None, Some("/home/u/.canon")),
        (Some("  "), Some("/home/u/.canon")),
        (Some(" ~/x "), Some("/home/u/x")),
        (Some("~"), Some("/home/u")),
        (Some("/srv/canon"), Some("/srv/canon")),
        (Some("rel"), Some("rel")),
    ] {
        assert_eq!(
            canon_home(value, Some(home)),
            expected.map(PathBuf::from),
            "{value:?}"
        );
    }
    assert_eq!(canon_home(None, None), None);
    assert_eq!(canon_home(Some("/abs"), None), Some(PathBuf::from("/abs")));
}

#[test]
fn agents_path_overrides() {
    let home = Some(Path::new("/home/u"));
    let paths = |pairs: &[(&str, &str)]| CanonPaths::from_env(&env(pairs), home).expect("paths");
    let p = paths(&[]);
    assert_eq!(p.canon_home, PathBuf::from("/home/u/.canon"));
    assert_eq!(p.agents, PathBuf::from("/home/u/.canon/agents.json"));
    assert_eq!(
        p.pending,
        PathBuf::from("/home/u/.canon/pending-registrations.json")
    );
    let p = paths(&[
        ("CANON_HOME", "/srv/c"),
        ("CANON_AGENTS_PATH", " ~/p.json "),
    ]);
    assert_eq!(p.agents, PathBuf::from("/home/u/p.json"));
    assert_eq!(
        p.pending,
        PathBuf::from("/srv/c/pending-registrations.json")
    );
    let p = paths(&[
        ("CANON_AGENTS_FILE", "/f.json"),
        ("CANON_AGENTS_PATH", "/p.json"),
    ]);
    assert_eq!(p.agents, PathBuf::from("/f.json"));
    let p = paths(&[
        ("CANON_AGENTS_FILE", "  "),
        ("CANON_AGENTS_PATH", "/p.json"),
    ]);
    assert_eq!(p.agents, PathBuf::from("/p.json"));
}

#[test]
fn read_errors_are_exact() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("agents.json");
    let shown = path.display().to_string();
    // Missing file: empty.
    assert!(AgentProfiles::read(&path)
        .expect("empty")
        .names()
        .is_empty());
    for (text, expected) in [
        (
            "[]".to_owned(),
            format!("{shown} must be a JSON object keyed by profile name"),
        ),
        (
            "\"x\"".to_owned(),
            format!("{shown} must be a JSON object keyed by profile name"),
        ),
        (
            r#"{"ok": {}, "bad": "sk"}"#.to_owned(),
            format!("Canon profile \"bad\" in {shown} must be an object"),
        ),
    ] {
        fs::write(&path, &text).expect("write");
        let e = AgentProfiles::read(&path).expect_err("refused").to_string();
        assert_eq!(e, expected, "{text}");
    }
    fs::write(&path, "{not json").expect("write");
    let e = AgentProfiles::read(&path).expect_err("refused").to_string();
    assert!(e.starts_with(&format!("Could not parse {shown}: ")), "{e}");
    // A directory where the file should be: an I/O error.
    let as_dir = dir.path().join("dir.json");
    fs::create_dir(&as_dir).expect("mkdir");
    let e = AgentProfiles::read(&as_dir)
        .expect_err("refused")
        .to_string();
    assert!(
        e.starts_with(&format!("Could not read {}: ", as_dir.display())),
        "{e}"
    );
}

#[test]
fn bootstrap_errors_are_exact() {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    for (raw, expected) in [
        (
            "not json".to_owned(),
            "CANON_AGENTS_JSON_BOOTSTRAP must be agents.json JSON or base64 JSON",
        ),
        (
            b64("not json"),
            "CANON_AGENTS_JSON_BOOTSTRAP must be agents.json JSON or base64 JSON",
        ),
        (
            "[1]".to_owned(),
            "CANON_AGENTS_JSON_BOOTSTRAP must be a JSON object keyed by profile name",
        ),
        (
            b64("[1]"),
            "CANON_AGENTS_JSON_BOOTSTRAP must be a JSON object keyed by profile name",
        ),
        (
            r#"{" ": {}}"#.to_owned(),
            "CANON_AGENTS_JSON_BOOTSTRAP contains an empty profile name",
        ),
        (
            r#"{" ops ": 1}"#.to_owned(),
            "CANON_AGENTS_JSON_BOOTSTRAP profile \"ops\" must be an object",
        ),
    ] {
        assert_eq!(
            parse_bootstrap(&raw).expect_err("refused").to_string(),
            expected,
            "{raw}"
        );
    }
    let plain = parse_bootstrap(r#" {" ops ": {"apiKey": "k"}} "#).expect("json");
    assert_eq!(plain[0].0, "ops");
    let encoded = b64(r#"{"ops": {"apiKey": "k"}}"#);
    let wrapped = format!("{}\n{}", &encoded[..10], &encoded[10..]);
    assert_eq!(parse_bootstrap(&wrapped).expect("base64"), plain);
    let unpadded = encoded.trim_end_matches('=');
    assert_eq!(
        parse_bootstrap(unpadded).expect("base64 without padding"),
        plain
    );
}

#[test]
fn bootstrap_merges_without_overwriting() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("fresh").join(".canon");
    let path = home.join("agents.json");
    // A fresh volume: the file and its directory are created.
    let profiles = load_agents(&path, Some(r#"{"ops": {"apiKey": "k1"}}"#)).expect("merged");
    assert_eq!(profiles.names(), ["ops"]);
    assert_eq!(mode(&home), 0o700);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(
        fs::read_to_string(&path).expect("read"),
        "{\n  \"ops\": {\n    \"apiKey\": \"k1\"\n  }\n}"
    );
    // An existing name is never overwritten; a new one is added.
    let profiles = load_agents(
        &path,
        Some(r#"{"ops": {"apiKey": "other"}, "new": {"apiKey": "k2"}}"#),
    )
    .expect("merged");
    assert_eq!(profiles.names(), ["new", "ops"]);
    assert_eq!(profiles.get("ops").expect("ops")["apiKey"], "k1");
    // Nothing to add: the file is not rewritten.
    let before = fs::metadata(&path)
        .expect("meta")
        .modified()
        .expect("mtime");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod");
    load_agents(&path, Some(r#"{"ops": {}}"#)).expect("nothing new");
    assert_eq!(mode(&path), 0o640, "not rewritten");
    assert_eq!(
        fs::metadata(&path)
            .expect("meta")
            .modified()
            .expect("mtime"),
        before
    );
    // A blank bootstrap is unset: a missing file stays missing.
    let other = dir.path().join("none.json");
    load_agents(&other, Some("  ")).expect("unset");
    assert!(!other.exists());
    // An empty bootstrap object still writes a file that did not exist.
    load_agents(&other, Some("{}")).expect("written");
    assert_eq!(fs::read_to_string(&other).expect("read"), "{}");
}

#[test]
fn corrupt_file_is_reported_and_left_untouched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("agents.json");
    let corrupt = b"{\"ops\": {\"apiKey\": \"k\"},,}";
    fs::write(&path, corrupt).expect("write");
    let e = load_agents(&path, Some(r#"{"new": {"apiKey": "k2"}}"#)).expect_err("refused");
    assert!(
        e.to_string()
            .starts_with(&format!("Could not parse {}: ", path.display())),
        "{e}"
    );
    assert_eq!(fs::read(&path).expect("read"), corrupt);
    // A bad bootstrap leaves a good file untouched too.
    fs::write(&path, b"{}").expect("write");
    load_agents(&path, Some("{\"x\": 1}")).expect_err("refused");
    assert_eq!(fs::read(&path).expect("read"), b"{}");
    // No temp file is left behind.
    let leftovers: Vec<_> = fs::read_dir(dir.path())
        .expect("list")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn saving_replaces_one_entry_and_keeps_the_others() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("agents.json");
    fs::write(
        &path,
        r#"{"coms": {"clientType": "coms", "apiKey": "c", "extra": [1, 2.5, {"z": "é"}]}, "ops": {"apiKey": "old", "stale": true}}"#,
    )
    .expect("write");
    let mut profiles = AgentProfiles::read(&path).expect("read");
    let connection =
        resolve_connection("canon-prod-v1", &ConnectionOverrides::default()).expect("ok");
    let entry = crate::credentials::hermes_profile_entry(
        &canon_wire::secret::ApiKey::new("sk-new"),
        "agent-1",
        "Ops",
        "2026-01-02T03:04:05Z",
        &connection,
    );
    profiles.insert("ops", entry);
    profiles.save().expect("saved");
    let expected = "{\n  \"coms\": {\n    \"apiKey\": \"c\",\n    \"clientType\": \"coms\",\n    \"extra\": [\n      1,\n      2.5,\n      {\n        \"z\": \"\\u00e9\"\n      }\n    ]\n  },\n  \"ops\": {\n    \"agentId\": \"agent-1\",\n    \"agentName\": \"Ops\",\n    \"apiKey\": \"sk-new\",\n    \"baseUrl\": \"https://api.canonmail.com\",\n    \"clientType\": \"hermes\",\n    \"environmentId\": \"canon-prod-v1\",\n    \"firebaseApiKey\": \"AIzaSyDnX6AERXfdtZxf7qM9JjyMmYxF_ovPL78\",\n    \"registeredAt\": \"2026-01-02T03:04:05Z\",\n    \"rtdbUrl\": \"https://canonmail-prod-default-rtdb.europe-west1.firebasedatabase.app\",\n    \"streamUrl\": \"https://stream.canonmail.com\"\n  }\n}";
    assert_eq!(fs::read_to_string(&path).expect("read"), expected);
    assert_eq!(mode(&path), 0o600);
}

#[test]
fn removing_one_entry_keeps_the_others_byte_for_byte() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("agents.json");
    fs::write(
        &path,
        r#"{"coms": {"clientType": "coms", "apiKey": "c"}, "ops": {"apiKey": "k"}, "z": {"n": 1}}"#,
    )
    .expect("write");
    let mut profiles = AgentProfiles::read(&path).expect("read");
    assert!(profiles.remove("ops"));
    assert!(!profiles.remove("ops"), "already gone");
    assert!(!profiles.remove("missing"));
    profiles.save().expect("saved");
    assert_eq!(
        fs::read_to_string(&path).expect("read"),
        "{\n  \"coms\": {\n    \"apiKey\": \"c\",\n    \"clientType\": \"coms\"\n  },\n  \"z\": {\n    \"n\": 1\n  }\n}"
    );
    assert_eq!(
        AgentProfiles::read(&path).expect("read").names(),
        ["coms", "z"]
    );
    assert_eq!(mode(&path), 0o600);
}

/// A link planted at the temp file's name (the directory is the user's, but a link is how a
/// write is made to land elsewhere) is replaced, never followed: the file it points to keeps
/// its bytes, and the target gets the new document as a regular file.
#[test]
fn a_link_at_the_temp_name_is_never_followed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("agents.json");
    let victim = dir.path().join("victim.txt");
    fs::write(&victim, "keep me").expect("write");
    let temp = dir
        .path()
        .join(format!(".agents.json.{}.tmp", std::process::id()));
    std::os::unix::fs::symlink(&victim, &temp).expect("a link");
    write_json_file(&path, &json!({"a": {}})).expect("written");
    assert_eq!(fs::read_to_string(&victim).expect("read"), "keep me");
    let meta = fs::symlink_metadata(&path).expect("meta");
    assert!(meta.is_file(), "a regular file, not the planted link");
    assert_eq!(
        fs::read_to_string(&path).expect("read"),
        "{\n  \"a\": {}\n}"
    );
    assert!(fs::symlink_metadata(&temp).is_err(), "no temp file left");
}

#[test]
fn write_is_atomic_and_cleans_up_on_failure() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("agents.json");
    fs::write(&path, "{}").expect("write");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).expect("meta"));
    let before = inode(&path);
    write_json_file(&path, &json!({"a": {}})).expect("written");
    // A new file took the old one's place (rename), with mode 0600.
    assert_ne!(inode(&path), before);
    assert_eq!(mode(&path), 0o600);
    // A stale temp file of this process (from a crash) is overwritten, not appended to.
    let temp = dir
        .path()
        .join(format!(".agents.json.{}.tmp", std::process::id()));
    fs::write(&temp, "garbage garbage garbage").expect("write");
    write_json_file(&path, &json!({"b": {}})).expect("written");
    assert!(!temp.exists());
    assert_eq!(
        fs::read_to_string(&path).expect("read"),
        "{\n  \"b\": {}\n}"
    );
    // The target cannot be replaced (it is a non-empty directory): the error names it, and no
    // temp file is left.
    let blocked = dir.path().join("blocked.json");
    fs::create_dir(&blocked).expect("mkdir");
    fs::write(blocked.join("x"), "").expect("write");
    let e = write_json_file(&blocked, &json!({}))
        .expect_err("refused")
        .to_string();
    assert!(
        e.starts_with(&format!("Could not write {}: ", blocked.display())),
        "{e}"
    );
    let temp = dir
        .path()
        .join(format!(".blocked.json.{}.tmp", std::process::id()));
    assert!(!temp.exists());
}

fn connection(id: &str) -> Connection {
    resolve_connection(id, &ConnectionOverrides::default()).expect("ok")
}

#[test]
fn pending_registrations_read_errors_are_exact() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("pending-registrations.json");
    let shown = path.display().to_string();
    assert!(PendingRegistrations::read(&path)
        .expect("empty")
        .get("x")
        .is_none());
    fs::write(&path, "[]").expect("write");
    assert_eq!(
        PendingRegistrations::read(&path)
            .expect_err("refused")
            .to_string(),
        format!("{shown} must be a JSON object keyed by profile name")
    );
    fs::write(&path, r#"{"ops": []}"#).expect("write");
    assert_eq!(
        PendingRegistrations::read(&path)
            .expect_err("refused")
            .to_string(),
        "Pending Canon registration \"ops\" must be an object"
    );
    fs::write(&path, "{").expect("write");
    let e = PendingRegistrations::read(&path)
        .expect_err("refused")
        .to_string();
    assert!(
        e.starts_with(&format!(
            "Could not read pending Canon registrations from {shown}: "
        )),
        "{e}"
    );
}

#[test]
fn pending_registration_binding() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("canon").join("pending-registrations.json");
    let mut pending = PendingRegistrations::read(&path).expect("empty");
    assert!(pending.ensure_local_registration_id("ops", 0xabc));
    assert!(!pending.ensure_local_registration_id("ops", 0xdef), "kept");
    assert_eq!(
        pending.get("ops").expect("entry")["localRegistrationId"],
        "hermes-00000000000000000000000000000abc"
    );
    let prod = connection("canon-prod-v1");
    pending.bind("ops", &prod).expect("not submitted yet");
    pending.set("ops", "requestId", json!("req-1"));
    pending.save().expect("saved");
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().expect("dir")), 0o700);

    let mut pending = PendingRegistrations::read(&path).expect("read back");
    pending.bind("ops", &prod).expect("same connection");
    assert_eq!(
        pending
            .bind("ops", &connection("canon-dev-v1"))
            .expect_err("other environment")
            .to_string(),
        "Pending Canon registration for ops is not bound to this environment"
    );
    // Not yet submitted: rebinding to another environment is allowed.
    pending.ensure_local_registration_id("dev", 1);
    pending.bind("dev", &prod).expect("bound");
    pending
        .bind("dev", &connection("canon-dev-v1"))
        .expect("rebound");
    assert!(pending.remove("ops"));
    assert!(!pending.remove("ops"));
    pending.save().expect("saved");
    let text = fs::read_to_string(&path).expect("read");
    assert!(
        text.starts_with("{\n  \"dev\": {\n    \"baseUrl\": \"https://dev.api.canonmail.com\""),
        "{text}"
    );
}

#[test]
fn a_submission_is_recorded_and_read_back_as_a_ticket() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("pending-registrations.json");
    let mut pending = PendingRegistrations::read(&path).expect("empty");
    assert_eq!(pending.ticket("ops"), None, "no entry");
    pending.ensure_local_registration_id("ops", 7);
    assert_eq!(pending.ticket("ops"), None, "not submitted");
    pending.set("ops", "requestId", json!("  "));
    assert_eq!(pending.ticket("ops"), None, "a blank request id is none");

    let ticket = RegistrationTicket {
        request_id: "req-1".to_owned(),
        poll_token: Some("tok".to_owned()),
    };
    pending.record_submission("ops", &ticket, "2026-01-01T00:00:00Z");
    assert_eq!(pending.ticket("ops"), Some(ticket));
    let entry = pending.get("ops").expect("entry");
    assert_eq!(entry["submittedAt"], "2026-01-01T00:00:00Z");
    assert_eq!(
        entry["localRegistrationId"],
        "hermes-00000000000000000000000000000007"
    );

    // No poll token: written as null (as the reference does) and read back as none.
    let bare = RegistrationTicket {
        request_id: " req-2 ".to_owned(),
        poll_token: None,
    };
    pending.record_submission("dev", &bare, "2026-01-01T00:00:01Z");
    pending.save().expect("saved");
    let pending = PendingRegistrations::read(&path).expect("read back");
    assert_eq!(pending.get("dev").expect("entry")["pollToken"], Value::Null);
    assert_eq!(
        pending.ticket("dev"),
        Some(RegistrationTicket {
            request_id: "req-2".to_owned(),
            poll_token: None,
        })
    );
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn agents_file() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(
        any::<String>(),
        prop::collection::btree_map(any::<String>(), json_value(), 0..4),
        0..4,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(k, v)| (k, Value::Object(v.into_iter().collect())))
            .collect()
    })
}

proptest! {
    #[test]
    fn agents_json_round_trips_through_the_writer(entries in agents_file()) {
        let value = Value::Object(entries);
        let text = crate::pyjson::dumps(&value);
        prop_assert!(text.is_ascii());
        prop_assert!(!text.ends_with('\n'));
        let path = Path::new("/x/agents.json");
        let parsed = AgentProfiles::parse(path, &text).expect("our own output parses");
        prop_assert_eq!(parsed.to_value(), value.clone());
        // Writing is deterministic: parse, write, and the bytes are the same.
        prop_assert_eq!(crate::pyjson::dumps(&parsed.to_value()), text);
    }
}
