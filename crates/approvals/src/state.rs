//! The detached-approval registry as pure data and transitions (approvals.md §3, §6–§8, §10–§14).
//!
//! Nothing here touches the disk, the clock or a random source: time comes in
//! as `now_ms` (epoch milliseconds) and claim ids as parameters. The file store
//! ([`crate::store`]) wraps every operation below in lock → load → validate →
//! mutate → prune → write.
//!
//! Invariants:
//!
//! * A [`Registry`] only ever holds entries that pass approvals.md §6
//!   validation; every transition keeps them valid, so getters never fail.
//! * Entries are kept as JSON objects, so fields this crate does not know (written
//!   by a newer or older plugin) and the exact numeric values (integers stay
//!   integers, floats stay floats) survive every rewrite (approvals.md §3.3).
//! * Leases are never stolen while live: a lease is live while its expiry is
//!   strictly greater than `now_ms` (approvals.md §8, §10.1, §13).
//! * Only the holder of the matching claim id can finish a create, consume or
//!   wake; a stale finish changes nothing (approvals.md §8.1).
//! * A terminal status (`resolved`, `expired`, `orphaned`) never changes again;
//!   it only disappears through 14-day pruning (approvals.md §7).
//! * `Debug` output never contains the approval summary or creation error: the
//!   question text is treated as secret.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Number, Value};

use crate::ids::{ApprovalId, ClaimId};
use crate::text::{cut_chars, py_repr, py_str, py_strip};

/// Creation lease length (approvals.md §9.2): `createClaimExpiresAt = requestedAt + 300 000`.
pub const CREATE_LEASE_MS: u64 = 300_000;

/// Consume lease length (approvals.md §10.1).
pub const CONSUME_LEASE_MS: u64 = 60_000;

/// Wake lease length (approvals.md §13).
pub const WAKE_LEASE_MS: u64 = 60_000;

/// Local retention of terminal entries, 14 days (approvals.md §7).
pub const RETENTION_MS: u64 = 1_209_600_000;

/// Upper bound of the reconcile retry delay (approvals.md §14.1 e).
pub const MAX_LEASE_RETRY_DELAY_MS: u64 = 60_000;

/// Slack added after the earliest lease expiry (approvals.md §14.1 e).
pub const LEASE_RETRY_SLACK_MS: u64 = 50;

/// Registry `summary` length cap in chars (approvals.md §3.3, §9.1).
pub const SUMMARY_MAX_CHARS: usize = 500;

/// `creationError` length cap in chars (approvals.md §3.3).
pub const CREATION_ERROR_MAX_CHARS: usize = 500;

/// Default `creationError` (approvals.md §8.1).
pub const DEFAULT_CREATION_ERROR: &str = "server rejected creation";

/// The common "re-issue" note suffix (approvals.md §10.1), em dash U+2014.
pub const RE_ISSUE_NOTE: &str =
    "consumed elsewhere, expired, or lost \u{2014} re-issue with a new request if still needed";

/// Error text of the cross-conversation rejection (approvals.md §11).
pub const WRONG_CONVERSATION_MESSAGE: &str =
    "Detached approval belongs to a different Canon conversation";

/// `creationError` when the server echoed no responder (approvals.md §8.1).
pub const RESPONDER_OMITTED_ERROR: &str = "server omitted effective responseUserId";

/// `creationError` when the server echoed another responder (approvals.md §8.1).
pub const RESPONDER_DIFFERENT_ERROR: &str = "server returned a different responseUserId";

/// Error text when activation does not end `pending` (approvals.md §9.4).
pub const NOT_ACTIVATED_SAFELY_MESSAGE: &str =
    "Canon approval creation could not be activated safely";

/// Note of a `pending` result while another worker holds the creation lease (approvals.md §10.1).
pub const CREATION_BUSY_NOTE: &str = "another worker is creating this approval";

/// Note of a `pending` result while another worker holds the consume lease (approvals.md §10.1).
pub const CONSUME_BUSY_NOTE: &str = "another worker is checking this approval";

/// Approval status (approvals.md §3.3, §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Reserved locally, server create not yet confirmed; holds a create lease.
    Creating,
    /// Known to the server, waiting for the human.
    Pending,
    /// A worker holds the consume lease and is asking the server.
    Consuming,
    /// Decided (`allow`/`deny`); terminal.
    Resolved,
    /// The server reported a timeout; terminal.
    Expired,
    /// Creation failed, identity failed or the server forgot the id; terminal.
    Orphaned,
}

impl Status {
    /// The wire/file spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Creating => "creating",
            Status::Pending => "pending",
            Status::Consuming => "consuming",
            Status::Resolved => "resolved",
            Status::Expired => "expired",
            Status::Orphaned => "orphaned",
        }
    }

    /// Parses the file spelling.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "creating" => Status::Creating,
            "pending" => Status::Pending,
            "consuming" => Status::Consuming,
            "resolved" => Status::Resolved,
            "expired" => Status::Expired,
            "orphaned" => Status::Orphaned,
            _ => return None,
        })
    }

    /// `resolved`, `expired` and `orphaned` never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Resolved | Status::Expired | Status::Orphaned)
    }
}

/// A human decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// The human allowed the action.
    Allow,
    /// The human denied the action.
    Deny,
}

impl Decision {
    /// The wire/file spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
        }
    }

    /// Parses the wire/file spelling.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "allow" => Some(Decision::Allow),
            "deny" => Some(Decision::Deny),
            _ => None,
        }
    }
}

/// Wake sub-state of a resolved entry (approvals.md §8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WakeStatus {
    /// A wake turn must be delivered.
    Pending,
    /// A worker holds the wake lease.
    Delivering,
    /// Delivered; never woken again.
    Delivered,
    /// Written by plugin 0.17.x; accepted and treated as
    /// terminal, never written by us (approvals.md Q5).
    Blocked,
}

impl WakeStatus {
    /// The file spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WakeStatus::Pending => "pending",
            WakeStatus::Delivering => "delivering",
            WakeStatus::Delivered => "delivered",
            WakeStatus::Blocked => "blocked",
        }
    }

    /// Parses the file spelling.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "pending" => WakeStatus::Pending,
            "delivering" => WakeStatus::Delivering,
            "delivered" => WakeStatus::Delivered,
            "blocked" => WakeStatus::Blocked,
            _ => return None,
        })
    }
}

/// Which lease made a check answer `pending` (approvals.md §10.1, §11 `leaseKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseKind {
    /// A live create lease.
    Creation,
    /// A live consume lease.
    Consume,
}

impl LeaseKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseKind::Creation => "creation",
            LeaseKind::Consume => "consume",
        }
    }
}

/// Why one registry entry failed validation (approvals.md §6).
///
/// `Display` is the spec's message suffix, e.g. `has an invalid status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EntryProblem {
    /// The value is not a JSON object.
    NotAnObject,
    /// Empty key, or `approvalId` missing or different from the key.
    MismatchedApprovalId,
    /// `conversationId` missing, not a string, or blank.
    NoConversationId,
    /// `status` outside the six-value enum.
    InvalidStatus,
    /// `expiresAt` missing or not a finite number.
    InvalidExpiresAt,
    /// `resolved` without `allow`/`deny`.
    InvalidDecision,
    /// `creating` without a create claim id or expiry.
    InvalidCreateLease,
    /// `createClaimOwner` neither null nor a string.
    InvalidCreateOwner,
    /// `consuming` without a consume claim id or expiry.
    InvalidConsumeLease,
    /// `consumeClaimOwner` neither null nor a string.
    InvalidConsumeOwner,
    /// `wakeStatus` outside the enum.
    InvalidWakeStatus,
    /// `delivering` without a wake claim id or expiry.
    InvalidWakeLease,
    /// `wakeClaimOwner` neither null nor a string.
    InvalidWakeOwner,
    /// An optional field has the wrong type; holds the field name.
    InvalidField(&'static str),
}

impl fmt::Display for EntryProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            EntryProblem::NotAnObject => "is not an object",
            EntryProblem::MismatchedApprovalId => "has a mismatched approvalId",
            EntryProblem::NoConversationId => "has no conversationId",
            EntryProblem::InvalidStatus => "has an invalid status",
            EntryProblem::InvalidExpiresAt => "has an invalid expiresAt",
            EntryProblem::InvalidDecision => "has an invalid decision",
            EntryProblem::InvalidCreateLease => "has an invalid create lease",
            EntryProblem::InvalidCreateOwner => "has an invalid create owner",
            EntryProblem::InvalidConsumeLease => "has an invalid consume lease",
            EntryProblem::InvalidConsumeOwner => "has an invalid consume owner",
            EntryProblem::InvalidWakeStatus => "has an invalid wakeStatus",
            EntryProblem::InvalidWakeLease => "has an invalid wake lease",
            EntryProblem::InvalidWakeOwner => "has an invalid wake owner",
            EntryProblem::InvalidField(field) => return write!(f, "has an invalid {field}"),
        };
        f.write_str(text)
    }
}

/// Why a registry document was rejected (approvals.md §6).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValidationError {
    /// The JSON root is not an object.
    RootNotObject,
    /// One entry is invalid.
    Entry {
        /// The offending key (an approval id, not secret).
        approval_id: String,
        /// What is wrong with it.
        problem: EntryProblem,
    },
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValidationError::RootNotObject => f.write_str("registry root is not an object"),
            ValidationError::Entry {
                approval_id,
                problem,
            } => write!(f, "entry '{approval_id}' {problem}"),
        }
    }
}

impl std::error::Error for ValidationError {}

const OPTIONAL_STRINGS: [&str; 5] = [
    "respondedBy",
    "summary",
    "responseUserId",
    "createdFromClaimId",
    "creationError",
];
const OPTIONAL_NUMBERS: [&str; 5] = [
    "requestedAt",
    "createdAt",
    "creationRecoveredAt",
    "resolvedAt",
    "wakeDeliveredAt",
];
const OPTIONAL_BOOLS: [&str; 2] = ["receiptPending", "reconcilePending"];

fn finite(value: Option<&Value>) -> bool {
    matches!(value, Some(Value::Number(n)) if n.as_f64().is_some_and(f64::is_finite))
}

fn null_or_string(value: Option<&Value>) -> bool {
    matches!(value, None | Some(Value::Null) | Some(Value::String(_)))
}

fn null_or_finite(value: Option<&Value>) -> bool {
    matches!(value, None | Some(Value::Null)) || finite(value)
}

fn non_empty_string(value: Option<&Value>) -> bool {
    matches!(value, Some(Value::String(s)) if !s.is_empty())
}

/// Validates one entry against the approvals.md §6 table.
///
/// Checks run in the Python plugin's order, so a file with several problems
/// reports the same first one. Deliberate differences, all on files no writer
/// produces: `conversationId` and the claim ids must be strings (0.14.1 accepts
/// any truthy value whose `str()` is non-blank), and a `blocked` wake status is
/// accepted (approvals.md Q5).
pub fn validate_entry(key: &str, value: &Value) -> Result<(), EntryProblem> {
    let Value::Object(map) = value else {
        return Err(EntryProblem::NotAnObject);
    };
    if key.is_empty() || map.get("approvalId").and_then(Value::as_str) != Some(key) {
        return Err(EntryProblem::MismatchedApprovalId);
    }
    match map.get("conversationId") {
        Some(Value::String(s)) if !py_strip(s).is_empty() => {}
        _ => return Err(EntryProblem::NoConversationId),
    }
    let status = map
        .get("status")
        .and_then(Value::as_str)
        .and_then(Status::parse)
        .ok_or(EntryProblem::InvalidStatus)?;
    if !finite(map.get("expiresAt")) {
        return Err(EntryProblem::InvalidExpiresAt);
    }
    if status == Status::Resolved
        && map
            .get("decision")
            .and_then(Value::as_str)
            .and_then(Decision::parse)
            .is_none()
    {
        return Err(EntryProblem::InvalidDecision);
    }
    if status == Status::Creating {
        if !non_empty_string(map.get("createClaimId")) || !finite(map.get("createClaimExpiresAt")) {
            return Err(EntryProblem::InvalidCreateLease);
        }
        if !null_or_string(map.get("createClaimOwner")) {
            return Err(EntryProblem::InvalidCreateOwner);
        }
    }
    if status == Status::Consuming {
        if !non_empty_string(map.get("consumeClaimId")) || !finite(map.get("consumeClaimExpiresAt"))
        {
            return Err(EntryProblem::InvalidConsumeLease);
        }
        if !null_or_string(map.get("consumeClaimOwner")) {
            return Err(EntryProblem::InvalidConsumeOwner);
        }
    }
    let wake = match map.get("wakeStatus") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            Some(WakeStatus::parse(s).ok_or(EntryProblem::InvalidWakeStatus)?)
        }
        Some(_) => return Err(EntryProblem::InvalidWakeStatus),
    };
    if wake == Some(WakeStatus::Delivering) {
        if !non_empty_string(map.get("wakeClaimId")) || !finite(map.get("wakeClaimExpiresAt")) {
            return Err(EntryProblem::InvalidWakeLease);
        }
        if !null_or_string(map.get("wakeClaimOwner")) {
            return Err(EntryProblem::InvalidWakeOwner);
        }
    }
    for field in OPTIONAL_STRINGS {
        if !null_or_string(map.get(field)) {
            return Err(EntryProblem::InvalidField(field));
        }
    }
    for field in OPTIONAL_NUMBERS {
        if !null_or_finite(map.get(field)) {
            return Err(EntryProblem::InvalidField(field));
        }
    }
    for field in OPTIONAL_BOOLS {
        if !matches!(
            map.get(field),
            None | Some(Value::Null) | Some(Value::Bool(_))
        ) {
            return Err(EntryProblem::InvalidField(field));
        }
    }
    // Checked last, as the Python plugin does, so the first reported problem matches.
    if !null_or_finite(map.get("receiptSeenAt")) {
        return Err(EntryProblem::InvalidField("receiptSeenAt"));
    }
    Ok(())
}

/// A lease as stored on an entry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lease<'a> {
    /// The claim id (non-empty).
    pub claim_id: &'a str,
    /// Expiry, epoch ms.
    pub expires_at_ms: f64,
    /// Informational owner (process instance id); never used to decide anything.
    pub owner: Option<&'a str>,
}

impl Lease<'_> {
    /// A lease is live while its expiry is strictly in the future.
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.expires_at_ms > now_ms as f64
    }
}

/// One validated registry entry.
///
/// Holds the entry's JSON object verbatim (unknown fields included); the
/// getters read the known fields. Construct through [`Registry`] only.
#[derive(Clone, PartialEq)]
pub struct Entry {
    fields: Map<String, Value>,
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The summary and creation error are deliberately left out (secret).
        f.debug_struct("Entry")
            .field("approval_id", &self.approval_id())
            .field("conversation_id", &self.conversation_id())
            .field("status", &self.status())
            .field("wake_status", &self.wake_status())
            .finish_non_exhaustive()
    }
}

impl Entry {
    fn str_field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).and_then(Value::as_str)
    }

    fn f64_field(&self, name: &str) -> Option<f64> {
        self.fields.get(name).and_then(Value::as_f64)
    }

    fn flag(&self, name: &str) -> bool {
        self.fields.get(name) == Some(&Value::Bool(true))
    }

    fn set(&mut self, name: &str, value: impl Into<Value>) {
        self.fields.insert(name.to_owned(), value.into());
    }

    fn remove(&mut self, names: &[&str]) {
        for name in names {
            self.fields.shift_remove(*name);
        }
    }

    /// The approval id (equals the registry key).
    pub fn approval_id(&self) -> &str {
        self.str_field("approvalId").unwrap_or_default()
    }

    /// The conversation the approval belongs to; the only routing authority.
    pub fn conversation_id(&self) -> &str {
        self.str_field("conversationId").unwrap_or_default()
    }

    /// The status.
    pub fn status(&self) -> Status {
        self.str_field("status")
            .and_then(Status::parse)
            .unwrap_or(Status::Orphaned)
    }

    /// The deadline exactly as stored (integer or float).
    pub fn expires_at(&self) -> &Value {
        self.fields.get("expiresAt").unwrap_or(&Value::Null)
    }

    /// The deadline in epoch ms.
    pub fn expires_at_ms(&self) -> f64 {
        self.f64_field("expiresAt").unwrap_or_default()
    }

    /// The question summary (secret: never log it).
    pub fn summary(&self) -> Option<&str> {
        self.str_field("summary")
    }

    /// The expected responder.
    pub fn response_user_id(&self) -> Option<&str> {
        self.str_field("responseUserId")
    }

    /// The decision of a resolved entry.
    pub fn decision(&self) -> Option<Decision> {
        self.str_field("decision").and_then(Decision::parse)
    }

    /// The authenticated responder of a resolved entry.
    pub fn responded_by(&self) -> Option<&str> {
        self.str_field("respondedBy")
    }

    /// The wake sub-state.
    pub fn wake_status(&self) -> Option<WakeStatus> {
        self.str_field("wakeStatus").and_then(WakeStatus::parse)
    }

    /// `receiptPending` is `true`.
    pub fn receipt_pending(&self) -> bool {
        self.flag("receiptPending")
    }

    /// `reconcilePending` is `true`.
    pub fn reconcile_pending(&self) -> bool {
        self.flag("reconcilePending")
    }

    fn lease(&self, prefix: &str) -> Option<Lease<'_>> {
        Some(Lease {
            claim_id: self.str_field(&format!("{prefix}ClaimId"))?,
            expires_at_ms: self.f64_field(&format!("{prefix}ClaimExpiresAt"))?,
            owner: self.str_field(&format!("{prefix}ClaimOwner")),
        })
    }

    /// The create lease, present while `creating`.
    pub fn create_lease(&self) -> Option<Lease<'_>> {
        (self.status() == Status::Creating)
            .then(|| self.lease("create"))
            .flatten()
    }

    /// The consume lease, present while `consuming`.
    pub fn consume_lease(&self) -> Option<Lease<'_>> {
        (self.status() == Status::Consuming)
            .then(|| self.lease("consume"))
            .flatten()
    }

    /// The wake lease, present while the wake is `delivering`.
    pub fn wake_lease(&self) -> Option<Lease<'_>> {
        (self.wake_status() == Some(WakeStatus::Delivering))
            .then(|| self.lease("wake"))
            .flatten()
    }

    /// The entry's JSON object, unknown fields included.
    pub fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }

    /// The stored value of any field.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.get(name)
    }

    /// The cached result of a terminal entry (approvals.md §10.1, §11); `None` while live.
    pub fn terminal_result(&self) -> Option<CheckResult> {
        let base = CheckResult::new(self.approval_id());
        let base = CheckResult {
            conversation_id: Some(self.conversation_id().to_owned()),
            ..base
        };
        match self.status() {
            Status::Resolved => Some(CheckResult {
                status: CheckStatus::Resolved,
                decision: self.decision(),
                responded_by: self.responded_by().map(str::to_owned),
                ..base
            }),
            Status::Expired => Some(CheckResult {
                status: CheckStatus::Expired,
                note: Some(format!(
                    "approval expired before a decision \u{2014} {RE_ISSUE_NOTE}"
                )),
                ..base
            }),
            Status::Orphaned => Some(CheckResult {
                note: Some(RE_ISSUE_NOTE.to_owned()),
                ..base
            }),
            Status::Creating | Status::Pending | Status::Consuming => None,
        }
    }

    fn clear_lease(&mut self, prefix: &str) {
        self.remove(&[
            &format!("{prefix}ClaimId"),
            &format!("{prefix}ClaimExpiresAt"),
            &format!("{prefix}ClaimOwner"),
        ]);
    }

    fn set_lease(&mut self, prefix: &str, claim: &ClaimId, owner: &ClaimId, expires_at_ms: u64) {
        self.set(&format!("{prefix}ClaimId"), claim.as_str());
        self.set(&format!("{prefix}ClaimExpiresAt"), expires_at_ms);
        self.set(&format!("{prefix}ClaimOwner"), owner.as_str());
    }

    fn make_terminal(&mut self, status: Status, now_ms: u64) {
        self.set("status", status.as_str());
        self.set("resolvedAt", now_ms);
        self.set("receiptPending", false);
        self.set("reconcilePending", false);
    }
}

/// Status of a check/consume result (approvals.md §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckStatus {
    /// Decided; `decision` is set.
    Resolved,
    /// Still waiting (server) or another worker holds a lease.
    Pending,
    /// Expired before a decision.
    Expired,
    /// Not known; never a denial.
    Unknown,
}

impl CheckStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Resolved => "resolved",
            CheckStatus::Pending => "pending",
            CheckStatus::Expired => "expired",
            CheckStatus::Unknown => "unknown",
        }
    }
}

/// The result reported to the model or the domain helper (approvals.md §10.3, §11).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckResult {
    /// The result status.
    pub status: CheckStatus,
    /// The approval id.
    pub approval_id: String,
    /// The conversation; absent when the id is not in the registry.
    pub conversation_id: Option<String>,
    /// The decision (only with [`CheckStatus::Resolved`]).
    pub decision: Option<Decision>,
    /// The authenticated responder (only with [`CheckStatus::Resolved`]).
    pub responded_by: Option<String>,
    /// The deadline (only with [`CheckStatus::Pending`]), exactly as received or stored.
    pub expires_at: Option<Value>,
    /// Which live lease made the answer `pending`.
    pub lease_kind: Option<LeaseKind>,
    /// Explanation for `pending` (busy), `expired` and `unknown`.
    pub note: Option<String>,
}

impl CheckResult {
    fn new(approval_id: &str) -> Self {
        CheckResult {
            status: CheckStatus::Unknown,
            approval_id: approval_id.to_owned(),
            conversation_id: None,
            decision: None,
            responded_by: None,
            expires_at: None,
            lease_kind: None,
            note: None,
        }
    }

    /// `unknown` for an id that is not in the registry (approvals.md §10.1).
    pub fn not_in_registry(approval_id: &str) -> Self {
        CheckResult {
            note: Some(format!(
                "approval id is not in the detached registry \u{2014} {RE_ISSUE_NOTE}"
            )),
            ..CheckResult::new(approval_id)
        }
    }

    fn unknown(entry: &Entry, prefix: Option<&str>) -> Self {
        CheckResult {
            conversation_id: Some(entry.conversation_id().to_owned()),
            note: Some(match prefix {
                Some(prefix) => format!("{prefix} \u{2014} {RE_ISSUE_NOTE}"),
                None => RE_ISSUE_NOTE.to_owned(),
            }),
            ..CheckResult::new(entry.approval_id())
        }
    }

    fn busy(entry: &Entry, kind: LeaseKind) -> Self {
        CheckResult {
            status: CheckStatus::Pending,
            conversation_id: Some(entry.conversation_id().to_owned()),
            expires_at: Some(entry.expires_at().clone()),
            lease_kind: Some(kind),
            note: Some(
                match kind {
                    LeaseKind::Creation => CREATION_BUSY_NOTE,
                    LeaseKind::Consume => CONSUME_BUSY_NOTE,
                }
                .to_owned(),
            ),
            ..CheckResult::new(entry.approval_id())
        }
    }

    /// The JSON result object with the fields approvals.md §10.3/§11 list for this status.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("status".into(), self.status.as_str().into());
        if let Some(decision) = self.decision {
            out.insert("decision".into(), decision.as_str().into());
        }
        out.insert("approvalId".into(), self.approval_id.clone().into());
        if let Some(conversation_id) = &self.conversation_id {
            out.insert("conversationId".into(), conversation_id.clone().into());
        }
        if self.status == CheckStatus::Resolved {
            out.insert(
                "respondedBy".into(),
                self.responded_by.clone().map_or(Value::Null, Value::from),
            );
        }
        if let Some(expires_at) = &self.expires_at {
            out.insert("expiresAt".into(), expires_at.clone());
        }
        if let Some(kind) = self.lease_kind {
            out.insert("leaseKind".into(), kind.as_str().into());
        }
        if let Some(note) = &self.note {
            out.insert("note".into(), note.clone().into());
        }
        Value::Object(out)
    }
}

/// Input of [`Registry::record_creating`] (approvals.md §9.2), validated on construction.
#[derive(Clone, PartialEq)]
pub struct NewApproval {
    approval_id: ApprovalId,
    conversation_id: String,
    expires_at_ms: u64,
    summary: Option<String>,
    response_user_id: Option<String>,
}

impl fmt::Debug for NewApproval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewApproval")
            .field("approval_id", &self.approval_id)
            .field("conversation_id", &self.conversation_id)
            .field("expires_at_ms", &self.expires_at_ms)
            .finish_non_exhaustive()
    }
}

/// A [`NewApproval`] was built from unusable input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidApproval {
    /// The conversation id is blank.
    BlankConversation,
}

impl fmt::Display for InvalidApproval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidApproval::BlankConversation => f.write_str("conversation id is blank"),
        }
    }
}

impl std::error::Error for InvalidApproval {}

impl NewApproval {
    /// Builds the record. `summary` is trimmed and cut to 500 chars and dropped when
    /// empty; a blank responder counts as none.
    pub fn new(
        approval_id: ApprovalId,
        conversation_id: &str,
        expires_at_ms: u64,
        summary: Option<&str>,
        response_user_id: Option<&str>,
    ) -> Result<Self, InvalidApproval> {
        if py_strip(conversation_id).is_empty() {
            return Err(InvalidApproval::BlankConversation);
        }
        let summary = summary
            .map(|s| cut_chars(py_strip(s), SUMMARY_MAX_CHARS))
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let response_user_id = response_user_id
            .map(py_strip)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Ok(NewApproval {
            approval_id,
            conversation_id: conversation_id.to_owned(),
            expires_at_ms,
            summary,
            response_user_id,
        })
    }

    /// The approval id.
    pub fn approval_id(&self) -> &ApprovalId {
        &self.approval_id
    }
}

/// `record_creating` found the id already present (approvals.md §9.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateId(pub String);

/// Outcome of [`Registry::activate_created`] (approvals.md §9.4).
#[derive(Debug, Clone, PartialEq)]
pub enum Activation {
    /// Now `pending` (or already activated by this claim).
    Activated(Entry),
    /// Responder identity failed: the entry is now `orphaned`.
    Orphaned(Entry),
    /// The entry is gone.
    Disappeared,
    /// The entry is no longer `creating` under this claim (recovery took it over).
    ClaimedByRecovery(Entry),
}

impl Activation {
    /// The spec's error text for every outcome except success (approvals.md §9.4).
    pub fn error_message(&self, approval_id: &str) -> Option<String> {
        match self {
            Activation::Activated(_) => None,
            Activation::Orphaned(_) => Some(NOT_ACTIVATED_SAFELY_MESSAGE.to_owned()),
            Activation::Disappeared => Some(format!(
                "Creating detached approval '{approval_id}' disappeared"
            )),
            Activation::ClaimedByRecovery(_) => Some(format!(
                "Creating detached approval '{approval_id}' was claimed by recovery"
            )),
        }
    }
}

/// A held consume lease: everything the caller needs for the server call (approvals.md §10.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumeLease {
    /// The approval id.
    pub approval_id: String,
    /// The registry conversation: the only routing authority for the consume.
    pub conversation_id: String,
    /// The claim id that must match at finish.
    pub claim_id: ClaimId,
    /// Lease expiry, epoch ms.
    pub expires_at_ms: u64,
}

/// Outcome of [`Registry::claim_consume`] (approvals.md §10.1, §11).
#[derive(Debug, Clone, PartialEq)]
pub enum ConsumeClaim {
    /// Not in the registry: report this `unknown` result without contacting Canon.
    Missing(CheckResult),
    /// The entry belongs to another conversation; nothing
    /// was written (approvals.md §11 helper rule).
    WrongConversation,
    /// Terminal: the cached result, no server call.
    Settled(CheckResult),
    /// Another worker holds a live lease: report this `pending` result.
    Busy(CheckResult),
    /// The lease is ours: call the server, then finish.
    Claimed(ConsumeLease),
}

/// What the server said to a consume (approvals.md §10.3), already classified.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerOutcome {
    /// `allow`/`deny`; `responded_by` as sent (may be blank or missing).
    Decision {
        /// The decision.
        decision: Decision,
        /// The server's authenticated responder.
        responded_by: Option<String>,
    },
    /// Still waiting; `expires_at` is `Some` when the key was present (any JSON value).
    Pending {
        /// The response's `expiresAt`, if the key was present.
        expires_at: Option<Value>,
    },
    /// Expired unanswered.
    Timeout,
    /// HTTP 404 or 409: consumed elsewhere or never known.
    Gone,
    /// Other HTTP error, transport error or cancellation; the caller propagates its error.
    Failed,
    /// The response body is not a JSON object.
    Malformed,
    /// Any other `status`, as text (`str(status or "")` in Python terms).
    Unexpected(String),
}

impl ServerOutcome {
    /// Classifies a successful (2xx) consume response body.
    pub fn from_response(body: &Value) -> Self {
        let Value::Object(map) = body else {
            return ServerOutcome::Malformed;
        };
        let status = match map.get("status") {
            Some(value) if crate::text::is_truthy(value) => py_str(value),
            _ => String::new(),
        };
        match status.as_str() {
            "allow" | "deny" => ServerOutcome::Decision {
                decision: Decision::parse(&status).unwrap_or(Decision::Deny),
                responded_by: map
                    .get("respondedBy")
                    .filter(|v| crate::text::is_truthy(v))
                    .map(py_str),
            },
            "pending" => ServerOutcome::Pending {
                expires_at: map.get("expiresAt").cloned(),
            },
            "timeout" => ServerOutcome::Timeout,
            _ => ServerOutcome::Unexpected(status),
        }
    }
}

/// Outcome of [`Registry::finish_consume`].
#[derive(Debug, Clone, PartialEq)]
pub enum ConsumeFinish {
    /// Recorded; report this result.
    Recorded(CheckResult),
    /// A transient failure was recorded (`pending`, `reconcilePending:true`);
    /// the caller propagates its own error.
    Deferred,
    /// The lease was lost (expired and taken over, or the entry is gone); nothing changed.
    /// Report this result (approvals.md Q9: fail closed even if the server answered).
    LeaseLost(CheckResult),
}

/// A claimed wake (approvals.md §13).
#[derive(Clone, PartialEq, Eq)]
pub struct WakeJob {
    /// The approval id.
    pub approval_id: String,
    /// The conversation to wake.
    pub conversation_id: String,
    /// The decision.
    pub decision: Decision,
    /// The authenticated responder, if recorded.
    pub responded_by: Option<String>,
    /// The wake claim id that must match at finish.
    pub claim_id: ClaimId,
    /// The exact wake text (contains the secret summary: never log it).
    pub text: String,
}

impl fmt::Debug for WakeJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WakeJob")
            .field("approval_id", &self.approval_id)
            .field("conversation_id", &self.conversation_id)
            .field("decision", &self.decision)
            .field("claim_id", &self.claim_id)
            .finish_non_exhaustive()
    }
}

/// The wake turn's text (approvals.md §13 step 3).
pub fn wake_text(approval_id: &str, decision: Decision, summary: Option<&str>) -> String {
    let mut text = format!(
        "Canon approval {approval_id} resolved: {}",
        decision.as_str()
    );
    if let Some(summary) = summary.map(py_strip).filter(|s| !s.is_empty()) {
        text.push_str(" \u{2014} ");
        text.push_str(summary);
    }
    text
}

/// Message id of the wake event (approvals.md §13 step 4).
pub fn wake_message_id(approval_id: &str) -> String {
    format!("canon-detached-approval:{approval_id}")
}

/// The whole registry: a map of validated entries keyed by approval id.
#[derive(Clone, Default, PartialEq)]
pub struct Registry {
    entries: BTreeMap<String, Entry>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries.values()).finish()
    }
}

impl Registry {
    /// Validates a parsed document (approvals.md §6).
    pub fn from_json(value: Value) -> Result<Self, ValidationError> {
        let Value::Object(root) = value else {
            return Err(ValidationError::RootNotObject);
        };
        let mut entries = BTreeMap::new();
        for (key, value) in root {
            validate_entry(&key, &value).map_err(|problem| ValidationError::Entry {
                approval_id: key.clone(),
                problem,
            })?;
            let Value::Object(fields) = value else {
                unreachable!("validate_entry accepted a non-object")
            };
            entries.insert(key, Entry { fields });
        }
        Ok(Registry { entries })
    }

    /// The document as JSON (keys in code-point order).
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.entries
                .iter()
                .map(|(k, e)| (k.clone(), Value::Object(e.fields.clone())))
                .collect(),
        )
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the registry has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// One entry.
    pub fn get(&self, approval_id: &str) -> Option<&Entry> {
        self.entries.get(approval_id)
    }

    /// All entries in id order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// Cross-conversation rejection (approvals.md §11): `false` when the entry exists
    /// and belongs to another conversation.
    pub fn conversation_matches(&self, approval_id: &str, expected_conversation: &str) -> bool {
        self.get(approval_id)
            .is_none_or(|e| e.conversation_id() == expected_conversation)
    }

    /// `record_creating` (approvals.md §9.2): a new `creating` entry with a 300 s lease.
    pub fn record_creating(
        &mut self,
        new: &NewApproval,
        claim: &ClaimId,
        owner: &ClaimId,
        now_ms: u64,
    ) -> Result<Entry, DuplicateId> {
        let id = new.approval_id.as_str();
        if self.entries.contains_key(id) {
            return Err(DuplicateId(id.to_owned()));
        }
        let mut entry = Entry { fields: Map::new() };
        entry.set("approvalId", id);
        entry.set("conversationId", new.conversation_id.as_str());
        entry.set("requestedAt", now_ms);
        entry.set("expiresAt", new.expires_at_ms);
        entry.set("status", Status::Creating.as_str());
        entry.set_lease(
            "create",
            claim,
            owner,
            now_ms.saturating_add(CREATE_LEASE_MS),
        );
        if let Some(summary) = &new.summary {
            entry.set("summary", summary.as_str());
        }
        if let Some(responder) = &new.response_user_id {
            entry.set("responseUserId", responder.as_str());
        }
        self.entries.insert(id.to_owned(), entry.clone());
        Ok(entry)
    }

    /// `activate_created` (approvals.md §9.4, §8.1).
    ///
    /// `server_expires_at`: the response's `expiresAt` when it was a number.
    /// `server_responder`: the response's `responseUserId` as sent.
    pub fn activate_created(
        &mut self,
        approval_id: &str,
        create_claim: &str,
        server_expires_at: Option<&Number>,
        server_responder: Option<&str>,
        now_ms: u64,
    ) -> Activation {
        let Some(entry) = self.entries.get_mut(approval_id) else {
            return Activation::Disappeared;
        };
        if entry.status() == Status::Pending
            && entry.str_field("createdFromClaimId") == Some(create_claim)
        {
            return Activation::Activated(entry.clone());
        }
        if entry.create_lease().map(|l| l.claim_id) != Some(create_claim) {
            return Activation::ClaimedByRecovery(entry.clone());
        }
        let expected = entry
            .response_user_id()
            .map(py_strip)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let echoed = server_responder
            .map(py_strip)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let effective = echoed.clone().or_else(|| expected.clone());
        entry.clear_lease("create");
        if let Some(expires_at) = server_expires_at {
            entry.set("expiresAt", Value::Number(expires_at.clone()));
        }
        let problem = match (&effective, &expected) {
            (None, _) => Some(RESPONDER_OMITTED_ERROR),
            (Some(effective), Some(expected)) if effective != expected => {
                Some(RESPONDER_DIFFERENT_ERROR)
            }
            _ => None,
        };
        match problem {
            Some(problem) => {
                entry.make_terminal(Status::Orphaned, now_ms);
                entry.set("identityMismatch", true);
                entry.set("creationError", problem);
                Activation::Orphaned(entry.clone())
            }
            None => {
                entry.set("status", Status::Pending.as_str());
                entry.set("createdAt", now_ms);
                entry.set("createdFromClaimId", create_claim);
                if let Some(responder) = effective {
                    entry.set("responseUserId", responder);
                }
                entry.set("reconcilePending", false);
                Activation::Activated(entry.clone())
            }
        }
    }

    /// `fail_creation` (approvals.md §8.1): `creating` → `orphaned`, only with the
    /// matching create claim. Returns the current entry (changed or not).
    pub fn fail_creation(
        &mut self,
        approval_id: &str,
        create_claim: &str,
        reason: Option<&str>,
        now_ms: u64,
    ) -> Option<Entry> {
        let entry = self.entries.get_mut(approval_id)?;
        if entry.create_lease().map(|l| l.claim_id) == Some(create_claim) {
            let reason = reason
                .map(|r| cut_chars(r, CREATION_ERROR_MAX_CHARS))
                .filter(|r| !r.is_empty())
                .unwrap_or(DEFAULT_CREATION_ERROR)
                .to_owned();
            entry.clear_lease("create");
            entry.make_terminal(Status::Orphaned, now_ms);
            entry.set("creationError", reason);
        }
        Some(entry.clone())
    }

    /// `mark_receipt_pending` (approvals.md §12 step 2, plus the Q4 target: `consuming`
    /// entries are marked too). `None` when the id is not in the registry.
    pub fn mark_receipt_pending(&mut self, approval_id: &str, now_ms: u64) -> Option<Entry> {
        let entry = self.entries.get_mut(approval_id)?;
        let eligible = match entry.status() {
            Status::Creating | Status::Pending | Status::Consuming => true,
            Status::Resolved => matches!(
                entry.wake_status(),
                Some(WakeStatus::Pending | WakeStatus::Delivering)
            ),
            Status::Expired | Status::Orphaned => false,
        };
        if eligible {
            entry.set("receiptPending", true);
            entry.set("receiptSeenAt", now_ms);
        }
        Some(entry.clone())
    }

    /// The consume claim (approvals.md §10.1), with the optional cross-conversation
    /// rejection of the domain helper (approvals.md §11), which changes nothing.
    pub fn claim_consume(
        &mut self,
        approval_id: &str,
        expected_conversation: Option<&str>,
        claim: &ClaimId,
        owner: &ClaimId,
        now_ms: u64,
    ) -> ConsumeClaim {
        let Some(entry) = self.entries.get_mut(approval_id) else {
            return ConsumeClaim::Missing(CheckResult::not_in_registry(approval_id));
        };
        if expected_conversation.is_some_and(|c| c != entry.conversation_id()) {
            return ConsumeClaim::WrongConversation;
        }
        if let Some(result) = entry.terminal_result() {
            return ConsumeClaim::Settled(result);
        }
        match entry.status() {
            Status::Creating => {
                if entry.create_lease().is_some_and(|l| l.is_live(now_ms)) {
                    return ConsumeClaim::Busy(CheckResult::busy(entry, LeaseKind::Creation));
                }
                entry.clear_lease("create");
                entry.set("creationRecoveredAt", now_ms);
            }
            Status::Consuming if entry.consume_lease().is_some_and(|l| l.is_live(now_ms)) => {
                return ConsumeClaim::Busy(CheckResult::busy(entry, LeaseKind::Consume));
            }
            _ => {}
        }
        let expires_at_ms = now_ms.saturating_add(CONSUME_LEASE_MS);
        entry.set("status", Status::Consuming.as_str());
        entry.set_lease("consume", claim, owner, expires_at_ms);
        ConsumeClaim::Claimed(ConsumeLease {
            approval_id: approval_id.to_owned(),
            conversation_id: entry.conversation_id().to_owned(),
            claim_id: claim.clone(),
            expires_at_ms,
        })
    }

    /// Records the server's answer for a held consume lease (approvals.md §8.1, §10.3).
    pub fn finish_consume(
        &mut self,
        lease: &ConsumeLease,
        outcome: &ServerOutcome,
        wake_required: bool,
        now_ms: u64,
    ) -> ConsumeFinish {
        let Some(entry) = self.entries.get_mut(&lease.approval_id) else {
            return ConsumeFinish::LeaseLost(CheckResult {
                conversation_id: Some(lease.conversation_id.clone()),
                note: Some(RE_ISSUE_NOTE.to_owned()),
                ..CheckResult::new(&lease.approval_id)
            });
        };
        if entry.consume_lease().map(|l| l.claim_id) != Some(lease.claim_id.as_str()) {
            let result = entry
                .terminal_result()
                .unwrap_or_else(|| CheckResult::unknown(entry, None));
            return ConsumeFinish::LeaseLost(result);
        }
        entry.clear_lease("consume");
        let retry_later = |entry: &mut Entry| {
            entry.set("status", Status::Pending.as_str());
            entry.set("reconcilePending", true);
        };
        let result = match outcome {
            ServerOutcome::Decision {
                decision,
                responded_by,
            } => {
                let responded_by = responded_by
                    .as_deref()
                    .map(py_strip)
                    .filter(|s| !s.is_empty());
                let expected = entry
                    .response_user_id()
                    .map(py_strip)
                    .filter(|s| !s.is_empty());
                let problem = match (responded_by, expected) {
                    (None, _) => Some("approval response omitted authenticated responder identity"),
                    (Some(actual), Some(expected)) if actual != expected => {
                        Some("approval responder identity mismatch")
                    }
                    _ => None,
                };
                match (problem, responded_by) {
                    (None, Some(responded_by)) => {
                        let responded_by = responded_by.to_owned();
                        entry.set("status", Status::Resolved.as_str());
                        entry.set("decision", decision.as_str());
                        entry.set("respondedBy", responded_by.as_str());
                        entry.set("resolvedAt", now_ms);
                        entry.set("reconcilePending", false);
                        if wake_required {
                            entry.set("wakeStatus", WakeStatus::Pending.as_str());
                        } else {
                            entry.set("receiptPending", false);
                        }
                        CheckResult {
                            status: CheckStatus::Resolved,
                            conversation_id: Some(entry.conversation_id().to_owned()),
                            decision: Some(*decision),
                            responded_by: Some(responded_by),
                            ..CheckResult::new(entry.approval_id())
                        }
                    }
                    (problem, _) => {
                        entry.make_terminal(Status::Orphaned, now_ms);
                        entry.set("identityMismatch", true);
                        CheckResult::unknown(entry, problem)
                    }
                }
            }
            ServerOutcome::Pending { expires_at } => {
                entry.set("status", Status::Pending.as_str());
                if let Some(Value::Number(n)) = expires_at {
                    entry.set("expiresAt", Value::Number(n.clone()));
                }
                entry.set("reconcilePending", false);
                CheckResult {
                    status: CheckStatus::Pending,
                    conversation_id: Some(entry.conversation_id().to_owned()),
                    expires_at: Some(
                        expires_at
                            .clone()
                            .unwrap_or_else(|| entry.expires_at().clone()),
                    ),
                    ..CheckResult::new(entry.approval_id())
                }
            }
            ServerOutcome::Timeout => {
                entry.make_terminal(Status::Expired, now_ms);
                entry
                    .terminal_result()
                    .unwrap_or_else(|| CheckResult::unknown(entry, None))
            }
            ServerOutcome::Gone => {
                entry.make_terminal(Status::Orphaned, now_ms);
                CheckResult::unknown(entry, None)
            }
            ServerOutcome::Failed => {
                retry_later(entry);
                return ConsumeFinish::Deferred;
            }
            ServerOutcome::Malformed => {
                retry_later(entry);
                CheckResult::unknown(entry, Some("malformed consume response"))
            }
            ServerOutcome::Unexpected(status) => {
                retry_later(entry);
                let shown = if status.is_empty() {
                    "<empty>"
                } else {
                    status.as_str()
                };
                let prefix = format!("unexpected consume status {}", py_repr(shown));
                CheckResult::unknown(entry, Some(&prefix))
            }
        };
        ConsumeFinish::Recorded(result)
    }

    /// `claim_wake` (approvals.md §13 steps 1–3). `None`: nothing to deliver.
    ///
    /// The approvals.md §13 step 2 sanity check holds for every validated resolved entry;
    /// should it ever fail, the wake is released back to `pending` instead of claimed.
    pub fn claim_wake(
        &mut self,
        approval_id: &str,
        claim: &ClaimId,
        owner: &ClaimId,
        now_ms: u64,
    ) -> Option<WakeJob> {
        let entry = self.entries.get_mut(approval_id)?;
        if entry.status() != Status::Resolved {
            return None;
        }
        match entry.wake_status() {
            Some(WakeStatus::Pending) => {}
            Some(WakeStatus::Delivering)
                if entry.wake_lease().is_some_and(|l| !l.is_live(now_ms)) => {}
            _ => return None,
        }
        let Some(decision) = entry.decision() else {
            entry.set("wakeStatus", WakeStatus::Pending.as_str());
            entry.clear_lease("wake");
            return None;
        };
        entry.set("wakeStatus", WakeStatus::Delivering.as_str());
        entry.set_lease("wake", claim, owner, now_ms.saturating_add(WAKE_LEASE_MS));
        Some(WakeJob {
            approval_id: approval_id.to_owned(),
            conversation_id: entry.conversation_id().to_owned(),
            decision,
            responded_by: entry.responded_by().map(str::to_owned),
            claim_id: claim.clone(),
            text: wake_text(approval_id, decision, entry.summary()),
        })
    }

    /// `finish_wake` (approvals.md §8.2) by the holder of the wake lease. Returns
    /// whether the entry changed.
    pub fn finish_wake(
        &mut self,
        approval_id: &str,
        wake_claim: &str,
        delivered: bool,
        now_ms: u64,
    ) -> bool {
        let Some(entry) = self.entries.get_mut(approval_id) else {
            return false;
        };
        if entry.status() != Status::Resolved
            || entry.wake_lease().map(|l| l.claim_id) != Some(wake_claim)
        {
            return false;
        }
        entry.clear_lease("wake");
        if delivered {
            entry.set("wakeStatus", WakeStatus::Delivered.as_str());
            entry.set("wakeDeliveredAt", now_ms);
            entry.set("receiptPending", false);
        } else {
            entry.set("wakeStatus", WakeStatus::Pending.as_str());
        }
        true
    }

    /// Ids of `resolved` entries whose wake is `pending` or `delivering` (approvals.md §14.1 b).
    pub fn pending_wakes(&self) -> Vec<String> {
        self.entries()
            .filter(|e| {
                e.status() == Status::Resolved
                    && matches!(
                        e.wake_status(),
                        Some(WakeStatus::Pending | WakeStatus::Delivering)
                    )
            })
            .map(|e| e.approval_id().to_owned())
            .collect()
    }

    /// Ids the startup reconcile pass consumes: `creating`,
    /// `pending`, `consuming` (approvals.md §14.1 a).
    pub fn reconcile_targets(&self) -> Vec<String> {
        self.entries()
            .filter(|e| !e.status().is_terminal())
            .map(|e| e.approval_id().to_owned())
            .collect()
    }

    /// Ids the 30 s periodic scan hands to receipt recovery (approvals.md §14.3,
    /// including the \[seed\] retry of failed wakes).
    pub fn recovery_candidates(&self, now_ms: u64) -> Vec<String> {
        self.entries()
            .filter(|e| recovery_eligible(e, now_ms))
            .map(|e| e.approval_id().to_owned())
            .collect()
    }

    /// `next_lease_retry_delay` (approvals.md §14.1 e) in ms: `None` when no lease exists.
    pub fn next_lease_retry_delay_ms(&self, now_ms: u64) -> Option<u64> {
        let earliest = self
            .entries()
            .flat_map(|e| [e.create_lease(), e.consume_lease(), e.wake_lease()])
            .flatten()
            .map(|l| l.expires_at_ms)
            .fold(None, |acc: Option<f64>, x| {
                Some(acc.map_or(x, |a| a.min(x)))
            })?;
        let wait = (earliest - now_ms as f64).max(0.0).ceil();
        let wait = if wait >= MAX_LEASE_RETRY_DELAY_MS as f64 {
            MAX_LEASE_RETRY_DELAY_MS
        } else {
            wait as u64
        };
        Some((wait + LEASE_RETRY_SLACK_MS).min(MAX_LEASE_RETRY_DELAY_MS))
    }

    /// Drops terminal entries older than 14 days (approvals.md §7); returns how many.
    pub fn prune(&mut self, now_ms: u64) -> usize {
        let before = self.entries.len();
        let cutoff = now_ms as f64 - RETENTION_MS as f64;
        self.entries.retain(|_, e| {
            if !e.status().is_terminal() {
                return true;
            }
            let truthy = |name: &str| e.f64_field(name).filter(|v| *v != 0.0);
            let stamp = truthy("resolvedAt")
                .or_else(|| truthy("expiresAt"))
                .unwrap_or(0.0);
            stamp >= cutoff
        });
        before - self.entries.len()
    }
}

/// Whether the periodic scan (approvals.md §14.3) or the recovery task's first
/// step (approvals.md §14.2 step 1, extended by the \[seed\] rule) keeps working on `entry`.
pub fn recovery_eligible(entry: &Entry, now_ms: u64) -> bool {
    if entry.receipt_pending() || entry.reconcile_pending() {
        return true;
    }
    match entry.status() {
        Status::Creating => entry.create_lease().is_none_or(|l| !l.is_live(now_ms)),
        Status::Resolved => match entry.wake_status() {
            Some(WakeStatus::Pending) => true,
            Some(WakeStatus::Delivering) => entry.wake_lease().is_none_or(|l| !l.is_live(now_ms)),
            _ => false,
        },
        _ => false,
    }
}

/// Initial wait of the receipt-recovery task behind
/// a live create lease (approvals.md §14.2 step 2).
pub const RECOVERY_BACKOFF_START_MS: u64 = 250;

/// Cap of that wait (approvals.md §14.2 step 2).
pub const RECOVERY_BACKOFF_CAP_MS: u64 = 5_000;

/// Minimum wait behind a live create lease (approvals.md §14.2 step 2).
pub const RECOVERY_MIN_WAIT_MS: u64 = 50;

/// One step of the receipt-recovery task (approvals.md §14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryAction {
    /// Stop the task.
    Stop,
    /// Sleep this long, then look again (live create lease).
    Wait {
        /// Milliseconds to sleep.
        delay_ms: u64,
    },
    /// Deliver the entry's wake, then stop.
    DeliverWake,
    /// Run `consume(entry, wake_required=true)`; deliver the wake if it resolves; stop.
    Consume,
}

/// Decides the next receipt-recovery step for `entry` (approvals.md §14.2). `backoff_ms`
/// is the task's current backoff, which the caller advances with [`next_recovery_backoff`]
/// after each `Wait`. Step 1 is extended by the \[seed\] rule of approvals.md §14.3: a
/// resolved entry with an undelivered wake is eligible without a flag.
pub fn recovery_action(entry: Option<&Entry>, backoff_ms: u64, now_ms: u64) -> RecoveryAction {
    let Some(entry) = entry else {
        return RecoveryAction::Stop;
    };
    if !recovery_eligible(entry, now_ms) && entry.status() != Status::Creating {
        return RecoveryAction::Stop;
    }
    match entry.status() {
        Status::Creating => match entry.create_lease() {
            Some(lease) if lease.is_live(now_ms) => {
                let remaining = (lease.expires_at_ms - now_ms as f64).ceil().max(0.0) as u64;
                RecoveryAction::Wait {
                    delay_ms: backoff_ms.min(remaining.max(RECOVERY_MIN_WAIT_MS)),
                }
            }
            _ => RecoveryAction::Consume,
        },
        Status::Resolved => match entry.wake_status() {
            Some(WakeStatus::Pending | WakeStatus::Delivering) => RecoveryAction::DeliverWake,
            _ => RecoveryAction::Stop,
        },
        Status::Expired | Status::Orphaned => RecoveryAction::Stop,
        Status::Pending | Status::Consuming => RecoveryAction::Consume,
    }
}

/// Doubles the recovery backoff up to its cap (approvals.md §14.2 step 2).
pub fn next_recovery_backoff(backoff_ms: u64) -> u64 {
    backoff_ms.saturating_mul(2).min(RECOVERY_BACKOFF_CAP_MS)
}

/// Bookkeeping of the startup reconcile loop (approvals.md §14.1 steps 1, c, d, f).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileTracker {
    predecessor_consumes: Vec<String>,
    predecessor_wakes: Vec<String>,
}

impl ReconcileTracker {
    /// Step 1: snapshot consumes and wakes held by predecessors.
    pub fn new(registry: &Registry) -> Self {
        let mut tracker = ReconcileTracker::default();
        for entry in registry.entries() {
            match entry.status() {
                Status::Consuming => tracker
                    .predecessor_consumes
                    .push(entry.approval_id().to_owned()),
                Status::Resolved if entry.wake_status() == Some(WakeStatus::Delivering) => tracker
                    .predecessor_wakes
                    .push(entry.approval_id().to_owned()),
                _ => {}
            }
        }
        tracker
    }

    /// Step c on a fresh snapshot: returns whether anything was released (step d:
    /// loop again at once).
    pub fn observe(&mut self, registry: &Registry) -> bool {
        let mut released = false;
        let mut moved = Vec::new();
        self.predecessor_consumes.retain(|id| {
            let Some(entry) = registry.get(id) else {
                return false;
            };
            match (entry.status(), entry.wake_status()) {
                (Status::Consuming, _) => true,
                (Status::Pending, _) | (Status::Resolved, Some(WakeStatus::Pending)) => {
                    released = true;
                    false
                }
                (Status::Resolved, Some(WakeStatus::Delivering)) => {
                    moved.push(id.clone());
                    false
                }
                _ => false,
            }
        });
        self.predecessor_wakes
            .retain(|id| match registry.get(id).and_then(Entry::wake_status) {
                Some(WakeStatus::Delivering) => true,
                Some(WakeStatus::Pending) => {
                    released = true;
                    false
                }
                _ => false,
            });
        for id in moved {
            if !self.predecessor_wakes.contains(&id) {
                self.predecessor_wakes.push(id);
            }
        }
        released
    }

    /// Step f: both predecessor sets are empty.
    pub fn is_settled(&self) -> bool {
        self.predecessor_consumes.is_empty() && self.predecessor_wakes.is_empty()
    }
}

#[cfg(test)]
mod tests;
