//! Runtime interactions (canon-wire.md §4.12, §4.13, §11.3): request validation per kind,
//! single-use ids, deadlines and ceilings, responder rules, consume with cancel and expiry, and
//! the 72 h approval tombstones (canon-wire.md §0.1 D5). Answers come from the control API
//! ([`respond`]), which also emits the receipts of canon-wire.md §11.4.

use serde_json::{json, Map, Value};

use crate::checks::{chars, is_wire_id, require_member};
use crate::config::ApprovalCapMode;
use crate::http::{body_object, required_str, ApiRequest, Handled, Reply};
use crate::state::{EmitOverrides, Interaction, NewMessage, State, TOMBSTONE_TTL_MS};

// The control-API answer is defined with the state model, which keeps the answers scheduled for
// later; it is re-exported here so that `canon_sim::interactions::Response` keeps working.
pub use crate::state::Response;

/// Input and card deadline ceiling (30 min).
pub const SHORT_CEILING_MS: u64 = 30 * 60 * 1000;
/// Approval deadline ceiling (72 h).
pub const APPROVAL_CEILING_MS: u64 = 72 * 3600 * 1000;
/// Minimum lead of a deadline (1 s).
pub const MIN_LEAD_MS: u64 = 1000;

const NATIVE_KEYS: [&str; 15] = [
    "runtime",
    "method",
    "requestId",
    "provider",
    "origin",
    "surface",
    "threadId",
    "turnId",
    "runId",
    "itemId",
    "toolCallId",
    "approvalId",
    "pluginId",
    "sessionKey",
    "nodeId",
];

fn bad(code: &str, message: &str) -> Reply {
    Reply::error(400, code, message)
}

fn native_value_ok(key: &str, v: &str) -> bool {
    let mut chars_iter = v.chars();
    let Some(first) = chars_iter.next() else {
        return false;
    };
    if v.chars().count() > 256 {
        return false;
    }
    let first_ok = if key == "method" {
        first.is_ascii_alphanumeric() || first == '_'
    } else {
        first.is_ascii_alphanumeric() || first == '@' || first == '_'
    };
    let rest_ok = chars_iter.all(|c| {
        c.is_ascii_alphanumeric()
            || if key == "method" {
                matches!(c, '_' | '.' | '/' | ':' | '-')
            } else {
                matches!(c, '_' | '.' | ':' | '@' | '+' | '-')
            }
    });
    first_ok && rest_ok
}

/// Drops invalid `native` entries (canon-wire.md §4.12.1; REST paths drop, never reject).
pub fn normalize_native(value: Option<&Value>) -> Option<Value> {
    let obj = value?.as_object()?;
    let mut out = Map::new();
    for (k, v) in obj {
        if k == "handles" {
            if let Some(items) = v.as_array() {
                let list: Vec<Value> = items
                    .iter()
                    .filter(|x| x.is_string())
                    .take(16)
                    .cloned()
                    .collect();
                out.insert(k.clone(), Value::Array(list));
            }
        } else if NATIVE_KEYS.contains(&k.as_str()) {
            if let Some(s) = v.as_str().filter(|s| native_value_ok(k, s)) {
                out.insert(k.clone(), json!(s));
            }
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

fn check_len(obj: &Map<String, Value>, key: &str, max: usize) -> Handled<()> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if chars(s) <= max => Ok(()),
        Some(_) => Err(bad(
            "FIELD_TOO_LONG",
            &format!("{key} exceeds {max} characters"),
        )),
    }
}

fn check_choices(list: Option<&Value>) -> Handled<()> {
    let Some(list) = list else { return Ok(()) };
    let items = list
        .as_array()
        .ok_or_else(|| bad("INVALID_CHOICES", "choices must be an array"))?;
    if items.len() > 12 {
        return Err(bad("INVALID_CHOICES", "at most 12 choices"));
    }
    for c in items {
        let obj = c
            .as_object()
            .ok_or_else(|| bad("INVALID_CHOICES", "choice must be an object"))?;
        if !obj.get("label").is_some_and(Value::is_string)
            || !obj.get("value").is_some_and(Value::is_string)
        {
            return Err(bad("INVALID_CHOICES", "choice needs label and value"));
        }
        check_len(obj, "label", 120)?;
        check_len(obj, "value", 200)?;
        check_len(obj, "description", 300)?;
    }
    Ok(())
}

fn check_questions(list: Option<&Value>) -> Handled<bool> {
    let Some(list) = list else { return Ok(false) };
    let items = list
        .as_array()
        .ok_or_else(|| bad("INVALID_QUESTIONS", "questions must be an array"))?;
    if items.len() > 12 {
        return Err(bad("INVALID_QUESTIONS", "at most 12 questions"));
    }
    let mut secret = false;
    for q in items {
        let obj = q
            .as_object()
            .ok_or_else(|| bad("INVALID_QUESTIONS", "question must be an object"))?;
        let id = obj.get("id").and_then(Value::as_str).unwrap_or("");
        if !is_wire_id(id, 120) {
            return Err(bad("INVALID_QUESTIONS", "question id is invalid"));
        }
        if !obj.get("question").is_some_and(Value::is_string) {
            return Err(bad("INVALID_QUESTIONS", "question text is required"));
        }
        check_len(obj, "question", 1000)?;
        check_len(obj, "header", 120)?;
        check_choices(obj.get("choices"))?;
        secret |= obj.get("isSecret") == Some(&Value::Bool(true));
    }
    Ok(secret)
}

/// The owner of `agent` when a member of `conversation`, else the sole human member.
fn default_responder(state: &State, agent: &str, conversation: &str) -> Option<String> {
    let conv = state.conversations.get(conversation)?;
    let owner = state.principals.get(agent).and_then(|p| p.owner_id.clone());
    if let Some(o) = owner.filter(|o| conv.member_ids.contains(o)) {
        return Some(o);
    }
    let humans: Vec<&String> = conv
        .member_ids
        .iter()
        .filter(|m| state.principals.get(*m).is_some_and(|p| p.kind == "human"))
        .collect();
    (humans.len() == 1).then(|| humans[0].clone())
}

/// `POST /runtime-interaction/request`.
pub fn request(state: &mut State, req: &ApiRequest, agent: &str) -> Handled<Reply> {
    let body = body_object(req)?;
    let conversation = required_str(&body, "conversationId")?.to_owned();
    require_member(state, agent, &conversation)?;
    let kind = body
        .get("interactionKind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let (id_key, id_max) = match kind.as_str() {
        "input" => ("inputId", 160),
        "card" => ("cardId", 80),
        "approval" => ("approvalId", 160),
        _ => {
            return Err(bad(
                "INVALID_INTERACTION_KIND",
                "interactionKind is invalid",
            ))
        }
    };
    let now = state.now();
    let id = match body.get(id_key) {
        Some(Value::String(s)) if is_wire_id(s, id_max) => s.clone(),
        None if kind == "card" => format!("card-{}", state.ids.hex(12)),
        _ => return Err(bad("INVALID_ID", &format!("{id_key} is invalid"))),
    };
    let key = (conversation.clone(), kind.clone(), id.clone());
    if state.interactions.len() >= crate::state::ENTITY_CAP {
        return Err(Reply::error(
            503,
            "SIM_CAPACITY",
            "interaction capacity reached",
        ));
    }
    if state.interactions.contains_key(&key) {
        return Err(Reply::error(
            409,
            "RUNTIME_REQUEST_EXISTS",
            "interaction id already used",
        ));
    }
    // Deadline.
    let ceiling = match (kind.as_str(), state.config.switches.approval_cap_mode) {
        ("approval", ApprovalCapMode::Legacy) => SHORT_CEILING_MS,
        ("approval", _) => APPROVAL_CEILING_MS,
        _ => SHORT_CEILING_MS,
    };
    let mut expires_at = match body.get("expiresAt") {
        Some(v) => v
            .as_u64()
            .ok_or_else(|| bad("INVALID_EXPIRES_AT", "expiresAt must be an integer"))?,
        None if kind == "card" => now + SHORT_CEILING_MS,
        None => return Err(bad("INVALID_EXPIRES_AT", "expiresAt is required")),
    };
    if expires_at < now + MIN_LEAD_MS {
        return Err(bad(
            "EXPIRES_AT_OUT_OF_RANGE",
            "expiresAt must be at least 1 s ahead",
        ));
    }
    if expires_at > now + ceiling {
        if kind == "approval" && state.config.switches.approval_cap_mode == ApprovalCapMode::Clamp {
            expires_at = now + ceiling;
        } else {
            return Err(bad(
                "EXPIRES_AT_OUT_OF_RANGE",
                "expiresAt exceeds the server ceiling",
            ));
        }
    }
    // Responder.
    let requested_responder = match body.get("responseUserId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            let human_member = state.conversations[&conversation].member_ids.contains(s)
                && state.principals.get(s).is_some_and(|p| p.kind == "human");
            if !human_member {
                return Err(bad(
                    "INVALID_RESPONDER",
                    "responseUserId must be a human member",
                ));
            }
            Some(s.clone())
        }
        Some(_) => return Err(bad("INVALID_RESPONDER", "responseUserId must be a string")),
    };
    let owner = state.principals.get(agent).and_then(|p| p.owner_id.clone());
    let mut interactive = None;
    let mut allow_session_rule = None;
    let mut owner_only = false;
    match kind.as_str() {
        "input" => {
            let input_kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
            if !matches!(input_kind, "clarify" | "sudo" | "secret") {
                return Err(bad(
                    "INVALID_INPUT_KIND",
                    "kind must be clarify, sudo or secret",
                ));
            }
            check_len(&body, "title", 160)?;
            check_len(&body, "prompt", 4000)?;
            check_choices(body.get("choices"))?;
            let secret_question = check_questions(body.get("questions"))?;
            owner_only = input_kind != "clarify"
                || body.get("sensitive") == Some(&Value::Bool(true))
                || secret_question;
        }
        "card" => {
            let card = body
                .get("card")
                .filter(|c| c.is_object())
                .ok_or_else(|| bad("INVALID_CARD", "card is required"))?;
            if card.to_string().len() > 32 * 1024 {
                return Err(bad("CARD_TOO_LARGE", "card exceeds 32 KiB"));
            }
            let card_obj = card.as_object().cloned().unwrap_or_default();
            check_len(&card_obj, "title", 200)?;
            check_len(&card_obj, "fallbackText", 2000)?;
            if card
                .get("blocks")
                .and_then(Value::as_array)
                .is_some_and(|b| b.len() > 64)
            {
                return Err(bad("INVALID_CARD", "at most 64 blocks"));
            }
            if state.config.switches.validate_cards {
                let verdict = canon_cards::validate_card(card);
                if !verdict.ok {
                    let errors = serde_json::to_value(&verdict).unwrap_or(Value::Null);
                    return Err(Reply::json(
                        400,
                        json!({"error": "invalid canon.card.v1", "code": "INVALID_CARD", "details": errors}),
                    ));
                }
            }
            interactive = Some(canon_cards::is_interactive(card));
        }
        _ => {
            let tool = required_str(&body, "toolName")?;
            if chars(tool) > 128 {
                return Err(bad("FIELD_TOO_LONG", "toolName exceeds 128 characters"));
            }
            if !body.get("toolSummary").is_some_and(Value::is_string) {
                return Err(bad("INVALID_REQUEST", "toolSummary is required"));
            }
            check_len(&body, "toolSummary", 1000)?;
            let value_max = if state.config.switches.lenient_details {
                4000
            } else {
                500
            };
            if let Some(details) = body.get("details") {
                let rows = details
                    .as_array()
                    .ok_or_else(|| bad("INVALID_DETAILS", "details must be an array"))?;
                if rows.len() > 8 {
                    return Err(bad("INVALID_DETAILS", "at most 8 detail rows"));
                }
                for row in rows {
                    let obj = row
                        .as_object()
                        .ok_or_else(|| bad("INVALID_DETAILS", "detail must be an object"))?;
                    check_len(obj, "label", 80)?;
                    check_len(obj, "value", value_max)?;
                }
            }
            owner_only = requested_responder.is_none();
        }
    }
    let response_user_id = if owner_only {
        owner
            .clone()
            .filter(|o| state.conversations[&conversation].member_ids.contains(o))
    } else {
        requested_responder.or_else(|| default_responder(state, agent, &conversation))
    };
    if kind == "approval" {
        let requested = body.get("allowSessionRule") == Some(&Value::Bool(true));
        allow_session_rule =
            Some(requested && response_user_id.is_some() && response_user_id == owner);
    }
    let mut descriptor = json!({
        "kind": kind,
        "requestId": id,
        "interactive": interactive.unwrap_or(kind != "card"),
        "expiresAt": expires_at,
    });
    if let Some(r) = &response_user_id {
        descriptor["responseUserId"] = json!(r);
    }
    let mut request_body = Value::Object(body.clone());
    if let Some(n) = normalize_native(body.get("native")) {
        request_body["native"] = n;
    } else if let Some(o) = request_body.as_object_mut() {
        o.remove("native");
    }
    let message = state.create_message(
        NewMessage {
            conversation_id: conversation.clone(),
            sender_id: agent.to_owned(),
            content_type: Some("interaction".to_owned()),
            interaction: Some(descriptor),
            ..NewMessage::default()
        },
        &EmitOverrides::default(),
    );
    let message_id = message["id"].as_str().unwrap_or_default().to_owned();
    state.interactions.insert(
        key,
        Interaction {
            kind: kind.clone(),
            id: id.clone(),
            conversation_id: conversation,
            agent: agent.to_owned(),
            request: request_body,
            expires_at,
            response_user_id: response_user_id.clone(),
            allow_session_rule,
            interactive,
            state: "pending".to_owned(),
            answer: None,
            responded_by: None,
            consumed_at: None,
            tombstone: None,
            message_id: message_id.clone(),
        },
    );
    let mut out = json!({
        "status": "accepted",
        "requestId": id,
        id_key: id,
        "messageId": message_id,
        "expiresAt": expires_at,
        "responseUserId": response_user_id,
    });
    if let Some(i) = interactive {
        out["interactive"] = json!(i);
    }
    if let Some(a) = allow_session_rule {
        out["allowSessionRule"] = json!(a);
    }
    Ok(Reply::ok(out))
}

fn not_found(kind: &str) -> Reply {
    if kind == "approval" {
        Reply::error(404, "RUNTIME_APPROVAL_NOT_FOUND", "approval not found")
    } else {
        Reply::error(
            404,
            "RUNTIME_INTERACTION_NOT_FOUND",
            "interaction not found",
        )
    }
}

/// `POST /runtime-interaction/consume`.
pub fn consume(state: &mut State, req: &ApiRequest, agent: &str) -> Handled<Reply> {
    let body = body_object(req)?;
    let conversation = required_str(&body, "conversationId")?.to_owned();
    require_member(state, agent, &conversation)?;
    let kind = body
        .get("interactionKind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let id_key = match kind.as_str() {
        "input" => "inputId",
        "card" => "cardId",
        "approval" => "approvalId",
        _ => {
            return Err(bad(
                "INVALID_INTERACTION_KIND",
                "interactionKind is invalid",
            ))
        }
    };
    let id = required_str(&body, id_key)?.to_owned();
    if state.config.switches.consume_conflict {
        return Err(Reply::error(
            409,
            "RUNTIME_INTERACTION_CONFLICT",
            "interaction consumed elsewhere",
        ));
    }
    let cancel = body.get("cancel") == Some(&Value::Bool(true));
    let now = state.now();
    let switches = state.config.switches.clone();
    let key = (conversation, kind.clone(), id);
    let item = state
        .interactions
        .get_mut(&key)
        .ok_or_else(|| not_found(&kind))?;
    if item.agent != agent {
        return Err(not_found(&kind));
    }
    let reply = match item.state.as_str() {
        "pending" if now > item.expires_at => {
            item.state = "expired".to_owned();
            json!({"status": "timeout"})
        }
        "pending" if cancel => {
            item.state = "cancelled".to_owned();
            json!({"status": "cancelled"})
        }
        "pending" => json!({"status": "pending", "expiresAt": item.expires_at}),
        "expired" => json!({"status": "timeout"}),
        "cancelled" => json!({"status": "cancelled"}),
        "answered" => {
            let mut result = item.answer.clone().unwrap_or_else(|| json!({}));
            if let Some(spoof) = &switches.consume_spoof_responded_by {
                result["respondedBy"] = json!(spoof);
            } else if !switches.consume_omit_responded_by {
                if let Some(r) = &item.responded_by {
                    result["respondedBy"] = json!(r);
                }
            }
            if kind == "approval" {
                result["expiresAt"] = json!(item.expires_at);
            }
            item.state = "consumed".to_owned();
            item.consumed_at = Some(now);
            item.tombstone = Some(result.clone());
            result
        }
        _ => {
            let within = item
                .consumed_at
                .is_some_and(|t| now.saturating_sub(t) <= TOMBSTONE_TTL_MS);
            match (&item.tombstone, kind.as_str()) {
                (Some(t), "approval") if within => {
                    let mut out = json!({"status": t["status"]});
                    if let Some(r) = t.get("respondedBy") {
                        out["respondedBy"] = r.clone();
                    }
                    out
                }
                (Some(t), "input" | "card") if switches.consume_replay => t.clone(),
                _ => return Err(not_found(&kind)),
            }
        }
    };
    Ok(Reply::ok(reply))
}

/// Answers a pending interaction and emits the receipt, now or (with `delayMs`) once the sim
/// clock reaches the delay. Returns the stored answer, or `{"scheduledAt": ms}`.
pub fn respond(state: &mut State, r: &Response) -> Result<Value, String> {
    let key = (r.conversation_id.clone(), r.kind.clone(), r.id.clone());
    if !state.interactions.contains_key(&key) {
        return Err("unknown interaction".to_owned());
    }
    match r.delay_ms.filter(|d| *d > 0) {
        Some(delay) => {
            if state.scheduled.len() >= crate::state::HISTORY_CAP {
                return Err("too many scheduled answers".to_owned());
            }
            let at = state.now().saturating_add(delay);
            let mut later = r.clone();
            later.delay_ms = None;
            state.scheduled.push((at, later));
            Ok(json!({"scheduledAt": at}))
        }
        None => respond_now(state, r),
    }
}

/// Applies the scheduled interaction answers whose time has come (runs before every
/// state access, so a clock advance makes them visible at once).
pub fn run_due(state: &mut State) {
    if state.scheduled.is_empty() {
        return;
    }
    let now = state.now();
    let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut state.scheduled)
        .into_iter()
        .partition(|(at, _)| *at <= now);
    state.scheduled = later;
    for (_, response) in due {
        if let Err(e) = respond_now(state, &response) {
            tracing::warn!(error = %e, "scheduled interaction answer failed");
        }
    }
}

/// Answers a pending interaction at once and emits the receipt.
pub fn respond_now(state: &mut State, r: &Response) -> Result<Value, String> {
    let key = (r.conversation_id.clone(), r.kind.clone(), r.id.clone());
    let item = state.interactions.get(&key).ok_or("unknown interaction")?;
    if item.state != "pending" {
        return Err(format!("interaction is {}", item.state));
    }
    let responder = match r.responded_by.as_deref() {
        Some("") => None,
        Some(x) => Some(x.to_owned()),
        None => item.response_user_id.clone(),
    };
    let mut answer = match r.kind.as_str() {
        "approval" => {
            let decision = r.decision.clone().unwrap_or_else(|| "allow".to_owned());
            if decision != "allow" && decision != "deny" {
                return Err("decision must be allow or deny".to_owned());
            }
            let mut a = json!({"status": decision});
            if let Some(rule) = &r.session_rule {
                a["sessionRule"] = rule.clone();
            }
            a
        }
        "card" => {
            let values = r.values.clone().unwrap_or_else(|| json!({}));
            if values.to_string().len() > 8192 {
                return Err("card values exceed 8 KiB".to_owned());
            }
            if json_depth(&values) > 8 {
                return Err("card values nest deeper than 8".to_owned());
            }
            if let Some(card) = item.request.get("card") {
                check_card_answer(card, r.action_id.as_deref(), &values)?;
            }
            json!({"status": r.status.clone().unwrap_or_else(|| "submitted".into()),
                   "actionId": r.action_id, "values": values})
        }
        _ => {
            let mut a = json!({"status": r.status.clone().unwrap_or_else(|| "submitted".into())});
            if let Some(v) = &r.value {
                a["value"] = json!(v);
            }
            if let Some(v) = &r.answers {
                a["answers"] = v.clone();
            }
            if let Some(v) = &r.choice {
                a["choice"] = v.clone();
            }
            a
        }
    };
    if let Some(o) = answer.as_object_mut() {
        o.retain(|_, v| !v.is_null());
    }
    let item = state
        .interactions
        .get_mut(&key)
        .ok_or("unknown interaction")?;
    item.state = "answered".to_owned();
    item.answer = Some(answer.clone());
    item.responded_by = responder.clone();
    if state.config.switches.receipts && state.config.switches.receipt_kinds.contains(&r.kind) {
        let (metadata, text) = match r.kind.as_str() {
            "approval" => {
                let d = answer["status"].as_str().unwrap_or("deny").to_owned();
                (
                    json!({"type": "approval_reply", "approvalId": r.id, "decision": d}),
                    if d == "allow" { "Approved" } else { "Denied" },
                )
            }
            "card" => (
                json!({"type": "runtime_card_reply", "cardId": r.id}),
                "Card answered",
            ),
            _ => (
                json!({"type": "runtime_input_reply", "inputId": r.id}),
                "Answered",
            ),
        };
        let sender = responder
            .or_else(|| {
                state
                    .principals
                    .get(&item_agent(state, &key))
                    .and_then(|p| p.owner_id.clone())
            })
            .unwrap_or_else(|| "h-owner".to_owned());
        let kind = if state.config.switches.receipts_run_turn {
            "run_turn"
        } else {
            "suppress"
        };
        state.create_message(
            NewMessage {
                conversation_id: r.conversation_id.clone(),
                sender_id: sender,
                text: Some(text.to_owned()),
                metadata: Some(metadata),
                ..NewMessage::default()
            },
            &EmitOverrides {
                turn_dispatch: Some(Some(kind.to_owned())),
                ..EmitOverrides::default()
            },
        );
    }
    Ok(answer)
}

fn item_agent(state: &State, key: &(String, String, String)) -> String {
    state
        .interactions
        .get(key)
        .map(|i| i.agent.clone())
        .unwrap_or_default()
}

/// Nesting depth of a JSON value (a scalar is 0), computed without recursion.
pub fn json_depth(value: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Object(m) => {
                max = max.max(d + 1);
                stack.extend(m.values().map(|x| (x, d + 1)));
            }
            Value::Array(a) => {
                max = max.max(d + 1);
                stack.extend(a.iter().map(|x| (x, d + 1)));
            }
            _ => {}
        }
    }
    max
}

/// Checks a card answer against the card: the action must exist when the card declares actions
/// (the sim's own rule), and the submitted values must pass contracts
/// `validateRuntimeCardFieldValues` against that action's fields, which canon-cards reproduces
/// exactly (cards.md §17.1; its first problem message is the error).
pub fn check_card_answer(
    card: &Value,
    action_id: Option<&str>,
    values: &Value,
) -> Result<(), String> {
    let actions: Vec<&Value> = card
        .get("blocks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b.get("kind").and_then(Value::as_str) == Some("actions"))
        .filter_map(|b| b.get("actions").and_then(Value::as_array))
        .flatten()
        .collect();
    if actions.is_empty() {
        return Ok(());
    }
    let Some(action) = actions
        .iter()
        .find(|a| a.get("id").and_then(Value::as_str) == action_id)
    else {
        return Err(format!("Unknown action: {}", action_id.unwrap_or("")));
    };
    let fields = action.get("fields").unwrap_or(&Value::Null);
    match canon_cards::values::validate_runtime_card_field_values(action_id, fields, values) {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card() -> Value {
        json!({"schema": "canon.card.v1", "title": "Order", "fallbackText": "Order", "blocks": [
            {"kind": "actions", "actions": [
                {"id": "ok", "label": "OK"},
                {"id": "order", "label": "Order", "fields": [
                    {"id": "qty", "label": "Qty", "type": "number", "min": 1, "step": 1},
                    {"id": "size", "label": "Size", "type": "select", "choices": [{"value": "s", "label": "Small"}]},
                    {"id": "lines", "label": "Lines", "type": "lineItems", "columns": [
                        {"id": "price", "label": "Price", "type": "currency"}
                    ]}
                ]}
            ]}
        ]})
    }

    #[test]
    fn card_answers_get_the_contracts_type_checks() {
        let check = |action: &str, values: Value| check_card_answer(&card(), Some(action), &values);
        assert_eq!(check("order", json!({"qty": 2, "size": "s"})), Ok(()));
        assert_eq!(check("ok", json!({})), Ok(()));
        assert_eq!(
            check("order", json!({"qty": 0.5})),
            Err("Qty must be at least 1".to_owned())
        );
        assert_eq!(
            check("order", json!({"size": "Small"})),
            Err("Size contains an invalid choice".to_owned())
        );
        assert_eq!(
            check("order", json!({"lines": [{"price": 1.005}]})),
            Err("Lines: row 1: Price must have at most 2 decimal places".to_owned())
        );
        assert_eq!(
            check("nope", json!({})),
            Err("Unknown action: nope".to_owned())
        );
    }
}
