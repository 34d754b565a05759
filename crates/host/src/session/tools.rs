//! Tool calls of the model-facing Canon tools (`crate::tools`), in the session: a call becomes
//! an answer, the turn machine's `no_reply`, or a runtime interaction the shell creates and
//! (when the action waits for a human) polls, like a blocking clarify; the call's `tool.call`
//! request is answered when the interaction is displayed, answered, timed out or failed.
//! While a tool waits for a human, the turn shows `waiting_input`.

use std::collections::BTreeMap;

use canon_wire::types::InteractionCreated;

use super::interactions::HitlStart;
use super::{Session, SessionEffect};
use crate::hitl::table::HitlOutcome;
use crate::protocol::{self, ShimResponse, ToolCall, ToolResult};
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

/// One open tool interaction.
#[derive(Debug, Clone)]
pub(super) struct ToolWait {
    shim_id: String,
    re: &'static str,
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

/// The frame answering a `tool.call` with its result string.
pub fn tool_result_frame(id: &str, re: &str, result: String) -> SessionEffect {
    SessionEffect::Frame(protocol::encode_response(
        id,
        re,
        Ok(ShimResponse::ToolCall(ToolResult { result }).to_body()),
    ))
}

impl Session {
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
        };
        if !self.connected {
            return vec![tool_result_frame(
                &id,
                re,
                tools::failure(tools::NO_CREDENTIALS),
            )];
        }
        if self.tool_waits.open.len() >= MAX_TOOL_WAITS {
            return vec![tool_result_frame(
                &id,
                re,
                tools::failure(TOO_MANY_TOOL_WAITS),
            )];
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
                session_key: call.ctx.session_key.clone().filter(|k| !k.is_empty()),
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
                vec![
                    SessionEffect::ForgetHitl(key),
                    tool_result_frame(&wait.shim_id, wait.re, text),
                ]
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
        effects.push(tool_result_frame(&wait.shim_id, wait.re, result));
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
