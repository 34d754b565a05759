//! Detached approvals in the session (approvals.md §9–§13): a tool or domain-plugin call becomes
//! a [`SessionEffect::Detached`] the shell runs against the registry and Canon, and its result
//! answers the call; an `approval_reply` receipt goes to the shell; a decided approval's wake
//! becomes an `inbound.message` whose answer from the shim (Hermes accepted the event, or did
//! not) is handed back so that the shell can finish the wake's lease.

use std::collections::HashMap;

use canon_dispatch::protocol::DeliveryIntent;
use serde_json::Value;

use super::tools::{api_result_frame, tool_result_frame};
use super::{Session, SessionEffect};
use crate::conversations::conversation_type_of;
use crate::detached::{self, ApprovalWake, DetachedCall};
use crate::inbound::PendingEvent;
use crate::protocol::{DaemonRequest, EventSource, InboundEvent, InboundMessage, InboundMetadata};
use crate::tools;
use canon_wire::secret::Opaque;

/// Wakes handed to the shim and not yet answered, by daemon request id; bounded by the
/// registry's own leases (a wake lease lasts 60 s), so a small cap suffices.
pub(super) const MAX_WAKES_IN_FLIGHT: usize = 256;

/// The answer of a detached-approval call: the tool's result envelope, or the helper's value
/// or error.
pub fn detached_answer(
    id: &str,
    re: &str,
    api: bool,
    result: Result<Value, String>,
) -> SessionEffect {
    if api {
        return api_result_frame(id, re, result);
    }
    let envelope = match result {
        Ok(Value::Object(fields)) => tools::success(fields),
        Ok(other) => tools::success(std::iter::once(("value".to_owned(), other)).collect()),
        Err(error) => tools::failure(&error),
    };
    tool_result_frame(id, re, envelope)
}

/// A wake's event fields (approvals.md §13 step 4, durable-endpoint.md §10.8 step 4).
pub(super) struct WakeEvent {
    pub(super) conversation_id: String,
    pub(super) message_id: String,
    pub(super) text: String,
    pub(super) user_id: String,
    pub(super) user_name: String,
    pub(super) raw: Value,
}

/// What a wake handed to the shim was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum WakeFor {
    /// A decided detached approval.
    Approval(String),
    /// An answered card (its conversation, card and wake lease).
    Card(crate::card_waits::CardWake),
}

impl WakeFor {
    /// The effect that finishes this wake with the shim's answer.
    fn answered(self, delivered: bool) -> SessionEffect {
        match self {
            WakeFor::Approval(approval_id) => SessionEffect::ApprovalWakeAnswered {
                approval_id,
                delivered,
            },
            WakeFor::Card(wake) => SessionEffect::CardWakeAnswered {
                wake: Box::new(wake),
                delivered,
            },
        }
    }
}

/// The wakes handed to the shim whose delivery is not over yet.
///
/// A wake is delivered once Hermes runs it. The shim's answer says so for a wake Hermes took
/// at once; a wake Hermes queued behind a running turn (the answer says `queued`) is delivered
/// only when its turn starts, because a gateway stop discards that queue and the wake, finished
/// as delivered, would never reach the agent. So a queued wake waits here until its turn starts
/// (delivered), the session's queue empties without it (Hermes let it go: delivered, as for a
/// queued message), or the gateway stops or the connection goes (put back, so the registry hands
/// it over again).
#[derive(Debug, Clone, Default)]
pub(super) struct WakesInFlight {
    /// Daemon request id → (the wake event's reference, the wake), until the shim answers.
    by_request: HashMap<String, (String, WakeFor)>,
    /// Event reference → (Hermes session key, the wake), for wakes waiting in Hermes' queue.
    queued: HashMap<String, (String, WakeFor)>,
}

impl WakesInFlight {
    /// Whether another wake may be handed over.
    pub(super) fn has_room(&self) -> bool {
        self.by_request.len() + self.queued.len() < MAX_WAKES_IN_FLIGHT
    }

    /// Remembers the wake with event reference `event_ref`, sent as daemon request `request_id`.
    pub(super) fn sent(&mut self, request_id: String, event_ref: String, wake: WakeFor) {
        self.by_request.insert(request_id, (event_ref, wake));
    }

    /// The shim answered request `request_id`: the wake's end, unless Hermes queued it in
    /// session `queued_in` (it then waits for its turn).
    fn answered(
        &mut self,
        request_id: &str,
        accepted: bool,
        queued_in: Option<&str>,
    ) -> Option<SessionEffect> {
        let (event_ref, wake) = self.by_request.remove(request_id)?;
        match queued_in.filter(|_| accepted) {
            Some(session) => {
                self.queued.insert(event_ref, (session.to_owned(), wake));
                None
            }
            None => Some(wake.answered(accepted)),
        }
    }

    /// Turns of `refs` started: their queued wakes are delivered.
    pub(super) fn started(&mut self, refs: &[&str]) -> Vec<SessionEffect> {
        refs.iter()
            .filter_map(|r| self.queued.remove(*r))
            .map(|(_, wake)| wake.answered(true))
            .collect()
    }

    /// Every wake still queued in `session_key` ends: `delivered` when Hermes let its queue go,
    /// not when a stop discarded it.
    pub(super) fn let_go(&mut self, session_key: &str, delivered: bool) -> Vec<SessionEffect> {
        let refs: Vec<String> = self
            .queued
            .iter()
            .filter(|(_, (session, _))| session == session_key)
            .map(|(event_ref, _)| event_ref.clone())
            .collect();
        refs.iter()
            .filter_map(|r| self.queued.remove(r))
            .map(|(_, wake)| wake.answered(delivered))
            .collect()
    }
}

impl Session {
    /// A detached-approval call of the tool (`api: false`) or of a domain-plugin helper.
    pub(super) fn detached_call(
        &mut self,
        id: String,
        re: &'static str,
        api: bool,
        planned: Result<DetachedCall, String>,
    ) -> Vec<SessionEffect> {
        match planned {
            Ok(call) => vec![SessionEffect::Detached {
                id,
                re,
                api,
                call: Box::new(call),
            }],
            Err(error) => vec![detached_answer(&id, re, api, Err(error))],
        }
    }

    /// A decided approval's wake (approvals.md §13 step 4): an ordinary Canon text event of the
    /// registry's conversation, whose user is the responder (follow-up requests of that turn
    /// route to them) and whose message id names the approval. Queued behind a running turn of
    /// that conversation, never steering it. Without a connected adapter (or with too many wakes
    /// unanswered) it is not delivered, and the shell puts the wake back.
    pub(super) fn approval_wake(&mut self, wake: ApprovalWake) -> Vec<SessionEffect> {
        if !self.connected || !self.wakes.has_room() {
            return vec![SessionEffect::ApprovalWakeAnswered {
                approval_id: wake.approval_id,
                delivered: false,
            }];
        }
        let message = self.wake_event(WakeEvent {
            conversation_id: wake.conversation_id,
            message_id: detached::wake_message_id(&wake.approval_id),
            text: wake.text,
            user_id: wake.user_id,
            user_name: wake.user_name,
            raw: wake.raw,
        });
        let line = self.wake_line(message, WakeFor::Approval(wake.approval_id));
        vec![SessionEffect::Frame(line)]
    }

    /// A wake as an ordinary Canon text event of its conversation (a fresh event reference, the
    /// chat facts from the cache), queued behind a running turn there, never steering it.
    pub(super) fn wake_event(&mut self, wake: WakeEvent) -> InboundMessage {
        let (chat_name, chat_type) = self.conversations.chat_facts(&wake.conversation_id);
        let event_ref = self.events.remember(PendingEvent {
            message_id: Some(wake.message_id.clone()),
            reply_authority: None,
            conversation_type: conversation_type_of(Some(chat_type)),
            disposition_queued: false,
        });
        InboundMessage {
            event_ref,
            event: InboundEvent {
                text: wake.text,
                message_type: "text".into(),
                source: EventSource {
                    chat_id: wake.conversation_id,
                    chat_name: Some(chat_name),
                    chat_type: chat_type.to_owned(),
                    user_id: Some(wake.user_id),
                    user_name: Some(wake.user_name),
                    message_id: Some(wake.message_id.clone()),
                    thread_id: None,
                },
                message_id: Some(wake.message_id),
                reply_to_message_id: None,
                media: Vec::new(),
                channel_prompt: None,
                channel_context: None,
                metadata: InboundMetadata {
                    delivery_intent: Some(DeliveryIntent::Queue.as_str().to_owned()),
                },
                raw: Opaque(wake.raw),
                internal: false,
            },
            reply_authority: None,
        }
    }

    /// The line of a wake event (an `inbound.message`), remembered under its request id.
    pub(super) fn wake_line(&mut self, message: InboundMessage, wake: WakeFor) -> String {
        let event_ref = message.event_ref.clone();
        let line = self.request_line(DaemonRequest::InboundMessage(message));
        self.wakes
            .sent(format!("d:{}", self.next_daemon_id), event_ref, wake);
        line
    }

    /// The shim answered a daemon request: when it was a wake, whether Hermes accepted it, and
    /// the session whose queue holds it when Hermes queued it.
    pub(super) fn wake_answered(
        &mut self,
        request_id: &str,
        accepted: bool,
        queued_in: Option<&str>,
    ) -> Vec<SessionEffect> {
        self.wakes
            .answered(request_id, accepted, queued_in)
            .into_iter()
            .collect()
    }

    /// The connection is gone: the shim will not answer the wakes in flight, and those queued
    /// in Hermes may never run, so the shell puts them all back now rather than after their
    /// leases (a wake still waiting in a live queue is answered as queued again).
    pub(super) fn drop_wakes(&mut self) -> Vec<SessionEffect> {
        let in_flight = self.wakes.by_request.drain().map(|(_, (_, wake))| wake);
        let queued = self.wakes.queued.drain().map(|(_, (_, wake))| wake);
        in_flight
            .chain(queued)
            .map(|wake| wake.answered(false))
            .collect()
    }
}
