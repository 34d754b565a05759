//! Tool calls of the model-facing Canon tools (`crate::tools`), in the session: a call becomes
//! an answer, the turn machine's `no_reply`, or a runtime interaction the shell creates and
//! (when the action waits for a human) polls, like a blocking clarify; the call's `tool.call`
//! request is answered when the interaction is displayed, answered, timed out or failed.
//! While a tool waits for a human, the turn shows `waiting_input`.

use std::collections::BTreeMap;

use canon_wire::types::InteractionCreated;
use serde_json::{json, Value};

use super::interactions::HitlStart;
use super::{Session, SessionEffect};
use crate::hitl::table::HitlOutcome;
use crate::protocol::{self, ApiCall, ApiResult, ShimResponse, ToolCall, ToolResult};
use crate::requests;
use crate::tools::{self, AfterCreate, Plan, ToolInteraction, WaitOutcome};
use crate::turn::Input;

/// Tool interactions open at once at most (our number); one more is answered with a failure.
pub const MAX_TOOL_WAITS: usize = 64;

/// The failure of a call while [`MAX_TOOL_WAITS`] are open.
pub const TOO_MANY_TOOL_WAITS: &str =
    "Too many Canon cards and inputs are waiting for answers; try again when one is answered.";

/// The failure of a wait whose turn ended first (Hermes stopped or interrupted it).
pub const WAIT_CANCELLED: &str = "The Canon turn ended before the human answered.";

/// Tool interactions get keys of their own, above every key of the blocking-interaction table,
/// so that the shell's one set of interaction tasks never confuses the two.
const KEY_BASE: u64 = 1 << 62;

/// How the request that opened an interaction is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplyAs {
    /// A `tool.call`: the result string, envelope and all.
    Tool,
    /// An `api.call`: the envelope's fields, or its error.
    Api,
}

/// One open tool interaction.
#[derive(Debug, Clone)]
pub(super) struct ToolWait {
    shim_id: String,
    re: &'static str,
    reply_as: ReplyAs,
    session_key: Option<String>,
    interaction: Box<ToolInteraction>,
    created: Option<InteractionCreated>,
    cancelled: bool,
}

/// The open tool interactions, by key.
#[derive(Debug, Clone, Default)]
pub(super) struct ToolWaits {
    open: BTreeMap<u64, ToolWait>,
    next: u64,
}

impl ToolWaits {
    /// Whether `key` is a tool interaction's.
    pub(super) fn owns(&self, key: u64) -> bool {
        self.open.contains_key(&key)
    }
}

/// The frame answering an `api.call` with the function's value or error.
pub fn api_result_frame(id: &str, re: &str, result: Result<Value, String>) -> SessionEffect {
    let body = match result {
        Ok(value) => ApiResult {
            value: Some(value),
            error: None,
        },
        Err(error) => ApiResult {
            value: None,
            error: Some(error),
        },
    };
    SessionEffect::Frame(protocol::encode_response(
        id,
        re,
        Ok(ShimResponse::ApiCall(body).to_body()),
    ))
}

/// The frame answering the request of `wait` with a tool result envelope.
fn wait_reply(wait: &ToolWait, envelope: String) -> SessionEffect {
    match wait.reply_as {
        ReplyAs::Tool => tool_result_frame(&wait.shim_id, wait.re, envelope),
        ReplyAs::Api => api_result_frame(&wait.shim_id, wait.re, tools::envelope_to_api(&envelope)),
    }
}

/// The frame answering a `tool.call` with its result string.
pub fn tool_result_frame(id: &str, re: &str, result: String) -> SessionEffect {
    SessionEffect::Frame(protocol::encode_response(
        id,
        re,
        Ok(ShimResponse::ToolCall(ToolResult { result }).to_body()),
    ))
}

impl Session {
    /// `current_canon_runtime_health()` of `conversation` (durable-endpoint.md §11.1).
    fn runtime_health(&self, conversation: &str, now_ms: u64) -> Value {
        let open_turns = self
            .sessions
            .iter()
            .filter(|(key, chat)| {
                chat.as_str() == conversation && self.machine.open_turn(key).is_some()
            })
            .count();
        let mut health = crate::api::runtime_health(crate::api::HealthFacts {
            connected: self.connected,
            stream_open: self.stream_open,
            open_turns,
            bound_turns: open_turns,
        });
        // Events Canon will never send again come last in the code order: the codes before
        // it say the agent cannot act now, this one that it may have missed something.
        if health["code"].is_null() && self.event_gaps.recent_for(conversation, now_ms).is_some() {
            health["code"] = Value::from(crate::gaps::EVENTS_MISSED);
        }
        health["eventGap"] = self
            .event_gaps
            .last()
            .map_or(Value::Null, crate::gaps::StreamGap::to_json);
        health
    }

    /// A `tool.call` of a Canon tool other than `no_reply` (which the caller hands to the turn
    /// machine first).
    pub(super) fn tool_call(
        &mut self,
        id: String,
        re: &'static str,
        call: ToolCall,
        home_channel: Option<&str>,
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        if call.name == crate::communicate::COMMUNICATE_TOOL {
            return self.communicate_call(id, re, &call);
        }
        if call.name != requests::RUNTIME_CONTROL_TOOL {
            return vec![tool_result_frame(
                &id,
                re,
                tools::failure(&format!("Unknown Canon tool: {}", call.name)),
            )];
        }
        let interaction = match tools::plan_runtime_control(&call, home_channel, now_ms) {
            Plan::Answer(result) => return vec![tool_result_frame(&id, re, result)],
            Plan::NoReply => {
                let request = self.register(id, re);
                return self.feed(Input::NoReply(requests::no_reply(&call, request)), now_ms);
            }
            Plan::Interact(interaction) => interaction,
            Plan::Detached(planned) => return self.detached_call(id, re, false, Ok(*planned)),
            Plan::CardWait(planned) => return self.card_wait_call(id, re, &call, *planned, now_ms),
        };
        let session_key = call.ctx.session_key.clone();
        self.open_tool_wait(id, re, ReplyAs::Tool, session_key, interaction)
    }

    /// `api.call` (runtime-control.md §7.3, §7.4; cards.md for `validate_card`): the card
    /// helpers of the domain-plugin API run like the tool's card actions, bound to the call's
    /// trusted turn; `validate_card` is answered at once by the same validator.
    pub(super) fn api_call(
        &mut self,
        id: String,
        re: &'static str,
        call: ApiCall,
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        let args = &call.args.0;
        let helper = match call.method.as_str() {
            "validate_card" => {
                let card = args.get("card").cloned().unwrap_or(Value::Null);
                let validation = canon_cards::validate_card(&card);
                let value = json!({"ok": validation.ok, "errors": validation.errors});
                return vec![api_result_frame(&id, re, Ok(value))];
            }
            "upload_media_for_current_conversation" => return self.api_upload(id, re, &call),
            "current_canon_runtime_health" => {
                let health = match crate::api::canon_conversation(&call.ctx) {
                    Some(conversation) => Ok(self.runtime_health(conversation, now_ms)),
                    None => Err(crate::api::NO_CANON_CONVERSATION.to_owned()),
                };
                return vec![api_result_frame(&id, re, health)];
            }
            "request_detached_approval_for_current_human" => {
                let planned = crate::detached::plan_helper_request(args, &call.ctx);
                return self.detached_call(id, re, true, planned);
            }
            "check_detached_approval" => {
                let planned = crate::detached::plan_helper_check(args, &call.ctx);
                return self.detached_call(id, re, true, planned);
            }
            "request_card_for_current_human" => tools::CardHelper::RequestForCurrentHuman,
            "send_card_to_current_conversation" => tools::CardHelper::SendToCurrentConversation,
            other => {
                return vec![api_result_frame(
                    &id,
                    re,
                    Err(format!("Unknown Canon API function: {other}")),
                )]
            }
        };
        match tools::plan_card_helper(helper, args, &call.ctx, now_ms) {
            Ok(interaction) => {
                let session_key = call.ctx.session_key.clone();
                self.open_tool_wait(id, re, ReplyAs::Api, session_key, Box::new(interaction))
            }
            Err(error) => vec![api_result_frame(&id, re, Err(error))],
        }
    }

    /// `upload_media_for_current_conversation` (runtime-control.md §7.5): the shim checked the
    /// bytes and wrote them to a private hand-off file; this checks the turn and the MIME type
    /// and has the shell upload the file into the turn's conversation (and delete it).
    fn api_upload(&mut self, id: String, re: &'static str, call: &ApiCall) -> Vec<SessionEffect> {
        let args = &call.args.0;
        let path = args
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        // A refused call leaves the hand-off file to the shim, which deletes it either way.
        let refuse =
            |error: &str, _path: &str| vec![api_result_frame(&id, re, Err(error.to_owned()))];
        let Some(conversation_id) = tools::turn_conversation_id(&call.ctx) else {
            return refuse(crate::api::NO_CANON_CONVERSATION, &path);
        };
        let mime_type = args
            .get("mime_type")
            .and_then(Value::as_str)
            .map(|m| m.trim().to_lowercase())
            .unwrap_or_default();
        if !mime_type.contains('/') {
            return refuse(tools::UPLOAD_NEEDS_MIME, &path);
        }
        if path.is_empty() {
            return refuse(tools::UPLOAD_NEEDS_DATA, &path);
        }
        if !self.connected {
            return refuse(tools::NO_CREDENTIALS, &path);
        }
        let file_name = args
            .get("file_name")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        // The upload's own number: its answer is this `api.call`'s, not a turn-machine reply.
        self.next_request += 1;
        let request = crate::turn::RequestId(self.next_request);
        self.uploads
            .insert(request.0, super::handle::PendingUpload::Api { id, re });
        vec![SessionEffect::UploadApiMedia {
            request,
            conversation_id,
            path,
            mime_type,
            file_name,
        }]
    }

    /// Opens the interaction of a tool or API call, or answers why it cannot be opened.
    fn open_tool_wait(
        &mut self,
        id: String,
        re: &'static str,
        reply_as: ReplyAs,
        session_key: Option<String>,
        interaction: Box<ToolInteraction>,
    ) -> Vec<SessionEffect> {
        let refusal = if !self.connected {
            Some(tools::NO_CREDENTIALS)
        } else if self.tool_waits.open.len() >= MAX_TOOL_WAITS {
            Some(TOO_MANY_TOOL_WAITS)
        } else {
            None
        };
        if let Some(refusal) = refusal {
            let envelope = tools::failure(refusal);
            return vec![match reply_as {
                ReplyAs::Tool => tool_result_frame(&id, re, envelope),
                ReplyAs::Api => api_result_frame(&id, re, tools::envelope_to_api(&envelope)),
            }];
        }
        self.tool_waits.next += 1;
        let key = KEY_BASE + self.tool_waits.next;
        let start = HitlStart {
            key,
            conversation_id: interaction.conversation_id.clone(),
            request: interaction.request.clone(),
            consume: interaction.consume.clone(),
            timeout: interaction.timeout,
            tool: Some(interaction.clone()),
        };
        self.tool_waits.open.insert(
            key,
            ToolWait {
                shim_id: id.clone(),
                re,
                reply_as,
                session_key: session_key.filter(|k| !k.is_empty()),
                interaction,
                created: None,
                cancelled: false,
            },
        );
        vec![SessionEffect::StartHitl {
            id,
            re,
            start: Box::new(start),
        }]
    }

    /// Canon answered a tool interaction's create call: the call is answered now (displayed,
    /// failed), or the turn waits for its human.
    pub(super) fn tool_created(
        &mut self,
        key: u64,
        result: Result<InteractionCreated, (String, bool)>,
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        let Some(wait) = self.tool_waits.open.get_mut(&key) else {
            return Vec::new();
        };
        let after = wait
            .interaction
            .after_create(result.as_ref().map_err(|(error, _)| error.as_str()));
        match after {
            AfterCreate::Answer(text) => {
                let Some(wait) = self.tool_waits.open.remove(&key) else {
                    return Vec::new();
                };
                vec![SessionEffect::ForgetHitl(key), wait_reply(&wait, text)]
            }
            AfterCreate::Wait(_) => {
                wait.created = result.ok();
                if wait.cancelled {
                    return Vec::new();
                }
                let session_key = wait.session_key.clone();
                let conversation_id = wait.interaction.conversation_id.clone();
                self.feed(
                    Input::WaitingInput {
                        session_key,
                        conversation_id,
                    },
                    now_ms,
                )
            }
        }
    }

    /// A tool interaction's wait ended: the call gets its result, and a turn that waited goes
    /// back to `tool`.
    pub(super) fn tool_finished(
        &mut self,
        key: u64,
        outcome: HitlOutcome,
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        let mut effects = vec![SessionEffect::ForgetHitl(key)];
        let Some(wait) = self.tool_waits.open.remove(&key) else {
            return effects;
        };
        let created = wait
            .created
            .clone()
            .unwrap_or_else(|| InteractionCreated::from_object(serde_json::Map::new()));
        let outcome = match outcome {
            HitlOutcome::Answered(result) => WaitOutcome::Answered(result),
            HitlOutcome::TimedOut => WaitOutcome::TimedOut,
            HitlOutcome::Failed(error) => WaitOutcome::Failed(error),
            HitlOutcome::Cancelled => WaitOutcome::Failed(WAIT_CANCELLED.to_owned()),
        };
        let result = wait.interaction.after_wait(&created, outcome);
        if !wait.cancelled {
            effects.extend(self.feed(
                Input::InputResolved {
                    session_key: wait.session_key.clone(),
                    conversation_id: wait.interaction.conversation_id.clone(),
                },
                now_ms,
            ));
        }
        effects.push(wait_reply(&wait, result));
        effects
    }

    /// Marks the tool interactions of a session (of every session with `None`) cancelled; the
    /// keys whose task the shell must stop (it cancels them on Canon). Each key is returned once.
    pub(super) fn cancel_tool_waits(&mut self, session_key: Option<&str>) -> Vec<u64> {
        let mut keys = Vec::new();
        for (key, wait) in &mut self.tool_waits.open {
            let matches = match session_key {
                None => true,
                Some(k) => wait.session_key.as_deref() == Some(k),
            };
            if !wait.cancelled && matches {
                wait.cancelled = true;
                keys.push(*key);
            }
        }
        keys
    }
}
