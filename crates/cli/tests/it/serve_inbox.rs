//! The durable inbox across real daemon deaths (reliability review M2, issue 16): the stream
//! cursor and the handled message ids survive a `kill -9`, so the successor is handed every
//! message that arrived while no daemon ran, and the one the dead daemon had read but not yet
//! seen taken by Hermes, and none that Hermes already took; a replay the successor was killed in
//! the middle of is replayed again. Counted from the frames the fake shim
//! reads and the journal file, never by sleeping.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Value};

use super::serve_support::inject_text;
use super::shim_support::{sim, Shim, WAIT};

fn spawn(sim: &canon_sim::SimHandle, home: &Path) -> Shim {
    let home = home.to_str().expect("a UTF-8 temp dir");
    Shim::spawn_with(sim, &[("CANON_HOME", home)])
}

/// The one inbox journal in `home`.
fn journal_path(home: &Path) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(home)
        .expect("the home exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("inbox-") && n.ends_with(".jsonl"))
        })
        .collect();
    let [path] = found.as_slice() else {
        panic!("one inbox journal in the home: {found:?}");
    };
    path.clone()
}

/// The message ids the journal records as handled.
fn handled_ids(home: &Path) -> Vec<String> {
    std::fs::read_to_string(journal_path(home))
        .expect("the journal reads")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["handled"].as_str().map(str::to_owned))
        .collect()
}

async fn wait_handled(home: &Path, count: usize) {
    let deadline = Instant::now() + WAIT;
    while handled_ids(home).len() < count {
        assert!(
            Instant::now() < deadline,
            "the journal never recorded {count} messages"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

fn text_of(inbound: &Value) -> String {
    inbound["body"]["event"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn sigkill(shim: &mut Shim) {
    let pid = shim.pid().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let _ = tokio::time::timeout(WAIT, shim.child.wait()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_daemons_successor_gets_every_unhandled_message_once_and_no_handled_one() {
    let sim = sim().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let home = scratch.path().join("canon");
    let mut first = spawn(&sim, &home);
    first.connect(&sim).await;
    inject_text(&sim, "one: taken by Hermes");
    let taken = first.accept_inbound().await;
    assert_eq!(text_of(&taken), "one: taken by Hermes");
    wait_handled(&home, 1).await;
    // Read by the daemon and handed to the shim, but the daemon dies before Hermes' answer
    // reaches it: the inbox must not count it as handled.
    inject_text(&sim, "two: in flight at the kill");
    let in_flight = first.expect("inbound.message").await;
    assert_eq!(text_of(&in_flight), "two: in flight at the kill");
    sigkill(&mut first).await;
    // Sent while no daemon runs.
    inject_text(&sim, "three: sent while down");
    inject_text(&sim, "four: sent while down");

    let mut second = spawn(&sim, &home);
    second.connect(&sim).await;
    let mut texts = Vec::new();
    for _ in 0..3 {
        texts.push(text_of(&second.accept_inbound().await));
    }
    assert_eq!(
        texts,
        [
            "two: in flight at the kill",
            "three: sent while down",
            "four: sent while down"
        ]
    );
    wait_handled(&home, 4).await;
    let extra: Vec<String> = second
        .close_and_drain()
        .await
        .iter()
        .filter(|f| f["type"] == "inbound.message")
        .map(text_of)
        .collect();
    assert_eq!(extra, Vec::<String>::new(), "nothing handed over twice");
    let mut ids = handled_ids(&home);
    let all = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!((all, ids.len()), (4, 4), "four distinct messages handled");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(journal_path(&home))
            .expect("stat")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

/// Fault harness finding (issue 16). Canon sends each connection's `agent.context`, with a fresh
/// id, before the replay of what the cursor missed. Had the inbox settled that frame, its
/// durable cursor would jump past the whole replay: a daemon killed before a replayed message
/// settled would leave its successor nothing to replay, and the message would be lost. Here the
/// same unanswered message is handed over by two daemons in a row, each killed, and the third
/// still gets it first.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_replayed_to_a_daemon_killed_before_its_answer_is_replayed_again() {
    let sim = sim().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let home = scratch.path().join("canon");
    for daemon in ["first", "second"] {
        let mut shim = spawn(&sim, &home);
        shim.connect(&sim).await;
        if daemon == "first" {
            inject_text(&sim, "one: never answered");
        }
        let handed = shim.expect("inbound.message").await;
        assert_eq!(
            text_of(&handed),
            "one: never answered",
            "the {daemon} daemon"
        );
        sigkill(&mut shim).await;
    }
    let mut third = spawn(&sim, &home);
    third.connect(&sim).await;
    inject_text(&sim, "two: after the kills");
    let texts = [
        text_of(&third.accept_inbound().await),
        text_of(&third.accept_inbound().await),
    ];
    assert_eq!(texts, ["one: never answered", "two: after the kills"]);
    let _ = third.close_and_drain().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_daemon_replays_nothing_it_handled_before_a_clean_exit() {
    let sim = sim().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let home = scratch.path().join("canon");
    let mut first = spawn(&sim, &home);
    first.connect(&sim).await;
    for n in 0..5 {
        inject_text(&sim, &format!("burst {n}"));
    }
    for _ in 0..5 {
        first.accept_inbound().await;
    }
    wait_handled(&home, 5).await;
    assert_eq!(first.close().await, Some(0));
    let mut second = spawn(&sim, &home);
    second.connect(&sim).await;
    inject_text(&sim, "after the restart");
    let next = second.accept_inbound().await;
    assert_eq!(text_of(&next), "after the restart");
    let extra = second
        .close_and_drain()
        .await
        .into_iter()
        .filter(|f| f["type"] == "inbound.message")
        .count();
    assert_eq!(extra, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_inbox_refuses_the_connect_and_is_left_untouched() {
    let sim = sim().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let home = scratch.path().join("canon");
    let mut first = spawn(&sim, &home);
    first.connect(&sim).await;
    inject_text(&sim, "one");
    first.accept_inbound().await;
    wait_handled(&home, 1).await;
    assert_eq!(first.close().await, Some(0));
    let path = journal_path(&home);
    let mut bytes = std::fs::read(&path).expect("read");
    let bad_line = bytes.iter().filter(|b| **b == b'\n').count() + 1;
    bytes.extend_from_slice(b"not a record\n");
    std::fs::write(&path, &bytes).expect("write");

    let mut second = spawn(&sim, &home);
    let refused = second.try_connect().await;
    assert_eq!(refused["body"]["connected"], json!(false), "{refused}");
    let fatal = &refused["body"]["fatal"];
    assert_eq!(fatal["code"], "inbox_unreadable", "{refused}");
    assert_eq!(fatal["retryable"], false);
    let message = fatal["message"].as_str().expect("a message");
    assert!(message.contains(path.to_str().expect("UTF-8")), "{message}");
    assert!(message.contains(&format!("line {bad_line}:")), "{message}");
    assert!(message.contains("move it aside"), "{message}");
    assert_eq!(std::fs::read(&path).expect("read"), bytes, "left untouched");
}
