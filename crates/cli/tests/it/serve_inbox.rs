//! The durable inbox across real daemon deaths: the stream cursor and the handled message ids
//! survive a `kill -9`, so the successor is handed every message that arrived while no daemon
//! ran, and the one the dead daemon had read but not yet seen taken by Hermes, and none that
//! Hermes already took; a replay the successor was killed in the middle of is replayed again.
//! Counted from the frames the fake shim reads and the journal file, never by sleeping.

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

/// Found by the fault harness. Canon sends each connection's `agent.context`, with a fresh
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

/// A journal another daemon still holds after the lock wait refuses the connect as retryable:
/// the agent never runs without its durable inbox (that would lose what is sent while it is
/// down and replay what it handled), and Hermes' retry connects once the lock is free.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_inbox_refuses_the_connect_as_retryable_until_it_is_free() {
    let sim = sim().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let home = scratch.path().join("canon");
    let mut first = spawn(&sim, &home);
    first.connect(&sim).await;
    let home_text = home.to_str().expect("a UTF-8 temp dir");
    let mut second = Shim::spawn_with(
        &sim,
        &[
            ("CANON_HOME", home_text),
            ("CANON_HERMES_INBOX_LOCK_WAIT_MS", "100"),
        ],
    );
    let refused = second.try_connect().await;
    assert_eq!(refused["body"]["connected"], json!(false), "{refused}");
    let fatal = &refused["body"]["fatal"];
    assert_eq!(fatal["code"], "inbox_unavailable", "{refused}");
    assert_eq!(fatal["retryable"], true, "{refused}");
    let message = fatal["message"].as_str().expect("a message");
    assert!(message.contains("in use by another"), "{message}");
    assert!(message.contains("retries the connect"), "{message}");

    assert_eq!(first.close().await, Some(0));
    let retried = second
        .request(
            "adapter.connect",
            json!({"adapter_instance": 1, "config": {"extra": {}, "typing_indicator": true},
                   "host": {"streaming_enabled": true}}),
        )
        .await;
    assert_eq!(retried["body"]["connected"], json!(true), "{retried}");
    inject_text(&sim, "after the retry");
    assert_eq!(text_of(&second.accept_inbound().await), "after the retry");
    wait_handled(&home, 1).await;
}

/// A Canon home the file system refuses (here a file stands where its directory belongs)
/// refuses the connect as retryable, not as a damaged journal, and the retry connects once the
/// cause is gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_canon_home_that_cannot_be_opened_refuses_the_connect_as_retryable() {
    let sim = sim().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let home = scratch.path().join("canon");
    std::fs::write(&home, b"in the way").expect("a file in the way");
    let mut shim = spawn(&sim, &home);
    let refused = shim.try_connect().await;
    assert_eq!(refused["body"]["connected"], json!(false), "{refused}");
    assert_eq!(
        refused["body"]["fatal"]["code"], "inbox_unavailable",
        "{refused}"
    );
    assert_eq!(refused["body"]["fatal"]["retryable"], true, "{refused}");

    std::fs::remove_file(&home).expect("the file goes");
    let retried = shim
        .request(
            "adapter.connect",
            json!({"adapter_instance": 1, "config": {"extra": {}, "typing_indicator": true},
                   "host": {"streaming_enabled": true}}),
        )
        .await;
    assert_eq!(retried["body"]["connected"], json!(true), "{retried}");
}

/// A daemon killed inside `turn.start`, after Canon took the turn's open state and before the
/// shim got the turn id: the shim tracks a turn only from that answer, so it resends the start
/// to the respawned daemon, which opens a new turn. The first turn's record reached the journal
/// before Canon saw the turn, and no turn the resync handed over is that one, so the resync
/// closes it (it would otherwise show the agent working until Canon's staleness sweep); the
/// new turn goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_opened_by_a_daemon_killed_inside_turn_start_is_closed_after_the_resync() {
    use super::shim_support::{dm_event, start_turn, SESSION};
    let sim = sim().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let home = scratch.path().join("canon");
    let home_text = home.to_str().expect("a UTF-8 temp dir");
    let armed = [
        ("CANON_HOME", home_text),
        ("CANON_HERMES_CRASH_POINT", "turn.published"),
    ];
    let mut first = Shim::spawn_with(&sim, &armed);
    first.connect(&sim).await;
    inject_text(&sim, "cut off inside turn.start");
    let inbound = first.accept_inbound().await;
    let event_ref = inbound["body"]["event_ref"]
        .as_str()
        .expect("a ref")
        .to_owned();
    let message_id = inbound["body"]["event"]["message_id"]
        .as_str()
        .expect("a message id")
        .to_owned();
    let start = first
        .send(
            "turn.start",
            json!({"event_ref": event_ref, "session_key": SESSION,
                   "event": dm_event(message_id.as_str())}),
        )
        .await;
    let last_frames = first.remaining_frames().await;
    assert!(
        !last_frames.iter().any(|f| f["id"] == json!(start)),
        "killed before answering the start: {last_frames:?}"
    );
    let opened: Vec<String> = sim.read_state(|s| {
        s.turn_history
            .iter()
            .filter_map(|t| t["turnId"].as_str().map(str::to_owned))
            .collect()
    });
    let [cut_off] = opened.as_slice() else {
        panic!("one turn told open before the kill: {opened:?}");
    };
    assert_eq!(states_of(&sim, cut_off), ["thinking"]);

    // The shim's respawn: hello, a reconnect, the resync (nothing open yet), the start again.
    let mut respawned = Shim::spawn_with(&sim, &armed);
    assert_eq!(respawned.hello().await["ok"], true);
    let connect = respawned
        .request(
            "adapter.connect",
            json!({"is_reconnect": true, "adapter_instance": 1,
                   "config": {"extra": {}, "typing_indicator": true},
                   "host": {"streaming_enabled": true}}),
        )
        .await;
    assert_eq!(connect["body"]["connected"], true, "{connect}");
    let resynced = respawned
        .request(
            "resync",
            json!({"adapter_connected": true, "open_turns": [], "queue_depths": {},
                   "delivered_turns": []}),
        )
        .await;
    assert_eq!(resynced["ok"], true, "{resynced}");
    let again = start_turn(&mut respawned, &event_ref, message_id.as_str()).await;
    assert_ne!(&again, cut_off);
    let deadline = Instant::now() + WAIT;
    while states_of(&sim, cut_off) != ["thinking", "completed"] {
        assert!(
            Instant::now() < deadline,
            "the cut-off turn was never closed: {:?}",
            states_of(&sim, cut_off)
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(states_of(&sim, &again), ["thinking"]);
    assert_eq!(respawned.close().await, Some(0));
}

/// Canon's replay buffer no longer holds the cursor the daemon resumes from: the message sent
/// while it was down is never delivered (Canon answers `replay.expired` and goes on from its
/// newest event; there is no call that returns the gap's messages). The daemon says so: the
/// gap, with the agent's conversations, is recorded in the Canon home, where `doctor` reads
/// it, and the stream goes on.
#[tokio::test(flavor = "multi_thread")]
async fn an_expired_replay_is_recorded_for_the_operator() {
    use canon_inbox::gaps::GapRecord;
    let sim = sim().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let home = scratch.path().join("canon");
    let mut first = spawn(&sim, &home);
    first.connect(&sim).await;
    inject_text(&sim, "before the gap");
    first.accept_inbound().await;
    wait_handled(&home, 1).await;
    assert_eq!(first.close().await, Some(0));
    sim.expire_replay_buffer(canon_sim::DEFAULT_AGENT);
    inject_text(&sim, "lost in the gap");

    let mut second = spawn(&sim, &home);
    second.connect(&sim).await;
    let record = |home: &Path| -> Option<GapRecord> {
        std::fs::read_dir(home)
            .ok()?
            .filter_map(Result::ok)
            .find(|e| e.file_name().to_string_lossy().starts_with("event-gaps-"))
            .and_then(|e| std::fs::read_to_string(e.path()).ok())
            .and_then(|text| GapRecord::parse(&text).ok())
    };
    let deadline = Instant::now() + WAIT;
    let gap = loop {
        if let Some(gap) = record(&home) {
            break gap;
        }
        assert!(Instant::now() < deadline, "no gap was recorded");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    assert_eq!(gap.gaps, 1);
    assert_eq!(
        gap.last["conversationIds"],
        json!([canon_sim::DEFAULT_CONVERSATION])
    );
    assert_eq!(
        gap.last["from"],
        Value::Null,
        "this daemon saw no event before it"
    );
    inject_text(&sim, "after the gap");
    assert_eq!(text_of(&second.accept_inbound().await), "after the gap");
    assert_eq!(second.close().await, Some(0));
}

/// The states Canon got for turn `turn_id`, in order.
fn states_of(sim: &canon_sim::SimHandle, turn_id: &str) -> Vec<String> {
    sim.read_state(|s| {
        s.turn_history
            .iter()
            .filter(|t| t["turnId"] == turn_id)
            .filter_map(|t| t["state"].as_str().map(str::to_owned))
            .collect()
    })
}

/// Found by the fault harness: a daemon killed mid-turn, then a gateway stop before its
/// respawn could take the turn over, left the Canon turn `streaming` for good (Canon shows the
/// agent working until it reads the turn stale, 30 minutes later). The journal names each
/// Canon turn told open and not yet closed. A respawned daemon's connect (a reconnect) leaves
/// the turn alone, as the shim hands the turns that still run over; the next gateway's first
/// connect closes it: its live node is cleared and it gets `completed`, before the new run's
/// own writes in that conversation.
#[tokio::test(flavor = "multi_thread")]
async fn a_canon_turn_a_killed_daemon_left_open_is_closed_by_the_next_gateways_first_connect() {
    use super::shim_support::{open_turn, start_turn};
    let sim = sim().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let home = scratch.path().join("canon");
    let mut first = spawn(&sim, &home);
    first.connect(&sim).await;
    let (_, cut_off) = open_turn(&mut first, &sim, "one: cut off by the kill").await;
    assert_eq!(states_of(&sim, &cut_off), ["thinking"]);
    sigkill(&mut first).await;

    // A respawn: `adapter.connect` with `is_reconnect`. A turn it opens in the same
    // conversation queues behind anything the connect wrote there.
    let mut respawned = spawn(&sim, &home);
    assert_eq!(respawned.hello().await["ok"], true);
    let connect = respawned
        .request(
            "adapter.connect",
            json!({"is_reconnect": true, "adapter_instance": 1,
                   "config": {"extra": {}, "typing_indicator": true},
                   "host": {"streaming_enabled": true}}),
        )
        .await;
    assert_eq!(connect["body"]["connected"], true, "{connect}");
    let later = start_turn(&mut respawned, "e-later", "m-later").await;
    assert_eq!(states_of(&sim, &later), ["thinking"]);
    assert_eq!(
        states_of(&sim, &cut_off),
        ["thinking"],
        "a respawned daemon leaves the turns to the shim's hand-over"
    );
    sigkill(&mut respawned).await;

    // The next gateway: a first connect.
    let mut next = spawn(&sim, &home);
    next.connect(&sim).await;
    let (_, fresh) = open_turn(&mut next, &sim, "two: after the restart").await;
    for turn in [&cut_off, &later] {
        let states = states_of(&sim, turn);
        assert_eq!(states, ["thinking", "completed"], "turn {turn}");
    }
    assert_eq!(states_of(&sim, &fresh), ["thinking"]);
    let history = sim.read_state(|s| s.turn_history.len());
    // The journal knows the two as closed: a later first connect closes nothing again.
    let closed = |home: &Path| {
        std::fs::read_to_string(journal_path(home))
            .expect("the journal reads")
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["turnClosed"].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + WAIT;
    while !(closed(&home).contains(&cut_off) && closed(&home).contains(&later)) {
        assert!(Instant::now() < deadline, "the journal never closed both");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(next.close().await, Some(0));
    let mut last = spawn(&sim, &home);
    last.connect(&sim).await;
    let (_, after) = open_turn(&mut last, &sim, "three: one more start").await;
    assert_eq!(states_of(&sim, &after), ["thinking"]);
    let closes_after: Vec<String> = sim.read_state(|s| {
        s.turn_history
            .iter()
            .skip(history)
            .filter(|t| t["state"] == "completed" || t["state"] == "interrupted")
            .filter_map(|t| t["turnId"].as_str().map(str::to_owned))
            .collect()
    });
    // `next` closed its own open turn at its clean exit (a gateway stop); nothing else.
    assert!(
        closes_after.iter().all(|t| t == &fresh),
        "closed again: {closes_after:?}"
    );
    let _ = last.close_and_drain().await;
}
