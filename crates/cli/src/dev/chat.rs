//! The terminal chat of `dev`: the person at the keyboard is the Canon human who owns the
//! simulator's direct conversation with the agent. A typed line becomes a human message in the
//! embedded simulator; what the agent writes back to Canon is read from the simulator's state
//! and drawn as it arrives: turn states and tool activity as dim lines, the live bubble growing
//! in place, the durable `turn_complete` marked, and the questions the agent asks (exec
//! approvals, clarify questions, card requests) answered by typing.

use std::collections::HashSet;
use std::io::Write as _;
use std::time::Instant;

use canon_sim::control::Injection;
use canon_sim::state::Response;
use canon_sim::{SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use console::style;
use serde_json::Value;

use super::render::{self, Answer, LiveChange, LiveText, Question};

/// What a typed line asks the chat loop to do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LineOutcome {
    /// Keep chatting.
    Continue,
    /// The person asked to leave (`/quit`).
    Quit,
}

/// An interaction Canon holds for the conversation, as the chat reads it.
struct Asked {
    kind: String,
    id: String,
    request: Value,
    state: String,
    /// Canon's `interactive` (absent counts as interactive).
    interactive: bool,
}

/// A question shown and waiting for the typed answer.
#[derive(Debug)]
struct Pending {
    kind: String,
    id: String,
    question: Question,
}

/// What is on the screen and what of Canon's state has been drawn.
pub(crate) struct Chat<'a> {
    sim: &'a SimHandle,
    live: LiveText,
    /// The live bubble's line is open (no newline after it yet).
    live_open: bool,
    live_turn: Option<String>,
    seen_blocks: HashSet<String>,
    seen_messages: HashSet<String>,
    seen_interactions: HashSet<(String, String)>,
    finished_turns: HashSet<String>,
    /// The texts the bubble showed in this turn, one per segment (a tool call starts a new one).
    segments: Vec<String>,
    pending: Option<Pending>,
    last_state: Option<String>,
    /// Messages sent whose turn has not closed yet (the prompt comes back at zero).
    outstanding: usize,
    /// Whether stdout is a terminal (the prompt line can then be erased and drawn again).
    terminal: bool,
    parts: usize,
    sent_at: Option<Instant>,
    prompt_shown: bool,
}

/// The lines printed when the chat opens and on `/help`.
pub(crate) const HELP: [&str; 4] = [
    "Type a message and press Enter; you are the owner of a direct Canon conversation with Hermes.",
    "With the scripted model try: hello · run a tool · delete the demo files (asks for your approval) · ask me something · show me a card · choose an option",
    "While the agent asks a question, your next line answers it.",
    "/help shows this, /quit or Ctrl-D leaves, Ctrl-C stops everything.",
];

impl<'a> Chat<'a> {
    /// A chat over `sim`'s default direct conversation; what Canon holds already counts as seen.
    pub(crate) fn new(sim: &'a SimHandle) -> Chat<'a> {
        let seen_messages = sim.read_state(|s| {
            s.messages
                .iter()
                .filter_map(|m| m.message.get("id").and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        });
        Chat {
            sim,
            live: LiveText::default(),
            live_open: false,
            live_turn: None,
            seen_blocks: HashSet::new(),
            seen_messages,
            seen_interactions: HashSet::new(),
            finished_turns: HashSet::new(),
            segments: Vec::new(),
            pending: None,
            last_state: None,
            outstanding: 0,
            terminal: std::io::IsTerminal::is_terminal(&std::io::stdout()),
            parts: 0,
            sent_at: None,
            prompt_shown: false,
        }
    }

    /// Shows the prompt that fits: the open question's, else `you › ` when no turn runs.
    pub(crate) fn show_prompt(&mut self) {
        if self.prompt_shown {
            return;
        }
        let prompt = match &self.pending {
            Some(pending) => style(pending.question.prompt()).yellow().bold().to_string(),
            None if self.outstanding == 0 => style("you › ").cyan().bold().to_string(),
            None => return,
        };
        self.close_live();
        write_out(&prompt);
        self.prompt_shown = true;
    }

    /// Handles one typed line.
    pub(crate) fn on_line(&mut self, line: &str) -> LineOutcome {
        // The terminal echoed the line and its newline, so the prompt line is done.
        self.prompt_shown = false;
        if let Some(pending) = &self.pending {
            match pending.question.answer(line) {
                Ok(answer) => {
                    let shown = match &answer {
                        Answer::Decision(d) => (*d).to_owned(),
                        Answer::Value(v) => v.clone(),
                        Answer::Action(a) => a.clone(),
                    };
                    match self.respond(pending, answer) {
                        Ok(()) => {
                            say(&style(format!("  → {shown}")).dim().to_string());
                            self.pending = None;
                        }
                        Err(why) => say(&style(format!("  ✗ {why}")).red().to_string()),
                    }
                }
                Err(why) => say(&style(format!("  {why}")).yellow().to_string()),
            }
            self.show_prompt();
            return LineOutcome::Continue;
        }
        let text = line.trim();
        match text {
            "" => {}
            "/quit" | "/exit" => return LineOutcome::Quit,
            "/help" => {
                for line in HELP {
                    say(&style(line).dim().to_string());
                }
            }
            _ => {
                let injection = Injection {
                    conversation_id: Some(DEFAULT_CONVERSATION.to_owned()),
                    text: Some(text.to_owned()),
                    ..Injection::default()
                };
                match self.sim.inject_message(&injection) {
                    Ok(_) => {
                        self.outstanding += 1;
                        self.sent_at = Some(Instant::now());
                    }
                    Err(e) => say(&style(format!("  ✗ Canon refused the message: {e}"))
                        .red()
                        .to_string()),
                }
            }
        }
        self.show_prompt();
        LineOutcome::Continue
    }

    fn respond(&self, pending: &Pending, answer: Answer) -> Result<(), String> {
        let mut response = Response {
            conversation_id: DEFAULT_CONVERSATION.to_owned(),
            kind: pending.kind.clone(),
            id: pending.id.clone(),
            ..Response::default()
        };
        match answer {
            Answer::Decision(d) => response.decision = Some(d.to_owned()),
            Answer::Value(v) => response.value = Some(v),
            Answer::Action(a) => response.action_id = Some(a),
        }
        self.sim
            .respond_interaction(&response)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Draws whatever changed in Canon since the last call.
    pub(crate) fn poll(&mut self) {
        let snapshot = self.sim.read_state(|s| {
            let node = s
                .streaming
                .get(DEFAULT_CONVERSATION)
                .map(|n| Value::Object(n.fields.clone()));
            let turn = s
                .turn_states
                .get(&(DEFAULT_AGENT.to_owned(), DEFAULT_CONVERSATION.to_owned()))
                .cloned();
            let messages: Vec<Value> = s
                .messages
                .iter()
                .filter(|m| m.conversation_id == DEFAULT_CONVERSATION)
                .map(|m| m.message.clone())
                .filter(|m| {
                    m.get("id")
                        .and_then(Value::as_str)
                        .is_some_and(|id| !self.seen_messages.contains(id))
                })
                .collect();
            let questions: Vec<Asked> = s
                .interactions
                .values()
                .filter(|i| i.conversation_id == DEFAULT_CONVERSATION)
                .map(|i| Asked {
                    kind: i.kind.clone(),
                    id: i.id.clone(),
                    request: i.request.clone(),
                    state: i.state.clone(),
                    interactive: i.interactive != Some(false),
                })
                .collect();
            (node, turn, messages, questions)
        });
        let (node, turn, messages, questions) = snapshot;
        if let Some(turn) = turn {
            self.turn_state(&turn);
        }
        if let Some(node) = node {
            self.live_node(&node);
        }
        for message in messages {
            self.message(&message);
        }
        self.questions(questions);
        self.show_prompt();
    }

    fn turn_state(&mut self, turn: &Value) {
        let state = turn.get("state").and_then(Value::as_str).unwrap_or("");
        if self.last_state.as_deref() == Some(state) {
            return;
        }
        self.last_state = Some(state.to_owned());
        let line = match state {
            "thinking" => Some("· thinking"),
            "tool" => Some("· using a tool"),
            "waiting_input" => Some("· waiting for your answer"),
            "interrupted" => Some("· the turn was interrupted"),
            _ => None,
        };
        if let Some(line) = line {
            self.print_line(&style(format!("  {line}")).dim().to_string());
        }
        if matches!(state, "completed" | "interrupted") && self.pending.is_none() {
            // A turn may close without a final (the agent chose not to reply, or failed);
            // the prompt comes back either way once every message's turn closed.
            self.close_live();
            self.outstanding = 0;
        }
    }

    fn live_node(&mut self, node: &Value) {
        let turn = node
            .get("turnId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if turn
            .as_ref()
            .is_some_and(|t| self.finished_turns.contains(t))
        {
            // The bubble of a turn whose final is shown already (Canon clears it a moment later).
            return;
        }
        if turn.is_some() && turn != self.live_turn {
            self.live_turn = turn;
            self.close_live();
            self.live.reset();
        }
        for block in node
            .get("blocks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !self.seen_blocks.insert(render::activity_key(block)) {
                continue;
            }
            if let Some(line) = render::activity_line(block) {
                self.print_line(&style(format!("  {line}")).dim().to_string());
            } else if let Some(speech) = render::finished_speech(block) {
                // Speech the bubble showed too briefly to be seen between two looks (the words
                // before a tool call, replaced by the call at once) still gets its line.
                if !self.was_shown(speech) {
                    let line = format!("{}{speech}", style("hermes › ").magenta().bold());
                    self.print_line(&line);
                    self.segments.push(speech.to_owned());
                }
            }
        }
        let text = node.get("text").and_then(Value::as_str).unwrap_or("");
        match self.live.update(text) {
            LiveChange::None => {}
            LiveChange::Append(suffix) => self.live_text(&suffix),
            LiveChange::Restart(all) => {
                self.close_live();
                self.live_text(&all);
            }
        }
        if self.segments.last().map(String::as_str) != Some(self.live.shown()) {
            let shown = self.live.shown().to_owned();
            match self.segments.last_mut() {
                // The same segment, grown.
                Some(last) if shown.starts_with(last.as_str()) && !last.is_empty() => *last = shown,
                _ => self.segments.push(shown),
            }
        }
    }

    /// Whether `text` is on screen already, in the live bubble or an earlier segment of it.
    fn was_shown(&self, text: &str) -> bool {
        self.live.shown().contains(text) || self.segments.iter().any(|s| s.contains(text))
    }

    fn live_text(&mut self, text: &str) {
        self.clear_prompt();
        if !self.live_open {
            write_out(&style("hermes › ").magenta().bold().to_string());
            self.live_open = true;
        }
        write_out(text);
    }

    fn message(&mut self, message: &Value) {
        if let Some(id) = message.get("id").and_then(Value::as_str) {
            self.seen_messages.insert(id.to_owned());
        }
        if message.get("senderId").and_then(Value::as_str) != Some(DEFAULT_AGENT) {
            return;
        }
        let semantics = message
            .pointer("/metadata/turnSemantics")
            .and_then(Value::as_str)
            .unwrap_or("");
        let text = render::live_display(message.get("text").and_then(Value::as_str).unwrap_or(""));
        let card = message
            .get("card")
            .or_else(|| message.pointer("/metadata/card"))
            .filter(|c| c.is_object());
        if let Some(card) = card {
            self.close_live();
            for line in render::card_lines(card) {
                self.print_line(&line);
            }
        } else if !text.is_empty() && !self.was_shown(text) {
            // Shown already when the live bubble streamed it; otherwise the durable message is
            // the first sight of the text.
            self.close_live();
            self.print_line(&format!("{}{text}", style("hermes › ").magenta().bold()));
        }
        let counted = usize::from(!text.is_empty());
        match semantics {
            "progress" => self.parts += counted,
            "turn_complete" => {
                self.parts += counted;
                if let Some(turn) = message.pointer("/metadata/turnId").and_then(Value::as_str) {
                    self.finished_turns.insert(turn.to_owned());
                }
                self.close_live();
                let mut mark = "  ✓ turn_complete".to_owned();
                if self.parts > 1 {
                    mark.push_str(&format!(" ({} parts)", self.parts));
                }
                if let Some(sent) = self.sent_at.take() {
                    mark.push_str(&format!(" · {:.1} s", sent.elapsed().as_secs_f64()));
                }
                self.print_line(&style(mark).green().to_string());
                self.parts = 0;
                self.segments.clear();
                self.live.reset();
                self.live_turn = None;
                self.outstanding = self.outstanding.saturating_sub(1);
            }
            _ => {}
        }
    }

    fn questions(&mut self, questions: Vec<Asked>) {
        if let Some(pending) = &self.pending {
            let still = questions
                .iter()
                .any(|a| a.kind == pending.kind && a.id == pending.id && a.state == "pending");
            if !still {
                self.pending = None;
                self.print_line(
                    &style("  (the question was closed before you answered)")
                        .dim()
                        .to_string(),
                );
            }
        }
        for Asked {
            kind,
            id,
            request,
            state,
            interactive,
        } in questions
        {
            if !self.seen_interactions.insert((kind.clone(), id.clone())) {
                continue;
            }
            let card = request.get("card").filter(|_| kind == "card");
            let display_only =
                card.is_some_and(|c| !interactive || render::card_actions(c).is_empty());
            if let (Some(card), true) = (card, display_only) {
                // A card shown for reading (send_card): drawn once, nothing to answer.
                self.close_live();
                for line in render::card_lines(card) {
                    self.print_line(&line);
                }
                continue;
            }
            if state != "pending" {
                continue;
            }
            let Some(question) = Question::of(&kind, &request) else {
                continue;
            };
            self.close_live();
            for line in question.lines(&request) {
                self.print_line(&style(line).yellow().to_string());
            }
            if self.pending.is_none() {
                self.pending = Some(Pending { kind, id, question });
            }
        }
    }

    /// Prints a whole line, after closing the live bubble's line and clearing the prompt.
    fn print_line(&mut self, line: &str) {
        self.close_live();
        self.clear_prompt();
        say(line);
    }

    fn close_live(&mut self) {
        if self.live_open {
            write_out("\n");
            self.live_open = false;
        }
    }

    fn clear_prompt(&mut self) {
        if self.prompt_shown {
            if self.terminal {
                // Back to the start of the prompt's line and erase it; it is drawn again after.
                write_out("\r\x1b[2K");
            } else {
                write_out("\n");
            }
            self.prompt_shown = false;
        }
    }
}

/// Writes `text` to stdout and flushes (the live bubble has no newline to flush it).
fn write_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Writes one line to stdout.
pub(crate) fn say(line: &str) {
    write_out(&format!("{line}\n"));
}
