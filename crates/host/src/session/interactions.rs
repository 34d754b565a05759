//! Hermes' blocking clarify and exec approval as Canon runtime
//! interactions: who answers, what Canon is asked, when it expires, how the
//! answer is polled, and the entry in the table of open interactions. The
//! shell creates and polls what [`HitlStart`] describes.

use std::time::Duration;

use canon_wire::types::{ConsumeInteraction, InteractionKind, InteractionRequest};

use super::Session;
use crate::hitl::table::{responder, HitlEntry, HitlKind};
use crate::hitl::{self, ApprovalAsk, ClarifyAsk};
use crate::protocol::{AdapterSendClarify, AdapterSendExecApproval};
use crate::tools::ToolInteraction;

/// A blocking interaction for the shell to create on Canon and then poll.
#[derive(Debug, Clone, PartialEq)]
pub struct HitlStart {
    /// The table key its task reports under.
    pub key: u64,
    /// The conversation (for the log).
    pub conversation_id: String,
    /// The create call.
    pub request: InteractionRequest,
    /// The poll (and, on a cancel, the cancel) call.
    pub consume: ConsumeInteraction,
    /// How long Canon waits for the human.
    pub timeout: Duration,
    /// For a tool's interaction: what follows the create call
    /// ([`ToolInteraction::after_create`] decides whether to poll, and under which id) and that
    /// a failed poll ends the wait instead of counting as pending. `None` for Hermes' blocking
    /// clarify and approval, which always poll and retry every error.
    pub tool: Option<Box<ToolInteraction>>,
}

impl Session {
    /// `adapter.send_clarify` (runtime-control.md §6.4): an input
    /// interaction for the turn's human, expiring `timeout` from now.
    /// `None` when the table of open interactions is full.
    pub fn clarify(
        &mut self,
        clarify: AdapterSendClarify,
        timeout: Duration,
        now_ms: u64,
    ) -> Option<HitlStart> {
        let responder = responder(self.machine.responder(&clarify.session_key), &clarify.ctx);
        let request = hitl::clarify_request(&ClarifyAsk {
            conversation_id: &clarify.chat_id,
            clarify_id: &clarify.clarify_id,
            question: &clarify.question,
            choices: clarify.choices.as_deref().unwrap_or_default(),
            responder,
            session_key: &clarify.session_key,
            expires_at: expires_at(now_ms, timeout),
        });
        let consume = ConsumeInteraction {
            kind: InteractionKind::Input,
            conversation_id: clarify.chat_id.clone(),
            id: clarify.clarify_id.clone(),
            cancel: false,
        };
        let entry = HitlEntry::new(
            clarify.session_key,
            clarify.chat_id.clone(),
            HitlKind::Clarify {
                clarify_id: clarify.clarify_id,
            },
        );
        let key = self.hitl.open(entry)?;
        Some(HitlStart {
            key,
            conversation_id: clarify.chat_id,
            request: InteractionRequest::Input(request),
            consume,
            timeout,
            tool: None,
        })
    }

    /// `adapter.send_exec_approval` (runtime-control.md §6.2, §6.3, §6.5):
    /// an approval interaction under a fresh id from `random`, expiring at
    /// the smaller of `env_timeout` and Hermes' own approval timeout.
    /// `None` when the table of open interactions is full.
    pub fn exec_approval(
        &mut self,
        approval: AdapterSendExecApproval,
        env_timeout: Duration,
        now_ms: u64,
        random: u128,
    ) -> Option<HitlStart> {
        let timeout = hitl::approval_timeout(env_timeout, self.host_approvals_timeout);
        let approval_id = format!("hermes-{:020x}", random & ((1u128 << 80) - 1));
        let responder = responder(self.machine.responder(&approval.session_key), &approval.ctx);
        let request = hitl::approval_request(&ApprovalAsk {
            conversation_id: &approval.chat_id,
            approval_id: &approval_id,
            command: approval.command.expose(),
            description: approval.description.as_deref(),
            responder,
            owner_id: self.agent.owner_id.as_deref(),
            allow_session: approval.allow_session.unwrap_or(true),
            smart_denied: approval.smart_denied,
            session_key: &approval.session_key,
            expires_at: expires_at(now_ms, timeout),
        });
        let consume = ConsumeInteraction {
            kind: InteractionKind::Approval,
            conversation_id: approval.chat_id.clone(),
            id: approval_id,
            cancel: false,
        };
        let entry = HitlEntry::new(
            approval.session_key,
            approval.chat_id.clone(),
            HitlKind::Approval {
                expected: request.response_user_id.clone(),
                allow_session: request.allow_session_rule,
            },
        );
        let key = self.hitl.open(entry)?;
        Some(HitlStart {
            key,
            conversation_id: approval.chat_id,
            request: InteractionRequest::Approval(request),
            consume,
            timeout,
            tool: None,
        })
    }
}

/// The epoch-ms deadline `timeout` after `now_ms`.
fn expires_at(now_ms: u64, timeout: Duration) -> u64 {
    now_ms.saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
}
