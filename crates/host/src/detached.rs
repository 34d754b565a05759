//! Detached (durable) approvals as the daemon core sees them (approvals.md §9–§16,
//! runtime-control.md §4.8–§4.9 and §7.7–§7.8): which calls reach the registry, bound to which
//! conversation and responder, and the two things the event stream and the registry exchange
//! with a session — a receipt to look up and a wake turn to hand to Hermes.
//!
//! The registry itself (`canon-approvals`, a file under `CANON_HOME`) and the Canon calls are the
//! shell's: this module only decides, from the call's trusted turn context (never the model's
//! arguments), what the shell runs. A tool call inside a Canon turn may only check approvals of
//! its own conversation (approvals.md Q3, the recommended decision), like the domain-plugin
//! helper; a check outside a Canon turn (cron, background) is not bound.

use serde_json::Value;

use crate::api::{NO_CANON_CONVERSATION, NO_TRUSTED_HUMAN};
use crate::protocol::TurnContext;
use crate::tools::{resolve_conversation, trusted_user_id, turn_conversation_id};

/// runtime-control.md §4.9, exact.
pub const TOOL_ID_REQUIRED: &str = "approvalId is required for check_approval";
/// approvals.md §11 (the helper's rule), exact.
pub const HELPER_ID_REQUIRED: &str = "approval_id is required";
/// approvals.md §11 (a token from another conversation), exact.
pub const WRONG_CONVERSATION: &str = "Detached approval belongs to a different Canon conversation";

/// A detached-approval call the shell runs against the registry and Canon.
#[derive(Debug, Clone, PartialEq)]
pub enum DetachedCall {
    /// `request_approval` / `request_detached_approval_for_current_human` (approvals.md §9).
    Request(Box<ApprovalAsk>),
    /// `check_approval` / `check_detached_approval` (approvals.md §10–§11).
    Check(ApprovalCheck),
}

/// The inputs of one detached approval, routing already decided. The text arguments stay as
/// the caller gave them: `canon-approvals` normalizes them (approvals.md §9.1) so that Python's
/// and our readings cannot drift apart.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalAsk {
    /// The conversation the approval is asked in.
    pub conversation_id: String,
    /// The trusted turn human who must answer; `None` lets Canon route to the owner.
    pub responder: Option<String>,
    /// `title`.
    pub title: Option<Value>,
    /// `question`.
    pub question: Option<Value>,
    /// `options`.
    pub options: Option<Value>,
    /// `context`.
    pub context: Option<Value>,
    /// `timeoutSeconds` / `timeout_seconds`, unparsed.
    pub timeout_seconds: Option<Value>,
    /// The domain-plugin helper: Canon must name the turn human as the responder
    /// (approvals.md §9.4, helper extra check).
    pub strict_responder: bool,
}

/// One check of a detached approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalCheck {
    /// The approval id, trimmed and non-empty.
    pub approval_id: String,
    /// The conversation the approval must belong to, checked before any lease, write or Canon
    /// call ([`WRONG_CONVERSATION`]); `None` outside a Canon turn.
    pub bound_conversation: Option<String>,
}

fn arg(args: &Value, key: &str) -> Option<Value> {
    args.get(key).filter(|v| !v.is_null()).cloned()
}

/// Plans `request_approval` (approvals.md §9.1): the target, else the turn's conversation, else
/// the home channel (runtime-control.md §3); the responder is the trusted turn human only.
pub fn plan_tool_request(
    args: &Value,
    ctx: &TurnContext,
    home_channel: Option<&str>,
) -> Result<DetachedCall, String> {
    let target = args.get("target").and_then(Value::as_str);
    let conversation_id = resolve_conversation(target, ctx, home_channel).map_err(str::to_owned)?;
    Ok(DetachedCall::Request(Box::new(ApprovalAsk {
        conversation_id,
        responder: trusted_user_id(ctx),
        title: arg(args, "title"),
        question: arg(args, "question"),
        options: arg(args, "options"),
        context: arg(args, "context"),
        timeout_seconds: arg(args, "timeoutSeconds"),
        strict_responder: false,
    })))
}

/// Plans `check_approval` (runtime-control.md §4.9): the id is required; inside a Canon turn
/// the approval must belong to the turn's conversation.
pub fn plan_tool_check(args: &Value, ctx: &TurnContext) -> Result<DetachedCall, String> {
    let approval_id = args
        .get("approvalId")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .ok_or(TOOL_ID_REQUIRED)?;
    Ok(DetachedCall::Check(ApprovalCheck {
        approval_id: approval_id.to_owned(),
        bound_conversation: turn_conversation_id(ctx),
    }))
}

/// Plans `request_detached_approval_for_current_human` (runtime-control.md §7.7): a trusted turn
/// human is required before anything is created, and the approval is asked in the turn's
/// conversation of that human. `args` holds `title`, `question`, `options`, `context` and
/// `timeout_seconds`.
pub fn plan_helper_request(args: &Value, ctx: &TurnContext) -> Result<DetachedCall, String> {
    let conversation_id = turn_conversation_id(ctx).ok_or(NO_CANON_CONVERSATION)?;
    let responder = trusted_user_id(ctx).ok_or(NO_TRUSTED_HUMAN)?;
    Ok(DetachedCall::Request(Box::new(ApprovalAsk {
        conversation_id,
        responder: Some(responder),
        title: arg(args, "title"),
        question: arg(args, "question"),
        options: arg(args, "options"),
        context: arg(args, "context"),
        timeout_seconds: arg(args, "timeout_seconds"),
        strict_responder: true,
    })))
}

/// Plans `check_detached_approval` (runtime-control.md §7.8): the id, then an active Canon turn,
/// whose conversation the approval must belong to.
pub fn plan_helper_check(args: &Value, ctx: &TurnContext) -> Result<DetachedCall, String> {
    let approval_id = match args.get("approval_id") {
        Some(Value::String(id)) => id.trim().to_owned(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    if approval_id.is_empty() {
        return Err(HELPER_ID_REQUIRED.to_owned());
    }
    let conversation = turn_conversation_id(ctx).ok_or(NO_CANON_CONVERSATION)?;
    Ok(DetachedCall::Check(ApprovalCheck {
        approval_id,
        bound_conversation: Some(conversation),
    }))
}

/// An `approval_reply` receipt from the event stream (approvals.md §12): the shell looks the id
/// up in the registry; the receipt never starts an ordinary turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalReceipt {
    /// `metadata.approvalId`.
    pub approval_id: String,
    /// `payload.conversationId`, when present.
    pub conversation_id: Option<String>,
    /// The receipt message's `senderId`.
    pub sender_id: Option<String>,
    /// The receipt message's `senderName`.
    pub sender_name: Option<String>,
    /// The frame's payload (the wake's raw payload when the receipt delivers it).
    pub payload: Value,
}

impl ApprovalReceipt {
    /// The receipt of a `message.created` payload the wake pipeline classified as one.
    pub fn from_payload(
        approval_id: String,
        conversation_id: Option<String>,
        payload: Value,
    ) -> Self {
        let message = payload.get("message");
        let text = |key: &str| {
            message
                .and_then(|m| m.get(key))
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        ApprovalReceipt {
            sender_id: text("senderId"),
            sender_name: text("senderName"),
            approval_id,
            conversation_id,
            payload,
        }
    }
}

/// One decided approval to hand to Hermes as a fresh inbound turn (approvals.md §13 step 4).
#[derive(Clone, PartialEq)]
pub struct ApprovalWake {
    /// The approval id.
    pub approval_id: String,
    /// The registry's conversation.
    pub conversation_id: String,
    /// The exact wake text (it holds the approval's summary: never logged).
    pub text: String,
    /// The responder, else the receipt's sender, else `canon-approval`.
    pub user_id: String,
    /// The receipt's sender name, else `Canon`.
    pub user_name: String,
    /// The receipt frame's payload, else `{conversationId, canonDetachedApproval}`.
    pub raw: Value,
}

impl std::fmt::Debug for ApprovalWake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalWake")
            .field("approval_id", &self.approval_id)
            .field("conversation_id", &self.conversation_id)
            .field("user_id", &self.user_id)
            .finish_non_exhaustive()
    }
}

/// The message id of a wake event, in the event and its source (approvals.md §13 step 4).
pub fn wake_message_id(approval_id: &str) -> String {
    format!("canon-detached-approval:{approval_id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon_ctx(chat: &str, user: Option<&str>) -> TurnContext {
        TurnContext {
            platform: Some("canon".into()),
            chat_id: Some(chat.into()),
            user_id: user.map(str::to_owned),
            ..TurnContext::default()
        }
    }

    #[test]
    fn a_tool_request_takes_its_responder_from_the_turn_never_the_arguments() {
        let args = json!({"action": "request_approval", "question": "Pay?",
                          "responseUserId": "mallory", "timeoutSeconds": 60});
        let DetachedCall::Request(ask) =
            plan_tool_request(&args, &canon_ctx("c1", Some("h1")), None).unwrap()
        else {
            panic!("not a request")
        };
        assert_eq!(ask.conversation_id, "c1");
        assert_eq!(ask.responder.as_deref(), Some("h1"));
        assert_eq!(ask.timeout_seconds, Some(json!(60)));
        assert!(!ask.strict_responder);
    }

    #[test]
    fn a_tool_request_outside_a_turn_goes_to_the_home_channel_with_no_responder() {
        let args = json!({"action": "request_approval", "title": "Deploy"});
        let ctx = TurnContext::default();
        let DetachedCall::Request(ask) = plan_tool_request(&args, &ctx, Some("home")).unwrap()
        else {
            panic!("not a request")
        };
        assert_eq!(
            (ask.conversation_id.as_str(), ask.responder),
            ("home", None)
        );
        assert_eq!(
            plan_tool_request(&args, &ctx, None).unwrap_err(),
            crate::tools::NO_CONVERSATION
        );
    }

    #[test]
    fn a_tool_check_is_bound_to_the_turn_conversation_and_needs_an_id() {
        let ctx = canon_ctx("c1", None);
        assert_eq!(
            plan_tool_check(&json!({"approvalId": "  "}), &ctx).unwrap_err(),
            TOOL_ID_REQUIRED
        );
        let call = plan_tool_check(&json!({"approvalId": " hermes-1 "}), &ctx).unwrap();
        assert_eq!(
            call,
            DetachedCall::Check(ApprovalCheck {
                approval_id: "hermes-1".into(),
                bound_conversation: Some("c1".into()),
            })
        );
        let cron = plan_tool_check(&json!({"approvalId": "hermes-1"}), &TurnContext::default());
        assert!(matches!(
            cron,
            Ok(DetachedCall::Check(ApprovalCheck {
                bound_conversation: None,
                ..
            }))
        ));
    }

    #[test]
    fn the_helpers_need_a_turn_and_the_request_a_human() {
        let no_human = canon_ctx("c1", None);
        assert_eq!(
            plan_helper_request(&json!({"question": "Pay?"}), &no_human).unwrap_err(),
            NO_TRUSTED_HUMAN
        );
        assert_eq!(
            plan_helper_request(&json!({"question": "Pay?"}), &TurnContext::default()).unwrap_err(),
            NO_CANON_CONVERSATION
        );
        let DetachedCall::Request(ask) = plan_helper_request(
            &json!({"question": "Pay?", "timeout_seconds": 90}),
            &canon_ctx("c1", Some("h1")),
        )
        .unwrap() else {
            panic!("not a request")
        };
        assert!(ask.strict_responder);
        assert_eq!(ask.timeout_seconds, Some(json!(90)));
        assert_eq!(
            plan_helper_check(&json!({"approval_id": ""}), &no_human).unwrap_err(),
            HELPER_ID_REQUIRED
        );
        assert_eq!(
            plan_helper_check(&json!({"approval_id": "a"}), &TurnContext::default()).unwrap_err(),
            NO_CANON_CONVERSATION
        );
    }

    #[test]
    fn a_receipt_reads_its_sender_from_the_message() {
        let payload = json!({"conversationId": "c1",
                             "message": {"senderId": " h1 ", "senderName": "Ada", "metadata": {}}});
        let receipt = ApprovalReceipt::from_payload("a1".into(), Some("c1".into()), payload);
        assert_eq!(receipt.sender_id.as_deref(), Some("h1"));
        assert_eq!(receipt.sender_name.as_deref(), Some("Ada"));
    }
}
