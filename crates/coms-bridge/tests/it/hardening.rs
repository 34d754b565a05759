//! What the daemon does with hostile or careless neighbours, against the real binary: entries
//! of the questions directory that are not plain files, response endpoints outside the pool,
//! and a shared log that would otherwise grow for ever and be readable by others.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::support::{wait_for, Peer, Sandbox};
use coms_hermes_bridge::wire::ids::new_ulid;

const AWAIT: Duration = Duration::from_secs(5);

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("exists")
        .permissions()
        .mode()
        & 0o777
}

/// How many times the bridge warned that it leaves `file` alone.
fn warnings_about(sandbox: &Sandbox, file: &str) -> usize {
    sandbox
        .stderr()
        .lines()
        .filter(|line| line.contains("leaving an entry of the questions directory alone"))
        .filter(|line| line.contains(file))
        .count()
}

#[tokio::test]
async fn fifos_links_to_dev_zero_and_huge_files_in_the_questions_directory_stall_nothing() {
    let sandbox = Sandbox::new();
    // If the bridge ever reads `/dev/zero` again, it dies at 2 GiB instead of taking the machine.
    let _bridge = sandbox
        .start_with_memory_cap(&["--heartbeat-ms", "100"], &[])
        .await;
    let peer = Peer::new(&sandbox).await;
    let fifo_qid = peer.ask(&sandbox, "Behind a FIFO?").await;
    let zero_qid = peer.ask(&sandbox, "Behind /dev/zero?").await;
    let huge_qid = peer.ask(&sandbox, "Behind a huge file?").await;
    let questions = sandbox.questions();
    // Where the liaison would write answers of pending questions (the only files the bridge
    // reads), and under names the bridge would otherwise reject, and under a dot name.
    mkfifo(&questions.join(format!("{fifo_qid}.answer.json")));
    std::os::unix::fs::symlink(
        "/dev/zero",
        questions.join(format!("{zero_qid}.answer.json")),
    )
    .expect("symlink");
    std::fs::write(
        questions.join(format!("{huge_qid}.answer.json")),
        vec![b' '; 70 * 1024],
    )
    .expect("huge");
    mkfifo(&questions.join("stray-fifo"));
    std::os::unix::fs::symlink("/dev/zero", questions.join("stray-link")).expect("symlink");
    mkfifo(&questions.join(".hermes-tmp.fifo"));

    // The loop keeps running: the registry entry is rewritten...
    sandbox.heartbeats(3).await;
    // ...a new question is acked, and its answer file is consumed and answered.
    let fine_qid = peer.ask(&sandbox, "Still there?").await;
    sandbox.write_answer(&fine_qid, "yes");
    let response = peer.response(AWAIT).await.expect("a response");
    assert_eq!(response["msg_id"], fine_qid.as_str());
    assert_eq!(
        response["response"],
        serde_json::json!({"kind": "freeform", "text": "yes"})
    );
    // A real answer renamed over the FIFO is read like any other.
    sandbox.write_answer(&fifo_qid, "after all");
    let response = peer.response(AWAIT).await.expect("a response");
    assert_eq!(response["msg_id"], fifo_qid.as_str());

    // What cannot be read is left alone, and said once, not at every 25 ms poll.
    let huge = format!("{huge_qid}.answer.json");
    wait_for("the warning about the huge file", || {
        (warnings_about(&sandbox, &huge) > 0).then_some(())
    })
    .await;
    sandbox.heartbeats(3).await;
    for name in [
        format!("{zero_qid}.answer.json"),
        huge.clone(),
        "stray-fifo".into(),
        "stray-link".into(),
        ".hermes-tmp.fifo".into(),
    ] {
        assert!(
            std::fs::symlink_metadata(questions.join(&name)).is_ok(),
            "{name} was left in place"
        );
    }
    assert_eq!(warnings_about(&sandbox, &huge), 1, "{}", sandbox.stderr());
    assert_eq!(warnings_about(&sandbox, "stray-fifo"), 1);
    assert_eq!(
        warnings_about(&sandbox, ".hermes-tmp.fifo"),
        0,
        "dot names are not looked at"
    );
    let rejected: Vec<Value> = sandbox
        .log()
        .into_iter()
        .filter(|r| r["event"] == "answer_rejected")
        .collect();
    assert!(rejected.is_empty(), "{rejected:?}");
    for qid in [&zero_qid, &huge_qid] {
        assert!(
            !sandbox.events(qid).iter().any(|e| e == "answered"),
            "{qid}"
        );
    }
}

#[tokio::test]
async fn responses_go_only_to_session_sockets_in_the_pool() {
    let sandbox = Sandbox::new();
    let bridge = sandbox.start(&[], &[]).await;
    // A Unix socket outside the pool, named directly, and through a link that carries a session
    // name inside the pool's sockets directory.
    let outside = sandbox.path("outside.sock");
    let mut stranger = Peer::at(&outside, &new_ulid());
    let linked = sandbox.coms().endpoint(&new_ulid());
    std::os::unix::fs::symlink(&outside, &linked).expect("symlink");
    for endpoint in [&outside, &linked] {
        stranger.identity.endpoint = endpoint.to_string_lossy().into_owned();
        // A lower-case msg_id is answered with an error response at once.
        stranger
            .ask_as(&bridge.endpoint, &new_ulid().to_lowercase(), "Where to?")
            .await;
        let shown = endpoint.display().to_string();
        wait_for(&format!("the refusal for {shown}"), || {
            sandbox
                .stderr()
                .lines()
                .any(|l| l.contains("refusing to deliver a response") && l.contains(&shown))
                .then_some(())
        })
        .await;
        assert!(
            stranger
                .response(Duration::from_millis(100))
                .await
                .is_none(),
            "nothing reached {shown}"
        );
    }
    // A peer of the pool still gets its response.
    let peer = Peer::new(&sandbox).await;
    let lower = new_ulid().to_lowercase();
    peer.ask_as(&bridge.endpoint, &lower, "And me?").await;
    let response = peer.response(AWAIT).await.expect("a response");
    assert_eq!(response["msg_id"], lower.as_str());
}

#[tokio::test]
async fn the_shared_log_is_private_and_rotated_when_full() {
    let sandbox = Sandbox::new();
    let log = sandbox.log_path();
    std::fs::create_dir_all(log.parent().expect("bridge dir")).expect("mkdir");
    // A full log left by earlier bridges, readable by everyone.
    let line = "{\"at\":\"2026-01-01T00:00:00.000Z\",\"qid\":\"00000000000000000000000000\",\"event\":\"old\"}\n";
    let old = line.repeat(4 * 1024 * 1024 / line.len() + 1);
    std::fs::write(&log, &old).expect("old log");
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let _bridge = sandbox.start(&[], &[]).await;
    let peer = Peer::new(&sandbox).await;
    let qid = peer.ask(&sandbox, "Rotate?").await;
    sandbox.wait_event(&qid, "delivered").await;
    let predecessor = log.with_file_name("log.ndjson.1");
    assert_eq!(
        std::fs::read_to_string(&predecessor).expect("the predecessor"),
        old,
        "the full log is kept whole as the one predecessor"
    );
    let events: Vec<Value> = sandbox.log();
    assert!(
        events.iter().all(|r| r["qid"] == qid.as_str()),
        "the fresh log holds only new records: {events:?}"
    );
    assert_eq!(mode(&log), 0o600, "created private");
    assert_eq!(mode(&predecessor), 0o600, "tightened before it was written");
}
