//! The session's one entry point: [`Session::handle`] takes everything
//! that reaches the daemon — a shim line, a stream event, a task's report,
//! a timer — as a [`SessionInput`] value and returns the
//! [`SessionEffect`]s the shell performs, in order. Every decision lives
//! here; the shell only runs the I/O an effect names and reports its result
//! back as another input.

use std::collections::HashMap;
use std::time::Duration;

use canon_dispatch::protocol::DeliveryIntent;
use canon_wire::events::EventKind;
use canon_wire::types::{AgentMe, Conversation, InteractionCreated, RuntimeSignal};
use serde_json::Value;

use super::interactions::HitlStart;
use super::{
    error_frame, notification, ConnectFacts, Handled, InboundStep, RefetchStep, RequestFacts,
    Session, SessionEffect, StreamStep,
};
use crate::answers::upload_failed;
use crate::connect::{self, ConnectFailure};
use crate::credentials::{CredentialFacts, PlatformCredentials, ResolveCall, ResolvePurpose};
use crate::hitl::table::HitlOutcome;
use crate::hitl::{self};
use crate::inbound::EventTable;
use crate::inbound::{finish_inbound, Materialized};
use crate::media::{self, TrustedScope};
use crate::protocol::{
    self, AdapterSendMedia, AdapterStatus, DaemonNotification, DaemonRequest, Frame,
    InboundMessage, ProbeResult, SendResult, ShimNotification, ShimRequest, ShimResponse,
};
use crate::requests::{self, ProbeFacts, ProbeStep};
use crate::turn::{
    DeliveryFailure, HostMedia, Input, MediaPayload, OpId, RequestId, StandaloneSend, TurnState,
};

/// Inbound messages waiting in lanes (behind a download) beyond which the
/// shell stops reading the event stream until some are sent (back-pressure).
pub const MAX_PENDING_INBOUND: usize = 256;

/// What the daemon's configuration tells the session, once, at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionConfig {
    /// The daemon's version (the handshake reports it).
    pub daemon_version: String,
    /// The manifest hash the daemon expects, when configured (else the
    /// shim's own is accepted).
    pub manifest_sha256: Option<String>,
    /// `CANON_HOME_CHANNEL`, for standalone sends without a target and
    /// the probe's seed.
    pub home_channel: Option<String>,
    /// `CANON_HOME_CHANNEL_NAME`, the home channel's label in the probe's
    /// seed.
    pub home_channel_name: Option<String>,
    /// `HERMES_CANON_INBOUND_IMAGE_DELIVERY`, when set.
    pub inbound_image_delivery: Option<String>,
    /// `HERMES_CANON_INBOUND_VISUAL_MEDIA_DELIVERY`, when set.
    pub inbound_visual_media_delivery: Option<String>,
    /// `CANON_TURN_VERBOSITY` as set (checked at `adapter.connect`).
    pub turn_verbosity: Option<String>,
    /// The credentials the daemon connects with: those resolved at start
    /// from the environment, replaced by each `adapter.connect`'s
    /// resolution with its platform config (the key never reaches the
    /// session).
    pub credentials: CredentialFacts,
    /// How long a blocking clarify waits for its human.
    pub clarify_timeout: Duration,
    /// How long a blocking exec approval waits for its human.
    pub approval_timeout: Duration,
    /// A token unique to this daemon process (the shell draws it at
    /// random), put into every inbound event reference. The shim keeps the
    /// references of events Hermes still holds across a daemon respawn; a
    /// respawned daemon counting from 1 again would hand out the same
    /// references for other messages, and a turn of an old event would then
    /// take another message's reply authority and conversation.
    pub instance: String,
}

/// One thing that reached the daemon.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionInput {
    /// One line from the shim (without its newline).
    Line(Vec<u8>),
    /// The shim sent a line above the frame size limit (dropped).
    LineTooLarge,
    /// The event stream delivered an event without a frame id.
    StreamEvent(EventKind),
    /// The event stream delivered an event under frame id `id` (the stream cursor).
    StreamFrame {
        /// The frame id.
        id: String,
        /// The event.
        kind: EventKind,
    },
    /// The event stream (re)connected.
    StreamConnected,
    /// The event stream gave up for good.
    StreamFailed(String),
    /// The event stream ended.
    StreamEnded,
    /// A [`crate::turn::Effect::Deliver`] finished.
    Delivered {
        /// The operation.
        op: OpId,
        /// Its result.
        result: Result<Option<String>, DeliveryFailure>,
    },
    /// The shell consumed a conversation's runtime signal.
    Signal {
        /// The conversation.
        conversation_id: String,
        /// The signal.
        signal: RuntimeSignal,
    },
    /// A conversation re-fetch ([`SessionEffect::Refetch`]) finished.
    Refetched {
        /// Its generation.
        generation: u64,
        /// The list, or the error's text.
        result: Result<Vec<Conversation>, String>,
    },
    /// A download ([`SessionEffect::Materialize`]) finished its message.
    MediaDone {
        /// The conversation (its lane).
        conversation_id: String,
        /// The lane job.
        job: u64,
        /// The message as it was before its media, or, without
        /// `materialized`, the finished fallback (the download task died).
        message: Box<InboundMessage>,
        /// What the download found: registered as the message's trusted
        /// capture, then applied to `message` (runtime-control.md §8.3–§8.6).
        materialized: Option<Box<Materialized>>,
    },
    /// An upload ([`SessionEffect::UploadMedia`] or
    /// [`SessionEffect::UploadStandalone`]) finished.
    Uploaded {
        /// The request it belongs to.
        request: RequestId,
        /// The uploaded media, or the error's text.
        result: Result<MediaPayload, String>,
    },
    /// A blocking interaction's create call ended.
    HitlCreated {
        /// The table key.
        key: u64,
        /// The shim request waiting for it.
        shim_id: String,
        /// Its type.
        re: &'static str,
        /// The created interaction, or a safe error text and whether it is
        /// retryable.
        result: Result<InteractionCreated, (String, bool)>,
    },
    /// A blocking interaction's wait ended.
    HitlFinished {
        /// The table key.
        key: u64,
        /// How.
        outcome: HitlOutcome,
    },
    /// A [`SessionEffect::ResolveCredentials`] finished.
    CredentialsResolved {
        /// The call, as the effect carried it.
        call: Box<ResolveCall>,
        /// What the resolution gave.
        facts: CredentialFacts,
    },
    /// The connect calls of [`SessionEffect::Connect`] finished.
    ConnectDone {
        /// The call.
        call: ConnectCall,
        /// `GET /agents/me` and `GET /conversations`, or why connecting
        /// failed.
        result: Result<(AgentMe, Vec<Conversation>), ConnectFailure>,
    },
    /// A [`SessionEffect::Detached`] call finished: its result, or the
    /// error to raise.
    DetachedDone {
        /// The shim request.
        id: String,
        /// Its type.
        re: &'static str,
        /// An `api.call` (else a `tool.call`).
        api: bool,
        /// The result.
        result: Result<Value, String>,
    },
    /// The Canon call of a `canon_communicate` call
    /// ([`SessionEffect::Communicate`]) finished: the result object, or why
    /// it failed.
    CommunicateDone {
        /// The `tool.call` request.
        id: String,
        /// Its type.
        re: &'static str,
        /// The call, as the effect carried it.
        call: Box<crate::communicate::Communicate>,
        /// Canon's result object, or the failure.
        result: Result<serde_json::Map<String, Value>, crate::communicate::Failure>,
    },
    /// The registry claimed the wake of a decided approval: hand it to
    /// Hermes (approvals.md §13).
    ApprovalWake(Box<crate::detached::ApprovalWake>),
    /// A [`SessionEffect::CardWait`] call finished.
    CardWaitDone {
        /// The shim request.
        id: String,
        /// Its type.
        re: &'static str,
        /// The result, or the error.
        result: Result<Value, String>,
        /// The turn that waited, as the effect carried it.
        waiting: Option<super::card_waits::WaitingTurn>,
    },
    /// The card waits claimed a card's wake: hand it to Hermes
    /// (durable-endpoint.md §10.8).
    CardWake(Box<crate::card_waits::CardWake>),
    /// The session's deadline ([`Session::next_deadline`]) passed.
    Timeout,
    /// The daemon is exiting: turns whose final is stored close now instead
    /// of after their handoff wait (their clears and closing publishes go to
    /// the exit grace's last writes).
    Exiting,
}

/// An `adapter.connect` in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectCall {
    /// The shim request's id.
    pub id: String,
    /// Its type.
    pub re: &'static str,
    /// Whether the shim's busy-input seam routes by delivery intent.
    pub busy_handler: bool,
    /// The gateway reconnects (its watcher, or the shim after a daemon respawn) rather than
    /// connecting for the first time since it started.
    pub is_reconnect: bool,
}

/// An upload waiting for its media.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum PendingUpload {
    /// `adapter.send_media`: the message once its file is uploaded.
    Media(Box<HostMedia>),
    /// `standalone.send` with files.
    Standalone(Box<StandaloneSend>),
    /// The domain-plugin call `upload_media_for_current_conversation`: its
    /// `api.call` is answered with the attachment.
    Api {
        /// The shim request.
        id: String,
        /// Its type.
        re: &'static str,
    },
}

impl Session {
    /// A session for a daemon with this configuration.
    pub fn new(config: SessionConfig) -> Session {
        Session {
            events: EventTable::for_instance(&config.instance),
            config,
            ..Session::default()
        }
    }

    /// When the session next needs [`SessionInput::Timeout`]: the turn machine's deadline, or
    /// the inbox's next let-go message settling.
    pub fn next_deadline(&self) -> Option<u64> {
        match (self.machine.next_deadline(), self.inbox_next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the shell may read the event stream now: fewer than
    /// [`MAX_PENDING_INBOUND`] messages wait in lanes.
    pub fn accepts_events(&self) -> bool {
        self.lanes.items() < MAX_PENDING_INBOUND
    }

    /// Handles one input at `now_ms`; `random` is fresh per call (a turn
    /// id, a standalone id group, an approval id or the handshake epoch).
    /// When the input changed whether `canon_communicate` is available, the
    /// shim is told last.
    pub fn handle(&mut self, input: SessionInput, now_ms: u64, random: u128) -> Vec<SessionEffect> {
        let mut effects = self.handle_input(input, now_ms, random);
        effects.extend(self.communicate_availability());
        effects
    }

    fn handle_input(
        &mut self,
        input: SessionInput,
        now_ms: u64,
        random: u128,
    ) -> Vec<SessionEffect> {
        match input {
            SessionInput::Line(bytes) => self.line(&bytes, now_ms, random),
            SessionInput::LineTooLarge => {
                tracing::warn!("dropped a frame above the size limit");
                Vec::new()
            }
            SessionInput::StreamEvent(kind) => self.event(kind, now_ms),
            SessionInput::StreamFrame { id, kind } if !canon_wire::sse::usable_cursor(&id) => {
                // An id that cannot be sent back as `Last-Event-ID` never becomes the durable
                // cursor (the stream client keeps its previous one too): the frame is handled as
                // one without an id: its message is still recorded as handled, and a replay of
                // it is dropped.
                tracing::warn!(
                    bytes = id.len(),
                    "canon stream event id is not a usable cursor"
                );
                if self.inbox_already_handled(&kind) {
                    return Vec::new();
                }
                self.event(kind, now_ms)
            }
            SessionInput::StreamFrame { id, kind } => {
                let mut effects = Vec::new();
                if self
                    .inbox_arrived(&id, &kind, now_ms, &mut effects)
                    .is_some()
                {
                    effects.extend(self.event(kind, now_ms));
                    self.inbox_frame_done(&mut effects);
                }
                effects
            }
            SessionInput::StreamConnected => {
                self.stream_open = true;
                vec![notification(DaemonNotification::AdapterStatus(
                    AdapterStatus { connected: true },
                ))]
            }
            SessionInput::StreamFailed(error) => {
                self.stream_open = false;
                tracing::error!(%error, "event stream stopped");
                vec![
                    SessionEffect::CloseStream,
                    notification(DaemonNotification::AdapterFatal(connect::stream_stopped(
                        error,
                    ))),
                ]
            }
            SessionInput::StreamEnded => {
                self.stream_open = false;
                tracing::warn!("event stream ended");
                vec![SessionEffect::CloseStream]
            }
            SessionInput::Delivered { op, result } => {
                self.feed(Input::DeliveryOutcome { op, result }, now_ms)
            }
            SessionInput::Signal {
                conversation_id,
                signal,
            } => {
                let control = requests::control_signal(
                    conversation_id,
                    signal,
                    self.agent.agent_id.as_deref(),
                    &self.conversations,
                );
                tracing::info!(conversation_id = control.chat_id, signal = ?control.signal, "runtime control signal");
                vec![SessionEffect::Frame(
                    self.request_line(DaemonRequest::ControlSignal(control)),
                )]
            }
            SessionInput::Refetched { generation, result } => {
                match self.refetched(generation, result) {
                    RefetchStep::Stale => Vec::new(),
                    RefetchStep::Replaced => {
                        vec![SessionEffect::RefetchSettled, self.publish_conversations()]
                    }
                    RefetchStep::Reconnect => {
                        vec![
                            SessionEffect::RefetchSettled,
                            SessionEffect::ReconnectStream,
                        ]
                    }
                }
            }
            SessionInput::MediaDone {
                conversation_id,
                job,
                message,
                materialized,
            } => {
                let message = match materialized {
                    Some(materialized) => self.captured(*message, *materialized, now_ms),
                    None => *message,
                };
                let Some(ready) = self.lanes.finished(&conversation_id, job, message) else {
                    tracing::error!(conversation_id, job, "media result for no pending message");
                    debug_assert!(false, "media result for no pending message");
                    return Vec::new();
                };
                ready
                    .into_iter()
                    .map(|message| SessionEffect::Frame(self.inbound_line(message, now_ms)))
                    .collect()
            }
            SessionInput::Uploaded { request, result } => self.uploaded(request, result, now_ms),
            SessionInput::HitlCreated {
                key,
                shim_id,
                re,
                result,
            } => {
                if self.tool_waits.owns(key) {
                    if let Err((error, _)) = &result {
                        tracing::warn!(kind = re, %error, "Canon interaction request failed");
                    }
                    return self.tool_created(key, result, now_ms);
                }
                let mut effects = Vec::new();
                if let Err((error, _)) = &result {
                    tracing::warn!(kind = re, %error, "Canon interaction request failed");
                    effects.push(SessionEffect::ForgetHitl(key));
                }
                let created = self
                    .hitl
                    .created(key, result, self.agent.owner_id.as_deref());
                if let Some((session_key, conversation_id)) = created.waiting {
                    effects.extend(self.feed(
                        Input::WaitingInput {
                            session_key: Some(session_key),
                            conversation_id,
                        },
                        now_ms,
                    ));
                }
                effects.push(send_result_frame(&shim_id, re, created.reply));
                effects
            }
            SessionInput::HitlFinished { key, outcome } if self.tool_waits.owns(key) => {
                self.tool_finished(key, outcome, now_ms)
            }
            SessionInput::HitlFinished { key, outcome } => {
                let mut effects = vec![SessionEffect::ForgetHitl(key)];
                let Some(finished) = self.hitl.finished(key, outcome) else {
                    return effects;
                };
                // `tool` after every resolution while the turn waits
                // (turns.md, open question 3).
                if self.machine.turn_state(&finished.session_key) == Some(TurnState::WaitingInput) {
                    effects.extend(self.feed(
                        Input::InputResolved {
                            session_key: Some(finished.session_key.clone()),
                            conversation_id: finished.conversation_id.clone(),
                        },
                        now_ms,
                    ));
                }
                effects.push(SessionEffect::Frame(self.request_line(finished.request)));
                effects
            }
            SessionInput::CredentialsResolved { call, facts } => {
                self.credentials_resolved(*call, facts)
            }
            SessionInput::ConnectDone { call, result } => self.connect_done(call, result, now_ms),
            SessionInput::DetachedDone {
                id,
                re,
                api,
                result,
            } => vec![super::detached::detached_answer(&id, re, api, result)],
            SessionInput::CommunicateDone {
                id,
                re,
                call,
                result,
            } => vec![super::communicate::communicate_answer(
                &id, re, &call, result,
            )],
            SessionInput::ApprovalWake(wake) => self.approval_wake(*wake),
            SessionInput::CardWaitDone {
                id,
                re,
                result,
                waiting,
            } => self.card_wait_done(&id, re, result, waiting, now_ms),
            SessionInput::CardWake(wake) => self.card_wake(*wake),
            SessionInput::Timeout => {
                let mut effects = self.inbox_let_go_expired(now_ms);
                effects.extend(self.inbox_reoffers_due(now_ms));
                effects.extend(self.feed(Input::Timeout, now_ms));
                effects
            }
            SessionInput::Exiting => self.feed(Input::Exiting, now_ms),
        }
    }

    /// One shim line: a request, a notification or an answer to one of
    /// the daemon's own requests.
    fn line(&mut self, bytes: &[u8], now_ms: u64, random: u128) -> Vec<SessionEffect> {
        let frame = match protocol::decode_frame(bytes) {
            Ok(frame) => frame,
            Err(error) => {
                // Recover an id when the line is JSON with one, to answer.
                let id = serde_json::from_slice::<Value>(bytes).ok().and_then(|v| {
                    let id = v.get("id")?.as_str()?.to_owned();
                    let kind = v.get("type")?.as_str()?.to_owned();
                    Some((id, kind))
                });
                return match id {
                    Some((id, kind)) => {
                        vec![error_frame(&id, &kind, error.code(), error.to_string())]
                    }
                    None => {
                        tracing::warn!(%error, "dropped an unusable frame");
                        Vec::new()
                    }
                };
            }
        };
        match frame {
            Frame::Request { id, kind, body } => match ShimRequest::from_parts(&kind, body) {
                Ok(request) => {
                    tracing::debug!(id, kind = request.type_name(), "shim request");
                    self.shim_request(id, request, now_ms, random)
                }
                Err(error) => vec![error_frame(&id, &kind, error.code(), error.to_string())],
            },
            Frame::Notification { kind, body } => match ShimNotification::from_parts(&kind, body) {
                Ok(note) => match requests::notification_input(note) {
                    Some(input) => self.feed(input, now_ms),
                    None => Vec::new(),
                },
                Err(error) => {
                    tracing::debug!(kind, %error, "ignored a notification");
                    Vec::new()
                }
            },
            Frame::Response { id, re, result } => {
                // Daemon requests are fire-and-log (`inbound.message` and
                // `control.signal` need nothing from the answer), except a
                // detached-approval wake, whose lease ends with the answer.
                let re = re.as_deref().unwrap_or("");
                let accepted = match &result {
                    Ok(body) => {
                        tracing::debug!(id, re, ok = true, "shim answered");
                        body.get("accepted").and_then(Value::as_bool) == Some(true)
                    }
                    Err(error) => {
                        tracing::debug!(
                            id,
                            re,
                            ok = false,
                            code = ?error.code,
                            retryable = error.retryable,
                            "shim answered"
                        );
                        false
                    }
                };
                let queued_in = result
                    .as_ref()
                    .ok()
                    .filter(|body| body.get("queued").and_then(Value::as_bool) == Some(true))
                    .and_then(|body| body.get("session_key").and_then(Value::as_str));
                // A retryable error (the adapter is not connected: the gateway is stopping)
                // means Hermes never took the message: its frame stays unsettled, so the next
                // daemon's stream replays it.
                let refused = matches!(&result, Err(error) if error.retryable);
                let mut effects = if refused {
                    self.inbox_refused(&id, now_ms);
                    Vec::new()
                } else {
                    self.inbox_answered(&id, queued_in, now_ms)
                };
                effects.extend(self.wake_answered(&id, accepted, queued_in));
                effects
            }
        }
    }

    /// A decoded shim request: answered by [`Session::request`], or turned
    /// into the I/O effects it needs.
    fn shim_request(
        &mut self,
        id: String,
        request: ShimRequest,
        now_ms: u64,
        random: u128,
    ) -> Vec<SessionEffect> {
        let config = std::mem::take(&mut self.config);
        let facts = RequestFacts {
            daemon_version: &config.daemon_version,
            manifest_sha256: config.manifest_sha256.as_deref(),
            home_channel: config.home_channel.as_deref(),
        };
        let handled = self.request(id.clone(), request, facts, now_ms, random);
        let effects = match handled {
            Handled::Effects(effects) => effects,
            Handled::Shell(request) => self.io_request(id, *request, &config, now_ms, random),
        };
        self.config = config;
        effects
    }

    /// The requests [`Session::request`] hands back because they need I/O.
    fn io_request(
        &mut self,
        id: String,
        request: ShimRequest,
        config: &SessionConfig,
        now_ms: u64,
        random: u128,
    ) -> Vec<SessionEffect> {
        let re = request.type_name();
        match request {
            // A probe with a config asks about that config (cli.md §5.1:
            // the platform config comes before env defaults); `check_fn`'s
            // probe carries none and is answered from what the daemon has.
            ShimRequest::Probe(probe) => match &probe.config {
                Some(platform) => vec![SessionEffect::ResolveCredentials(Box::new(
                    ResolveCall::probe(id, re, probe.verify, platform),
                ))],
                None => probe_step(
                    id,
                    re,
                    probe_facts(config, &config.credentials),
                    probe.verify,
                    None,
                ),
            },
            // The connect's platform config may name the key, the profile or
            // the environment (cli.md §5.1): resolve with it, then connect.
            ShimRequest::AdapterConnect(request) => {
                self.host_approvals_timeout = request.host.approvals_timeout_s;
                let call = ConnectCall {
                    id,
                    re,
                    busy_handler: request.seams.busy_handler,
                    is_reconnect: request.is_reconnect,
                };
                vec![SessionEffect::ResolveCredentials(Box::new(
                    ResolveCall::connect(call, &request.config),
                ))]
            }
            ShimRequest::AdapterDisconnect(_) => {
                // No wire call: the loops just stop (canon-wire.md §8.1).
                let mut effects = self.stop_connection();
                effects.extend(self.feed(Input::Disconnect, now_ms));
                effects.push(empty_answer(&id, re));
                effects
            }
            ShimRequest::Shutdown(_) => {
                let mut effects = self.stop_connection();
                effects.push(empty_answer(&id, re));
                effects
            }
            ShimRequest::StandaloneSend(send) => {
                // Handed back only with media to upload and a conversation
                // to send it to.
                let request = self.register(id, re);
                let standalone =
                    super::standalone_send(request, &send, config.home_channel.as_deref(), random);
                match crate::turn::standalone_target(&standalone).map(str::to_owned) {
                    Some(target) => {
                        self.uploads
                            .insert(request.0, PendingUpload::Standalone(Box::new(standalone)));
                        vec![SessionEffect::UploadStandalone {
                            request,
                            target,
                            files: send.media_files,
                            force_document: send.force_document,
                        }]
                    }
                    None => self.feed(Input::Standalone(standalone), now_ms),
                }
            }
            ShimRequest::AdapterSendMedia(media) => self.send_media(id, re, media, random),
            ShimRequest::AdapterSendClarify(clarify) => {
                if !self.connected {
                    return vec![not_connected(&id, re)];
                }
                let start = self.clarify(clarify, config.clarify_timeout, now_ms);
                start_hitl(id, re, start)
            }
            ShimRequest::AdapterSendExecApproval(approval) => {
                if !self.connected {
                    return vec![not_connected(&id, re)];
                }
                let start = self.exec_approval(approval, config.approval_timeout, now_ms, random);
                start_hitl(id, re, start)
            }
            other => {
                // `Session::request` answers every other kind itself.
                tracing::error!(
                    kind = other.type_name(),
                    "request handed back by the session"
                );
                tracing::warn!(kind = re, "answered an unsupported request");
                vec![error_frame(
                    &id,
                    re,
                    protocol::ErrorCode::Internal,
                    format!("{re} {}", super::UNSUPPORTED_SUFFIX),
                )]
            }
        }
    }

    /// `adapter.send_media`: a silenced turn is answered at once with
    /// success and nothing uploaded; otherwise the file is uploaded and the
    /// message then goes to the turn machine ([`Input::Media`]).
    fn send_media(
        &mut self,
        id: String,
        re: &'static str,
        media: AdapterSendMedia,
        random: u128,
    ) -> Vec<SessionEffect> {
        let request = self.register(id, re);
        let session_key = media.ctx.session_key.clone();
        if let Some(answer) = self.silenced_media(request, session_key.as_deref(), &media.chat_id) {
            return vec![answer];
        }
        let message = HostMedia {
            request,
            session_key,
            conversation_id: media.chat_id.clone(),
            caption: media.caption.clone().unwrap_or_default(),
            reply_to: media.reply_to.clone(),
            metadata: media.metadata.clone().unwrap_or_default(),
            media: MediaPayload {
                content_type: String::new(),
                attachments: Vec::new(),
            },
            random,
        };
        self.uploads
            .insert(request.0, PendingUpload::Media(Box::new(message)));
        vec![SessionEffect::UploadMedia {
            request,
            media: Box::new(media),
        }]
    }

    /// An upload finished: the message goes to the turn machine, or the
    /// request is answered with the error.
    fn uploaded(
        &mut self,
        request: RequestId,
        result: Result<MediaPayload, String>,
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        let Some(pending) = self.uploads.remove(&request.0) else {
            tracing::error!(request = request.0, "upload result for no pending send");
            debug_assert!(false, "upload result for no pending send");
            return Vec::new();
        };
        if let PendingUpload::Api { id, re } = pending {
            let value = result.map(|payload| {
                let attachment = payload
                    .attachments
                    .into_iter()
                    .next()
                    .unwrap_or(Value::Null);
                let url = attachment.get("url").cloned().unwrap_or(Value::Null);
                serde_json::json!({"attachment": attachment, "url": url})
            });
            return vec![super::tools::api_result_frame(&id, re, value)];
        }
        match result {
            Ok(payload) => {
                let input = match pending {
                    PendingUpload::Media(mut message) => {
                        message.media = payload;
                        Input::Media(*message)
                    }
                    PendingUpload::Standalone(mut send) => {
                        send.media = Some(payload);
                        Input::Standalone(*send)
                    }
                    PendingUpload::Api { .. } => return Vec::new(),
                };
                self.feed(input, now_ms)
            }
            Err(error) => {
                tracing::warn!(%error, "outbound media not sent");
                let standalone = matches!(pending, PendingUpload::Standalone(_));
                let reply = upload_failed(standalone, error);
                self.reply_line(request, reply)
                    .map(SessionEffect::Reply)
                    .into_iter()
                    .collect()
            }
        }
    }

    /// The credentials of a connect or a probe were resolved. A connect
    /// adopts them, then checks its settings and makes the connect calls
    /// (or answers the refusal: an invalid setting, or `missing_api_key`
    /// when nothing resolved); a probe is answered from them.
    fn credentials_resolved(
        &mut self,
        call: ResolveCall,
        facts: CredentialFacts,
    ) -> Vec<SessionEffect> {
        if call.adopt {
            self.config.credentials = facts.clone();
        }
        match call.purpose {
            ResolvePurpose::Connect(connect) => {
                let config = std::mem::take(&mut self.config);
                let settings = ConnectFacts {
                    inbound_image_delivery: config.inbound_image_delivery.as_deref(),
                    inbound_visual_media_delivery: config.inbound_visual_media_delivery.as_deref(),
                    turn_verbosity: config.turn_verbosity.as_deref(),
                    api_key_set: facts.api_key_set,
                    base_url_set: !facts.base_url.is_empty(),
                };
                let started = self.connect_start(settings, &call.platform.extra);
                self.config = config;
                match started {
                    Ok(()) => vec![SessionEffect::Connect(connect)],
                    Err(refused) => {
                        self.connected = refused.connected;
                        let body = ShimResponse::AdapterConnect(refused).to_body();
                        vec![SessionEffect::Frame(protocol::encode_response(
                            &connect.id,
                            connect.re,
                            Ok(body),
                        ))]
                    }
                }
            }
            ResolvePurpose::Probe { id, re, verify } => probe_step(
                id,
                re,
                probe_facts(&self.config, &facts),
                verify,
                Some(call.platform),
            ),
        }
    }

    /// The connect calls finished: on success the cache and agent are
    /// replaced, the previous connection's loops stop and the new ones
    /// start; the shim is answered either way.
    fn connect_done(
        &mut self,
        call: ConnectCall,
        result: Result<(AgentMe, Vec<Conversation>), ConnectFailure>,
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        let mut effects = Vec::new();
        let answer = match result {
            Ok((me, conversations)) => {
                let answer = self.connected(me, conversations, call.busy_handler);
                if !call.is_reconnect {
                    effects.extend(self.inbox_close_abandoned(now_ms));
                }
                self.stop_refetch();
                effects.push(self.publish_conversations());
                effects.push(SessionEffect::OpenConnection);
                answer
            }
            Err(failure) => connect::refusal(failure),
        };
        self.connected = answer.connected;
        let body = ShimResponse::AdapterConnect(answer).to_body();
        effects.push(SessionEffect::Frame(protocol::encode_response(
            &call.id,
            call.re,
            Ok(body),
        )));
        effects
    }

    /// Disconnect and shutdown: the loops and the stream stop, every open
    /// blocking interaction is cancelled, and a re-fetch on its way is
    /// stale.
    fn stop_connection(&mut self) -> Vec<SessionEffect> {
        self.connected = false;
        self.stream_open = false;
        self.stop_refetch();
        let mut effects = vec![
            SessionEffect::StopConnection,
            SessionEffect::CancelHitl({
                let mut keys = self.hitl.cancel_session(None);
                keys.extend(self.cancel_tool_waits(None));
                keys
            }),
        ];
        effects.extend(self.drop_wakes());
        effects
    }

    /// One stream event, arrived at `now_ms`.
    fn event(&mut self, kind: EventKind, now_ms: u64) -> Vec<SessionEffect> {
        // A gap's window starts at the last event of a conversation: the frames every stream
        // opens with (`connected`, `agent.context`) say nothing about what was received.
        let activity = matches!(
            kind,
            EventKind::MessageCreated(_)
                | EventKind::ConversationUpdated { .. }
                | EventKind::RuntimeControl { .. }
        );
        let (step, keys_changed) = self.stream_event(kind);
        let mut effects = Vec::new();
        if keys_changed {
            effects.push(self.publish_conversations());
        }
        match step {
            StreamStep::Nothing => {}
            StreamStep::Inbound(step) => effects.extend(self.inbound(step, now_ms)),
            StreamStep::Ring(conversation_id) => effects.push(SessionEffect::Ring(conversation_id)),
            StreamStep::Refetch => {
                // The window runs from the last event before this one.
                let gap = self.event_gaps.expired(self.conversations.ids(), now_ms);
                effects.push(SessionEffect::StreamGap(gap));
                effects.push(SessionEffect::Refetch(self.start_refetch()));
            }
        }
        if activity {
            self.event_gaps.event_at(now_ms);
        }
        effects
    }

    /// What a `message.created` event became.
    fn inbound(&mut self, step: InboundStep, now_ms: u64) -> Vec<SessionEffect> {
        match step {
            InboundStep::Nothing => Vec::new(),
            InboundStep::ApprovalReceipt(receipt) => vec![SessionEffect::ApprovalReceipt(receipt)],
            InboundStep::CardReceipt(receipt) => vec![SessionEffect::CardReceipt(receipt)],
            InboundStep::Send(message) => {
                vec![SessionEffect::Frame(self.inbound_line(*message, now_ms))]
            }
            InboundStep::Materialize {
                job,
                conversation_id,
                message,
                source,
                attachments,
                intent,
            } => {
                let scope = self.media_scope;
                // If the download dies, the message still goes out: no
                // media, and every attachment that needs it counted
                // unavailable (fail closed).
                let fallback = finish_inbound(
                    (*message).clone(),
                    &source,
                    scope,
                    Vec::new(),
                    media::all_unavailable(scope, &attachments),
                    0,
                    intent,
                );
                vec![SessionEffect::Materialize(Box::new(Materialize {
                    job,
                    conversation_id,
                    message: *message,
                    source,
                    attachments,
                    intent,
                    scope,
                    fallback,
                }))]
            }
        }
    }

    /// Registers a downloaded message's trusted captures under (its
    /// conversation, its message id) at `now_ms` and finishes the message
    /// with what the registration made available (runtime-control.md §8.4,
    /// runtime-control.md §8.5). A message without an id has no provenance to bind bytes to:
    /// nothing is registered and its hidden media are withheld.
    fn captured(
        &mut self,
        message: InboundMessage,
        materialized: Materialized,
        now_ms: u64,
    ) -> InboundMessage {
        let Materialized {
            source,
            intent,
            scope,
            listed,
            counts,
            captures,
        } = materialized;
        let overflowed = captures.overflowed();
        let registered = match message.event.message_id.as_deref() {
            Some(message_id) => self.captures.register(
                &message.event.source.chat_id,
                message_id,
                captures.into_items(),
                now_ms,
            ),
            None => false,
        };
        let available = media::available_count(counts.hidden, overflowed, registered);
        tracing::debug!(
            hidden = counts.hidden,
            unavailable = counts.unavailable,
            overflowed,
            registered,
            "inbound media captured"
        );
        finish_inbound(message, &source, scope, listed, counts, available, intent)
    }

    /// The set of conversations the signal pass visits: the cache's keys.
    fn publish_conversations(&self) -> SessionEffect {
        SessionEffect::PublishConversations(self.conversations.ids())
    }
}

/// A download of a waking message's attachments, holding its place in its
/// conversation's lane; report [`SessionInput::MediaDone`] with the message
/// and what the download found (`fallback` alone when the download task
/// died).
#[derive(Debug, Clone, PartialEq)]
pub struct Materialize {
    /// The lane job.
    pub job: u64,
    /// The conversation.
    pub conversation_id: String,
    /// The message, before its media.
    pub message: InboundMessage,
    /// The Canon message object (the markers read it).
    pub source: Value,
    /// Its attachments, in order.
    pub attachments: Vec<Value>,
    /// The delivery intent before any demotion.
    pub intent: DeliveryIntent,
    /// Which media the model may see.
    pub scope: TrustedScope,
    /// The message to send when the download task died.
    pub fallback: InboundMessage,
}

/// The effects of an opened blocking interaction, or the answer that too
/// many are open.
fn start_hitl(id: String, re: &'static str, start: Option<HitlStart>) -> Vec<SessionEffect> {
    match start {
        Some(start) => vec![SessionEffect::StartHitl {
            id,
            re,
            start: Box::new(start),
        }],
        None => vec![send_result_frame(&id, re, hitl::table::too_many())],
    }
}

/// The answer of a blocking interaction request while not connected.
pub fn not_connected(id: &str, re: &str) -> SessionEffect {
    send_result_frame(id, re, hitl::table::failure(hitl::NOT_CONNECTED, false))
}

/// The frame answering a blocking HITL request with a `SendResult`.
pub fn send_result_frame(id: &str, re: &str, result: SendResult) -> SessionEffect {
    let body = serde_json::to_value(result).unwrap_or_else(|_| Value::Object(Default::default()));
    SessionEffect::Frame(protocol::encode_response(id, re, Ok(body)))
}

/// How a `probe` is answered from these credentials: at once, or after one
/// check of Canon with the same credentials (`platform`: resolved again
/// from the probe's config; `None`: the daemon's own).
fn probe_step(
    id: String,
    re: &'static str,
    facts: ProbeFacts<'_>,
    verify: bool,
    platform: Option<PlatformCredentials>,
) -> Vec<SessionEffect> {
    match requests::probe(facts, verify) {
        ProbeStep::Answer(result) => vec![SessionEffect::Frame(probe_answer(&id, re, result))],
        ProbeStep::Verify(result) => vec![SessionEffect::VerifyProbe {
            id,
            re,
            result: Box::new(result),
            platform: platform.map(Box::new),
        }],
    }
}

/// What a probe with these credentials is answered from.
fn probe_facts<'a>(config: &'a SessionConfig, credentials: &'a CredentialFacts) -> ProbeFacts<'a> {
    ProbeFacts {
        credentials,
        home_channel: config.home_channel.as_deref(),
        home_channel_name: config.home_channel_name.as_deref(),
    }
}

/// The line answering a `probe` with its result (the shell sets the
/// check's error first on a verifying probe).
pub fn probe_answer(id: &str, re: &str, result: ProbeResult) -> String {
    let body = ShimResponse::Probe(result).to_body();
    protocol::encode_response(id, re, Ok(body))
}

fn empty_answer(id: &str, re: &str) -> SessionEffect {
    SessionEffect::Frame(protocol::encode_response(
        id,
        re,
        Ok(Value::Object(Default::default())),
    ))
}

/// Uploads waiting for their media, by request number.
pub(super) type Uploads = HashMap<u64, PendingUpload>;
