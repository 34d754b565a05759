//! The bridge's state machine (coms-bridge.md §6): one [`Bridge`] holds every question's state;
//! the daemon turns what arrives (an envelope line, a finished `hermes send`, a scan of the
//! questions directory, a due deadline) into one [`Input`], calls [`Bridge::handle`] and performs
//! the returned [`Effect`]s in order. All state changes go through the table of
//! `core::state` (coms-bridge.md §6.14), so:
//!
//! - a prompt is acked before its qid is checked and before `hermes send` runs;
//! - at most one response envelope is sent per qid: an answer, a timeout, or an error, never
//!   two (coms-bridge.md §6.3 DEVIATION: a `hermes send` failure observed after a cancel or
//!   timeout is logged but not answered);
//! - a rejected answer file is deleted before its `answer_rejected` record is written, because
//!   consumers read that line as "the path is free again";
//! - the daemon reads only the answer files of pending qids ([`content_needed`]): every other
//!   entry is decided by its name, so its bytes are never needed;
//! - dot-prefixed names are never touched, `invalid_json` files wait out the partial-write grace
//!   (max(2 × poll, 1 s)), and `foreign_qid` files wait `foreign_grace_ms`, since every bridge
//!   of the user shares the directory (coms-bridge.md §15, open questions 1 and 2).
//!
//! Time is `now_ms`; nothing here reads a clock or does I/O.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{json, Value};

use crate::core::answer::{
    content_needed, map_answer, qid_of_file_name, validate_answer_file, Reason,
};
use crate::core::log::LogRecord;
use crate::core::outcome::{cancel_note, late_note, timeout_outcome};
use crate::core::question::{format_question, parse_payload, qid_of, QuestionOption, QID_ERROR};
use crate::core::state::{transition, ClosedSet, Event, State};
use crate::wire::envelope::{
    classify, response_envelope, AgentCard, Incoming, Reply, BRIDGE_ACCEPTS,
};
use crate::wire::ids::is_ulid;
use crate::wire::iso;

/// The bridge's `purpose` in its registry entry and agent card.
pub const PURPOSE: &str = "Remote human via Hermes/Telegram";
/// The bridge's `model`.
pub const MODEL: &str = "hermes-bridge";
/// The bridge's `color`.
pub const COLOR: &str = "#38BDF8";
/// The least partial-write grace, in milliseconds.
pub const MIN_JSON_GRACE_MS: u64 = 1000;

/// What the bridge is configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeConfig {
    /// The resolved peer name.
    pub name: String,
    /// The coms project, shown in every question.
    pub project: String,
    /// The `hermes send --to` target.
    pub target: String,
    /// The per-question timeout.
    pub timeout_ms: u64,
    /// The answer poll interval.
    pub poll_ms: u64,
    /// How long a foreign answer file is left alone.
    pub foreign_grace_ms: u64,
    /// Our session ULID.
    pub session_id: String,
    /// Our socket path.
    pub endpoint: String,
    /// The Herdr pane we run in, for the agent card.
    pub pane_id: Option<String>,
}

/// One entry of the questions directory, as the daemon found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The file name.
    pub name: String,
    /// What the daemon made of it.
    pub content: Content,
}

/// What the daemon made of one entry of the questions directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// The bytes of a regular file whose content the bridge needs ([`content_needed`]).
    Read(Vec<u8>),
    /// A regular file left unread because its name alone decides what happens to it.
    Unread,
    /// An entry to leave alone, neither deleted nor logged: it vanished, is not a regular file
    /// (a directory, a FIFO, a socket, a device, a symbolic link), is too large, or could not be
    /// read.
    Skipped,
}

/// What reaches the bridge.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// One parsed envelope line.
    Line(Value),
    /// A `hermes send` run finished: `Err` holds the failure message.
    HermesDone {
        /// The job of [`Effect::RunHermes`].
        job: u64,
        /// The outcome.
        result: Result<(), String>,
    },
    /// A deadline may be due ([`Bridge::next_deadline`]).
    Tick,
    /// One scan of the questions directory.
    Scan(Vec<DirEntry>),
}

/// Why a response envelope is sent, for the stderr diagnostic when it cannot be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The mapped answer.
    Answer,
    /// An error (bad qid, failed `hermes send`).
    Error,
    /// The timeout error.
    Timeout,
}

impl Purpose {
    /// `answer`, `error` or `timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Answer => "answer",
            Purpose::Error => "error",
            Purpose::Timeout => "timeout",
        }
    }
}

/// What the daemon must do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Write this reply line on the connection the line came from, then close it.
    Reply(Reply),
    /// Run `hermes [--profile P] send --to <target> <text>`; report with [`Input::HermesDone`].
    RunHermes {
        /// Identifies the run.
        job: u64,
        /// The message.
        text: String,
    },
    /// Send this response envelope to `endpoint`.
    Respond {
        /// The asker's socket.
        endpoint: String,
        /// The qid (or the invalid `msg_id`).
        qid: String,
        /// Why.
        purpose: Purpose,
        /// The envelope.
        envelope: Value,
    },
    /// Append this record to the log.
    Log(LogRecord),
    /// Delete this file of the questions directory.
    Delete {
        /// The file name.
        file: String,
    },
}

#[derive(Debug, Clone)]
struct Open {
    state: State,
    options: Vec<QuestionOption>,
    endpoint: String,
    deadline_ms: u64,
    generation: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotePhase {
    Cancel,
    Timeout,
    Late,
}

impl NotePhase {
    fn as_str(self) -> &'static str {
        match self {
            NotePhase::Cancel => "cancel_note",
            NotePhase::Timeout => "timeout_note",
            NotePhase::Late => "late_note",
        }
    }
}

#[derive(Debug, Clone)]
enum Job {
    Question { qid: String, generation: u64 },
    Note { qid: String, phase: NotePhase },
}

/// Every question's state and the answer files' grace clocks.
#[derive(Debug)]
pub struct Bridge {
    config: BridgeConfig,
    open: BTreeMap<String, Open>,
    closed: ClosedSet,
    jobs: HashMap<u64, Job>,
    next_job: u64,
    next_generation: u64,
    json_first_seen: HashMap<String, u64>,
    foreign_first_seen: HashMap<String, u64>,
}

impl Bridge {
    /// A bridge with no questions.
    pub fn new(config: BridgeConfig) -> Self {
        Bridge {
            config,
            open: BTreeMap::new(),
            closed: ClosedSet::default(),
            jobs: HashMap::new(),
            next_job: 1,
            next_generation: 1,
            json_first_seen: HashMap::new(),
            foreign_first_seen: HashMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &BridgeConfig {
        &self.config
    }

    /// How many questions are pending or delivered.
    pub fn queue_depth(&self) -> usize {
        self.open.len()
    }

    /// The state of `qid`, open or closed.
    pub fn state_of(&self, qid: &str) -> Option<State> {
        self.open
            .get(qid)
            .map(|o| o.state)
            .or_else(|| self.closed.get(qid))
    }

    /// The qids waiting for an answer: the daemon reads the answer files of these, and only
    /// these ([`content_needed`]), at its next scan of the questions directory.
    pub fn awaited_qids(&self) -> BTreeSet<String> {
        self.open.keys().cloned().collect()
    }

    /// The earliest question deadline; hand the bridge an [`Input::Tick`] then.
    pub fn next_deadline(&self) -> Option<u64> {
        self.open.values().map(|o| o.deadline_ms).min()
    }

    /// The grace an `invalid_json` file gets: max(2 × poll interval, 1 s).
    pub fn json_grace_ms(&self) -> u64 {
        (2 * self.config.poll_ms).max(MIN_JSON_GRACE_MS)
    }

    /// The agent card a pong carries.
    pub fn agent_card(&self) -> AgentCard {
        AgentCard {
            name: self.config.name.clone(),
            purpose: PURPOSE.into(),
            model: MODEL.into(),
            color: COLOR.into(),
            context_used_pct: 0,
            queue_depth: self.queue_depth(),
            pane_id: self.config.pane_id.clone(),
            status: Some("idle".into()),
        }
    }

    /// Handles one input and returns the effects to perform, in order.
    pub fn handle(&mut self, input: Input, now_ms: u64) -> Vec<Effect> {
        let mut effects = Vec::new();
        match input {
            Input::Line(value) => self.on_line(&value, now_ms, &mut effects),
            Input::HermesDone { job, result } => {
                self.on_hermes_done(job, result, now_ms, &mut effects)
            }
            Input::Tick => self.on_tick(now_ms, &mut effects),
            Input::Scan(entries) => self.on_scan(entries, now_ms, &mut effects),
        }
        effects
    }

    fn on_line(&mut self, value: &Value, now_ms: u64, effects: &mut Vec<Effect>) {
        match classify(value) {
            Incoming::Prompt(prompt) => {
                effects.push(Effect::Reply(Reply::Ack {
                    msg_id: prompt.msg_id.clone(),
                }));
                let Ok(qid) = qid_of(&prompt.msg_id).map(str::to_owned) else {
                    let envelope =
                        self.response(&prompt.msg_id, now_ms, Value::Null, Some(QID_ERROR));
                    effects.push(Effect::Respond {
                        endpoint: prompt.sender_endpoint,
                        qid: prompt.msg_id,
                        purpose: Purpose::Error,
                        envelope,
                    });
                    return;
                };
                let question = parse_payload(
                    &prompt.prompt,
                    prompt.sender_name.as_deref(),
                    prompt.sender_cwd.as_deref(),
                );
                // A duplicate delivery replaces the waiting question (its timer with it); a qid
                // that was closed is opened again and answerable (coms-bridge.md §15, open
                // question 6).
                self.open.remove(&qid);
                self.closed.remove(&qid);
                let state = self.step(None, Event::QuestionReceived);
                let from = match &prompt.sender_name {
                    Some(name) => json!({"from": name}),
                    None => json!({}),
                };
                effects.push(self.log(now_ms, &qid, Event::QuestionReceived, from));
                let generation = self.next_generation;
                self.next_generation += 1;
                self.open.insert(
                    qid.clone(),
                    Open {
                        state: state.unwrap_or(State::Pending),
                        options: question.options.clone(),
                        endpoint: prompt.sender_endpoint,
                        deadline_ms: now_ms.saturating_add(self.config.timeout_ms),
                        generation,
                    },
                );
                let text = format_question(&qid, &self.config.project, &question);
                effects.push(self.run(Job::Question { qid, generation }, text));
            }
            Incoming::Cancel(cancel) => {
                effects.push(Effect::Reply(Reply::Ack {
                    msg_id: cancel.msg_id.clone(),
                }));
                let qid = cancel.ref_msg_id;
                if !is_ulid(&qid) {
                    return;
                }
                let Some(open) = self.open.remove(&qid) else {
                    return;
                };
                self.close(&qid, open.state, Event::Cancelled);
                effects.push(self.log(
                    now_ms,
                    &qid,
                    Event::Cancelled,
                    json!({"reason": "cancel envelope"}),
                ));
                let note = cancel_note(&qid);
                effects.push(self.run(
                    Job::Note {
                        qid,
                        phase: NotePhase::Cancel,
                    },
                    note,
                ));
            }
            Incoming::Ping { msg_id } => effects.push(Effect::Reply(Reply::Pong {
                msg_id,
                agent_card: self.agent_card(),
            })),
            Incoming::Other { msg_id } => effects.push(Effect::Reply(Reply::Nack {
                msg_id,
                error: BRIDGE_ACCEPTS.into(),
            })),
        }
    }

    fn on_hermes_done(
        &mut self,
        job: u64,
        result: Result<(), String>,
        now_ms: u64,
        effects: &mut Vec<Effect>,
    ) {
        match (self.jobs.remove(&job), result) {
            (None, _) | (Some(Job::Note { .. }), Ok(())) => {}
            (Some(Job::Note { qid, phase }), Err(error)) => {
                let detail = json!({"phase": phase.as_str(), "error": error});
                effects.push(self.log(now_ms, &qid, Event::DeliveryError, detail));
            }
            (Some(Job::Question { qid, generation }), Ok(())) => {
                let current = self.open.get(&qid).filter(|o| o.generation == generation);
                if current.is_some_and(|o| o.state == State::Pending) {
                    let state = self.step(Some(State::Pending), Event::Delivered);
                    if let Some(open) = self.open.get_mut(&qid) {
                        open.state = state.unwrap_or(State::Delivered);
                    }
                    let detail = json!({"to": self.config.target});
                    effects.push(self.log(now_ms, &qid, Event::Delivered, detail));
                }
            }
            (Some(Job::Question { qid, generation }), Err(error)) => {
                effects.push(self.log(now_ms, &qid, Event::DeliveryError, json!({"error": error})));
                let current = self
                    .open
                    .get(&qid)
                    .is_some_and(|o| o.generation == generation);
                if let Some(open) = current.then(|| self.open.remove(&qid)).flatten() {
                    self.step(Some(open.state), Event::DeliveryError);
                    let envelope = self.response(&qid, now_ms, Value::Null, Some(&error));
                    effects.push(Effect::Respond {
                        endpoint: open.endpoint,
                        qid,
                        purpose: Purpose::Error,
                        envelope,
                    });
                }
            }
        }
    }

    fn on_tick(&mut self, now_ms: u64, effects: &mut Vec<Effect>) {
        let mut due: Vec<(u64, String)> = self
            .open
            .iter()
            .filter(|(_, o)| o.deadline_ms <= now_ms)
            .map(|(q, o)| (o.deadline_ms, q.clone()))
            .collect();
        due.sort();
        for (_, qid) in due {
            let Some(open) = self.open.remove(&qid) else {
                continue;
            };
            self.close(&qid, open.state, Event::Timeout);
            let ms = self.config.timeout_ms;
            effects.push(self.log(now_ms, &qid, Event::Timeout, json!({"timeout_ms": ms})));
            let outcome = timeout_outcome(&qid, ms);
            effects.push(self.run(
                Job::Note {
                    qid: qid.clone(),
                    phase: NotePhase::Timeout,
                },
                outcome.telegram_note,
            ));
            let envelope = self.response(&qid, now_ms, Value::Null, Some(&outcome.error));
            effects.push(Effect::Respond {
                endpoint: open.endpoint,
                qid,
                purpose: Purpose::Timeout,
                envelope,
            });
        }
    }

    fn on_scan(&mut self, mut entries: Vec<DirEntry>, now_ms: u64, effects: &mut Vec<Effect>) {
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let present: BTreeSet<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        self.json_first_seen
            .retain(|name, _| present.contains(name.as_str()));
        self.foreign_first_seen
            .retain(|name, _| present.contains(name.as_str()));
        for entry in &entries {
            let name = entry.name.as_str();
            // Hermes' file tool writes through `.hermes-tmp.*` in the same directory.
            if name.starts_with('.') {
                continue;
            }
            let content = match &entry.content {
                Content::Read(bytes) => Some(bytes.as_slice()),
                Content::Unread => None,
                Content::Skipped => continue,
            };
            if let Some(qid) = qid_of_file_name(name) {
                if let Some(state) = self.closed.get(qid) {
                    self.forget(name);
                    self.step(Some(state), Event::LateAnswer);
                    effects.push(Effect::Delete { file: name.into() });
                    effects.push(self.log(
                        now_ms,
                        qid,
                        Event::LateAnswer,
                        json!({"state": state.as_str()}),
                    ));
                    let job = Job::Note {
                        qid: qid.to_owned(),
                        phase: NotePhase::Late,
                    };
                    effects.push(self.run(job, late_note(qid)));
                    continue;
                }
            }
            // A file left unread because its qid was not pending when the daemon scanned is
            // read at the next scan; any other unread file fails validation before its bytes
            // matter.
            let is_pending = |q: &str| self.open.contains_key(q);
            if content.is_none() && content_needed(name, is_pending) {
                continue;
            }
            let content = content.unwrap_or_default();
            match validate_answer_file(name, content, is_pending) {
                Ok(answer) => {
                    self.forget(name);
                    let Some(open) = self.open.remove(&answer.qid) else {
                        continue;
                    };
                    self.close(&answer.qid, open.state, Event::Answered);
                    effects.push(Effect::Delete { file: name.into() });
                    let detail = json!({"answered_by": answer.answered_by});
                    effects.push(self.log(now_ms, &answer.qid, Event::Answered, detail));
                    let response = map_answer(&answer.answer, &open.options).to_value();
                    let envelope = self.response(&answer.qid, now_ms, response, None);
                    effects.push(Effect::Respond {
                        endpoint: open.endpoint,
                        qid: answer.qid,
                        purpose: Purpose::Answer,
                        envelope,
                    });
                }
                Err(rejection) => {
                    let wait = match rejection.reason {
                        Reason::InvalidJson => {
                            Some((self.json_grace_ms(), &mut self.json_first_seen))
                        }
                        Reason::ForeignQid => {
                            Some((self.config.foreign_grace_ms, &mut self.foreign_first_seen))
                        }
                        _ => None,
                    };
                    if let Some((grace, first_seen)) = wait {
                        let first = *first_seen.entry(name.to_owned()).or_insert(now_ms);
                        if now_ms.saturating_sub(first) < grace {
                            continue;
                        }
                    }
                    self.forget(name);
                    let stem = name
                        .strip_suffix(crate::core::answer::ANSWER_SUFFIX)
                        .unwrap_or(name);
                    let qid = rejection.qid.as_deref().unwrap_or(stem);
                    effects.push(Effect::Delete { file: name.into() });
                    effects.push(Effect::Log(LogRecord::rejected(
                        now_ms,
                        qid,
                        rejection.reason.as_str(),
                        name,
                    )));
                }
            }
        }
    }

    fn forget(&mut self, name: &str) {
        self.json_first_seen.remove(name);
        self.foreign_first_seen.remove(name);
    }

    /// Applies the state table; an impossible step is a bug, reported and survived.
    fn step(&self, from: Option<State>, event: Event) -> Option<State> {
        match transition(from, event) {
            Ok(to) => to,
            Err(error) => {
                debug_assert!(false, "{error}: {from:?} + {event:?}");
                tracing::error!(?from, ?event, "unsupported state transition");
                from
            }
        }
    }

    fn close(&mut self, qid: &str, from: State, event: Event) {
        if let Some(state) = self.step(Some(from), event) {
            self.closed.insert(qid, state);
        }
    }

    fn log(&self, now_ms: u64, qid: &str, event: Event, detail: Value) -> Effect {
        Effect::Log(LogRecord::event(now_ms, qid, event, detail))
    }

    fn run(&mut self, job: Job, text: String) -> Effect {
        let id = self.next_job;
        self.next_job += 1;
        self.jobs.insert(id, job);
        Effect::RunHermes { job: id, text }
    }

    fn response(&self, msg_id: &str, now_ms: u64, response: Value, error: Option<&str>) -> Value {
        response_envelope(
            &self.config.session_id,
            &self.config.endpoint,
            msg_id,
            &iso::format_ms(now_ms),
            response,
            error,
        )
    }
}

#[cfg(test)]
mod tests;
