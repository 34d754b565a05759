//! The real `canon-hermes serve --stdio` binary configured through `canon_profiles`
//! (cli.md §5, §6): a `CANON_AGENT` profile of `agents.json` and one bootstrapped from
//! `CANON_AGENTS_JSON_BOOTSTRAP`, each connecting with its own snapshot after the environment's
//! health check; a bare key with a packaged environment id taking the packaged URLs; a
//! non-packaged environment whose project comes from the health check and binds the RTDB URL;
//! credentials that do not resolve leaving the daemon unconfigured with one log line and no
//! secret; the platform config of `adapter.connect` (its `api_key`, an `extra.agent` profile, a
//! profile it names that is missing); and `CANON_TURN_VERBOSITY` (refused when unknown, quiet
//! turns publish no live bubble).

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Stdio;

use canon_sim::config::SimConfig;
use canon_sim::{Sim, SimHandle, DEFAULT_AGENT};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt as _;

use super::shim_support::{complete_turn, ctx, open_turn, sim, Shim, WAIT};

/// The profile name the tests save the simulator's agent under.
const PROFILE: &str = "canon-sim";

/// The variables that would put the daemon in the direct test mode, removed so the resolver
/// decides (an empty value removes the variable).
const NO_DIRECT: [(&str, &str); 4] = [
    ("CANON_API_KEY", ""),
    ("CANON_BASE_URL", ""),
    ("CANON_STREAM_URL", ""),
    ("CANON_AGENTS_FILE", ""),
];

/// A simulator impersonating `environment` with `project`.
async fn sim_in(environment: &str, project: &str) -> SimHandle {
    let mut config = SimConfig::for_tests();
    config.environment.environment_id = environment.to_owned();
    config.environment.project_id = project.to_owned();
    Sim::start(config).await.expect("the simulator starts")
}

/// Writes `agents.json` with the simulator's agent under [`PROFILE`] (changed by `patch`) and
/// another runtime's profile beside it; returns the Canon home.
fn home_with_profile(sim: &SimHandle, patch: Value) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("temp dir");
    let mut agents = sim.agents_json(PROFILE);
    if let (Some(entry), Value::Object(patch)) = (agents[PROFILE].as_object_mut(), patch) {
        entry.extend(patch);
    }
    agents["coms"] = json!({"clientType": "coms", "apiKey": "other-runtime-key"});
    std::fs::write(home.path().join("agents.json"), agents.to_string()).expect("write");
    home
}

fn path_of(home: &Path) -> String {
    home.to_str().expect("a UTF-8 temp dir").to_owned()
}

/// The simulator's requests to exactly `path`.
fn requests(sim: &SimHandle, path: &str) -> usize {
    sim.journal(0, Some(path))
        .iter()
        .filter(|e| e.path == path)
        .count()
}

/// `probe` without network verification; its body.
async fn probe(shim: &mut Shim) -> Value {
    shim.request("probe", json!({"config": null, "verify": false}))
        .await["body"]
        .clone()
}

/// Spawns with stderr captured at `info`; returns the shim.
fn spawn_captured(sim: &SimHandle, env: &[(&str, &str)]) -> Shim {
    Shim::spawn_logged(sim, "info", Stdio::piped(), env)
}

/// Closes the daemon and returns what it logged.
async fn close_captured(mut shim: Shim) -> String {
    let mut stderr = shim.child.stderr.take().expect("piped stderr");
    assert_eq!(shim.close().await, Some(0));
    let mut text = String::new();
    tokio::time::timeout(WAIT, stderr.read_to_string(&mut text))
        .await
        .expect("stderr ends")
        .expect("stderr reads");
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn canon_agent_profile_connects_with_its_snapshot_after_the_health_check() {
    let sim = sim().await;
    let home = home_with_profile(&sim, json!({}));
    let mut env = NO_DIRECT.to_vec();
    env.push(("CANON_AGENT", PROFILE));
    let mut shim = Shim::spawn_in(&sim, home, &env);
    assert_eq!(shim.hello().await["ok"], true);
    assert_eq!(
        probe(&mut shim).await,
        json!({"configured": true, "profile": PROFILE, "environment_id": "canon-dev-v1",
               "base_url": sim.base_url(), "stream_url": sim.stream_url(), "seed": null})
    );
    assert_eq!(
        sim.journal(0, None).len(),
        0,
        "probe without verify stays offline"
    );
    shim.connect(&sim).await;
    assert_eq!(requests(&sim, "/healthz/"), 1, "the API health check ran");
    assert_eq!(requests(&sim, "/health"), 1, "the stream health check ran");
    let me = sim.journal(0, Some("/agents/me"));
    assert_eq!(me.len(), 1);
    let auth = me[0]
        .headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .map(|(_, value)| value.clone());
    assert_eq!(
        auth,
        Some(format!("Bearer {DEFAULT_AGENT}")),
        "the profile's key"
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn bootstrapped_profile_is_saved_0600_and_used_as_the_only_profile() {
    use base64::Engine as _;
    let sim = sim().await;
    let home = tempfile::tempdir().expect("temp dir");
    let canon_home = home.path().join("fresh-volume");
    let bootstrap =
        base64::engine::general_purpose::STANDARD.encode(sim.agents_json(PROFILE).to_string());
    let canon_home_text = path_of(&canon_home);
    let mut env = NO_DIRECT.to_vec();
    env.push(("CANON_HOME", &canon_home_text));
    env.push(("CANON_AGENTS_JSON_BOOTSTRAP", &bootstrap));
    let mut shim = Shim::spawn_with(&sim, &env);
    assert_eq!(shim.hello().await["ok"], true);
    assert_eq!(probe(&mut shim).await["profile"], PROFILE);
    shim.connect(&sim).await;
    assert_eq!(shim.close().await, Some(0));
    let file = canon_home.join("agents.json");
    let mode = |p: &Path| std::fs::metadata(p).expect("exists").permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&canon_home), 0o700);
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("JSON");
    assert_eq!(saved, sim.agents_json(PROFILE));
}

#[tokio::test(flavor = "multi_thread")]
async fn bare_key_with_a_packaged_environment_takes_the_packaged_urls() {
    let sim = sim().await;
    let mut env = NO_DIRECT.to_vec();
    env.push(("CANON_API_KEY", "sk-packaged-test"));
    env.push(("CANON_ENVIRONMENT_ID", "canon-prod-v1"));
    let mut shim = Shim::spawn_with(&sim, &env);
    assert_eq!(shim.hello().await["ok"], true);
    // No network here: the packaged production URLs must not be contacted by a test.
    assert_eq!(
        probe(&mut shim).await,
        json!({"configured": true, "environment_id": "canon-prod-v1",
               "base_url": "https://api.canonmail.com",
               "stream_url": "https://stream.canonmail.com", "seed": null})
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn non_packaged_environment_binds_the_project_its_health_check_reports() {
    let sim = sim_in("acme-v1", "acme").await;
    // The simulator's RTDB URL is on loopback, which every project accepts.
    let home = home_with_profile(&sim, json!({}));
    let mut env = NO_DIRECT.to_vec();
    env.push(("CANON_AGENT", PROFILE));
    let mut shim = Shim::spawn_in(&sim, home, &env);
    shim.connect(&sim).await;
    assert_eq!(shim.close().await, Some(0));

    // A Firebase RTDB host of another project: refused after the health check.
    let home = home_with_profile(
        &sim,
        json!({"rtdbUrl": "https://other-rtdb.firebaseio.com"}),
    );
    let mut shim = Shim::spawn_in(&sim, home, &env);
    let connect = shim.try_connect().await;
    assert_eq!(
        connect["body"],
        json!({"connected": false, "fatal": {"code": "environment_mismatch",
               "message": "Canon RTDB endpoint for acme-v1 must belong to project acme",
               "retryable": false}}),
        "{connect}"
    );
    assert_eq!(
        requests(&sim, "/agents/me"),
        1,
        "only the first daemon got that far"
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn packaged_environment_must_report_its_packaged_project() {
    let sim = sim_in("canon-dev-v1", "canonmail-prod").await;
    let home = home_with_profile(&sim, json!({}));
    let mut env = NO_DIRECT.to_vec();
    env.push(("CANON_AGENT", PROFILE));
    let mut shim = Shim::spawn_in(&sim, home, &env);
    let connect = shim.try_connect().await;
    let message = format!(
        "Canon runtime endpoint {}/healthz/ does not match environment canon-dev-v1",
        sim.base_url()
    );
    assert_eq!(
        connect["body"]["fatal"]["code"], "environment_mismatch",
        "{connect}"
    );
    assert_eq!(connect["body"]["fatal"]["message"], message.as_str());
    assert_eq!(requests(&sim, "/agents/me"), 0);
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn unresolved_credentials_leave_the_daemon_unconfigured_and_log_why_once() {
    let sim = sim().await;
    let missing = "CANON_API_KEY, config.api_key, or CANON_AGENT profile is required for the \
                   Canon platform";
    let home = home_with_profile(&sim, json!({}));
    let home_text = path_of(home.path());
    let cases: [(&[(&str, &str)], String); 3] = [
        (
            &[("CANON_API_KEY", "sk-secret-never-logged")],
            "CANON_ENVIRONMENT_ID is required when CANON_API_KEY is used directly".to_owned(),
        ),
        (
            &[("CANON_AGENT", "nope"), ("CANON_HOME", &home_text)],
            format!(
                "Canon profile \"nope\" not found in {}/agents.json. Set \
                 CANON_AGENTS_JSON_BOOTSTRAP, set CANON_API_KEY, or re-run registration.",
                home_text
            ),
        ),
        (
            &[("CANON_AGENT", "coms"), ("CANON_HOME", &home_text)],
            "Canon profile \"coms\" is not registered for Hermes".to_owned(),
        ),
    ];
    for (extra, logged) in cases {
        let mut env = NO_DIRECT.to_vec();
        env.extend_from_slice(extra);
        let mut shim = spawn_captured(&sim, &env);
        assert_eq!(shim.hello().await["ok"], true);
        assert_eq!(probe(&mut shim).await["configured"], false, "{extra:?}");
        let connect = shim.try_connect().await;
        assert_eq!(
            connect["body"],
            json!({"connected": false, "fatal": {"code": "missing_api_key",
                   "message": missing, "retryable": false}}),
            "{extra:?}"
        );
        let stderr = close_captured(shim).await;
        assert_eq!(stderr.matches(logged.as_str()).count(), 1, "{stderr}");
        for secret in ["sk-secret-never-logged", "other-runtime-key"] {
            assert!(!stderr.contains(secret), "{stderr}");
        }
        assert!(!stderr.contains(&sim.api_key()), "{stderr}");
    }
    assert!(sim.journal(0, None).is_empty(), "nothing reached Canon");
}

/// The `authorization` header of the daemon's one `GET /agents/me`, as the simulator journals
/// it (the agent the key belongs to, never the key).
fn me_authorization(sim: &SimHandle) -> Option<String> {
    let me = sim.journal(0, Some("/agents/me"));
    assert_eq!(me.len(), 1, "one GET /agents/me");
    me[0]
        .headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .map(|(_, value)| value.clone())
}

/// `adapter.connect` with this platform config (Hermes' `platforms.canon`: `extra`, `api_key`,
/// `token`) and the host settings Hermes sends; the response.
async fn connect_with_platform(shim: &mut Shim, config: Value) -> Value {
    shim.try_connect_with(config, json!({"streaming_enabled": true}))
        .await
}

/// cli.md §5.1: in the gateway the platform config comes before the env defaults. Here the key
/// reaches the daemon only as the connect's `api_key`, the environment and URLs only as extras:
/// the daemon, unconfigured at start, connects with them after the environment's health check
/// and keeps them (its `check_fn` probe now answers configured).
#[tokio::test(flavor = "multi_thread")]
async fn platform_config_api_key_connects() {
    let sim = sim().await;
    let home = tempfile::tempdir().expect("temp dir");
    let mut shim = Shim::spawn_in(&sim, home, &NO_DIRECT);
    assert_eq!(shim.hello().await["ok"], true);
    assert_eq!(
        probe(&mut shim).await,
        json!({"configured": false, "seed": null})
    );
    let connect = connect_with_platform(
        &mut shim,
        json!({"extra": {"environment_id": "canon-dev-v1", "base_url": sim.base_url(),
                         "CANON_STREAM_URL": sim.stream_url(), "turn_verbosity": "auto"},
               "api_key": sim.api_key(), "typing_indicator": true}),
    )
    .await;
    assert_eq!(connect["body"]["connected"], true, "{connect}");
    assert_eq!(
        requests(&sim, "/healthz/"),
        1,
        "the environment was verified"
    );
    assert_eq!(requests(&sim, "/health"), 1);
    assert_eq!(
        me_authorization(&sim),
        Some(format!("Bearer {DEFAULT_AGENT}")),
        "the platform config's key"
    );
    assert_eq!(
        probe(&mut shim).await,
        json!({"configured": true, "environment_id": "canon-dev-v1",
               "base_url": sim.base_url(), "stream_url": sim.stream_url(), "seed": null})
    );
    assert_eq!(shim.close().await, Some(0));
}

/// cli.md §5.1 rule 2: `extra.agent` names the `agents.json` profile when `CANON_AGENT` is
/// unset. With two Hermes profiles the environment alone resolves nothing (it names none);
/// the connect's extra picks one and the daemon connects with that profile's key.
#[tokio::test(flavor = "multi_thread")]
async fn platform_config_agent_names_the_profile() {
    let sim = sim().await;
    let home = tempfile::tempdir().expect("temp dir");
    let mut agents = sim.agents_json(PROFILE);
    let mut other = agents[PROFILE].clone();
    other["apiKey"] = json!("sk-other-profile-never-used");
    agents["other"] = other;
    std::fs::write(home.path().join("agents.json"), agents.to_string()).expect("write");
    let mut shim = Shim::spawn_in(&sim, home, &NO_DIRECT);
    assert_eq!(shim.hello().await["ok"], true);
    assert_eq!(
        probe(&mut shim).await,
        json!({"configured": false, "seed": null,
               "error": "Multiple Canon profiles are available. Set CANON_AGENT to choose one."})
    );
    let connect = connect_with_platform(
        &mut shim,
        json!({"extra": {"agent": PROFILE}, "typing_indicator": true}),
    )
    .await;
    assert_eq!(connect["body"]["connected"], true, "{connect}");
    // The other profile's key is unknown to Canon: only the named one connects.
    assert_eq!(
        me_authorization(&sim),
        Some(format!("Bearer {DEFAULT_AGENT}")),
        "the named profile's key"
    );
    assert_eq!(probe(&mut shim).await["profile"], PROFILE);
    assert_eq!(shim.close().await, Some(0));
}

/// A profile the platform config names but `agents.json` lacks: the connect is refused with
/// the exact `missing_api_key` fatal of cli.md §5.1, the resolver's exact message is logged
/// once and is what a probe of that config answers, and nothing reaches Canon. The daemon's
/// own profile (the only one, so it resolved at start) is not used instead.
#[tokio::test(flavor = "multi_thread")]
async fn platform_config_profile_that_is_missing_refuses_the_connect() {
    let sim = sim().await;
    let home = home_with_profile(&sim, json!({}));
    let agents_path = home.path().join("agents.json");
    let not_found = format!(
        "Canon profile \"ghost\" not found in {}. Set CANON_AGENTS_JSON_BOOTSTRAP, set \
         CANON_API_KEY, or re-run registration.",
        agents_path.display()
    );
    let home_text = path_of(home.path());
    let mut env = NO_DIRECT.to_vec();
    env.push(("CANON_HOME", &home_text));
    let mut shim = spawn_captured(&sim, &env);
    assert_eq!(shim.hello().await["ok"], true);
    assert_eq!(
        probe(&mut shim).await["profile"],
        PROFILE,
        "resolved at start"
    );
    let asked = shim
        .request(
            "probe",
            json!({"config": {"extra": {"agent": "ghost"}, "enabled": true}, "verify": false}),
        )
        .await;
    assert_eq!(
        asked["body"],
        json!({"configured": false, "seed": null, "error": not_found})
    );
    let connect = connect_with_platform(
        &mut shim,
        json!({"extra": {"agent": "ghost"}, "typing_indicator": true}),
    )
    .await;
    assert_eq!(
        connect["body"],
        json!({"connected": false, "fatal": {"code": "missing_api_key",
               "message": "CANON_API_KEY, config.api_key, or CANON_AGENT profile is required \
                           for the Canon platform",
               "retryable": false}}),
        "{connect}"
    );
    assert_eq!(probe(&mut shim).await["error"], not_found.as_str());
    let stderr = close_captured(shim).await;
    // Once for the probe of that config, once for the connect.
    assert_eq!(stderr.matches(not_found.as_str()).count(), 2, "{stderr}");
    for secret in [sim.api_key(), "other-runtime-key".to_owned()] {
        assert!(!stderr.contains(&secret), "{stderr}");
    }
    assert!(sim.journal(0, None).is_empty(), "nothing reached Canon");
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_turn_verbosity_refuses_the_adapter_before_any_canon_call() {
    let sim = sim().await;
    let refused = json!({"connected": false, "fatal": {"code": "invalid_config",
        "message": "CANON_TURN_VERBOSITY must be 'auto', 'verbose', or 'quiet'",
        "retryable": false}});
    let mut shim = Shim::spawn_with(&sim, &[("CANON_TURN_VERBOSITY", "loud")]);
    let connect = shim.try_connect().await;
    assert_eq!(connect["body"], refused, "{connect}");
    assert_eq!(shim.close().await, Some(0));

    // The platform extra, when the variable is unset.
    let mut shim = Shim::spawn(&sim);
    let connect = shim
        .try_connect_with(
            json!({"extra": {"turn_verbosity": "LOUDER"}}),
            json!({"streaming_enabled": true}),
        )
        .await;
    assert_eq!(connect["body"], refused, "{connect}");
    assert_eq!(shim.close().await, Some(0));
    assert!(
        sim.journal(0, None).is_empty(),
        "refused before any Canon call"
    );
}

/// One streamed turn in the direct conversation with this environment and platform extra;
/// how many live-bubble (`/streaming`) writes carried text (a quiet turn only blanks and clears
/// the bubble, turns.md §6.2).
async fn streamed_turn(env: &[(&str, &str)], extra: Value) -> usize {
    let sim = sim().await;
    let mut shim = Shim::spawn_with(&sim, env);
    shim.connect_with(
        &sim,
        json!({"extra": extra, "typing_indicator": true}),
        json!({"streaming_enabled": true}),
    )
    .await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "hello").await;
    let sent = shim
        .request(
            "adapter.send",
            json!({"chat_id": canon_sim::DEFAULT_CONVERSATION, "content": "Hi",
                   "metadata": {"expect_edits": true}, "ctx": ctx()}),
        )
        .await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    let edited = shim
        .request(
            "adapter.edit",
            json!({"chat_id": canon_sim::DEFAULT_CONVERSATION, "message_id": turn_id,
                   "content": "Hi there.", "finalize": true, "ctx": ctx()}),
        )
        .await;
    assert_eq!(edited["body"]["success"], true, "{edited}");
    complete_turn(&mut shim, &event_ref).await;
    sim.wait_for("the final", WAIT, |s| {
        s.messages
            .iter()
            .any(|m| m.message["senderId"] == DEFAULT_AGENT)
    })
    .await
    .expect("the answer arrives");
    assert_eq!(shim.close().await, Some(0));
    sim.journal(0, Some("/streaming"))
        .iter()
        .filter(|e| e.body["status"] == "streaming" && e.body.get("text").is_some())
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn configured_verbosity_reaches_the_turns() {
    // A direct chat is verbose by default (`auto`): the staged answer streams live.
    assert!(streamed_turn(&[], json!({})).await > 0);
    // `quiet` from the variable (case-insensitive) wins over the extra: no live bubble.
    assert_eq!(
        streamed_turn(
            &[("CANON_TURN_VERBOSITY", " Quiet ")],
            json!({"turn_verbosity": "verbose"})
        )
        .await,
        0
    );
    // And from the extra alone.
    assert_eq!(
        streamed_turn(&[], json!({"turn_verbosity": "quiet"})).await,
        0
    );
}

/// cli.md §8.2 and hermes-host.md §7.3: the probe's seed, which the shim's
/// `env_enablement_fn` hands Hermes, is the home channel `CANON_HOME_CHANNEL` labelled
/// `CANON_HOME_CHANNEL_NAME` (default `Canon Home`); there is none without credentials.
#[tokio::test(flavor = "multi_thread")]
async fn probe_seed_is_the_named_home_channel() {
    let sim = sim().await;
    for (env, seed) in [
        (
            vec![
                ("CANON_HOME_CHANNEL", " c-home "),
                ("CANON_HOME_CHANNEL_NAME", "Ops Room"),
            ],
            json!({"home_channel": {"chat_id": "c-home", "name": "Ops Room"}}),
        ),
        (
            vec![("CANON_HOME_CHANNEL", "c-home")],
            json!({"home_channel": {"chat_id": "c-home", "name": "Canon Home"}}),
        ),
        (vec![("CANON_HOME_CHANNEL_NAME", "Ops Room")], Value::Null),
        (
            vec![("CANON_HOME_CHANNEL", "c-home"), ("CANON_API_KEY", "")],
            Value::Null,
        ),
    ] {
        let mut shim = Shim::spawn_with(&sim, &env);
        assert_eq!(shim.hello().await["ok"], true);
        assert_eq!(probe(&mut shim).await["seed"], seed, "{env:?}");
        assert_eq!(shim.close().await, Some(0));
    }
}

/// canon-wire.md §1.1: a Canon URL is `https`, or plain `http` only on `localhost`, `127.0.0.1`
/// or `::1`. A key configured with a plain-HTTP URL to any other host (the direct test mode's
/// URLs, an environment's override, a platform extra at connect) leaves the daemon unconfigured
/// with the rule as its error: the key is never sent, and never logged. Plain HTTP to the
/// loopback simulator is what every other test of this file runs on.
#[tokio::test(flavor = "multi_thread")]
async fn plain_http_to_a_remote_host_is_refused_and_the_key_never_sent() {
    let sim = sim().await;
    let key = "sk-plain-http-never-sent";
    let remote = "http://api.canonmail.com";
    let direct = "CANON_BASE_URL and CANON_STREAM_URL must use HTTPS (or local HTTP)";
    let packaged = "Canon runtime endpoint must use HTTPS (or local HTTP): canon-dev-v1.apiBaseUrl";
    let stream = sim.stream_url();
    let cases: [(Vec<(&str, &str)>, &str); 3] = [
        (
            vec![
                ("CANON_API_KEY", key),
                ("CANON_BASE_URL", remote),
                ("CANON_STREAM_URL", &stream),
            ],
            direct,
        ),
        (
            vec![
                ("CANON_API_KEY", key),
                ("CANON_BASE_URL", &stream),
                ("CANON_STREAM_URL", "http://stream.canonmail.com/"),
            ],
            direct,
        ),
        (
            vec![
                ("CANON_API_KEY", key),
                ("CANON_ENVIRONMENT_ID", "canon-dev-v1"),
                ("CANON_BASE_URL", remote),
            ],
            packaged,
        ),
    ];
    for (extra, error) in cases {
        let mut env = NO_DIRECT.to_vec();
        env.extend_from_slice(&extra);
        let mut shim = spawn_captured(&sim, &env);
        assert_eq!(shim.hello().await["ok"], true);
        let probed = probe(&mut shim).await;
        assert_eq!(
            (&probed["configured"], &probed["error"]),
            (&json!(false), &json!(error)),
            "{extra:?}"
        );
        let connect = shim.try_connect().await;
        assert_eq!(
            connect["body"]["fatal"]["code"], "missing_api_key",
            "{extra:?}"
        );
        let stderr = close_captured(shim).await;
        assert!(stderr.contains(error), "{stderr}");
        assert!(!stderr.contains(key), "{stderr}");
    }

    // The platform config of `adapter.connect`: the key as `api_key`, the URL as an extra.
    let mut shim = spawn_captured(&sim, &NO_DIRECT);
    assert_eq!(shim.hello().await["ok"], true);
    let connect = connect_with_platform(
        &mut shim,
        json!({"api_key": key, "extra": {"environment_id": "canon-dev-v1", "base_url": remote}}),
    )
    .await;
    assert_eq!(connect["body"]["connected"], false, "{connect}");
    let stderr = close_captured(shim).await;
    assert!(stderr.contains(packaged), "{stderr}");
    assert!(!stderr.contains(key), "{stderr}");
    assert!(sim.journal(0, None).is_empty(), "nothing reached Canon");

    // Local plain HTTP is accepted: the simulator on 127.0.0.1 and, by name, on localhost.
    let local = sim.base_url().replace("127.0.0.1", "localhost");
    let mut shim = Shim::spawn_with(&sim, &[("CANON_BASE_URL", &local)]);
    shim.connect(&sim).await;
    assert_eq!(requests(&sim, "/agents/me"), 1);
    assert_eq!(shim.close().await, Some(0));
}
