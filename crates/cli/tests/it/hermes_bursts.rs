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
        let mut options = GatewayOptions::default();
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
        let mut humans = Vec::new();
        for n in 1..=per_lane {
            for lane in &self.lanes {
                if !humans.is_empty() {
                    tokio::time::sleep(gap).await;
                }
                let label = format!("{}{n}", lane.letter);
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
                        ..Injection::default()
                    })
                    .expect("inject");
                humans.push(Human {
                    label,
                    conversation: lane.conversation.clone(),
                    id: message["id"].as_str().expect("message id").to_owned(),
                });
            }
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
        let conversations = self.conversations();
        let (finals, turns) = self
            .sim
            .read_state(|s| (finals_in(s, &conversations), turns_in(s, &conversations)));
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
                Some(id) => problems.push(format!(
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
                )),
                None => problems.push(format!(
                    "final {} ({:?}, turn {}) answers no scripted message",
                    f.id, f.text, f.turn_id
                )),
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
                problems.push(format!(
                    "turn {id} in {conversation} never closed: {states:?}, active {active:?}"
                ));
            } else if !answered {
                problems.push(format!(
                    "turn {id} in {conversation} closed without an answer: {states:?}, active {active:?}"
                ));
            }
        }

        assert!(
            problems.is_empty(),
            "{} problem(s) with {} messages, {} finals, {} turns:\n  {}\nper message:\n{table}\
             Hermes queue lines:\n{}\n{}",
            problems.len(),
            humans.len(),
            finals.len(),
            turns.len(),
            problems.join("\n  "),
            self.hermes_queue_lines(),
            self.gateway.log_tail()
        );
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

/// The control: one conversation, four lines 300 ms apart (the working case).
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
/// 250 ms apart (the measurement).
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
