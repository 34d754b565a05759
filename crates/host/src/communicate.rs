//! `canon_communicate` (runtime-control.md §5) as pure decisions: whether the tool is offered,
//! whether a call may run, what one call asks Canon (one verb through `POST /agent/verbs/<verb>`,
//! or the agent directory `GET /agents/discover`), and the exact result string the model gets
//! back from what Canon answered.
//!
//! The flow of one call: [`authority`] reads who may act from the session's state (connected,
//! the turn's conversation owned, the live outbound policy); [`plan`] refuses a call without an
//! authority or with a closed policy before looking at the arguments (runtime-control.md §5.1),
//! then [`validate`] checks the arguments in the exact order and with the exact messages of
//! runtime-control.md §5.3, then the schema's lengths and the server's byte limits
//! (runtime-control.md §5.2, [target]), and maps them to Canon (runtime-control.md §5.4). The shell
//! runs the [`CanonRequest`]; [`answer`] validates and maps Canon's result
//! (runtime-control.md §5.5) into the tool envelope of runtime-control.md §2.
//!
//! The arguments are checked in code rather than against the JSON Schema, because the messages
//! must be the reference's, word for word; the schema (`assets/tools/canon_communicate.json`,
//! one `oneOf` branch per action) is what the model sees, and the tests check that every
//! argument object it allows passes the code checks.

use std::sync::OnceLock;

use canon_wire::types::OutboundPolicy;
use serde_json::{json, Map, Value};

use crate::media::is_py_space;
use crate::protocol::TurnContext;
use crate::tools::{failure, success, turn_conversation_id};

/// The tool's name (runtime-control.md §5.1).
pub const COMMUNICATE_TOOL: &str = "canon_communicate";

/// The `canon_communicate` function schema Hermes shows the model: `name`, `description` and
/// `parameters` (runtime-control.md §5.2).
pub const COMMUNICATE_SCHEMA: &str = include_str!("../assets/tools/canon_communicate.json");

/// How long the shim waits for a `canon_communicate` call: the default of every tool but
/// `canon_runtime_control` (hermes-host.md §19.6).
pub const COMMUNICATE_CALL_TIMEOUT_S: u64 = 120;

/// runtime-control.md §5.1, exact: no connected adapter, or inside a Canon turn none owns the
/// turn's conversation.
pub const NO_AUTHORITY: &str = "No unambiguous live Canon adapter owns this turn";
/// runtime-control.md §5.1, exact: the live outbound policy is neither `open` nor
/// `approval-required`.
pub const CLOSED: &str = "Canon proactive communication is closed";
/// runtime-control.md §5.5, exact.
pub const MALFORMED_RESULT: &str = "Canon returned a malformed communicate result";
/// runtime-control.md §5.5, exact.
pub const UNSUPPORTED_RESULT: &str = "Canon returned an unsupported communicate result";
/// runtime-control.md §5.5, exact.
pub const MALFORMED_DIRECTORY: &str = "Canon returned a malformed agent directory result";
/// The error code Canon answers when the agent's operator must approve the action
/// (runtime-control.md §5.5).
pub const OUTBOUND_APPROVAL_REQUIRED: &str = "OUTBOUND_APPROVAL_REQUIRED";
/// The reason of the `approval_required` result (runtime-control.md §5.5, exact).
pub const APPROVAL_REQUIRED_REASON: &str = "The agent operator must approve this outbound action.";

/// The most agents one discovery asks for, and the default (runtime-control.md §5.2: the
/// 0.16.0 client caps the directory's 25 at 10).
pub const DISCOVER_MAX_LIMIT: u8 = 10;
/// The longest discovery query, in code points (runtime-control.md §5.2).
pub const QUERY_MAX_CHARS: usize = 64;
/// The longest id the schema allows, in code points (runtime-control.md §5.2).
pub const ID_MAX_CHARS: usize = 160;
/// The longest text the schema allows, in code points (runtime-control.md §5.2).
pub const TEXT_MAX_CHARS: usize = 4096;
/// The longest group name the schema allows, in code points (runtime-control.md §5.2).
pub const NAME_MAX_CHARS: usize = 100;
/// The most members a new group may be asked for (runtime-control.md §5.2).
pub const MAX_MEMBERS: usize = 49;
/// The server's limit on `text`, in UTF-8 bytes (runtime-control.md §5.2, contracts
/// `findVerbByteLimitViolations`).
pub const TEXT_MAX_BYTES: usize = 4096;
/// The server's limit on `messageId`, in UTF-8 bytes (runtime-control.md §5.2).
pub const MESSAGE_ID_MAX_BYTES: usize = 256;

/// Whether the outbound policy offers the tool (runtime-control.md §5.1: only `open` and
/// `approval-required`; closed, absent and unknown values withhold it).
pub fn is_enabled(policy: OutboundPolicy) -> bool {
    matches!(
        policy,
        OutboundPolicy::Open | OutboundPolicy::ApprovalRequired
    )
}

/// Who may make a call (runtime-control.md §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authority {
    /// No adapter may act for this call.
    Missing,
    /// The connected adapter acts, under this live outbound policy.
    Live(OutboundPolicy),
}

/// The authority of a call (runtime-control.md §5.1): inside a Canon turn the connected adapter
/// must own an open turn in the turn's conversation (`owns_turn_in`); outside one, being
/// connected is enough. This daemon is one adapter, so "exactly one" means "this one".
pub fn authority(
    ctx: &TurnContext,
    connected: bool,
    policy: OutboundPolicy,
    owns_turn_in: impl FnOnce(&str) -> bool,
) -> Authority {
    if !connected {
        return Authority::Missing;
    }
    match turn_conversation_id(ctx) {
        Some(conversation_id) if !owns_turn_in(&conversation_id) => Authority::Missing,
        _ => Authority::Live(policy),
    }
}

/// Which action a call is, with what its result mapping needs from the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `discover_agents`.
    DiscoverAgents,
    /// `message_existing`.
    MessageExisting,
    /// `start_direct`.
    StartDirect,
    /// `create_group`.
    CreateGroup,
    /// `forward_message`.
    ForwardMessage,
    /// `share_contact` into this conversation.
    ShareContact {
        /// The argument `conversationId`.
        conversation_id: String,
    },
    /// `manage_group_members`.
    ManageGroupMembers {
        /// The argument `conversationId`.
        conversation_id: String,
        /// The argument `userId`.
        user_id: String,
        /// `operation` is `add` (else `remove`).
        add: bool,
    },
}

/// The one Canon call of an action (runtime-control.md §5.4).
#[derive(Debug, Clone, PartialEq)]
pub enum CanonRequest {
    /// `POST /agent/verbs/<verb>` with this envelope and `body.value` (canon-wire.md §4.15).
    Verb {
        /// The verb.
        verb: &'static str,
        /// `envelope`.
        envelope: Map<String, Value>,
        /// `body.value`.
        value: Map<String, Value>,
    },
    /// `GET /agents/discover` (canon-wire.md §4.15.1).
    Discover {
        /// `query`, only when given (an empty one is sent as `query=`).
        query: Option<String>,
        /// `limit`, always sent.
        limit: u8,
        /// `cursor`, only when given.
        cursor: Option<String>,
    },
}

/// A validated call: its action and the Canon call it makes.
#[derive(Debug, Clone, PartialEq)]
pub struct Communicate {
    /// The action.
    pub action: Action,
    /// What to ask Canon.
    pub request: CanonRequest,
}

/// Why the Canon call failed, as the result mapping needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The safe error text (for an HTTP error `Canon API returned <status>: <body>`,
    /// runtime-control.md §2).
    pub message: String,
    /// The `code` of an HTTP error's JSON body.
    pub code: Option<String>,
}

/// The parsed [`COMMUNICATE_SCHEMA`].
pub fn communicate_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| serde_json::from_str(COMMUNICATE_SCHEMA).unwrap_or(Value::Null))
}

/// Plans one call: the call-time errors of runtime-control.md §5.1 first (no authority, then
/// a closed policy), then the arguments ([`validate`]). A call that posts a message (`send_to`,
/// `share_contact`) without the model's `messageId` gets an idempotency key derived from the
/// turn it runs in, `turn_id`, and the call itself ([`turn_keyed`]).
pub fn plan(
    args: &Value,
    authority: Authority,
    turn_id: Option<&str>,
) -> Result<Communicate, String> {
    match authority {
        Authority::Missing => Err(NO_AUTHORITY.to_owned()),
        Authority::Live(policy) if !is_enabled(policy) => Err(CLOSED.to_owned()),
        Authority::Live(_) => validate(args).map(|planned| turn_keyed(planned, turn_id)),
    }
}

/// `planned` with an idempotency key derived from `turn_id` and the call
/// (`canon_chunking::ids::call_idempotency_key`) when it posts a message and has no key yet.
/// Canon stores a message once per key: a model that calls again after an error it cannot
/// judge (a timeout, a daemon that died mid-call) makes the same call in the same turn, which
/// must not post twice; a call the model gave its own `messageId` keeps it.
pub fn turn_keyed(mut planned: Communicate, turn_id: Option<&str>) -> Communicate {
    let Some(turn_id) = turn_id.filter(|t| !t.is_empty()) else {
        return planned;
    };
    if let CanonRequest::Verb {
        verb,
        envelope,
        value,
    } = &mut planned.request
    {
        if matches!(*verb, "send_to" | "share_contact") && !envelope.contains_key("idempotencyKey")
        {
            let request = json!({"verb": *verb, "envelope": envelope, "value": value}).to_string();
            let key = canon_chunking::ids::call_idempotency_key(turn_id, &request);
            envelope.insert("idempotencyKey".to_owned(), Value::from(key));
        }
    }
    planned
}

/// Checks the arguments and maps them to Canon: the checks of runtime-control.md §5.3 in their
/// order, then the schema's lengths and the server's byte limits (runtime-control.md §5.2).
/// Values are sent untrimmed.
pub fn validate(args: &Value) -> Result<Communicate, String> {
    let empty = Map::new();
    let args = args.as_object().unwrap_or(&empty);
    let planned = parity_checks(args)?;
    check_limits(args, &planned.action)?;
    Ok(planned)
}

/// A string that is not blank after Python's `strip()`.
fn filled(value: Option<&Value>) -> Option<&str> {
    value
        .and_then(Value::as_str)
        .filter(|s| !s.trim_matches(is_py_space).is_empty())
}

/// A value the reference reads with `value.get(key)`: absent and `null` are both `None`.
fn given<'a>(args: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    args.get(key).filter(|v| !v.is_null())
}

/// The required non-blank string at `key`, or `communicate.<key> is required`.
fn required<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    filled(args.get(key)).ok_or_else(|| format!("communicate.{key} is required"))
}

/// The optional string at `key` (absent or `null` is none), or `communicate.<key> must be a
/// string`.
fn optional_text<'a>(args: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match given(args, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("communicate.{key} must be a string")),
    }
}

/// The optional non-blank `messageId` (absent or `null` is none).
fn optional_message_id(args: &Map<String, Value>) -> Result<Option<&str>, String> {
    match given(args, "messageId") {
        None => Ok(None),
        some => filled(some)
            .map(Some)
            .ok_or_else(|| "communicate.messageId must be a non-empty string".to_owned()),
    }
}

/// `<action> contains unsupported fields` when a key is not in `allowed`.
fn only(args: &Map<String, Value>, action: &str, allowed: &[&str]) -> Result<(), String> {
    if args.keys().all(|k| allowed.contains(&k.as_str())) {
        Ok(())
    } else {
        Err(format!("{action} contains unsupported fields"))
    }
}

fn object(pairs: Vec<(&str, Option<Value>)>) -> Map<String, Value> {
    pairs
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
        .collect()
}

fn verb(
    verb: &'static str,
    envelope: Map<String, Value>,
    value: Map<String, Value>,
) -> CanonRequest {
    CanonRequest::Verb {
        verb,
        envelope,
        value,
    }
}

/// The checks of runtime-control.md §5.3, in order, and the mapping of runtime-control.md §5.4.
/// `discover_agents` comes first, then `create_group`, `forward_message`, `share_contact`,
/// `manage_group_members`; every other action (unknown ones too) needs `text` before the
/// action is even recognized.
fn parity_checks(args: &Map<String, Value>) -> Result<Communicate, String> {
    let action = args.get("action").and_then(Value::as_str).unwrap_or("");
    let plain = |action: Action, request: CanonRequest| Ok(Communicate { action, request });
    match action {
        "discover_agents" => plain(Action::DiscoverAgents, discover(args)?),
        "create_group" => {
            only(args, action, &["action", "name", "memberIds"])?;
            let name = required(args, "name")?;
            let members = args
                .get("memberIds")
                .and_then(Value::as_array)
                .filter(|m| !m.is_empty())
                .and_then(|m| {
                    m.iter()
                        .map(|v| filled(Some(v)))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or("communicate.memberIds must contain at least one principal id")?;
            let mut unique: Vec<&str> = Vec::with_capacity(members.len());
            for member in members {
                if !unique.contains(&member) {
                    unique.push(member);
                }
            }
            plain(
                Action::CreateGroup,
                verb(
                    "create_group",
                    object(vec![("memberIds", Some(json!(unique)))]),
                    object(vec![("name", Some(json!(name)))]),
                ),
            )
        }
        "forward_message" => {
            only(
                args,
                action,
                &[
                    "action",
                    "sourceConversationId",
                    "targetConversationId",
                    "messageId",
                    "text",
                ],
            )?;
            let source = required(args, "sourceConversationId")?;
            let target = required(args, "targetConversationId")?;
            let message_id = required(args, "messageId")?;
            let text = optional_text(args, "text")?;
            plain(
                Action::ForwardMessage,
                verb(
                    "forward",
                    object(vec![
                        ("sourceConversationId", Some(json!(source))),
                        ("conversationId", Some(json!(target))),
                        ("messageId", Some(json!(message_id))),
                    ]),
                    object(vec![("text", text.map(Value::from))]),
                ),
            )
        }
        "share_contact" => {
            only(
                args,
                action,
                &[
                    "action",
                    "conversationId",
                    "contactUserId",
                    "text",
                    "messageId",
                ],
            )?;
            let conversation_id = required(args, "conversationId")?;
            let contact = required(args, "contactUserId")?;
            let text = optional_text(args, "text")?;
            let message_id = optional_message_id(args)?;
            plain(
                Action::ShareContact {
                    conversation_id: conversation_id.to_owned(),
                },
                verb(
                    "share_contact",
                    object(vec![
                        ("conversationId", Some(json!(conversation_id))),
                        ("contactUserId", Some(json!(contact))),
                        ("idempotencyKey", message_id.map(Value::from)),
                    ]),
                    object(vec![("text", text.map(Value::from))]),
                ),
            )
        }
        "manage_group_members" => {
            only(
                args,
                action,
                &["action", "conversationId", "userId", "operation"],
            )?;
            let conversation_id = required(args, "conversationId")?;
            let user_id = required(args, "userId")?;
            let add = match args.get("operation").and_then(Value::as_str) {
                Some("add") => true,
                Some("remove") => false,
                _ => return Err("communicate.operation must be add or remove".to_owned()),
            };
            plain(
                Action::ManageGroupMembers {
                    conversation_id: conversation_id.to_owned(),
                    user_id: user_id.to_owned(),
                    add,
                },
                verb(
                    if add { "add_member" } else { "remove_member" },
                    object(vec![
                        ("conversationId", Some(json!(conversation_id))),
                        ("targetUserId", Some(json!(user_id))),
                    ]),
                    Map::new(),
                ),
            )
        }
        _ => send_to(args, action),
    }
}

/// `discover_agents` (runtime-control.md §5.3, 0.16.0): `GET /agents/discover`.
fn discover(args: &Map<String, Value>) -> Result<CanonRequest, String> {
    only(
        args,
        "discover_agents",
        &["action", "query", "limit", "cursor"],
    )?;
    let query = match given(args, "query") {
        None => None,
        Some(Value::String(q)) => Some(q.as_str()),
        Some(_) => return Err("communicate.query must be a string".to_owned()),
    };
    if query.is_some_and(|q| q.chars().count() > QUERY_MAX_CHARS) {
        return Err("communicate.query must be at most 64 characters".to_owned());
    }
    // `value.get("limit", 10)`: only an absent key takes the default; `null` is no integer.
    let limit = match args.get("limit") {
        None => Some(DISCOVER_MAX_LIMIT),
        Some(value) => value
            .as_i64()
            .filter(|n| (1..=i64::from(DISCOVER_MAX_LIMIT)).contains(n))
            .and_then(|n| u8::try_from(n).ok()),
    }
    .ok_or("communicate.limit must be an integer from 1 to 10")?;
    let cursor = match given(args, "cursor") {
        None => None,
        Some(Value::String(c)) if !c.is_empty() => Some(c.clone()),
        Some(_) => return Err("communicate.cursor must be a non-empty string".to_owned()),
    };
    Ok(CanonRequest::Discover {
        query: query.map(str::to_owned),
        limit,
        cursor,
    })
}

/// `message_existing`, `start_direct` and every unrecognized action (runtime-control.md §5.3):
/// `text`, then `messageId`, then the action's own checks; one `send_to`.
fn send_to(args: &Map<String, Value>, action: &str) -> Result<Communicate, String> {
    let text = required(args, "text")?;
    let message_id = optional_message_id(args)?;
    let idempotency = message_id.map(Value::from);
    match action {
        "message_existing" => {
            only(
                args,
                action,
                &["action", "conversationId", "text", "messageId"],
            )?;
            let conversation_id = required(args, "conversationId")?;
            Ok(Communicate {
                action: Action::MessageExisting,
                request: verb(
                    "send_to",
                    object(vec![
                        ("conversationId", Some(json!(conversation_id))),
                        ("idempotencyKey", idempotency),
                    ]),
                    object(vec![
                        ("text", Some(json!(text))),
                        (
                            "messageOptions",
                            Some(json!({"metadata": {"turnSemantics": "turn_complete"}})),
                        ),
                    ]),
                ),
            })
        }
        "start_direct" => {
            only(
                args,
                action,
                &["action", "principalId", "text", "selection", "messageId"],
            )?;
            let principal = required(args, "principalId")?;
            let selection = match given(args, "selection") {
                None => None,
                Some(Value::Object(selection)) => Some(session_selection(selection)?),
                Some(_) => return Err("communicate.selection must be an object".to_owned()),
            };
            Ok(Communicate {
                action: Action::StartDirect,
                request: verb(
                    "send_to",
                    object(vec![
                        ("targetUserId", Some(json!(principal))),
                        ("sessionSelection", selection),
                        ("idempotencyKey", idempotency),
                    ]),
                    object(vec![("text", Some(json!(text)))]),
                ),
            })
        }
        _ => Err("communicate.action is invalid".to_owned()),
    }
}

/// The envelope's `sessionSelection` of a `start_direct` selection (runtime-control.md §5.4):
/// `latest_or_new` is Canon's `continue_or_create`, `new` stays `new`, `specific` passes
/// unchanged; any other shape (extra keys included) is invalid.
fn session_selection(selection: &Map<String, Value>) -> Result<Value, String> {
    let keys: Vec<&str> = selection.keys().map(String::as_str).collect();
    let mode = selection.get("mode").and_then(Value::as_str);
    match (mode, keys.as_slice()) {
        (Some("latest_or_new"), ["mode"]) => Ok(json!({"mode": "continue_or_create"})),
        (Some("new"), ["mode"]) => Ok(json!({"mode": "new"})),
        (Some("specific"), [_, _])
            if selection.contains_key("conversationId")
                && filled(selection.get("conversationId")).is_some() =>
        {
            Ok(Value::Object(selection.clone()))
        }
        _ => Err("communicate.selection is invalid".to_owned()),
    }
}

/// The schema's lengths and the server's byte limits the checks of runtime-control.md §5.3 do
/// not cover (runtime-control.md §5.2, [target]: checked after them, with messages of the same
/// kind). Characters are code points; the member list is judged as the model gave it.
fn check_limits(args: &Map<String, Value>, action: &Action) -> Result<(), String> {
    let ids: &[&str] = match action {
        Action::DiscoverAgents => &[],
        Action::MessageExisting => &["conversationId"],
        Action::StartDirect => &["principalId"],
        Action::CreateGroup => &[],
        Action::ForwardMessage => &["sourceConversationId", "targetConversationId"],
        Action::ShareContact { .. } => &["conversationId", "contactUserId"],
        Action::ManageGroupMembers { .. } => &["conversationId", "userId"],
    };
    let text = |key: &str| args.get(key).and_then(Value::as_str);
    for key in ids {
        at_most_chars(key, text(key), ID_MAX_CHARS)?;
    }
    match action {
        Action::CreateGroup => {
            at_most_chars("name", text("name"), NAME_MAX_CHARS)?;
            let members = args
                .get("memberIds")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            if members.len() > MAX_MEMBERS {
                return Err(format!(
                    "communicate.memberIds must contain at most {MAX_MEMBERS} principal ids"
                ));
            }
            if members
                .iter()
                .filter_map(Value::as_str)
                .any(|m| m.chars().count() > ID_MAX_CHARS)
            {
                return Err(format!(
                    "communicate.memberIds entries must be at most {ID_MAX_CHARS} characters"
                ));
            }
        }
        Action::StartDirect => {
            let chosen = args
                .get("selection")
                .and_then(|s| s.get("conversationId"))
                .and_then(Value::as_str);
            at_most_chars("selection.conversationId", chosen, ID_MAX_CHARS)?;
        }
        _ => {}
    }
    if !matches!(action, Action::DiscoverAgents | Action::CreateGroup) {
        at_most_chars("text", text("text"), TEXT_MAX_CHARS)?;
        at_most_bytes("text", text("text"), TEXT_MAX_BYTES)?;
    }
    if !matches!(
        action,
        Action::DiscoverAgents | Action::CreateGroup | Action::ManageGroupMembers { .. }
    ) {
        at_most_chars("messageId", text("messageId"), ID_MAX_CHARS)?;
        at_most_bytes("messageId", text("messageId"), MESSAGE_ID_MAX_BYTES)?;
    }
    Ok(())
}

fn at_most_chars(key: &str, value: Option<&str>, max: usize) -> Result<(), String> {
    match value {
        Some(v) if v.chars().count() > max => Err(format!(
            "communicate.{key} must be at most {max} characters"
        )),
        _ => Ok(()),
    }
}

fn at_most_bytes(key: &str, value: Option<&str>, max: usize) -> Result<(), String> {
    match value {
        Some(v) if v.len() > max => Err(format!(
            "communicate.{key} must be at most {max} UTF-8 bytes"
        )),
        _ => Ok(()),
    }
}

/// The tool result of a call (runtime-control.md §5.5, inside the envelope of
/// runtime-control.md §2): an HTTP error with code `OUTBOUND_APPROVAL_REQUIRED` is the success
/// `approval_required`; any other failure is the failure envelope with its text; a result is
/// validated and mapped by [`map_result`].
pub fn answer(call: &Communicate, result: Result<Map<String, Value>, Failure>) -> String {
    match result {
        Err(failed) if failed.code.as_deref() == Some(OUTBOUND_APPROVAL_REQUIRED) => {
            success(object(vec![
                ("status", Some(json!("approval_required"))),
                ("reason", Some(json!(APPROVAL_REQUIRED_REASON))),
            ]))
        }
        Err(failed) => failure(&failed.message),
        Ok(value) => match map_result(&call.action, value) {
            Ok(fields) => success(fields),
            Err(error) => failure(error),
        },
    }
}

fn is_str(value: &Map<String, Value>, key: &str) -> bool {
    value.get(key).is_some_and(Value::is_string)
}

fn optional_bool(value: &Map<String, Value>, key: &str) -> bool {
    value.get(key).is_none_or(Value::is_boolean)
}

fn all_items(value: &Map<String, Value>, key: &str, item: impl Fn(&Value) -> bool) -> bool {
    value
        .get(key)
        .and_then(Value::as_array)
        .is_some_and(|items| items.iter().all(item))
}

/// Whether a verb result has one of the accepted shapes (runtime-control.md §5.5,
/// `_is_communicate_result`; `setup_required` and `no_session` with a string `reason` are
/// accepted too, [target] runtime-control.md Q7).
pub fn is_communicate_result(value: &Map<String, Value>) -> bool {
    let entry = |keys: [&'static str; 2]| {
        move |item: &Value| {
            item.as_object()
                .is_some_and(|o| keys.iter().all(|k| is_str(o, k)))
        }
    };
    match value.get("status").and_then(Value::as_str) {
        Some("messaged") => {
            is_str(value, "conversationId")
                && is_str(value, "messageId")
                && optional_bool(value, "created")
                && optional_bool(value, "reused")
        }
        Some("requested" | "pending") => is_str(value, "requestId"),
        Some("blocked" | "unavailable" | "setup_required" | "no_session") => {
            is_str(value, "reason")
        }
        Some("created") => {
            is_str(value, "conversationId")
                && all_items(value, "added", Value::is_string)
                && all_items(value, "pending", entry(["userId", "requestId"]))
                && all_items(value, "skipped", entry(["userId", "reason"]))
        }
        Some("forwarded") => is_str(value, "messageId") && is_str(value, "targetConversationId"),
        Some("shared") => is_str(value, "messageId"),
        Some("added" | "removed") => true,
        _ => false,
    }
}

/// Whether a directory page has the shape of runtime-control.md §5.5: `agents` a list of
/// objects with a non-blank `principalId`, a boolean `shareable` and an `owner` object with a
/// non-blank `principalId`; `nextCursor` a string or `null`.
pub fn is_directory_page(page: &Map<String, Value>) -> bool {
    let cursor_ok = matches!(page.get("nextCursor"), Some(Value::Null | Value::String(_)));
    let agent_ok = |agent: &Value| {
        agent.as_object().is_some_and(|a| {
            filled(a.get("principalId")).is_some()
                && a.get("shareable").is_some_and(Value::is_boolean)
                && a.get("owner")
                    .and_then(Value::as_object)
                    .is_some_and(|o| filled(o.get("principalId")).is_some())
        })
    };
    cursor_ok && all_items(page, "agents", agent_ok)
}

/// The keys of `value` named in `keys`, in that order.
fn pick(value: &Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|k| value.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect()
}

/// The result fields of an action from what Canon answered (runtime-control.md §5.5), or the
/// error text.
pub fn map_result(
    action: &Action,
    value: Map<String, Value>,
) -> Result<Map<String, Value>, &'static str> {
    if *action == Action::DiscoverAgents {
        if !is_directory_page(&value) {
            return Err(MALFORMED_DIRECTORY);
        }
        // `{**result, "status": "discovered"}`: every server field kept, `status` set.
        let mut page = value;
        page.insert("status".to_owned(), json!("discovered"));
        return Ok(page);
    }
    if !is_communicate_result(&value) {
        return Err(MALFORMED_RESULT);
    }
    let status = value
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    match action {
        Action::DiscoverAgents => Err(MALFORMED_DIRECTORY),
        Action::MessageExisting | Action::StartDirect => match status.as_str() {
            "messaged" => Ok(pick(
                &value,
                &["status", "conversationId", "messageId", "created", "reused"],
            )),
            "requested" | "pending" => Ok(pick(&value, &["status", "requestId"])),
            "blocked" | "unavailable" | "setup_required" | "no_session" => {
                Ok(pick(&value, &["status", "reason"]))
            }
            _ => Err(UNSUPPORTED_RESULT),
        },
        Action::CreateGroup => Ok(value),
        // [target] runtime-control.md Q7: a result other than `forwarded` is malformed (the
        // reference crashes with the text `'messageId'`).
        Action::ForwardMessage if status == "forwarded" => Ok(pick(
            &value,
            &["status", "messageId", "targetConversationId"],
        )),
        Action::ForwardMessage => Err(MALFORMED_RESULT),
        Action::ShareContact { conversation_id } if status == "shared" => Ok(object(vec![
            ("status", Some(json!("shared"))),
            ("conversationId", Some(json!(conversation_id))),
            ("messageId", value.get("messageId").cloned()),
        ])),
        Action::ShareContact { .. } => Err(MALFORMED_RESULT),
        Action::ManageGroupMembers {
            conversation_id,
            user_id,
            add,
        } => {
            let expected = if *add { "added" } else { "removed" };
            if status == "pending" {
                Ok(pick(&value, &["status", "requestId"]))
            } else if status == expected {
                Ok(object(vec![
                    ("status", Some(json!(expected))),
                    ("conversationId", Some(json!(conversation_id))),
                    ("userId", Some(json!(user_id))),
                ]))
            } else {
                Err(MALFORMED_RESULT)
            }
        }
    }
}

#[cfg(test)]
mod tests;
