//! The test control API of canon-wire.md §11.5, over HTTP under `/__sim/` (no auth, loopback
//! only). The same operations are Rust methods on [`crate::SimHandle`]; both call the
//! functions here.
//!
//! | method and path | operation |
//! |---|---|
//! | `POST /__sim/reset` | empty all state, keep the seed |
//! | `POST /__sim/principals` | create a principal ([`crate::PrincipalSpec`]) → `{id, apiKey?}` |
//! | `POST /__sim/conversations` | create a conversation ([`crate::ConversationSpec`]) → `{id}` |
//! | `POST /__sim/messages` | inject a message ([`Injection`]) → the serialized message |
//! | `POST /__sim/long-answer` | inject another agent's N-part answer ([`LongAnswer`]) |
//! | `POST /__sim/interactions/respond` | answer an interaction ([`crate::state::Response`]) |
//! | `POST /__sim/signals` | raise a signal ([`Signal`]) |
//! | `POST /__sim/events` | push an arbitrary event `{agent, event, data, durable?}` |
//! | `POST /__sim/registrations/{id}/approve` / `reject` | registration decisions |
//! | `POST /__sim/clock` | `{action: freeze\|unfreeze\|advance\|set, ms?}` |
//! | `POST /__sim/streams` | `{agent, action: close\|reset\|stall\|expire_replay, ms?}` |
//! | `POST /__sim/switches` | merge switch values |
//! | `GET /__sim/faults`, `POST /__sim/faults`, `DELETE /__sim/faults[/{id}]` | fault rules |
//! | `GET /__sim/journal?since=N&path=P` | journal entries |
//! | `GET /__sim/state` | a state snapshot |
//! | `POST /__sim/wait_for` | long-poll on a [`Predicate`] (`timeoutMs`, default 5000) |
//! | `GET /__sim/env` | the `--print-env` lines |

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::faults::FaultRule;
use crate::http::{ApiRequest, Reply};
use crate::shared::Shared;
use crate::state::{ConversationSpec, EmitOverrides, NewMessage, PrincipalSpec, State, StreamCmd};

/// A message injected by a test (canon-wire.md §11.5 `inject_message`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Injection {
    /// Conversation (default `c-direct`).
    pub conversation_id: Option<String>,
    /// Sender (default `h-owner`).
    pub sender_id: Option<String>,
    /// Text.
    pub text: Option<String>,
    /// Content type.
    pub content_type: Option<String>,
    /// Attachments (must come from uploads).
    pub attachments: Vec<Value>,
    /// Raw attachments `{bytesBase64, mimeType, fileName}`, uploaded first.
    pub raw_attachments: Vec<Value>,
    /// Mentions.
    pub mentions: Vec<String>,
    /// Reply-to.
    pub reply_to: Option<String>,
    /// Metadata (any keys).
    pub metadata: Option<Value>,
    /// Contact card.
    pub contact_card: Option<Value>,
    /// `"omit"` drops `turnDispatch`; any other string forces that kind.
    pub turn_dispatch: Option<String>,
    /// Replaces `provenance`.
    pub provenance: Option<Value>,
    /// Replaces `conversation`.
    pub conversation: Option<Value>,
    /// Deliver twice.
    pub duplicate: bool,
}

/// Another agent's N-part answer (canon-wire.md §6.2), for suppressed background context.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LongAnswer {
    /// Conversation.
    pub conversation_id: String,
    /// The answering agent.
    pub sender_id: String,
    /// Part texts in order.
    pub parts: Vec<String>,
    /// Turn id of the answer.
    pub turn_id: Option<String>,
}

/// A raised signal (canon-wire.md §11.5 `raise_signal`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Signal {
    /// Conversation.
    pub conversation_id: String,
    /// `interrupt`, `stop_and_drop` or `new_session`.
    pub signal: String,
    /// Who raised it.
    pub updated_by: Option<String>,
    /// Ring the `runtime.control` doorbell (default: the `doorbell` switch).
    pub doorbell: Option<bool>,
}

/// A condition `wait_for` waits on. Every present member must hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Predicate {
    /// A stored message matching these fields exists.
    pub message: Option<MessageMatch>,
    /// At least `minCount` journal entries match.
    pub journal: Option<JournalMatch>,
    /// At least this many streams are open for `agent`.
    pub open_streams: Option<OpenStreams>,
}

/// Message fields to match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MessageMatch {
    /// Conversation.
    pub conversation_id: Option<String>,
    /// Sender.
    pub sender_id: Option<String>,
    /// Text contains.
    pub text_contains: Option<String>,
    /// `metadata.turnSemantics`.
    pub turn_semantics: Option<String>,
}

/// Journal entries to count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JournalMatch {
    /// Method.
    pub method: Option<String>,
    /// Path prefix.
    pub path: String,
    /// Minimum count (default 1).
    pub min_count: Option<usize>,
}

/// Open stream count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OpenStreams {
    /// Agent.
    pub agent: String,
    /// Minimum count (default 1).
    pub min_count: Option<usize>,
}

impl Predicate {
    /// Whether the predicate holds now.
    pub fn holds(&self, state: &State) -> bool {
        if let Some(m) = &self.message {
            let found = state.messages.iter().any(|s| {
                let msg = &s.message;
                m.conversation_id
                    .as_ref()
                    .is_none_or(|c| *c == s.conversation_id)
                    && m.sender_id
                        .as_ref()
                        .is_none_or(|x| msg["senderId"].as_str() == Some(x))
                    && m.text_contains.as_ref().is_none_or(|t| {
                        msg["text"].as_str().is_some_and(|x| x.contains(t.as_str()))
                    })
                    && m.turn_semantics.as_ref().is_none_or(|t| {
                        msg.pointer("/metadata/turnSemantics")
                            .and_then(Value::as_str)
                            == Some(t)
                    })
            });
            if !found {
                return false;
            }
        }
        if let Some(j) = &self.journal {
            if state.journal.count(j.method.as_deref(), &j.path) < j.min_count.unwrap_or(1) {
                return false;
            }
        }
        if let Some(o) = &self.open_streams {
            let n = state
                .open_streams
                .values()
                .filter(|s| s.agent == o.agent)
                .count();
            if n < o.min_count.unwrap_or(1) {
                return false;
            }
        }
        true
    }
}

/// Injects a message (canon-wire.md §11.5).
pub fn inject(state: &mut State, inj: &Injection) -> Result<Value, String> {
    let conversation = inj
        .conversation_id
        .clone()
        .unwrap_or_else(|| "c-direct".to_owned());
    let sender = inj
        .sender_id
        .clone()
        .unwrap_or_else(|| "h-owner".to_owned());
    if !state.conversations.contains_key(&conversation) {
        return Err(format!("unknown conversation {conversation}"));
    }
    if !state.principals.contains_key(&sender) {
        return Err(format!("unknown sender {sender}"));
    }
    let mut attachments = inj.attachments.clone();
    for raw in &inj.raw_attachments {
        let data = raw.get("bytesBase64").and_then(Value::as_str).unwrap_or("");
        let bytes = crate::http::decode_base64(data).ok_or("bytesBase64 is not valid base64")?;
        let mime = raw
            .get("mimeType")
            .and_then(Value::as_str)
            .unwrap_or("application/octet-stream");
        let name = raw.get("fileName").and_then(Value::as_str);
        attachments.push(store_upload(state, &conversation, bytes, mime, name));
    }
    let overrides = EmitOverrides {
        turn_dispatch: inj
            .turn_dispatch
            .as_ref()
            .map(|k| (k != "omit").then(|| k.clone())),
        provenance: inj.provenance.clone(),
        conversation: inj.conversation.clone(),
        duplicate: inj.duplicate,
    };
    Ok(state.create_message(
        NewMessage {
            conversation_id: conversation,
            sender_id: sender,
            text: inj.text.clone(),
            content_type: inj.content_type.clone(),
            attachments,
            mentions: inj.mentions.clone(),
            reply_to: inj.reply_to.clone(),
            metadata: inj.metadata.clone(),
            contact_card: inj.contact_card.clone(),
            ..NewMessage::default()
        },
        &overrides,
    ))
}

/// Stores bytes as an upload and returns the attachment object.
pub fn store_upload(
    state: &mut State,
    conversation: &str,
    bytes: Vec<u8>,
    mime: &str,
    name: Option<&str>,
) -> Value {
    let hex = state.ids.hex(16);
    let file = name.unwrap_or("file").to_owned();
    let path = format!("{conversation}/{hex}/{}", file.replace('/', "_"));
    let token = state.ids.token(32);
    let url = format!("{}/files/{path}?token={token}", state.origin);
    let kind = crate::checks::kind_of_mime(mime);
    let size = bytes.len();
    state.uploads.insert(
        path.clone(),
        crate::state::Upload {
            bytes,
            mime_type: mime.to_owned(),
            file_name: name.map(str::to_owned),
            upload_id: hex,
            token,
            url: url.clone(),
        },
    );
    state.upload_order.push_back(path);
    json!({"kind": kind, "url": url, "mimeType": mime, "fileName": name, "sizeBytes": size})
}

/// Injects another agent's N-part answer exactly as canon-wire.md §6.2 describes.
pub fn inject_long_answer(state: &mut State, a: &LongAnswer) -> Result<Vec<Value>, String> {
    if !state.conversations.contains_key(&a.conversation_id) {
        return Err("unknown conversation".to_owned());
    }
    let count = a.parts.len();
    let turn = a
        .turn_id
        .clone()
        .unwrap_or_else(|| format!("hermes-{}", state.ids.hex(20)));
    let group = format!("hermes-final-{}", state.ids.hex(32));
    let mut out = Vec::new();
    for (i, text) in a.parts.iter().enumerate() {
        let index = i + 1;
        let chunk = json!({"type": "text", "index": index, "count": count, "groupId": group});
        let metadata = if index < count {
            json!({"turnSemantics": "progress", "replyBehavior": "suppress_auto_reply", "messageChunk": chunk, "turnId": turn})
        } else {
            json!({"turnSemantics": "turn_complete", "turnComplete": true, "turnId": turn, "messageChunk": chunk})
        };
        out.push(state.create_message(
            NewMessage {
                conversation_id: a.conversation_id.clone(),
                sender_id: a.sender_id.clone(),
                text: Some(text.clone()),
                metadata: Some(metadata),
                client_id: Some(if count > 1 {
                    format!("{group}-part-{index}")
                } else {
                    group.clone()
                }),
                ..NewMessage::default()
            },
            &EmitOverrides::default(),
        ));
    }
    Ok(out)
}

/// Raises a signal and rings the doorbell.
pub fn raise_signal(state: &mut State, s: &Signal) -> Result<Value, String> {
    if !matches!(
        s.signal.as_str(),
        "interrupt" | "stop_and_drop" | "new_session"
    ) {
        return Err("signal must be interrupt, stop_and_drop or new_session".to_owned());
    }
    let conv = state
        .conversations
        .get(&s.conversation_id)
        .cloned()
        .ok_or("unknown conversation")?;
    let signal_id = state.ids.seq("sig");
    let mut entry = json!({"signal": s.signal, "signalId": signal_id});
    if let Some(u) = &s.updated_by {
        entry["updatedBy"] = json!(u);
    }
    let queue = state.signals.entry(s.conversation_id.clone()).or_default();
    if queue.len() >= 64 {
        queue.pop_front();
    }
    queue.push_back(entry.clone());
    if s.doorbell.unwrap_or(state.config.switches.doorbell) {
        for m in &conv.member_ids {
            if state
                .principals
                .get(m)
                .is_some_and(crate::state::Principal::is_agent)
            {
                state.emit(
                    m,
                    "runtime.control",
                    json!({"conversationId": s.conversation_id, "kind": "signal"}),
                    true,
                );
            }
        }
    }
    Ok(entry)
}

/// A JSON snapshot of the state (canon-wire.md §11.5 `state`).
pub fn snapshot(state: &State) -> Value {
    let messages: Vec<Value> = state
        .messages
        .iter()
        .map(|m| json!({"conversationId": m.conversation_id, "clientId": m.client_id, "message": m.message}))
        .collect();
    let streaming: serde_json::Map<String, Value> = state
        .streaming
        .iter()
        .map(|(k, v)| (k.clone(), Value::Object(v.fields.clone())))
        .collect();
    let turns: Vec<Value> = state
        .turn_states
        .iter()
        .map(|((a, c), v)| json!({"agent": a, "conversationId": c, "state": v}))
        .collect();
    let typing: Vec<Value> = state.typing.values().cloned().collect();
    let interactions: Vec<Value> = state
        .interactions
        .values()
        .map(|i| {
            json!({
                "kind": i.kind, "id": i.id, "conversationId": i.conversation_id, "agent": i.agent,
                "state": i.state, "expiresAt": i.expires_at, "responseUserId": i.response_user_id,
                "allowSessionRule": i.allow_session_rule, "interactive": i.interactive,
                "answer": i.answer, "respondedBy": i.responded_by, "messageId": i.message_id,
            })
        })
        .collect();
    let principals: Vec<Value> = state
        .principals
        .values()
        .map(|p| {
            json!({"id": p.id, "type": p.kind, "displayName": p.display_name, "ownerId": p.owner_id,
                        "outboundPolicy": p.outbound_policy, "apiKeys": p.api_keys})
        })
        .collect();
    let conversations: Vec<Value> = state.conversations.values().map(|c| c.to_json()).collect();
    let registrations: Vec<Value> = state
        .registrations
        .iter()
        .map(|r| json!({"requestId": r.request_id, "status": r.status, "polls": r.polls, "acked": r.acked,
                        "localRegistrationId": r.local_registration_id}))
        .collect();
    json!({
        "now": state.now(),
        "principals": principals,
        "conversations": conversations,
        "messages": messages,
        "streaming": streaming,
        "salvage": state.salvage_log,
        "turnStates": turns,
        "turnHistory": state.turn_history,
        "typing": typing,
        "runtimeStatus": state.runtime_status,
        "interactions": interactions,
        "verbs": state.verbs,
        "noReplies": state.no_replies,
        "signals": state.signals,
        "receipts": state.receipts_log,
        "registrations": registrations,
        "openStreams": state.open_streams.len(),
        "mediaAuthSeen": state.media_auth_seen,
        "switches": state.config.switches,
    })
}

/// An `agents.json` object with one profile for `agent` (canon-wire.md §1.3 profile keys).
pub fn agents_json(state: &State, agent: &str, profile_name: &str) -> Value {
    let principal = state.principals.get(agent);
    let registered = crate::clock::iso_8601(state.now());
    // `YYYY-MM-DDTHH:MM:SSZ`: drop the milliseconds.
    let registered_at = format!("{}Z", registered.get(..19).unwrap_or(&registered));
    let mut profiles = serde_json::Map::new();
    profiles.insert(
        profile_name.to_owned(),
        json!({
            "agentId": agent,
            "agentName": principal.map(|p| p.display_name.clone()),
            "apiKey": state.key_of(agent),
            "baseUrl": state.origin,
            "clientType": "hermes",
            "environmentId": state.config.environment.environment_id,
            "firebaseApiKey": "canon-sim-firebase-key",
            "registeredAt": registered_at,
            "rtdbUrl": format!("{}/rtdb", state.origin),
            "streamUrl": state.stream_origin,
        }),
    );
    Value::Object(profiles)
}

/// The `--print-env` lines for the default agent (canon-wire.md §11.1 S4).
pub fn env_lines(state: &State, agent: &str) -> Vec<String> {
    let key = state.key_of(agent).unwrap_or_default();
    let o = &state.origin;
    vec![
        format!("CANON_API_KEY={key}"),
        format!(
            "CANON_ENVIRONMENT_ID={}",
            state.config.environment.environment_id
        ),
        format!("CANON_BASE_URL={o}"),
        format!("CANON_STREAM_URL={}", state.stream_origin),
        format!("CANON_RTDB_URL={o}/rtdb"),
        "CANON_FIREBASE_API_KEY=canon-sim-firebase-key".to_owned(),
        "HERMES_ALLOW_PRIVATE_URLS=true".to_owned(),
        format!("CANON_SIM_CONTROL_URL={o}/__sim"),
    ]
}

fn parse<T: for<'de> Deserialize<'de>>(req: &ApiRequest) -> Result<T, Reply> {
    let body = if req.body.is_empty() {
        b"{}".as_slice()
    } else {
        req.body.as_slice()
    };
    serde_json::from_slice(body)
        .map_err(|e| Reply::error(400, "INVALID_CONTROL_REQUEST", &e.to_string()))
}

fn done(r: Result<Value, String>) -> Reply {
    match r {
        Ok(v) => Reply::ok(v),
        Err(e) => Reply::error(400, "INVALID_CONTROL_REQUEST", &e),
    }
}

/// Applies a stream command to every open stream of `agent`; returns how many got it.
pub fn stream_command(state: &mut State, agent: &str, cmd: &StreamCmd) -> usize {
    state
        .open_streams
        .values()
        .filter(|s| s.agent == agent)
        .filter(|s| s.commands.try_send(cmd.clone()).is_ok())
        .count()
}

/// Merges switch values given as a JSON object.
pub fn merge_switches(state: &mut State, patch: &Value) -> Result<Value, String> {
    let mut current = serde_json::to_value(&state.config.switches).map_err(|e| e.to_string())?;
    let obj = patch.as_object().ok_or("switches must be an object")?;
    for (k, v) in obj {
        if current.get(k).is_none() {
            return Err(format!("unknown switch {k}"));
        }
        current[k.as_str()] = v.clone();
    }
    state.config.switches = serde_json::from_value(current).map_err(|e| e.to_string())?;
    serde_json::to_value(&state.config.switches).map_err(|e| e.to_string())
}

/// Routes a control request.
pub async fn handle(shared: &Shared, req: &ApiRequest) -> Reply {
    let path = req
        .path
        .trim_start_matches("/__sim")
        .trim_start_matches('/');
    let segments: Vec<&str> = path.split('/').collect();
    match (req.method.as_str(), segments.as_slice()) {
        ("POST", ["reset"]) => shared.with(|s| {
            s.reset();
            Reply::ok(json!({}))
        }),
        ("POST", ["principals"]) => match parse::<PrincipalSpec>(req) {
            Ok(spec) => shared.with(|s| {
                let id = s.create_principal(spec);
                Reply::ok(json!({"id": id, "apiKey": s.key_of(&id)}))
            }),
            Err(r) => r,
        },
        ("POST", ["conversations"]) => match parse::<ConversationSpec>(req) {
            Ok(spec) => shared.with(|s| Reply::ok(json!({"id": s.create_conversation(spec)}))),
            Err(r) => r,
        },
        ("POST", ["messages"]) => match parse::<Injection>(req) {
            Ok(i) => done(shared.with(|s| inject(s, &i))),
            Err(r) => r,
        },
        ("POST", ["long-answer"]) => match parse::<LongAnswer>(req) {
            Ok(a) => done(shared.with(|s| inject_long_answer(s, &a)).map(Value::from)),
            Err(r) => r,
        },
        ("POST", ["interactions", "respond"]) => {
            match parse::<crate::interactions::Response>(req) {
                Ok(r) => done(shared.with(|s| crate::interactions::respond(s, &r))),
                Err(r) => r,
            }
        }
        ("POST", ["signals"]) => match parse::<Signal>(req) {
            Ok(sig) => done(shared.with(|s| raise_signal(s, &sig))),
            Err(r) => r,
        },
        ("POST", ["events"]) => match parse::<Value>(req) {
            Ok(v) => {
                let agent = v["agent"].as_str().unwrap_or("a-hermes").to_owned();
                let Some(event) = v["event"].as_str().map(str::to_owned) else {
                    return Reply::error(400, "INVALID_CONTROL_REQUEST", "event is required");
                };
                let durable = v["durable"].as_bool().unwrap_or(true);
                let seq = shared.with(|s| s.emit(&agent, &event, v["data"].clone(), durable));
                Reply::ok(json!({"seq": seq}))
            }
            Err(r) => r,
        },
        ("POST", ["registrations", id, "approve"]) => {
            match shared.with(|s| crate::api::approve_registration(s, id)) {
                Some(agent) => Reply::ok(json!({"agentId": agent})),
                None => Reply::error(404, "NOT_FOUND", "no pending registration"),
            }
        }
        ("POST", ["registrations", id, "reject"]) => {
            if shared.with(|s| crate::api::reject_registration(s, id)) {
                Reply::ok(json!({}))
            } else {
                Reply::error(404, "NOT_FOUND", "no pending registration")
            }
        }
        ("POST", ["clock"]) => match parse::<Value>(req) {
            Ok(v) => shared.with(|s| {
                let ms = v["ms"].as_u64().unwrap_or(0);
                match v["action"].as_str() {
                    Some("freeze") => s.clock.freeze(),
                    Some("unfreeze") => s.clock.unfreeze(),
                    Some("advance") => s.clock.advance(ms),
                    Some("set") => s.clock.set(ms),
                    _ => {
                        return Reply::error(
                            400,
                            "INVALID_CONTROL_REQUEST",
                            "action must be freeze, unfreeze, advance or set",
                        )
                    }
                }
                Reply::ok(json!({"now": s.now(), "frozen": s.clock.is_frozen()}))
            }),
            Err(r) => r,
        },
        ("POST", ["streams"]) => match parse::<Value>(req) {
            Ok(v) => shared.with(|s| {
                let agent = v["agent"].as_str().unwrap_or("a-hermes").to_owned();
                let ms = v["ms"].as_u64().unwrap_or(0);
                let cmd = match v["action"].as_str() {
                    Some("close") => StreamCmd::Close,
                    Some("reset") => StreamCmd::Reset,
                    Some("stall") => StreamCmd::Stall(ms),
                    Some("expire_replay") => {
                        s.expire_replay_buffer(&agent);
                        return Reply::ok(json!({}));
                    }
                    _ => {
                        return Reply::error(
                            400,
                            "INVALID_CONTROL_REQUEST",
                            "action must be close, reset, stall or expire_replay",
                        )
                    }
                };
                Reply::ok(json!({"streams": stream_command(s, &agent, &cmd)}))
            }),
            Err(r) => r,
        },
        ("POST", ["switches"]) => match parse::<Value>(req) {
            Ok(v) => done(shared.with(|s| merge_switches(s, &v))),
            Err(r) => r,
        },
        ("GET", ["faults"]) => shared.read(|s| Reply::ok(json!(s.faults.list()))),
        ("POST", ["faults"]) => match parse::<FaultRule>(req) {
            Ok(rule) => match shared.with(|s| s.faults.add(rule)) {
                Some(id) => Reply::ok(json!({"id": id})),
                None => Reply::error(400, "TOO_MANY_FAULTS", "fault rule cap reached"),
            },
            Err(r) => r,
        },
        ("DELETE", ["faults"]) => shared.with(|s| {
            s.faults.clear();
            Reply::ok(json!({}))
        }),
        ("DELETE", ["faults", id]) => {
            if shared.with(|s| s.faults.remove(id)) {
                Reply::ok(json!({}))
            } else {
                Reply::error(404, "NOT_FOUND", "no such fault rule")
            }
        }
        ("GET", ["journal"]) => {
            let params = req.query_params();
            let since = params
                .iter()
                .find(|(k, _)| k == "since")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            let path = params
                .iter()
                .find(|(k, _)| k == "path")
                .map(|(_, v)| v.clone());
            shared.read(|s| Reply::ok(json!({"cursor": s.journal.cursor(), "entries": s.journal.since(since, path.as_deref())})))
        }
        ("GET", ["state"]) => shared.read(|s| Reply::ok(snapshot(s))),
        ("GET", ["env"]) => shared.read(|s| Reply::ok(json!(env_lines(s, "a-hermes")))),
        ("POST", ["wait_for"]) => match parse::<Value>(req) {
            Ok(v) => {
                let timeout =
                    Duration::from_millis(v["timeoutMs"].as_u64().unwrap_or(5000).min(120_000));
                match serde_json::from_value::<Predicate>(v) {
                    Ok(p) => match wait(shared, timeout, |s| p.holds(s)).await {
                        true => Reply::ok(json!({"ok": true})),
                        false => Reply::error(408, "WAIT_TIMEOUT", "condition not met"),
                    },
                    Err(e) => Reply::error(400, "INVALID_CONTROL_REQUEST", &e.to_string()),
                }
            }
            Err(r) => r,
        },
        _ => Reply::error(404, "NOT_FOUND", "no such control endpoint"),
    }
}

/// Waits until `f` holds or `timeout` (real time) passes. True when it held.
pub async fn wait(shared: &Shared, timeout: Duration, f: impl Fn(&State) -> bool) -> bool {
    let mut rx = shared.subscribe();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if shared.read(&f) {
            return true;
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return shared.read(&f),
        }
    }
}
