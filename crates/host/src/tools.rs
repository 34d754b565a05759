//! The model-facing Canon tools (runtime-control.md §2–§4): their schemas and descriptions,
//! which the daemon owns and `install` lists in the shim's manifest; the check of a call's
//! arguments against its JSON Schema before anything reaches Canon; and `canon_runtime_control`
//! as pure decisions — what a call asks Canon (one runtime interaction to create, then maybe a
//! wait for its answer) and the exact result string the model gets back.
//!
//! The flow of one call: [`plan_runtime_control`] gives either an answer right away
//! ([`Plan::Answer`]: an argument error, an invalid card, no conversation) or a
//! [`ToolInteraction`] to create. When Canon answered the create call,
//! [`ToolInteraction::after_create`] says whether the call is answered now (a displayed card,
//! a failed create) or waits for the human with a consume poll; [`ToolInteraction::after_wait`]
//! maps how the wait ended to the result. Routing comes only from the call's trusted turn
//! context (runtime-control.md §1, §6): the model's `responseUserId` is ignored.
//!
//! `no_reply` is decided by the turn machine (`crate::turn`); `request_approval` and
//! `check_approval` belong to the durable detached-approval registry, which the shell runs
//! ([`Plan::Detached`], planned in `crate::detached`).

use std::sync::OnceLock;
use std::time::Duration;

use canon_wire::types::{
    CardRequest, Choice, ConsumeInteraction, InputRequest, InteractionCreated, InteractionKind,
    InteractionRequest, InteractionResult,
};
use serde_json::{json, Map, Value};

use crate::protocol::{ToolCall, TurnContext, PLATFORM};
use crate::requests::RUNTIME_CONTROL_TOOL;

/// The `canon_runtime_control` function schema Hermes shows the model: `name`, `description`
/// and `parameters` (the JSON Schema the arguments are checked against).
pub const RUNTIME_CONTROL_SCHEMA: &str = include_str!("../assets/tools/canon_runtime_control.json");

/// The toolset of the Canon tools (runtime-control.md §4.1), also the platform's name, so
/// Hermes' `hermes-canon` toolset includes them.
pub const TOOLSET: &str = "canon";
/// The alias toolset name that maps to [`TOOLSET`] (runtime-control.md §4.1).
pub const TOOLSET_ALIAS: &str = "canon_runtime";

/// The blocking human-in-the-loop ceiling of cards and inputs (runtime-control.md §4.4).
pub const HITL_MAX_TIMEOUT_S: u64 = 1800;
/// The default wait of cards and inputs (runtime-control.md §4.4).
pub const HITL_DEFAULT_TIMEOUT_S: u64 = 300;
/// The shortest wait of every flow (runtime-control.md §4.4).
pub const MIN_TIMEOUT_S: u64 = 5;

/// runtime-control.md §4.11, with `check_card` (durable-endpoint.md §10.6) among the actions.
pub const UNKNOWN_ACTION: &str = "action must be one of request_card, send_card, request_input, request_approval, check_approval, check_card, or no_reply";
/// runtime-control.md §4.11, exact.
pub const CARD_NOT_OBJECT: &str = "card must be a canon.card.v1 object";
/// runtime-control.md §4.11, exact.
pub const MISSING_INPUT_ID: &str = "inputId is required for request_input";
/// runtime-control.md §4.11, exact.
pub const NO_CREDENTIALS: &str = "Canon agent credentials are not configured";
/// runtime-control.md §4.11, exact.
pub const NO_CARD_ID: &str = "Canon runtime-card request did not return a card id";
/// runtime-control.md §3, exact.
pub const EMPTY_TARGET: &str = "Canon target must include a conversation id";
/// runtime-control.md §3, exact.
pub const NO_CONVERSATION: &str = "No Canon conversation id found. Run inside a Canon conversation or pass target='canon:<conversation_id>'.";
/// runtime-control.md §4.6 step 11 and §7.3, exact.
pub const DIFFERENT_HUMAN: &str = "Canon card was answered by a different human";
/// runtime-control.md §4.6 step 11 and §7.3, exact.
pub const NO_RESPONDER_IDENTITY: &str =
    "Canon submitted a card response without authenticated responder identity";
/// runtime-control.md §7.3 step 5, exact.
pub const OTHER_RESPONDER: &str =
    "Canon returned a responder different from the trusted turn human";
/// runtime-control.md §7.3 step 2, exact.
pub const HELPER_NEEDS_ACTIONS: &str =
    "request_card_for_current_human requires at least one action";
/// runtime-control.md §7.4, exact.
pub const HELPER_NEEDS_ACTIONLESS: &str = "send_card_to_current_conversation only accepts actionless cards; use request_card_for_current_human for interactive cards";

/// runtime-control.md §7.5, exact.
pub const UPLOAD_NEEDS_MIME: &str = "mime_type is required";
/// runtime-control.md §7.5, exact.
pub const UPLOAD_NEEDS_DATA: &str = "data must not be empty";
/// runtime-control.md §7.5, exact.
pub const UPLOAD_TOO_LARGE: &str = "Canon media upload limit is 10MB";

/// How long the shim waits for a `canon_runtime_control` call: the human-in-the-loop ceiling
/// and a minute more (hermes-host.md §19.6).
pub const RUNTIME_CONTROL_CALL_TIMEOUT_S: u64 = HITL_MAX_TIMEOUT_S + 60;

/// The tools of the manifest `install` writes (hermes-host.md §19, `manifest.json` `tools`):
/// name, toolset, the function schema, the description, the emoji, and which availability check
/// the shim runs (`credentials`: a Canon agent key resolves for the profile; `communication`: the
/// daemon's latest `tool.availability` verdict for the tool, runtime-control.md §5.1).
pub fn manifest_tools() -> Value {
    let schema = runtime_control_schema();
    let communicate = crate::communicate::communicate_schema();
    json!([{
        "name": RUNTIME_CONTROL_TOOL,
        "toolset": TOOLSET,
        "schema": schema,
        "description": schema.get("description").cloned().unwrap_or(Value::Null),
        "emoji": "C",
        "check": "credentials",
        "timeout_s": RUNTIME_CONTROL_CALL_TIMEOUT_S,
    }, {
        "name": crate::communicate::COMMUNICATE_TOOL,
        "toolset": TOOLSET,
        "schema": communicate,
        "description": communicate.get("description").cloned().unwrap_or(Value::Null),
        "emoji": "C",
        "check": "communication",
        "timeout_s": crate::communicate::COMMUNICATE_CALL_TIMEOUT_S,
    }])
}

/// The parsed [`RUNTIME_CONTROL_SCHEMA`].
pub fn runtime_control_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| serde_json::from_str(RUNTIME_CONTROL_SCHEMA).unwrap_or(Value::Null))
}

fn runtime_control_validator() -> Option<&'static jsonschema::Validator> {
    static VALIDATOR: OnceLock<Option<jsonschema::Validator>> = OnceLock::new();
    VALIDATOR
        .get_or_init(|| {
            let parameters = runtime_control_schema().get("parameters")?;
            jsonschema::validator_for(parameters).ok()
        })
        .as_ref()
}

/// The first way `args` break the tool's JSON Schema, as one line naming the argument
/// (`timeoutSeconds: "soon" is not of type "integer"`), or `None` when they fit.
pub fn schema_error(args: &Value) -> Option<String> {
    let Some(validator) = runtime_control_validator() else {
        return Some("the canon_runtime_control schema did not load".to_owned());
    };
    let error = validator.iter_errors(args).next()?;
    let path = error.instance_path().to_string();
    let place = path.trim_start_matches('/');
    Some(if place.is_empty() {
        error.to_string()
    } else {
        format!("{place}: {error}")
    })
}

/// The success envelope (runtime-control.md §2): `success` first, then `fields` in order.
pub fn success(fields: Map<String, Value>) -> String {
    let mut out = Map::new();
    out.insert("success".into(), Value::Bool(true));
    for (k, v) in fields {
        if k != "success" {
            out.insert(k, v);
        }
    }
    Value::Object(out).to_string()
}

/// The failure envelope (runtime-control.md §2).
pub fn failure(message: &str) -> String {
    json!({"error": message, "success": false}).to_string()
}

/// Timeout normalization (runtime-control.md §4.4): the value read the way Python's `int()`
/// reads it (JSON integers; floats truncated toward zero; decimal-integer strings with an
/// optional sign, surrounding whitespace and single underscores between digits; `true`/`false`
/// as 1/0), `default` when it cannot be read, then clamped to `[5, max]` seconds.
pub fn normalize_timeout(value: Option<&Value>, default: u64, max: u64) -> u64 {
    let parsed: Option<i128> = match value {
        Some(Value::Bool(b)) => Some(i128::from(*b)),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite())
                    // Truncation toward zero is `int(float)`; the clamp below bounds it.
                    .map(|f| f.trunc().clamp(-1e30, 1e30) as i128)
            }),
        Some(Value::String(s)) => python_int(s),
        _ => None,
    };
    let seconds = parsed.unwrap_or(i128::from(default));
    let clamped = seconds.clamp(
        i128::from(MIN_TIMEOUT_S),
        i128::from(max.max(MIN_TIMEOUT_S)),
    );
    u64::try_from(clamped).unwrap_or(max)
}

/// Python's `int(text)` for base 10: surrounding whitespace, an optional sign, digits with
/// single underscores between them.
fn python_int(text: &str) -> Option<i128> {
    let t = text.trim();
    let (negative, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let mut value: i128 = 0;
    for c in digits.chars() {
        if c == '_' {
            continue;
        }
        let d = c.to_digit(10)?;
        value = value.saturating_mul(10).saturating_add(i128::from(d));
    }
    Some(if negative { -value } else { value })
}

/// The trimmed, non-empty string at `key`.
fn arg_str<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Whether the context is a Canon turn (runtime-control.md §1: platform `canon`, trimmed,
/// any letter case).
pub fn is_canon_turn(ctx: &TurnContext) -> bool {
    ctx.platform
        .as_deref()
        .is_some_and(|p| p.trim().eq_ignore_ascii_case(PLATFORM))
}

fn trimmed(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The trusted triggering human of a Canon turn (runtime-control.md §1).
pub fn trusted_user_id(ctx: &TurnContext) -> Option<String> {
    is_canon_turn(ctx)
        .then(|| trimmed(ctx.user_id.as_deref()))
        .flatten()
}

/// The conversation of a Canon turn (runtime-control.md §1).
pub fn turn_conversation_id(ctx: &TurnContext) -> Option<String> {
    is_canon_turn(ctx)
        .then(|| trimmed(ctx.chat_id.as_deref()))
        .flatten()
}

/// Conversation targeting (runtime-control.md §3): an explicit target (`canon:` stripped), else
/// the turn's conversation, else the home channel.
pub fn resolve_conversation(
    target: Option<&str>,
    ctx: &TurnContext,
    home_channel: Option<&str>,
) -> Result<String, &'static str> {
    if let Some(target) = target.map(str::trim).filter(|t| !t.is_empty()) {
        let id = target.strip_prefix("canon:").unwrap_or(target).trim();
        return if id.is_empty() {
            Err(EMPTY_TARGET)
        } else {
            Ok(id.to_owned())
        };
    }
    turn_conversation_id(ctx)
        .or_else(|| trimmed(home_channel))
        .ok_or(NO_CONVERSATION)
}

/// Whether a card has an actions block with at least one action (runtime-control.md §4.6
/// step 8).
pub fn card_has_actions(card: &Value) -> bool {
    card.get("blocks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|block| {
            block.get("kind").and_then(Value::as_str) == Some("actions")
                && block
                    .get("actions")
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty())
        })
}

/// Whether a runtime input is asked of the owner only (runtime-control.md §6.2): kind `secret`
/// or `sudo` (trimmed, any case), `sensitive`, or a question object with `isSecret: true`;
/// question items that are not objects are ignored.
pub fn is_owner_only_input(kind: &str, sensitive: bool, questions: Option<&[Value]>) -> bool {
    let kind = kind.trim().to_lowercase();
    kind == "secret"
        || kind == "sudo"
        || sensitive
        || questions
            .into_iter()
            .flatten()
            .any(|q| q.get("isSecret") == Some(&Value::Bool(true)))
}

/// What one `canon_runtime_control` call needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Answer the call with this result string now.
    Answer(String),
    /// `no_reply`: the turn machine decides.
    NoReply,
    /// Create this interaction on Canon.
    Interact(Box<ToolInteraction>),
    /// `request_approval` or `check_approval`: the shell runs it against the durable
    /// detached-approval registry (`crate::detached`).
    Detached(Box<crate::detached::DetachedCall>),
    /// An interactive card of `request_card`/`send_card`, or `check_card`: the shell runs it
    /// against the durable card waits (`crate::card_waits`).
    CardWait(Box<crate::card_waits::CardWaitCall>),
}

/// Which interaction-creating action a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InteractionAction {
    /// `send_card`: show a card, never wait.
    SendCard,
    /// `request_card`: show a card and wait for its answer when it is interactive.
    RequestCard,
    /// `request_input`: ask and wait.
    RequestInput,
}

/// A runtime interaction a tool call creates, and what to do with its answers.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInteraction {
    /// Which action.
    pub action: InteractionAction,
    /// The conversation.
    pub conversation_id: String,
    /// The create call.
    pub request: InteractionRequest,
    /// The consume poll (its id is replaced by the card id Canon returns).
    pub consume: ConsumeInteraction,
    /// How long Canon waits for the human.
    pub timeout: Duration,
    /// The responder sent, if any (the answer must come from them).
    pub responder: Option<String>,
    /// The card has an actions block (cards only).
    pub has_actions: bool,
    /// The card id known before the create call (the argument, else the card's own).
    pub card_id: Option<String>,
    /// Canon must name the responder sent as the card's responder (the domain-plugin helper
    /// `request_card_for_current_human`, runtime-control.md §7.3 step 5).
    pub strict_responder: bool,
}

/// Plans one `canon_runtime_control` call (runtime-control.md §4.3–§4.7). `now_ms` fixes
/// `expiresAt`; `home_channel` is `CANON_HOME_CHANNEL`.
pub fn plan_runtime_control(call: &ToolCall, home_channel: Option<&str>, now_ms: u64) -> Plan {
    let args = &call.args.0;
    let action = args
        .get("action")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or("");
    let known = [
        "request_card",
        "send_card",
        "request_input",
        "request_approval",
        "check_approval",
        "check_card",
        "no_reply",
    ];
    if !known.contains(&action) {
        return Plan::Answer(failure(UNKNOWN_ACTION));
    }
    if let Some(error) = schema_error(args) {
        return Plan::Answer(failure(&format!(
            "Invalid canon_runtime_control arguments: {error}"
        )));
    }
    let result = match action {
        "no_reply" => return Plan::NoReply,
        "send_card" => plan_card(
            args,
            &call.ctx,
            home_channel,
            now_ms,
            InteractionAction::SendCard,
        ),
        "request_card" => plan_card(
            args,
            &call.ctx,
            home_channel,
            now_ms,
            InteractionAction::RequestCard,
        ),
        "request_input" => plan_input(args, &call.ctx, home_channel, now_ms),
        "check_card" => {
            return match crate::card_waits::plan_check(args, &call.ctx, home_channel) {
                Ok(check) => Plan::CardWait(Box::new(check)),
                Err(error) => Plan::Answer(failure(&error)),
            }
        }
        "request_approval" => {
            return detached_plan(crate::detached::plan_tool_request(
                args,
                &call.ctx,
                home_channel,
            ))
        }
        _ => return detached_plan(crate::detached::plan_tool_check(args, &call.ctx)),
    };
    match result {
        // An interactive card is kept durably and waited for a bounded time
        // (durable-endpoint.md §10.5); everything else is one interaction.
        Ok(interaction)
            if interaction.has_actions
                && matches!(
                    interaction.action,
                    InteractionAction::RequestCard | InteractionAction::SendCard
                ) =>
        {
            Plan::CardWait(Box::new(crate::card_waits::CardWaitCall::Request(
                Box::new(interaction),
            )))
        }
        Ok(interaction) => Plan::Interact(Box::new(interaction)),
        Err(error) => Plan::Answer(failure(&error)),
    }
}

fn detached_plan(planned: Result<crate::detached::DetachedCall, String>) -> Plan {
    match planned {
        Ok(call) => Plan::Detached(Box::new(call)),
        Err(error) => Plan::Answer(failure(&error)),
    }
}

fn expires_at(now_ms: u64, timeout_s: u64) -> u64 {
    now_ms.saturating_add(timeout_s.saturating_mul(1000))
}

fn plan_card(
    args: &Value,
    ctx: &TurnContext,
    home_channel: Option<&str>,
    now_ms: u64,
    action: InteractionAction,
) -> Result<ToolInteraction, String> {
    let card = match args.get("card") {
        Some(card @ Value::Object(_)) => card.clone(),
        _ => return Err(CARD_NOT_OBJECT.to_owned()),
    };
    let validation = canon_cards::validate_card(&card);
    if let Some(first) = validation.errors.first() {
        return Err(format!(
            "Invalid canon.card.v1: {first}. Fix the card structure before retrying; do NOT resend the same payload — it will fail identically."
        ));
    }
    let conversation_id = resolve_conversation(
        args.get("target").and_then(Value::as_str),
        ctx,
        home_channel,
    )
    .map_err(str::to_owned)?;
    let timeout_s = normalize_timeout(
        args.get("timeoutSeconds"),
        HITL_DEFAULT_TIMEOUT_S,
        HITL_MAX_TIMEOUT_S,
    );
    let card_id = arg_str(args, "cardId")
        .or_else(|| arg_str(&card, "cardId"))
        .map(str::to_owned);
    let request = CardRequest {
        conversation_id,
        card,
        card_id,
        expires_at: Some(expires_at(now_ms, timeout_s)),
        response_user_id: trusted_user_id(ctx),
        runtime_id: arg_str(args, "runtimeId").map(str::to_owned),
        turn_id: arg_str(args, "turnId").map(str::to_owned),
        native: None,
    };
    Ok(card_interaction(action, request, timeout_s, false))
}

/// The interaction of a card create call: its consume poll, responder, card id and whether it
/// has actions all come from the request itself.
fn card_interaction(
    action: InteractionAction,
    request: CardRequest,
    timeout_s: u64,
    strict_responder: bool,
) -> ToolInteraction {
    ToolInteraction {
        action,
        consume: ConsumeInteraction {
            kind: InteractionKind::Card,
            conversation_id: request.conversation_id.clone(),
            id: request.card_id.clone().unwrap_or_default(),
            cancel: false,
        },
        conversation_id: request.conversation_id.clone(),
        timeout: Duration::from_secs(timeout_s),
        responder: request.response_user_id.clone(),
        has_actions: card_has_actions(&request.card),
        card_id: request.card_id.clone(),
        request: InteractionRequest::Card(request),
        strict_responder,
    }
}

/// A choice object as Canon's `{label, value}` (label: `label`, `text` or `value`; value:
/// `value` or the label); items that give no label are dropped.
fn choice_of(item: &Value) -> Option<Choice> {
    let text = |key: &str| {
        item.get(key)
            .and_then(|v| match v {
                Value::String(s) => Some(s.trim().to_owned()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .filter(|s| !s.is_empty())
    };
    let label = text("label")
        .or_else(|| text("text"))
        .or_else(|| text("value"))?;
    Some(Choice {
        value: text("value").unwrap_or_else(|| label.clone()),
        label,
        description: text("description"),
    })
}

fn plan_input(
    args: &Value,
    ctx: &TurnContext,
    home_channel: Option<&str>,
    now_ms: u64,
) -> Result<ToolInteraction, String> {
    let input_id = arg_str(args, "inputId").ok_or(MISSING_INPUT_ID)?.to_owned();
    let conversation_id = resolve_conversation(
        args.get("target").and_then(Value::as_str),
        ctx,
        home_channel,
    )
    .map_err(str::to_owned)?;
    let timeout_s = normalize_timeout(
        args.get("timeoutSeconds"),
        HITL_DEFAULT_TIMEOUT_S,
        HITL_MAX_TIMEOUT_S,
    );
    let kind = args
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("clarify")
        .to_owned();
    let sensitive = args.get("sensitive").and_then(Value::as_bool);
    let questions: Option<Vec<Value>> = args
        .get("questions")
        .and_then(Value::as_array)
        .filter(|q| !q.is_empty())
        .cloned();
    let choices: Option<Vec<Choice>> = args
        .get("choices")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(choice_of).collect::<Vec<_>>())
        .filter(|c| !c.is_empty());
    let owner_only = is_owner_only_input(&kind, sensitive == Some(true), questions.as_deref());
    let responder = if owner_only {
        None
    } else {
        trusted_user_id(ctx)
    };
    let request = InputRequest {
        conversation_id: conversation_id.clone(),
        input_id: input_id.clone(),
        kind,
        expires_at: expires_at(now_ms, timeout_s),
        title: arg_str(args, "title").map(str::to_owned),
        prompt: arg_str(args, "prompt").map(str::to_owned),
        choices,
        questions,
        response_user_id: responder.clone(),
        native: None,
        sensitive,
        turn_id: arg_str(args, "turnId").map(str::to_owned),
    };
    Ok(ToolInteraction {
        action: InteractionAction::RequestInput,
        consume: ConsumeInteraction {
            kind: InteractionKind::Input,
            conversation_id: conversation_id.clone(),
            id: input_id,
            cancel: false,
        },
        conversation_id,
        request: InteractionRequest::Input(request),
        timeout: Duration::from_secs(timeout_s),
        responder,
        has_actions: false,
        card_id: None,
        strict_responder: false,
    })
}

/// What follows Canon's answer to the create call.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterCreate {
    /// The call is answered with this result now; nothing is polled.
    Answer(String),
    /// Poll this consume until the human answers or the deadline passes.
    Wait(ConsumeInteraction),
}

/// How a tool's wait for the human ended.
#[derive(Debug, Clone, PartialEq)]
pub enum WaitOutcome {
    /// Canon reported a status other than `pending`.
    Answered(InteractionResult),
    /// The deadline passed (a cancel consume was sent).
    TimedOut,
    /// A consume failed for good (its safe error text).
    Failed(String),
}

impl ToolInteraction {
    /// The card id after the create call (runtime-control.md §4.6 step 7): Canon's `cardId`,
    /// else the one known before; trimmed.
    fn effective_card_id(&self, created: &InteractionCreated) -> Option<String> {
        trimmed(created.card_id.as_deref()).or_else(|| trimmed(self.card_id.as_deref()))
    }

    /// What follows the create call (runtime-control.md §4.6 steps 7–10, §4.7 step 5): a
    /// failed create answers with its error; `send_card` and a card that is not interactive
    /// (Canon's `interactive`, else whether it has actions) answer `displayed`; an interactive
    /// card without a card id fails; otherwise the wait starts.
    pub fn after_create(&self, created: Result<&InteractionCreated, &str>) -> AfterCreate {
        let created = match created {
            Ok(created) => created,
            Err(error) => return AfterCreate::Answer(failure(error)),
        };
        match self.action {
            InteractionAction::RequestInput => AfterCreate::Wait(self.consume.clone()),
            InteractionAction::SendCard | InteractionAction::RequestCard => {
                if self.strict_responder {
                    let named = trimmed(created.response_user_id.as_deref());
                    if named.is_some() && named != self.responder {
                        return AfterCreate::Answer(failure(OTHER_RESPONDER));
                    }
                }
                let card_id = self.effective_card_id(created);
                let interactive = created.interactive.unwrap_or(self.has_actions);
                if self.action == InteractionAction::SendCard || !interactive {
                    let mut fields = Map::new();
                    fields.insert("status".into(), "displayed".into());
                    fields.insert("conversationId".into(), self.conversation_id.clone().into());
                    fields.insert("cardId".into(), card_id.map_or(Value::Null, Value::from));
                    if let Some(r) = &created.response_user_id {
                        fields.insert("responseUserId".into(), r.clone().into());
                    }
                    fields.insert("request".into(), Value::Object(created.raw.clone()));
                    return AfterCreate::Answer(success(fields));
                }
                match card_id {
                    Some(id) => AfterCreate::Wait(ConsumeInteraction {
                        id,
                        ..self.consume.clone()
                    }),
                    None => AfterCreate::Answer(failure(NO_CARD_ID)),
                }
            }
        }
    }

    /// The result of a wait (runtime-control.md §4.6 step 10, §4.7 step 5): Canon's consume
    /// response with `conversationId` (and for cards `responseUserId` from the create call)
    /// added when missing; a submitted card answered by someone other than the responder sent
    /// fails (runtime-control.md §4.6 step 11); the deadline gives `timeout`.
    pub fn after_wait(&self, created: &InteractionCreated, outcome: WaitOutcome) -> String {
        let id_key = match self.action {
            InteractionAction::RequestInput => "inputId",
            _ => "cardId",
        };
        let id = match self.action {
            InteractionAction::RequestInput => Some(self.consume.id.clone()),
            _ => self.effective_card_id(created),
        };
        match outcome {
            WaitOutcome::Failed(error) => failure(&error),
            WaitOutcome::TimedOut => {
                let mut fields = Map::new();
                fields.insert("status".into(), "timeout".into());
                fields.insert("conversationId".into(), self.conversation_id.clone().into());
                fields.insert(id_key.into(), id.map_or(Value::Null, Value::from));
                success(fields)
            }
            WaitOutcome::Answered(result) => {
                if self.action != InteractionAction::RequestInput && result.status == "submitted" {
                    if let Some(expected) = &self.responder {
                        match result.responded_by.as_deref() {
                            None => return failure(NO_RESPONDER_IDENTITY),
                            Some(by) if by != expected => return failure(DIFFERENT_HUMAN),
                            Some(_) => {}
                        }
                    }
                }
                let mut fields = result.raw.clone();
                fields
                    .entry("conversationId")
                    .or_insert_with(|| self.conversation_id.clone().into());
                if self.action != InteractionAction::RequestInput {
                    if let Some(r) = &created.response_user_id {
                        fields
                            .entry("responseUserId")
                            .or_insert_with(|| r.clone().into());
                    }
                }
                success(fields)
            }
        }
    }
}

/// Whether a card has an actions block at all (runtime-control.md §7.4: an actionless card
/// has none, even an empty one).
fn has_actions_block(card: &Value) -> bool {
    card.get("blocks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|block| block.get("kind").and_then(Value::as_str) == Some("actions"))
}

/// Which card helper of the domain-plugin API a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardHelper {
    /// `request_card_for_current_human` (runtime-control.md §7.3).
    RequestForCurrentHuman,
    /// `send_card_to_current_conversation` (runtime-control.md §7.4).
    SendToCurrentConversation,
}

/// Plans a card helper of the domain-plugin API, in the order of its rules
/// (runtime-control.md §7.3 and §7.4): the card (an object, valid — every error, joined by
/// `; `), its actions, then the
/// trusted turn (the conversation, and for a request the triggering human), never arguments.
/// `args` holds `card`, `timeout_seconds` and `native`.
pub fn plan_card_helper(
    helper: CardHelper,
    args: &Value,
    ctx: &TurnContext,
    now_ms: u64,
) -> Result<ToolInteraction, String> {
    let card = match args.get("card") {
        Some(card @ Value::Object(_)) => card.clone(),
        _ => return Err(CARD_NOT_OBJECT.to_owned()),
    };
    let validation = canon_cards::validate_card(&card);
    if !validation.errors.is_empty() {
        return Err(format!(
            "Invalid canon.card.v1: {}",
            validation.errors.join("; ")
        ));
    }
    match helper {
        CardHelper::RequestForCurrentHuman if !card_has_actions(&card) => {
            return Err(HELPER_NEEDS_ACTIONS.to_owned())
        }
        CardHelper::SendToCurrentConversation if has_actions_block(&card) => {
            return Err(HELPER_NEEDS_ACTIONLESS.to_owned())
        }
        _ => {}
    }
    let conversation_id = turn_conversation_id(ctx).ok_or(crate::api::NO_CANON_CONVERSATION)?;
    let (action, responder, timeout_s) = match helper {
        CardHelper::RequestForCurrentHuman => (
            InteractionAction::RequestCard,
            Some(trusted_user_id(ctx).ok_or(crate::api::NO_TRUSTED_HUMAN)?),
            normalize_timeout(
                args.get("timeout_seconds"),
                HITL_DEFAULT_TIMEOUT_S,
                HITL_MAX_TIMEOUT_S,
            ),
        ),
        CardHelper::SendToCurrentConversation => {
            (InteractionAction::SendCard, None, HITL_DEFAULT_TIMEOUT_S)
        }
    };
    let request = CardRequest {
        conversation_id,
        card_id: arg_str(&card, "cardId").map(str::to_owned),
        card,
        expires_at: Some(expires_at(now_ms, timeout_s)),
        response_user_id: responder,
        runtime_id: None,
        turn_id: None,
        native: args.get("native").and_then(Value::as_object).cloned(),
    };
    let strict = helper == CardHelper::RequestForCurrentHuman;
    Ok(card_interaction(action, request, timeout_s, strict))
}

/// A tool result envelope (runtime-control.md §2) as the domain-plugin API returns it: the
/// fields without `success`, or the error the function raises.
pub fn envelope_to_api(result: &str) -> Result<Value, String> {
    let mut value: Value = serde_json::from_str(result).map_err(|e| e.to_string())?;
    if value.get("success") == Some(&Value::Bool(false)) {
        return Err(value
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("Canon request failed")
            .to_owned());
    }
    if let Some(map) = value.as_object_mut() {
        map.remove("success");
    }
    Ok(value)
}

#[cfg(test)]
mod tests;
