//! The daemon's pure state between frames, and the decisions that need
//! more than one piece of it: which shim request an answer belongs to, the
//! turn a `turn.start` opens, the chat a `turn.complete` closes, and what a
//! Canon `message.created` event becomes.
//!
//! The shell owns a [`Session`] and the I/O around it; every method here
//! takes time and randomness as arguments and returns values (frames to
//! write, machine inputs to feed, downloads to start).

use std::collections::HashMap;

use canon_dispatch::pipeline::{Context, Dispatcher, Outcome as PipelineOutcome};
use canon_dispatch::protocol::DeliveryIntent;
use canon_wire::events::MessageCreated;
use serde_json::Value;

use crate::answers::reply_body;
use crate::conversations::{chat_from_session_key, conversation_type_of, ConversationCache};
use crate::hitl::table::HitlTable;
use crate::inbound::{self, EventTable, InboundLanes, PendingEvent};
use crate::media::TrustedScope;
use crate::protocol::{self, DaemonRequest, EventSummary, InboundMessage, OpenTurn};
use crate::turn::{HostReply, ProcessingStart, RequestId, TurnConfig, TurnMachine};

/// Hermes sessions mapped to chats at most (our number); beyond it a new
/// session is not remembered and `turn.complete` falls back to the chat id
/// at the end of the session key.
pub const MAX_SESSIONS: usize = crate::conversations::MAX_CONVERSATIONS;

/// What the connected agent is, from `GET /agents/me` and `agent.context`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentFacts {
    /// The agent's id.
    pub agent_id: Option<String>,
    /// The agent's display name.
    pub agent_name: Option<String>,
    /// The agent's owner (the human who approves for it).
    pub owner_id: Option<String>,
}

/// What the shell does with a `message.created` event.
#[derive(Debug, Clone, PartialEq)]
pub enum InboundStep {
    /// Nothing: the event does not wake a turn (or waits behind a download
    /// in its conversation's lane).
    Nothing,
    /// Send this `inbound.message` now.
    Send(Box<InboundMessage>),
    /// Download the message's attachments (job `job`), then finish it with
    /// `inbound::finish_inbound` and report `media_done`.
    Materialize {
        /// The lane job.
        job: u64,
        /// The conversation.
        conversation_id: String,
        /// The message, before its media.
        message: Box<InboundMessage>,
        /// The Canon message object (the markers read it).
        source: Value,
        /// Its attachments, in order.
        attachments: Vec<Value>,
        /// The delivery intent before any demotion.
        intent: DeliveryIntent,
    },
}

/// The daemon's pure state.
#[derive(Debug)]
pub struct Session {
    /// The turn machine.
    pub machine: TurnMachine,
    /// The wake pipeline.
    pub dispatcher: Dispatcher,
    /// The conversation cache.
    pub conversations: ConversationCache,
    /// Inbound events handed to the shim, for the `turn.start` lookups.
    pub events: EventTable,
    /// Inbound messages waiting for an earlier one's media.
    pub lanes: InboundLanes,
    /// Open blocking clarifications and approvals.
    pub hitl: HitlTable,
    /// The connected agent.
    pub agent: AgentFacts,
    /// Whether `hello` was answered.
    pub handshake_done: bool,
    /// Whether `adapter.connect` succeeded and no disconnect followed.
    pub connected: bool,
    /// Hermes' `approvals.timeout` from `adapter.connect`.
    pub host_approvals_timeout: Option<f64>,
    /// The trusted media scope of the connected adapter.
    pub media_scope: TrustedScope,
    /// Shim requests waiting for the machine's answer: id and type.
    requests: HashMap<u64, (String, &'static str)>,
    next_request: u64,
    /// Session key → chat of the open turn (`turn.complete` names no chat).
    sessions: HashMap<String, String>,
    next_daemon_id: u64,
}

impl Default for Session {
    fn default() -> Session {
        Session {
            machine: TurnMachine::new(TurnConfig::default()),
            dispatcher: Dispatcher::default(),
            conversations: ConversationCache::default(),
            events: EventTable::default(),
            lanes: InboundLanes::default(),
            hitl: HitlTable::default(),
            agent: AgentFacts::default(),
            handshake_done: false,
            connected: false,
            host_approvals_timeout: None,
            media_scope: TrustedScope::default(),
            requests: HashMap::new(),
            next_request: 0,
            sessions: HashMap::new(),
            next_daemon_id: 0,
        }
    }
}

impl Session {
    /// Registers a shim request the turn machine will answer.
    pub fn register(&mut self, id: String, re: &'static str) -> RequestId {
        self.next_request += 1;
        self.requests.insert(self.next_request, (id, re));
        RequestId(self.next_request)
    }

    /// The response line of a machine answer, or `None` for a request that
    /// was never registered (a bug: it is logged).
    pub fn reply_line(&mut self, request: RequestId, reply: HostReply) -> Option<String> {
        let Some((id, re)) = self.requests.remove(&request.0) else {
            tracing::error!(request = request.0, "reply for an unknown request");
            debug_assert!(false, "reply for an unknown request");
            return None;
        };
        Some(protocol::encode_response(&id, re, Ok(reply_body(reply))))
    }

    /// The line of a daemon-originated request, under a fresh `d:<n>` id.
    pub fn request_line(&mut self, request: DaemonRequest) -> String {
        self.next_daemon_id += 1;
        protocol::encode_request(
            &format!("d:{}", self.next_daemon_id),
            request.type_name(),
            request.to_body(),
        )
    }

    /// The machine input of a `turn.start` or a dequeued follow-up: the
    /// session is mapped to its chat (while fewer than [`MAX_SESSIONS`] are),
    /// and the remembered event supplies the reply authority, the queued
    /// disposition and, with the shim's chat type and the wake pipeline's
    /// view as fallbacks, the conversation type. `random` becomes the turn id.
    #[allow(clippy::too_many_arguments)]
    pub fn processing_start(
        &mut self,
        request: RequestId,
        event_ref: &str,
        session_key: String,
        event: &EventSummary,
        queue_depth: u32,
        absorbed_refs: &[String],
        random: u128,
    ) -> ProcessingStart {
        if self.sessions.len() < MAX_SESSIONS || self.sessions.contains_key(&session_key) {
            self.sessions
                .insert(session_key.clone(), event.chat_id.clone());
        }
        let conversation_type = self.events.turn_conversation_type(event_ref, event, || {
            self.dispatcher
                .conversation_type(&event.chat_id, self.conversations.get(&event.chat_id))
        });
        let pending = self.events.get(event_ref);
        ProcessingStart {
            request,
            session_key,
            conversation_id: event.chat_id.clone(),
            message_id: event.message_id.clone(),
            disposition_queued: pending.is_some_and(|p| p.disposition_queued),
            absorbed_queued_ids: self.events.message_ids(absorbed_refs),
            responder: event.user_id.clone(),
            reply_authority: pending.and_then(|p| p.reply_authority.clone()),
            conversation_type,
            queue_depth,
            random,
        }
    }

    /// The chat a `turn.complete` closes: the one its session was mapped
    /// to, else the chat id at the end of the session key. The event is
    /// forgotten.
    pub fn complete(&mut self, session_key: &str, event_ref: &str) -> String {
        self.events.forget(event_ref);
        self.sessions
            .remove(session_key)
            .unwrap_or_else(|| chat_from_session_key(session_key))
    }

    /// A respawned daemon learns the chats of the turns the shim holds open.
    pub fn resync_sessions(&mut self, open_turns: &[OpenTurn]) {
        for turn in open_turns {
            self.sessions
                .insert(turn.session_key.clone(), turn.event.chat_id.clone());
        }
    }

    /// A `message.created` event through the wake pipeline, and whether the
    /// conversation cache's key set changed (then the signal pass's set is
    /// republished).
    pub fn message_created(&mut self, created: MessageCreated) -> (InboundStep, bool) {
        let disposition_queued = inbound::disposition_queued(&created.message);
        let payload = Value::Object(created.payload);
        let conversation_id = created.conversation_id;
        let outcome = {
            let ctx = Context {
                agent_id: self.agent.agent_id.as_deref(),
                agent_name: self.agent.agent_name.as_deref(),
                cached_conversation: self.conversations.get(&conversation_id),
            };
            self.dispatcher.handle_message_created(&payload, ctx)
        };
        let mut keys_changed = false;
        if outcome.reached_conversation_step() {
            if let Some(conversation) = payload.get("conversation").filter(|c| c.is_object()) {
                keys_changed = self
                    .conversations
                    .insert(&conversation_id, conversation.clone());
            }
        }
        let wake = match outcome {
            PipelineOutcome::Wake(wake) => wake,
            other => {
                tracing::debug!(conversation_id, ?other, "inbound message does not wake");
                return (InboundStep::Nothing, keys_changed);
            }
        };
        let event_ref = self.events.remember(PendingEvent {
            message_id: wake.source.message_id.clone(),
            reply_authority: created.reply_authority,
            conversation_type: conversation_type_of(Some(wake.source.chat_type)),
            disposition_queued,
        });
        let intent = wake.delivery_intent;
        let message = inbound::wake_message(event_ref, *wake);
        let step = match inbound::attachments(&created.message) {
            Some(attachments) => InboundStep::Materialize {
                job: self.lanes.pending(&conversation_id),
                conversation_id,
                message: Box::new(message),
                source: Value::Object(created.message),
                attachments,
                intent,
            },
            None => match self.lanes.ready(&conversation_id, message) {
                Some(message) => InboundStep::Send(Box::new(message)),
                None => InboundStep::Nothing,
            },
        };
        (step, keys_changed)
    }
}

#[cfg(test)]
mod tests {
    use canon_dispatch::verbosity::ConversationType;
    use serde_json::json;

    use super::*;

    fn created(id: &str, text: &str, extra: Value) -> MessageCreated {
        let mut message = json!({"id": id, "senderId": "u1", "senderName": "Una",
                                 "senderType": "human", "text": text});
        if let (Value::Object(m), Value::Object(e)) = (&mut message, extra) {
            m.extend(e);
        }
        let payload = json!({"conversationId": "c1", "message": message,
                             "conversation": {"id": "c1", "type": "direct"}});
        let Value::Object(payload) = payload else {
            unreachable!()
        };
        MessageCreated {
            conversation_id: "c1".into(),
            message: payload["message"].as_object().cloned().unwrap_or_default(),
            payload,
            reply_authority: None,
        }
    }

    fn sent(step: InboundStep) -> InboundMessage {
        match step {
            InboundStep::Send(message) => *message,
            other => panic!("expected a message to send: {other:?}"),
        }
    }

    #[test]
    fn a_waking_message_is_sent_remembered_and_opens_its_turn() {
        let mut session = Session::default();
        let (step, keys_changed) = session.message_created(created("m1", "hello", json!({})));
        assert!(keys_changed, "the conversation object is cached");
        let message = sent(step);
        assert_eq!(message.event_ref, "e:1");
        assert_eq!(message.event.text, "hello");
        let request = session.register("s:1".into(), "turn.start");
        let summary = EventSummary {
            chat_id: "c1".into(),
            message_id: Some("m1".into()),
            user_id: Some("u1".into()),
            ..EventSummary::default()
        };
        let start = session.processing_start(
            request,
            "e:1",
            "agent:main:canon:dm:c1".into(),
            &summary,
            0,
            &[],
            5,
        );
        assert_eq!(start.conversation_id, "c1");
        assert_eq!(start.conversation_type, ConversationType::Direct);
        assert_eq!(start.responder.as_deref(), Some("u1"));
        assert_eq!(start.random, 5);
        assert_eq!(session.complete("agent:main:canon:dm:c1", "e:1"), "c1");
        assert!(session.events.get("e:1").is_none());
        // An unknown session falls back to the end of its key.
        assert_eq!(session.complete("agent:main:canon:group:c7", "e:9"), "c7");
    }

    #[test]
    fn a_duplicate_message_does_not_wake_twice() {
        let mut session = Session::default();
        let (first, _) = session.message_created(created("m1", "hello", json!({})));
        assert!(matches!(first, InboundStep::Send(_)));
        let (again, keys_changed) = session.message_created(created("m1", "hello", json!({})));
        assert_eq!(again, InboundStep::Nothing);
        assert!(!keys_changed);
    }

    #[test]
    fn messages_behind_a_download_wait_in_their_lane() {
        let mut session = Session::default();
        let (step, _) = session.message_created(created(
            "m1",
            "see this",
            json!({"attachments": [{"url": "https://x/a.png", "mimeType": "image/png"}]}),
        ));
        let InboundStep::Materialize {
            job,
            message,
            attachments,
            ..
        } = step
        else {
            panic!("expected a download: {step:?}");
        };
        assert_eq!(attachments.len(), 1);
        let (behind, _) = session.message_created(created("m2", "and this", json!({})));
        assert_eq!(behind, InboundStep::Nothing, "waits behind the download");
        let released = session
            .lanes
            .finished("c1", job, *message)
            .expect("the job waits");
        let texts: Vec<&str> = released.iter().map(|m| m.event.text.as_str()).collect();
        assert_eq!(texts, ["see this", "and this"]);
    }

    #[test]
    fn answers_go_to_their_request_once() {
        let mut session = Session::default();
        let request = session.register("s:4".into(), "turn.complete");
        let line = session
            .reply_line(request, HostReply::Done)
            .expect("a line");
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["id"], json!("s:4"));
        assert_eq!(value["re"], json!("turn.complete"));
        assert_eq!(value["ok"], json!(true));
        let first = session.request_line(DaemonRequest::HostQueueDepth(protocol::HostQueueDepth {
            session_key: "s1".into(),
        }));
        assert!(first.contains("\"d:1\""), "{first}");
    }
}
