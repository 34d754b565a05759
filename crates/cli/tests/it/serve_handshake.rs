//! The handshake and `probe` of the real `canon-hermes serve --stdio` binary against canon-sim,
//! through the fake shim of `shim_support.rs` (hermes-host.md §19): `hello` first, its refusals
//! (an unsupported protocol exits 78), and `probe` with and without verifying.

use serde_json::json;

use super::serve_support::{chat_info, journal, status_fault};
use super::shim_support::{sim, Shim, WAIT};

#[tokio::test(flavor = "multi_thread")]
async fn handshake_is_required_first_and_then_negotiated() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    let early = chat_info(&mut shim, "c").await;
    assert_eq!(early["ok"], false);
    assert_eq!(early["error"]["code"], "handshake_required");
    let hello = shim.hello().await;
    assert_eq!(hello["ok"], true, "{hello}");
    assert_eq!(hello["body"]["protocol"], 1);
    assert_eq!(hello["body"]["daemon_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(hello["body"]["epoch"].as_str().map(str::len), Some(16));
    // A Canon tool the daemon does not have is the model's error, not a protocol error; so is
    // `canon_communicate` before any adapter connected (runtime-control.md §5.1).
    for (name, error) in [
        ("canon_teleport", "Unknown Canon tool: canon_teleport"),
        (
            "canon_communicate",
            "No unambiguous live Canon adapter owns this turn",
        ),
    ] {
        let answer = shim
            .request("tool.call", json!({"name": name, "args": {}}))
            .await;
        assert_eq!(answer["ok"], true, "{answer}");
        let result: serde_json::Value =
            serde_json::from_str(answer["body"]["result"].as_str().expect("a result string"))
                .expect("JSON");
        assert_eq!(result, json!({"error": error, "success": false}));
    }
    let unknown = shim.request("no.such.type", json!({})).await;
    assert_eq!(unknown["error"]["code"], "unknown_type");
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn unsupported_protocol_exits_78() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    let refused = shim
        .request(
            "hello",
            json!({"protocols": [99], "manifest_sha256": "", "shim_version": "",
                   "binary_version": "", "hermes_version": "", "python_version": "",
                   "pid": 1, "hermes_home": "/"}),
        )
        .await;
    assert_eq!(refused["error"]["code"], "unsupported_protocol");
    let status = tokio::time::timeout(WAIT, shim.child.wait())
        .await
        .expect("exits")
        .expect("wait works");
    assert_eq!(status.code(), Some(78));
}

#[tokio::test(flavor = "multi_thread")]
async fn probe_without_verify_makes_no_network_call_and_hides_the_key() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    assert_eq!(shim.hello().await["ok"], true);
    let probe = shim
        .request(
            "probe",
            json!({"config": {"extra": {}, "enabled": true}, "verify": false}),
        )
        .await;
    assert_eq!(
        probe["body"],
        json!({"configured": true, "base_url": sim.base_url(),
               "stream_url": sim.stream_url(), "seed": null}),
        "{probe}"
    );
    assert!(!probe.to_string().contains(&sim.api_key()));
    let check_fn = shim
        .request("probe", json!({"config": null, "verify": false}))
        .await;
    assert_eq!(check_fn["body"]["configured"], true, "{check_fn}");
    assert!(
        sim.journal(0, None).is_empty(),
        "probe without verify touched Canon"
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn probe_reports_missing_credentials_and_verifies_on_request() {
    let sim = sim().await;
    let mut bare = Shim::spawn_with(&sim, &[("CANON_API_KEY", "")]);
    assert_eq!(bare.hello().await["ok"], true);
    let probe = bare
        .request("probe", json!({"config": null, "verify": false}))
        .await;
    assert_eq!(probe["body"]["configured"], false, "{probe}");
    assert_eq!(bare.close().await, Some(0));
    assert!(sim.journal(0, None).is_empty());

    let mut shim = Shim::spawn(&sim);
    assert_eq!(shim.hello().await["ok"], true);
    let verified = shim
        .request("probe", json!({"config": null, "verify": true}))
        .await;
    assert_eq!(verified["body"]["configured"], true, "{verified}");
    assert!(verified["body"].get("error").is_none(), "{verified}");
    assert_eq!(journal(&sim, "/agents/me").len(), 1);
    assert!(!verified.to_string().contains(&sim.api_key()));

    sim.add_fault(status_fault("GET", "/agents/me", 401))
        .expect("fault installed");
    let refused = shim
        .request("probe", json!({"config": null, "verify": true}))
        .await;
    assert!(
        refused["body"]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty() && !e.contains(&sim.api_key())),
        "{refused}"
    );
    assert_eq!(shim.close().await, Some(0));
}

/// A shim whose code is not exactly the one this binary installs (an upgraded binary without a
/// new `canon-hermes install`, or a hand-edited module) is refused as stale, with the remedy.
#[tokio::test(flavor = "multi_thread")]
async fn a_shim_with_other_code_is_refused_as_stale() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    let refused = shim
        .request(
            "hello",
            json!({"protocols": [1], "manifest_sha256": "0".repeat(64),
                   "shim_version": env!("CARGO_PKG_VERSION"),
                   "binary_version": env!("CARGO_PKG_VERSION"),
                   "hermes_version": "0.19.0", "python_version": "3.11.7",
                   "pid": 1, "hermes_home": "/tmp/hermes"}),
        )
        .await;
    assert_eq!(refused["ok"], false, "{refused}");
    assert_eq!(refused["error"]["code"], "stale_shim");
    assert_eq!(
        refused["error"]["message"],
        canon_host::protocol::STALE_SHIM_MESSAGE
    );
    let hello = shim.hello().await;
    assert_eq!(
        hello["ok"], true,
        "the installed shim's hash is accepted: {hello}"
    );
}
