//! The inbox journal's text format: `<CANON_HOME>/inbox-<scope>.jsonl`, an append-only file of
//! JSON lines, each ended by `\n`. This module only reads and writes the text; the file itself
//! (lock, append, `fdatasync`, atomic compaction) is the caller's (canon-adapter's `inbox.rs`).
//!
//! Layout:
//!
//! * first line, the header: `{"canonInbox":1,"scope":"<scope key>"}`;
//! * `{"handled":"<Canon message id>","at":<Unix ms>}`: the message was handed to Hermes;
//! * `{"cursor":"<stream event id>"}`: every frame up to this id is settled;
//! * `{"open":"<Hermes session key>","conversation":"<Canon conversation id>",
//!   "messages":["<Canon message id>",…]}`: a turn of that session started for those messages;
//! * `{"closed":"<Hermes session key>"}`: that session's turn ended;
//! * `{"turn":"<Canon turn id>","conversation":"<Canon conversation id>","openedAt":<Unix ms>}`:
//!   Canon was told the turn is open;
//! * `{"turnClosed":"<Canon turn id>"}`: Canon was told the turn closed.
//!
//! Why a journal and not SQLite: the state is a cursor and a few bounded sets (ids and open turns), each
//! change is one short line, and an append plus `fdatasync` is the whole write — no C library in
//! the build, and the file stays readable with `cat`. Crash rules ([`parse`]): a last line
//! without its `\n` is a write a crash cut short; it is dropped (the caller truncates the file
//! back to the last complete line) because its record was never acknowledged to anyone. Any
//! other line that is not a valid record, or a header of another version or scope, fails closed
//! with its line number. A journal past [`COMPACT_LINES`] lines is rewritten as [`snapshot`].

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::tracker::{HandledSet, OpenTurns, Record, RuntimeTurns, MAX_HANDLED, MAX_TURN_MESSAGES};

/// The journal format version in the header.
pub const FORMAT_VERSION: u64 = 1;

/// Lines after which the journal is rewritten to its live state.
pub const COMPACT_LINES: usize = 4 * MAX_HANDLED;

/// A journal larger than this is not one we wrote (compaction keeps it near 1 MiB).
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The longest id a record may carry (Canon message ids are at most 200 characters; stream ids
/// are short).
pub const MAX_ID_BYTES: usize = 1024;

/// The scope key of a journal: one agent on one Canon origin (a stream cursor means nothing to
/// another agent or server). The first 16 bytes of SHA-256 over `origin`, a newline and
/// `agent_id`, in lowercase hex.
pub fn scope_key(origin: &str, agent_id: &str) -> String {
    let digest = Sha256::digest(format!("{origin}\n{agent_id}").as_bytes());
    let mut key = String::with_capacity(32);
    for byte in &digest[..16] {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

/// What a journal held when it was opened.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// The safe cursor, if one was written.
    pub cursor: Option<String>,
    /// The handled ids, oldest first.
    pub handled: HandledSet,
    /// The turns that opened and did not close.
    pub open_turns: OpenTurns,
    /// The Canon turns whose closing state was never published.
    pub runtime_turns: RuntimeTurns,
    /// A last line cut short by a crash was dropped.
    pub torn_tail: bool,
}

impl Loaded {
    /// The state after `record`.
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Handled { message_id, at_ms } => {
                self.handled.insert(message_id, *at_ms);
            }
            Record::Cursor(cursor) => self.cursor = Some(cursor.clone()),
            Record::TurnOpened {
                session_key,
                conversation_id,
                message_ids,
            } => self
                .open_turns
                .open(session_key, conversation_id, message_ids),
            Record::TurnClosed { session_key } => {
                self.open_turns.close(session_key);
            }
            Record::RuntimeTurnOpened {
                turn_id,
                conversation_id,
                opened_at_ms,
            } => self
                .runtime_turns
                .open(turn_id, conversation_id, *opened_at_ms),
            Record::RuntimeTurnClosed { turn_id } => {
                self.runtime_turns.close(turn_id);
            }
        }
    }
}

/// The header line of a journal of `scope`, `\n` included.
pub fn header_line(scope: &str) -> String {
    let mut line = json!({"canonInbox": FORMAT_VERSION, "scope": scope}).to_string();
    line.push('\n');
    line
}

/// Whether `id` is an id [`parse`] accepts: not empty, at most [`MAX_ID_BYTES`] bytes.
fn readable_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_BYTES
}

/// `record` in the form [`parse`] reads back, or `None` when no such form exists. A writer
/// journals only what this returns, so the journal it writes never holds a line its own reader
/// refuses (which would fail every later start closed): an open turn keeps its first
/// [`MAX_TURN_MESSAGES`] readable message ids (the same cut the in-memory state makes), and a
/// record whose own key (a message, session, conversation or turn id, or the cursor) is empty
/// or longer than [`MAX_ID_BYTES`] has no journal form. Such ids never come from Canon; losing
/// one record of them costs at most one repeated delivery after a restart.
pub fn journalable(record: &Record) -> Option<Record> {
    let keep = match record {
        Record::Handled { message_id, .. } => readable_id(message_id),
        Record::Cursor(cursor) => readable_id(cursor),
        Record::TurnOpened {
            session_key,
            conversation_id,
            message_ids,
        } => {
            if !readable_id(session_key) || !readable_id(conversation_id) {
                return None;
            }
            return Some(Record::TurnOpened {
                session_key: session_key.clone(),
                conversation_id: conversation_id.clone(),
                message_ids: message_ids
                    .iter()
                    .filter(|id| readable_id(id))
                    .take(MAX_TURN_MESSAGES)
                    .cloned()
                    .collect(),
            });
        }
        Record::TurnClosed { session_key } => readable_id(session_key),
        Record::RuntimeTurnOpened {
            turn_id,
            conversation_id,
            ..
        } => readable_id(turn_id) && readable_id(conversation_id),
        Record::RuntimeTurnClosed { turn_id } => readable_id(turn_id),
    };
    keep.then(|| record.clone())
}

/// One record's line, `\n` included. Only a [`journalable`] record's line reads back.
pub fn record_line(record: &Record) -> String {
    let mut line = match record {
        Record::Handled { message_id, at_ms } => json!({"handled": message_id, "at": at_ms}),
        Record::Cursor(cursor) => json!({"cursor": cursor}),
        Record::TurnOpened {
            session_key,
            conversation_id,
            message_ids,
        } => json!({"open": session_key, "conversation": conversation_id, "messages": message_ids}),
        Record::TurnClosed { session_key } => json!({"closed": session_key}),
        Record::RuntimeTurnOpened {
            turn_id,
            conversation_id,
            opened_at_ms,
        } => json!({"turn": turn_id, "conversation": conversation_id, "openedAt": opened_at_ms}),
        Record::RuntimeTurnClosed { turn_id } => json!({"turnClosed": turn_id}),
    }
    .to_string();
    line.push('\n');
    line
}

/// A parsed journal: its state, its complete lines and how many bytes they span.
#[derive(Debug)]
pub struct Parsed {
    /// The state the records build.
    pub state: Loaded,
    /// Complete lines, the header included.
    pub lines: usize,
    /// The bytes those lines span (a shorter file than the input had a torn last line).
    pub complete_bytes: usize,
}

/// Parses a journal's bytes for `scope`; the error is (1-based line, reason).
pub fn parse(bytes: &[u8], scope: &str) -> Result<Parsed, (usize, String)> {
    let complete_bytes = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let mut state = Loaded::default();
    let mut lines = 0;
    for (index, piece) in bytes[..complete_bytes]
        .split_inclusive(|b| *b == b'\n')
        .enumerate()
    {
        let number = index + 1;
        let raw = &piece[..piece.len() - 1];
        let text = std::str::from_utf8(raw).map_err(|_| (number, "not UTF-8".to_owned()))?;
        let value: Value =
            serde_json::from_str(text).map_err(|e| (number, format!("not a JSON record ({e})")))?;
        let Value::Object(map) = value else {
            return Err((number, "not a JSON object".to_owned()));
        };
        if index == 0 {
            check_header(&map, scope).map_err(|reason| (number, reason))?;
        } else {
            state.apply(&parse_record(&map).map_err(|reason| (number, reason))?);
        }
        lines += 1;
    }
    Ok(Parsed {
        state,
        lines,
        complete_bytes,
    })
}

fn check_header(map: &Map<String, Value>, scope: &str) -> Result<(), String> {
    match map.get("canonInbox") {
        Some(Value::Number(n)) if n.as_u64() == Some(FORMAT_VERSION) => {}
        Some(Value::Number(n)) => {
            return Err(format!(
                "format version {n}, this canon-hermes reads version {FORMAT_VERSION}"
            ))
        }
        _ => return Err("the first line is not an inbox header".to_owned()),
    }
    match map.get("scope").and_then(Value::as_str) {
        Some(found) if found == scope && map.len() == 2 => Ok(()),
        Some(found) if found != scope => Err(format!(
            "the header names scope {found}, the file name scope {scope}"
        )),
        _ => Err("the header has unexpected fields".to_owned()),
    }
}

fn parse_id(value: Option<&Value>, what: &str) -> Result<String, String> {
    match value {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_ID_BYTES => Ok(id.clone()),
        Some(Value::String(id)) if id.is_empty() => Err(format!("an empty {what}")),
        Some(Value::String(_)) => Err(format!("a {what} longer than {MAX_ID_BYTES} bytes")),
        _ => Err(format!("a {what} that is not a string")),
    }
}

fn parse_record(map: &Map<String, Value>) -> Result<Record, String> {
    if let Some(id) = map.get("handled") {
        let message_id = parse_id(Some(id), "message id")?;
        let at_ms = map
            .get("at")
            .and_then(Value::as_u64)
            .ok_or_else(|| "a handled record without a time".to_owned())?;
        if map.len() != 2 {
            return Err("a handled record with unexpected fields".to_owned());
        }
        return Ok(Record::Handled { message_id, at_ms });
    }
    if let Some(cursor) = map.get("cursor") {
        let cursor = parse_id(Some(cursor), "cursor")?;
        if map.len() != 1 {
            return Err("a cursor record with unexpected fields".to_owned());
        }
        return Ok(Record::Cursor(cursor));
    }
    if let Some(session) = map.get("open") {
        let session_key = parse_id(Some(session), "session key")?;
        let conversation_id = parse_id(map.get("conversation"), "conversation id")?;
        let Some(Value::Array(ids)) = map.get("messages") else {
            return Err("an open-turn record without its messages".to_owned());
        };
        if ids.len() > MAX_TURN_MESSAGES || map.len() != 3 {
            return Err("an open-turn record with unexpected fields or messages".to_owned());
        }
        let message_ids = ids
            .iter()
            .map(|id| parse_id(Some(id), "message id"))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Record::TurnOpened {
            session_key,
            conversation_id,
            message_ids,
        });
    }
    if let Some(session) = map.get("closed") {
        let session_key = parse_id(Some(session), "session key")?;
        if map.len() != 1 {
            return Err("a closed-turn record with unexpected fields".to_owned());
        }
        return Ok(Record::TurnClosed { session_key });
    }
    if let Some(turn) = map.get("turn") {
        let turn_id = parse_id(Some(turn), "turn id")?;
        let conversation_id = parse_id(map.get("conversation"), "conversation id")?;
        let opened_at_ms = map
            .get("openedAt")
            .and_then(Value::as_u64)
            .ok_or_else(|| "a Canon turn record without its opening time".to_owned())?;
        if map.len() != 3 {
            return Err("a Canon turn record with unexpected fields".to_owned());
        }
        return Ok(Record::RuntimeTurnOpened {
            turn_id,
            conversation_id,
            opened_at_ms,
        });
    }
    if let Some(turn) = map.get("turnClosed") {
        let turn_id = parse_id(Some(turn), "turn id")?;
        if map.len() != 1 {
            return Err("a closed Canon turn record with unexpected fields".to_owned());
        }
        return Ok(Record::RuntimeTurnClosed { turn_id });
    }
    Err("an unknown record".to_owned())
}

/// The text of a compacted journal: the header, the kept handled ids (oldest first), the open
/// turns, the open Canon turns and the cursor.
/// Only [`journalable`] forms are written, whatever records built `state`.
pub fn snapshot(scope: &str, state: &Loaded) -> String {
    let mut text = header_line(scope);
    let mut push = |record: Record| {
        if let Some(record) = journalable(&record) {
            text.push_str(&record_line(&record));
        }
    };
    for (message_id, at_ms) in state.handled.iter() {
        push(Record::Handled {
            message_id: message_id.to_owned(),
            at_ms,
        });
    }
    for turn in state.open_turns.iter() {
        push(Record::TurnOpened {
            session_key: turn.session_key.clone(),
            conversation_id: turn.conversation_id.clone(),
            message_ids: turn.message_ids.clone(),
        });
    }
    for turn in state.runtime_turns.iter() {
        push(Record::RuntimeTurnOpened {
            turn_id: turn.turn_id.clone(),
            conversation_id: turn.conversation_id.clone(),
            opened_at_ms: turn.opened_at_ms,
        });
    }
    if let Some(cursor) = &state.cursor {
        push(Record::Cursor(cursor.clone()));
    }
    text
}
