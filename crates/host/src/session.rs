//! The daemon's pure state between frames, and every decision it makes.
//!
//! The shell owns a [`Session`] and the I/O around it, and hands it each
//! thing that arrives through [`Session::handle`] (in `handle.rs`): time
//! and randomness come in as arguments, and [`SessionEffect`]s go out —
//! frames to write, Canon writes, and the I/O to run, whose results come
//! back as further [`SessionInput`]s. The methods here are its building
//! blocks: [`Session::request`] answers every shim request that needs no
//! I/O, [`Session::feed`] runs the turn machine, and the rest decide which
//! shim request an answer belongs to, the turn a `turn.start` opens, the
//! chat a `turn.complete` closes and what a Canon event becomes.

use std::collections::HashMap;

use canon_dispatch::pipeline::{Context, Dispatcher, Outcome as PipelineOutcome};
use canon_dispatch::protocol::DeliveryIntent;
use canon_dispatch::verbosity::{configured_turn_verbosity, VerbosityConfig, VerbosityError};
use canon_wire::events::{EventKind, MessageCreated};
use canon_wire::types::{AgentMe, Conversation, OutboundPolicy};
use serde_json::Value;

use crate::answers::reply_body;
use crate::connect::{self, ConnectFailure};
use crate::conversations::{chat_from_session_key, conversation_type_of, ConversationCache};
use crate::credentials::{PlatformCredentials, ResolveCall};
use crate::hitl::table::HitlTable;
use crate::inbound::{self, EventTable, InboundLanes, PendingEvent};
use crate::media::capture::{CaptureRegistry, CapturedMedia};
use crate::media::{MediaSettings, TrustedScope};
use crate::protocol::{
    self, AdapterSendMedia, ChatRef, ConnectResult, DaemonNotification, DaemonRequest, ErrorBody,
    ErrorCode, EventSummary, HandshakePolicy, InboundMessage, OpenTurn, ProbeResult, ShimRequest,
    ShimResponse, EXIT_UNSUPPORTED_PROTOCOL,
};
use crate::requests;
pub use handle::{ConnectCall, Materialize, SessionConfig, SessionInput, MAX_PENDING_INBOUND};
use interactions::HitlStart;

use crate::turn::{
    self, Effect, HostEdit, HostReply, HostSend, Input, ProcessingStart, RequestId, StandaloneSend,
    TurnConfig, TurnMachine,
};

/// The end of the message of a request this daemon does not serve yet.
pub const UNSUPPORTED_SUFFIX: &str = "is not supported by this canon-hermes daemon yet";

/// What the shell does, in order, after [`Session::request`] or
/// [`Session::feed`].
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEffect {
    /// Write this line to the shim now.
    Frame(String),
    /// Append these records to the durable inbox's journal (crate `canon-inbox`).
    Inbox(Vec<canon_inbox::Record>),
    /// Write this answer line behind the Canon writes this input made before
    /// it, in their conversations (a reply to a turn request must not
    /// overtake the writes it follows).
    Reply(String),
    /// A Canon write or durable delivery of the turn machine (never a
    /// `Reply`, `PauseTyping` or `ResumeTyping`, which become frames).
    Canon(Effect),
    /// A best-effort Canon write (a turn's closing publish), then these records to the durable
    /// inbox's journal once it landed or Canon refused it for good: a daemon killed before
    /// then leaves the turn open in the journal, for a successor to close.
    CanonJournaled {
        /// The write.
        effect: Effect,
        /// What the journal gets after it.
        records: Vec<canon_inbox::Record>,
    },
    /// A gap in the event stream was detected (and logged): record it where `doctor` reads it.
    StreamGap(crate::gaps::StreamGap),
    /// Append `records` to the inbox's journal, then make the best-effort Canon write once
    /// they are on disk (or the journal gave up on them): a turn's first open state, so a
    /// daemon killed right after Canon took it leaves a successor the record to close it by.
    /// Without a journal, the write alone.
    JournalThenCanon {
        /// What the journal gets first.
        records: Vec<canon_inbox::Record>,
        /// The write.
        effect: Effect,
    },
    /// Stop these blocking interactions' tasks (by table key): they stop
    /// polling and cancel their interaction on Canon.
    CancelHitl(Vec<u64>),
    /// A blocking interaction's task ended: forget its cancel handle.
    ForgetHitl(u64),
    /// Create this blocking interaction on Canon and poll it; report
    /// [`SessionInput::HitlCreated`], then [`SessionInput::HitlFinished`].
    StartHitl {
        /// The shim request waiting for the create.
        id: String,
        /// Its type.
        re: &'static str,
        /// What to create and poll.
        start: Box<HitlStart>,
    },
    /// Resolve the credentials with a platform config (cli.md §5.1);
    /// adopt them when the call says so; report
    /// [`SessionInput::CredentialsResolved`].
    ResolveCredentials(Box<ResolveCall>),
    /// Answer this `probe` after one check of Canon (the environment when
    /// one is configured, else `GET /agents/me`), with the check's error in
    /// the result ([`handle::probe_answer`]).
    VerifyProbe {
        /// The request's id.
        id: String,
        /// Its type.
        re: &'static str,
        /// The result from the configuration.
        result: Box<ProbeResult>,
        /// The probe's platform config, whose credentials the check uses
        /// (resolved again); `None`: the daemon's own.
        platform: Option<Box<PlatformCredentials>>,
    },
    /// Verify the environment when one is configured, then `GET
    /// /agents/me` and `GET /conversations`; report
    /// [`SessionInput::ConnectDone`].
    Connect(ConnectCall),
    /// The connect succeeded: stop the previous connection's loops, open
    /// the event stream, start the signal pass and the status loop, and
    /// publish the runtime status once.
    OpenConnection,
    /// Stop the signal pass, doorbell consumes, the status loop and any
    /// re-fetch in flight, and close the event stream.
    StopConnection,
    /// The event stream is gone: forget it.
    CloseStream,
    /// Reconnect the event stream (its cursor moved).
    ReconnectStream,
    /// The signal pass now visits these conversations.
    PublishConversations(Vec<String>),
    /// Consume this conversation's runtime signal now (the doorbell);
    /// report [`SessionInput::Signal`].
    Ring(String),
    /// Re-fetch `GET /conversations` as generation `n`, superseding one in
    /// flight; report [`SessionInput::Refetched`].
    Refetch(u64),
    /// The current re-fetch reported (its task handle may go).
    RefetchSettled,
    /// Download a waking message's attachments.
    Materialize(Box<Materialize>),
    /// Answer an `api.inbound_media` with these captured attachments of
    /// `message_id`, each written as a new 0600 hand-off file first
    /// (hermes-host.md Q8); a failed write answers an error and leaves no
    /// file behind, so a partial batch is never exposed.
    ServeInboundMedia {
        /// The request's id.
        id: String,
        /// Its type.
        re: &'static str,
        /// The Canon message the batch belongs to.
        message_id: String,
        /// The batch, in capture order (never empty).
        media: Vec<CapturedMedia>,
    },
    /// Upload the hand-off file of the domain-plugin call
    /// `upload_media_for_current_conversation` into `conversation_id`, then
    /// delete the file; report [`SessionInput::Uploaded`] with the attachment
    /// as the payload's only attachment.
    UploadApiMedia {
        /// The request.
        request: RequestId,
        /// The conversation of the call's trusted turn.
        conversation_id: String,
        /// The file the shim wrote the bytes to.
        path: String,
        /// The normalized MIME type.
        mime_type: String,
        /// The file name to give Canon.
        file_name: Option<String>,
    },
    /// Run this detached-approval call against the registry and Canon
    /// (approvals.md §9–§11); report [`SessionInput::DetachedDone`].
    Detached {
        /// The shim request (`tool.call` or `api.call`).
        id: String,
        /// Its type.
        re: &'static str,
        /// An `api.call` of a domain-plugin helper (else the tool).
        api: bool,
        /// What to run.
        call: Box<crate::detached::DetachedCall>,
    },
    /// Look this `approval_reply` receipt up in the registry and act on it
    /// (approvals.md §12).
    ApprovalReceipt(Box<crate::detached::ApprovalReceipt>),
    /// The wake of this approval was answered by the shim, or could not be
    /// handed to it: finish its wake lease (approvals.md §13 step 5).
    ApprovalWakeAnswered {
        /// The approval.
        approval_id: String,
        /// Hermes accepted the event.
        delivered: bool,
    },
    /// Run this card-wait call against the card waits and Canon
    /// (durable-endpoint.md §10.5–§10.6); report [`SessionInput::CardWaitDone`].
    CardWait {
        /// The shim request (`tool.call`).
        id: String,
        /// Its type.
        re: &'static str,
        /// What to run.
        call: Box<crate::card_waits::CardWaitCall>,
        /// The turn that shows `waiting_input` meanwhile, handed back with the result.
        waiting: Option<card_waits::WaitingTurn>,
    },
    /// Record this `runtime_card_reply` receipt and wake its card
    /// (durable-endpoint.md §10.8).
    CardReceipt(crate::card_waits::CardReceipt),
    /// The shim answered a card wake, or it could not be handed over: put
    /// back a wake Hermes did not take (durable-endpoint.md §10.8 step 7).
    CardWakeAnswered {
        /// The wake.
        wake: Box<crate::card_waits::CardWake>,
        /// Hermes accepted the event.
        delivered: bool,
    },
    /// Make the one Canon call of a `canon_communicate` tool call (a verb,
    /// or the agent directory; runtime-control.md §5.4); report
    /// [`SessionInput::CommunicateDone`].
    Communicate {
        /// The `tool.call` request.
        id: String,
        /// Its type.
        re: &'static str,
        /// The validated call.
        call: Box<crate::communicate::Communicate>,
    },
    /// Upload the file of an `adapter.send_media`; report
    /// [`SessionInput::Uploaded`].
    UploadMedia {
        /// The request.
        request: RequestId,
        /// What to upload (its `op`, `url` or `path`, name and type) and
        /// where (`chat_id`).
        media: Box<AdapterSendMedia>,
    },
    /// Upload the files of a standalone send into `target`; report
    /// [`SessionInput::Uploaded`].
    UploadStandalone {
        /// The request.
        request: RequestId,
        /// The conversation.
        target: String,
        /// The local files, in order.
        files: Vec<String>,
        /// Send images as documents.
        force_document: bool,
    },
}

/// What the shell knows and a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFacts<'a> {
    /// The daemon's version.
    pub daemon_version: &'a str,
    /// The manifest hash the daemon expects, when configured (else the
    /// shim's own is accepted).
    pub manifest_sha256: Option<&'a str>,
    /// `CANON_HOME_CHANNEL`, for standalone sends without a target.
    pub home_channel: Option<&'a str>,
}

/// What the daemon's configuration says before any connect call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectFacts<'a> {
    /// `HERMES_CANON_INBOUND_IMAGE_DELIVERY`, when set.
    pub inbound_image_delivery: Option<&'a str>,
    /// `HERMES_CANON_INBOUND_VISUAL_MEDIA_DELIVERY`, when set.
    pub inbound_visual_media_delivery: Option<&'a str>,
    /// `CANON_TURN_VERBOSITY` as set (unset: `None`; not trimmed, so a whitespace-only value
    /// masks the platform extras, turns.md §6.1).
    pub turn_verbosity: Option<&'a str>,
    /// The API key is set.
    pub api_key_set: bool,
    /// The base URL is set.
    pub base_url_set: bool,
}

/// What the shell does with one stream event.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamStep {
    /// Nothing more.
    Nothing,
    /// A `message.created` event's step (see [`InboundStep`]).
    Inbound(InboundStep),
    /// Consume this conversation's runtime signal now (the doorbell).
    Ring(String),
    /// The event replay expired: a gap to report, and the conversation list to re-fetch.
    Refetch,
}

/// The answer of [`Session::request`].
#[derive(Debug, Clone, PartialEq)]
pub enum Handled {
    /// Done; perform these effects.
    Effects(Vec<SessionEffect>),
    /// The request needs I/O the shell performs itself.
    Shell(Box<ShimRequest>),
}

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
    /// The live outbound policy: `GET /agents/me`'s, replaced by each `agent.context` frame's
    /// (runtime-control.md §5.1).
    pub outbound_policy: OutboundPolicy,
}

/// What the shell does with a `message.created` event.
#[derive(Debug, Clone, PartialEq)]
pub enum InboundStep {
    /// Nothing: the event does not wake a turn (or waits behind a download
    /// in its conversation's lane).
    Nothing,
    /// Send this `inbound.message` now.
    Send(Box<InboundMessage>),
    /// An `approval_reply` receipt for the shell to look up in the
    /// detached-approval registry (approvals.md §12); never a turn.
    ApprovalReceipt(Box<crate::detached::ApprovalReceipt>),
    /// A `runtime_card_reply` receipt for the shell's card waits
    /// (durable-endpoint.md §10.8); never a turn.
    CardReceipt(crate::card_waits::CardReceipt),
    /// Download the message's attachments (job `job`) and report what was
    /// found as `MediaDone`; the session registers the captures and
    /// finishes the message.
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
    /// Whether the event stream is open (connected, not failed or ended).
    pub stream_open: bool,
    /// Hermes' `approvals.timeout` from `adapter.connect`.
    pub host_approvals_timeout: Option<f64>,
    /// The trusted media scope of the connected adapter.
    pub media_scope: TrustedScope,
    /// The turn verbosity the connected adapter was configured with (turns.md §6.1).
    pub verbosity: VerbosityConfig,
    /// Trusted inbound-media captures (runtime-control.md §8.4).
    pub captures: CaptureRegistry,
    /// Session key → the conversation and messages of its open turn, whose
    /// captures are discarded when the turn ends (runtime-control.md §8.4).
    turn_media: HashMap<String, (String, Vec<String>)>,
    /// Shim requests waiting for the machine's answer: id and type.
    requests: HashMap<u64, (String, &'static str)>,
    next_request: u64,
    /// Session key → chat of the open turn (`turn.complete` names no chat).
    sessions: HashMap<String, String>,
    next_daemon_id: u64,
    /// The exit code once a handshake refused the protocol version.
    pub exit_code: Option<i32>,
    /// The generation of the latest conversation re-fetch; a result from
    /// another generation is stale (superseded, or from a stopped
    /// connection).
    refetch_generation: u64,
    /// What the configuration says.
    config: SessionConfig,
    /// Sends waiting for their uploads.
    uploads: handle::Uploads,
    /// Tool calls whose Canon interaction is open.
    tool_waits: tools::ToolWaits,
    /// Wakes (decided approvals, answered cards) whose delivery is not over yet.
    wakes: detached::WakesInFlight,
    /// Whether the shim was last told `canon_communicate` is available.
    communicate_offered: bool,
    /// The durable inbox's tickets, holds and handled ids.
    inbox: inbox::InboxState,
    /// The stream's detected gaps (Canon's replay expired).
    pub event_gaps: crate::gaps::EventGaps,
}

/// What a finished conversation re-fetch means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefetchStep {
    /// From a superseded re-fetch or a stopped connection: dropped.
    Stale,
    /// The cache now holds the fresh list (republish the signal pass's set).
    Replaced,
    /// The re-fetch failed: reconnect the event stream, whose cursor moved
    /// (canon-wire.md §5.3).
    Reconnect,
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
            stream_open: false,
            host_approvals_timeout: None,
            media_scope: TrustedScope::default(),
            verbosity: VerbosityConfig::default(),
            captures: CaptureRegistry::default(),
            turn_media: HashMap::new(),
            requests: HashMap::new(),
            next_request: 0,
            sessions: HashMap::new(),
            next_daemon_id: 0,
            exit_code: None,
            refetch_generation: 0,
            config: SessionConfig::default(),
            uploads: handle::Uploads::default(),
            tool_waits: tools::ToolWaits::default(),
            wakes: detached::WakesInFlight::default(),
            communicate_offered: false,
            inbox: inbox::InboxState::default(),
            event_gaps: crate::gaps::EventGaps::default(),
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
        // Merged events never start a turn of their own: their messages are
        // this turn's, and they are forgotten now.
        let mut absorbed_message_ids = Vec::new();
        let mut absorbed_queued_ids = Vec::new();
        for absorbed in absorbed_refs.iter().filter(|r| r.as_str() != event_ref) {
            if let Some(merged) = self.events.get(absorbed) {
                if let Some(id) = merged.message_id.clone() {
                    if merged.disposition_queued {
                        absorbed_queued_ids.push(id.clone());
                    }
                    absorbed_message_ids.push(id);
                }
            }
            self.events.forget(absorbed);
        }
        let mut message_ids = absorbed_message_ids.clone();
        message_ids.extend(event.message_id.clone());
        self.bind_turn_media(&session_key, &event.chat_id, message_ids);
        let pending = self.events.get(event_ref);
        ProcessingStart {
            request,
            session_key,
            conversation_id: event.chat_id.clone(),
            message_id: event.message_id.clone(),
            disposition_queued: pending.is_some_and(|p| p.disposition_queued),
            absorbed_message_ids,
            absorbed_queued_ids,
            responder: event.user_id.clone(),
            reply_authority: pending.and_then(|p| p.reply_authority.clone()),
            conversation_type,
            queue_depth,
            random,
        }
    }

    /// A turn of `session_key` starts for these messages of `conversation`:
    /// the captures of the session's previous turn (a dequeued follow-up
    /// ends it) are discarded, and these are discarded when this one ends
    /// (runtime-control.md §8.4). Kept for at most [`MAX_SESSIONS`]
    /// sessions; a capture not bound here still expires when idle.
    fn bind_turn_media(&mut self, session_key: &str, conversation: &str, message_ids: Vec<String>) {
        self.discard_turn_media(session_key);
        if self.turn_media.len() < MAX_SESSIONS && !message_ids.is_empty() {
            self.turn_media.insert(
                session_key.to_owned(),
                (conversation.to_owned(), message_ids),
            );
        }
    }

    /// The turn of `session_key` ended: its messages' captures go.
    fn discard_turn_media(&mut self, session_key: &str) {
        if let Some((conversation, message_ids)) = self.turn_media.remove(session_key) {
            for message_id in message_ids {
                if self.captures.discard(&conversation, &message_id) {
                    tracing::debug!(
                        conversation_id = conversation,
                        "inbound media capture discarded"
                    );
                }
            }
        }
    }

    /// `api.inbound_media`: the captured batch of the context's trusted
    /// turn (runtime-control.md §7.6), read at `now_ms` (which marks it most
    /// recently used), or the exact error. An empty batch is answered here;
    /// a non-empty one is written out by the shell first.
    fn inbound_media(
        &mut self,
        id: String,
        re: &'static str,
        call: &protocol::ApiInboundMedia,
        now_ms: u64,
    ) -> SessionEffect {
        let answer = |batch: protocol::InboundMediaBatch| {
            let body = ShimResponse::ApiInboundMedia(batch).to_body();
            SessionEffect::Frame(protocol::encode_response(&id, re, Ok(body)))
        };
        let (conversation, message) = match crate::api::inbound_media_key(&call.ctx) {
            Ok(key) => key,
            Err(error) => {
                return answer(protocol::InboundMediaBatch {
                    media: Vec::new(),
                    error: Some(error.to_owned()),
                })
            }
        };
        let media = self.captures.read(conversation, message, now_ms);
        if media.is_empty() {
            return answer(protocol::InboundMediaBatch::default());
        }
        SessionEffect::ServeInboundMedia {
            message_id: message.to_owned(),
            id,
            re,
            media,
        }
    }

    /// The chat a `turn.complete` closes: the one its session was mapped
    /// to, else the chat id at the end of the session key. The event is
    /// forgotten, and the turn's inbound-media captures are discarded.
    pub fn complete(&mut self, session_key: &str, event_ref: &str) -> String {
        self.discard_turn_media(session_key);
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

    /// Runs the turn machine on one input; its answers become reply lines,
    /// its typing pauses and resumes become notification frames, and every
    /// other effect is a Canon write for the shell.
    pub fn feed(&mut self, input: Input, now_ms: u64) -> Vec<SessionEffect> {
        let effects = self.machine.handle(input, now_ms);
        let mut out = Vec::with_capacity(effects.len());
        for effect in effects {
            match effect {
                Effect::Reply { request, reply } => {
                    if let Some(line) = self.reply_line(request, reply) {
                        out.push(SessionEffect::Reply(line));
                    }
                }
                Effect::PauseTyping { conversation_id } => {
                    out.push(notification(DaemonNotification::TypingPause(ChatRef {
                        chat_id: conversation_id,
                    })))
                }
                Effect::ResumeTyping { conversation_id } => {
                    out.push(notification(DaemonNotification::TypingResume(ChatRef {
                        chat_id: conversation_id,
                    })))
                }
                Effect::TurnClosed {
                    session_key,
                    turn_id,
                } => {
                    // A reply line, written behind the Canon writes the same
                    // input queued before it (the closing publish of a turn
                    // that had no final).
                    out.push(SessionEffect::Reply(notification_line(
                        DaemonNotification::TurnClosed(protocol::TurnClosed {
                            session_key,
                            turn_id,
                        }),
                    )));
                }
                Effect::FinalStored {
                    session_key,
                    trigger_message_id,
                } => out.extend(self.inbox_final_stored(&session_key, trigger_message_id)),
                Effect::PublishTurn(update) => {
                    out.extend(self.inbox_turn_published(update, now_ms))
                }
                other => out.push(SessionEffect::Canon(other)),
            }
        }
        out
    }

    /// Answers one shim request that needs no I/O, or hands it back
    /// ([`Handled::Shell`]): `adapter.connect`, `adapter.disconnect`,
    /// `shutdown`, `probe`, `adapter.send_media`, the blocking clarify and
    /// exec approval, and a standalone send with media to upload. Nothing but
    /// `hello` is served before the handshake. `random` is fresh per call
    /// (a turn id, a standalone id group or the handshake epoch).
    pub fn request(
        &mut self,
        id: String,
        request: ShimRequest,
        facts: RequestFacts<'_>,
        now_ms: u64,
        random: u128,
    ) -> Handled {
        let re = request.type_name();
        if !self.handshake_done && !matches!(request, ShimRequest::Hello(_)) {
            return Handled::Effects(vec![error_frame(
                &id,
                re,
                ErrorCode::HandshakeRequired,
                "hello must come first".into(),
            )]);
        }
        let effects = match request {
            ShimRequest::Hello(hello) => {
                let manifest = facts
                    .manifest_sha256
                    .map_or_else(|| hello.manifest_sha256.clone(), str::to_owned);
                let policy = HandshakePolicy {
                    daemon_version: facts.daemon_version,
                    manifest_sha256: &manifest,
                    audited_hermes: protocol::AUDITED_HERMES,
                    audited_python: protocol::AUDITED_PYTHON,
                };
                let epoch = format!("{:016x}", random as u64);
                match protocol::negotiate(&hello, &policy, &epoch) {
                    Ok(ok) => {
                        self.handshake_done = true;
                        tracing::info!(epoch, "handshake done");
                        let body = ShimResponse::Hello(ok).to_body();
                        vec![SessionEffect::Frame(protocol::encode_response(
                            &id,
                            re,
                            Ok(body),
                        ))]
                    }
                    Err(error) => {
                        if error.code == ErrorCode::UnsupportedProtocol {
                            self.exit_code = Some(EXIT_UNSUPPORTED_PROTOCOL);
                        }
                        vec![SessionEffect::Frame(protocol::encode_response(
                            &id,
                            re,
                            Err(&error),
                        ))]
                    }
                }
            }
            ShimRequest::AdapterChatInfo(chat) => {
                let info = requests::chat_info(chat.chat_id, &self.conversations);
                let body = ShimResponse::AdapterChatInfo(info).to_body();
                vec![SessionEffect::Frame(protocol::encode_response(
                    &id,
                    re,
                    Ok(body),
                ))]
            }
            ShimRequest::AdapterSend(send) => {
                let request = self.register(id, re);
                // The shim's key, when it sent one, stands for the fresh
                // randomness: its resend after a respawn gets the same ids.
                let random = send
                    .send_key
                    .as_deref()
                    .and_then(requests::send_key)
                    .unwrap_or(random);
                let metadata = send.metadata.unwrap_or_default();
                let mut closed = None;
                let reply_to = match send.reply_to {
                    // A stopping gateway's refusal is not posted: it claims nothing.
                    None if send.stop_notice => None,
                    None if send.ctx.session_key.is_none()
                        && !metadata.contains_key("reply_to_message_id") =>
                    {
                        self.inbox_redelivery_reply(&send.chat_id)
                            .map(|(reply_to, record)| {
                                closed = Some(record);
                                reply_to
                            })
                    }
                    None if !metadata.contains_key("reply_to_message_id") => send
                        .ctx
                        .session_key
                        .as_deref()
                        .and_then(|key| self.inbox_resume_reply(key)),
                    reply_to => reply_to,
                };
                let mut effects = self.feed(
                    Input::Send(HostSend {
                        request,
                        session_key: send.ctx.session_key,
                        conversation_id: send.chat_id,
                        content: send.content,
                        reply_to,
                        metadata,
                        random,
                        stop_notice: send.stop_notice,
                    }),
                    now_ms,
                );
                effects.extend(closed);
                effects
            }
            ShimRequest::AdapterEdit(edit) => {
                let request = self.register(id, re);
                self.feed(
                    Input::Edit(HostEdit {
                        request,
                        session_key: edit.ctx.session_key,
                        conversation_id: edit.chat_id,
                        content: edit.content,
                        finalize: edit.finalize,
                        metadata: edit.metadata.unwrap_or_default(),
                        random,
                    }),
                    now_ms,
                )
            }
            ShimRequest::TurnStart(start) => {
                let request = self.register(id, re);
                let mut input = self.processing_start(
                    request,
                    &start.event_ref,
                    start.session_key,
                    &start.event,
                    start.queue_depth,
                    &start.absorbed_refs,
                    random,
                );
                if input.reply_authority.is_none() {
                    input.reply_authority =
                        handed_back_authority(start.reply_authority.as_ref(), &input.message_id);
                }
                let mut effects = if start.draining {
                    self.inbox_turn_opened_while_stopping(&input)
                } else {
                    self.inbox_turn_opened(
                        &mut input,
                        &start.event_ref,
                        &start.absorbed_refs,
                        now_ms,
                    )
                };
                effects.extend(self.feed(Input::ProcessingStart(input), now_ms));
                effects
            }
            ShimRequest::TurnAccepted(accepted) => {
                let request = self.register(id, re);
                let mut start = self.processing_start(
                    request,
                    &accepted.event_ref,
                    accepted.session_key,
                    &accepted.event,
                    accepted.queue_depth,
                    &accepted.absorbed_refs,
                    random,
                );
                if start.reply_authority.is_none() {
                    start.reply_authority =
                        handed_back_authority(accepted.reply_authority.as_ref(), &start.message_id);
                }
                let mut effects = self.inbox_turn_opened(
                    &mut start,
                    &accepted.event_ref,
                    &accepted.absorbed_refs,
                    now_ms,
                );
                effects.extend(self.feed(
                    Input::QueueDequeued {
                        start,
                        interrupted: accepted.interrupted,
                        turn_id: accepted.turn_id,
                    },
                    now_ms,
                ));
                effects
            }
            ShimRequest::TurnComplete(complete) => {
                let request = self.register(id, re);
                let conversation_id = self.complete(&complete.session_key, &complete.event_ref);
                let mut cancelled = self.hitl.cancel_session(Some(&complete.session_key));
                cancelled.extend(self.cancel_tool_waits(Some(&complete.session_key)));
                let mut effects = vec![SessionEffect::CancelHitl(cancelled)];
                let last_state = self.machine.turn_state(&complete.session_key);
                effects.extend(self.inbox_turn_closed(
                    &complete.session_key,
                    complete.queue_depth,
                    complete.draining,
                    last_state,
                    now_ms,
                ));
                effects.extend(self.feed(
                    Input::ProcessingComplete {
                        request,
                        session_key: complete.session_key,
                        conversation_id,
                        outcome: complete.outcome.into(),
                        queue_depth: complete.queue_depth,
                    },
                    now_ms,
                ));
                effects
            }
            ShimRequest::ToolCall(call) => self.tool_call(id, re, call, facts.home_channel, now_ms),
            ShimRequest::StandaloneSend(send)
                if send.media_files.is_empty() || !self.standalone_has_target(&send, facts) =>
            {
                let request = self.register(id, re);
                let standalone = standalone_send(request, &send, facts.home_channel, random);
                self.feed(Input::Standalone(standalone), now_ms)
            }
            ShimRequest::Resync(resync) => {
                let request = self.register(id, re);
                self.resync_sessions(&resync.open_turns);
                self.inbox_resynced(resync.open_turns.iter().map(|t| t.session_key.as_str()));
                let open_turns = requests::resync_turns(resync.open_turns);
                let delivered_turns = requests::resync_turns(resync.delivered_turns);
                let mut effects = self.feed(
                    Input::Resync {
                        request,
                        open_turns,
                        delivered_turns,
                    },
                    now_ms,
                );
                // The resync handed over every turn the gateway still runs; a Canon turn the
                // journal holds open beyond those (a predecessor killed inside `turn.start`,
                // whose resent start opens a new turn) would show "working" until Canon's
                // staleness sweep, so it is closed now.
                effects.extend(self.inbox_close_abandoned(now_ms));
                effects
            }
            ShimRequest::ApiInboundMedia(call) => vec![self.inbound_media(id, re, &call, now_ms)],
            ShimRequest::ApiCall(call) => self.api_call(id, re, call, now_ms),
            other => return Handled::Shell(Box::new(other)),
        };
        Handled::Effects(effects)
    }

    /// A conversation re-fetch starts: its generation (any earlier one in
    /// flight is superseded).
    pub fn start_refetch(&mut self) -> u64 {
        self.refetch_generation += 1;
        self.refetch_generation
    }

    /// The connection's loops stopped: a re-fetch result already on its
    /// way is stale from now on.
    pub fn stop_refetch(&mut self) {
        self.refetch_generation += 1;
    }

    /// A re-fetch of generation `generation` finished.
    pub fn refetched(
        &mut self,
        generation: u64,
        result: Result<Vec<Conversation>, String>,
    ) -> RefetchStep {
        if generation != self.refetch_generation {
            tracing::debug!("dropped a stale conversation re-fetch");
            return RefetchStep::Stale;
        }
        match result {
            Ok(conversations) => {
                tracing::debug!(
                    conversations = conversations.len(),
                    "conversations re-fetched"
                );
                self.conversations.replace(conversations);
                RefetchStep::Replaced
            }
            Err(error) => {
                tracing::warn!(%error, "conversation re-fetch failed; reconnecting the event stream");
                RefetchStep::Reconnect
            }
        }
    }

    /// A media send into a turn that `no_reply` silenced is answered at
    /// once with success and nothing is uploaded: the reply, or `None` to
    /// upload.
    pub fn silenced_media(
        &mut self,
        request: RequestId,
        session_key: Option<&str>,
        conversation_id: &str,
    ) -> Option<SessionEffect> {
        if !self.machine.is_silenced(session_key, conversation_id) {
            return None;
        }
        let turn_id = session_key
            .and_then(|k| self.machine.open_turn(k))
            .unwrap_or_default()
            .to_owned();
        let reply = HostReply::Send(turn::SendOutcome::Silenced { turn_id });
        self.reply_line(request, reply).map(SessionEffect::Reply)
    }

    /// Whether a standalone send resolves to a conversation (its own
    /// target, the configured home channel or the environment's).
    fn standalone_has_target(
        &self,
        send: &protocol::StandaloneSendRequest,
        facts: RequestFacts<'_>,
    ) -> bool {
        let probe = standalone_send(RequestId(0), send, facts.home_channel, 0);
        turn::standalone_target(&probe).is_some()
    }

    /// The checks of `adapter.connect` before any Canon call: an invalid
    /// inbound-media setting refuses first (runtime-control.md §8.1), then an
    /// invalid turn verbosity (turns.md §6.1: `CANON_TURN_VERBOSITY`, else the
    /// extras `turn_verbosity`, `canon_turn_verbosity`, `CANON_TURN_VERBOSITY`),
    /// then missing credentials. On success the media scope and the verbosity
    /// are set.
    pub fn connect_start(
        &mut self,
        facts: ConnectFacts<'_>,
        extra: &Value,
    ) -> Result<(), ConnectResult> {
        let settings = MediaSettings::resolve(
            facts.inbound_image_delivery,
            facts.inbound_visual_media_delivery,
            extra,
        )
        .map_err(|error| {
            tracing::error!(%error, "inbound media delivery setting refused");
            connect::refusal(ConnectFailure::InvalidConfig(error.to_string()))
        })?;
        let verbosity = connect_verbosity(facts.turn_verbosity, extra).map_err(|error| {
            tracing::error!(%error, "turn verbosity setting refused");
            connect::refusal(ConnectFailure::InvalidConfig(error.to_string()))
        })?;
        self.media_scope = settings.scope();
        self.verbosity = verbosity;
        if !facts.api_key_set || !facts.base_url_set {
            return Err(connect::refusal(ConnectFailure::MissingCredentials));
        }
        Ok(())
    }

    /// Canon answered `GET /agents/me` and `GET /conversations`: the cache
    /// is replaced, the agent facts kept, and a fresh turn machine serves the
    /// connection (busy routing as the shim's seams allow).
    pub fn connected(
        &mut self,
        me: AgentMe,
        conversations: Vec<Conversation>,
        busy_handler: bool,
    ) -> ConnectResult {
        self.conversations.replace(conversations);
        self.agent = AgentFacts {
            agent_id: me.agent_id.clone(),
            agent_name: me.display_name.clone(),
            owner_id: me.owner_id,
            outbound_policy: me.outbound_policy,
        };
        self.machine = TurnMachine::new(TurnConfig {
            verbosity: self.verbosity,
            supports_interleave: busy_handler,
        });
        tracing::info!(
            agent_id = me.agent_id.as_deref().unwrap_or(""),
            media_scope = ?self.media_scope,
            verbosity = ?self.verbosity,
            "adapter connected"
        );
        connect::connected(me.agent_id, me.display_name)
    }

    /// One stream event, and whether the conversation cache's key set
    /// changed (then the signal pass's set is republished).
    pub fn stream_event(&mut self, kind: EventKind) -> (StreamStep, bool) {
        match kind {
            EventKind::MessageCreated(created) => {
                let (step, keys_changed) = self.message_created(*created);
                (StreamStep::Inbound(step), keys_changed)
            }
            EventKind::RuntimeControl {
                conversation_id,
                kind,
            } if kind == "signal" => (StreamStep::Ring(conversation_id), false),
            EventKind::ConversationUpdated {
                conversation_id,
                changes,
            } => {
                let keys_changed = self.conversations.apply_update(&conversation_id, changes);
                (StreamStep::Nothing, keys_changed)
            }
            EventKind::AgentContext {
                agent_id,
                outbound_policy,
            } => {
                if let Some(agent_id) = agent_id {
                    self.agent.agent_id = Some(agent_id);
                }
                // A frame without a string policy sets it to absent, which is closed
                // (runtime-control.md §5.1).
                self.agent.outbound_policy = OutboundPolicy::from_wire(outbound_policy.as_deref());
                (StreamStep::Nothing, false)
            }
            EventKind::ReplayExpired { last_available_id } => {
                // The transport already moved the cursor (canon-wire.md §5.3).
                tracing::info!(
                    last_available_id = last_available_id.as_deref().unwrap_or(""),
                    "event replay expired; re-fetching the conversations"
                );
                (StreamStep::Refetch, false)
            }
            other => {
                tracing::trace!(?other, "stream event not handled");
                (StreamStep::Nothing, false)
            }
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
        if let PipelineOutcome::Ignored(canon_dispatch::pipeline::Ignored::ControlMessage {
            message_type,
        }) = &outcome
        {
            if message_type == "runtime_card_reply" {
                if let Some(receipt) = crate::card_waits::card_receipt(&conversation_id, &payload) {
                    return (InboundStep::CardReceipt(receipt), keys_changed);
                }
            }
        }
        let wake = match outcome {
            PipelineOutcome::Wake(wake) => wake,
            PipelineOutcome::ApprovalReceipt {
                approval_id,
                conversation_id,
            } => {
                let receipt = crate::detached::ApprovalReceipt::from_payload(
                    approval_id,
                    conversation_id,
                    payload,
                );
                return (
                    InboundStep::ApprovalReceipt(Box::new(receipt)),
                    keys_changed,
                );
            }
            other => {
                tracing::debug!(conversation_id, ?other, "inbound message does not wake");
                return (InboundStep::Nothing, keys_changed);
            }
        };
        let event_ref = self.events.remember(PendingEvent {
            message_id: wake.source.message_id.clone(),
            reply_authority: created.reply_authority.clone(),
            conversation_type: conversation_type_of(Some(wake.source.chat_type)),
            disposition_queued,
        });
        self.inbox_hold(&event_ref, wake.source.message_id.clone());
        let intent = wake.delivery_intent;
        let mut message = inbound::wake_message(event_ref, *wake);
        message.reply_authority = created.reply_authority;
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

/// The turn machine's input of a `standalone.send` (its media, if any,
/// still to upload).
pub fn standalone_send(
    request: RequestId,
    send: &protocol::StandaloneSendRequest,
    home_channel_env: Option<&str>,
    random: u128,
) -> StandaloneSend {
    StandaloneSend {
        request,
        chat_id: send.chat_id.clone(),
        home_channel_env: home_channel_env.map(str::to_owned),
        home_channel_config: requests::home_channel_config(send.pconfig.home_channel.as_ref()),
        text: send.message.clone(),
        media: None,
        random,
    }
}

/// The frame of a daemon notification.
pub fn notification(note: DaemonNotification) -> SessionEffect {
    SessionEffect::Frame(notification_line(note))
}

/// The line of a notification frame.
fn notification_line(note: DaemonNotification) -> String {
    protocol::encode_notification(note.type_name(), note.to_body())
}

/// The frame of an error answer (never retryable).
pub fn error_frame(id: &str, re: &str, code: ErrorCode, message: String) -> SessionEffect {
    let error = ErrorBody {
        code,
        message,
        retryable: false,
    };
    SessionEffect::Frame(protocol::encode_response(id, re, Err(&error)))
}

pub mod card_waits;
pub mod communicate;
pub mod detached;
pub mod handle;
mod inbox;
pub mod interactions;
#[cfg(test)]
mod tests;
pub mod tools;

/// The configured turn verbosity (turns.md §6.1): the environment value, then the platform
/// extras `turn_verbosity`, `canon_turn_verbosity` and `CANON_TURN_VERBOSITY`, first non-empty
/// wins. An extra that is present but not a string (a number, a boolean) is judged by its JSON
/// text, so it is refused like any other unknown value rather than silently ignored.
fn connect_verbosity(env: Option<&str>, extra: &Value) -> Result<VerbosityConfig, VerbosityError> {
    let texts: Vec<Option<String>> = [
        "turn_verbosity",
        "canon_turn_verbosity",
        "CANON_TURN_VERBOSITY",
    ]
    .iter()
    .map(|key| match extra.get(*key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    })
    .collect();
    configured_turn_verbosity(
        env,
        texts[0].as_deref(),
        texts[1].as_deref(),
        texts[2].as_deref(),
    )
}

/// The reply authority the shim handed back with an event this daemon does not know (its
/// predecessor handed the event over), accepted only under the same rules as one from the
/// stream, for the event's own message.
pub(crate) fn handed_back_authority(
    value: Option<&Value>,
    message_id: &Option<String>,
) -> Option<canon_wire::authority::ReplyAuthority> {
    canon_wire::authority::ReplyAuthority::accept(value?, message_id.as_deref()?)
}
