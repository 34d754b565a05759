//! Durable card waits in the session (durable-endpoint.md §10): an interactive card of the tool
//! and `check_card` become a [`SessionEffect::CardWait`] the shell runs, with the turn showing
//! `waiting_input` while a `request_card` waits; a `runtime_card_reply` receipt goes to the
//! shell; a claimed card wake becomes an `inbound.message` asking the model to resume the card
//! with `check_card`, and the shim's answer is handed back (a wake Hermes did not take is put
//! back for the next scan).

use serde_json::{json, Value};

use super::detached::{WakeEvent, WakeFor};
use super::tools::tool_result_frame;
use super::{Session, SessionEffect};
use crate::card_waits::{self, CardWaitCall, CardWake};
use crate::protocol::ToolCall;
use crate::tools;
use crate::turn::Input;

/// The turn a waiting `request_card` belongs to: its session key and conversation.
pub type WaitingTurn = (Option<String>, String);

impl Session {
    /// A card-wait call of the tool.
    pub(super) fn card_wait_call(
        &mut self,
        id: String,
        re: &'static str,
        call: &ToolCall,
        planned: CardWaitCall,
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        if !self.connected {
            return vec![tool_result_frame(
                &id,
                re,
                tools::failure(tools::NO_CREDENTIALS),
            )];
        }
        let mut effects = Vec::new();
        let waiting = match &planned {
            CardWaitCall::Request(interaction) if planned.waits() => {
                let turn = (
                    call.ctx.session_key.clone().filter(|k| !k.is_empty()),
                    interaction.conversation_id.clone(),
                );
                effects.extend(self.feed(
                    Input::WaitingInput {
                        session_key: turn.0.clone(),
                        conversation_id: turn.1.clone(),
                    },
                    now_ms,
                ));
                Some(turn)
            }
            _ => None,
        };
        effects.push(SessionEffect::CardWait {
            id,
            re,
            call: Box::new(planned),
            waiting,
        });
        effects
    }

    /// A card-wait call finished: the turn that waited goes back to `tool`, and the call gets
    /// its result.
    pub(super) fn card_wait_done(
        &mut self,
        id: &str,
        re: &str,
        result: Result<Value, String>,
        waiting: Option<WaitingTurn>,
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        let mut effects = Vec::new();
        if let Some((session_key, conversation_id)) = waiting {
            effects.extend(self.feed(
                Input::InputResolved {
                    session_key,
                    conversation_id,
                },
                now_ms,
            ));
        }
        let envelope = match result {
            Ok(Value::Object(fields)) => tools::success(fields),
            Ok(other) => tools::success(std::iter::once(("value".to_owned(), other)).collect()),
            Err(error) => tools::failure(&error),
        };
        effects.push(tool_result_frame(id, re, envelope));
        effects
    }

    /// A claimed card wake (durable-endpoint.md §10.8 step 4): a text event of the card's
    /// conversation from its designated human, queued behind a running turn.
    pub(super) fn card_wake(&mut self, wake: CardWake) -> Vec<SessionEffect> {
        if !self.connected || !self.wakes.has_room() {
            return vec![SessionEffect::CardWakeAnswered {
                wake: Box::new(wake),
                delivered: false,
            }];
        }
        let message = self.wake_event(WakeEvent {
            conversation_id: wake.conversation_id.clone(),
            message_id: card_waits::wake_message_id(&wake.card_id),
            text: card_waits::wake_text(&wake.card_id),
            user_id: wake
                .user_id
                .clone()
                .unwrap_or_else(|| "canon-card".to_owned()),
            user_name: "Canon".into(),
            raw: json!({"conversationId": wake.conversation_id,
                        "canonCardResponseWake": {"cardId": wake.card_id, "lease": wake.lease}}),
        });
        let line = self.wake_line(message, WakeFor::Card(wake));
        vec![SessionEffect::Frame(line)]
    }
}
