//! A soak of the real `canon-hermes serve --stdio` daemon against canon-sim, driven by the Rust
//! fake shim of the integration tests (`tests/it/shim_support.rs`): thousands of human messages,
//! each answered by one streamed turn, while several conversations are busy at once. Not part of
//! CI; it prints a table and fails when a message was not answered exactly once or a bounded
//! figure went past its bound.
//!
//! The messages go out in waves: a wave injects one message into each of `conversations`
//! conversations at once, then runs their turns interleaved (every request of a step is written
//! for all the wave's conversations before the first reply is read): `inbound.message` accepted →
//! `turn.start` → `adapter.send` (`expect_edits`) → 3 growing edits → 2 finalizing edits →
//! `turn.complete`. The daemon answers `turn.complete` after its 750 ms final-to-clear handoff,
//! so waves alternate between two sets of conversations: a wave runs while the previous one
//! waits out its handoff (2 × `conversations` conversations have a turn in flight).
//!
//! At 1,000, 2,500 and 5,000 messages (then every 5,000 and at the end), with every turn so far
//! complete, it prints the daemon's `VmRSS` (and `VmHWM`), the inbox journal's size and lines
//! (`<CANON_HOME>/inbox-<scope>.jsonl`), the handled ids it holds (the `handled` lines, and the
//! set `canon_inbox::format::parse` builds from it) and the rate. The bounds it checks:
//! the handled set keeps at most `MAX_HANDLED` ids, and the journal is rewritten to its live
//! state before it passes `COMPACT_LINES` lines.
//!
//! Exactly once, counted at the end: every injected message was handed to the shim in one
//! `inbound.message` (none after the run either), every turn's `turn.complete` was answered, and
//! in the simulator's state every message is covered by exactly one agent `turn_complete` (by
//! `replyTo` or by its Canon turn's active message ids) and every Canon turn published
//! `completed`.
//!
//! `cargo bench -p canon-hermes --bench soak` runs 5,000 messages over 8 conversations per wave;
//! `CANON_SOAK_MESSAGES` and `CANON_SOAK_CONVERSATIONS` change them. The simulator keeps its
//! newest 50,000 messages, so a run of more than about 24,000 messages cannot be judged. Without
//! `--bench` (a `cargo test --benches` style run) it does a small smoke run.

// The table on stdout is this benchmark's output.
#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use canon_inbox::format::{self, COMPACT_LINES};
use canon_inbox::tracker::MAX_HANDLED;
use canon_sim::control::Injection;
use canon_sim::journal::JOURNAL_CAP;
use canon_sim::state::MESSAGES_CAP;
use canon_sim::{ConversationSpec, SimHandle, DEFAULT_AGENT, DEFAULT_OWNER};
use serde_json::{json, Value};

// The fake shim of the integration tests, shared with `daemon.rs`; this bench uses fewer of its
// helpers than either of the other two binaries.
#[path = "../tests/it/shim_support.rs"]
#[allow(dead_code)]
mod shim_support;

use shim_support::Shim;

/// Growing edits of each streamed answer (two finalizing edits follow).
const EDITS: usize = 3;

/// Messages between two rows after the first three (1,000, 2,500, 5,000).
const ROW_EVERY: usize = 5_000;

/// How long the run waits, after the last turn, for a message handed to the shim twice.
const QUIET: Duration = Duration::from_millis(1_500);

/// How long the last Canon turns get to publish `completed` after their `turn.complete` reply.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// A positive count from the environment, or `default`.
fn knob(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(text) => match text.trim().replace('_', "").parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => panic!("{name}={text:?}: expected a positive count"),
        },
        Err(_) => default,
    }
}

/// The message counts a row is printed at.
fn checkpoints(total: usize) -> Vec<usize> {
    let mut points: Vec<usize> = if total >= 5_000 {
        [1_000, 2_500]
            .into_iter()
            .chain((1..).map(|k| k * ROW_EVERY).take_while(|&n| n < total))
            .collect()
    } else {
        vec![total / 5, total / 2]
    };
    points.push(total);
    points.retain(|&n| n > 0);
    points.dedup();
    points
}

/// A simulator for the soak: the test configuration with the message rate limits off (thousands
/// of messages at one frozen instant would exhaust Canon's per-sender window).
async fn sim() -> Arc<SimHandle> {
    let sim = shim_support::sim().await;
    sim.set_switches(|s| s.rate_limits = false);
    Arc::new(sim)
}

/// Creates `count` direct conversations between the owner and the agent.
fn conversations(sim: &SimHandle, prefix: &str, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            sim.create_conversation(ConversationSpec {
                id: Some(format!("{prefix}-{i:03}")),
                kind: "direct".to_owned(),
                name: Some(format!("{prefix} {i}")),
                member_ids: vec![DEFAULT_OWNER.to_owned(), DEFAULT_AGENT.to_owned()],
                behavior: None,
            })
        })
        .collect()
}

fn session_of(chat: &str) -> String {
    format!("agent:main:canon:dm:{chat}")
}

fn ctx(chat: &str) -> Value {
    json!({"platform": "canon", "chat_id": chat, "session_key": session_of(chat)})
}

/// What the shim saw, for the exactly-once count.
#[derive(Default)]
struct Ledger {
    /// Per injected message: its conversation.
    injected: BTreeMap<String, String>,
    /// `inbound.message` frames per Canon message id (any id, injected or not).
    inbound: HashMap<String, usize>,
    /// `turn.complete` requests answered `ok`.
    completed: usize,
    /// Turn ids `turn.start` returned.
    turns: Vec<String>,
}

/// One message's turn in a wave.
struct Slot {
    chat: String,
    text: String,
    message_id: String,
    event_ref: String,
    turn_id: String,
    answer: String,
}

/// Writes one request per slot, then reads every reply; the replies in slot order.
async fn step(
    shim: &mut Shim,
    slots: &[Slot],
    kind: &str,
    body: impl Fn(&Slot) -> Value,
) -> Vec<Value> {
    let mut ids = Vec::with_capacity(slots.len());
    for slot in slots {
        ids.push(shim.send(kind, body(slot)).await);
    }
    let mut replies = Vec::with_capacity(ids.len());
    for id in &ids {
        replies.push(shim.reply(id).await.0);
    }
    replies
}

/// Runs one wave over `chats` (messages `first..`) up to its `turn.complete` requests, written
/// and not yet answered; returns their request ids.
async fn wave(
    shim: &mut Shim,
    sim: &SimHandle,
    chats: &[String],
    first: usize,
    ledger: &mut Ledger,
) -> Vec<String> {
    shim.drop_notifications();
    let mut slots: Vec<Slot> = chats
        .iter()
        .enumerate()
        .map(|(i, chat)| {
            let text = format!("soak message {}", first + i);
            let stored = sim
                .inject_message(&Injection {
                    conversation_id: Some(chat.clone()),
                    text: Some(text.clone()),
                    ..Injection::default()
                })
                .expect("inject");
            let message_id = stored["id"].as_str().expect("a message id").to_owned();
            ledger.injected.insert(message_id.clone(), chat.clone());
            Slot {
                chat: chat.clone(),
                text,
                message_id,
                event_ref: String::new(),
                turn_id: String::new(),
                answer: String::new(),
            }
        })
        .collect();

    // The daemon hands the wave's messages over in its own order; a frame for any other
    // message (one handed over twice) is counted and answered like the rest.
    let mut waiting = slots.len();
    while waiting > 0 {
        let (frame, _) = shim.expect_frame("inbound.message").await;
        let event = &frame["body"]["event"];
        let message_id = event["message_id"].as_str().unwrap_or_default().to_owned();
        *ledger.inbound.entry(message_id.clone()).or_default() += 1;
        shim.answer(&frame, json!({"accepted": true})).await;
        if let Some(slot) = slots
            .iter_mut()
            .find(|s| s.message_id == message_id && s.event_ref.is_empty())
        {
            assert!(
                event["text"]
                    .as_str()
                    .is_some_and(|t| t.contains(&slot.text)),
                "{frame}"
            );
            slot.event_ref = frame["body"]["event_ref"]
                .as_str()
                .expect("event_ref")
                .to_owned();
            waiting -= 1;
        }
    }

    let started = step(shim, &slots, "turn.start", |s| {
        json!({
            "event_ref": s.event_ref,
            "session_key": session_of(&s.chat),
            "event": {"chat_id": s.chat, "chat_type": "dm",
                      "user_id": DEFAULT_OWNER, "message_id": s.message_id},
        })
    })
    .await;
    for (slot, started) in slots.iter_mut().zip(&started) {
        slot.turn_id = started["body"]["turn_id"]
            .as_str()
            .unwrap_or_else(|| panic!("turn id: {started}"))
            .to_owned();
        slot.answer = format!("Answer to {}:", slot.text);
        ledger.turns.push(slot.turn_id.clone());
    }

    let sent = step(shim, &slots, "adapter.send", |s| {
        json!({"chat_id": s.chat, "content": s.answer, "metadata": {"expect_edits": true},
               "ctx": ctx(&s.chat)})
    })
    .await;
    for reply in &sent {
        assert_eq!(reply["body"]["success"], true, "{reply}");
    }
    for k in 0..EDITS + 2 {
        let finalize = k >= EDITS;
        if k < EDITS {
            for slot in &mut slots {
                slot.answer.push_str(&format!(" word{k}"));
            }
        } else if k == EDITS {
            for slot in &mut slots {
                slot.answer.push('.');
            }
        }
        let edited = step(shim, &slots, "adapter.edit", |s| {
            json!({"chat_id": s.chat, "message_id": s.turn_id, "content": s.answer,
                   "finalize": finalize, "ctx": ctx(&s.chat)})
        })
        .await;
        for reply in &edited {
            assert_eq!(reply["body"]["success"], true, "{reply}");
        }
    }

    let mut complete_ids = Vec::with_capacity(slots.len());
    for slot in &slots {
        complete_ids.push(
            shim.send(
                "turn.complete",
                json!({"event_ref": slot.event_ref, "session_key": session_of(&slot.chat),
                       "outcome": "success"}),
            )
            .await,
        );
    }
    complete_ids
}

/// Reads the `turn.complete` replies of a wave.
async fn collect(shim: &mut Shim, complete_ids: Vec<String>, ledger: &mut Ledger) {
    for id in complete_ids {
        let (reply, _) = shim.reply(&id).await;
        assert_eq!(reply["ok"], true, "{reply}");
        ledger.completed += 1;
    }
}

/// Per Canon turn id: its conversation, the states published and the active message ids.
#[derive(Default)]
struct CanonTurns {
    /// The simulator journal's position read so far.
    cursor: u64,
    turns: HashMap<String, (String, Vec<String>, HashSet<String>)>,
}

impl CanonTurns {
    /// Folds in the agent's `/runtime/turn` records the simulator journaled since the last call.
    /// The journal keeps its newest [`JOURNAL_CAP`] entries; the soak reads it after every wave,
    /// long before it wraps, and checks that it did not.
    fn read(&mut self, sim: &SimHandle) {
        let (cursor, entries) = sim.read_state(|s| {
            (
                s.journal.cursor(),
                s.journal.since(self.cursor, Some("/runtime/turn")),
            )
        });
        assert!(
            cursor - self.cursor < JOURNAL_CAP as u64,
            "the simulator's journal wrapped between two reads"
        );
        self.cursor = cursor;
        for e in entries
            .iter()
            .filter(|e| e.method == "POST" && e.status == 200)
            .filter(|e| e.principal.as_deref() == Some(DEFAULT_AGENT))
        {
            let r = &e.body;
            let id = r["turnId"].as_str().unwrap_or_default().to_owned();
            let turn = self.turns.entry(id).or_insert_with(|| {
                (
                    r["conversationId"].as_str().unwrap_or_default().to_owned(),
                    Vec::new(),
                    HashSet::new(),
                )
            });
            turn.1
                .push(r["state"].as_str().unwrap_or_default().to_owned());
            for m in r["activeMessageIds"].as_array().into_iter().flatten() {
                if let Some(m) = m.as_str() {
                    turn.2.insert(m.to_owned());
                }
            }
        }
    }

    /// Whether turn `id` published `completed`.
    fn completed(&self, id: &str) -> bool {
        self.turns
            .get(id)
            .is_some_and(|t| t.1.iter().any(|s| s == "completed"))
    }
}

/// The inbox journal's figures.
struct JournalFigures {
    bytes: u64,
    lines: usize,
    /// `handled` lines in the file.
    handled_lines: usize,
    /// Distinct ids among them.
    handled_distinct: usize,
    /// The handled set `format::parse` builds from the file.
    handled_set: usize,
    /// Turns the file leaves open (sessions, Canon turns).
    open_turns: usize,
    runtime_turns: usize,
}

/// The daemon's inbox journal in `home` (its one `inbox-*.jsonl`), once it exists.
fn find_journal(home: &Path) -> Option<PathBuf> {
    let found: Vec<PathBuf> = std::fs::read_dir(home)
        .expect("the Canon home")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("inbox-") && n.ends_with(".jsonl"))
        })
        .collect();
    assert!(found.len() <= 1, "one inbox journal in {}", home.display());
    found.into_iter().next()
}

/// Watches the journal's inode: a compaction renames a new file over it.
struct Compactions {
    home: PathBuf,
    path: Option<PathBuf>,
    inode: Option<u64>,
    seen: usize,
}

impl Compactions {
    fn new(home: &Path) -> Compactions {
        Compactions {
            home: home.to_owned(),
            path: None,
            inode: None,
            seen: 0,
        }
    }

    /// Looks at the journal once (the soak does after every wave: a compaction takes more than
    /// 20,000 lines, thousands of waves, so none is missed).
    fn check(&mut self) {
        use std::os::unix::fs::MetadataExt as _;
        if self.path.is_none() {
            self.path = find_journal(&self.home);
        }
        let Some(path) = &self.path else { return };
        let inode = std::fs::metadata(path).expect("the inbox journal").ino();
        if self.inode.is_some_and(|old| old != inode) {
            self.seen += 1;
        }
        self.inode = Some(inode);
    }
}

fn journal_figures(path: &Path) -> JournalFigures {
    let bytes = std::fs::read(path).expect("the inbox journal");
    let text = std::str::from_utf8(&bytes).expect("a UTF-8 journal");
    let header: Value =
        serde_json::from_str(text.lines().next().expect("a header")).expect("a JSON header");
    let scope = header["scope"].as_str().expect("the journal's scope");
    let parsed = format::parse(&bytes, scope)
        .unwrap_or_else(|(line, reason)| panic!("journal line {line}: {reason}"));
    let mut handled_lines = 0;
    let mut distinct = HashSet::new();
    for line in text.lines().skip(1) {
        let record: Value = serde_json::from_str(line).expect("a JSON record");
        if let Some(id) = record["handled"].as_str() {
            handled_lines += 1;
            distinct.insert(id.to_owned());
        }
    }
    JournalFigures {
        bytes: bytes.len() as u64,
        lines: parsed.lines,
        handled_lines,
        handled_distinct: distinct.len(),
        handled_set: parsed.state.handled.len(),
        open_turns: parsed.state.open_turns.len(),
        runtime_turns: parsed.state.runtime_turns.len(),
    }
}

/// `(VmRSS, VmHWM)` of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("a memory field")
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn print_header() {
    println!(
        "{:>8} {:>9} {:>9} {:>12} {:>8} {:>8} {:>10} {:>10} {:>10} {:>7} {:>9} {:>9}",
        "messages",
        "RSS MiB",
        "HWM MiB",
        "journal B",
        "lines",
        "compact",
        "handled ln",
        "distinct",
        "handled set",
        "open",
        "msg/s",
        "msg/s all"
    );
}

/// The exactly-once count over the whole run.
struct Verdict {
    /// Injected messages handed to the shim in no `inbound.message`.
    never_handed: usize,
    /// Injected messages handed over more than once.
    handed_twice: usize,
    /// `inbound.message` frames for messages the soak did not inject.
    unknown_handed: usize,
    /// Messages no agent `turn_complete` covers.
    unanswered: usize,
    /// Messages several cover.
    answered_twice: usize,
    /// Turns that never published `completed`.
    unclosed: usize,
    /// `turn_complete` messages of the agent.
    finals: usize,
}

impl Verdict {
    fn clean(&self) -> bool {
        self.never_handed == 0
            && self.handed_twice == 0
            && self.unknown_handed == 0
            && self.unanswered == 0
            && self.answered_twice == 0
            && self.unclosed == 0
    }
}

fn judge(sim: &SimHandle, ledger: &Ledger, canon: &CanonTurns) -> Verdict {
    let (finals, evicted) = sim.read_state(|s| {
        let finals: Vec<(String, String, Option<String>)> = s
            .messages
            .iter()
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .filter(|m| m.message["metadata"]["turnSemantics"] == "turn_complete")
            .map(|m| {
                (
                    m.conversation_id.clone(),
                    m.message["metadata"]["turnId"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    m.message["replyTo"].as_str().map(str::to_owned),
                )
            })
            .collect();
        (finals, s.messages.len() >= MESSAGES_CAP)
    });
    assert!(
        !evicted,
        "the simulator evicted its oldest messages (it keeps {MESSAGES_CAP}): run fewer messages"
    );
    let mut covering: HashMap<&str, usize> = HashMap::new();
    for (conversation, turn_id, reply_to) in &finals {
        let mut covered: HashSet<&str> = HashSet::new();
        if let Some(id) = reply_to {
            covered.insert(id.as_str());
        }
        if let Some((_, _, active)) = canon.turns.get(turn_id) {
            covered.extend(active.iter().map(String::as_str));
        }
        for id in covered {
            if ledger.injected.get(id) == Some(conversation) {
                *covering.entry(id).or_default() += 1;
            }
        }
    }
    let handed = |id: &str| ledger.inbound.get(id).copied().unwrap_or(0);
    let covers = |id: &str| covering.get(id).copied().unwrap_or(0);
    Verdict {
        never_handed: ledger.injected.keys().filter(|id| handed(id) == 0).count(),
        handed_twice: ledger.injected.keys().filter(|id| handed(id) > 1).count(),
        unknown_handed: ledger
            .inbound
            .keys()
            .filter(|id| !ledger.injected.contains_key(*id))
            .count(),
        unanswered: ledger.injected.keys().filter(|id| covers(id) == 0).count(),
        answered_twice: ledger.injected.keys().filter(|id| covers(id) > 1).count(),
        unclosed: ledger.turns.iter().filter(|t| !canon.completed(t)).count(),
        finals: finals.len(),
    }
}

/// What the rows say about growth: RSS from the first row to the last, the journal's lines per
/// message and where its bounds take over.
fn summarize(rows: &[(usize, u64, usize, usize)]) {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return;
    };
    println!(
        "daemon VmRSS: {:.1} MiB at {} messages, {:.1} MiB at {} ({:+.1} MiB over {} messages)",
        mib(first.1),
        first.0,
        mib(last.1),
        last.0,
        (last.1 as f64 - first.1 as f64) / 1024.0,
        last.0 - first.0
    );
    // Lines per message from the last row before the first compaction.
    if let Some(&(messages, _, lines, _)) = rows.iter().rev().find(|r| r.3 == 0) {
        let per_message = lines.saturating_sub(1) as f64 / messages as f64;
        println!(
            "inbox journal: {per_message:.2} lines per message before its first compaction, so \
             it first compacts near message {:.0} (COMPACT_LINES / lines per message); {} \
             compaction(s) in this run",
            COMPACT_LINES as f64 / per_message,
            last.3
        );
    }
    println!(
        "handled set: grows by one id per message up to MAX_HANDLED = {MAX_HANDLED}, then drops \
         its oldest id for each new one{}",
        if last.0 > MAX_HANDLED {
            " (reached in this run)"
        } else {
            " (not reached in this run: CANON_SOAK_MESSAGES=15000 passes both bounds)"
        }
    );
}

async fn soak(total: usize, per_wave: usize) -> bool {
    let sim = sim().await;
    let groups = [
        conversations(&sim, "c-soak-a", per_wave),
        conversations(&sim, "c-soak-b", per_wave),
    ];
    let home = tempfile::tempdir().expect("a temp CANON_HOME");
    let mut shim = Shim::spawn_in(&sim, home, &[]);
    shim.connect(&sim).await;
    let pid = shim.pid();
    let (idle_rss, _) = memory_kib(pid);
    let home = shim.home().to_owned();

    println!(
        "{total} messages, {per_wave} conversations per wave, two waves in flight \
         ({} conversations); each message one streamed turn (send + {EDITS} edits + 2 finalizing \
         edits)",
        2 * per_wave
    );
    println!(
        "bounds: handled set <= MAX_HANDLED = {MAX_HANDLED} ids; journal <= COMPACT_LINES = \
         {COMPACT_LINES} lines (past it the daemon rewrites it to its live state: the handled \
         ids, open turns and cursor)"
    );
    println!("daemon idle after connect: VmRSS {:.1} MiB", mib(idle_rss));
    println!();
    print_header();

    let mut ledger = Ledger::default();
    let mut canon = CanonTurns::default();
    let mut injected = 0;
    let mut waves = 0;
    let mut previous: Option<Vec<String>> = None;
    let mut busy = Duration::ZERO;
    let mut last_row = (0, Duration::ZERO);
    let mut within_bounds = true;
    let mut compactions = Compactions::new(&home);
    // Per row: messages, VmRSS KiB, journal lines, compactions seen.
    let mut rows: Vec<(usize, u64, usize, usize)> = Vec::new();
    for point in checkpoints(total) {
        let started = Instant::now();
        while injected < point {
            let size = per_wave.min(point - injected);
            let chats = &groups[waves % 2][..size];
            let ids = wave(&mut shim, &sim, chats, injected, &mut ledger).await;
            injected += size;
            waves += 1;
            if let Some(ids) = previous.replace(ids) {
                collect(&mut shim, ids, &mut ledger).await;
            }
            canon.read(&sim);
            compactions.check();
        }
        if let Some(ids) = previous.take() {
            collect(&mut shim, ids, &mut ledger).await;
        }
        canon.read(&sim);
        compactions.check();
        busy += started.elapsed();
        assert_eq!(ledger.completed, point);

        let (rss, hwm) = memory_kib(pid);
        let path = compactions.path.clone().expect("the inbox journal exists");
        let j = journal_figures(&path);
        let rate = (point - last_row.0) as f64 / (busy - last_row.1).as_secs_f64();
        let overall = point as f64 / busy.as_secs_f64();
        last_row = (point, busy);
        rows.push((point, rss, j.lines, compactions.seen));
        println!(
            "{:>8} {:>9.1} {:>9.1} {:>12} {:>8} {:>8} {:>10} {:>10} {:>10} {:>7} {:>9.1} {:>9.1}",
            point,
            mib(rss),
            mib(hwm),
            j.bytes,
            j.lines,
            compactions.seen,
            j.handled_lines,
            j.handled_distinct,
            j.handled_set,
            format!("{}/{}", j.open_turns, j.runtime_turns),
            rate,
            overall
        );
        if j.handled_set > MAX_HANDLED || j.lines > COMPACT_LINES {
            within_bounds = false;
        }
    }
    println!();
    println!(
        "columns: journal B and lines of the inbox journal; compact: its compactions so far; \
         handled ln: its `handled` lines; distinct: distinct ids among them; handled set: the \
         set canon_inbox::format::parse reads back; open: sessions / Canon turns it leaves \
         open; msg/s: since the previous row, and over the whole run (the rows' own \
         measurements excluded)"
    );
    summarize(&rows);

    // A message handed to the shim a second time would come now; the wait is for it.
    tokio::time::sleep(QUIET).await;
    let deadline = Instant::now() + CLOSE_WAIT;
    loop {
        canon.read(&sim);
        if ledger.turns.iter().all(|t| canon.completed(t)) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let late = shim.close_and_drain().await;
    for frame in late.iter().filter(|f| f["type"] == "inbound.message") {
        let id = frame["body"]["event"]["message_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        *ledger.inbound.entry(id).or_default() += 1;
    }
    let status = tokio::time::timeout(shim_support::WAIT, shim.child.wait())
        .await
        .ok()
        .and_then(Result::ok)
        .and_then(|s| s.code());

    let v = judge(&sim, &ledger, &canon);
    println!();
    println!(
        "exactly once: {} messages injected, {} handed to the shim once, {} turns started, {} \
         turn.complete answered ok, {} agent turn_complete messages in the simulator",
        ledger.injected.len(),
        ledger.inbound.values().filter(|&&n| n == 1).count(),
        ledger.turns.len(),
        ledger.completed,
        v.finals
    );
    println!(
        "  never handed {}, handed twice {}, handed but not injected {}, unanswered {}, \
         answered twice {}, Canon turns without `completed` {} -> {}",
        v.never_handed,
        v.handed_twice,
        v.unknown_handed,
        v.unanswered,
        v.answered_twice,
        v.unclosed,
        if v.clean() { "OK" } else { "FAILED" }
    );
    println!(
        "bounds: {}; daemon exit status {status:?}",
        if within_bounds {
            "every row within them"
        } else {
            "EXCEEDED"
        }
    );
    v.clean() && within_bounds && status == Some(0)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let total = knob("CANON_SOAK_MESSAGES", if full { 5_000 } else { 40 });
    let per_wave = knob("CANON_SOAK_CONVERSATIONS", if full { 8 } else { 4 });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    println!(
        "canon-hermes daemon soak ({}; daemon {})",
        if full {
            "full run"
        } else {
            "smoke run, `cargo bench` for the full counts"
        },
        env!("CARGO_BIN_EXE_canon-hermes")
    );
    let started = Instant::now();
    let ok = runtime.block_on(soak(total, per_wave));
    println!();
    println!(
        "total soak wall time: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(ok, "the soak failed (see above)");
}
