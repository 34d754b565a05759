//! The daemon behaviours of coms-bridge.md §12.1 (D1–D11) and our additions of §12.4, against the
//! real binary.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::support::{wait_for, Bridge, Peer, Sandbox, PROJECT};
use coms_hermes_bridge::wire::envelope::cancel_envelope;
use coms_hermes_bridge::wire::ids::new_ulid;

const AWAIT: Duration = Duration::from_secs(5);

async fn started(sandbox: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> (Bridge, Peer) {
    let bridge = sandbox.start(args, env).await;
    let peer = Peer::new(sandbox).await;
    (bridge, peer)
}

#[tokio::test]
async fn d1_a_repeated_value_flag_fails_at_once() {
    let sandbox = Sandbox::new();
    let begun = Instant::now();
    let output = sandbox
        .command(&["--to", "telegram", "--to", "telegram:1"])
        .output()
        .expect("run");
    assert!(
        begun.elapsed() < Duration::from_secs(1),
        "{:?}",
        begun.elapsed()
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr,
        "coms-hermes-bridge: --to may only be specified once\n"
    );
    assert!(!sandbox.entry_path().exists());
    for (args, message) in [
        (
            &["--timeout", "0"][..],
            "coms-hermes-bridge: --timeout must be a positive number\n",
        ),
        (
            &["--hermes-profile", "Gateway.Prod"],
            "coms-hermes-bridge: --hermes-profile must be a safe profile name\n",
        ),
    ] {
        let output = sandbox.command(args).output().expect("run");
        assert_eq!(output.status.code(), Some(1));
        assert_eq!(String::from_utf8_lossy(&output.stderr), message);
    }
    // A flag without its value and an unknown flag are usage errors (coms-bridge.md §5.1 DEVIATION).
    for args in [&["--bogus"][..], &["--name"]] {
        let output = sandbox.command(args).output().expect("run");
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.starts_with("coms-hermes-bridge: ") && stderr.lines().count() == 1,
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn d2_the_target_and_project_reach_hermes() {
    let sandbox = Sandbox::new();
    let (_bridge, peer) = started(&sandbox, &["--to", "telegram:123456789:1735"], &[]).await;
    peer.ask(&sandbox, "Which topic?").await;
    let qid = sandbox.asked_qid().await;
    let call = &sandbox.hermes_calls()[0];
    let args = call["args"].as_array().expect("args");
    assert_eq!(
        args[..3],
        [
            json!("send"),
            json!("--to"),
            json!("telegram:123456789:1735")
        ]
    );
    assert_eq!(args.len(), 4, "the text is one argument");
    let message = call["message"].as_str().expect("message");
    assert!(
        message.contains("📁 Project: hermes-bridge-test"),
        "{message}"
    );
    assert!(message.starts_with(&format!("❓ [HUB-Q:{qid}] Which topic?")));
    assert!(sandbox.stderr().contains(
        "coms-hermes-bridge: user-remote@hermes-bridge-test listening (telegram:123456789:1735)"
    ));
}

#[tokio::test]
async fn logs_redirected_to_a_file_carry_no_colour_codes() {
    let sandbox = Sandbox::new();
    // RUST_LOG=info lets the "bridge ready" event through; stderr is a file, not a terminal.
    let (_bridge, _peer) = started(&sandbox, &[], &[("RUST_LOG", "info")]).await;
    let stderr = wait_for("the ready event on stderr", || {
        let text = sandbox.stderr();
        text.contains("bridge ready").then_some(text)
    })
    .await;
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

#[tokio::test]
async fn d3_the_hermes_profile_comes_first() {
    let sandbox = Sandbox::new();
    let (_bridge, peer) = started(&sandbox, &["--hermes-profile", "gateway-prod"], &[]).await;
    peer.ask(&sandbox, "Profile?").await;
    sandbox.asked_qid().await;
    let call = &sandbox.hermes_calls()[0];
    let args = call["args"].as_array().expect("args");
    let expected = ["--profile", "gateway-prod", "send", "--to", "telegram"].map(Value::from);
    assert_eq!(args[..5], expected);
}

#[tokio::test]
async fn d4_round_trip_through_an_answer_file() {
    let sandbox = Sandbox::new();
    let (_bridge, peer) = started(&sandbox, &[], &[]).await;
    let msg_id = peer.ask(&sandbox, "Can you answer?").await;
    let qid = sandbox.asked_qid().await;
    assert_eq!(qid, msg_id, "the qid is the prompt's msg_id");
    sandbox.wait_event(&qid, "delivered").await;
    sandbox.write_answer(&qid, "Yes from Telegram");
    let response = peer.response(AWAIT).await.expect("a response");
    assert_eq!(response["type"], "response");
    assert_eq!(response["msg_id"], qid.as_str());
    assert_eq!(response["hops"], 0);
    assert_eq!(response["error"], Value::Null);
    assert_eq!(
        response["response"],
        json!({"kind": "freeform", "text": "Yes from Telegram"})
    );
    assert!(
        !sandbox.answer_path(&qid).exists(),
        "the answer file is consumed"
    );
    let events: Vec<String> = sandbox
        .events(&qid)
        .into_iter()
        .filter(|e| ["question_received", "delivered", "answered"].contains(&e.as_str()))
        .collect();
    assert_eq!(events, ["question_received", "delivered", "answered"]);
    let answered = sandbox
        .log()
        .into_iter()
        .find(|r| r["event"] == "answered")
        .expect("answered");
    assert_eq!(
        answered["detail"],
        json!({"answered_by": "telegram:tester"})
    );
    let received = sandbox
        .log()
        .into_iter()
        .find(|r| r["event"] == "question_received")
        .expect("received");
    assert_eq!(received["detail"], json!({"from": "claude-cli"}));
    let delivered = sandbox
        .log()
        .into_iter()
        .find(|r| r["event"] == "delivered")
        .expect("delivered");
    assert_eq!(delivered["detail"], json!({"to": "telegram"}));
}

#[tokio::test]
async fn d5_cancel_then_a_late_answer() {
    let sandbox = Sandbox::new();
    let (bridge, peer) = started(&sandbox, &[], &[]).await;
    peer.ask(&sandbox, "Cancel me?").await;
    let qid = sandbox.asked_qid().await;
    let cancel = cancel_envelope(
        &new_ulid(),
        "ask-user-remote",
        "user-remote",
        "2026-07-08T12:34:56.000Z",
        &qid,
    );
    let ack = bridge.send(&cancel).await;
    assert_eq!(ack, json!({"type": "ack", "msg_id": cancel["msg_id"]}));
    sandbox.wait_message("was cancelled").await;
    sandbox.write_answer(&qid, "too late");
    sandbox.wait_message("already closed").await;
    assert!(
        peer.response(Duration::from_millis(250)).await.is_none(),
        "no response envelope"
    );
    sandbox.wait_event(&qid, "late_answer").await;
    let events = sandbox.events(&qid);
    assert!(events.contains(&"cancelled".to_owned()), "{events:?}");
    assert!(!sandbox.answer_path(&qid).exists());
}

#[tokio::test]
async fn d6_a_failing_hermes_send_is_the_askers_error() {
    let sandbox = Sandbox::new();
    let (_bridge, peer) =
        started(&sandbox, &[], &[("HERMES_FAIL_PATTERN", "Will this fail?")]).await;
    peer.ask(&sandbox, "Will this fail?").await;
    let response = peer.response(AWAIT).await.expect("a response");
    assert_eq!(response["response"], Value::Null);
    let error = response["error"].as_str().expect("error");
    // What coms-cli prints for it: `peer error: <error>`.
    assert!(
        format!("peer error: {error}")
            .starts_with("peer error: hermes send failed (42): fake hermes failure"),
        "{error}"
    );
    let qid = sandbox.asked_qid().await;
    sandbox.wait_event(&qid, "delivery_error").await;
}

#[tokio::test]
async fn d7_the_timeout_from_the_environment() {
    let sandbox = Sandbox::new();
    let (_bridge, peer) = started(&sandbox, &[], &[("PI_COMS_TIMEOUT_MS", "120")]).await;
    peer.ask(&sandbox, "Anyone?").await;
    let response = peer.response(AWAIT).await.expect("a response");
    assert_eq!(response["response"], Value::Null);
    assert_eq!(response["error"], "no remote answer within 120ms");
    sandbox.wait_message("timed out after 120ms").await;
    let qid = sandbox.asked_qid().await;
    sandbox.wait_event(&qid, "timeout").await;
    let timeout = sandbox
        .log()
        .into_iter()
        .find(|r| r["event"] == "timeout")
        .expect("timeout");
    assert_eq!(timeout["detail"], json!({"timeout_ms": 120}));
}

#[tokio::test]
async fn d8_foreign_and_invalid_files_are_rejected_then_a_valid_one_accepted() {
    let sandbox = Sandbox::new();
    let (_bridge, peer) = started(&sandbox, &[], &[]).await;
    peer.ask(&sandbox, "Which file?").await;
    let qid = sandbox.asked_qid().await;
    let foreign = new_ulid();
    sandbox.write_answer(&foreign, "not for you");
    wait_for("foreign_qid", || {
        sandbox
            .log()
            .into_iter()
            .find(|r| r["event"] == "answer_rejected" && r["detail"]["reason"] == "foreign_qid")
    })
    .await;
    assert!(!sandbox.answer_path(&foreign).exists());
    sandbox.write_file(
        &format!("{qid}.answer.json"),
        &json!({"qid": qid, "answer": "half"}).to_string(),
    );
    let rejected = wait_for("invalid_schema", || {
        sandbox
            .log()
            .into_iter()
            .find(|r| r["event"] == "answer_rejected" && r["detail"]["reason"] == "invalid_schema")
    })
    .await;
    assert_eq!(rejected["qid"], qid.as_str());
    assert_eq!(rejected["detail"]["file"], format!("{qid}.answer.json"));
    assert!(peer.response(Duration::from_millis(150)).await.is_none());
    sandbox.write_answer(&qid, "Accepted after rejects");
    let response = peer.response(AWAIT).await.expect("a response");
    assert_eq!(
        response["response"],
        json!({"kind": "freeform", "text": "Accepted after rejects"})
    );
    sandbox.wait_event(&qid, "answered").await;
}

#[tokio::test]
async fn d9_a_partial_write_survives_until_it_is_complete() {
    let sandbox = Sandbox::new();
    let (_bridge, peer) = started(&sandbox, &[], &[]).await;
    peer.ask(&sandbox, "Slow writer?").await;
    let qid = sandbox.asked_qid().await;
    sandbox.wait_event(&qid, "delivered").await;
    let path = sandbox.answer_path(&qid);
    std::fs::write(&path, format!("{{\"qid\":\"{qid}\",\"answer\":\"Fini")).expect("partial");
    // 120 ms is several 25 ms polls, well inside the 1 s grace.
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(path.exists(), "a partial write is left in place");
    let body = json!({"qid": qid, "answer": "Finished write", "answered_by": "telegram:tester", "at": "2026-07-08T12:34:56.000Z"});
    std::fs::write(&path, body.to_string()).expect("complete");
    let response = peer.response(AWAIT).await.expect("a response");
    assert_eq!(
        response["response"],
        json!({"kind": "freeform", "text": "Finished write"})
    );
    let other_reasons: Vec<Value> = sandbox
        .log()
        .into_iter()
        .filter(|r| r["event"] == "answer_rejected" && r["detail"]["reason"] != "invalid_json")
        .collect();
    assert!(other_reasons.is_empty(), "{other_reasons:?}");
}

#[tokio::test]
async fn d10_garbage_is_rejected_after_the_grace() {
    let sandbox = Sandbox::new();
    let (_bridge, peer) = started(&sandbox, &[], &[]).await;
    peer.ask(&sandbox, "Garbage?").await;
    let qid = sandbox.asked_qid().await;
    let path = sandbox.answer_path(&qid);
    std::fs::write(&path, "not json at all").expect("write");
    let begun = Instant::now();
    let rejected = wait_for("invalid_json", || {
        sandbox
            .log()
            .into_iter()
            .find(|r| r["event"] == "answer_rejected" && r["detail"]["reason"] == "invalid_json")
    })
    .await;
    assert!(begun.elapsed() < Duration::from_secs(5));
    assert!(
        begun.elapsed() >= Duration::from_millis(900),
        "the grace was waited out"
    );
    assert_eq!(rejected["qid"], qid.as_str());
    assert!(!path.exists(), "deleted before it was logged");
}

#[tokio::test]
async fn d11_sigterm_removes_the_entry_and_the_socket() {
    let sandbox = Sandbox::new();
    let (mut bridge, peer) = started(&sandbox, &[], &[]).await;
    peer.ask(&sandbox, "Pending at shutdown").await;
    sandbox.asked_qid().await;
    let endpoint = bridge.endpoint.clone();
    assert!(endpoint.exists());
    let status = bridge.terminate().await;
    assert_eq!(status.code(), Some(0));
    assert!(!sandbox.entry_path().exists(), "registry entry removed");
    assert!(!endpoint.exists(), "socket removed");
    assert!(
        peer.response(Duration::from_millis(100)).await.is_none(),
        "pending questions are abandoned"
    );
    let events: Vec<String> = sandbox
        .log()
        .iter()
        .map(|r| r["event"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        events
            .iter()
            .all(|e| e == "question_received" || e == "delivered"),
        "{events:?}"
    );
}

#[tokio::test]
async fn sigterm_right_at_readiness_still_cleans_up() {
    let sandbox = Sandbox::new();
    let mut bridge = sandbox.start(&[], &[]).await;
    let status = bridge.terminate().await;
    assert_eq!(status.code(), Some(0));
    assert!(!sandbox.entry_path().exists());
    assert!(!bridge.endpoint.exists());
}

#[tokio::test]
async fn the_registry_entry_satisfies_every_reader() {
    let sandbox = Sandbox::new();
    let bridge = sandbox.start(&[], &[("HERDR_PANE_ID", "w1:p3")]).await;
    let entry: Value =
        serde_json::from_slice(&std::fs::read(sandbox.entry_path()).expect("entry")).expect("JSON");
    let keys: Vec<&str> = entry
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "session_id",
            "name",
            "purpose",
            "model",
            "color",
            "pid",
            "endpoint",
            "cwd",
            "started_at",
            "explicit",
            "version",
            "context_used_pct",
            "queue_depth",
            "heartbeat_at"
        ]
    );
    assert!(coms_hermes_bridge::wire::ids::is_ulid(
        entry["session_id"].as_str().expect("session")
    ));
    assert_eq!(entry["name"], "user-remote");
    assert_eq!(entry["purpose"], "Remote human via Hermes/Telegram");
    assert_eq!(entry["model"], "hermes-bridge");
    assert_eq!(entry["color"], "#38BDF8");
    assert_eq!(entry["pid"], bridge.pid());
    assert_eq!(
        entry["endpoint"],
        bridge.endpoint.to_string_lossy().as_ref()
    );
    assert_eq!(entry["explicit"], false);
    assert_eq!(entry["version"], 1);
    assert_eq!(entry["started_at"], entry["heartbeat_at"]);
    let text = std::fs::read_to_string(sandbox.entry_path()).expect("entry");
    assert!(text.starts_with("{\n  \"session_id\"") && !text.ends_with('\n'));
    let mode = std::fs::metadata(sandbox.path("coms")).expect("coms");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(mode.permissions().mode() & 0o777, 0o700);
    let questions = std::fs::metadata(sandbox.questions()).expect("questions");
    assert_eq!(questions.permissions().mode() & 0o777, 0o700);
    let pong = bridge.send(&json!({"type": "ping", "msg_id": "p1"})).await;
    assert_eq!(pong["agent_card"]["pane_id"], "w1:p3");
}

#[tokio::test]
async fn a_second_bridge_gets_a_suffixed_name_and_says_so() {
    let sandbox = Sandbox::new();
    let _first = sandbox.start(&[], &[]).await;
    let second_entry = sandbox.coms().entry_path(PROJECT, "user-remote2");
    let mut command = sandbox.command(&[
        "--questions-dir",
        sandbox.path("q2/questions").to_str().expect("utf-8"),
    ]);
    let stderr = std::fs::File::create(sandbox.path("second.stderr")).expect("file");
    command.stderr(stderr);
    let mut second = command.spawn().expect("spawn");
    wait_for("the second entry", || second_entry.exists().then_some(())).await;
    let text = std::fs::read_to_string(sandbox.path("second.stderr")).expect("stderr");
    assert!(text.contains("user-remote is taken"), "{text}");
    assert!(
        text.contains("user-remote2@hermes-bridge-test listening"),
        "{text}"
    );
    assert!(sandbox.path("q2/questions").is_dir());
    let _ = second.kill();
    let _ = second.wait();
}

#[tokio::test]
async fn dispatch_ping_unknown_invalid_and_oversized_lines() {
    let sandbox = Sandbox::new();
    let (bridge, peer) = started(
        &sandbox,
        &[("--timeout"), ("60000")],
        &[("HERMES_FAKE_DELAY_MS", "2000")],
    )
    .await;
    let pong = bridge.send(&json!({"type": "ping", "msg_id": "p0"})).await;
    assert_eq!(pong["type"], "pong");
    assert_eq!(pong["msg_id"], "p0");
    assert_eq!(
        pong["agent_card"],
        json!({"name": "user-remote", "purpose": "Remote human via Hermes/Telegram", "model": "hermes-bridge", "color": "#38BDF8", "context_used_pct": 0, "queue_depth": 0, "status": "idle"})
    );
    peer.ask(&sandbox, "One").await;
    peer.ask(&sandbox, "Two").await;
    let pong = bridge.send(&json!({"type": "ping"})).await;
    assert_eq!(pong["msg_id"], "");
    assert_eq!(pong["agent_card"]["queue_depth"], 2);
    assert_eq!(
        bridge
            .send_raw(b"{\"type\":\"response\",\"msg_id\":\"r1\",\"response\":null}\n")
            .await,
        r#"{"type":"nack","msg_id":"r1","error":"bridge accepts prompts, cancels, and pings"}"#
    );
    assert_eq!(
        bridge.send_raw(b"\n  \n{not json\n").await,
        r#"{"type":"nack","msg_id":"","error":"invalid json"}"#
    );
    let mut huge = vec![b'x'; 70_000];
    huge.push(b'\n');
    assert_eq!(
        bridge.send_raw(&huge).await,
        r#"{"type":"nack","msg_id":"","error":"line too large"}"#
    );
}

#[tokio::test]
async fn a_lower_case_msg_id_is_acked_then_refused_without_a_log_line() {
    let sandbox = Sandbox::new();
    let (bridge, peer) = started(&sandbox, &[], &[]).await;
    let lower = new_ulid().to_lowercase();
    peer.ask_as(&bridge.endpoint, &lower, "lower?").await;
    let response = peer.response(AWAIT).await.expect("a response");
    assert_eq!(response["msg_id"], lower.as_str());
    assert_eq!(response["response"], Value::Null);
    assert_eq!(
        response["error"],
        "prompt msg_id must be a 26-character Crockford ULID qid"
    );
    assert!(sandbox.log().is_empty());
    assert!(sandbox.hermes_calls().is_empty());
}

#[tokio::test]
async fn an_answer_while_hermes_send_runs_is_accepted_and_delivered_never_follows() {
    let sandbox = Sandbox::new();
    let (_bridge, peer) = started(&sandbox, &[], &[("HERMES_FAKE_DELAY_MS", "1500")]).await;
    peer.ask(&sandbox, "Quick?").await;
    let qid = sandbox.asked_qid().await;
    sandbox.write_answer(&qid, "1");
    let response = peer.response(AWAIT).await.expect("a response");
    assert_eq!(
        response["response"],
        json!({"kind": "freeform", "text": "1"})
    );
    // A barrier: a second question asked after the first send began is delivered only after
    // its own equally slow send, by which time the first send's completion has been handled.
    let marker = peer.ask(&sandbox, "Marker").await;
    sandbox.wait_event(&marker, "delivered").await;
    assert_eq!(sandbox.events(&qid), ["question_received", "answered"]);
}

#[tokio::test]
async fn one_response_when_the_timeout_beats_a_slow_failing_send() {
    let sandbox = Sandbox::new();
    let env = [
        ("PI_COMS_TIMEOUT_MS", "150"),
        ("HERMES_FAKE_DELAY_MS", "600"),
        ("HERMES_FAIL_PATTERN", "Doomed?"),
    ];
    let (_bridge, peer) = started(&sandbox, &[], &env).await;
    peer.ask(&sandbox, "Doomed?").await;
    let first = peer.response(AWAIT).await.expect("the timeout response");
    assert_eq!(first["error"], "no remote answer within 150ms");
    let qid = sandbox.asked_qid().await;
    sandbox.wait_event(&qid, "delivery_error").await;
    assert!(
        peer.response(Duration::from_millis(250)).await.is_none(),
        "no second response"
    );
    assert_eq!(
        sandbox.events(&qid),
        ["question_received", "timeout", "delivery_error"]
    );
}

#[tokio::test]
async fn dot_files_are_never_touched_and_rejections_come_after_deletion() {
    let sandbox = Sandbox::new();
    let (_bridge, _peer) = started(&sandbox, &[], &[]).await;
    let temp = sandbox.questions().join(".hermes-tmp.abc123");
    std::fs::write(&temp, "{\"qid\":").expect("temp");
    // Scans that reject this junk file saw the dot file too.
    std::fs::write(sandbox.questions().join("not-an-answer.json"), "{}").expect("junk");
    let rejected = wait_for("invalid_path", || {
        sandbox
            .log()
            .into_iter()
            .find(|r| r["detail"]["reason"] == "invalid_path")
    })
    .await;
    assert_eq!(rejected["qid"], "00000000000000000000000000");
    assert!(
        !sandbox.questions().join("not-an-answer.json").exists(),
        "deleted before it was logged"
    );
    std::fs::write(sandbox.questions().join("second.json"), "{}").expect("junk");
    wait_for("a later scan", || {
        sandbox
            .log()
            .into_iter()
            .find(|r| r["detail"]["file"] == "second.json")
    })
    .await;
    assert!(temp.exists());
    assert!(sandbox
        .log()
        .iter()
        .all(|r| r["detail"]["file"] != ".hermes-tmp.abc123"));
}

#[tokio::test]
async fn a_late_answer_with_invalid_content_is_still_late() {
    let sandbox = Sandbox::new();
    let (bridge, peer) = started(&sandbox, &[], &[]).await;
    peer.ask(&sandbox, "Invalid late?").await;
    let qid = sandbox.asked_qid().await;
    bridge
        .send(&cancel_envelope(
            &new_ulid(),
            "ask-user-remote",
            "user-remote",
            "t",
            &qid,
        ))
        .await;
    sandbox.wait_event(&qid, "cancelled").await;
    sandbox.write_file(&format!("{qid}.answer.json"), "{broken");
    sandbox.wait_event(&qid, "late_answer").await;
    let late = sandbox
        .log()
        .into_iter()
        .find(|r| r["event"] == "late_answer")
        .expect("late");
    assert_eq!(late["detail"], json!({"state": "cancelled"}));
    assert!(!sandbox.has_event("answer_rejected"));
}

#[tokio::test]
async fn a_socket_path_that_does_not_fit_fails_at_startup() {
    let sandbox = Sandbox::new();
    let long = sandbox.path(&"c".repeat(90));
    let output = sandbox
        .command(&[])
        .env("PI_COMS_DIR", &long)
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("coms-hermes-bridge: socket path is "),
        "{stderr}"
    );
    assert!(
        stderr.contains("more than the 107 a Unix socket allows"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1);
    let entry =
        coms_hermes_bridge::wire::registry::Coms::new(&long).entry_path(PROJECT, "user-remote");
    assert!(!entry.exists());
}
