//! The public vocabulary of the turn machine: its [`Input`]s, its
//! [`Effect`]s and the values they carry (turns.md §2, §7).
//!
//! Effects are typed descriptions of Canon writes (`/runtime/turn`,
//! `/streaming`, `/typing`, `/messages/send`, `send_to`, dispositions, read
//! marks, the `no_reply` record), host steering (typing pause/resume) and
//! replies to host requests. The driver performs them in the order returned.

use canon_dispatch::verbosity::ConversationType;
use serde_json::{Map, Value};

pub use canon_wire::authority::ReplyAuthority;
pub use canon_wire::types::{
    StreamingUpdate, TurnCapabilities, TurnState, TurnUpdate, Typing, TypingStatus,
};

/// Correlates a host request with the [`Effect::Reply`] that answers it.
/// Assigned by the driver; opaque to the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// One durable delivery operation (turns.md §4.4). Assigned by the machine;
/// the driver echoes it in [`Input::DeliveryOutcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

/// Which endpoint a [`Delivery`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// `POST /messages/send`, one request per part.
    Messages,
    /// `POST /agent/verbs/send_to` (turns.md §4.6: `standalone.send` and a
    /// durable `send` with no turn id), one request per part with
    /// `idempotencyKey` = the part's message id; `replyTo`, `mentions` and
    /// `replyToPosition` ride in the envelope (canon-wire.md §4.15 \[target\]).
    SendTo,
}

/// One durable message of a [`Delivery`]. Built once per operation and
/// stored unchanged until the operation settles, so a replay sends the same
/// bytes (turns.md §4.4).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboundMessage {
    /// The client message id (idempotency key); `None` for a send with no
    /// trusted turn.
    pub message_id: Option<String>,
    /// The part text (≤ 3,800 bytes).
    pub text: String,
    /// `replyTo`, on every part.
    pub reply_to: Option<String>,
    /// Message metadata in wire order.
    pub metadata: Map<String, Value>,
    /// Content options (final part only): the allowed keys of the gateway's
    /// `canon_options` bag.
    pub options: Map<String, Value>,
    /// The turn's reply authority, on every part.
    pub reply_authority: Option<ReplyAuthority>,
    /// `contentType` (final part of a media message only).
    pub content_type: Option<String>,
    /// Uploaded attachment objects (canon-wire.md §7.1; final part only).
    pub attachments: Vec<Value>,
}

/// A durable operation: send `parts` in order, each with the bounded retry of
/// turns.md §4.5, then report [`Input::DeliveryOutcome`].
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The operation.
    pub op: OpId,
    /// The endpoint.
    pub route: Route,
    /// The conversation.
    pub conversation_id: String,
    /// The turn id the ids derive from; `None` for a standalone id group
    /// (turns.md §4.6), whose token never leaves the machine.
    pub turn_id: Option<String>,
    /// Leading parts, then the one `turn_complete` final part.
    pub parts: Vec<OutboundMessage>,
}

/// What a host send/edit is answered with (the shim maps it onto Hermes'
/// `SendResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// Staged or streamed; `message_id` = the turn id.
    Preview {
        /// The turn id.
        turn_id: String,
    },
    /// Auxiliary chatter during a turn, acknowledged and not written
    /// (`suppressedAuxiliary`).
    SuppressedAuxiliary {
        /// The turn id.
        turn_id: String,
    },
    /// The turn chose `no_reply`; nothing was written (`silenced`).
    Silenced {
        /// The turn id.
        turn_id: String,
    },
    /// The turn already committed its `turn_complete`; nothing was sent.
    DuplicateFinal {
        /// The turn id.
        turn_id: String,
    },
    /// The durable send landed.
    Delivered {
        /// The turn id for a `notify` send in a turn, else Canon's id of the
        /// final part.
        message_id: Option<String>,
    },
    /// The durable send failed.
    Failed {
        /// A safe error text (contains `timed out` for timeouts).
        error: String,
        /// Whether Hermes may retry.
        retryable: bool,
    },
}

/// The answer to a `no_reply` tool call (turns.md §8.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoReplyOutcome {
    /// Silenced; the tool returns `{success, status:"acknowledged",
    /// conversationId, note}` with [`NO_REPLY_ACK_NOTE`].
    Acknowledged {
        /// The silenced conversation.
        conversation_id: String,
    },
    /// Refused; the tool returns this error text.
    Refused {
        /// One of the exact texts of turns.md §8.1.
        error: String,
    },
}

impl NoReplyOutcome {
    /// The tool result string in Hermes' envelope (runtime-control.md §2, §4.10):
    /// `{"success":true,"status":"acknowledged","conversationId", "note"}` or
    /// `{"error":…,"success":false}`.
    pub fn tool_result(&self) -> String {
        let value = match self {
            NoReplyOutcome::Acknowledged { conversation_id } => serde_json::json!({
                "success": true,
                "status": "acknowledged",
                "conversationId": conversation_id,
                "note": NO_REPLY_ACK_NOTE,
            }),
            NoReplyOutcome::Refused { error } => serde_json::json!({
                "error": error,
                "success": false,
            }),
        };
        value.to_string()
    }
}

/// The note of an acknowledged `no_reply` (turns.md §8.1; exact).
pub const NO_REPLY_ACK_NOTE: &str = "Acknowledged — nothing was posted to the conversation.";

/// An answer to a host request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostReply {
    /// For `adapter.send` and `adapter.edit`.
    Send(SendOutcome),
    /// For `turn.start` and `turn.accepted`.
    TurnStarted {
        /// The new turn id.
        turn_id: String,
    },
    /// For `turn.complete` and `resync` (`{}`).
    Done,
    /// For the `no_reply` action of `canon_runtime_control`.
    NoReply(NoReplyOutcome),
    /// For `standalone.send`: Canon's message id of the final part, or the
    /// error text `Canon standalone send failed: …`.
    Standalone(Result<Option<String>, String>),
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// `POST /runtime/turn`; failures are logged and ignored. The machine
    /// always sets `turn_id` (on a close, the id being closed) and
    /// `opened_at`.
    PublishTurn(TurnUpdate),
    /// `POST /streaming`; best effort. The machine always sets `turn_id` on
    /// `Set` and `Blank`.
    Streaming(StreamingUpdate),
    /// `POST /typing`; failures ignored. `status` only when `typing` is true.
    Typing(Typing),
    /// Shim notification `typing.pause` (turn entered `waiting_input`).
    PauseTyping {
        /// The chat.
        conversation_id: String,
    },
    /// Shim notification `typing.resume`.
    ResumeTyping {
        /// The chat.
        conversation_id: String,
    },
    /// `PATCH …/disposition {"inboundDisposition":"accepted_now"}` with the
    /// background retries of turns.md §10.3.
    AckDisposition {
        /// The conversation.
        conversation_id: String,
        /// The queued message now running.
        message_id: String,
    },
    /// `POST /conversations/{id}/read`; failure ignored.
    MarkRead {
        /// The conversation.
        conversation_id: String,
    },
    /// A durable operation; answer with [`Input::DeliveryOutcome`].
    Deliver(Delivery),
    /// `POST /agent/verbs/no_reply` telemetry (turns.md §8.4): 3 s budget,
    /// every failure swallowed. The reason text never leaves the process.
    RecordNoReply {
        /// The silenced conversation.
        conversation_id: String,
        /// The triggering message, if known.
        message_id: Option<String>,
        /// Whether a non-blank reason was given (sent as `"given"`).
        reason_given: bool,
    },
    /// A turn closed with no host request waiting for it (a dequeue
    /// boundary closed it): its final was delivered, or it had none and its
    /// closing state was published. The shim keeps such a turn and its answer,
    /// to hand them to a respawned daemon, until it learns this.
    TurnClosed {
        /// The session the turn ran in.
        session_key: String,
        /// The closed turn.
        turn_id: String,
    },
    /// A closing turn's final is stored in Canon (also reported when a resumed
    /// turn's final turns out to have been stored by the daemon before). The
    /// session's durable inbox closes the turn it holds open for its messages
    /// only once an answer to them is stored.
    FinalStored {
        /// The session the turn ran in.
        session_key: String,
        /// The Canon message that started the turn, if any.
        trigger_message_id: Option<String>,
    },
    /// Answer a host request.
    Reply {
        /// The request.
        request: RequestId,
        /// The answer.
        reply: HostReply,
    },
}

/// `on_processing_start` (turns.md §7.3 E1) or a queued follow-up
/// dequeued inside a running session (turns.md §10.3, OQ-18).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessingStart {
    /// The host request to answer.
    pub request: RequestId,
    /// The Hermes session key.
    pub session_key: String,
    /// The Canon conversation (chat id).
    pub conversation_id: String,
    /// The triggering Canon message id.
    pub message_id: Option<String>,
    /// Whether the triggering message carried `inboundDisposition: queued`.
    pub disposition_queued: bool,
    /// The ids of every message the gateway merged into this event: the
    /// turn answers them with it, so they are among its active messages.
    pub absorbed_message_ids: Vec<String>,
    /// Those of them that carried `inboundDisposition: queued` (their
    /// dispositions are acknowledged when the turn opens).
    pub absorbed_queued_ids: Vec<String>,
    /// The trusted human sender (HITL responder).
    pub responder: Option<String>,
    /// The validated reply authority of the triggering message.
    pub reply_authority: Option<ReplyAuthority>,
    /// The conversation type known for this chat (turns.md §6.2).
    pub conversation_type: ConversationType,
    /// The session's queue depth.
    pub queue_depth: u32,
    /// Fresh randomness for the turn id (turns.md §4.1).
    pub random: u128,
}

/// Hermes' processing outcome (hermes-host.md §8.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The run finished (turns.md §7.3 E12).
    Success,
    /// The run failed (turns.md §7.3 E14).
    Failure,
    /// The run was cancelled (turns.md §7.3 E13).
    Cancelled,
}

/// `adapter.send` (turns.md §7.3 E2–E4, §7.6).
#[derive(Debug, Clone, PartialEq)]
pub struct HostSend {
    /// The host request to answer.
    pub request: RequestId,
    /// The task-local session key, when the call came from inside a turn.
    pub session_key: Option<String>,
    /// The chat.
    pub conversation_id: String,
    /// The text.
    pub content: String,
    /// `reply_to`.
    pub reply_to: Option<String>,
    /// The Hermes metadata (markers `expect_edits`, `notify`, and the
    /// optional `canon_options` / `canon_metadata` objects).
    pub metadata: Map<String, Value>,
    /// Fresh randomness in case a turn id must be allocated, or, for a
    /// durable send with no turn id, for its standalone id group
    /// (turns.md §4.6). The driver draws a new value for every call, so
    /// two sends never share ids.
    pub random: u128,
    /// The text is a stopping gateway's refusal of the message ("not accepting new work"):
    /// Hermes ran nothing, and the message is answered after the restart.
    pub stop_notice: bool,
}

/// `adapter.edit` (turns.md §7.3 E2–E3, §7.6).
#[derive(Debug, Clone, PartialEq)]
pub struct HostEdit {
    /// The host request to answer.
    pub request: RequestId,
    /// The task-local session key.
    pub session_key: Option<String>,
    /// The chat.
    pub conversation_id: String,
    /// The full text of the edited message.
    pub content: String,
    /// `finalize`.
    pub finalize: bool,
    /// The Hermes metadata.
    pub metadata: Map<String, Value>,
    /// Fresh randomness in case a turn id must be allocated.
    pub random: u128,
}

/// A hook event about a tool or subagent (turns.md §5.3, E5–E6).
#[derive(Debug, Clone, PartialEq)]
pub enum ActivityEvent {
    /// `pre_tool_call`.
    ToolStarted {
        /// The call id.
        tool_call_id: Option<String>,
        /// The tool name.
        tool_name: Option<String>,
        /// The arguments.
        args: Option<Value>,
    },
    /// `post_tool_call`.
    ToolFinished {
        /// The call id.
        tool_call_id: Option<String>,
        /// The tool name.
        tool_name: Option<String>,
        /// The arguments.
        args: Option<Value>,
        /// The result.
        result: Option<Value>,
        /// `ok`, `error` or `blocked`.
        status: Option<String>,
        /// Duration (an int ≥ 0 gives a summary).
        duration_ms: Option<Value>,
    },
    /// `subagent_stop`.
    SubagentStopped {
        /// The child session.
        child_session_id: Option<String>,
        /// The child role.
        child_role: Option<String>,
        /// The child's summary.
        child_summary: Option<Value>,
        /// `completed`, `failed`, `error`, …
        child_status: Option<String>,
        /// Duration.
        duration_ms: Option<Value>,
    },
}

/// The `no_reply` action (turns.md §8.1).
#[derive(Debug, Clone, PartialEq)]
pub struct NoReplyRequest {
    /// The host request to answer.
    pub request: RequestId,
    /// Whether the task-local session platform is `canon`.
    pub in_canon_context: bool,
    /// The task-local session key.
    pub session_key: Option<String>,
    /// The task-local chat id.
    pub conversation_id: Option<String>,
    /// The model's `target` argument.
    pub target: Option<String>,
    /// Whether a non-blank reason was given (the text itself stays out).
    pub reason_given: bool,
}

/// A cron or out-of-turn notification (turns.md §4.6; hermes-host.md §15).
#[derive(Debug, Clone, PartialEq)]
pub struct StandaloneSend {
    /// The host request to answer.
    pub request: RequestId,
    /// The explicit chat id.
    pub chat_id: Option<String>,
    /// `CANON_HOME_CHANNEL`.
    pub home_channel_env: Option<String>,
    /// The platform's `home_channel.chat_id`.
    pub home_channel_config: Option<String>,
    /// The whole text (never truncated).
    pub text: String,
    /// Uploaded media (hermes-host.md §15): ride on the final part only.
    pub media: Option<MediaPayload>,
    /// Fresh randomness for the id group.
    pub random: u128,
}

/// Uploaded media for one message (canon-wire.md §7.4): the attachment
/// objects Canon's upload returned and the message `contentType`.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaPayload {
    /// `contentType`: `image`, `audio`, `video` or `file`.
    pub content_type: String,
    /// The attachment objects, in order.
    pub attachments: Vec<Value>,
}

/// `adapter.send_media` after its upload (turns.md §7.6 media row, OQ-6).
#[derive(Debug, Clone, PartialEq)]
pub struct HostMedia {
    /// The host request to answer.
    pub request: RequestId,
    /// The task-local session key, when the call came from inside a turn.
    pub session_key: Option<String>,
    /// The chat.
    pub conversation_id: String,
    /// The caption: the message text (may be empty).
    pub caption: String,
    /// `reply_to`.
    pub reply_to: Option<String>,
    /// The Hermes metadata.
    pub metadata: Map<String, Value>,
    /// The uploaded media.
    pub media: MediaPayload,
    /// Fresh randomness for a standalone id group (out of turn).
    pub random: u128,
}

/// A Canon turn an earlier daemon opened and never closed, as the durable inbox kept it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbandonedTurn {
    /// The Canon turn id.
    pub turn_id: String,
    /// The conversation.
    pub conversation_id: String,
    /// When it opened (epoch ms).
    pub opened_at_ms: u64,
}

/// An open turn the shim reports after a daemon respawn
/// (hermes-host.md §19.10).
#[derive(Debug, Clone, PartialEq)]
pub struct ResyncTurn {
    /// The session key.
    pub session_key: String,
    /// The chat.
    pub conversation_id: String,
    /// The turn id from `turn.start`.
    pub turn_id: String,
    /// The triggering message.
    pub message_id: Option<String>,
    /// When the turn started (epoch ms).
    pub started_at_ms: u64,
    /// The conversation type.
    pub conversation_type: ConversationType,
    /// The triggering message's reply authority, as the shim kept it.
    pub reply_authority: Option<ReplyAuthority>,
    /// The turn made a durable send before the respawn (see
    /// [`crate::protocol::OpenTurn`]).
    pub durable_sent: bool,
}

/// How a durable operation failed; decides whether its reservation is
/// released (turns.md §4.4 "Release on failure").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// Provably rejected before the handler ran: HTTP 429 or 503, or a
    /// connection that never established.
    PreHandler,
    /// An HTTP error that is not 409 and not retryable (4xx other than 408,
    /// 425, 429).
    Rejected,
    /// HTTP 409 with the code `MESSAGE_ID_EXISTS` (canon-wire.md §2.4): the
    /// client id already names a message with a different payload. The
    /// ledger keeps the reservation, as for [`FailureClass::Ambiguous`]
    /// (turns.md §4.4); only in a turn resumed after a daemon restart does it
    /// mean that the ordinal was used before the restart, and the operation
    /// moves on to the turn's next ordinal (turns.md §4.4 "Resumed turn").
    IdConflict,
    /// Anything else: another 409, 408, 425, 5xx, timeouts, transport or
    /// protocol errors, malformed responses.
    Ambiguous,
}

impl FailureClass {
    /// Whether the failed call may have stored the message: everything but a
    /// provable pre-handler failure or a rejection (turns.md §4.4 "Release on
    /// failure"; an id conflict keeps its reservation).
    pub fn may_have_landed(self) -> bool {
        matches!(self, FailureClass::IdConflict | FailureClass::Ambiguous)
    }
}

/// A failed durable operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryFailure {
    /// The class.
    pub class: FailureClass,
    /// A safe error text for Hermes (contains `timed out` for timeouts).
    pub error: String,
    /// Whether Hermes may retry (turns.md §4.5).
    pub retryable: bool,
}

/// Everything the machine reacts to.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// `turn.start` (turns.md §7.3 E1).
    ProcessingStart(ProcessingStart),
    /// `turn.accepted {phase:"queue_dequeue"}`: a turn boundary (turns.md OQ-18).
    /// Answered at once with the follow-up's turn id; the boundary itself waits
    /// for the follow-up's first output (see the module doc).
    QueueDequeued {
        /// The dequeued follow-up.
        start: ProcessingStart,
        /// This adapter interrupted the running agent for the follow-up:
        /// the previous turn closes as cancelled.
        interrupted: bool,
        /// The id a daemon before a respawn already answered for this
        /// follow-up (the shim sends the dequeue again after the resync), kept
        /// so the turn Canon may already show goes on under its own id
        /// instead of staying open forever beside a new one.
        turn_id: Option<String>,
    },
    /// `turn.complete`: processing completed, cancelled or failed (turns.md §7.3 E12–E14).
    ProcessingComplete {
        /// The host request to answer once the closing state is published.
        request: RequestId,
        /// The session key.
        session_key: String,
        /// The chat.
        conversation_id: String,
        /// The outcome.
        outcome: Outcome,
        /// The session's queue depth.
        queue_depth: u32,
    },
    /// `adapter.send`.
    Send(HostSend),
    /// `adapter.edit`.
    Edit(HostEdit),
    /// A tool or subagent hook.
    Activity {
        /// The task-local session key.
        session_key: Option<String>,
        /// The task-local chat id.
        conversation_id: String,
        /// The event.
        event: ActivityEvent,
    },
    /// A clarify or blocking approval was created for the turn (turns.md §7.3 E7).
    WaitingInput {
        /// The task-local session key.
        session_key: Option<String>,
        /// The chat.
        conversation_id: String,
    },
    /// The HITL wait resolved, positively or not (turns.md §7.3 E8, E9 with OQ-3).
    InputResolved {
        /// The task-local session key.
        session_key: Option<String>,
        /// The chat.
        conversation_id: String,
    },
    /// The `no_reply` action (turns.md §7.3 E10).
    NoReply(NoReplyRequest),
    /// An interleave steer was accepted by the running agent (turns.md §7.3 E11).
    SteerAccepted {
        /// The session key.
        session_key: Option<String>,
        /// The chat.
        conversation_id: String,
    },
    /// `send_typing` / `stop_typing` (turns.md §7.3 E15).
    Typing {
        /// The chat.
        conversation_id: String,
        /// On or off.
        on: bool,
        /// `metadata.status` from Hermes.
        status: Option<String>,
    },
    /// `queue.depth`.
    QueueDepth {
        /// The session key.
        session_key: String,
        /// The depth.
        depth: u32,
    },
    /// The result of an [`Effect::Deliver`]: Canon's id of the final part,
    /// or the failure.
    DeliveryOutcome {
        /// The operation.
        op: OpId,
        /// The result.
        result: Result<Option<String>, DeliveryFailure>,
    },
    /// `standalone.send`.
    Standalone(StandaloneSend),
    /// `adapter.send_media`, uploaded.
    Media(HostMedia),
    /// `resync` after a daemon respawn.
    Resync {
        /// The host request to answer.
        request: RequestId,
        /// The turns the shim still holds open.
        open_turns: Vec<ResyncTurn>,
        /// Turns whose final the previous daemon stored but whose closing
        /// state it may not have published: each gets its `completed`.
        delivered_turns: Vec<ResyncTurn>,
    },
    /// Canon turns a daemon of an earlier gateway run told Canon were open and never closed
    /// (the durable inbox kept them): none of them runs any more, so each is closed now.
    CloseAbandoned(Vec<AbandonedTurn>),
    /// A deadline from [`crate::turn::TurnMachine::next_deadline`] passed
    /// (spurious timeouts are harmless).
    Timeout,
    /// The daemon is exiting: every closing turn whose final was delivered
    /// (or that had none) finishes now, without waiting out its 750 ms
    /// handoff, so Canon gets its closing state; a turn whose final is still
    /// in flight is left to that delivery.
    Exiting,
    /// The adapter disconnected: all per-turn state is dropped without
    /// publishing.
    Disconnect,
}
