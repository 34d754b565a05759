//! Durable card waits as the daemon core sees them (durable-endpoint.md §10): which tool calls
//! go to the card-wait store instead of a blocking wait, the `check_card` action, the
//! `runtime_card_reply` receipt the stream hands over, and the wake event. The store and the
//! Canon calls are the shell's (`canon-approvals`' card waits, canon-adapter's
//! `card_waits.rs`); routing comes only from the call's trusted turn context.

use serde_json::Value;

use crate::protocol::TurnContext;
use crate::tools::{resolve_conversation, trusted_user_id, InteractionAction, ToolInteraction};

/// A card-wait call the shell runs.
#[derive(Debug, Clone, PartialEq)]
pub enum CardWaitCall {
    /// `request_card` (a bounded wait) or `send_card` (one look, no wait) of an interactive
    /// card (durable-endpoint.md §10.5).
    Request(Box<ToolInteraction>),
    /// `check_card` (durable-endpoint.md §10.6).
    Check(CardCheck),
}

impl CardWaitCall {
    /// The tool waits for the human (a `request_card`).
    pub fn waits(&self) -> bool {
        matches!(self, CardWaitCall::Request(i) if i.action == InteractionAction::RequestCard)
    }
}

/// One `check_card`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardCheck {
    /// The current conversation.
    pub conversation_id: String,
    /// The card, or `None` to list the active ones.
    pub card_id: Option<String>,
    /// The trusted turn human (the expected responder), if any.
    pub user_id: Option<String>,
}

/// Plans `check_card [cardId]`: the conversation as for every card (runtime-control.md §3).
pub fn plan_check(
    args: &Value,
    ctx: &TurnContext,
    home_channel: Option<&str>,
) -> Result<CardWaitCall, String> {
    let conversation_id = resolve_conversation(
        args.get("target").and_then(Value::as_str),
        ctx,
        home_channel,
    )
    .map_err(str::to_owned)?;
    let card_id = args
        .get("cardId")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_owned);
    Ok(CardWaitCall::Check(CardCheck {
        conversation_id,
        card_id,
        user_id: trusted_user_id(ctx),
    }))
}

/// A `runtime_card_reply` receipt (durable-endpoint.md §10.8 step 1): the human answered a card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardReceipt {
    /// The conversation.
    pub conversation_id: String,
    /// `metadata.cardId`.
    pub card_id: String,
}

/// The receipt of a `message.created` payload whose message is a `runtime_card_reply`.
pub fn card_receipt(conversation_id: &str, payload: &Value) -> Option<CardReceipt> {
    let metadata = payload.get("message")?.get("metadata")?;
    if metadata.get("type").and_then(Value::as_str) != Some("runtime_card_reply") {
        return None;
    }
    let card_id = metadata
        .get("cardId")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|id| !id.is_empty())?;
    Some(CardReceipt {
        conversation_id: conversation_id.to_owned(),
        card_id: card_id.to_owned(),
    })
}

/// A claimed card wake to hand to Hermes (durable-endpoint.md §10.8 step 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardWake {
    /// The conversation.
    pub conversation_id: String,
    /// The card.
    pub card_id: String,
    /// The designated human, the wake's user (else `canon-card`).
    pub user_id: Option<String>,
    /// The wake lease, echoed in the raw payload and in the shim's answer.
    pub lease: String,
}

/// The wake's message id (durable-endpoint.md §10.8 step 4).
pub fn wake_message_id(card_id: &str) -> String {
    format!("canon-card-response:{card_id}")
}

/// The wake's text (durable-endpoint.md §10.8 step 4), exact.
pub fn wake_text(card_id: &str) -> String {
    format!(
        "Canon card {card_id} received a response. Resume its pending task by calling canon_runtime_control with action check_card and cardId {card_id}. This notification is not authorization. Use only the canonical returned decision; do not request verbal permission, recreate the card, or repeat an already completed write."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_card_reply_receipt_names_its_card() {
        let payload =
            json!({"message": {"metadata": {"type": "runtime_card_reply", "cardId": " k1 "}}});
        assert_eq!(
            card_receipt("c1", &payload),
            Some(CardReceipt {
                conversation_id: "c1".into(),
                card_id: "k1".into()
            })
        );
        let other =
            json!({"message": {"metadata": {"type": "runtime_input_reply", "inputId": "i"}}});
        assert_eq!(card_receipt("c1", &other), None);
    }

    #[test]
    fn check_card_is_bound_to_the_turn() {
        let ctx = TurnContext {
            platform: Some("canon".into()),
            chat_id: Some("c1".into()),
            user_id: Some("h1".into()),
            ..TurnContext::default()
        };
        assert_eq!(
            plan_check(&json!({"action": "check_card", "cardId": "k"}), &ctx, None).unwrap(),
            CardWaitCall::Check(CardCheck {
                conversation_id: "c1".into(),
                card_id: Some("k".into()),
                user_id: Some("h1".into()),
            })
        );
        assert!(wake_text("k").starts_with("Canon card k received a response."));
    }
}
