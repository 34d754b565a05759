//! Where a Canon turn's time goes with a real Hermes gateway, side by side with the reference
//! Python plugin (canon-hermes-plugin), and how far each runtime is from Hermes' own floor.
//!
//! For each runtime, one hermes-agent 0.19.0 gateway runs against canon-sim and its scripted
//! model server (the hermes-host.md §20 recipe of the real-gateway tests): canon-hermes through
//! the shim `canon-hermes install` writes, the reference as the Hermes plugin it is, installed
//! into its own venv by `scripts/bench-turns-reference.sh`. The gateway loads the probe in
//! `benches/turn_floor/sitecustomize.py`, which timestamps every call Hermes makes into its
//! platform adapter (stream previews, the final text, the processing hooks). The simulator
//! timestamps each request as it arrives and the model server each chat request; all three
//! use the wall clock of this machine, so the intervals below line up across the processes.
//!
//! Scenarios, each in a fresh conversation, repeated `TURN_FLOOR_REPEAT` times (default 10;
//! medians are printed; the two gateways run side by side and take turns scenario by
//! scenario): a short answer, a 20 KB answer, a tool turn (Hermes' `todo` tool, then the
//! answer), a quiet group turn (no live text), two messages back to back (the
//! second's figures) and a 100 KB answer (sent in parts). Every scripted reply is written whole
//! at once, so a model request's arrival is also when the model's answer began and ended.
//!
//! Two paths per scenario, in milliseconds:
//! * **model → turn_complete**: the answering model request (after the tool, or the second
//!   message's) → the last `turn_complete` write arrives at Canon. Hermes' floor on this path
//!   is its processing-complete hook, the moment it tells the adapter the turn is over (the
//!   final text's own edit or send comes a little before; both are printed).
//! * **model → first text**: the same request → the first live `/streaming` write with text.
//!   Hermes' floor is its first stream call into the adapter after the request.
//!
//! Hermes' floor itself is noisy: its stream consumer polls its queue every 50 ms, so the
//! first stream call (and the final one, which the processing-complete hook follows) comes up
//! to 50 ms after the agent thread handed it the text, at a phase no adapter controls. A
//! median of a few runs is mostly that phase. So the bench also prints, run by run, what each
//! runtime adds after Hermes' own call (the Canon write minus Hermes' call), which the phase
//! does not touch, and splits Hermes' first-text path into the agent thread's part (model
//! request → the first text delta handed to the consumer, also timestamped by the probe) and
//! the consumer's poll.
//!
//! Also counted: messages sent, `turn_complete` messages stored and Canon turns closed (one
//! answer and one closed turn per message is canon-hermes' contract).
//!
//! **Canon round trips.** Canon is in the cloud; here it is on loopback. Each scenario runs
//! at every Canon round trip of `TURN_FLOOR_LATENCIES` (ms, default `0,20,50,100`): canon-sim
//! holds every REST answer that long, half before it processes the request (the way in) and
//! half after (the way back). A write is stored, and a live text shown, half a round trip
//! after it was sent, so at a round trip `L` the figures above count that half. From the runs
//! at `L` and at 0 the bench derives how many Canon round trips each runtime's write waited
//! behind, in series, after Hermes' own call: (what the runtime adds at `L` − what it adds at
//! 0 − `L`/2) / `L`, medians, for the hook → `turn_complete` path (the final waits behind the
//! turn's earlier writes) and the first stream call → first text path (the follow-up's first
//! text in the back-to-back scenario). 0 is the floor: the write went out at once.
//!
//! `cargo bench -p canon-hermes --bench turn_floor` measures canon-hermes alone, or both when
//! `TURN_FLOOR_REFERENCE_PYTHON` names the reference venv's Python (the script sets it). It
//! needs the Hermes venv of `scripts/hermes-venv.sh` (`HERMES_VENV` as in the tests); without
//! `--bench` (a `cargo test --benches` run) it only says how to run it.

// The table on stdout is this benchmark's output; its progress lines go to stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use canon_sim::config::SimConfig;
use canon_sim::control::Injection;
use canon_sim::model::{ModelServer, Script};
use canon_sim::{ConversationSpec, Sim, SimHandle, DEFAULT_AGENT, DEFAULT_OWNER};
use serde_json::{json, Value};

// The real-gateway harness of the integration tests; helpers this bench does not use carry
// no meaning here.
#[allow(dead_code)]
#[path = "../tests/it/gateway_support.rs"]
mod gateway_support;

use gateway_support::{
    config_yaml, hermes_bin, install_shim, workspace_root, write, Gateway, GatewayOptions,
};

/// How long one scenario may take before the bench gives up on it.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the closing turn states may lag Hermes' last processing-complete hook.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The reference plugin's Canon environment: canon-sim answers health checks as this one.
const SIM_ENVIRONMENT: &str = "canon-dev-v1";

/// Which runtime a gateway runs.
#[derive(Debug, Clone)]
enum Runtime {
    /// canon-hermes: the shim in the profile, the daemon it spawns.
    Ours,
    /// The reference plugin, loaded by the Python of its own venv.
    Reference(PathBuf),
}

impl Runtime {
    fn label(&self) -> &'static str {
        match self {
            Self::Ours => "canon-hermes",
            Self::Reference(_) => "reference",
        }
    }
}

/// One scenario: the text it sends and what its turn does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Short,
    Long,
    Tool,
    QuietGroup,
    BackToBack,
    Big,
}

const SCENARIOS: [Scenario; 6] = [
    Scenario::Short,
    Scenario::Long,
    Scenario::Tool,
    Scenario::QuietGroup,
    Scenario::BackToBack,
    Scenario::Big,
];

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Self::Short => "short",
            Self::Long => "long (20 KB)",
            Self::Tool => "tool",
            Self::QuietGroup => "quiet group",
            Self::BackToBack => "back-to-back (2nd)",
            Self::Big => "100 KB",
        }
    }

    /// The word the model script matches.
    fn token(self) -> &'static str {
        match self {
            Self::Short => "FLOORSHORT",
            Self::Long => "FLOORLONG",
            Self::Tool => "FLOORTOOL",
            Self::QuietGroup => "FLOORGROUP",
            Self::BackToBack => "FLOORPAIR",
            Self::Big => "FLOORBIG",
        }
    }

    /// Whether the turn streams live text (a quiet group turn shows none).
    fn streams(self) -> bool {
        self != Self::QuietGroup
    }
}

/// An answer of about `bytes` bytes in words of varying length, with paragraph breaks.
fn answer_of(bytes: usize) -> String {
    let words = [
        "Canon", "streams", "the", "answer", "while", "Hermes", "thinks,",
    ];
    let mut out = String::with_capacity(bytes + 16);
    let mut i = 0usize;
    while out.len() < bytes {
        out.push_str(words[i % words.len()]);
        i += 1;
        out.push(if i % 97 == 0 { '\n' } else { ' ' });
    }
    out.trim_end().to_owned()
}

fn script() -> Script {
    let mut rules = vec![
        json!({"match": {"titleRequest": true}, "reply": {"text": "Scripted session"}}),
        json!({"match": {"role": "tool"}, "reply": {"echoToolResult": true, "prefix": "Tool said: "}}),
        json!({"match": {"role": "user", "contains": Scenario::Tool.token()},
               "reply": {"toolCall": {"name": "todo", "id": "call_floor",
                         "arguments": {"todos": [{"id": "t1", "content": "measure the floor",
                                                  "status": "in_progress"}]}}}}),
        json!({"match": {"role": "user", "contains": Scenario::Long.token()},
               "reply": {"text": answer_of(20 * 1024)}}),
        json!({"match": {"role": "user", "contains": Scenario::Big.token()},
               "reply": {"text": answer_of(100 * 1024)}}),
    ];
    rules.push(json!({"match": {}, "reply": {"text": "Hello from the scripted model."}}));
    Script::parse(&json!({"model": "fake-model", "rules": rules}).to_string()).expect("script")
}

/// One probe line: a call Hermes made into the adapter.
#[derive(Debug, Clone)]
struct ProbeCall {
    at_us: u64,
    call: String,
    chat: String,
    /// How long the adapter took to answer a send or edit.
    took_us: Option<u64>,
}

fn probe_calls(path: &Path) -> Vec<ProbeCall> {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|v| ProbeCall {
            // Seconds as a float → microseconds (f64 keeps microseconds exact at today's epoch).
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            at_us: (v["t"].as_f64().unwrap_or(0.0) * 1e6) as u64,
            call: v["call"].as_str().unwrap_or("").to_owned(),
            chat: v["chat"].as_str().unwrap_or("").to_owned(),
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            took_us: v["took"].as_f64().map(|s| (s * 1e6) as u64),
        })
        .collect()
}

/// The figures of one scenario run, in microseconds from the answering model request.
#[derive(Debug, Clone, Default)]
struct Run {
    /// → the last `turn_complete` write arrived at Canon.
    complete: Option<u64>,
    /// → Hermes' processing-complete hook.
    hook: Option<u64>,
    /// → Hermes' last send or edit (the final text).
    last_edit: Option<u64>,
    /// → the first `/streaming` write with text.
    first_text: Option<u64>,
    /// → Hermes' first send or edit.
    first_call: Option<u64>,
    /// → the agent thread handed the answer's first text to Hermes' stream consumer.
    first_delta: Option<u64>,
    /// How long the adapter took to answer each of Hermes' sends and edits in the scenario.
    answers_us: Vec<u64>,
    /// Messages the scenario sent, each owed one answer.
    turns: usize,
    /// `turn_complete` messages Canon stored for them.
    turn_completes: usize,
    /// Canon turns closed (`completed` or `interrupted` published).
    closed: usize,
    /// Every Canon write and adapter call of the run, in µs from the answering model request
    /// (negative before it), for `TURN_FLOOR_RAW`.
    timeline: Vec<(i64, String)>,
}

/// The Canon round trips to measure at, in ms: `TURN_FLOOR_LATENCIES` (comma-separated), or
/// 0, 20, 50 and 100.
fn latencies() -> Vec<u64> {
    let chosen: Vec<u64> = std::env::var("TURN_FLOOR_LATENCIES")
        .unwrap_or_default()
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    if chosen.is_empty() {
        vec![0, 20, 50, 100]
    } else {
        chosen
    }
}

/// A gateway, its simulator and model, and the probe's file.
struct Bench {
    sim: SimHandle,
    model: ModelServer,
    gateway: Gateway,
    probe: PathBuf,
    next: usize,
}

fn probe_dir() -> PathBuf {
    workspace_root().join("crates/cli/benches/turn_floor")
}

/// Starts `runtime`'s gateway on a fresh profile; returns once it holds the Canon stream.
async fn start(runtime: &Runtime) -> Bench {
    let mut config = SimConfig::for_tests();
    config.frozen_clock_ms = None;
    let sim = Sim::start(config).await.expect("the simulator starts");
    sim.set_switches(|s| s.rate_limits = false);
    let model = ModelServer::start(script(), 0)
        .await
        .expect("the model server starts");
    let home = tempfile::tempdir().expect("scratch dir");
    let hermes_home = home.path().join("hermes");
    write(
        &hermes_home.join("config.yaml"),
        &config_yaml(&model.base_url(), &GatewayOptions::default()),
    );
    let probe = home.path().join("probe.jsonl");
    let python_path = match std::env::var_os("PYTHONPATH") {
        Some(p) => format!("{}:{}", probe_dir().display(), p.to_string_lossy()),
        None => probe_dir().display().to_string(),
    };
    let out = fs::File::create(home.path().join("gateway.out")).expect("log file");
    let mut command = match runtime {
        Runtime::Ours => {
            tokio::task::block_in_place(|| install_shim(&hermes_home));
            let mut c = Command::new(hermes_bin());
            c.args(["gateway", "run", "-v"])
                .env("CANON_HERMES_BIN", env!("CARGO_BIN_EXE_canon-hermes"))
                .env_remove("CANON_ENVIRONMENT_ID");
            c
        }
        Runtime::Reference(python) => {
            let mut c = Command::new(python);
            c.args([
                "-c",
                "import sys; from hermes_cli.main import main; sys.argv[0] = 'hermes'; sys.exit(main())",
                "gateway",
                "run",
                "-v",
            ])
            .env("CANON_ENVIRONMENT_ID", SIM_ENVIRONMENT)
            // Never contacted during a turn; the plugin only insists that one is named.
            .env("CANON_RTDB_URL", "http://127.0.0.1:9")
            .env("CANON_FIREBASE_API_KEY", "turn-floor-bench")
            .env("CANON_ALLOW_ALL_USERS", "true");
            c
        }
    };
    let child = command
        .current_dir(home.path())
        .env("HERMES_HOME", &hermes_home)
        .env("HOME", home.path())
        .env("HERMES_DISABLE_LAZY_INSTALLS", "1")
        .env("CANON_API_KEY", sim.api_key())
        .env("CANON_BASE_URL", sim.base_url())
        .env("CANON_STREAM_URL", sim.stream_url())
        .env("PYTHONPATH", python_path)
        .env("TURN_FLOOR_PROBE", &probe)
        .env_remove("CANON_HOME_CHANNEL")
        .env_remove("HERMES_SAFE_MODE")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup log"))
        .stderr(out)
        .spawn()
        .expect("the Hermes gateway starts");
    let mut gateway = Gateway { child, home };
    tokio::task::block_in_place(|| {
        gateway.wait_ready();
        gateway.wait_settled();
    });
    if let Err(e) = sim
        .wait_for("the Canon stream", SCENARIO_TIMEOUT, |s| {
            !s.open_streams.is_empty()
        })
        .await
    {
        panic!("{e}\n{}", gateway.log_tail());
    }
    Bench {
        sim,
        model,
        gateway,
        probe,
        next: 0,
    }
}

impl Bench {
    /// A fresh conversation for one scenario run.
    fn conversation(&mut self, scenario: Scenario) -> String {
        self.next += 1;
        let id = format!("c-floor-{}", self.next);
        let group = scenario == Scenario::QuietGroup;
        let mut members = vec![DEFAULT_OWNER.to_owned(), DEFAULT_AGENT.to_owned()];
        if group {
            if !self
                .sim
                .read_state(|s| s.principals.contains_key("h-guest"))
            {
                self.sim.create_principal(canon_sim::PrincipalSpec {
                    id: Some("h-guest".into()),
                    kind: "human".into(),
                    display_name: Some("Guest".into()),
                    ..canon_sim::PrincipalSpec::default()
                });
            }
            members.push("h-guest".to_owned());
        }
        self.sim.create_conversation(ConversationSpec {
            id: Some(id.clone()),
            kind: if group { "group" } else { "direct" }.to_owned(),
            name: Some(format!("floor {}", self.next)),
            member_ids: members,
            behavior: group.then(|| json!({"requireMentionForGroupReplies": true})),
        })
    }

    fn inject(&self, conversation: &str, text: String, mention: bool) {
        self.sim
            .inject_message(&Injection {
                conversation_id: Some(conversation.to_owned()),
                text: Some(text),
                mentions: if mention {
                    vec![DEFAULT_AGENT.to_owned()]
                } else {
                    Vec::new()
                },
                ..Injection::default()
            })
            .expect("inject");
    }

    /// Runs `scenario` once with every Canon REST answer held `latency_ms` (a round trip) and
    /// reads its figures.
    async fn run(&mut self, scenario: Scenario, latency_ms: u64) -> Run {
        self.sim.set_switches(|s| s.rest_latency_ms = latency_ms);
        let conversation = self.conversation(scenario);
        let tag = format!("{} run {}", scenario.token(), self.next);
        let requests_before = self.model.requests().len();
        let turns = if scenario == Scenario::BackToBack {
            2
        } else {
            1
        };
        match scenario {
            Scenario::QuietGroup => self.inject(&conversation, format!("@Hermes {tag}"), true),
            Scenario::BackToBack => {
                self.inject(&conversation, format!("{tag} first"), false);
                self.inject(&conversation, format!("{tag} second"), false);
            }
            _ => self.inject(&conversation, tag.clone(), false),
        }
        // Done once Hermes ran its processing-complete hook after the answering request (a
        // queued follow-up runs inside the first message's processing in Hermes 0.19.0, so
        // back to back there is one hook for both), and the runtime published the closing
        // states it publishes (a runtime may close fewer Canon turns than messages).
        let started = std::time::Instant::now();
        loop {
            let answered = self.answering_request(scenario, requests_before);
            let done = answered.is_some_and(|origin| {
                probe_calls(&self.probe).iter().any(|c| {
                    c.chat == conversation
                        && c.call == "on_processing_complete"
                        && c.at_us >= origin
                })
            });
            if done {
                break;
            }
            if started.elapsed() > SCENARIO_TIMEOUT {
                panic!(
                    "{}: Hermes did not finish the turn within {SCENARIO_TIMEOUT:?}\n{}",
                    scenario.name(),
                    self.gateway.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let closing = conversation.clone();
        let _ = self
            .sim
            .wait_for("the closing turn states", CLOSE_WAIT, move |s| {
                closed_turns(s, &closing) >= turns
            })
            .await;
        // Late writes of the turn (a clear after its final) land before the next scenario.
        tokio::time::sleep(Duration::from_millis(1500 + 4 * latency_ms)).await;
        self.figures(scenario, &conversation, requests_before, turns, latency_ms)
    }

    /// When the model request answering `scenario`'s (last) message arrived: the last
    /// non-title request since `requests_before` (the tool's result, the second message).
    fn answering_request(&self, scenario: Scenario, requests_before: usize) -> Option<u64> {
        let requests = self.model.requests();
        let arrivals = self.model.arrivals_unix_us();
        requests
            .iter()
            .zip(&arrivals)
            .skip(requests_before)
            .filter(|(r, _)| !canon_sim::model::is_title_request(r))
            .filter(|(r, _)| match scenario {
                Scenario::Tool => r["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .is_some_and(|m| m["role"] == "tool"),
                Scenario::BackToBack => last_user_text(r).contains("second"),
                _ => true,
            })
            .map(|(_, at)| *at)
            .next_back()
    }

    fn figures(
        &self,
        scenario: Scenario,
        conversation: &str,
        requests_before: usize,
        turns: usize,
        latency_ms: u64,
    ) -> Run {
        let answering = self.answering_request(scenario, requests_before);
        let Some(origin) = answering else {
            return Run::default();
        };
        let since = |at: u64| at.checked_sub(origin);
        // The simulator stamps a request when it arrives on loopback, which is when it was
        // sent; Canon has it (stores it, shows it) half a round trip later.
        let reached = |at: u64| at + latency_ms * 500;
        let journal = self.sim.journal(0, None);
        let mine: Vec<_> = journal
            .iter()
            .filter(|e| {
                e.method == "POST"
                    && e.principal.as_deref() == Some(DEFAULT_AGENT)
                    && e.body["conversationId"] == conversation
            })
            .collect();
        let is_complete = |e: &&&canon_sim::journal::JournalEntry| {
            e.body["metadata"]["turnSemantics"] == "turn_complete" && (200..300).contains(&e.status)
        };
        let complete = mine
            .iter()
            .filter(is_complete)
            .map(|e| reached(e.arrived_unix_us))
            .max()
            .and_then(since);
        let first_text = mine
            .iter()
            .filter(|e| {
                e.path == "/streaming"
                    && e.arrived_unix_us >= origin
                    && e.body["text"]
                        .as_str()
                        .is_some_and(|t| !t.trim().is_empty())
            })
            .map(|e| reached(e.arrived_unix_us))
            .min()
            .and_then(since);
        let all_calls: Vec<ProbeCall> = probe_calls(&self.probe)
            .into_iter()
            .filter(|c| c.chat == conversation)
            .collect();
        let answers_us = all_calls.iter().filter_map(|c| c.took_us).collect();
        let calls: Vec<&ProbeCall> = all_calls.iter().filter(|c| c.at_us >= origin).collect();
        let content = |c: &ProbeCall| c.call == "send" || c.call == "edit_message";
        // The moments of the calls `pick` keeps, from the answering request on.
        let moments = |pick: &dyn Fn(&ProbeCall) -> bool| {
            calls
                .iter()
                .filter(|c| pick(c))
                .map(|c| c.at_us)
                .collect::<Vec<u64>>()
        };
        let hook = moments(&|c| c.call == "on_processing_complete")
            .into_iter()
            .max()
            .and_then(since);
        let last_edit = moments(&content).into_iter().max().and_then(since);
        let first_call = moments(&content).into_iter().min().and_then(since);
        let first_delta = moments(&|c| c.call == "first_delta")
            .into_iter()
            .min()
            .and_then(since);
        // turn_complete messages (a message in parts carries it on its last part only).
        let turn_completes = self.sim.read_state(|s| {
            s.messages
                .iter()
                .filter(|m| {
                    m.conversation_id == conversation
                        && m.message["senderId"] == DEFAULT_AGENT
                        && m.message["metadata"]["turnSemantics"] == "turn_complete"
                })
                .count()
        });
        let closed = self.sim.read_state(|s| closed_turns(s, conversation));
        let rel =
            |at: u64| i64::try_from(at).unwrap_or(i64::MAX) - i64::try_from(origin).unwrap_or(0);
        let mut timeline: Vec<(i64, String)> = journal
            .iter()
            .filter(|e| {
                e.principal.as_deref() == Some(DEFAULT_AGENT)
                    && (e.body["conversationId"] == conversation || e.path.contains(conversation))
            })
            .map(|e| {
                let state = e.body["state"]
                    .as_str()
                    .or_else(|| e.body["metadata"]["turnSemantics"].as_str());
                (
                    rel(e.arrived_unix_us),
                    format!(
                        "canon {} {}{}",
                        e.method,
                        e.path,
                        state.map(|s| format!(" {s}")).unwrap_or_default()
                    ),
                )
            })
            .chain(all_calls.iter().map(|c| {
                (
                    rel(c.at_us),
                    format!(
                        "hermes {}{}",
                        c.call,
                        c.took_us
                            .map(|t| format!(" took {:.1}ms", t as f64 / 1000.0))
                            .unwrap_or_default()
                    ),
                )
            }))
            .chain(
                self.model
                    .arrivals_unix_us()
                    .iter()
                    .skip(requests_before)
                    .map(|at| (rel(*at), "model request".to_owned())),
            )
            .collect();
        timeline.sort();
        Run {
            complete,
            hook,
            last_edit,
            first_text: if scenario.streams() { first_text } else { None },
            first_call: if scenario.streams() { first_call } else { None },
            first_delta: if scenario.streams() {
                first_delta
            } else {
                None
            },
            answers_us,
            turns,
            turn_completes,
            closed,
            timeline,
        }
    }
}

/// Canon turns of `conversation` published closed (`completed` or `interrupted`).
fn closed_turns(state: &canon_sim::State, conversation: &str) -> usize {
    state
        .turn_history
        .iter()
        .filter(|t| {
            t["conversationId"] == conversation
                && matches!(t["state"].as_str(), Some("completed" | "interrupted"))
        })
        .count()
}

fn last_user_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default()
}

fn median(values: impl Iterator<Item = Option<u64>>) -> Option<f64> {
    let mut v: Vec<u64> = values.flatten().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let mid = v.len() / 2;
    #[allow(clippy::cast_precision_loss)]
    let us = if v.len() % 2 == 1 {
        v[mid] as f64
    } else {
        (v[mid - 1] + v[mid]) as f64 / 2.0
    };
    Some(us / 1000.0)
}

/// The first and third quartile (nearest rank), in milliseconds.
fn quartiles(values: impl Iterator<Item = Option<u64>>) -> (Option<f64>, Option<f64>) {
    let mut v: Vec<u64> = values.flatten().collect();
    if v.is_empty() {
        return (None, None);
    }
    v.sort_unstable();
    let at = |q: usize| us_ms(v[(v.len() - 1) * q / 4]);
    (Some(at(1)), Some(at(3)))
}

#[allow(clippy::cast_precision_loss)]
fn us_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_owned(), |v| format!("{v:.1}"))
}

type Figures = BTreeMap<&'static str, Vec<Run>>;

/// A runtime's figures at each Canon round trip (ms).
type ByLatency = BTreeMap<u64, Figures>;

/// One figure of a run (a moment, in µs from the answering model request).
type Figure = fn(&Run) -> Option<u64>;

/// Runs every scenario `repeat` times on each runtime's gateway. Both gateways run side by side
/// and take turns scenario by scenario, so a slow spell of the machine (Hermes' own time moves
/// by tens of milliseconds from minute to minute on two cores) falls on both alike.
async fn measure(runtimes: &[Runtime], repeat: usize, latencies: &[u64]) -> Vec<ByLatency> {
    let mut benches = Vec::new();
    for runtime in runtimes {
        eprintln!("turn_floor: starting the {} gateway", runtime.label());
        benches.push(start(runtime).await);
    }
    let mut out: Vec<ByLatency> = runtimes.iter().map(|_| ByLatency::new()).collect();
    // TURN_FLOOR_SCENARIOS=FLOORTOOL,FLOORPAIR runs only the scenarios whose tokens it names.
    let only = std::env::var("TURN_FLOOR_SCENARIOS").unwrap_or_default();
    let chosen: Vec<Scenario> = SCENARIOS
        .into_iter()
        .filter(|s| only.is_empty() || only.split(',').any(|t| t.trim() == s.token()))
        .collect();
    for round in 0..repeat {
        for (&scenario, &latency) in chosen
            .iter()
            .flat_map(|s| latencies.iter().map(move |l| (s, l)))
        {
            for ((runtime, bench), by_latency) in runtimes.iter().zip(&mut benches).zip(&mut out) {
                eprintln!(
                    "turn_floor: {} {} at {latency} ms ({}/{repeat})",
                    runtime.label(),
                    scenario.name(),
                    round + 1
                );
                let figures = by_latency.entry(latency).or_default();
                let run = bench.run(scenario, latency).await;
                if let Some(path) = std::env::var_os("TURN_FLOOR_RAW") {
                    let line = json!({
                        "runtime": runtime.label(), "scenario": scenario.name(), "round": round,
                        "latency_ms": latency,
                        "complete": run.complete, "hook": run.hook, "last_edit": run.last_edit,
                        "first_text": run.first_text, "first_call": run.first_call,
                        "first_delta": run.first_delta,
                        "timeline": run.timeline,
                    });
                    let mut file = fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .expect("raw file");
                    std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes())
                        .expect("raw write");
                }
                figures.entry(scenario.name()).or_default().push(run);
            }
        }
    }
    for bench in &mut benches {
        tokio::task::block_in_place(|| bench.gateway.stop());
    }
    out
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "turn_floor: measured with a real Hermes gateway; run `cargo bench -p canon-hermes \
             --bench turn_floor` or scripts/bench-turns-reference.sh"
        );
        return;
    }
    let repeat = std::env::var("TURN_FLOOR_REPEAT")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(10);
    let reference = std::env::var_os("TURN_FLOOR_REFERENCE_PYTHON").map(PathBuf::from);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut runtimes = vec![Runtime::Ours];
    runtimes.extend(reference.map(Runtime::Reference));
    let latencies = latencies();
    let mut figures = runtime
        .block_on(measure(&runtimes, repeat, &latencies))
        .into_iter();
    let ours = figures.next().unwrap_or_default();
    let theirs = figures.next();
    let empty = Figures::new();
    for latency in &latencies {
        println!();
        println!("==== Canon round trip {latency} ms ====");
        print_table(
            ours.get(latency).unwrap_or(&empty),
            theirs.as_ref().map(|t| t.get(latency).unwrap_or(&empty)),
            repeat,
        );
    }
    print_round_trips(&ours, theirs.as_ref(), &latencies);
}

/// The Canon round trips each runtime's write waited behind, in series, after Hermes' call, at
/// each round trip above 0 (see the module's documentation).
fn print_round_trips(ours: &ByLatency, theirs: Option<&ByLatency>, latencies: &[u64]) {
    if !ours.contains_key(&0) {
        println!();
        println!("round trips: not derived (TURN_FLOOR_LATENCIES has no 0)");
        return;
    }
    println!();
    println!(
        "Canon round trips in series on each path (medians; 0 = no Canon round trip on it): \
         Hermes' wait for the adapter's answer to a send or edit, the whole path from the model's \
         answer, and what the runtime adds after Hermes' own call"
    );
    println!(
        "{:<20} {:<32} {:>8} {:>12} | {:>10}",
        "scenario", "path", "trip ms", "canon-hermes", "reference"
    );
    let added = |figures: Option<&Figures>, name: &str, late: Figure, early: Figure| {
        let runs = figures.and_then(|f| f.get(name))?;
        median(
            runs.iter()
                .map(|r| late(r).zip(early(r)).map(|(l, e)| l.saturating_sub(e))),
        )
    };
    #[allow(clippy::cast_precision_loss)]
    let trips = |by: Option<&ByLatency>, name: &str, latency: u64, late: Figure, early: Figure| {
        let at = added(by.and_then(|b| b.get(&latency)), name, late, early)?;
        let base = added(by.and_then(|b| b.get(&0)), name, late, early)?;
        let l = latency as f64;
        Some((at - base - l / 2.0) / l)
    };
    let shown = |v: Option<f64>| v.map_or_else(|| "—".to_owned(), |v| format!("{v:.1}"));
    for scenario in SCENARIOS {
        let name = scenario.name();
        let mut paths: Vec<(&str, Figure, Figure)> = vec![
            ("model → turn_complete stored", |r| r.complete, |_| Some(0)),
            ("hook → turn_complete stored", |r| r.complete, |r| r.hook),
        ];
        if scenario.streams() {
            paths.push(("model → first text", |r| r.first_text, |_| Some(0)));
            paths.push((
                "first stream call → first text",
                |r| r.first_text,
                |r| r.first_call,
            ));
        }
        let mut first = true;
        // Hermes' stream consumer awaits the adapter's answer to each send and edit: how many
        // round trips one answer waited for.
        #[allow(clippy::cast_precision_loss)]
        let waits = |by: Option<&ByLatency>, latency: u64| {
            let answer = |l: u64| {
                let runs = by.and_then(|b| b.get(&l)).and_then(|f| f.get(name))?;
                median(
                    runs.iter()
                        .flat_map(|r| r.answers_us.iter().map(|u| Some(*u))),
                )
            };
            Some((answer(latency)? - answer(0)?) / latency as f64)
        };
        for &latency in latencies.iter().filter(|l| **l > 0) {
            println!(
                "{:<20} {:<32} {:>8} {:>12} | {:>10}",
                if first { name } else { "" },
                "Hermes' wait per send or edit",
                latency,
                shown(waits(Some(ours), latency)),
                shown(waits(theirs, latency)),
            );
            first = false;
        }
        for (path, late, early) in paths {
            for &latency in latencies.iter().filter(|l| **l > 0) {
                println!(
                    "{:<20} {:<32} {:>8} {:>12} | {:>10}",
                    if first { name } else { "" },
                    path,
                    latency,
                    shown(trips(Some(ours), name, latency, late, early)),
                    shown(trips(theirs, name, latency, late, early)),
                );
                first = false;
            }
        }
    }
}

fn print_table(
    ours: &BTreeMap<&'static str, Vec<Run>>,
    theirs: Option<&BTreeMap<&'static str, Vec<Run>>>,
    repeat: usize,
) {
    let empty = Vec::new();
    let runs_of = |figures: Option<&BTreeMap<&'static str, Vec<Run>>>, name: &str| {
        figures.and_then(|f| f.get(name)).unwrap_or(&empty).clone()
    };
    println!();
    println!(
        "Turn latency with hermes-agent 0.19.0, medians of {repeat} (ms from the answering model request)"
    );
    if theirs.is_none() {
        println!("reference: not measured (scripts/bench-turns-reference.sh sets TURN_FLOOR_REFERENCE_PYTHON)");
    }
    println!(
        "{:<20} {:<24} {:>9} {:>9} {:>13} | {:>9} {:>9} {:>10}",
        "scenario", "path", "floor", "final", "canon-hermes", "floor", "final", "reference"
    );
    for scenario in SCENARIOS {
        let name = scenario.name();
        let a = runs_of(Some(ours), name);
        let b = runs_of(theirs, name);
        println!(
            "{:<20} {:<24} {:>9} {:>9} {:>13} | {:>9} {:>9} {:>10}",
            name,
            "model → turn_complete",
            ms(median(a.iter().map(|r| r.hook))),
            ms(median(a.iter().map(|r| r.last_edit))),
            ms(median(a.iter().map(|r| r.complete))),
            ms(median(b.iter().map(|r| r.hook))),
            ms(median(b.iter().map(|r| r.last_edit))),
            ms(median(b.iter().map(|r| r.complete))),
        );
        if scenario.streams() {
            println!(
                "{:<20} {:<24} {:>9} {:>9} {:>13} | {:>9} {:>9} {:>10}",
                "",
                "model → first text",
                ms(median(a.iter().map(|r| r.first_call))),
                "",
                ms(median(a.iter().map(|r| r.first_text))),
                ms(median(b.iter().map(|r| r.first_call))),
                "",
                ms(median(b.iter().map(|r| r.first_text))),
            );
        }
    }
    println!();
    println!(
        "What each runtime adds to Hermes' own call: the Canon write minus Hermes' call, per run \
         (median, and the largest of the {repeat} runs; ms)"
    );
    println!(
        "{:<20} {:<36} {:>8} {:>8} | {:>8} {:>8}",
        "scenario", "path", "ours", "max", "ref", "max"
    );
    let added = |runs: &[Run], late: Figure, early: Figure| {
        let differences: Vec<Option<u64>> = runs
            .iter()
            .map(|r| late(r).zip(early(r)).map(|(l, e)| l.saturating_sub(e)))
            .collect();
        let max = differences.iter().flatten().max().map(|us| us_ms(*us));
        (median(differences.into_iter()), max)
    };
    for scenario in SCENARIOS {
        let name = scenario.name();
        let a = runs_of(Some(ours), name);
        let b = runs_of(theirs, name);
        let mut paths: Vec<(&str, Figure, Figure)> =
            vec![("hook → turn_complete stored", |r| r.complete, |r| r.hook)];
        if scenario.streams() {
            paths.push((
                "first stream call → first text",
                |r| r.first_text,
                |r| r.first_call,
            ));
        }
        for (i, (path, late, early)) in paths.into_iter().enumerate() {
            let (a_med, a_max) = added(&a, late, early);
            let (b_med, b_max) = added(&b, late, early);
            println!(
                "{:<20} {:<36} {:>8} {:>8} | {:>8} {:>8}",
                if i == 0 { name } else { "" },
                path,
                ms(a_med),
                ms(a_max),
                ms(b_med),
                ms(b_max)
            );
        }
    }
    println!();
    println!(
        "Hermes' own first-text path (medians, ms): the agent thread hands the first text to the \
         stream consumer, which sends it at its next poll of its queue (every 50 ms, so this part \
         alone moves by up to 50 ms from run to run)"
    );
    println!(
        "{:<20} {:>14} {:>14} {:>8} | {:>14} {:>14} {:>8}",
        "scenario",
        "model → delta",
        "delta → call",
        "p25–p75",
        "model → delta",
        "delta → call",
        "p25–p75"
    );
    let hermes_path = |runs: &[Run]| {
        let to_delta = median(runs.iter().map(|r| r.first_delta));
        let polls: Vec<Option<u64>> = runs
            .iter()
            .map(|r| {
                r.first_call
                    .zip(r.first_delta)
                    .map(|(c, d)| c.saturating_sub(d))
            })
            .collect();
        let (p25, p75) = quartiles(runs.iter().map(|r| r.first_call));
        (
            to_delta,
            median(polls.into_iter()),
            format!("{}–{}", ms(p25), ms(p75)),
        )
    };
    for scenario in SCENARIOS.into_iter().filter(|s| s.streams()) {
        let name = scenario.name();
        let (a_delta, a_poll, a_spread) = hermes_path(&runs_of(Some(ours), name));
        let (b_delta, b_poll, b_spread) = hermes_path(&runs_of(theirs, name));
        println!(
            "{:<20} {:>14} {:>14} {:>8} | {:>14} {:>14} {:>8}",
            name,
            ms(a_delta),
            ms(a_poll),
            a_spread,
            ms(b_delta),
            ms(b_poll),
            b_spread
        );
    }
    println!("(p25–p75: the spread of Hermes' first stream call over the runs)");
    println!();
    println!(
        "Hermes waiting for the adapter's answer to each send and edit (its stream consumer awaits them)"
    );
    println!(
        "{:<20} {:>8} {:>10} {:>10} | {:>8} {:>10} {:>10}",
        "scenario", "calls", "median ms", "sum ms", "calls", "median ms", "sum ms"
    );
    let waits = |runs: &[Run]| {
        let calls = runs.iter().map(|r| r.answers_us.len()).sum::<usize>() / runs.len().max(1);
        let per_call = median(
            runs.iter()
                .flat_map(|r| r.answers_us.iter().map(|u| Some(*u))),
        );
        let per_turn = median(runs.iter().map(|r| Some(r.answers_us.iter().sum::<u64>())));
        (calls, per_call, per_turn)
    };
    for scenario in SCENARIOS {
        let name = scenario.name();
        let (a_calls, a_call, a_turn) = waits(&runs_of(Some(ours), name));
        let (b_calls, b_call, b_turn) = waits(&runs_of(theirs, name));
        println!(
            "{:<20} {:>8} {:>10} {:>10} | {:>8} {:>10} {:>10}",
            name,
            a_calls,
            ms(a_call),
            ms(a_turn),
            b_calls,
            ms(b_call),
            ms(b_turn)
        );
    }
    let counts = |runs: &BTreeMap<&'static str, Vec<Run>>| {
        let all = runs.values().flatten();
        let (turns, completes, closed) = all.fold((0, 0, 0), |(t, c, k), r| {
            (t + r.turns, c + r.turn_completes, k + r.closed)
        });
        format!(
            "{turns} messages sent, {completes} turn_complete messages stored, {closed} Canon turns closed"
        )
    };
    println!();
    println!(
        "floor = Hermes' own call into the adapter: its processing-complete hook (turn_complete), \
         its first stream call (first text); final = Hermes' last send or edit of the turn"
    );
    println!("canon-hermes: {}", counts(ours));
    if let Some(theirs) = theirs {
        println!("reference:    {}", counts(theirs));
    }
}
