//! `POST /agent/verbs/{verb}` with the `canon.verb-wire.v1` envelope (canon-wire.md §4.15,
//! canon-wire.md §11.3): wire-shape and per-verb envelope checks, merge of envelope and body
//! into the verb intent, and execution of `send_to`, `create_group`, `forward`, `share_contact`,
//! `add_member`, `remove_member` and `no_reply` (whose reason text is never stored).

use serde_json::{json, Map, Value};

use crate::checks::{is_valid_message_id, is_wire_id, require_member, validate_send};
use crate::http::{rate_limited, ApiRequest, Handled, Reply};
use crate::journal::canonical_json;
use crate::state::{push_bounded, ConversationSpec, EmitOverrides, NewMessage, State, HISTORY_CAP};

/// The wire id.
pub const WIRE: &str = "canon.verb-wire.v1";
/// The exact `no_reply` acknowledgement note (canon-wire.md §4.15).
pub const NO_REPLY_NOTE: &str = "Acknowledged — nothing was posted to the conversation.";

/// The sixteen canonical verbs.
pub const VERBS: [&str; 16] = [
    "send_to",
    "request_input",
    "request_approval",
    "check_approval",
    "send_card",
    "request_card",
    "share_contact",
    "react",
    "forward",
    "create_group",
    "add_member",
    "remove_member",
    "leave_conversation",
    "list_contacts",
    "list_conversations",
    "no_reply",
];

/// Envelope fields per verb: (required, optional).
fn envelope_fields(verb: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match verb {
        "send_to" => (
            &[],
            &[
                "conversationId",
                "targetUserId",
                "canonContactId",
                "sourceConversationId",
                "sessionSelection",
                "idempotencyKey",
                "replyTo",
                "replyToPosition",
                "mentions",
                "turn",
            ],
        ),
        "request_input" => (
            &["conversationId"],
            &[
                "requestId",
                "kind",
                "sensitive",
                "responseUserId",
                "expiresAt",
                "native",
                "turn",
            ],
        ),
        "request_approval" => (
            &["conversationId"],
            &[
                "requestId",
                "mode",
                "riskLevel",
                "risk",
                "category",
                "allowSessionRule",
                "responseUserId",
                "expiresAt",
                "native",
                "runtimeId",
                "turn",
            ],
        ),
        "check_approval" => (&["requestId"], &["conversationId"]),
        "send_card" => (
            &["conversationId"],
            &["requestId", "native", "runtimeId", "turn"],
        ),
        "request_card" => (
            &["conversationId"],
            &[
                "requestId",
                "responseUserId",
                "expiresAt",
                "native",
                "runtimeId",
                "turn",
            ],
        ),
        "share_contact" => (&["conversationId", "contactUserId"], &["idempotencyKey"]),
        "react" => (&["conversationId", "messageId"], &[]),
        "forward" => (
            &["sourceConversationId", "conversationId", "messageId"],
            &[],
        ),
        "create_group" => (&["memberIds"], &[]),
        "add_member" | "remove_member" => (&["conversationId", "targetUserId"], &[]),
        "leave_conversation" => (&["conversationId"], &[]),
        "list_conversations" => (&[], &["limit"]),
        "no_reply" => (&[], &["conversationId", "messageId"]),
        _ => (&[], &[]),
    }
}

fn enum_ok(v: &Value, allowed: &[&str]) -> bool {
    v.as_str().is_some_and(|s| allowed.contains(&s))
}

/// Type check of one envelope field (the schema's property rules).
fn envelope_field_ok(key: &str, v: &Value) -> bool {
    let id = |v: &Value| v.as_str().is_some_and(|s| is_wire_id(s, 160));
    let non_empty = |v: &Value| v.as_str().is_some_and(|s| !s.is_empty());
    match key {
        "conversationId" | "sourceConversationId" | "requestId" | "responseUserId" => id(v),
        "idempotencyKey" => v.as_str().is_some_and(is_valid_message_id),
        "targetUserId" | "canonContactId" | "contactUserId" | "messageId" => non_empty(v),
        "expiresAt" => v.is_u64(),
        "limit" => v.as_u64().is_some_and(|n| n >= 1),
        "replyToPosition" => v.is_i64() || v.is_u64(),
        "replyTo" => v.is_string(),
        "mode" => enum_ok(v, &["blocking", "detached"]),
        "kind" => enum_ok(v, &["clarify", "sudo", "secret"]),
        "sensitive" | "allowSessionRule" => v.is_boolean(),
        "riskLevel" => enum_ok(v, &["normal", "destructive"]),
        "risk" => enum_ok(v, &["low", "normal", "high", "destructive"]),
        "category" => enum_ok(
            v,
            &[
                "command", "file", "network", "browser", "mcp", "plugin", "canon", "tool",
            ],
        ),
        "runtimeId" => v.as_str().is_some_and(|s| s.chars().count() <= 128),
        "mentions" => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        "memberIds" => v
            .as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_string)),
        "native" => v.as_object().is_some_and(|o| o.len() <= 24),
        "sessionSelection" => match v.as_object() {
            Some(o) => match o.get("mode").and_then(Value::as_str) {
                Some("new" | "continue_latest" | "continue_or_create") => o.len() == 1,
                Some("specific") => o.len() == 2 && o.get("conversationId").is_some_and(id),
                _ => false,
            },
            None => false,
        },
        "turn" => v.as_object().is_some_and(|o| {
            o.iter().all(|(k, x)| match k.as_str() {
                "turnId" => x.is_string() || x.is_null(),
                "turnSemantics" => enum_ok(x, &["progress", "turn_complete", "control"]),
                "deliveryIntent" => enum_ok(x, &["queue", "interrupt", "interleave", "stop"]),
                "replyBehavior" => enum_ok(x, &["allow_auto_reply", "suppress_auto_reply"]),
                _ => false,
            })
        }),
        _ => false,
    }
}

fn wire_error(message: &str) -> Reply {
    Reply::error(400, "INVALID_VERB_WIRE", message)
}

/// Checks the wire request; returns (envelope, body value).
pub fn check_wire(
    path_verb: &str,
    request: &Value,
) -> Handled<(Map<String, Value>, Map<String, Value>)> {
    let obj = request
        .as_object()
        .ok_or_else(|| wire_error("request must be an object"))?;
    for key in obj.keys() {
        if !matches!(key.as_str(), "wire" | "verb" | "envelope" | "body") {
            return Err(wire_error(&format!("unexpected member {key}")));
        }
    }
    if obj.get("wire").and_then(Value::as_str) != Some(WIRE) {
        return Err(wire_error("wire must be canon.verb-wire.v1"));
    }
    let verb = obj.get("verb").and_then(Value::as_str).unwrap_or("");
    if !VERBS.contains(&verb) {
        return Err(wire_error("verb is not a canonical verb"));
    }
    if verb != path_verb {
        return Err(wire_error("verb does not match the path"));
    }
    let envelope = obj
        .get("envelope")
        .and_then(Value::as_object)
        .ok_or_else(|| wire_error("envelope must be an object"))?;
    let (required, optional) = envelope_fields(verb);
    for (key, value) in envelope {
        if !required.contains(&key.as_str()) && !optional.contains(&key.as_str()) {
            return Err(wire_error(&format!(
                "envelope field {key} is not allowed for {verb}"
            )));
        }
        if !envelope_field_ok(key, value) {
            return Err(wire_error(&format!("envelope field {key} is invalid")));
        }
    }
    for key in required {
        if !envelope.contains_key(*key) {
            return Err(wire_error(&format!(
                "envelope field {key} is required for {verb}"
            )));
        }
    }
    let body = obj
        .get("body")
        .and_then(Value::as_object)
        .ok_or_else(|| wire_error("body must be an object"))?;
    match body.get("encoding").and_then(Value::as_str) {
        Some("json") => {
            if body.len() != 2 {
                return Err(wire_error("json body has unexpected members"));
            }
            let value = body
                .get("value")
                .and_then(Value::as_object)
                .ok_or_else(|| wire_error("body.value must be an object"))?;
            Ok((envelope.clone(), value.clone()))
        }
        Some("mls") => Err(Reply::error(
            400,
            "MLS_NOT_SUPPORTED",
            "the simulator does not decrypt mls bodies",
        )),
        _ => Err(wire_error("body.encoding is invalid")),
    }
}

fn wrap(verb: &str, value: Value) -> Reply {
    Reply::ok(json!({"wire": WIRE, "verb": verb, "result": {"encoding": "json", "value": value}}))
}

fn policy_gate(state: &State, agent: &str) -> Handled<()> {
    match state
        .principals
        .get(agent)
        .map(|p| p.outbound_policy.as_str())
    {
        Some("open") => Ok(()),
        Some("approval-required") => Err(Reply::error(
            403,
            "OUTBOUND_APPROVAL_REQUIRED",
            "the agent operator must approve this outbound action",
        )),
        _ => Err(Reply::error(
            403,
            "OUTBOUND_CLOSED",
            "outbound actions are closed for this agent",
        )),
    }
}

/// `POST /agent/verbs/{verb}`.
pub fn execute(
    state: &mut State,
    req: &ApiRequest,
    agent: &str,
    path_verb: &str,
) -> Handled<Reply> {
    let request = req
        .json()
        .ok_or_else(|| wire_error("request must be JSON"))?;
    let (envelope, value) = check_wire(path_verb, &request)?;
    let verb = path_verb;
    if matches!(verb, "send_to" | "create_group")
        && state.conversations.len() >= crate::state::ENTITY_CAP
    {
        return Err(Reply::error(
            503,
            "SIM_CAPACITY",
            "conversation capacity reached",
        ));
    }
    let result = match verb {
        "send_to" => send_to(state, agent, &envelope, &value, &request)?,
        "create_group" => create_group(state, agent, &envelope, &value)?,
        "forward" => forward(state, agent, &envelope, &value)?,
        "share_contact" => share_contact(state, agent, &envelope, &value)?,
        "add_member" | "remove_member" => members(state, agent, verb, &envelope)?,
        "no_reply" => no_reply(state, agent, &envelope, &value)?,
        _ => {
            return Err(Reply::error(
                400,
                "VERB_NOT_SUPPORTED",
                "the simulator does not execute this verb",
            ))
        }
    };
    let mut log_body = request.clone();
    if verb == "no_reply" {
        if let Some(b) = log_body
            .pointer_mut("/body/value")
            .and_then(Value::as_object_mut)
        {
            b.remove("reason");
        }
    }
    let mut intent = merge_intent(verb, &envelope, &value);
    if let Some(i) = intent.as_object_mut() {
        // The no_reply reason never leaves the request (canon-wire.md §4.15).
        i.remove("reason");
    }
    push_bounded(
        &mut state.verbs,
        json!({"agent": agent, "verb": verb, "request": log_body, "intent": intent, "result": result}),
        HISTORY_CAP,
    );
    Ok(wrap(verb, result))
}

fn str_of<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    m.get(k).and_then(Value::as_str)
}

fn send_to(
    state: &mut State,
    agent: &str,
    env: &Map<String, Value>,
    value: &Map<String, Value>,
    request: &Value,
) -> Handled<Value> {
    for key in value.keys() {
        if !matches!(
            key.as_str(),
            "text" | "messageOptions" | "requestMessage" | "selfContext"
        ) {
            return Err(Reply::error(
                400,
                "INVALID_VERB_INTENT",
                &format!("send_to body has unexpected member {key}"),
            ));
        }
    }
    let targets = ["conversationId", "targetUserId", "canonContactId"]
        .iter()
        .filter(|k| env.contains_key(**k))
        .count();
    if targets != 1 {
        return Err(Reply::error(
            400,
            "INVALID_VERB_INTENT",
            "send_to needs exactly one target",
        ));
    }
    let options = value
        .get("messageOptions")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut metadata = options.get("metadata").cloned();
    if let Some(turn) = env.get("turn").and_then(Value::as_object) {
        let m = metadata.get_or_insert_with(|| json!({}));
        for (k, v) in turn {
            if !v.is_null() {
                m[k.as_str()] = v.clone();
            }
        }
    }
    let conversation = if let Some(cid) = str_of(env, "conversationId") {
        require_member(state, agent, cid)?;
        cid.to_owned()
    } else {
        policy_gate(state, agent)?;
        let target = str_of(env, "targetUserId")
            .or_else(|| str_of(env, "canonContactId"))
            .unwrap_or("");
        let Some(principal) = state.principals.get(target).cloned() else {
            return Ok(json!({"status": "unavailable", "reason": "not_found"}));
        };
        match principal.inbound_policy.as_str() {
            "open" => {}
            "approval-required" => {
                return Ok(json!({"status": "requested", "requestId": state.ids.seq("req")}))
            }
            _ => return Ok(json!({"status": "unavailable", "reason": "closed"})),
        }
        let mode = env
            .get("sessionSelection")
            .and_then(|s| s.get("mode"))
            .and_then(Value::as_str)
            .unwrap_or("continue_or_create")
            .to_owned();
        let existing: Option<String> = state
            .conversations
            .values()
            .rev()
            .find(|c| {
                c.kind == "direct"
                    && c.member_ids.len() == 2
                    && c.member_ids.iter().any(|m| m == agent)
                    && c.member_ids.iter().any(|m| m == target)
            })
            .map(|c| c.id.clone());
        let (cid, created) = match mode.as_str() {
            "new" => (None, true),
            "continue_latest" => match existing {
                Some(c) => (Some(c), false),
                None => {
                    return Ok(
                        json!({"status": "no_session", "reason": "no existing conversation"}),
                    )
                }
            },
            "specific" => {
                let cid = env["sessionSelection"]["conversationId"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                require_member(state, agent, &cid)?;
                (Some(cid), false)
            }
            _ => match existing {
                Some(c) => (Some(c), false),
                None => (None, true),
            },
        };
        let cid = match cid {
            Some(c) => c,
            None => state.create_conversation(ConversationSpec {
                kind: "direct".to_owned(),
                name: Some(principal.display_name.clone()),
                member_ids: vec![agent.to_owned(), target.to_owned()],
                ..ConversationSpec::default()
            }),
        };
        let message = deliver(state, agent, &cid, value, &options, metadata, env, None)?;
        return Ok(
            json!({"status": "messaged", "conversationId": cid, "messageId": message, "created": created, "reused": !created}),
        );
    };
    let key = str_of(env, "idempotencyKey").map(str::to_owned);
    let fingerprint = canonical_json(request);
    if let Some(k) = &key {
        if let Some((stored, response)) = state.idempotency.get(&(agent.to_owned(), k.clone())) {
            if *stored == fingerprint {
                return Ok(response.clone());
            }
            return Err(Reply::error(
                409,
                "MESSAGE_ID_EXISTS",
                "idempotencyKey already used with a different payload",
            ));
        }
    }
    let message = deliver(
        state,
        agent,
        &conversation,
        value,
        &options,
        metadata,
        env,
        key.clone(),
    )?;
    let result =
        json!({"status": "messaged", "conversationId": conversation, "messageId": message});
    if let Some(k) = key {
        state
            .idempotency
            .insert((agent.to_owned(), k), (fingerprint, result.clone()));
    }
    Ok(result)
}

#[allow(clippy::too_many_arguments)]
fn deliver(
    state: &mut State,
    agent: &str,
    conversation: &str,
    value: &Map<String, Value>,
    options: &Value,
    metadata: Option<Value>,
    env: &Map<String, Value>,
    client_id: Option<String>,
) -> Handled<String> {
    let text = value.get("text").cloned();
    let parts = validate_send(
        state,
        conversation,
        text.as_ref(),
        metadata.as_ref(),
        options.get("attachments"),
        options.get("contentType"),
        env.get("mentions"),
    )?;
    if parts.text.is_empty() && parts.attachments.is_empty() {
        return Err(Reply::error(
            400,
            "INVALID_VERB_INTENT",
            "send_to needs text or attachments",
        ));
    }
    if let Err(retry) = state.check_rate(agent, conversation) {
        return Err(rate_limited(retry));
    }
    let message = state.create_message(
        NewMessage {
            conversation_id: conversation.to_owned(),
            sender_id: agent.to_owned(),
            text: Some(parts.text),
            content_type: parts.content_type,
            attachments: parts.attachments,
            mentions: parts.mentions,
            reply_to: str_of(env, "replyTo").map(str::to_owned),
            reply_to_position: env.get("replyToPosition").cloned(),
            metadata: parts.metadata,
            client_id,
            ..NewMessage::default()
        },
        &EmitOverrides::default(),
    );
    Ok(message["id"].as_str().unwrap_or_default().to_owned())
}

fn create_group(
    state: &mut State,
    agent: &str,
    env: &Map<String, Value>,
    value: &Map<String, Value>,
) -> Handled<Value> {
    policy_gate(state, agent)?;
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| Reply::error(400, "INVALID_VERB_INTENT", "create_group needs a name"))?
        .to_owned();
    let ids: Vec<String> = env["memberIds"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if ids.len() > 49 {
        return Err(Reply::error(
            400,
            "INVALID_VERB_INTENT",
            "at most 49 members",
        ));
    }
    let (mut added, mut pending, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for id in ids {
        match state
            .principals
            .get(&id)
            .map(|p| p.group_join_policy.clone())
        {
            Some(p) if p == "open" => added.push(id),
            Some(p) if p == "approval-required" => {
                pending.push(json!({"userId": id, "requestId": state.ids.seq("req")}))
            }
            Some(_) => skipped.push(json!({"userId": id, "reason": "closed"})),
            None => skipped.push(json!({"userId": id, "reason": "not_found"})),
        }
    }
    if added.is_empty() && pending.is_empty() {
        return Err(Reply::error(
            400,
            "CREATE_GROUP_NO_ADDABLE_MEMBERS",
            "no requested member could be added or invited",
        ));
    }
    let mut members = vec![agent.to_owned()];
    members.extend(added.iter().cloned());
    let cid = state.create_conversation(ConversationSpec {
        kind: "group".to_owned(),
        name: Some(name),
        member_ids: members,
        ..ConversationSpec::default()
    });
    Ok(
        json!({"status": "created", "conversationId": cid, "added": added, "pending": pending, "skipped": skipped}),
    )
}

fn forward(
    state: &mut State,
    agent: &str,
    env: &Map<String, Value>,
    value: &Map<String, Value>,
) -> Handled<Value> {
    policy_gate(state, agent)?;
    let source = str_of(env, "sourceConversationId").unwrap_or("").to_owned();
    let target = str_of(env, "conversationId").unwrap_or("").to_owned();
    let mid = str_of(env, "messageId").unwrap_or("").to_owned();
    require_member(state, agent, &source)?;
    require_member(state, agent, &target)?;
    let original = state
        .find_message(&source, &mid)
        .map(|m| m.message.clone())
        .ok_or_else(|| Reply::error(404, "MESSAGE_NOT_FOUND", "message not found"))?;
    let text = value
        .get("text")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            original
                .get("text")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
    let message = state.create_message(
        NewMessage {
            conversation_id: target.clone(),
            sender_id: agent.to_owned(),
            text,
            forwarded_from: Some(json!({"sourceConversationId": source, "messageId": mid})),
            ..NewMessage::default()
        },
        &EmitOverrides::default(),
    );
    Ok(json!({"status": "forwarded", "messageId": message["id"], "targetConversationId": target}))
}

fn share_contact(
    state: &mut State,
    agent: &str,
    env: &Map<String, Value>,
    value: &Map<String, Value>,
) -> Handled<Value> {
    policy_gate(state, agent)?;
    let cid = str_of(env, "conversationId").unwrap_or("").to_owned();
    let contact = str_of(env, "contactUserId").unwrap_or("").to_owned();
    require_member(state, agent, &cid)?;
    let is_contact = state
        .principals
        .get(agent)
        .is_some_and(|p| p.contacts.contains(&contact));
    let Some(principal) = state
        .principals
        .get(&contact)
        .cloned()
        .filter(|_| is_contact)
    else {
        return Err(Reply::error(
            403,
            "CONTACT_NOT_SHAREABLE",
            "contact is not in the agent's contacts",
        ));
    };
    let owner_name = principal
        .owner_id
        .as_ref()
        .and_then(|o| state.principals.get(o))
        .map(|o| o.display_name.clone());
    let message = state.create_message(
        NewMessage {
            conversation_id: cid.clone(),
            sender_id: agent.to_owned(),
            text: value.get("text").and_then(Value::as_str).map(str::to_owned),
            content_type: Some("contact_card".to_owned()),
            contact_card: Some(principal.contact_card(owner_name.as_deref())),
            ..NewMessage::default()
        },
        &EmitOverrides::default(),
    );
    Ok(json!({"status": "shared", "messageId": message["id"], "conversationId": cid}))
}

fn members(state: &mut State, agent: &str, verb: &str, env: &Map<String, Value>) -> Handled<Value> {
    policy_gate(state, agent)?;
    let cid = str_of(env, "conversationId").unwrap_or("").to_owned();
    let target = str_of(env, "targetUserId").unwrap_or("").to_owned();
    require_member(state, agent, &cid)?;
    let policy = state
        .principals
        .get(&target)
        .map(|p| p.group_join_policy.clone())
        .ok_or_else(|| Reply::error(404, "USER_NOT_FOUND", "target user not found"))?;
    let conv = state
        .conversations
        .get_mut(&cid)
        .ok_or_else(|| Reply::error(404, "CONVERSATION_NOT_FOUND", "conversation not found"))?;
    if verb == "remove_member" {
        conv.member_ids.retain(|m| *m != target);
        return Ok(json!({"status": "removed"}));
    }
    match policy.as_str() {
        "open" => {
            if !conv.member_ids.contains(&target) {
                conv.member_ids.push(target);
            }
            Ok(json!({"status": "added"}))
        }
        "approval-required" => Ok(json!({"status": "pending", "requestId": state.ids.seq("req")})),
        _ => Err(Reply::error(
            403,
            "GROUP_JOIN_CLOSED",
            "the user does not accept group invitations",
        )),
    }
}

fn no_reply(
    state: &mut State,
    agent: &str,
    env: &Map<String, Value>,
    value: &Map<String, Value>,
) -> Handled<Value> {
    for key in value.keys() {
        if key != "reason" {
            return Err(Reply::error(
                400,
                "INVALID_VERB_INTENT",
                "no_reply body has unexpected members",
            ));
        }
    }
    if let Some(r) = value.get("reason") {
        if r.as_str().is_none_or(|s| s.chars().count() > 500) {
            return Err(Reply::error(
                400,
                "INVALID_VERB_INTENT",
                "reason must be a string of at most 500 characters",
            ));
        }
    }
    let cid = str_of(env, "conversationId").map(str::to_owned);
    if let Some(c) = &cid {
        require_member(state, agent, c)?;
    }
    let now = state.now();
    push_bounded(
        &mut state.no_replies,
        json!({"agent": agent, "conversationId": cid, "messageId": str_of(env, "messageId"),
               "hasReason": value.contains_key("reason"), "at": now}),
        HISTORY_CAP,
    );
    let mut out = json!({"status": "acknowledged", "note": NO_REPLY_NOTE});
    if let Some(c) = cid {
        out["conversationId"] = json!(c);
    }
    Ok(out)
}

/// Object from the present members of `pairs` (absent and null values are left out).
fn compact(pairs: Vec<(&str, Option<Value>)>) -> Map<String, Value> {
    pairs
        .into_iter()
        .filter_map(|(k, v)| v.filter(|v| !v.is_null()).map(|v| (k.to_owned(), v)))
        .collect()
}

/// The verb intent a wire request stands for (canon-wire.md §4.15): routing fields come from
/// the envelope, content from `body.value`; for `send_to` the envelope's `idempotencyKey`,
/// `mentions`, `replyTo`, `replyToPosition` and `turn` keys join `messageOptions`.
pub fn merge_intent(verb: &str, env: &Map<String, Value>, value: &Map<String, Value>) -> Value {
    let e = |k: &str| env.get(k).cloned();
    let v = |k: &str| value.get(k).cloned();
    let intent = match verb {
        "send_to" => {
            let content = value
                .get("messageOptions")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let mut metadata = content
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            if let Some(turn) = env.get("turn").and_then(Value::as_object) {
                for (k, x) in turn {
                    metadata.insert(k.clone(), x.clone());
                }
            }
            metadata.retain(|_, x| !x.is_null());
            let options = compact(vec![
                ("messageId", e("idempotencyKey")),
                ("contentType", content.get("contentType").cloned()),
                ("attachments", content.get("attachments").cloned()),
                ("mentions", e("mentions")),
                ("replyTo", e("replyTo")),
                ("replyToPosition", e("replyToPosition")),
                (
                    "metadata",
                    (!metadata.is_empty()).then_some(Value::Object(metadata)),
                ),
            ]);
            compact(vec![
                ("targetConversationId", e("conversationId")),
                ("targetUserId", e("targetUserId")),
                ("canonContactId", e("canonContactId")),
                ("sourceConversationId", e("sourceConversationId")),
                ("sessionSelection", e("sessionSelection")),
                ("text", v("text")),
                ("selfContext", v("selfContext")),
                ("requestMessage", v("requestMessage")),
                (
                    "messageOptions",
                    (!options.is_empty()).then_some(Value::Object(options)),
                ),
            ])
        }
        "create_group" => compact(vec![("name", v("name")), ("memberIds", e("memberIds"))]),
        "forward" => compact(vec![
            ("sourceConversationId", e("sourceConversationId")),
            ("targetConversationId", e("conversationId")),
            ("messageId", e("messageId")),
            ("text", v("text")),
        ]),
        "share_contact" => compact(vec![
            ("conversationId", e("conversationId")),
            ("contactUserId", e("contactUserId")),
            ("text", v("text")),
            ("messageId", e("idempotencyKey")),
        ]),
        "add_member" | "remove_member" => compact(vec![
            ("conversationId", e("conversationId")),
            ("userId", e("targetUserId")),
        ]),
        "no_reply" => compact(vec![
            ("conversationId", e("conversationId")),
            ("messageId", e("messageId")),
            ("reason", v("reason")),
        ]),
        _ => Map::new(),
    };
    Value::Object(intent)
}
