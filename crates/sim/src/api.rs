//! REST endpoint behaviours of canon-wire.md §11.3 (everything but the stream, which lives in
//! [`crate::stream`]): health, registration, me, conversations, messages with idempotency and
//! rate limits, media upload and token-guarded file serving, typing, streaming with the salvage
//! rule, runtime turn/status/signals, dispositions, read and agent discovery. Runtime
//! interactions are in [`crate::interactions`], verbs in [`crate::verbs`]; the request and reply
//! types are in [`crate::http`] and the checks shared with those modules in [`crate::checks`].
//!
//! Handlers are synchronous functions over `&mut State`; they never panic on request input and
//! answer every refusal with the status and `{error, code}` body Canon would use.

use serde_json::{json, Map, Value};

use crate::checks::{
    authenticate, check_reply_authority, is_valid_message_id, is_wire_id, kind_of_mime,
    require_member, validate_send,
};
use crate::clock::iso_8601;
use crate::http::{
    bad, body_object, decode_base64, rate_limited, required_str, ApiRequest, Handled, Reply,
    ReplyBody,
};
use crate::journal::canonical_json;
use crate::state::{
    push_bounded, EmitOverrides, NewMessage, State, Upload, HISTORY_CAP, UPLOAD_BYTES_CAP,
    UPLOAD_LIMIT,
};

/// Routes an authenticated or public REST request. Returns `None` for paths this module does
/// not serve.
pub fn handle(state: &mut State, req: &ApiRequest) -> Option<Reply> {
    let segments: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
    let method = req.method.as_str();
    let reply = match (method, segments.as_slice()) {
        ("GET", ["healthz", ""] | ["healthz"]) => health(state),
        ("GET", ["health"]) => stream_health(state),
        ("POST", ["agents", "register"]) => register(state, req),
        ("GET", ["agents", "status", id]) => registration_status(state, req, id),
        ("POST", ["agents", "status", id, "ack"]) => registration_ack(state, req, id),
        ("GET", ["files", a, b, c]) => serve_file(state, req, &format!("{a}/{b}/{c}")),
        _ => {
            let agent = match authenticate(state, req) {
                Ok(a) => a,
                Err(reply) => {
                    return known_authenticated_path(method, &segments).then_some(reply);
                }
            };
            let result = match (method, segments.as_slice()) {
                ("GET", ["agents", "me"]) => Ok(me(state, &agent)),
                ("GET", ["conversations"]) => Ok(conversations(state, &agent)),
                ("POST", ["messages", "send"]) => send_message(state, req, &agent),
                ("POST", ["media", "upload"]) => upload(state, req, &agent),
                ("POST", ["typing"]) => typing(state, req, &agent),
                ("POST", ["streaming"]) => streaming(state, req, &agent),
                ("POST", ["runtime", "turn"]) => runtime_turn(state, req, &agent),
                ("POST", ["runtime", "status"]) => runtime_status(state, req, &agent),
                ("POST", ["runtime", "signal", "consume"]) => consume_signal(state, req, &agent),
                ("PATCH", ["conversations", cid, "messages", mid, "disposition"]) => {
                    disposition(state, req, &agent, cid, mid)
                }
                ("POST", ["conversations", cid, "read"]) => mark_read(state, &agent, cid),
                ("POST", ["runtime-interaction", "request"]) => {
                    crate::interactions::request(state, req, &agent)
                }
                ("POST", ["runtime-interaction", "consume"]) => {
                    crate::interactions::consume(state, req, &agent)
                }
                ("POST", ["agent", "verbs", verb]) => {
                    crate::verbs::execute(state, req, &agent, verb)
                }
                ("GET", ["agents", "discover"]) => discover(state, req, &agent),
                _ => return None,
            };
            result.unwrap_or_else(|r| r)
        }
    };
    Some(reply)
}

fn known_authenticated_path(method: &str, segments: &[&str]) -> bool {
    matches!(
        (method, segments),
        (
            "GET",
            ["agents", "me"] | ["conversations"] | ["agents", "discover"] | ["agents", "stream"]
        ) | (
            "POST",
            ["messages", "send"] | ["media", "upload"] | ["typing"] | ["streaming"]
        ) | (
            "POST",
            ["runtime", "turn"] | ["runtime", "status"] | ["runtime", "signal", "consume"]
        ) | (
            "POST",
            ["runtime-interaction", _] | ["agent", "verbs", _] | ["conversations", _, "read"]
        ) | ("PATCH", ["conversations", _, "messages", _, "disposition"])
    )
}

/// `GET /healthz/` and `GET /health` (canon-wire.md §1.2).
pub fn health(state: &State) -> Reply {
    let env = &state.config.environment;
    Reply::ok(json!({
        "environmentId": env.environment_id,
        "projectId": env.project_id,
        "status": "ok",
    }))
    .with_header("x-canon-environment-id", &env.environment_id)
}

/// `GET /health`, the stream service's health path: [`health`], with the project the
/// `stream_health_project_id` switch names when it is set.
pub fn stream_health(state: &State) -> Reply {
    let env = &state.config.environment;
    let project = state
        .config
        .switches
        .stream_health_project_id
        .as_deref()
        .unwrap_or(&env.project_id);
    Reply::ok(json!({
        "environmentId": env.environment_id,
        "projectId": project,
        "status": "ok",
    }))
    .with_header("x-canon-environment-id", &env.environment_id)
}

fn register(state: &mut State, req: &ApiRequest) -> Reply {
    let body = match body_object(req) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let local = match required_str(&body, "localRegistrationId") {
        Ok(s) => s.to_owned(),
        Err(r) => return r,
    };
    if let Err(r) = required_str(&body, "name") {
        return r;
    }
    if let Some(existing) = state
        .registrations
        .iter()
        .find(|r| r.local_registration_id == local)
    {
        return Reply::ok(
            json!({"requestId": existing.request_id, "pollToken": existing.poll_token}),
        );
    }
    if state.registrations.len() >= crate::state::ENTITY_CAP {
        return Reply::error(503, "SIM_CAPACITY", "registration capacity reached");
    }
    let request_id = state.ids.seq("reg");
    let poll_token = state.ids.token(32);
    state.registrations.push(crate::state::Registration {
        request_id: request_id.clone(),
        poll_token: poll_token.clone(),
        local_registration_id: local,
        body: Value::Object(body),
        status: "pending".to_owned(),
        issued: None,
        polls: 0,
        acked: false,
    });
    Reply::ok(json!({"requestId": request_id, "pollToken": poll_token}))
}

fn registration_index(state: &State, req: &ApiRequest, id: &str) -> Handled<usize> {
    let index = state
        .registrations
        .iter()
        .position(|r| r.request_id == id)
        .ok_or_else(|| Reply::error(404, "REGISTRATION_NOT_FOUND", "unknown registration"))?;
    if req.header("x-canon-poll-token") != Some(state.registrations[index].poll_token.as_str()) {
        return Err(Reply::error(
            401,
            "INVALID_POLL_TOKEN",
            "poll token mismatch",
        ));
    }
    Ok(index)
}

fn registration_status(state: &mut State, req: &ApiRequest, id: &str) -> Reply {
    let index = match registration_index(state, req, id) {
        Ok(i) => i,
        Err(r) => return r,
    };
    state.registrations[index].polls += 1;
    let auto = state.config.switches.auto_approve_after_polls;
    if state.registrations[index].status == "pending"
        && auto.is_some_and(|n| state.registrations[index].polls >= n)
    {
        approve_registration(state, id);
    }
    let r = &state.registrations[index];
    let mut out = json!({"status": r.status});
    if let Some((key, agent)) = &r.issued {
        out["apiKey"] = json!(key);
        out["agentId"] = json!(agent);
        if let Some(name) = r.body.get("name") {
            out["agentName"] = name.clone();
        }
    }
    Reply::ok(out)
}

fn registration_ack(state: &mut State, req: &ApiRequest, id: &str) -> Reply {
    match registration_index(state, req, id) {
        Ok(i) => {
            state.registrations[i].acked = true;
            Reply::ok(json!({}))
        }
        Err(r) => r,
    }
}

/// Approves a pending registration: issues a fresh agent and key (control API). Returns the
/// new agent id.
pub fn approve_registration(state: &mut State, request_id: &str) -> Option<String> {
    let index = state
        .registrations
        .iter()
        .position(|r| r.request_id == request_id && r.status == "pending")?;
    let body = state.registrations[index].body.clone();
    let requested = body
        .get("requestedAgentId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let owner = state
        .principals
        .values()
        .find(|p| p.kind == "human")
        .map(|p| p.id.clone());
    let agent = state.create_principal(crate::state::PrincipalSpec {
        id: requested,
        kind: "ai_agent".to_owned(),
        display_name: body.get("name").and_then(Value::as_str).map(str::to_owned),
        owner_id: owner,
        ..Default::default()
    });
    let key = state.key_of(&agent).unwrap_or_default();
    let r = &mut state.registrations[index];
    r.status = "approved".to_owned();
    r.issued = Some((key, agent.clone()));
    Some(agent)
}

/// Rejects a pending registration (control API).
pub fn reject_registration(state: &mut State, request_id: &str) -> bool {
    match state
        .registrations
        .iter_mut()
        .find(|r| r.request_id == request_id && r.status == "pending")
    {
        Some(r) => {
            r.status = "rejected".to_owned();
            true
        }
        None => false,
    }
}

fn me(state: &State, agent: &str) -> Reply {
    let p = &state.principals[agent];
    Reply::ok(json!({
        "agentId": p.id,
        "id": p.id,
        "ownerId": p.owner_id,
        "displayName": p.display_name,
        "outboundPolicy": p.outbound_policy,
    }))
}

fn conversations(state: &State, agent: &str) -> Reply {
    let list: Vec<Value> = state
        .conversations
        .values()
        .filter(|c| c.member_ids.iter().any(|m| m == agent))
        .map(|c| c.to_json())
        .collect();
    if state.config.switches.conversations_bare_array {
        Reply::ok(Value::Array(list))
    } else {
        Reply::ok(json!({"conversations": list}))
    }
}

fn send_message(state: &mut State, req: &ApiRequest, agent: &str) -> Handled<Reply> {
    let body = body_object(req)?;
    let conversation = required_str(&body, "conversationId")?.to_owned();
    require_member(state, agent, &conversation)?;
    let client_id = match body.get("messageId") {
        None => None,
        Some(Value::String(s))
            if is_valid_message_id(s) || state.config.switches.lenient_messages =>
        {
            Some(s.clone())
        }
        Some(_) => return Err(bad("INVALID_MESSAGE_ID", "messageId is invalid")),
    };
    let fingerprint = canonical_json(&Value::Object(body.clone()));
    if let Some(cid) = &client_id {
        if let Some((stored, response)) = state.idempotency.get(&(agent.to_owned(), cid.clone())) {
            if *stored == fingerprint {
                return Ok(Reply::ok(response.clone()));
            }
            return Err(Reply::error(
                409,
                "MESSAGE_ID_EXISTS",
                "messageId already used with a different payload",
            ));
        }
    }
    let mut parts = validate_send(
        state,
        &conversation,
        body.get("text"),
        body.get("metadata"),
        body.get("attachments"),
        body.get("contentType"),
        body.get("mentions"),
    )?;
    parts.reply_to = body
        .get("replyTo")
        .and_then(Value::as_str)
        .map(str::to_owned);
    parts.reply_to_position = body.get("replyToPosition").filter(|v| v.is_i64()).cloned();
    if let Some(authority) = body.get("replyAuthority") {
        let turn = parts
            .metadata
            .as_ref()
            .and_then(|m| m.get("turnId"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| client_id.clone())
            .unwrap_or_default();
        check_reply_authority(state, agent, &conversation, authority, &turn)?;
    }
    if let Err(retry) = state.check_rate(agent, &conversation) {
        return Err(rate_limited(retry));
    }
    if let Some(authority) = body.get("replyAuthority") {
        let turn = parts
            .metadata
            .as_ref()
            .and_then(|m| m.get("turnId"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| client_id.clone())
            .unwrap_or_default();
        if let Some(token) = authority.get("token").and_then(Value::as_str) {
            if let Some(a) = state.authorities.get_mut(token) {
                a.claimed_by.get_or_insert(turn);
            }
        }
    }
    let message = state.create_message(
        NewMessage {
            conversation_id: conversation.clone(),
            sender_id: agent.to_owned(),
            text: Some(parts.text),
            content_type: parts.content_type,
            attachments: parts.attachments,
            mentions: parts.mentions,
            reply_to: parts.reply_to,
            reply_to_position: parts.reply_to_position,
            metadata: parts.metadata,
            client_id: client_id.clone(),
            ..NewMessage::default()
        },
        &EmitOverrides::default(),
    );
    let response = json!({
        "messageId": message["id"],
        "id": message["id"],
        "conversationId": conversation,
        "createdAt": message["createdAt"],
    });
    if let Some(cid) = client_id {
        state
            .idempotency
            .insert((agent.to_owned(), cid), (fingerprint, response.clone()));
    }
    Ok(Reply::ok(response))
}

fn sanitize_segment(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    if clean.is_empty() || clean == "." || clean == ".." {
        "file".to_owned()
    } else {
        clean
    }
}

fn upload(state: &mut State, req: &ApiRequest, agent: &str) -> Handled<Reply> {
    let body = body_object(req)?;
    let conversation = required_str(&body, "conversationId")?.to_owned();
    require_member(state, agent, &conversation)?;
    let data = required_str(&body, "data")?;
    let mime = required_str(&body, "mimeType")?.to_ascii_lowercase();
    if data.len() > UPLOAD_LIMIT / 3 * 4 + 8 {
        return Err(Reply::error(413, "PAYLOAD_TOO_LARGE", "media exceeds 10MB"));
    }
    let bytes =
        decode_base64(data).ok_or_else(|| bad("INVALID_BASE64", "data is not valid base64"))?;
    if bytes.len() > UPLOAD_LIMIT {
        return Err(Reply::error(413, "PAYLOAD_TOO_LARGE", "media exceeds 10MB"));
    }
    let file_name = body
        .get("fileName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let hex = state.ids.hex(32);
    let upload_id = format!(
        "{}-{}-4{}-a{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    );
    let path = format!(
        "{}/{}/{}",
        sanitize_segment(&conversation),
        &hex[..16],
        sanitize_segment(file_name.as_deref().unwrap_or("file"))
    );
    let token = state.ids.token(32);
    let url = format!("{}/files/{path}?token={token}", state.origin);
    let kind = kind_of_mime(&mime);
    let size = bytes.len();
    let mut total: usize = state.uploads.values().map(|u| u.bytes.len()).sum::<usize>() + size;
    while total > UPLOAD_BYTES_CAP {
        let Some(old) = state.upload_order.pop_front() else {
            break;
        };
        if let Some(u) = state.uploads.remove(&old) {
            total -= u.bytes.len();
        }
    }
    state.uploads.insert(
        path.clone(),
        Upload {
            bytes,
            mime_type: mime.clone(),
            file_name: file_name.clone(),
            upload_id: upload_id.clone(),
            token,
            url: url.clone(),
        },
    );
    state.upload_order.push_back(path);
    if state.config.switches.upload_legacy {
        return Ok(Reply::ok(json!({"url": url})));
    }
    let mut attachment = json!({
        "kind": kind,
        "url": url,
        "mimeType": mime,
        "sizeBytes": size,
        "uploadId": upload_id,
    });
    if let Some(f) = file_name {
        attachment["fileName"] = json!(f);
    }
    Ok(Reply::ok(json!({"attachment": attachment, "url": url})))
}

fn serve_file(state: &mut State, req: &ApiRequest, path: &str) -> Reply {
    let token = req
        .query_params()
        .into_iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v);
    let Some(upload) = state.uploads.get(path) else {
        return Reply::error(404, "NOT_FOUND", "file not found");
    };
    if token.as_deref() != Some(upload.token.as_str()) {
        return Reply::error(403, "FORBIDDEN", "invalid media token");
    }
    let name = upload
        .file_name
        .clone()
        .unwrap_or_else(|| "file".to_owned());
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let encoded: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    Reply {
        status: 200,
        headers: vec![
            (
                "cache-control".into(),
                "private, max-age=0, must-revalidate".into(),
            ),
            (
                "content-disposition".into(),
                format!("inline; filename=\"{ascii}\"; filename*=UTF-8''{encoded}"),
            ),
        ],
        body: ReplyBody::Bytes(upload.bytes.clone(), upload.mime_type.clone()),
    }
}

fn typing(state: &mut State, req: &ApiRequest, agent: &str) -> Handled<Reply> {
    let body = body_object(req)?;
    let conversation = required_str(&body, "conversationId")?.to_owned();
    require_member(state, agent, &conversation)?;
    if !body.get("typing").is_some_and(Value::is_boolean) {
        return Err(bad("INVALID_REQUEST", "typing must be a boolean"));
    }
    match body.get("status") {
        None => {}
        Some(Value::String(s)) if s == "typing" || s == "thinking" => {}
        Some(_) => return Err(bad("INVALID_REQUEST", "status must be typing or thinking")),
    }
    let mut record = Value::Object(body);
    record["agent"] = json!(agent);
    record["at"] = json!(state.now());
    state
        .typing
        .insert((agent.to_owned(), conversation), record.clone());
    push_bounded(&mut state.typing_history, record, HISTORY_CAP);
    Ok(Reply::ok(json!({})))
}

fn streaming(state: &mut State, req: &ApiRequest, agent: &str) -> Handled<Reply> {
    let body = body_object(req)?;
    let conversation = required_str(&body, "conversationId")?.to_owned();
    require_member(state, agent, &conversation)?;
    let now = state.now();
    let mut record = Value::Object(body.clone());
    record["agent"] = json!(agent);
    record["at"] = json!(now);
    push_bounded(&mut state.streaming_history, record, HISTORY_CAP);
    if body.get("streaming") == Some(&Value::Bool(false)) {
        let decision = clear_streaming(state, &conversation);
        return Ok(Reply::ok(json!({"cleared": true, "salvage": decision})));
    }
    let status = body.get("status").and_then(Value::as_str).unwrap_or("");
    if !matches!(status, "streaming" | "thinking") {
        return Err(bad(
            "INVALID_REQUEST",
            "status must be streaming or thinking",
        ));
    }
    let node = state.streaming.entry(conversation).or_default();
    node.agent = agent.to_owned();
    for (key, value) in &body {
        match key.as_str() {
            "text" if value.is_string() => {
                node.fields.insert(key.clone(), value.clone());
            }
            "blocks" => {
                let blocks: Vec<Value> = value
                    .as_array()
                    .map(|b| {
                        b.iter()
                            .filter(|x| x.is_object())
                            .take(30)
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                node.fields.insert(key.clone(), Value::Array(blocks));
            }
            "status" | "messageId" | "turnId" => {
                node.fields.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    node.fields.insert("updatedAt".into(), json!(now));
    Ok(Reply::ok(json!({})))
}

/// Clears a conversation's streaming node and runs the salvage rule (canon-wire.md §4.6).
/// Returns the recorded decision.
pub fn clear_streaming(state: &mut State, conversation: &str) -> Value {
    let Some(node) = state.streaming.remove(conversation) else {
        return Value::Null;
    };
    let text = node
        .fields
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let blocks = node
        .fields
        .get("blocks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let turn_id = node
        .fields
        .get("turnId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let decision = if text.is_empty() && blocks.is_empty() {
        "empty_streaming_content"
    } else if turn_id.as_ref().is_some_and(|t| {
        state.messages.iter().any(|m| {
            m.conversation_id == conversation
                && m.message
                    .pointer("/metadata/turnSemantics")
                    .and_then(Value::as_str)
                    == Some("turn_complete")
                && m.message
                    .pointer("/metadata/turnId")
                    .and_then(Value::as_str)
                    == Some(t.as_str())
        })
    }) {
        "turn_complete_exists"
    } else {
        "salvaged"
    };
    let mut record = json!({
        "conversationId": conversation,
        "turnId": turn_id,
        "decision": decision,
        "at": state.now(),
    });
    if decision == "salvaged" {
        let trail: Vec<Value> = blocks.into_iter().take(20).collect();
        let mut metadata = json!({"turnSemantics": "progress"});
        if let Some(t) = &turn_id {
            metadata["turnId"] = json!(t);
        }
        if !trail.is_empty() {
            metadata["turnTrail"] = Value::Array(trail);
        }
        let message = state.create_message(
            NewMessage {
                conversation_id: conversation.to_owned(),
                sender_id: node.agent.clone(),
                text: Some(text),
                metadata: Some(metadata),
                ..NewMessage::default()
            },
            &EmitOverrides::default(),
        );
        record["messageId"] = message["id"].clone();
    }
    push_bounded(&mut state.salvage_log, record.clone(), HISTORY_CAP);
    record
}

const TURN_STATES: [&str; 7] = [
    "thinking",
    "streaming",
    "tool",
    "waiting_input",
    "completed",
    "interrupted",
    "idle",
];

fn runtime_turn(state: &mut State, req: &ApiRequest, agent: &str) -> Handled<Reply> {
    let body = body_object(req)?;
    let conversation = required_str(&body, "conversationId")?.to_owned();
    require_member(state, agent, &conversation)?;
    let turn_state = body.get("state").and_then(Value::as_str).unwrap_or("");
    if !TURN_STATES.contains(&turn_state) {
        return Err(bad("INVALID_TURN_STATE", "state is invalid"));
    }
    if !body.get("queueDepth").is_some_and(Value::is_u64) {
        return Err(bad(
            "INVALID_REQUEST",
            "queueDepth must be a non-negative integer",
        ));
    }
    for key in ["openedAt", "turnUpdatedAt"] {
        if body.get(key).is_some_and(|v| !v.is_u64()) {
            return Err(bad("INVALID_REQUEST", &format!("{key} must be an integer")));
        }
    }
    let mut record = Value::Object(body);
    record["updatedAt"] = json!(state.now());
    state
        .turn_states
        .insert((agent.to_owned(), conversation), record.clone());
    record["agent"] = json!(agent);
    push_bounded(&mut state.turn_history, record, HISTORY_CAP);
    Ok(Reply::ok(json!({})))
}

/// A public projection of a runtime descriptor: known keys with valid types only (the sim's
/// reading of contracts `normalizePublicRuntimeDescriptor`; `coreControls` and
/// `runtimeControls` are not public).
pub fn project_descriptor(value: &Value) -> Value {
    let mut out = Map::new();
    for key in ["supportsInterrupt", "supportsInputInterrupt"] {
        if let Some(b) = value.get(key).filter(|v| v.is_boolean()) {
            out.insert(key.into(), b.clone());
        }
    }
    if let Some(mode) = value.get("streamingTextMode").and_then(Value::as_str) {
        if matches!(mode, "delta" | "snapshot") {
            out.insert("streamingTextMode".into(), json!(mode));
        }
    }
    if let Some(commands) = value.get("commands").and_then(Value::as_array) {
        let list: Vec<Value> = commands
            .iter()
            .filter(|c| {
                c.get("id")
                    .and_then(Value::as_str)
                    .is_some_and(|id| is_wire_id(id, 80))
            })
            .filter(|c| c.get("label").is_some_and(Value::is_string))
            .take(64)
            .cloned()
            .collect();
        out.insert("commands".into(), Value::Array(list));
    }
    Value::Object(out)
}

fn runtime_status(state: &mut State, req: &ApiRequest, agent: &str) -> Handled<Reply> {
    let body = body_object(req)?;
    let projection = project_descriptor(body.get("runtimeDescriptor").unwrap_or(&Value::Null));
    let now = state.now();
    state.runtime_status.insert(
        agent.to_owned(),
        json!({"raw": Value::Object(body), "projection": projection, "lastSeen": now}),
    );
    Ok(Reply::ok(json!({})))
}

fn consume_signal(state: &mut State, req: &ApiRequest, agent: &str) -> Handled<Reply> {
    let body = body_object(req)?;
    let conversation = required_str(&body, "conversationId")?.to_owned();
    require_member(state, agent, &conversation)?;
    let popped = state
        .signals
        .get_mut(&conversation)
        .and_then(VecDeque::pop_front);
    Ok(Reply::ok(match popped {
        Some(mut s) => {
            s["status"] = json!("signal");
            s
        }
        None => json!({"status": "none"}),
    }))
}

use std::collections::VecDeque;

const DISPOSITIONS: [&str; 6] = [
    "queued",
    "accepted_now",
    "interleaved",
    "trigger_suppressed",
    "rejected",
    "cancelled",
];

fn disposition(
    state: &mut State,
    req: &ApiRequest,
    agent: &str,
    conversation: &str,
    message_id: &str,
) -> Handled<Reply> {
    require_member(state, agent, conversation)?;
    let body = body_object(req)?;
    let value = body
        .get("inboundDisposition")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !DISPOSITIONS.contains(&value) {
        return Err(bad("INVALID_DISPOSITION", "inboundDisposition is invalid"));
    }
    let now = state.now();
    let stored = state
        .find_message_mut(conversation, message_id)
        .ok_or_else(|| Reply::error(404, "MESSAGE_NOT_FOUND", "message not found"))?;
    if !stored.message["metadata"].is_object() {
        stored.message["metadata"] = json!({});
    }
    stored.message["metadata"]["inboundDisposition"] = json!(value);
    push_bounded(
        &mut state.receipts_log,
        json!({"kind": "disposition", "agent": agent, "conversationId": conversation,
               "messageId": message_id, "inboundDisposition": value, "at": now}),
        HISTORY_CAP,
    );
    Ok(Reply::ok(
        json!({"messageId": message_id, "inboundDisposition": value}),
    ))
}

fn mark_read(state: &mut State, agent: &str, conversation: &str) -> Handled<Reply> {
    require_member(state, agent, conversation)?;
    let now = state.now();
    if let Some(c) = state.conversations.get_mut(conversation) {
        c.last_read.insert(agent.to_owned(), now);
    }
    push_bounded(
        &mut state.receipts_log,
        json!({"kind": "read", "agent": agent, "conversationId": conversation, "at": now}),
        HISTORY_CAP,
    );
    Ok(Reply::ok(json!({})))
}

fn discover(state: &mut State, req: &ApiRequest, agent: &str) -> Handled<Reply> {
    let params = req.query_params();
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let query = get("query").unwrap_or_default().to_lowercase();
    if query.chars().count() > 64 {
        return Err(bad("INVALID_QUERY", "query must be at most 64 characters"));
    }
    let limit = match get("limit") {
        None => 20,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=25).contains(&n) => n,
            _ => {
                return Err(bad(
                    "INVALID_LIMIT",
                    "limit must be an integer from 1 to 25",
                ))
            }
        },
    };
    let offset = match get("cursor") {
        None => 0,
        Some(c) => match c.strip_prefix("cur-").and_then(|r| r.split_once(':')) {
            Some((n, q)) if q == query => n.parse::<usize>().unwrap_or(0),
            _ => return Err(bad("INVALID_CURSOR", "cursor is invalid")),
        },
    };
    let matches: Vec<Value> = state
        .principals
        .values()
        .filter(|p| p.is_agent() && p.id != agent)
        .filter(|p| {
            query.is_empty()
                || p.display_name.to_lowercase().starts_with(&query)
                || p.description.to_lowercase().starts_with(&query)
        })
        .map(|p| {
            let owner = p.owner_id.clone().unwrap_or_default();
            let owner_name = state.principals.get(&owner).map(|o| o.display_name.clone());
            let mut entry = json!({
                "principalId": p.id,
                "displayName": p.display_name,
                "owner": {"principalId": owner, "displayName": owner_name},
                "inboundPolicy": p.inbound_policy,
                "groupJoinPolicy": p.group_join_policy,
                "shareable": true,
            });
            if !p.description.is_empty() {
                entry["description"] = json!(p.description);
            }
            if state.config.switches.malformed_directory {
                if let Some(o) = entry.as_object_mut() {
                    o.remove("shareable");
                }
                entry["owner"]["principalId"] = json!("");
            }
            entry
        })
        .collect();
    let page: Vec<Value> = matches.iter().skip(offset).take(limit).cloned().collect();
    let next = (offset + limit < matches.len()).then(|| format!("cur-{}:{query}", offset + limit));
    Ok(Reply::ok(json!({"agents": page, "nextCursor": next})))
}

/// `createdAt` of a message, for callers that need the ISO form of a sim instant.
pub fn iso_now(state: &State) -> String {
    iso_8601(state.now())
}
