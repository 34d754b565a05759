//! `canon_communicate` calls in the session (runtime-control.md §5; the decisions are
//! `crate::communicate`'s): a call is refused at once (no authority, a closed policy, bad
//! arguments) or becomes one [`SessionEffect::Communicate`] the shell runs, whose
//! [`SessionInput::CommunicateDone`](super::SessionInput::CommunicateDone) is mapped to the
//! tool result. The session also tells the shim whenever the tool's availability changes
//! (`tool.availability`), so Hermes' `check_fn` sees the new verdict at its next check.

use serde_json::{Map, Value};

use super::tools::tool_result_frame;
use super::{notification, Session, SessionEffect};
use crate::communicate::{self, Communicate, Failure};
use crate::protocol::{DaemonNotification, ToolAvailability, ToolCall};
use crate::tools;

impl Session {
    /// Whether `canon_communicate` may be offered now (runtime-control.md §5.1): connected, and
    /// the live outbound policy is `open` or `approval-required`.
    pub fn communicate_available(&self) -> bool {
        self.connected && communicate::is_enabled(self.agent.outbound_policy)
    }

    /// A `canon_communicate` call: the call-time refusals and the argument checks answer at
    /// once; a valid call becomes its Canon call.
    pub(super) fn communicate_call(
        &mut self,
        id: String,
        re: &'static str,
        call: &ToolCall,
    ) -> Vec<SessionEffect> {
        let authority = communicate::authority(
            &call.ctx,
            self.connected,
            self.agent.outbound_policy,
            |conversation_id| self.machine.has_open_turn_in(conversation_id),
        );
        let turn_id = call
            .ctx
            .session_key
            .as_deref()
            .and_then(|key| self.machine.open_turn(key));
        match communicate::plan(&call.args.0, authority, turn_id) {
            Ok(planned) => {
                tracing::debug!(action = ?planned.action, "canon_communicate call");
                vec![SessionEffect::Communicate {
                    id,
                    re,
                    call: Box::new(planned),
                }]
            }
            Err(error) => vec![tool_result_frame(&id, re, tools::failure(&error))],
        }
    }

    /// The notification that the tool's availability changed, when it did since the shim was
    /// last told.
    pub(super) fn communicate_availability(&mut self) -> Option<SessionEffect> {
        let available = self.communicate_available();
        if available == self.communicate_offered {
            return None;
        }
        self.communicate_offered = available;
        tracing::info!(
            available,
            policy = ?self.agent.outbound_policy,
            "canon_communicate availability changed"
        );
        Some(notification(DaemonNotification::ToolAvailability(
            ToolAvailability {
                name: communicate::COMMUNICATE_TOOL.to_owned(),
                available,
            },
        )))
    }
}

/// The frame answering a `canon_communicate` call with the result of its Canon call.
pub(super) fn communicate_answer(
    id: &str,
    re: &str,
    call: &Communicate,
    result: Result<Map<String, Value>, Failure>,
) -> SessionEffect {
    if let Err(failed) = &result {
        tracing::warn!(action = ?call.action, code = failed.code.as_deref().unwrap_or(""), "canon_communicate call failed");
    }
    tool_result_frame(id, re, communicate::answer(call, result))
}
