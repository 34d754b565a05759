//! Busy-input and recovery scenarios with a real Hermes gateway (hermes-host.md §12, §19.10).
//!
//! Each scenario drives one slow turn (the scripted model streams `SLOW_ANSWER` one word per
//! `SLOW_DELAY_MS`), acts while it streams, and asserts the simulator's Canon writes: the
//! agent's `turn_complete` messages (text and `turnId`) and the `/runtime/turn` states.

use std::time::Duration;

use canon_sim::config::SimConfig;
use canon_sim::control::{Injection, Signal};
use canon_sim::model::{ModelServer, Script};
use canon_sim::state::State;
use canon_sim::{Sim, SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::{json, Value};

use super::gateway_support::{start_gateway_with, Gateway, GatewayOptions, TURN};
use super::shim_support::turn_states_by_turn;

const SLOW_PROMPT: &str = "SLOW please take your time";
const SLOW_ANSWER: &str = "Slowly streamed answer one two three four five six seven eight nine \
     ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty.";
const SLOW_DELAY_MS: u64 = 250;
const FOLLOW_UP: &str = "FOLLOWUP what else";
const FOLLOW_UP_ANSWER: &str = "Answer to the follow-up.";
const PLAIN_ANSWER: &str = "Plain answer.";
/// How long to keep watching for a duplicate after the expected writes arrived.
const SETTLE: Duration = Duration::from_secs(2);

fn script() -> Script {
    Script::parse(
        &json!({"model": "fake-model", "rules": [
            {"match": {"titleRequest": true}, "reply": {"text": "Scripted session"}},
            {"match": {"role": "user", "contains": "SLOW"},
             "reply": {"text": SLOW_ANSWER, "delayMs": SLOW_DELAY_MS}},
            {"match": {"role": "user", "contains": "FOLLOWUP"},
             "reply": {"text": FOLLOW_UP_ANSWER}},
            {"match": {}, "reply": {"text": PLAIN_ANSWER}},
        ]})
        .to_string(),
    )
    .expect("script")
}

struct Scenario {
    sim: SimHandle,
    model: ModelServer,
    gateway: Gateway,
}

async fn start(busy_input_mode: &'static str) -> Scenario {
    let sim = Sim::start(SimConfig::for_tests())
        .await
        .expect("the simulator starts");
    let model = ModelServer::start(script(), 0)
        .await
        .expect("the model server starts");
    let mut options = GatewayOptions {
        busy_input_mode,
        ..GatewayOptions::default()
    };
    // `CANON_TEST_DAEMON_LOG` becomes the daemon's `RUST_LOG` (its lines reach the gateway's
    // output, which a failure prints).
    if let Ok(log) = std::env::var("CANON_TEST_DAEMON_LOG") {
        options.env.push(("RUST_LOG".to_owned(), log));
    }
    let gateway = tokio::task::block_in_place(|| start_gateway_with(&sim, &model, &options));
    let scenario = Scenario {
        sim,
        model,
        gateway,
    };
    scenario
        .wait("stream open", |s| !s.open_streams.is_empty())
        .await;
    scenario
}

impl Scenario {
    async fn wait(&self, what: &str, f: impl Fn(&State) -> bool) {
        if let Err(e) = self.sim.wait_for(what, TURN, f).await {
            panic!("{e}\n{}", self.dump());
        }
    }

    fn dump(&self) -> String {
        let state = self.sim.state();
        // Every durable send the simulator saw, answered or not (0: dropped unanswered).
        let sends: Vec<String> = self
            .sim
            .journal(0, Some("/messages/send"))
            .iter()
            .map(|e| {
                format!(
                    "#{} {} turn={} replyTo={} {:?}",
                    e.seq,
                    e.status,
                    e.body["metadata"]["turnId"],
                    e.body["replyTo"],
                    e.body["text"]
                        .as_str()
                        .unwrap_or_default()
                        .chars()
                        .take(24)
                        .collect::<String>()
                )
            })
            .collect();
        format!(
            "sim messages: {}\nturn states: {:?}\nsends: {sends:#?}\n{}",
            state["messages"],
            self.sim
                .read_state(|s| turn_states_by_turn(s, DEFAULT_CONVERSATION)),
            self.gateway.log_tail()
        )
    }

    fn say(&self, text: &str, intent: Option<&str>) -> String {
        let message = self
            .sim
            .inject_message(&Injection {
                text: Some(text.into()),
                metadata: intent.map(|i| json!({"deliveryIntent": i})),
                ..Injection::default()
            })
            .expect("inject");
        message["id"].as_str().expect("message id").to_owned()
    }

    /// Sends the slow prompt and waits until its answer is streaming into Canon.
    async fn start_slow_turn(&self) -> String {
        let id = self.say(SLOW_PROMPT, None);
        self.wait_streamed("Slowly").await;
        id
    }

    /// Waits until the streaming node carried `word`.
    async fn wait_streamed(&self, word: &str) {
        self.wait(&format!("{word:?} streamed"), |s| {
            s.streaming_history.iter().any(|r| {
                r["conversationId"] == DEFAULT_CONVERSATION
                    && r["text"].as_str().is_some_and(|t| t.contains(word))
            })
        })
        .await;
    }

    /// Polls `/proc` (nothing in the sim reflects it) until the gateway has one daemon child
    /// that is not in `old`.
    async fn next_daemon(&self, old: &[u32]) -> u32 {
        let deadline = std::time::Instant::now() + TURN;
        loop {
            let pids = self.gateway.daemon_pids();
            if let [pid] = pids[..] {
                if !old.contains(&pid) {
                    return pid;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no new daemon child (old {old:?}, now {pids:?})\n{}",
                self.dump()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for `n` turn_complete messages, then for every turn to publish a closing state,
    /// then `SETTLE` more for duplicates.
    async fn settle_with_finals(&self, n: usize) -> Vec<(String, String)> {
        self.wait(&format!("{n} turn_complete message(s)"), |s| {
            finals_in(s).len() >= n
        })
        .await;
        self.wait("every turn closed", |s| {
            turn_states_by_turn(s, DEFAULT_CONVERSATION)
                .values()
                .all(|states| states.iter().any(|st| is_closing(st)))
        })
        .await;
        tokio::time::sleep(SETTLE).await;
        self.sim.read_state(finals_in)
    }
}

fn is_closing(state: &str) -> bool {
    state == "completed" || state == "interrupted"
}

/// The agent's `turn_complete` messages in the direct conversation: (turnId, text).
fn finals_in(s: &State) -> Vec<(String, String)> {
    s.messages
        .iter()
        .filter(|m| m.conversation_id == DEFAULT_CONVERSATION)
        .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
        .filter(|m| m.message["metadata"]["turnSemantics"] == "turn_complete")
        .map(|m| {
            (
                m.message["metadata"]["turnId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                m.message["text"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The last published state of `turn_id`.
fn last_state(sim: &SimHandle, turn_id: &str) -> Option<String> {
    sim.read_state(|s| turn_states_by_turn(s, DEFAULT_CONVERSATION))
        .get(turn_id)?
        .last()
        .cloned()
}

/// The last turn id whose state listed `message_id` as active.
fn turn_of(sim: &SimHandle, message_id: &str) -> Option<String> {
    sim.read_state(|s| {
        s.turn_history
            .iter()
            .filter(|r| r["conversationId"] == DEFAULT_CONVERSATION)
            .rfind(|r| {
                r["activeMessageIds"]
                    .as_array()
                    .is_some_and(|ids| ids.iter().any(|i| i == message_id))
            })
            .and_then(|r| r["turnId"].as_str().map(str::to_owned))
    })
}

fn stored_message(sim: &SimHandle, message_id: &str) -> Value {
    sim.read_state(|s| {
        s.messages
            .iter()
            .find(|m| m.message["id"] == message_id)
            .map(|m| m.message.clone())
            .unwrap_or(Value::Null)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn queued_follow_up_is_its_own_canon_turn() {
    let sc = start("queue").await;
    let first = sc.start_slow_turn().await;
    let second = sc.say(FOLLOW_UP, None);
    let finals = sc.settle_with_finals(2).await;
    let dump = sc.dump();

    let texts: Vec<&str> = finals.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts, [SLOW_ANSWER, FOLLOW_UP_ANSWER], "{dump}");
    let (turn1, turn2) = (&finals[0].0, &finals[1].0);
    assert_ne!(turn1, turn2, "the follow-up got its own turn id\n{dump}");
    assert_eq!(turn_of(&sc.sim, &first).as_ref(), Some(turn1), "{dump}");
    assert_eq!(turn_of(&sc.sim, &second).as_ref(), Some(turn2), "{dump}");
    for turn in [turn1, turn2] {
        assert_eq!(
            last_state(&sc.sim, turn).as_deref(),
            Some("completed"),
            "{dump}"
        );
    }
    // The sim stamps a message sent during an open turn `queued`; the dequeue releases it.
    let disposition = stored_message(&sc.sim, &second)["metadata"]["inboundDisposition"].clone();
    assert!(
        disposition.is_null() || disposition == "accepted_now",
        "the queued follow-up was released: {disposition}\n{dump}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_intent_ends_the_running_turn_and_answers_the_new_message() {
    // Hermes itself is in queue mode: only the shim's Canon-intent dispatcher interrupts.
    let sc = start("queue").await;
    let first = sc.start_slow_turn().await;
    let second = sc.say(FOLLOW_UP, Some("interrupt"));
    sc.wait("the interrupting message's turn", |s| {
        finals_in(s).iter().any(|(_, t)| t == FOLLOW_UP_ANSWER)
    })
    .await;
    let finals = sc.settle_with_finals(1).await;
    let dump = sc.dump();

    let turn1 = turn_of(&sc.sim, &first).expect("the first turn");
    let turn2 = turn_of(&sc.sim, &second).expect("the second turn");
    assert_ne!(turn1, turn2, "{dump}");
    assert_eq!(
        finals,
        vec![(turn2.clone(), FOLLOW_UP_ANSWER.to_owned())],
        "one turn_complete, for the interrupting message only\n{dump}"
    );
    assert_eq!(
        last_state(&sc.sim, &turn1).as_deref(),
        Some("interrupted"),
        "{dump}"
    );
    assert_eq!(
        last_state(&sc.sim, &turn2).as_deref(),
        Some("completed"),
        "{dump}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_signal_interrupts_the_running_turn() {
    let sc = start("queue").await;
    let first = sc.start_slow_turn().await;
    let turn1 = turn_of(&sc.sim, &first).expect("the first turn");
    sc.sim
        .raise_signal(&Signal {
            conversation_id: DEFAULT_CONVERSATION.into(),
            signal: "interrupt".into(),
            updated_by: None,
            doorbell: Some(true),
        })
        .expect("signal");
    let closed = turn1.clone();
    sc.wait("the slow turn closes", move |s| {
        turn_states_by_turn(s, DEFAULT_CONVERSATION)
            .get(&closed)
            .is_some_and(|st| st.iter().any(|x| is_closing(x)))
    })
    .await;
    tokio::time::sleep(SETTLE).await;
    let dump = sc.dump();
    assert_eq!(
        last_state(&sc.sim, &turn1).as_deref(),
        Some("interrupted"),
        "{dump}"
    );
    let finals = sc.sim.read_state(finals_in);
    assert!(
        finals.iter().all(|(id, _)| *id != turn1),
        "no turn_complete for the stopped turn\n{dump}"
    );
    assert!(
        finals.iter().all(|(_, t)| t != SLOW_ANSWER),
        "the stopped answer was not published\n{dump}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_daemon_is_respawned_and_the_turn_completes_once() {
    let sc = start("queue").await;
    let first = sc.start_slow_turn().await;
    let turn1 = turn_of(&sc.sim, &first).expect("the first turn");
    sc.wait_streamed("three").await;
    let before = sc.gateway.daemon_pids();
    assert_eq!(before.len(), 1, "one daemon child: {before:?}");
    sc.gateway.kill_daemons();
    sc.next_daemon(&before).await;
    let finals = sc.settle_with_finals(1).await;
    let dump = sc.dump();
    assert_eq!(
        finals,
        vec![(turn1.clone(), SLOW_ANSWER.to_owned())],
        "one turn_complete on the resynced turn\n{dump}"
    );
    let after = sc.gateway.daemon_pids();
    assert!(
        after.len() == 1 && after != before,
        "a new daemon child: {before:?} → {after:?}\n{dump}"
    );

    let next = sc.say("and now something else", None);
    sc.wait("the next message is answered", |s| finals_in(s).len() >= 2)
        .await;
    let finals = sc.settle_with_finals(2).await;
    let dump = sc.dump();
    let turn2 = turn_of(&sc.sim, &next).expect("the next turn");
    assert_eq!(
        finals,
        vec![
            (turn1, SLOW_ANSWER.to_owned()),
            (turn2, PLAIN_ANSWER.to_owned())
        ],
        "{dump}"
    );
}

/// A daemon killed twice while it delivers the final (the fault harness found this): the
/// final's request never reaches Canon either time (the simulator stalls it, then drops it
/// unprocessed), so only a third daemon can store it. The shim sends `turn.complete` again after
/// every exit it survives (up to its crash-loop limit), so the turn still ends with exactly one
/// `turn_complete` and its closing state; with a single resend the second kill failed Hermes'
/// completion hook and the answer was never stored.
#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_killed_twice_during_the_final_still_completes_the_turn_once() {
    use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};

    let sc = start("queue").await;
    sc.sim.add_fault(FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            method: Some("POST".into()),
            path: Some("/messages/send".into()),
            agent: Some(DEFAULT_AGENT.into()),
            times: Some(2),
            ..FaultMatcher::default()
        },
        action: FaultAction::Stall { ms: 60_000 },
        seen: 0,
        fired: 0,
    });
    let first = sc.start_slow_turn().await;
    let turn1 = turn_of(&sc.sim, &first).expect("the first turn");
    let mut old = Vec::new();
    for n in 1..=2 {
        sc.wait(&format!("final attempt {n} stalled"), move |s| {
            s.faults.list().first().is_some_and(|r| r.fired >= n)
        })
        .await;
        let pids = sc.gateway.daemon_pids();
        assert_eq!(pids.len(), 1, "one daemon child: {pids:?}\n{}", sc.dump());
        assert!(!old.contains(&pids[0]), "a new daemon delivers attempt {n}");
        sc.gateway.kill_daemons();
        old.extend(pids);
    }
    sc.next_daemon(&old).await;
    let finals = sc.settle_with_finals(1).await;
    let dump = sc.dump();
    assert_eq!(
        finals,
        vec![(turn1.clone(), SLOW_ANSWER.to_owned())],
        "one turn_complete on the twice-resynced turn\n{dump}"
    );
    assert_eq!(
        last_state(&sc.sim, &turn1).as_deref(),
        Some("completed"),
        "{dump}"
    );
    assert!(
        !sc.gateway
            .log_tail()
            .contains("on_processing_complete hook failed"),
        "Hermes' completion hook did not fail\n{dump}"
    );
}

/// Two follow-ups dequeued back to back while the first boundary's final is still on its way to
/// Canon (the fault harness's seed 21): the slow turn closes at the first follow-up's first
/// send, but its final stalls in Canon; the first follow-up answers and the second is dequeued;
/// then the daemon is killed. The shim keeps every boundary-closed turn until its `turn.closed`
/// (it kept only the newest, so the slow turn was neither resynced nor published as delivered,
/// and its answer was lost), and the respawned daemon gets the chain back in order: the slow
/// turn, each dequeue and each follow-up's answer. Every message gets exactly one
/// `turn_complete` under its own turn, and every turn closes.
#[tokio::test(flavor = "multi_thread")]
async fn follow_ups_dequeued_while_a_boundary_final_is_in_flight_survive_a_kill() {
    follow_ups_behind_a_stalled_final(KillPoint::SecondFollowUpAsked).await;
}

/// As above, but the daemon is killed only once the first follow-up's final is stored: each
/// turn's final travels on its own, so it got to Canon before the stalled one. The shim took
/// that `turn.closed` as "every earlier turn got there too" and dropped the slow turn, whose
/// answer was then lost; it now keeps the chain until its oldest turn is closed.
#[tokio::test(flavor = "multi_thread")]
async fn a_later_final_stored_before_a_stalled_one_keeps_the_stalled_turn_for_the_respawn() {
    follow_ups_behind_a_stalled_final(KillPoint::FirstFollowUpStored).await;
}

#[derive(Clone, Copy)]
enum KillPoint {
    /// Once Hermes asked the model about the second follow-up (it dequeued it).
    SecondFollowUpAsked,
    /// Once the first follow-up's `turn_complete` is stored.
    FirstFollowUpStored,
}

async fn follow_ups_behind_a_stalled_final(kill_point: KillPoint) {
    use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};
    const SECOND_FOLLOW_UP: &str = "FOLLOWUP and one more thing";

    let sc = start("queue").await;
    let first = sc.start_slow_turn().await;
    // The slow turn's final is the agent's first durable send: it never reaches Canon.
    sc.sim.add_fault(FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            method: Some("POST".into()),
            path: Some("/messages/send".into()),
            agent: Some(DEFAULT_AGENT.into()),
            times: Some(1),
            ..FaultMatcher::default()
        },
        action: FaultAction::Stall { ms: 60_000 },
        seen: 0,
        fired: 0,
    });
    let second = sc.say(FOLLOW_UP, None);
    let third = sc.say(SECOND_FOLLOW_UP, None);
    sc.wait("the slow turn's final stalled", |s| {
        s.faults.list().first().is_some_and(|r| r.fired >= 1)
    })
    .await;
    match kill_point {
        KillPoint::SecondFollowUpAsked => {
            // Hermes asks the model about the second follow-up only after dequeuing it.
            let deadline = std::time::Instant::now() + TURN;
            while !sc.model.requests().iter().any(|r| {
                r["messages"]
                    .as_array()
                    .and_then(|m| m.iter().rfind(|m| m["role"] == "user"))
                    .is_some_and(|m| m["content"].to_string().contains("one more thing"))
            }) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the second follow-up was never dequeued\n{}",
                    sc.dump()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        KillPoint::FirstFollowUpStored => {
            sc.wait("the first follow-up's final stored", |s| {
                s.messages.iter().any(|m| {
                    m.message["metadata"]["turnSemantics"] == "turn_complete"
                        && m.message["replyTo"] == second.as_str()
                })
            })
            .await;
        }
    }
    let before = sc.gateway.daemon_pids();
    sc.gateway.kill_daemons();
    sc.next_daemon(&before).await;

    let finals = sc.settle_with_finals(3).await;
    let dump = sc.dump();
    let turns: Vec<Option<String>> = [&first, &second, &third]
        .iter()
        .map(|m| turn_of(&sc.sim, m))
        .collect();
    let expected: Vec<(String, String)> = turns
        .iter()
        .zip([SLOW_ANSWER, FOLLOW_UP_ANSWER, FOLLOW_UP_ANSWER])
        .map(|(t, a)| (t.clone().unwrap_or_default(), a.to_owned()))
        .collect();
    let mut finals = finals;
    // Canon stores the stalled final last; what matters is one per turn, under its own turn.
    finals.sort_by_key(|(turn, _)| turns.iter().position(|t| t.as_deref() == Some(turn)));
    assert_eq!(finals, expected, "one turn_complete per message\n{dump}");
    for turn in turns.iter().flatten() {
        assert_eq!(
            last_state(&sc.sim, turn).as_deref(),
            Some("completed"),
            "{dump}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_crash_loop_hands_over_to_the_gateway_reconnect() {
    let sc = start("queue").await;
    // Five exits within 300 s: the shim stops respawning and raises a retryable fatal; the
    // gateway's reconnect watcher then connects a fresh adapter, which spawns a new child.
    let mut seen = sc.gateway.daemon_pids();
    for _ in 0..5 {
        sc.gateway.kill_daemons();
        let pid = sc.next_daemon(&seen).await;
        seen.push(pid);
    }
    // Every killed child was waited for: none is left a zombie.
    let deadline = std::time::Instant::now() + TURN;
    while !sc.gateway.zombie_children().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "zombie daemons {:?}",
            sc.gateway.zombie_children()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log =
        || std::fs::read_to_string(sc.gateway.home.path().join("gateway.out")).unwrap_or_default();
    let deadline = std::time::Instant::now() + TURN;
    while !log().contains("Fatal canon adapter error (daemon_crash_loop)") {
        let shim: Vec<String> = log()
            .lines()
            .filter(|l| l.contains("canon_hermes:") || l.contains("Fatal"))
            .map(str::to_owned)
            .collect();
        assert!(
            std::time::Instant::now() < deadline,
            "the crash loop reached the gateway; pids {seen:?}\n{}\n{}",
            shim.join("\n"),
            sc.dump()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sc.wait("the canon stream reopened", |s| !s.open_streams.is_empty())
        .await;
    sc.say("are you back", None);
    let finals = sc.settle_with_finals(1).await;
    assert_eq!(
        finals.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(),
        [PLAIN_ANSWER],
        "{}",
        sc.dump()
    );
}

/// Runs `code` in the venv's Python with the installed shim (manifest pinning this binary)
/// loaded as module `shim` and a `canon` platform entry registered; returns stdout. The shim is
/// installed into a profile of its own, so that Hermes, which runs with an empty profile here,
/// does not also load it as a plugin.
fn shim_python(code: &str, env: &[(&str, &str)]) -> String {
    let python = super::gateway_support::hermes_python();
    let home = tempfile::tempdir().expect("scratch dir");
    let installed = home.path().join("installed");
    let hermes_home = home.path().join("hermes");
    for dir in [&installed, &hermes_home] {
        std::fs::create_dir_all(dir).expect("a profile home");
    }
    super::gateway_support::install_shim(&installed);
    let shim = super::gateway_support::shim_prelude(&installed.join("plugins/canon-hermes"));
    let prelude = format!(
        "{shim}import asyncio, inspect\n\
         from gateway.platform_registry import platform_registry, PlatformEntry\n\
         platform_registry.register(PlatformEntry(name='canon', label='Canon',\n\
             adapter_factory=None, check_fn=lambda: True))\n\
         from gateway.config import PlatformConfig\n"
    );
    let out = std::process::Command::new(python)
        .args(["-c", &format!("{prelude}{code}")])
        .env("HERMES_HOME", &hermes_home)
        .env("HOME", home.path())
        .env_remove("CANON_API_KEY")
        .envs(env.iter().copied())
        .output()
        .expect("the venv python runs");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// A runner stub with every attribute hermes-host.md §12.3 verifies.
const FAKE_RUNNER: &str = r#"
class Runner:
    _draining = False
    def __init__(self):
        self._queued_events, self._running_agents = {}, {}
    def _queue_or_replace_pending_event(self, key, event): pass
    def _is_user_authorized(self, source): return True
    @staticmethod
    def _agent_has_active_subagents(agent): return False
    async def _session_has_compression_in_flight(self, key): return False
    def _promote_queued_event(self, session_key, adapter, pending_event): return pending_event
    def _queue_depth(self, key, adapter=None): return 0
    async def _handle_active_session_busy_message(self, event, key): return False
    _MAX_INTERRUPT_DEPTH = 3
    async def _run_agent(self, session_key=None, adapter=None, pending_event=None, _interrupt_depth=0):
        return self._promote_queued_event(session_key, adapter, pending_event)
runner = Runner()
cls = shim._make_adapter_class()
"#;

#[test]
fn dequeue_wrapper_is_owned_replaced_and_removed() {
    let code = r#"
a = cls(PlatformConfig(enabled=True))
a.set_busy_session_handler(runner._handle_active_session_busy_message)
print(a._connect_body(False)['seams'])
b = cls(PlatformConfig(enabled=True))
b.set_busy_session_handler(runner._handle_active_session_busy_message)
original = runner._promote_queued_event._canon_original
print(a._wrapper_owned(), b._wrapper_owned(), original.__func__ is Runner._promote_queued_event)
a.set_busy_session_handler(None)
print(b._wrapper_owned())
b.set_busy_session_handler(None)
print(hasattr(runner._promote_queued_event, '_canon_owner'), b._busy_session_handler)
"#;
    let out = shim_python(&format!("{FAKE_RUNNER}{code}"), &[]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "{'busy_handler': True, 'dequeue_ack': True}",
            "False True True",
            "True",
            "False None",
        ],
        "{out}"
    );
}

/// A connected adapter `a` on `runner` whose daemon is a stub `d` recording every frame; the
/// stub answers `turn.start` and `turn.accepted` with `T-<event_ref>`. `event(id)` builds an
/// inbound event of chat `c1` whose `event_ref` is `ev-<id>`.
const FAKE_DAEMON: &str = r#"
import concurrent.futures
from gateway.platforms.base import MessageEvent, ProcessingOutcome
class FakeDaemon:
    def __init__(self): self.frames = []
    def alive(self): return True
    def request(self, kind, body):
        self.frames.append((kind, body))
        fut = concurrent.futures.Future()
        turn = kind in ("turn.start", "turn.accepted")
        fut.set_result({"turn_id": "T-" + body["event_ref"]} if turn else {})
        return fut
    async def acall(self, kind, body, timeout): return self.request(kind, body).result()
    def notify(self, kind, body): self.frames.append((kind, body))
shim.SUPERVISOR.child = d = FakeDaemon()
a = cls(PlatformConfig(enabled=True))
a.set_busy_session_handler(runner._handle_active_session_busy_message)
a.gateway_runner = runner
def event(mid, **kw):
    source = a.build_source(chat_id="c1", chat_type="dm", user_id="u1", user_name="Ana")
    ev = MessageEvent(text="hi " + mid, source=source, message_id=mid, **kw)
    ev._canon_ref = "ev-" + mid
    return ev
def kinds(): return [k for k, _ in d.frames]
"#;

/// Task-level shim behaviour of the dequeue boundary (hermes-host.md §12.3, §19.10): the dequeue
/// sends `turn.accepted` at once (the daemon places the boundary), `interrupted` says whether
/// this adapter interrupted the running agent for it, the follow-up's turn id replaces the open
/// turn `resync` would hand over, and `on_processing_complete` removes it.
#[test]
fn dequeued_follow_up_is_tracked_for_resync() {
    let code = r#"
class Agent:
    def interrupt(self, message=None): pass
first, second = event("m1"), event("m2")
key = a._key(first.source)
asyncio.run(a.on_processing_start(first))
print(a._open[key]["turn_id"])
runner._promote_queued_event(key, a, second)
print(kinds()[-1], d.frames[-1][1]["interrupted"], a._open[key]["turn_id"], a._open[key]["event_ref"])
third = event("m3", metadata={"deliveryIntent": "interrupt"})
runner._running_agents[key] = Agent()
print(asyncio.run(a._busy(third, key)), key in a._cut)
runner._promote_queued_event(key, a, third)
print(kinds()[-1], d.frames[-1][1]["interrupted"], a._open[key]["turn_id"], key in a._cut)
asyncio.run(a.on_processing_complete(first, ProcessingOutcome.SUCCESS))
print(key in a._open, kinds())
"#;
    let out = shim_python(&format!("{FAKE_RUNNER}{FAKE_DAEMON}{code}"), &[]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "T-ev-m1",
            "turn.accepted False T-ev-m2 ev-m2",
            "True True",
            "turn.accepted True T-ev-m3 False",
            "False ['turn.start', 'turn.accepted', 'queue.depth', 'turn.accepted', 'turn.complete']",
        ],
        "{out}"
    );
}

/// At Hermes' recursion cap over queued follow-ups the dequeue wrapper does not dequeue: the
/// follow-up stays at the head of the queue (ahead of the overflow), the runner is told there is
/// nothing to run inside this run, and no `turn.accepted` is sent; below the cap it dequeues and
/// acknowledges as before.
#[test]
fn at_the_recursion_cap_the_follow_up_stays_queued_and_unacknowledged() {
    let code = r#"
first, second, third = event("m1"), event("m2"), event("m3")
key = a._key(first.source)
asyncio.run(a.on_processing_start(first))
runner._queued_events[key] = [third]
held = asyncio.run(runner._run_agent(session_key=key, adapter=a, pending_event=second, _interrupt_depth=3))
print(held, a._pending_messages.get(key) is second, [e.message_id for e in runner._queued_events[key]], kinds())
a._pending_messages.pop(key)
ran = asyncio.run(runner._run_agent(session_key=key, adapter=a, pending_event=second, _interrupt_depth=1))
print(ran is second, kinds()[-1], d.frames[-1][1]["event_ref"])
"#;
    let out = shim_python(&format!("{FAKE_RUNNER}{FAKE_DAEMON}{code}"), &[]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "None True ['m3'] ['turn.start']",
            "True turn.accepted ev-m2",
        ],
        "{out}"
    );
}

/// hermes-host.md §12.3 step 5: an `interleave` the running agent accepts as a steer is consumed
/// and reported as `turn.steered`; a refused steer falls back to the queue.
#[test]
fn accepted_steer_is_reported_to_the_daemon() {
    let code = r#"
class Agent:
    def __init__(self, ok): self.ok = ok
    def steer(self, text): return self.ok
    def interrupt(self, message=None): pass
ev = event("m3", metadata={"deliveryIntent": "interleave"})
key = a._key(ev.source)
runner._running_agents[key] = Agent(True)
print(asyncio.run(a._busy(ev, key)), d.frames)
d.frames.clear()
runner._running_agents[key] = Agent(False)
print(asyncio.run(a._busy(ev, key)), kinds())
"#;
    let out = shim_python(&format!("{FAKE_RUNNER}{FAKE_DAEMON}{code}"), &[]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "True [('turn.steered', {'session_key': 'agent:main:canon:dm:c1', 'chat_id': 'c1'})]",
            "True ['queue.depth']",
        ],
        "{out}"
    );
}

/// hermes-host.md §9.5: the no-op pass of a message that arrives during Hermes' startup restore
/// opens and closes no Canon turn; the replay of the same event object (and an internal event
/// during the restore) does.
#[test]
fn startup_restore_no_op_pass_opens_no_turn() {
    let code = r#"
def run(ev):
    asyncio.run(a.on_processing_start(ev))
    asyncio.run(a.on_processing_complete(ev, ProcessingOutcome.SUCCESS))
runner._startup_restore_in_progress = True
ev = event("m4")
run(ev)
print(kinds())
ev._hermes_startup_restore_replay = True
run(ev)
print(kinds())
d.frames.clear()
run(event("m5", internal=True))
print(kinds())
"#;
    let out = shim_python(&format!("{FAKE_RUNNER}{FAKE_DAEMON}{code}"), &[]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "[]",
            "['turn.start', 'turn.complete']",
            "['turn.start', 'turn.complete']",
        ],
        "{out}"
    );
}

/// hermes-host.md §19.7 and Q8: each hand-off file goes into Hermes' cache with the helper for
/// its kind (keeping its extension or document name); an item Hermes refuses or that cannot be
/// read is dropped, every temp file is deleted, and the log never quotes the bytes.
#[test]
fn inbound_media_move_into_hermes_cache() {
    let code = r#"
import base64, logging, os, tempfile
records = []
class Capture(logging.Handler):
    def emit(self, record): records.append(record.getMessage())
shim.log.addHandler(Capture())
tmp = tempfile.mkdtemp()
def handoff(name, data):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    return path
png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==")
media = [
    {"path": handoff("a", png), "mime_type": "image/png", "kind": "image", "file_name": "dot.png"},
    {"path": handoff("b", b"<html>secret page</html>"), "mime_type": "image/jpeg", "kind": "image"},
    {"path": handoff("c", b"%PDF-1.4"), "mime_type": "application/pdf", "kind": "document",
     "file_name": "report.pdf"},
    {"path": handoff("d", b"OggS"), "mime_type": "audio/ogg", "kind": "audio", "file_name": None},
    {"path": os.path.join(tmp, "gone"), "mime_type": "video/mp4", "kind": "video", "file_name": "v.mp4"},
]
paths, types = shim._adapter._cache_media(media)
print([os.path.basename(p).split("_")[0] + os.path.splitext(p)[1] for p in paths], types)
print(open(paths[0], "rb").read() == png, paths[1].endswith("_report.pdf"), os.listdir(tmp))
print(len(records), any("secret" in r for r in records))
"#;
    let out = shim_python(&format!("{FAKE_RUNNER}{code}"), &[]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "['img.png', 'doc.pdf', 'audio.ogg'] ['image/png', 'application/pdf', 'audio/ogg']",
            "True True []",
            "2 False",
        ],
        "{out}"
    );
}

#[test]
fn busy_seam_reports_false_when_a_runner_attribute_is_missing() {
    let code = r#"
del Runner._queue_depth
a = cls(PlatformConfig(enabled=True))
a.set_busy_session_handler(runner._handle_active_session_busy_message)
print(a._connect_body(False)['seams'])
"#;
    let out = shim_python(&format!("{FAKE_RUNNER}{code}"), &[]);
    assert_eq!(out.trim(), "{'busy_handler': False, 'dequeue_ack': False}");
}

#[test]
fn platform_entry_has_a_cheap_check_and_a_standalone_sender() {
    let code = r#"
class Ctx:
    def register_hook(self, *a): pass
    def register_platform(self, **kw): self.kw = kw
ctx = Ctx()
shim.register(ctx)
print(inspect.iscoroutinefunction(ctx.kw['standalone_sender_fn']))
print(ctx.kw['check_fn'](), shim.SUPERVISOR.child is None)
"#;
    // The check is the daemon's resolver, never the variable alone (cli.md §5.1): a bare key
    // without an environment id does not resolve, and asking spawned the child.
    let with_key = shim_python(code, &[("CANON_API_KEY", "k")]);
    assert_eq!(
        with_key.lines().collect::<Vec<_>>(),
        ["True", "False False"],
        "the daemon is asked even when a key is in the environment"
    );
    // A binary that cannot answer means False.
    let without = shim_python(code, &[("CANON_HERMES_BIN", "/bin/false")]);
    assert_eq!(without.lines().nth(1), Some("False True"), "{without}");
}

#[tokio::test(flavor = "multi_thread")]
async fn standalone_sender_delivers_out_of_process() {
    let sim = Sim::start(SimConfig::for_tests())
        .await
        .expect("the simulator starts");
    let code = format!(
        r#"
pconfig = PlatformConfig(enabled=True)
print(asyncio.run(shim.standalone_send(pconfig, {DEFAULT_CONVERSATION:?}, "cron says hi")))
"#
    );
    let (key, base, stream) = (sim.api_key(), sim.base_url(), sim.stream_url());
    let out = tokio::task::block_in_place(|| {
        shim_python(
            &code,
            &[
                ("CANON_HERMES_BIN", env!("CARGO_BIN_EXE_canon-hermes")),
                ("CANON_API_KEY", &key),
                ("CANON_BASE_URL", &base),
                ("CANON_STREAM_URL", &stream),
            ],
        )
    });
    assert!(out.contains("'success': True"), "{out}");
    let texts: Vec<String> = sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .map(|m| m.message["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    });
    assert_eq!(texts, ["cron says hi"], "{out}");
}

/// hermes-host.md §10, §19.10: a send or edit cut off by a daemon crash (`daemon_exited`) is
/// sent once more to the respawned child instead of failing — a failed edit would flip Hermes'
/// stream consumer into tail-only fallback. Other requests (an approval, a clarify) are not
/// resent, since a second interaction would ask the human twice.
#[test]
fn send_and_edit_cut_off_by_a_daemon_exit_go_to_the_respawned_child() {
    let code = r#"
class Dying(FakeDaemon):
    dead = False
    def alive(self): return not self.dead
    def request(self, kind, body):
        self.frames.append((kind, body))
        self.dead = True
        fut = concurrent.futures.Future()
        fut.set_exception(shim._daemon.DaemonError.of(shim._daemon.EXITED))
        return fut
class Fresh(FakeDaemon):
    def request(self, kind, body):
        self.frames.append((kind, body))
        fut = concurrent.futures.Future()
        fut.set_result({"success": True, "message_id": "T1"})
        return fut
fresh = Fresh()
shim.SUPERVISOR.get = lambda: fresh  # the real respawn + resync is the kill -9 scenario's
for call in (lambda: a.edit_message("c1", "T1", "Hello wor", finalize=False),
             lambda: a.send("c1", "Hello", metadata={"notify": True})):
    shim.SUPERVISOR.child = dying = Dying()
    r = asyncio.run(call())
    print(r.success, r.message_id, [k for k, _ in dying.frames], [k for k, _ in fresh.frames][-1:])
shim.SUPERVISOR.child = dying = Dying()
r = asyncio.run(a._forward("adapter.send_exec_approval", {"chat_id": "c1"}))
print(r.success, r.error, len(fresh.frames))
"#;
    let out = shim_python(&format!("{FAKE_RUNNER}{FAKE_DAEMON}{code}"), &[]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "True T1 ['adapter.edit'] ['adapter.edit']",
            "True T1 ['adapter.send'] ['adapter.send']",
            "False canon-hermes daemon exited 2",
        ],
        "{out}"
    );
}
