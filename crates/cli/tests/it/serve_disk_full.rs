//! A full disk under the real `canon-hermes serve --stdio`, against canon-sim. The disk is
//! filled for the daemon alone: the test lowers the daemon's soft `RLIMIT_FSIZE` (`prlimit`), so
//! a write that would grow a file past it stops short and fails with `EFBIG` (the daemon handles
//! `SIGXFSZ`, so the signal does not kill it), and raises it again for the space to return.
//! Whatever a write could not keep while the disk was full, the daemon still holds and writes
//! once it can: the inbox journal a successor opens records every message handled before, during
//! and after, and an approval the registry could not reserve was never created on Canon. The
//! agent stays online throughout. Counted from the fake shim's frames, the journal and registry
//! files, the daemon's log and the simulator's state, never by sleeping.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use canon_sim::{SimHandle, DEFAULT_CONVERSATION};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::serve_support::inject_text;
use super::shim_support::{complete_turn, ctx_with_owner, start_turn, Shim, WAIT};

/// The lines the daemon logged to stderr so far (each is echoed to the test's stderr too).
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    /// How many lines logged so far contain `text`.
    fn count(&self, text: &str) -> usize {
        let lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().filter(|line| line.contains(text)).count()
    }

    /// Waits until a logged line contains `text`; returns that line.
    async fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let found = {
                let lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
                lines.iter().find(|line| line.contains(text)).cloned()
            };
            if let Some(line) = found {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon never logged {text:?}: {:?}",
                self.0.lock().unwrap_or_else(|e| e.into_inner())
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A daemon on `home` whose inbox logs at INFO, with its stderr read into a [`Log`].
#[allow(clippy::print_stderr)] // the daemon's log, shown as an inherited stderr would show it
fn spawn_logged(sim: &SimHandle, home: &Path) -> (Shim, Log) {
    let home = home.to_str().expect("a UTF-8 temp dir");
    let mut shim = Shim::spawn_logged(
        sim,
        "warn,canon_adapter::inbox=info",
        Stdio::piped(),
        &[("CANON_HOME", home)],
    );
    let stderr = shim.child.stderr.take().expect("piped stderr");
    let log = Log::default();
    let lines = Arc::clone(&log.0);
    tokio::spawn(async move {
        let mut reader = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            eprintln!("{line}");
            lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    (shim, log)
}

/// Sets the daemon's soft file-size limit to `bytes` (`None`: as high as the hard limit, which
/// is left as it is).
fn limit_file_size(shim: &Shim, bytes: Option<u64>) {
    use rustix::process::{getrlimit, prlimit, Pid, Resource, Rlimit};
    let pid = i32::try_from(shim.pid())
        .ok()
        .and_then(Pid::from_raw)
        .expect("the daemon's pid");
    // The daemon inherited the test's limits.
    let hard = getrlimit(Resource::Fsize).maximum;
    prlimit(
        Some(pid),
        Resource::Fsize,
        Rlimit {
            current: bytes.or(hard),
            maximum: hard,
        },
    )
    .expect("the daemon's file-size limit is set");
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

/// The journal's bytes and the message ids it records as handled, asserting the file loads as
/// the daemon loads it. With `settled` (no write is under way) no line may be cut short either;
/// otherwise a last line cut short is a write in progress, which the daemon's open drops too.
fn journal(home: &Path, settled: bool) -> (Vec<u8>, Vec<String>) {
    let (bytes, parsed) = parse_journal(home);
    if settled {
        assert_eq!(
            parsed.complete_bytes,
            bytes.len(),
            "no line cut short: {:?}",
            String::from_utf8_lossy(&bytes)
        );
    }
    let handled = String::from_utf8_lossy(&bytes[..parsed.complete_bytes])
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["handled"].as_str().map(str::to_owned))
        .collect();
    (bytes, handled)
}

/// The journal's scope (its file is `inbox-<scope>.jsonl`).
fn scope(home: &Path) -> String {
    let path = journal_path(home);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name.strip_prefix("inbox-")
        .and_then(|n| n.strip_suffix(".jsonl"))
        .expect("the journal's scope")
        .to_owned()
}

/// The journal's bytes, parsed by the daemon's own reader (which drops a last line cut short).
fn parse_journal(home: &Path) -> (Vec<u8>, canon_inbox::format::Parsed) {
    let bytes = std::fs::read(journal_path(home)).expect("the journal reads");
    let parsed =
        canon_inbox::format::parse(&bytes, &scope(home)).unwrap_or_else(|(line, reason)| {
            panic!(
                "the journal is unreadable at line {line}: {reason}: {:?}",
                String::from_utf8_lossy(&bytes)
            )
        });
    (bytes, parsed)
}

/// At least the size of the journal rewritten whole with `more` messages handled on top of
/// what it holds: its live state, and as many handled records like `message_id`'s.
fn rewritten_with(home: &Path, more: usize, message_id: &str) -> usize {
    use canon_inbox::format::{record_line, snapshot};
    let (_, parsed) = parse_journal(home);
    let handled = record_line(&canon_inbox::Record::Handled {
        message_id: message_id.to_owned(),
        at_ms: 1_800_000_000_000,
    });
    snapshot(&scope(home), &parsed.state).len() + more * handled.len()
}

/// Waits until the journal records `count` handled messages.
async fn wait_handled(home: &Path, count: usize) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, handled) = journal(home, false);
        if handled.len() >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the journal never recorded {count} messages: {handled:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Injects a message with `text`, accepts the daemon's `inbound.message` for it and returns the
/// inbound frame.
async fn handle(shim: &mut Shim, sim: &SimHandle, text: &str) -> Value {
    inject_text(sim, text);
    let inbound = shim.accept_inbound().await;
    assert_eq!(inbound["body"]["event"]["text"], text, "{inbound}");
    inbound
}

fn message_id(inbound: &Value) -> String {
    inbound["body"]["event"]["message_id"]
        .as_str()
        .expect("a message id")
        .to_owned()
}

/// The states Canon got for turn `turn_id`, in order.
fn states_of(sim: &SimHandle, turn_id: &str) -> Vec<String> {
    sim.read_state(|s| {
        s.turn_history
            .iter()
            .filter(|t| t["turnId"] == turn_id)
            .filter_map(|t| t["state"].as_str().map(str::to_owned))
            .collect()
    })
}

/// The inbox journal's appends fail while the disk is full: the first stops part-way into a
/// record, the later ones cannot even rewrite the journal. The file stays as it was before the
/// disk filled (the part-written record is taken back), the daemon goes on handing messages to
/// Hermes and publishing its turns, and once space returns its next write puts everything it
/// handled back on disk. A successor on the same home opens the journal, is replayed none of
/// the messages handled before, during or after the full disk, and gets a new one once.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_during_journal_appends_loses_nothing_and_the_agent_stays_online() {
    let sim = super::shim_support::sim().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let home = scratch.path().join("canon");
    let (mut first, log) = spawn_logged(&sim, &home);
    first.connect(&sim).await;
    let mut handled = Vec::new();
    for n in 0..2 {
        handled.push(message_id(
            &handle(&mut first, &sim, &format!("before {n}")).await,
        ));
        wait_handled(&home, handled.len()).await;
    }

    // The disk fills with room for a part of the next record (a handled record and its cursor
    // are 60 bytes and more). The first write that fails is an append; each later one rewrites
    // the journal whole, with two more messages handled at the least, which does not fit
    // either: a full disk takes no rewrite.
    let (before, _) = journal(&home, true);
    let limit = before.len() + 16;
    assert!(rewritten_with(&home, 2, &handled[1]) > limit);
    limit_file_size(&first, Some(limit as u64));
    let mut last = Value::Null;
    for n in 0..4 {
        last = handle(&mut first, &sim, &format!("during {n}")).await;
        handled.push(message_id(&last));
    }
    // A turn on the last message: Canon sees it open only once its journal write was tried,
    // which comes after every record of the messages above.
    let event_ref = last["body"]["event_ref"].as_str().expect("an event_ref");
    let turn = start_turn(&mut first, event_ref, message_id(&last)).await;
    complete_turn(&mut first, event_ref).await;
    let deadline = Instant::now() + WAIT;
    while states_of(&sim, &turn) != ["thinking", "completed"] {
        assert!(
            Instant::now() < deadline,
            "the turn never completed on Canon: {:?}",
            states_of(&sim, &turn)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let failed = log.wait_for("inbox write failed").await;
    assert!(failed.contains("File too large"), "{failed}");
    assert_eq!(
        journal(&home, true).0,
        before,
        "every write failed, and the part of a record the first one wrote was taken back"
    );
    assert_eq!(log.count("inbox writes work again"), 0);

    limit_file_size(&first, None);
    handled.push(message_id(&handle(&mut first, &sim, "after").await));
    log.wait_for("inbox writes work again").await;
    wait_handled(&home, handled.len()).await;
    assert_eq!(log.count("inbox write failed"), 1, "logged once per outage");
    assert_eq!(first.close().await, Some(0));
    let history = sim.read_state(|s| s.turn_history.len());
    let (_, mut on_disk) = journal(&home, true);
    on_disk.sort();
    let mut expected = handled.clone();
    expected.sort();
    assert_eq!(on_disk, expected, "every handled message, each once");

    // The successor opens the journal: a fragment left mid-file would refuse its connect as
    // `inbox_unreadable`.
    let (mut second, _) = spawn_logged(&sim, &home);
    second.connect(&sim).await;
    let next = handle(&mut second, &sim, "to the successor").await;
    assert!(
        !handled.contains(&message_id(&next)),
        "a new message: {next}"
    );
    wait_handled(&home, handled.len() + 1).await;
    let rest: Vec<Value> = second
        .close_and_drain()
        .await
        .into_iter()
        .filter(|f| f["type"] == "inbound.message")
        .collect();
    assert_eq!(rest, Vec::<Value>::new(), "nothing replayed, nothing twice");
    assert_eq!(
        sim.read_state(|s| s.turn_history.len()),
        history,
        "the turn closed while the disk was full is not closed again"
    );
    assert_eq!(states_of(&sim, &turn), ["thinking", "completed"]);
}

/// A simulator on the system clock: the daemon computes approval deadlines from the real
/// clock, as Canon expects.
async fn approvals_sim() -> SimHandle {
    let mut config = canon_sim::config::SimConfig::for_tests();
    config.frozen_clock_ms = None;
    canon_sim::Sim::start(config)
        .await
        .expect("the simulator starts")
}

/// A `request_approval` tool call; its reply.
async fn request_approval(shim: &mut Shim, question: &str) -> Value {
    shim.request(
        "tool.call",
        json!({"name": "canon_runtime_control",
               "args": {"action": "request_approval", "title": "Pay", "question": question,
                        "timeoutSeconds": 3600},
               "ctx": ctx_with_owner()}),
    )
    .await
}

/// The tool result a reply carries.
fn tool_result(reply: &Value) -> Value {
    let text = reply["body"]["result"]
        .as_str()
        .unwrap_or_else(|| panic!("a tool result: {reply}"));
    serde_json::from_str(text).expect("JSON")
}

/// The id of the approval a successful request created.
fn approval_id(reply: &Value) -> String {
    let result = tool_result(reply);
    assert_eq!(result["status"], "pending", "{result}");
    result["approvalId"].as_str().expect("an id").to_owned()
}

/// The approval creates Canon got, in order: the approval id of each, with its status.
fn creates(sim: &SimHandle) -> Vec<(String, u16)> {
    sim.journal(0, Some("/runtime-interaction/request"))
        .into_iter()
        .filter(|e| e.method == "POST")
        .map(|e| {
            let id = e.body["approvalId"].as_str().unwrap_or_default().to_owned();
            (id, e.status)
        })
        .collect()
}

/// The approvals Canon holds, sorted: (id, conversation).
fn approvals_on_canon(sim: &SimHandle) -> Vec<(String, String)> {
    let mut approvals: Vec<(String, String)> = sim.read_state(|s| {
        s.interactions
            .values()
            .filter(|i| i.kind == "approval")
            .map(|i| (i.id.clone(), i.conversation_id.clone()))
            .collect()
    });
    approvals.sort();
    approvals
}

/// The registry file's bytes and its approvals, sorted: (id, status), as its own validator
/// loads it.
fn registry(home: &Path) -> (Vec<u8>, Vec<(String, String)>) {
    let store = canon_approvals::store::Store::new(home).expect("a store");
    let registry = store
        .snapshot()
        .unwrap_or_else(|e| panic!("the registry loads: {e}"));
    let mut entries: Vec<(String, String)> = registry
        .entries()
        .map(|e| (e.approval_id().to_owned(), e.status().as_str().to_owned()))
        .collect();
    entries.sort();
    let bytes = std::fs::read(store.registry_path()).expect("the registry reads");
    (bytes, entries)
}

/// The registry's temp files in `home`.
fn temp_files(home: &Path) -> Vec<String> {
    std::fs::read_dir(home)
        .expect("the home exists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(canon_approvals::store::TEMP_FILE_PREFIX))
        .collect()
}

/// A detached approval whose reservation cannot be written (the registry rewritten with one
/// more entry does not fit the full disk) fails the tool call with the registry's error before
/// anything reaches Canon; the registry keeps its earlier contents and no temp file is left.
/// The agent stays online, and once space returns the next request reserves, creates and
/// activates its approval, which the registry and Canon then hold once each.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_during_an_approvals_write_fails_the_request_cleanly_and_works_after() {
    let sim = approvals_sim().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let home = scratch.path().join("canon");
    let (mut shim, _log) = spawn_logged(&sim, &home);
    shim.connect(&sim).await;
    let earlier = approval_id(&request_approval(&mut shim, "Pay 100 ILS?").await);
    let pending = |id: &String| (id.clone(), "pending".to_owned());
    let (before, entries) = registry(&home);
    assert_eq!(entries, [pending(&earlier)]);

    // The registry may not grow: the reservation's temp file stops short of the new document.
    limit_file_size(&shim, Some(before.len() as u64));
    let refused = request_approval(&mut shim, "Pay 8,200 ILS?").await;
    assert_eq!(refused["ok"], true, "answered as a tool result: {refused}");
    let result = tool_result(&refused);
    assert_eq!(result["success"], false, "{result}");
    let error = result["error"].as_str().expect("an error");
    assert!(
        error.contains("could not write the detached approval registry")
            && error.contains("write temp file"),
        "{error}"
    );
    assert_eq!(
        creates(&sim),
        [(earlier.clone(), 200)],
        "nothing was sent to Canon"
    );
    assert_eq!(registry(&home), (before, vec![pending(&earlier)]));
    assert_eq!(temp_files(&home), Vec::<String>::new());
    handle(&mut shim, &sim, "still online").await;

    limit_file_size(&shim, None);
    let later = approval_id(&request_approval(&mut shim, "Pay 8,200 ILS?").await);
    assert_eq!(
        creates(&sim),
        [(earlier.clone(), 200), (later.clone(), 200)],
        "created once"
    );
    let mut both = [earlier, later];
    both.sort();
    let in_direct = |id: &String| (id.clone(), DEFAULT_CONVERSATION.to_owned());
    assert_eq!(
        approvals_on_canon(&sim),
        both.iter().map(in_direct).collect::<Vec<_>>()
    );
    assert_eq!(
        registry(&home).1,
        both.iter().map(pending).collect::<Vec<_>>()
    );
    assert_eq!(temp_files(&home), Vec::<String>::new());
    assert_eq!(shim.close().await, Some(0));
}
