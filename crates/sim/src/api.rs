//! REST endpoint behaviours of canon-wire.md §11.3 (everything but the stream, which lives in
//! [`crate::stream`]): health, registration, me, conversations, messages with idempotency and
//! rate limits, media upload and token-guarded file serving, typing, streaming with the salvage
//! rule, runtime turn/status/signals, dispositions, read and agent discovery. Runtime
//! interactions are in [`crate::interactions`], verbs in [`crate::verbs`].
//!
//! Handlers are synchronous functions over `&mut State`; they never panic on request input and
//! answer every refusal with the status and `{error, code}` body Canon would use.

use serde_json::{json, Map, Value};

use crate::clock::iso_8601;
use crate::state::{
    canonical_json, push_bounded, EmitOverrides, NewMessage, State, Upload, HISTORY_CAP,
    RECEIPT_TYPES, REPLY_AUTHORITY_SCHEMA, UPLOAD_BYTES_CAP, UPLOAD_LIMIT,
};

/// A request as the handlers see it.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    /// HTTP method, upper case.
    pub method: String,
    /// Path without query.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// Headers, lower-cased names.
    pub headers: Vec<(String, String)>,
    /// Raw body.
    pub body: Vec<u8>,
}

impl ApiRequest {
    /// First header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The bearer token, if any.
    pub fn bearer(&self) -> Option<&str> {
        let v = self.header("authorization")?;
        let (scheme, rest) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
    }

    /// The body as JSON (`None` when it is not JSON).
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// Decoded query parameters.
    pub fn query_params(&self) -> Vec<(String, String)> {
        parse_query(&self.query)
    }
}

/// A response.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: ReplyBody,
}

/// A response body.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyBody {
    /// JSON.
    Json(Value),
    /// Raw bytes with a content type.
    Bytes(Vec<u8>, String),
}

impl Reply {
    /// 200 with a JSON body.
    pub fn ok(body: Value) -> Self {
        Self::json(200, body)
    }

    /// A JSON reply.
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: ReplyBody::Json(body),
        }
    }

    /// A Canon error `{error, code}`.
    pub fn error(status: u16, code: &str, message: &str) -> Self {
        Self::json(status, json!({"error": message, "code": code}))
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The JSON body (null for bytes).
    pub fn json_body(&self) -> Value {
        match &self.body {
            ReplyBody::Json(v) => v.clone(),
            ReplyBody::Bytes(..) => Value::Null,
        }
    }
}

/// Short-circuit helper: `Err(Reply)` is an early answer.
pub type Handled<T> = Result<T, Reply>;

/// Percent-decodes a query component (`+` is a space).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `a=b&c=d` into decoded pairs.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// Whether `s` matches `^[A-Za-z0-9_.:-]{1,max}$`.
pub fn is_wire_id(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// The message id rule of canon-wire.md §2.7.
pub fn is_valid_message_id(s: &str) -> bool {
    is_wire_id(s, 160)
        && s != "."
        && s != ".."
        && !(s.len() >= 4 && s.starts_with("__") && s.ends_with("__"))
}

/// Length of `JSON.stringify(value)` in UTF-16 units.
pub fn json_utf16_len(value: &Value) -> usize {
    value.to_string().encode_utf16().count()
}

/// Character count (code points).
pub fn chars(s: &str) -> usize {
    s.chars().count()
}

fn bad(code: &str, message: &str) -> Reply {
    Reply::error(400, code, message)
}

/// The body as a JSON object, else 400.
pub fn body_object(req: &ApiRequest) -> Handled<Map<String, Value>> {
    match req.json() {
        Some(Value::Object(map)) => Ok(map),
        _ => Err(bad("INVALID_BODY", "request body must be a JSON object")),
    }
}

/// A required string member, else 400.
pub fn required_str<'a>(body: &'a Map<String, Value>, key: &str) -> Handled<&'a str> {
    body.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("INVALID_REQUEST", &format!("{key} is required")))
}

/// The authenticated agent, else 401 (canon-wire.md §11.3).
pub fn authenticate(state: &State, req: &ApiRequest) -> Handled<String> {
    req.bearer()
        .and_then(|k| state.principal_for_key(k))
        .filter(|p| p.is_agent())
        .map(|p| p.id.clone())
        .ok_or_else(|| Reply::error(401, "UNAUTHENTICATED", "missing or invalid API key"))
}

/// The conversation must exist (404) and `agent` must be a member (403).
pub fn require_member(state: &State, agent: &str, conversation: &str) -> Handled<()> {
    let conv = state
        .conversations
        .get(conversation)
        .ok_or_else(|| Reply::error(404, "CONVERSATION_NOT_FOUND", "conversation not found"))?;
    if conv.member_ids.iter().any(|m| m == agent) {
        Ok(())
    } else {
        Err(Reply::error(
            403,
            "NOT_A_MEMBER",
            "not a member of this conversation",
        ))
    }
}

/// Routes an authenticated or public REST request. Returns `None` for paths this module does
/// not serve.
pub fn handle(state: &mut State, req: &ApiRequest) -> Option<Reply> {
    let segments: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
    let method = req.method.as_str();
    let reply = match (method, segments.as_slice()) {
        ("GET", ["healthz", ""] | ["healthz"] | ["health"]) => health(state),
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

/// Validates the attachments of a send (canon-wire.md §4.3, §7.1): at most 10, every element
/// well formed and issued by this simulator. Returns the normalized list.
pub fn validate_attachments(state: &State, value: Option<&Value>) -> Handled<Vec<Value>> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let items = value
        .as_array()
        .ok_or_else(|| bad("INVALID_ATTACHMENTS", "attachments must be an array"))?;
    if items.len() > 10 {
        return Err(bad(
            "TOO_MANY_ATTACHMENTS",
            "at most 10 attachments per message",
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let obj = item
            .as_object()
            .ok_or_else(|| bad("INVALID_ATTACHMENTS", "attachment must be an object"))?;
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        if !matches!(kind, "image" | "audio" | "video" | "file") {
            return Err(bad("INVALID_ATTACHMENTS", "attachment kind is invalid"));
        }
        let url = obj.get("url").and_then(Value::as_str).unwrap_or("");
        if !state.uploads.values().any(|u| u.url == url) {
            return Err(bad(
                "ATTACHMENT_URL_NOT_ALLOWED",
                "attachment url was not issued by Canon",
            ));
        }
        let mut clean = Map::new();
        clean.insert("kind".into(), json!(kind));
        clean.insert("url".into(), json!(url));
        for key in ["uploadId", "mimeType", "fileName", "thumbnailUrl"] {
            if let Some(s) = obj
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                clean.insert(key.into(), json!(s));
            }
        }
        // Numeric fields: kept when finite and non-negative, otherwise dropped (§7.1).
        for key in ["sizeBytes", "width", "height", "durationMs"] {
            if let Some(v) = obj
                .get(key)
                .filter(|v| v.as_f64().is_some_and(|n| n.is_finite() && n >= 0.0))
            {
                clean.insert(key.into(), v.clone());
            }
        }
        if let Some(s) = obj.get("processingStatus").and_then(Value::as_str) {
            if matches!(s, "processing" | "ready" | "failed") {
                clean.insert("processingStatus".into(), json!(s));
            }
        }
        out.push(Value::Object(clean));
    }
    Ok(out)
}

/// Validated parts of a message send shared by `/messages/send` and `send_to`.
pub struct SendParts {
    /// Text.
    pub text: String,
    /// Metadata.
    pub metadata: Option<Value>,
    /// Attachments.
    pub attachments: Vec<Value>,
    /// Content type.
    pub content_type: Option<String>,
    /// Mentions.
    pub mentions: Vec<String>,
    /// Reply-to.
    pub reply_to: Option<String>,
    /// Reply-to position.
    pub reply_to_position: Option<Value>,
}

/// Validates message limits (canon-wire.md §4.3).
pub fn validate_send(
    state: &State,
    conversation: &str,
    text: Option<&Value>,
    metadata: Option<&Value>,
    attachments: Option<&Value>,
    content_type: Option<&Value>,
    mentions: Option<&Value>,
) -> Handled<SendParts> {
    let lenient = state.config.switches.lenient_messages;
    let text = match text {
        Some(Value::String(s)) => s.clone(),
        None if attachments.is_some() => String::new(),
        _ => return Err(bad("INVALID_TEXT", "text must be a string")),
    };
    if !lenient && text.len() > 4096 {
        return Err(bad("TEXT_TOO_LONG", "text exceeds 4096 bytes"));
    }
    let metadata = match metadata {
        None | Some(Value::Null) => None,
        Some(m @ Value::Object(obj)) => {
            if !lenient && json_utf16_len(m) > 4096 {
                return Err(bad(
                    "METADATA_TOO_LARGE",
                    "metadata exceeds 4096 characters",
                ));
            }
            if let Some(t) = obj.get("type").and_then(Value::as_str) {
                if RECEIPT_TYPES.contains(&t) {
                    return Err(bad(
                        "METADATA_TYPE_RESERVED",
                        "metadata type is server-owned",
                    ));
                }
            }
            Some(m.clone())
        }
        Some(_) => return Err(bad("INVALID_METADATA", "metadata must be an object")),
    };
    let attachments = validate_attachments(state, attachments)?;
    let content_type = match content_type {
        None => None,
        Some(Value::String(s))
            if matches!(s.as_str(), "text" | "image" | "audio" | "video" | "file") =>
        {
            Some(s.clone())
        }
        Some(_) => return Err(bad("INVALID_CONTENT_TYPE", "contentType is invalid")),
    };
    let members = state
        .conversations
        .get(conversation)
        .map(|c| c.member_ids.clone())
        .unwrap_or_default();
    let mentions = match mentions {
        None => Vec::new(),
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for m in items {
                match m.as_str() {
                    Some(s) if members.iter().any(|x| x == s) => out.push(s.to_owned()),
                    _ => {
                        return Err(bad(
                            "INVALID_MENTIONS",
                            "mentions must be conversation members",
                        ))
                    }
                }
            }
            out
        }
        Some(_) => return Err(bad("INVALID_MENTIONS", "mentions must be an array")),
    };
    Ok(SendParts {
        text,
        metadata,
        attachments,
        content_type,
        mentions,
        reply_to: None,
        reply_to_position: None,
    })
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

/// 429 with `retryAfter` and `Retry-After`.
pub fn rate_limited(retry_after: u64) -> Reply {
    Reply::json(
        429,
        json!({"error": "rate limit exceeded", "code": "RATE_LIMITED", "retryAfter": retry_after}),
    )
    .with_header("retry-after", &retry_after.to_string())
}

fn check_reply_authority(
    state: &State,
    agent: &str,
    conversation: &str,
    authority: &Value,
    turn: &str,
) -> Handled<()> {
    let invalid = || {
        Reply::error(
            403,
            "REPLY_AUTHORITY_INVALID",
            "reply authority is not valid",
        )
    };
    let token = authority
        .get("token")
        .and_then(Value::as_str)
        .ok_or_else(invalid)?;
    let issued = state.authorities.get(token).ok_or_else(invalid)?;
    let schema_ok = authority.get("schema").and_then(Value::as_str) == Some(REPLY_AUTHORITY_SCHEMA);
    let source_ok = authority.get("sourceMessageId").and_then(Value::as_str)
        == Some(issued.source_message_id.as_str());
    if !schema_ok
        || !source_ok
        || issued.agent != agent
        || issued.conversation_id != conversation
        || state.now() > issued.expires_at
        || issued.claimed_by.as_deref().is_some_and(|t| t != turn)
    {
        return Err(invalid());
    }
    Ok(())
}

/// Strict standard base64 (with padding) decoding.
pub fn decode_base64(input: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let bytes = input.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let chunks = bytes.len() / 4;
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let last = i + 1 == chunks;
        let pad = chunk.iter().rev().take_while(|c| **c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for (j, c) in chunk.iter().enumerate() {
            let v = if j >= 4 - pad { 0 } else { val(*c)? };
            n = (n << 6) | v;
        }
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&decoded[..3 - pad]);
    }
    Some(out)
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

/// Attachment kind from a MIME type.
pub fn kind_of_mime(mime: &str) -> &'static str {
    if mime.starts_with("image/") {
        "image"
    } else if mime.starts_with("audio/") {
        "audio"
    } else if mime.starts_with("video/") {
        "video"
    } else {
        "file"
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_strict() {
        assert_eq!(decode_base64("aGk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(decode_base64("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decode_base64("").as_deref(), Some(&b""[..]));
        assert!(decode_base64("aGk").is_none());
        assert!(decode_base64("a=Gk").is_none());
        assert!(decode_base64("aG!=").is_none());
    }

    #[test]
    fn message_ids_follow_the_server_rule() {
        assert!(is_valid_message_id("hermes-final-abc"));
        assert!(!is_valid_message_id(".."));
        assert!(!is_valid_message_id("__x__"));
        assert!(!is_valid_message_id("a b"));
        assert!(!is_valid_message_id(&"a".repeat(161)));
    }

    #[test]
    fn query_decoding_accepts_both_comma_spellings() {
        let q = parse_query("events=messages%2Ccontacts&x=a,b&y=%zz");
        assert_eq!(q[0].1, "messages,contacts");
        assert_eq!(q[1].1, "a,b");
        assert_eq!(q[2].1, "%zz");
    }
}
