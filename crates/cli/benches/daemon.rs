//! End-to-end figures of the real `canon-hermes serve --stdio` daemon against canon-sim, driven
//! by the Rust fake shim of the integration tests (`tests/it/shim_support.rs`) over the
//! JSON-lines protocol (hermes-host.md §19). Prints a table; asserts nothing about time.
//!
//! * Added latency: (a) the injected message's event is stored in the sim, just before the sim
//!   announces it to its SSE writer → `inbound.message` line read from the daemon's stdout;
//!   (b) `turn.complete` written → the sim stored the `turn_complete` message (seen by a
//!   `wait_for` watcher task in this process), and (b') → the `turn.complete` reply read back
//!   (this one contains the designed 750 ms final-to-clear handoff, turns.md §7.5).
//! * Canon requests per streamed turn, by route, from the sim journal.
//! * Daemon RSS (`VmRSS`, `VmHWM`): idle after handshake + connect, and with 1,000
//!   conversations cached (one waking message injected into each).
//! * Daemon CPU per streamed turn (`utime + stime` of `/proc/<pid>/stat`) and wall per turn.
//!
//! Turns run in bursts over distinct conversations: the daemon answers `turn.complete` only
//! after the 750 ms handoff, so a burst runs turns in conversations whose previous turn is
//! closed, and ends before the first of its turns starts closing; the shim then collects the
//! replies. No measured interval overlaps another turn's closing writes (the table reports the
//! count that did, expected 0).
//!
//! `cargo bench -p canon-hermes --bench daemon` runs the full counts; without `--bench` (a
//! `cargo test --benches` style run) it does a small smoke run through the same code paths.

// The table on stdout is this benchmark's output.
#![allow(clippy::print_stdout)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use canon_sim::control::Injection;
use canon_sim::{ConversationSpec, SimHandle, DEFAULT_AGENT, DEFAULT_OWNER};
use serde_json::{json, Value};

// The fake shim of the integration tests; its helpers used by only one of the two binaries
// carry `#[allow(dead_code)]` with the reason.
#[path = "../tests/it/shim_support.rs"]
mod shim_support;

use shim_support::{Shim, WAIT};

/// The daemon's final-to-clear handoff (turns.md §7.5; `FINAL_HANDOFF_MS`).
const HANDOFF: Duration = Duration::from_millis(750);

/// A burst ends when the next turn could start within this of the first pending closing.
const MARGIN: Duration = Duration::from_millis(200);

/// How much work each section does.
#[derive(Debug, Clone, Copy)]
struct Counts {
    /// Turns of the latency section.
    latency_turns: usize,
    /// Turns of the CPU section.
    cpu_turns: usize,
    /// Conversations cached for the RSS section.
    conversations: usize,
    /// Conversations the turns rotate over (the most turns in one burst).
    chats: usize,
    /// Pause between latency turns.
    gap: Duration,
}

const FULL: Counts = Counts {
    latency_turns: 300,
    cpu_turns: 300,
    conversations: 1_000,
    chats: 48,
    gap: Duration::from_millis(5),
};

const SMOKE: Counts = Counts {
    latency_turns: 3,
    cpu_turns: 3,
    conversations: 10,
    chats: 2,
    gap: Duration::from_millis(1),
};

/// A simulator for the benchmark: the test configuration (frozen clock) with the message rate
/// limits off, since hundreds of turns at one frozen instant would otherwise exhaust Canon's
/// per-sender window.
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
                id: Some(format!("{prefix}-{i:04}")),
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

/// Injects a human message into `chat`, waits for the daemon's `inbound.message` and accepts
/// it. Returns the frame, the instant the sim had the event ready and the latency to the line.
async fn inbound(
    shim: &mut Shim,
    sim: &SimHandle,
    chat: &str,
    text: &str,
) -> (Value, Instant, Duration) {
    shim.drop_notifications();
    let injection = Injection {
        conversation_id: Some(chat.to_owned()),
        text: Some(text.to_owned()),
        ..Injection::default()
    };
    // `SimHandle::inject_message` with the start instant taken inside the state lock, after
    // the message and its event are stored and before the sim announces the change (the
    // announcement is what wakes the SSE writer). Taken after `inject_message` returned, the
    // instant can come after the daemon already wrote the frame: on two cores the announcing
    // thread is often preempted by the threads it wakes.
    let injected = sim.with_state(|s| {
        canon_sim::control::inject(s, &injection).expect("inject");
        Instant::now()
    });
    let (frame, read) = shim.expect_frame("inbound.message").await;
    assert!(
        frame["body"]["event"]["text"]
            .as_str()
            .is_some_and(|t| t.contains(text)),
        "{frame}"
    );
    shim.answer(&frame, json!({"accepted": true})).await;
    (frame, injected, read - injected)
}

/// A turn whose `turn.complete` is written and stored, its reply still to come.
struct OpenTurn {
    /// `turn.complete` request id.
    complete_id: String,
    /// The sim had the injected message's event ready.
    injected: Instant,
    /// (a): event ready in the sim → `inbound.message` read.
    inbound: Duration,
    /// `turn.complete` written.
    written: Instant,
    /// The sim stored the `turn_complete` message.
    stored: Instant,
}

/// One streamed turn in `chat`: inbound → `turn.start` → `adapter.send` (expect_edits) →
/// `edits` growing edits → two identical finalizing edits → `turn.complete` written and its
/// `turn_complete` message stored (the reply comes after the handoff).
async fn streamed_turn(
    shim: &mut Shim,
    sim: &Arc<SimHandle>,
    chat: &str,
    n: usize,
    edits: usize,
) -> OpenTurn {
    let (frame, injected, inbound_latency) =
        inbound(shim, sim, chat, &format!("question number {n}")).await;
    let event_ref = frame["body"]["event_ref"]
        .as_str()
        .expect("event_ref")
        .to_owned();
    let message_id = frame["body"]["event"]["message_id"]
        .as_str()
        .expect("message id")
        .to_owned();
    let started = shim
        .request(
            "turn.start",
            json!({
                "event_ref": event_ref,
                "session_key": session_of(chat),
                "event": {"chat_id": chat, "chat_type": "dm",
                          "user_id": DEFAULT_OWNER, "message_id": message_id},
            }),
        )
        .await;
    let turn_id = started["body"]["turn_id"]
        .as_str()
        .unwrap_or_else(|| panic!("turn id: {started}"))
        .to_owned();

    let mut text = format!("Answer {n}:");
    let sent = shim
        .request(
            "adapter.send",
            json!({"chat_id": chat, "content": text, "metadata": {"expect_edits": true},
                   "ctx": ctx(chat)}),
        )
        .await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    for k in 0..edits {
        text.push_str(&format!(" word{k}"));
        let edited = shim
            .request(
                "adapter.edit",
                json!({"chat_id": chat, "message_id": turn_id, "content": text,
                       "finalize": false, "ctx": ctx(chat)}),
            )
            .await;
        assert_eq!(edited["body"]["success"], true, "{edited}");
    }
    text.push('.');
    for _ in 0..2 {
        let edited = shim
            .request(
                "adapter.edit",
                json!({"chat_id": chat, "message_id": turn_id, "content": text,
                       "finalize": true, "ctx": ctx(chat)}),
            )
            .await;
        assert_eq!(edited["body"]["success"], true, "{edited}");
    }

    // A watcher task notes when the sim stores the `turn_complete` message. It is armed (has
    // subscribed to state changes and checked once) before the final hook is written.
    let before = sim.read_state(|s| s.messages.len());
    let armed = Arc::new(AtomicBool::new(false));
    let watcher = {
        let sim = Arc::clone(sim);
        let armed = Arc::clone(&armed);
        let chat = chat.to_owned();
        tokio::spawn(async move {
            sim.wait_for("turn_complete stored", WAIT, |s| {
                armed.store(true, Ordering::Release);
                s.messages.range(before.min(s.messages.len())..).any(|m| {
                    m.conversation_id == chat
                        && m.message["senderId"] == DEFAULT_AGENT
                        && m.message.pointer("/metadata/turnSemantics")
                            == Some(&json!("turn_complete"))
                })
            })
            .await
            .expect("the turn_complete message is stored");
            Instant::now()
        })
    };
    while !armed.load(Ordering::Acquire) {
        tokio::task::yield_now().await;
    }
    let written = Instant::now();
    let complete_id = shim
        .send(
            "turn.complete",
            json!({"event_ref": event_ref, "session_key": session_of(chat),
                   "outcome": "success"}),
        )
        .await;
    let stored = watcher.await.expect("watcher joined");
    let stored_text = sim.read_state(|s| {
        s.messages
            .iter()
            .rev()
            .find(|m| m.conversation_id == chat && m.message["senderId"] == DEFAULT_AGENT)
            .and_then(|m| m.message["text"].as_str().map(str::to_owned))
    });
    assert_eq!(stored_text.as_deref(), Some(text.as_str()));
    OpenTurn {
        complete_id,
        injected,
        inbound: inbound_latency,
        written,
        stored,
    }
}

/// A finished turn.
struct Turn {
    open: OpenTurn,
    /// The `turn.complete` reply was read.
    replied: Instant,
}

/// Waits for every pending `turn.complete` reply.
async fn collect(shim: &mut Shim, pending: &mut Vec<OpenTurn>, done: &mut Vec<Turn>) {
    for open in pending.drain(..) {
        let (reply, replied) = shim.reply(&open.complete_id).await;
        assert_eq!(reply["ok"], true, "{reply}");
        done.push(Turn { open, replied });
    }
}

/// Runs `count` turns in bursts over `chats` (see the module docs).
async fn run_turns(
    shim: &mut Shim,
    sim: &Arc<SimHandle>,
    chats: &[String],
    first: usize,
    count: usize,
    edits: usize,
    gap: Duration,
) -> Vec<Turn> {
    let mut done = Vec::new();
    let mut pending: Vec<OpenTurn> = Vec::new();
    for n in first..first + count {
        let closing_soon = pending
            .first()
            .is_some_and(|p| Instant::now() + MARGIN >= p.stored + HANDOFF);
        if pending.len() == chats.len() || closing_soon {
            collect(shim, &mut pending, &mut done).await;
        }
        let chat = &chats[pending.len()];
        pending.push(streamed_turn(shim, sim, chat, n, edits).await);
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
    }
    collect(shim, &mut pending, &mut done).await;
    done
}

/// Turns whose measured span (inject → stored) met another turn's closing (its handoff end
/// → its reply).
fn overlapped(turns: &[Turn]) -> usize {
    turns
        .iter()
        .filter(|t| {
            turns.iter().any(|o| {
                let closing = o.open.stored + HANDOFF;
                closing < t.open.stored && o.replied > t.open.injected
            })
        })
        .count()
}

/// p50, p90, p99, max and count of a sample, in microseconds.
struct Summary {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    count: usize,
}

fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    let count = samples.len();
    let at = |q: f64| {
        // Nearest rank.
        let rank = ((q * count as f64).ceil() as usize).clamp(1, count);
        micros(samples[rank - 1])
    };
    Summary {
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: micros(*samples.last().expect("samples")),
        count,
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn row(name: &str, samples: Vec<Duration>) {
    let s = summarize(samples);
    println!(
        "{name:<64} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>6}",
        s.p50, s.p90, s.p99, s.max, s.count
    );
}

fn header(first: &str) {
    println!(
        "{first:<64} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "p50 µs", "p90 µs", "p99 µs", "max µs", "count"
    );
}

/// `(VmRSS, VmHWM)` in KiB.
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

/// `utime + stime` of a process (all its threads, live and exited), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // The command name may hold spaces: fields are counted after its closing parenthesis,
    // where field 3 (state) is index 0, so utime (14) and stime (15) are 11 and 12.
    let rest = &stat[stat.rfind(')').expect("comm") + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| fields[i].parse::<u64>().expect("a tick count");
    field(11) + field(12)
}

fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Latency and CPU sections on one daemon.
async fn turns(counts: Counts) {
    let sim = sim().await;
    let chats = conversations(&sim, "c-turn", counts.chats);
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let pid = shim.pid();

    // Warm-up, one turn per conversation: connections, caches, allocator, page faults.
    run_turns(&mut shim, &sim, &chats, 0, chats.len(), 3, counts.gap).await;

    let latency = run_turns(
        &mut shim,
        &sim,
        &chats,
        1_000,
        counts.latency_turns,
        3,
        counts.gap,
    )
    .await;
    println!();
    println!(
        "Added latency ({} streamed turns: send + 3 edits + 2 finalize edits; {:?} between turns; \
         {} overlapped another turn's closing)",
        latency.len(),
        counts.gap,
        overlapped(&latency)
    );
    header("interval");
    row(
        "(a) event ready in sim → inbound.message read",
        latency.iter().map(|t| t.open.inbound).collect(),
    );
    row(
        "(b) turn.complete written → turn_complete stored in sim",
        latency
            .iter()
            .map(|t| t.open.stored - t.open.written)
            .collect(),
    );
    row(
        "(b') turn.complete written → reply read, minus the 750 ms handoff",
        latency
            .iter()
            .map(|t| (t.replied - t.open.written).saturating_sub(HANDOFF))
            .collect(),
    );

    // CPU: 20 growing edits and 2 finalizing edits per turn, no gap.
    let ticks = ticks_per_second();
    let own = std::process::id();
    let daemon_before = cpu_ticks(pid);
    let own_before = cpu_ticks(own);
    let journal_before = sim.read_state(|s| s.journal.cursor());
    let started = Instant::now();
    let cpu = run_turns(
        &mut shim,
        &sim,
        &chats,
        10_000,
        counts.cpu_turns,
        20,
        Duration::ZERO,
    )
    .await;
    let wall = started.elapsed();
    let daemon_ticks = cpu_ticks(pid) - daemon_before;
    let own_ticks = cpu_ticks(own) - own_before;
    let n = cpu.len() as f64;
    let per_turn = |t: u64| t as f64 / ticks * 1e3 / n;
    println!();
    println!(
        "CPU per streamed turn ({} turns: inbound → turn.start → send + 20 edits + 2 finalize \
         edits → turn.complete; {} overlapped)",
        cpu.len(),
        overlapped(&cpu)
    );
    println!(
        "  daemon utime+stime:              {:>8.3} ms CPU/turn  ({daemon_ticks} ticks at {ticks} Hz)",
        per_turn(daemon_ticks)
    );
    println!(
        "  bench process (sim + fake shim): {:>8.3} ms CPU/turn  ({own_ticks} ticks)",
        per_turn(own_ticks)
    );
    println!(
        "  section wall {:.2} s (bursts wait out the 750 ms handoff)",
        wall.as_secs_f64()
    );
    header("  wall per turn");
    row(
        "  event ready in sim → turn_complete stored (the turn's work)",
        cpu.iter()
            .map(|t| t.open.stored - t.open.injected)
            .collect(),
    );
    row(
        "  event ready in sim → turn.complete reply (+ 750 ms handoff)",
        cpu.iter().map(|t| t.replied - t.open.injected).collect(),
    );
    print_requests(&sim, journal_before, cpu.len());
    let (rss, hwm) = memory_kib(pid);
    println!(
        "  daemon memory after all turns: VmRSS {:.1} MiB, VmHWM {:.1} MiB",
        mib(rss),
        mib(hwm)
    );
    assert_eq!(shim.close().await, Some(0));
}

/// The daemon's Canon requests after journal position `since`, per turn, by route.
fn print_requests(sim: &SimHandle, since: u64, turns: usize) {
    let mut routes: Vec<(String, usize)> = Vec::new();
    let entries = sim.journal(since, None);
    for e in entries.iter().filter(|e| !e.path.starts_with("/__sim")) {
        // Segments holding a digit are ids.
        let path: Vec<&str> = e
            .path
            .split('/')
            .map(|p| {
                if p.contains(|c: char| c.is_ascii_digit()) {
                    "{id}"
                } else {
                    p
                }
            })
            .collect();
        let route = format!("{} {}", e.method, path.join("/"));
        match routes.iter_mut().find(|(r, _)| *r == route) {
            Some((_, n)) => *n += 1,
            None => routes.push((route, 1)),
        }
    }
    routes.sort_by_key(|r| std::cmp::Reverse(r.1));
    let total: usize = routes.iter().map(|(_, n)| n).sum();
    let per = |n: usize| n as f64 / turns as f64;
    let detail: Vec<String> = routes
        .iter()
        .map(|(r, n)| format!("{r} {:.1}", per(*n)))
        .collect();
    println!(
        "  Canon requests per turn (sim journal): {:.1} = {}",
        per(total),
        detail.join(", ")
    );
}

/// Memory section on a fresh daemon.
async fn memory(counts: Counts) {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let pid = shim.pid();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = memory_kib(pid);

    let mut latencies = Vec::new();
    for (i, chat) in conversations(&sim, "c-mem", counts.conversations)
        .iter()
        .enumerate()
    {
        let (_, _, latency) = inbound(&mut shim, &sim, chat, &format!("hello number {i}")).await;
        latencies.push(latency);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cached = memory_kib(pid);

    println!();
    println!("Daemon memory");
    println!("{:<64} {:>10} {:>10}", "state", "VmRSS MiB", "VmHWM MiB");
    println!(
        "{:<64} {:>10.1} {:>10.1}",
        "idle after hello + adapter.connect",
        mib(idle.0),
        mib(idle.1)
    );
    println!(
        "{:<64} {:>10.1} {:>10.1}",
        format!(
            "{} conversations cached (one inbound.message each)",
            counts.conversations
        ),
        mib(cached.0),
        mib(cached.1)
    );
    header("");
    row(
        "(a) over those first messages, one per conversation",
        latencies,
    );
    assert_eq!(shim.close().await, Some(0));
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let counts = if full { FULL } else { SMOKE };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    println!(
        "canon-hermes daemon end-to-end figures ({}; daemon {})",
        if full {
            "full run"
        } else {
            "smoke run, `cargo bench` for the full counts"
        },
        env!("CARGO_BIN_EXE_canon-hermes")
    );
    let started = Instant::now();
    runtime.block_on(async {
        turns(counts).await;
        memory(counts).await;
    });
    println!();
    println!(
        "total bench wall time: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
