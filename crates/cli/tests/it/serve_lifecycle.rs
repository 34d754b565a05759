//! The process lifecycle of the real `canon-hermes serve --stdio` binary against canon-sim,
//! through the fake shim of `shim_support.rs` (hermes-host.md §19): exit on stdin EOF or when
//! the parent process is gone, and trace logs on stderr that never contain the API key.

use std::process::Stdio;

use super::serve_support::send_streamed;
use super::shim_support::{complete_turn, open_turn, sim, Shim, WAIT};

#[tokio::test(flavor = "multi_thread")]
async fn stdin_eof_exits_zero_without_a_handshake() {
    let sim = sim().await;
    let shim = Shim::spawn(&sim);
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn trace_logs_go_to_stderr_and_never_contain_the_api_key() {
    let sim = sim().await;
    let mut shim = Shim::spawn_logged(&sim, "trace", Stdio::piped(), &[]);
    let mut stderr = shim.child.stderr.take().expect("piped stderr");
    let logs = tokio::spawn(async move {
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text)
            .await
            .map(|_| text)
    });
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "log everything").await;
    let sent = send_streamed(&mut shim, "logged answer").await;
    assert_eq!(sent["body"]["message_id"], turn_id.as_str());
    complete_turn(&mut shim, &event_ref).await;
    assert_eq!(shim.close().await, Some(0));
    let logs = logs.await.expect("joined").expect("stderr readable");
    assert!(logs.contains("handshake done"), "{logs}");
    assert!(
        !logs.contains(&sim.api_key()),
        "the API key leaked into the logs"
    );
}

/// The daemon runs on one thread and logs to a pipe the shim drains from Python: a gateway too
/// busy to read must not stop it. With `RUST_LOG=trace` and a stderr nobody reads, the pipe
/// fills up, and every request is still answered (the lines that do not fit are dropped and
/// counted, never waited for).
#[tokio::test(flavor = "multi_thread")]
async fn a_stderr_nobody_reads_never_stops_the_daemon() {
    let sim = sim().await;
    let mut shim = Shim::spawn_logged(&sim, "trace", Stdio::piped(), &[]);
    shim.connect(&sim).await;
    let unread = |shim: &Shim| {
        let stderr = shim.child.stderr.as_ref().expect("piped stderr");
        rustix::io::ioctl_fionread(stderr).unwrap_or(0)
    };
    let mut turns = 0;
    // Turns until the pipe is full (64 KiB on Linux), then some more.
    while unread(&shim) < 60 * 1024 || turns < 20 {
        assert!(turns < 2_000, "the logs never filled the pipe");
        let (event_ref, _) = open_turn(&mut shim, &sim, &format!("turn {turns}")).await;
        send_streamed(&mut shim, "an answer the logs describe").await;
        complete_turn(&mut shim, &event_ref).await;
        turns += 1;
    }
    let probe = shim.request("probe", serde_json::json!({})).await;
    assert_eq!(probe["ok"], true, "{probe}");
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_exits_when_the_parent_process_is_gone() {
    let sim = sim().await;
    let mut gone = std::process::Command::new("true")
        .spawn()
        .expect("`true` runs");
    let gone_pid = gone.id().to_string();
    gone.wait().expect("`true` exits and is reaped");

    let live_pid = std::process::id().to_string();
    let mut orphan = Shim::spawn_with(&sim, &[("CANON_HERMES_PARENT_PID", &gone_pid)]);
    let mut kept = Shim::spawn_with(&sim, &[("CANON_HERMES_PARENT_PID", &live_pid)]);
    // stdin stays open: only the parent check can end the orphan.
    let status = tokio::time::timeout(WAIT, orphan.child.wait())
        .await
        .expect("the daemon exits within the parent check interval")
        .expect("wait works");
    assert_eq!(status.code(), Some(0));
    assert!(orphan.stdin.is_some(), "stdin was never closed");

    assert!(
        kept.child.try_wait().expect("try_wait works").is_none(),
        "a daemon whose parent lives keeps running"
    );
    assert_eq!(kept.hello().await["ok"], true);
    assert_eq!(kept.close().await, Some(0));
}

/// hermes-host.md §19.3: SIGTERM (systemd's stop of the gateway's control group) and SIGINT
/// end the daemon as stdin EOF does, so a delivery in flight still gets the exit grace. Here
/// Canon answers a turn-less send's first attempt `503` with `Retry-After: 2`, and the daemon
/// is signalled while it waits to retry: it sends the retry, Canon stores the message, and
/// the daemon exits 0 instead of dying of the signal.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_and_sigint_let_an_in_flight_send_finish_then_exit_zero() {
    use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};
    use canon_sim::{DEFAULT_AGENT, DEFAULT_CONVERSATION};
    use serde_json::json;

    for signal in ["-TERM", "-INT"] {
        let sim = sim().await;
        sim.add_fault(FaultRule {
            id: String::new(),
            matcher: FaultMatcher {
                method: Some("POST".to_owned()),
                path: Some("/agent/verbs/send_to".to_owned()),
                times: Some(1),
                ..FaultMatcher::default()
            },
            action: FaultAction::Status {
                status: 503,
                body: None,
                retry_after: Some(2),
                headers: Vec::new(),
            },
            seen: 0,
            fired: 0,
        })
        .expect("fault installed");
        let mut shim = Shim::spawn(&sim);
        shim.connect(&sim).await;
        let text = format!("sent across a {signal} signal");
        shim.send(
            "adapter.send",
            json!({"chat_id": DEFAULT_CONVERSATION, "content": text, "ctx": {}}),
        )
        .await;
        sim.wait_for("the first attempt refused", WAIT, |s| {
            s.journal.count(Some("POST"), "/agent/verbs/send_to") == 1
        })
        .await
        .expect("the first attempt");
        let pid = shim.child.id().expect("running").to_string();
        let killed = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill runs");
        assert!(killed.success());
        let status = tokio::time::timeout(WAIT, shim.child.wait())
            .await
            .expect("the daemon exits within the grace")
            .expect("wait works");
        assert_eq!(status.code(), Some(0), "{signal}: {status:?}");
        let stored = sim.read_state(|s| {
            s.messages
                .iter()
                .filter(|m| m.message["senderId"] == DEFAULT_AGENT && m.message["text"] == text)
                .count()
        });
        assert_eq!(stored, 1, "{signal}: the retry was sent within the grace");
    }
}

/// Found by the fault harness. The gateway stops while a turn's final is on its way:
/// Canon stored it but answered 502, and the daemon's stdin closes before the retry. The
/// retry lands within the exit grace, so the turn must end as a stored answer everywhere: its
/// closing state is published, and the durable inbox closes the turn the drain left open
/// (else the restarted gateway's resume of the session answers the message a second time).
#[tokio::test(flavor = "multi_thread")]
async fn a_final_retried_after_stdin_closed_closes_its_turn_in_canon_and_in_the_inbox() {
    use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};
    use canon_sim::DEFAULT_CONVERSATION;
    use serde_json::json;

    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "answer me as the gateway stops").await;
    send_streamed(&mut shim, "The answer").await;
    let finalized = shim
        .request(
            "adapter.edit",
            json!({"chat_id": DEFAULT_CONVERSATION, "message_id": turn_id, "content": "The answer",
                   "finalize": true, "ctx": super::shim_support::ctx()}),
        )
        .await;
    assert_eq!(finalized["ok"], true, "{finalized}");
    sim.add_fault(FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            method: Some("POST".to_owned()),
            path: Some("/messages/send".to_owned()),
            times: Some(1),
            ..FaultMatcher::default()
        },
        action: FaultAction::ProcessThenStatus { status: 502 },
        seen: 0,
        fired: 0,
    })
    .expect("fault installed");
    let complete = shim
        .send(
            "turn.complete",
            json!({"event_ref": event_ref, "session_key": super::shim_support::SESSION,
                   "outcome": "success", "queue_depth": 0, "draining": true}),
        )
        .await;
    sim.wait_for("the first attempt stored", WAIT, |s| {
        s.journal.count(Some("POST"), "/messages/send") == 1
    })
    .await
    .expect("the first attempt");
    // The shim's disconnect, as Hermes' stop runs it: `adapter.disconnect`, `shutdown`, EOF.
    let home = shim.home().to_owned();
    shim.send("adapter.disconnect", json!({"adapter_instance": 1}))
        .await;
    shim.send("shutdown", json!({"reason": "disconnect"})).await;
    let frames = shim.close_and_drain().await;
    assert!(
        frames.iter().any(|f| f["id"] == complete.as_str()),
        "turn.complete answered before the exit: {frames:?}"
    );
    let states = super::shim_support::turn_states(&sim, DEFAULT_CONVERSATION);
    assert_eq!(
        states.last().map(String::as_str),
        Some("completed"),
        "{turn_id}: {states:?}"
    );
    let journal: String = std::fs::read_dir(&home)
        .expect("CANON_HOME")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("inbox-"))
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
        .map(|e| std::fs::read_to_string(e.path()).expect("journal"))
        .collect();
    let last_open = journal.rfind("\"open\"").expect("the turn was journaled");
    assert!(
        journal[last_open..].contains("\"closed\""),
        "the inbox closed the turn: {journal}"
    );
}
