//! Bursts of human messages with a real Hermes gateway: several conversations busy at
//! once, people typing several lines quickly. Every human message must be answered by exactly
//! one agent `turn_complete` (by its `replyTo` or by the closing turn's active message ids),
//! every final must reply to the message it answers, and no Canon turn may open and close
//! without an answer.
//!
//! The scripted model answers `msg<L><n>x` with `Answer <L><n> done here now`, one word per
//! [`WORD_DELAY_MS`], so the answer names the message it answers. The scenarios inject the
//! bursts interleaved (`msgA1x`, `msgB1x`, `msgA2x`, …), wait (polling the simulator's state)
//! until every message has a final or nothing has changed for [`QUIET`], and judge the
//! simulator's state.
//!
//! With `CANON_TEST_KEEP_LOGS=<dir>` a scenario copies the gateway's output, the Hermes logs,
//! the simulator's journal and its messages and turn records into `<dir>/<scenario>/`;
//! `CANON_TEST_DAEMON_LOG` becomes the daemon's `RUST_LOG` (the shim forwards the daemon's
//! stderr to Hermes' logger `canon_hermes.daemon`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use canon_sim::config::SimConfig;
use canon_sim::control::Injection;
use canon_sim::model::{ModelServer, Script};
use canon_sim::state::{ConversationSpec, PrincipalSpec, State};
use canon_sim::{Sim, SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::json;

use super::gateway_support::{start_gateway_with, Gateway, GatewayOptions};

/// Pause before each streamed word of an answer.
const WORD_DELAY_MS: u64 = 120;
/// The longest a scenario waits for its finals.
const DEADLINE: Duration = Duration::from_secs(180);
/// How long nothing may change (no new final, no new turn record) before the scenario stops
/// waiting for finals that do not come.
const QUIET: Duration = Duration::from_secs(15);
/// How long to keep watching for duplicates after the expected finals arrived.
const SETTLE: Duration = Duration::from_secs(3);

/// One lane of a burst: the letter its messages carry, their conversation, whether that is a
/// group (whose messages mention the agent) and who sends them.
#[derive(Debug, Clone)]
struct Lane {
    letter: char,
    conversation: String,
    group: bool,
    sender: String,
}

/// A message a scenario plans to inject: its lane, its number in the lane, the pause before
/// it, and whether it carries a picture.
#[derive(Debug, Clone)]
struct Planned {
    lane: usize,
    n: usize,
    gap_before: Duration,
    picture: bool,
}

/// A 1×1 RGBA PNG.
const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==";

/// A human message injected by the scenario.
#[derive(Debug, Clone)]
struct Human {
    label: String,
    conversation: String,
    id: String,
}

/// An agent `turn_complete` message.
#[derive(Debug, Clone)]
struct Final {
    conversation: String,
    id: String,
    turn_id: String,
    text: String,
    reply_to: Option<String>,
}

fn script(lanes: &[Lane], per_lane: usize) -> Script {
    let mut rules =
        vec![json!({"match": {"titleRequest": true}, "reply": {"text": "Scripted session"}})];
    for lane in lanes {
        for n in 1..=per_lane {
            let label = format!("{}{n}", lane.letter);
            rules.push(json!({
                "match": {"role": "user", "contains": format!("msg{label}x")},
                "reply": {"text": format!("Answer {label} done here now"), "delayMs": WORD_DELAY_MS},
            }));
        }
    }
    rules.push(json!({"match": {}, "reply": {"text": "Unscripted answer."}}));
    Script::parse(&json!({"model": "fake-model", "rules": rules}).to_string()).expect("script")
}

struct Burst {
    sim: SimHandle,
    _model: ModelServer,
    gateway: Gateway,
    lanes: Vec<Lane>,
}

/// The agent's `turn_complete` messages in `conversations`, in store order.
fn finals_in(s: &State, conversations: &[String]) -> Vec<Final> {
    s.messages
        .iter()
        .filter(|m| conversations.contains(&m.conversation_id))
        .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
        .filter(|m| m.message["metadata"]["turnSemantics"] == "turn_complete")
        .map(|m| Final {
            conversation: m.conversation_id.clone(),
            id: m.message["id"].as_str().unwrap_or_default().to_owned(),
            turn_id: m.message["metadata"]["turnId"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            text: m.message["text"].as_str().unwrap_or_default().to_owned(),
            reply_to: m.message["replyTo"].as_str().map(str::to_owned),
        })
        .collect()
}

/// A Canon turn as the agent published it: (conversation, states in order, every active
/// message id any of its records listed).
type TurnRecord = (String, Vec<String>, Vec<String>);

/// The agent's `/runtime/turn` records in `conversations`, per turn id.
fn turns_in(s: &State, conversations: &[String]) -> BTreeMap<String, TurnRecord> {
    let mut out: BTreeMap<String, TurnRecord> = BTreeMap::new();
    for r in &s.turn_history {
        let conversation = r["conversationId"].as_str().unwrap_or_default();
        if r["agent"] != DEFAULT_AGENT || !conversations.iter().any(|c| c == conversation) {
            continue;
        }
        let id = r["turnId"].as_str().unwrap_or_default().to_owned();
        let entry = out
            .entry(id)
            .or_insert_with(|| (conversation.to_owned(), Vec::new(), Vec::new()));
        entry
            .1
            .push(r["state"].as_str().unwrap_or_default().to_owned());
        for m in r["activeMessageIds"].as_array().into_iter().flatten() {
            if let Some(m) = m.as_str().filter(|m| !entry.2.iter().any(|x| x == m)) {
                entry.2.push(m.to_owned());
            }
        }
    }
    out
}

fn is_closing(state: &str) -> bool {
    state == "completed" || state == "interrupted"
}

impl Burst {
    async fn start(lanes: Vec<Lane>, per_lane: usize) -> Burst {
        Burst::start_with(lanes, per_lane, Vec::new()).await
    }

    /// [`Burst::start`] with extra gateway environment.
    async fn start_with(lanes: Vec<Lane>, per_lane: usize, env: Vec<(String, String)>) -> Burst {
        let sim = Sim::start(SimConfig::for_tests())
            .await
            .expect("the simulator starts");
        for lane in lanes.iter().filter(|l| l.sender != DEFAULT_OWNER) {
            sim.create_principal(PrincipalSpec {
                id: Some(lane.sender.clone()),
                kind: "human".to_owned(),
                display_name: Some(format!("Human {}", lane.letter)),
                ..PrincipalSpec::default()
            });
        }
        for lane in &lanes {
            if lane.conversation == DEFAULT_CONVERSATION {
                continue;
            }
            let mut members = vec![DEFAULT_OWNER.to_owned(), DEFAULT_AGENT.to_owned()];
            for other in lanes.iter().filter(|l| l.conversation == lane.conversation) {
                if !members.contains(&other.sender) {
                    members.push(other.sender.clone());
                }
            }
            sim.create_conversation(ConversationSpec {
                id: Some(lane.conversation.clone()),
                kind: if lane.group { "group" } else { "direct" }.to_owned(),
                name: Some(format!("Burst {}", lane.conversation)),
                member_ids: members,
                behavior: None,
            });
        }
        let model = ModelServer::start(script(&lanes, per_lane), 0)
            .await
            .expect("the model server starts");
        let mut options = GatewayOptions {
            env,
            ..GatewayOptions::default()
        };
        if let Ok(log) = std::env::var("CANON_TEST_DAEMON_LOG") {
            options.env.push(("RUST_LOG".to_owned(), log));
        }
        let mut gateway =
            tokio::task::block_in_place(|| start_gateway_with(&sim, &model, &options));
        tokio::task::block_in_place(|| gateway.wait_settled());
        if let Err(e) = sim
            .wait_for("stream open", Duration::from_secs(60), |s| {
                !s.open_streams.is_empty()
            })
            .await
        {
            panic!("{e}\n{}", gateway.log_tail());
        }
        Burst {
            sim,
            _model: model,
            gateway,
            lanes,
        }
    }

    fn conversations(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for lane in &self.lanes {
            if !out.contains(&lane.conversation) {
                out.push(lane.conversation.clone());
            }
        }
        out
    }

    /// Injects `per_lane` messages per lane, interleaved, `gap` apart.
    async fn send_burst(&self, per_lane: usize, gap: Duration) -> Vec<Human> {
        let plan: Vec<Planned> = (1..=per_lane)
            .flat_map(|n| (0..self.lanes.len()).map(move |lane| (lane, n)))
            .enumerate()
            .map(|(i, (lane, n))| Planned {
                lane,
                n,
                gap_before: if i == 0 { Duration::ZERO } else { gap },
                picture: false,
            })
            .collect();
        self.send(&plan).await
    }

    /// Injects the planned messages in order, each after its gap.
    async fn send(&self, plan: &[Planned]) -> Vec<Human> {
        let mut humans = Vec::new();
        for planned in plan {
            tokio::time::sleep(planned.gap_before).await;
            let lane = &self.lanes[planned.lane];
            let label = format!("{}{}", lane.letter, planned.n);
            let raw_attachments = if planned.picture {
                vec![json!({"bytesBase64": PNG_BASE64, "mimeType": "image/png",
                            "fileName": format!("{label}.png")})]
            } else {
                Vec::new()
            };
            let message = self
                .sim
                .inject_message(&Injection {
                    conversation_id: Some(lane.conversation.clone()),
                    sender_id: Some(lane.sender.clone()),
                    text: Some(format!("msg{label}x please answer")),
                    mentions: if lane.group {
                        vec![DEFAULT_AGENT.to_owned()]
                    } else {
                        Vec::new()
                    },
                    raw_attachments,
                    ..Injection::default()
                })
                .expect("inject");
            humans.push(Human {
                label,
                conversation: lane.conversation.clone(),
                id: message["id"].as_str().expect("message id").to_owned(),
            });
        }
        humans
    }

    /// Polls the simulator until every human message has a final and every turn closed, or
    /// nothing changed for [`QUIET`], or [`DEADLINE`] passed; then [`SETTLE`] more.
    async fn settle(&self, expected: usize) {
        let conversations = self.conversations();
        let started = Instant::now();
        let mut last_change = Instant::now();
        let mut last_seen = (usize::MAX, usize::MAX);
        loop {
            let (finals, records, all_closed) = self.sim.read_state(|s| {
                let turns = turns_in(s, &conversations);
                let closed = turns
                    .values()
                    .all(|(_, states, _)| states.iter().any(|st| is_closing(st)));
                (
                    finals_in(s, &conversations).len(),
                    s.turn_history.len(),
                    closed,
                )
            });
            if (finals, records) != last_seen {
                last_seen = (finals, records);
                last_change = Instant::now();
            }
            let done = finals >= expected || last_change.elapsed() >= QUIET;
            if (all_closed && done) || started.elapsed() >= DEADLINE {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(SETTLE).await;
    }

    /// Copies the evidence into `$CANON_TEST_KEEP_LOGS/<scenario>/` when that is set.
    fn keep_logs(&self, scenario: &str) {
        let Ok(dir) = std::env::var("CANON_TEST_KEEP_LOGS") else {
            return;
        };
        let dir = Path::new(&dir).join(scenario);
        std::fs::create_dir_all(&dir).expect("the log dir");
        let home = self.gateway.home.path();
        let copies = [
            ("gateway.out", "gateway.out"),
            ("hermes/logs/gateway.log", "gateway.log"),
            ("hermes/logs/agent.log", "agent.log"),
            ("hermes/logs/errors.log", "errors.log"),
        ];
        for (from, to) in copies {
            let _ = std::fs::copy(home.join(from), dir.join(to));
        }
        let journal: Vec<String> = self
            .sim
            .journal(0, None)
            .iter()
            .map(|e| serde_json::to_string(e).unwrap_or_default())
            .collect();
        std::fs::write(dir.join("journal.jsonl"), journal.join("\n")).expect("journal");
        let state = self.sim.state();
        let pick = json!({"messages": state["messages"], "turnHistory": state["turnHistory"]});
        std::fs::write(
            dir.join("sim-state.json"),
            serde_json::to_string_pretty(&pick).unwrap_or_default(),
        )
        .expect("state");
    }

    /// Hermes' own lines about queued follow-ups and the recursion cap.
    fn hermes_queue_lines(&self) -> String {
        self.gateway
            .output()
            .lines()
            .filter(|l| {
                l.contains("Queued follow-up")
                    || l.contains("Interrupt recursion depth")
                    || l.contains("Dropping busy-mode follow-up")
                    || l.contains("Late-arrival")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Judges the simulator's state (see the module doc); panics with every violation and a
    /// table of which message got what.
    fn judge(&self, humans: &[Human]) {
        let verdict = self.verdict(humans);
        assert!(
            verdict.problems.is_empty(),
            "{} problem(s) with {}:\n  {}\nper message:\n{}Hermes queue lines:\n{}\n{}",
            verdict.problems.len(),
            verdict.figures(),
            verdict.problems.join("\n  "),
            verdict.table,
            self.hermes_queue_lines(),
            self.gateway.log_tail()
        );
    }

    /// The counts and violations of the simulator's state (see the module doc).
    fn verdict(&self, humans: &[Human]) -> Verdict {
        let conversations = self.conversations();
        let (finals, turns, truncated) = self.sim.read_state(|s| {
            (
                finals_in(s, &conversations),
                turns_in(s, &conversations),
                s.turn_history.len() >= canon_sim::state::HISTORY_CAP,
            )
        });
        let label_of: BTreeMap<&str, &str> = humans
            .iter()
            .map(|h| (h.id.as_str(), h.label.as_str()))
            .collect();
        let id_of: BTreeMap<&str, &str> = humans
            .iter()
            .map(|h| (h.label.as_str(), h.id.as_str()))
            .collect();
        let mut problems = Vec::new();
        let mut table = String::new();
        let mut verdict = Verdict {
            messages: humans.len(),
            finals: finals.len(),
            turns: turns.len(),
            truncated,
            ..Verdict::default()
        };

        // Every human message is covered by exactly one final.
        for h in humans {
            let covering: Vec<&Final> = finals
                .iter()
                .filter(|f| f.conversation == h.conversation)
                .filter(|f| {
                    f.reply_to.as_deref() == Some(h.id.as_str())
                        || turns
                            .get(&f.turn_id)
                            .is_some_and(|(_, _, active)| active.contains(&h.id))
                })
                .collect();
            let turns_listing: Vec<String> = turns
                .iter()
                .filter(|(_, (_, _, active))| active.contains(&h.id))
                .map(|(id, (_, states, _))| format!("{id}:{}", states.join(">")))
                .collect();
            let _ = writeln!(
                table,
                "{} {} finals={:?} turns=[{}]",
                h.label,
                h.id,
                covering
                    .iter()
                    .map(|f| format!(
                        "{}:{:?}→{}",
                        f.turn_id,
                        f.text,
                        f.reply_to
                            .as_deref()
                            .map_or("-", |r| label_of.get(r).copied().unwrap_or(r))
                    ))
                    .collect::<Vec<_>>(),
                turns_listing.join(", ")
            );
            match covering.len() {
                0 => verdict.lost += 1,
                1 => {}
                _ => verdict.duplicated += 1,
            }
            if covering.len() != 1 {
                problems.push(format!(
                    "{} ({}) is covered by {} finals",
                    h.label,
                    h.id,
                    covering.len()
                ));
            }
        }

        // Each final replies to the message its text names.
        for f in &finals {
            let named = f
                .text
                .strip_prefix("Answer ")
                .and_then(|t| t.split_whitespace().next())
                .and_then(|label| id_of.get(label).copied());
            match named {
                Some(id) if f.reply_to.as_deref() == Some(id) => {}
                Some(id) => {
                    verdict.wrong_reply_to += 1;
                    problems.push(format!(
                        "final {} ({:?}, turn {}) replies to {} instead of {} ({id})",
                        f.id,
                        f.text,
                        f.turn_id,
                        f.reply_to
                            .as_deref()
                            .map_or("nothing".to_owned(), |r| format!(
                                "{} ({r})",
                                label_of.get(r).copied().unwrap_or("?")
                            )),
                        label_of.get(id).copied().unwrap_or("?"),
                    ));
                }
                None => problems.push(format!(
                    "final {} ({:?}, turn {}) answers no scripted message",
                    f.id, f.text, f.turn_id
                )),
            }
        }

        // Each final belongs to the turn that answers its message.
        for f in &finals {
            let Some((_, _, active)) = turns.get(&f.turn_id) else {
                continue;
            };
            if let Some(reply_to) = f
                .reply_to
                .as_deref()
                .filter(|r| !active.iter().any(|a| a == r))
            {
                verdict.wrong_turn += 1;
                problems.push(format!(
                    "final {} ({:?}) replies to {} but carries turn {} (active {active:?})",
                    f.id, f.text, reply_to, f.turn_id
                ));
            }
        }

        // No Canon turn opens and closes without an answer; every turn closes.
        for (id, (conversation, states, active)) in &turns {
            let answered = finals.iter().any(|f| &f.turn_id == id);
            let closed = states.iter().any(|s| is_closing(s));
            let active: Vec<&str> = active
                .iter()
                .map(|m| label_of.get(m.as_str()).copied().unwrap_or(m))
                .collect();
            if !closed {
                verdict.unclosed += 1;
                problems.push(format!(
                    "turn {id} in {conversation} never closed: {states:?}, active {active:?}"
                ));
            } else if !answered {
                verdict.empty_turns += 1;
                problems.push(format!(
                    "turn {id} in {conversation} closed without an answer: {states:?}, active {active:?}"
                ));
            }
        }

        verdict.problems = problems;
        verdict.table = table;
        verdict
    }
}

/// What a scenario's messages got.
#[derive(Debug, Default)]
struct Verdict {
    messages: usize,
    finals: usize,
    turns: usize,
    /// Messages no final covers.
    lost: usize,
    /// Messages more than one final covers.
    duplicated: usize,
    /// Finals that reply to another message than the one they answer.
    wrong_reply_to: usize,
    /// Turns that closed without an answer.
    empty_turns: usize,
    /// Turns that never closed.
    unclosed: usize,
    /// Finals whose turn id names a turn that does not answer their message.
    wrong_turn: usize,
    /// The simulator's turn history reached its cap: the oldest turns are not judged.
    truncated: bool,
    problems: Vec<String>,
    table: String,
}

impl Verdict {
    fn figures(&self) -> String {
        format!(
            "{} messages, {} finals, {} turns{}: lost {}, duplicated {}, wrong replyTo {}, \
             wrong turn {}, empty turns {}, unclosed turns {}",
            self.messages,
            self.finals,
            self.turns,
            if self.truncated {
                " (turn history truncated at the simulator's cap)"
            } else {
                ""
            },
            self.lost,
            self.duplicated,
            self.wrong_reply_to,
            self.wrong_turn,
            self.empty_turns,
            self.unclosed
        )
    }
}

/// A lane of the owner in a direct conversation.
fn direct(letter: char, conversation: &str) -> Lane {
    Lane {
        letter,
        conversation: conversation.to_owned(),
        group: false,
        sender: DEFAULT_OWNER.to_owned(),
    }
}

/// A lane of `sender` in a group, mentioning the agent.
fn group(letter: char, conversation: &str, sender: &str) -> Lane {
    Lane {
        letter,
        conversation: conversation.to_owned(),
        group: true,
        sender: sender.to_owned(),
    }
}

async fn run_burst(scenario: &str, lanes: Vec<Lane>, per_lane: usize, gap: Duration) {
    let burst = Burst::start(lanes, per_lane).await;
    let humans = burst.send_burst(per_lane, gap).await;
    burst.settle(humans.len()).await;
    burst.keep_logs(scenario);
    burst.judge(&humans);
}

/// The control: one conversation, four lines 300 ms apart.
#[tokio::test(flavor = "multi_thread")]
async fn one_conversation_four_lines_are_each_answered_once() {
    run_burst(
        "one_conversation_four",
        vec![direct('A', DEFAULT_CONVERSATION)],
        4,
        Duration::from_millis(300),
    )
    .await;
}

/// One conversation, five lines 250 ms apart: the fifth line is still queued when the fourth
/// runs at Hermes' recursion cap (`_MAX_INTERRUPT_DEPTH = 3`).
#[tokio::test(flavor = "multi_thread")]
async fn one_conversation_five_lines_are_each_answered_once() {
    run_burst(
        "one_conversation_five",
        vec![direct('A', DEFAULT_CONVERSATION)],
        5,
        Duration::from_millis(250),
    )
    .await;
}

/// One conversation, six lines 250 ms apart: two lines are queued at the recursion cap.
#[tokio::test(flavor = "multi_thread")]
async fn one_conversation_six_lines_are_each_answered_once() {
    run_burst(
        "one_conversation_six",
        vec![direct('A', DEFAULT_CONVERSATION)],
        6,
        Duration::from_millis(250),
    )
    .await;
}

/// Two direct conversations, six lines each, interleaved 250 ms apart.
#[tokio::test(flavor = "multi_thread")]
async fn two_direct_conversations_bursts_are_each_answered_once() {
    run_burst(
        "two_direct",
        vec![direct('A', DEFAULT_CONVERSATION), direct('B', "c-second")],
        6,
        Duration::from_millis(250),
    )
    .await;
}

/// A direct conversation and a group that mentions the agent, six lines each, interleaved
/// 250 ms apart (the mix first measured against an independent Canon server).
#[tokio::test(flavor = "multi_thread")]
async fn direct_and_group_bursts_are_each_answered_once() {
    run_burst(
        "direct_and_group",
        vec![
            direct('A', DEFAULT_CONVERSATION),
            group('B', "c-group", DEFAULT_OWNER),
        ],
        6,
        Duration::from_millis(250),
    )
    .await;
}

/// Two humans in one group, three lines each, interleaved 250 ms apart: two Hermes sessions
/// (`group_sessions_per_user`) busy in one Canon conversation, below the recursion cap.
#[tokio::test(flavor = "multi_thread")]
async fn two_humans_in_one_group_are_each_answered_once() {
    run_burst(
        "group_two_humans",
        vec![
            group('A', "c-group", DEFAULT_OWNER),
            group('B', "c-group", "h-second"),
        ],
        3,
        Duration::from_millis(250),
    )
    .await;
}

/// A picture sent while the agent is busy, right after a text line: Hermes merges it into the
/// waiting line (album semantics), and the one turn that answers them covers both messages
/// (the picture's message is among its active messages).
#[tokio::test(flavor = "multi_thread")]
async fn a_picture_sent_while_busy_joins_the_waiting_message() {
    let canon_home = tempfile::tempdir().expect("scratch dir");
    let env = vec![
        (
            "CANON_HOME".to_owned(),
            canon_home.path().display().to_string(),
        ),
        ("HERMES_ALLOW_PRIVATE_URLS".to_owned(), "true".to_owned()),
    ];
    let burst = Burst::start_with(vec![direct('A', DEFAULT_CONVERSATION)], 3, env).await;
    let gap = Duration::from_millis(250);
    let plan = [
        Planned {
            lane: 0,
            n: 1,
            gap_before: Duration::ZERO,
            picture: false,
        },
        Planned {
            lane: 0,
            n: 2,
            gap_before: gap,
            picture: false,
        },
        Planned {
            lane: 0,
            n: 3,
            gap_before: gap,
            picture: true,
        },
    ];
    let humans = burst.send(&plan).await;
    // Two answers: the first line's and the merged pair's.
    burst.settle(2).await;
    burst.keep_logs("picture_joins");
    let verdict = burst.verdict(&humans);
    let merged_final = burst.sim.read_state(|s| {
        finals_in(s, &burst.conversations())
            .into_iter()
            .map(|f| f.text)
            .collect::<Vec<_>>()
    });
    assert_eq!(
        merged_final.len(),
        2,
        "the picture joined the waiting line: {merged_final:?}\n{}",
        verdict.table
    );
    burst.judge(&humans);
}

/// A tiny deterministic generator for the stress plans (xorshift64*).
struct Gaps(u64);

impl Gaps {
    fn next_ms(&mut self, min: u64, max: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        min + x % (max - min + 1)
    }
}

/// `conversations` lanes (every third a group mentioning the agent, the rest direct) with
/// `per_lane` messages each, in a seeded random interleaving with gaps of 20–400 ms.
fn stress_plan(conversations: usize, per_lane: usize, seed: u64) -> (Vec<Lane>, Vec<Planned>) {
    let letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let lanes: Vec<Lane> = letters
        .chars()
        .take(conversations)
        .enumerate()
        .map(|(i, letter)| {
            let conversation = if i == 0 {
                DEFAULT_CONVERSATION.to_owned()
            } else {
                format!("c-stress-{}", letter.to_ascii_lowercase())
            };
            if i % 3 == 2 {
                group(letter, &conversation, DEFAULT_OWNER)
            } else {
                direct(letter, &conversation)
            }
        })
        .collect();
    let mut gaps = Gaps(seed.max(1));
    let mut next = vec![1usize; conversations];
    let mut plan = Vec::new();
    while plan.len() < conversations * per_lane {
        let lane = usize::try_from(gaps.next_ms(0, conversations as u64 - 1)).unwrap_or(0);
        if next[lane] > per_lane {
            continue;
        }
        plan.push(Planned {
            lane,
            n: next[lane],
            gap_before: if plan.is_empty() {
                Duration::ZERO
            } else {
                Duration::from_millis(gaps.next_ms(20, 400))
            },
            picture: false,
        });
        next[lane] += 1;
    }
    (lanes, plan)
}

// The figures are the point of a stress run: printed whatever the outcome.
#[allow(clippy::print_stderr)]
async fn run_stress(conversations: usize, per_lane: usize, seed: u64) {
    let (lanes, plan) = stress_plan(conversations, per_lane, seed);
    let burst = Burst::start(lanes, per_lane).await;
    if std::env::var_os("CANON_BURST_STRESS_UNLIMITED").is_some() {
        // Canon refuses more than 300 messages per sender in 5 minutes (canon-wire.md §4.3);
        // the simulator enforces that unless told not to.
        burst.sim.set_switches(|s| s.rate_limits = false);
    }
    let humans = burst.send(&plan).await;
    burst.settle(humans.len()).await;
    burst.keep_logs(&format!("stress_{conversations}x{per_lane}_{seed}"));
    let verdict = burst.verdict(&humans);
    eprintln!(
        "burst stress {conversations} conversations x {per_lane} messages, seed {seed}: {}",
        verdict.figures()
    );
    burst.judge(&humans);
}

/// A seeded random stress: by default three conversations (two direct, one group) × five
/// messages in a random interleaving, 20–400 ms apart. `CANON_BURST_STRESS` sizes a longer run
/// as `<conversations>x<messages>[@seed]`, e.g.
/// `CANON_BURST_STRESS=10x12@3 cargo test -p canon-hermes --test tests -- burst_stress --nocapture`;
/// the figures are printed either way. Canon allows an agent 300 messages per 5 minutes and 120
/// per conversation; a run above that sees the server refuse finals (counted lost) unless
/// `CANON_BURST_STRESS_UNLIMITED=1` switches the simulator's rate limits off.
#[tokio::test(flavor = "multi_thread")]
async fn burst_stress_loses_doubles_and_misattributes_nothing() {
    let spec = std::env::var("CANON_BURST_STRESS").unwrap_or_else(|_| "3x5@12".to_owned());
    let (size, seed) = spec.split_once('@').unwrap_or((spec.as_str(), "7"));
    let (conversations, per_lane) = size.split_once('x').expect("<conversations>x<messages>");
    let conversations: usize = conversations.parse().expect("a number of conversations");
    assert!((1..=26).contains(&conversations), "1 to 26 conversations");
    run_stress(
        conversations,
        per_lane.parse().expect("a number of messages"),
        seed.parse().expect("a seed"),
    )
    .await;
}
