//! Durable card waits (durable-endpoint.md §10): the correlation of every interactive card the
//! agent asks for, kept across restarts so that a card answered after the tool stopped waiting
//! is resumed by `check_card` or by a receipt wake, once, instead of being lost or re-asked.
//!
//! One JSON document per authenticated agent and API origin,
//! `<CANON_HOME>/card-waits-<scope>.json` (the scope rule of durable-endpoint.md §10.1), under
//! the same lock and atomic-write discipline as the approvals registry (`durable.rs`). The
//! reference keeps this table in SQLite; a JSON document of bounded size, written the way the
//! approvals registry is, needs no C library, shares the registry's tested crash discipline and
//! holds at most [`MAX_ROWS`] small rows. A document that does not load fails closed.
//!
//! [`CardWaits`] is the pure model (time and lease tokens are parameters); [`CardWaitStore`]
//! runs each operation as one locked read-modify-write.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::durable::{DurableError, DurableFile};
use crate::error::LoadFailure;

/// Create lease (durable-endpoint.md §10.4).
pub const CREATE_LEASE_MS: u64 = 300_000;
/// Consume lease (durable-endpoint.md §10.4).
pub const CONSUME_LEASE_MS: u64 = 120_000;
/// Wake lease (durable-endpoint.md §10.8 step 2).
pub const WAKE_LEASE_MS: u64 = 300_000;
/// Added to a tool wait's budget for `wait_until` (durable-endpoint.md §10.4 `begin_wait`).
pub const WAIT_GRACE_MS: u64 = 2_000;
/// Rows `check_card` without an id lists (durable-endpoint.md §10.6).
pub const MAX_LISTED: usize = 20;
/// Due wakes one scan re-runs (durable-endpoint.md §10.8 step 8).
pub const MAX_DUE_WAKES: usize = 20;
/// Rows kept at most (our number); beyond it the oldest settled rows go first, and an active
/// row is never dropped for room.
pub const MAX_ROWS: usize = 2_048;
/// How long a settled row is kept after its card expired (our number): `check_card` keeps
/// answering "already claimed" for a week.
pub const SETTLED_RETENTION_MS: u64 = 7 * 24 * 3_600_000;

/// durable-endpoint.md §10.7, exact.
pub const PENDING_NOTE: &str = "The existing card is still awaiting its designated human. Use check_card with this cardId to resume; do not issue another card or substitute verbal permission. Pending is not approval. Continue independent work while waiting.";
/// durable-endpoint.md §10.7, exact.
pub const CLAIMED_NOTE: &str = "No new authorization is available; the response was previously claimed or is unavailable. Reconcile whether the earlier action finished before retrying; do not repeat a write based on this result.";
/// durable-endpoint.md §10.4 `reserve`, exact.
pub const OTHER_CARD: &str = "cardId already belongs to a different card or responder";
/// durable-endpoint.md §10.4 `created`, exact.
pub const OTHER_RESPONDER: &str = "Canon returned a responder different from the requested human";
/// durable-endpoint.md §10.4 `created`, exact.
pub const OTHER_CARD_ID: &str = "Canon returned a different cardId; original correlation preserved";
/// durable-endpoint.md §10.6, exact.
pub const UNKNOWN_CARD: &str =
    "Unknown cardId in this conversation; do not create a replacement without resolving the original request";
/// durable-endpoint.md §10.6, exact.
pub const OTHER_CARD_RESPONDER: &str = "This card belongs to a different Canon responder";
/// durable-endpoint.md §10.6, exact.
pub const ANSWERED_BY_OTHER: &str =
    "Canon card was answered by a different or unauthenticated human";
/// durable-endpoint.md §10.1, exact.
pub const NO_SCOPE: &str = "Card recovery requires an authenticated agent and API origin";

/// Where a card wait stands (durable-endpoint.md §10.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CardStatus {
    /// Reserved, the create not confirmed.
    Creating,
    /// Created, awaiting the human.
    Pending,
    /// A consume holds the lease.
    Consuming,
    /// A `submitted` answer was handed out once.
    Consumed,
    /// Canon said it timed out.
    Timeout,
    /// Canon said it was cancelled.
    Cancelled,
    /// Lost or unavailable.
    Unknown,
}

impl CardStatus {
    /// Still waiting for something.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            CardStatus::Creating | CardStatus::Pending | CardStatus::Consuming
        )
    }

    fn reported(self) -> &'static str {
        match self {
            CardStatus::Creating | CardStatus::Pending | CardStatus::Consuming => "pending",
            CardStatus::Consumed => "consumed",
            CardStatus::Timeout => "timeout",
            CardStatus::Cancelled => "cancelled",
            CardStatus::Unknown => "unknown",
        }
    }
}

/// The receipt wake of a card (durable-endpoint.md §10.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WakeState {
    /// A receipt arrived; no wake handed to Hermes yet.
    Pending,
    /// A wake was handed over under a lease.
    Enqueued,
}

/// One card wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CardWait {
    /// The conversation.
    pub conversation_id: String,
    /// The caller's card id, or `hermes-card-<32 hex>`.
    pub card_id: String,
    /// [`fingerprint`] of the card and responder.
    pub fingerprint: String,
    /// The designated human.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_user_id: Option<String>,
    /// The card's lifetime end, epoch ms (Canon's echo once created).
    pub expires_at: u64,
    /// Where it stands.
    pub status: CardStatus,
    /// The create or consume lease token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// Its expiry, epoch ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until_ms: Option<u64>,
    /// A tool is waiting on this card until then, epoch ms (0: none).
    #[serde(default)]
    pub wait_until_ms: u64,
    /// The receipt wake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_status: Option<WakeState>,
    /// The wake lease token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_lease: Option<String>,
    /// Its expiry, epoch ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_until_ms: Option<u64>,
    /// When it was reserved, epoch ms.
    pub created_at_ms: u64,
}

impl CardWait {
    fn lease_live(&self, now_ms: u64) -> bool {
        self.lease.is_some() && self.lease_until_ms.is_some_and(|until| until > now_ms)
    }

    /// `pending`, or `creating`/`consuming` whose lease ran out: a consume (or a wake) may
    /// take it.
    fn claimable(&self, now_ms: u64) -> bool {
        match self.status {
            CardStatus::Pending => true,
            CardStatus::Creating | CardStatus::Consuming => !self.lease_live(now_ms),
            _ => false,
        }
    }

    /// The wake is `pending`, or an `enqueued` one whose lease ran out.
    fn wake_due(&self, now_ms: u64) -> bool {
        match self.wake_status {
            Some(WakeState::Pending) => true,
            Some(WakeState::Enqueued) => self.wake_until_ms.is_none_or(|until| until <= now_ms),
            None => false,
        }
    }

    /// The result object of durable-endpoint.md §10.7: `creating` and `consuming` report as
    /// `pending`; `pending`, `unknown` and `consumed` carry their note.
    pub fn result(&self) -> Value {
        let status = self.status.reported();
        let mut out = Map::new();
        out.insert("status".into(), status.into());
        out.insert("conversationId".into(), self.conversation_id.clone().into());
        out.insert("cardId".into(), self.card_id.clone().into());
        out.insert("expiresAt".into(), self.expires_at.into());
        if let Some(responder) = &self.response_user_id {
            out.insert("responseUserId".into(), responder.clone().into());
        }
        match status {
            "pending" => {
                out.insert("note".into(), PENDING_NOTE.into());
            }
            "unknown" | "consumed" => {
                out.insert("note".into(), CLAIMED_NOTE.into());
            }
            _ => {}
        }
        Value::Object(out)
    }
}

/// Python `json.dumps` of a string with ASCII escaping, as the scope and fingerprint need.
fn push_py_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python `json.dumps(value, sort_keys=True, separators=(",", ":"))` (ASCII escaping on).
fn push_py_sorted(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => push_py_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_py_sorted(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_py_string(out, key);
                out.push(':');
                push_py_sorted(out, &map[key]);
            }
            out.push('}');
        }
    }
}

fn sha256_hex(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(64);
    crate::ids::push_hex(&mut out, &digest);
    out
}

/// The store scope (durable-endpoint.md §10.1): SHA-256 of Python's
/// `json.dumps([base_url_without_trailing_slash, agent_id])` with its default separators.
pub fn scope(base_url: &str, agent_id: &str) -> Result<String, &'static str> {
    let base = base_url.trim().trim_end_matches('/');
    let agent = agent_id.trim();
    if base.is_empty() || agent.is_empty() {
        return Err(NO_SCOPE);
    }
    let mut text = String::from("[");
    push_py_string(&mut text, base);
    text.push_str(", ");
    push_py_string(&mut text, agent);
    text.push(']');
    Ok(sha256_hex(&text))
}

/// The fingerprint of a card and its designated human (durable-endpoint.md §10.3).
pub fn fingerprint(card: &Value, responder: Option<&str>) -> String {
    let mut text = String::from("[");
    push_py_sorted(&mut text, card);
    text.push(',');
    match responder {
        Some(r) => push_py_string(&mut text, r),
        None => text.push_str("null"),
    }
    text.push(']');
    sha256_hex(&text)
}

/// What [`CardWaits::reserve`] found or made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// A row for this card already exists (active or settled): no create.
    Existing(CardWait),
    /// A new `creating` row: create the card on Canon now.
    New(CardWait),
}

/// The card waits of one scope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CardWaits {
    rows: Vec<CardWait>,
}

/// The document: `{"cardWaits": [rows]}`.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document {
    card_waits: Vec<CardWait>,
}

/// A new reservation's inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCardWait<'a> {
    /// The conversation.
    pub conversation_id: &'a str,
    /// The caller's card id, if any.
    pub card_id: Option<&'a str>,
    /// The card.
    pub card: &'a Value,
    /// The designated human.
    pub responder: Option<&'a str>,
    /// The requested lifetime end, epoch ms.
    pub expires_at: u64,
}

impl CardWaits {
    /// The rows, oldest reservation first.
    pub fn rows(&self) -> &[CardWait] {
        &self.rows
    }

    fn find_mut(&mut self, conversation: &str, card: &str) -> Option<&mut CardWait> {
        self.rows
            .iter_mut()
            .find(|r| r.conversation_id == conversation && r.card_id == card)
    }

    /// The row of `card` in `conversation`.
    pub fn get(&self, conversation: &str, card: &str) -> Option<&CardWait> {
        self.rows
            .iter()
            .find(|r| r.conversation_id == conversation && r.card_id == card)
    }

    /// `reserve` (durable-endpoint.md §10.4): with a card id, that row; without, the newest
    /// active row of the conversation with the same fingerprint; else a new `creating` row
    /// named `new_id` under `lease`.
    pub fn reserve(
        &mut self,
        new: &NewCardWait<'_>,
        new_id: &str,
        lease: &str,
        now_ms: u64,
    ) -> Result<Reserved, &'static str> {
        let print = fingerprint(new.card, new.responder);
        let found = match new.card_id {
            Some(id) => self.get(new.conversation_id, id),
            None => self
                .rows
                .iter()
                .filter(|r| {
                    r.conversation_id == new.conversation_id
                        && r.status.is_active()
                        && r.fingerprint == print
                })
                .max_by_key(|r| r.created_at_ms),
        };
        if let Some(row) = found {
            if row.fingerprint != print {
                return Err(OTHER_CARD);
            }
            return Ok(Reserved::Existing(row.clone()));
        }
        let row = CardWait {
            conversation_id: new.conversation_id.to_owned(),
            card_id: new.card_id.unwrap_or(new_id).to_owned(),
            fingerprint: print,
            response_user_id: new.responder.map(str::to_owned),
            expires_at: new.expires_at,
            status: CardStatus::Creating,
            lease: Some(lease.to_owned()),
            lease_until_ms: Some(now_ms.saturating_add(CREATE_LEASE_MS)),
            wait_until_ms: 0,
            wake_status: None,
            wake_lease: None,
            wake_until_ms: None,
            created_at_ms: now_ms,
        };
        self.rows.push(row.clone());
        Ok(Reserved::New(row))
    }

    /// `created` (durable-endpoint.md §10.4): the echoes are checked, then `creating` →
    /// `pending` with Canon's expiry.
    pub fn created(
        &mut self,
        conversation: &str,
        card: &str,
        echoed_responder: Option<&str>,
        echoed_card_id: Option<&str>,
        echoed_expires_at: Option<u64>,
    ) -> Result<CardWait, &'static str> {
        let row = self.find_mut(conversation, card).ok_or(UNKNOWN_CARD)?;
        let requested = row.response_user_id.clone();
        let responder = echoed_responder
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_owned)
            .or_else(|| requested.clone());
        if requested.is_some() && responder != requested {
            return Err(OTHER_RESPONDER);
        }
        if echoed_card_id.is_some_and(|id| id != row.card_id) {
            return Err(OTHER_CARD_ID);
        }
        if row.status == CardStatus::Creating {
            row.status = CardStatus::Pending;
            row.lease = None;
            row.lease_until_ms = None;
        }
        row.response_user_id = responder;
        if let Some(expires) = echoed_expires_at {
            row.expires_at = expires;
        }
        Ok(row.clone())
    }

    /// `creation_rejected`: the row goes only while still `creating` under `lease`.
    pub fn creation_rejected(&mut self, conversation: &str, card: &str, lease: &str) {
        self.rows.retain(|r| {
            !(r.conversation_id == conversation
                && r.card_id == card
                && r.status == CardStatus::Creating
                && r.lease.as_deref() == Some(lease))
        });
    }

    /// `claim`: `pending` (or `creating`/`consuming` whose lease ran out) → `consuming` under
    /// `lease`; `None` when another holds it or the row is settled or missing.
    pub fn claim(
        &mut self,
        conversation: &str,
        card: &str,
        lease: &str,
        now_ms: u64,
    ) -> Option<CardWait> {
        let row = self.find_mut(conversation, card)?;
        if !row.claimable(now_ms) {
            return None;
        }
        row.status = CardStatus::Consuming;
        row.lease = Some(lease.to_owned());
        row.lease_until_ms = Some(now_ms.saturating_add(CONSUME_LEASE_MS));
        Some(row.clone())
    }

    /// `finish` under the matching lease: `submitted` → `consumed`; `pending`, `timeout`,
    /// `cancelled`, `unknown` kept; anything else → `unknown`. `None` when the lease was lost.
    pub fn finish(
        &mut self,
        conversation: &str,
        card: &str,
        lease: &str,
        status: &str,
    ) -> Option<CardWait> {
        let row = self.find_mut(conversation, card)?;
        if row.lease.as_deref() != Some(lease) {
            return None;
        }
        row.status = match status {
            "submitted" => CardStatus::Consumed,
            "pending" => CardStatus::Pending,
            "timeout" => CardStatus::Timeout,
            "cancelled" => CardStatus::Cancelled,
            _ => CardStatus::Unknown,
        };
        row.lease = None;
        row.lease_until_ms = None;
        if !row.status.is_active() {
            row.wake_status = None;
            row.wake_lease = None;
            row.wake_until_ms = None;
        }
        Some(row.clone())
    }

    /// `begin_wait`: a tool waits on the card for `budget_ms` (receipt wakes hold off).
    pub fn begin_wait(&mut self, conversation: &str, card: &str, budget_ms: u64, now_ms: u64) {
        if let Some(row) = self.find_mut(conversation, card) {
            let until = now_ms
                .saturating_add(budget_ms)
                .saturating_add(WAIT_GRACE_MS);
            row.wait_until_ms = row.wait_until_ms.max(until);
        }
    }

    /// `end_wait`: the tool stopped waiting (its budget or an answer), so a receipt may wake.
    pub fn end_wait(&mut self, conversation: &str, card: &str) {
        if let Some(row) = self.find_mut(conversation, card) {
            row.wait_until_ms = 0;
        }
    }

    /// `record_receipt` (durable-endpoint.md §10.8 step 1): an active row's wake becomes
    /// `pending` unless one is already set. `None`: not ours, or settled.
    pub fn record_receipt(&mut self, conversation: &str, card: &str) -> Option<CardWait> {
        let row = self.find_mut(conversation, card)?;
        if !row.status.is_active() {
            return None;
        }
        if row.wake_status.is_none() {
            row.wake_status = Some(WakeState::Pending);
        }
        Some(row.clone())
    }

    /// `claim_wake` (durable-endpoint.md §10.8 step 2): no tool waiting, the row claimable,
    /// its wake `pending` or an `enqueued` one whose lease ran out.
    pub fn claim_wake(
        &mut self,
        conversation: &str,
        card: &str,
        lease: &str,
        now_ms: u64,
    ) -> Option<CardWait> {
        let row = self.find_mut(conversation, card)?;
        if row.wait_until_ms > now_ms || !row.claimable(now_ms) || !row.wake_due(now_ms) {
            return None;
        }
        row.wake_status = Some(WakeState::Enqueued);
        row.wake_lease = Some(lease.to_owned());
        row.wake_until_ms = Some(now_ms.saturating_add(WAKE_LEASE_MS));
        Some(row.clone())
    }

    /// A wake could not be handed to Hermes (durable-endpoint.md §10.8 step 7): back to
    /// `pending`, when the lease is still this one.
    pub fn release_wake(&mut self, conversation: &str, card: &str, lease: &str) {
        if let Some(row) = self.find_mut(conversation, card) {
            if row.wake_lease.as_deref() == Some(lease) {
                row.wake_status = Some(WakeState::Pending);
                row.wake_lease = None;
                row.wake_until_ms = None;
            }
        }
    }

    /// The wakes a scan re-runs (durable-endpoint.md §10.8 step 8): active rows with a wake
    /// that can be claimed now, earliest expiry first, at most [`MAX_DUE_WAKES`].
    pub fn due_wakes(&self, now_ms: u64) -> Vec<(String, String)> {
        let mut due: Vec<&CardWait> = self
            .rows
            .iter()
            .filter(|r| r.status.is_active() && r.wait_until_ms <= now_ms && r.wake_due(now_ms))
            .collect();
        due.sort_by_key(|r| r.expires_at);
        due.into_iter()
            .take(MAX_DUE_WAKES)
            .map(|r| (r.conversation_id.clone(), r.card_id.clone()))
            .collect()
    }

    /// The active rows of a conversation for `user` (all users with `None`), newest expiry
    /// first, at most [`MAX_LISTED`] (durable-endpoint.md §10.6 without a card id).
    pub fn listed(&self, conversation: &str, user: Option<&str>) -> Vec<CardWait> {
        let mut rows: Vec<&CardWait> = self
            .rows
            .iter()
            .filter(|r| r.conversation_id == conversation && r.status.is_active())
            .filter(|r| user.is_none() || r.response_user_id.as_deref() == user)
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.expires_at));
        rows.into_iter().take(MAX_LISTED).cloned().collect()
    }

    /// Drops settled rows past their retention, then the oldest settled rows beyond
    /// [`MAX_ROWS`].
    pub fn prune(&mut self, now_ms: u64) {
        self.rows.retain(|r| {
            r.status.is_active() || r.expires_at.saturating_add(SETTLED_RETENTION_MS) > now_ms
        });
        while self.rows.len() > MAX_ROWS {
            let Some(oldest) = self
                .rows
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.status.is_active())
                .min_by_key(|(_, r)| r.created_at_ms)
                .map(|(i, _)| i)
            else {
                break;
            };
            self.rows.remove(oldest);
        }
    }

    /// Reads a document; anything but the exact shape is an error (fail closed).
    pub fn from_json(value: Value) -> Result<Self, String> {
        let doc: Document = serde_json::from_value(value).map_err(|e| e.to_string())?;
        let mut seen = std::collections::HashSet::new();
        for row in &doc.card_waits {
            if row.conversation_id.is_empty() || row.card_id.is_empty() {
                return Err("a row without a conversation or card id".to_owned());
            }
            if !seen.insert((row.conversation_id.as_str(), row.card_id.as_str())) {
                return Err(format!("card {} appears twice", row.card_id));
            }
        }
        Ok(CardWaits {
            rows: doc.card_waits,
        })
    }

    /// The document.
    pub fn to_json(&self) -> Value {
        json!({"cardWaits": self.rows})
    }
}

/// What can stop a card-wait operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CardWaitError {
    /// The document does not load; it was left untouched.
    #[error("Canon card-wait store is unreadable: {}", path.display())]
    Unreadable {
        /// The document.
        path: PathBuf,
        /// Why.
        #[source]
        source: LoadFailure,
    },
    /// The document is JSON of the wrong shape; it was left untouched.
    #[error("Canon card-wait store {} is invalid: {reason}", path.display())]
    Invalid {
        /// The document.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The lock could not be taken, or the write failed.
    #[error("Canon card-wait store {}: {what}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// What failed.
        what: String,
        /// The cause.
        #[source]
        source: Option<std::io::Error>,
    },
}

impl From<DurableError> for CardWaitError {
    fn from(error: DurableError) -> Self {
        match error {
            DurableError::Unreadable { path, source } => CardWaitError::Unreadable { path, source },
            DurableError::CreateHome { path, source } => CardWaitError::Io {
                path,
                what: "could not create the canon home".into(),
                source: Some(source),
            },
            DurableError::Lock { path, source } => CardWaitError::Io {
                path,
                what: "could not lock".into(),
                source: Some(source),
            },
            DurableError::LockTimeout { path, waited } => CardWaitError::Io {
                path,
                what: format!("timed out after {waited:?} waiting for the lock"),
                source: None,
            },
            DurableError::Write {
                path,
                stage,
                source,
            } => CardWaitError::Io {
                path,
                what: format!("could not write ({stage})"),
                source: Some(source),
            },
            DurableError::Random { source } => CardWaitError::Io {
                path: PathBuf::new(),
                what: "could not draw random bytes".into(),
                source: Some(source),
            },
        }
    }
}

/// The card waits of one scope in a Canon home.
#[derive(Debug, Clone)]
pub struct CardWaitStore {
    file: DurableFile,
}

impl CardWaitStore {
    /// The store of `scope` ([`scope`]) under `home`.
    pub fn new(home: &Path, scope: &str) -> Self {
        CardWaitStore {
            file: DurableFile {
                home: home.to_path_buf(),
                path: home.join(format!("card-waits-{scope}.json")),
                lock_path: home.join(format!(".card-waits-{scope}.lock")),
                temp_prefix: format!(".card-waits-{scope}.json."),
                lock_timeout: Some(Duration::from_secs(30)),
            },
        }
    }

    /// The document's path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    fn load(&self) -> Result<CardWaits, CardWaitError> {
        match self.file.read_json()? {
            None => Ok(CardWaits::default()),
            Some(value) => CardWaits::from_json(value).map_err(|reason| CardWaitError::Invalid {
                path: self.file.path.clone(),
                reason,
            }),
        }
    }

    /// A read under the lock.
    pub fn read<T>(&self, f: impl FnOnce(&CardWaits) -> T) -> Result<T, CardWaitError> {
        let _guard = self.file.lock()?;
        Ok(f(&self.load()?))
    }

    /// Lock → load → mutate → prune → atomic write.
    pub fn mutate<T>(
        &self,
        now_ms: u64,
        f: impl FnOnce(&mut CardWaits) -> T,
    ) -> Result<T, CardWaitError> {
        let _guard = self.file.lock()?;
        let mut waits = self.load()?;
        let out = f(&mut waits);
        waits.prune(now_ms);
        self.file.remove_stale_temp_files();
        let mut bytes = serde_json::to_vec_pretty(&waits.to_json()).unwrap_or_default();
        bytes.push(b'\n');
        self.file.write_bytes(&bytes)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
