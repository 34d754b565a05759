//! Shim requests and notifications: each decoded request routed to the
//! session, the turn machine or an I/O helper, and the probe.

use super::*;

impl Driver {
    pub(super) async fn on_request(&mut self, id: String, kind: String, body: Value) {
        let request = match ShimRequest::from_parts(&kind, body) {
            Ok(request) => request,
            Err(error) => {
                self.respond_error(&id, &kind, error.code(), error.to_string())
                    .await;
                return;
            }
        };
        let re = request.type_name();
        if !self.session.handshake_done && !matches!(request, ShimRequest::Hello(_)) {
            self.respond_error(
                &id,
                re,
                ErrorCode::HandshakeRequired,
                "hello must come first".into(),
            )
            .await;
            return;
        }
        tracing::debug!(id, kind = re, "shim request");
        match request {
            ShimRequest::Hello(hello) => {
                let manifest = self
                    .config
                    .manifest_sha256
                    .clone()
                    .unwrap_or_else(|| hello.manifest_sha256.clone());
                let policy = HandshakePolicy {
                    daemon_version: env!("CARGO_PKG_VERSION"),
                    manifest_sha256: &manifest,
                    audited_hermes: AUDITED_HERMES,
                    audited_python: AUDITED_PYTHON,
                };
                let epoch = format!("{:016x}", random_u128() as u64);
                match protocol::negotiate(&hello, &policy, &epoch) {
                    Ok(ok) => {
                        self.session.handshake_done = true;
                        let body = protocol::ShimResponse::Hello(ok).to_body();
                        self.respond(&id, re, Ok(body)).await;
                        tracing::info!(epoch, "handshake done");
                    }
                    Err(error) => {
                        self.send_line(protocol::encode_response(&id, re, Err(&error)))
                            .await;
                        if error.code == ErrorCode::UnsupportedProtocol {
                            self.exit_code = Some(EXIT_UNSUPPORTED_PROTOCOL);
                        }
                    }
                }
            }
            ShimRequest::Probe(probe) => self.probe(id, re, &probe).await,
            ShimRequest::AdapterChatInfo(chat) => {
                let info = requests::chat_info(chat.chat_id, &self.session.conversations);
                let body = protocol::ShimResponse::AdapterChatInfo(info).to_body();
                self.respond(&id, re, Ok(body)).await;
            }
            ShimRequest::AdapterConnect(connect) => {
                self.session.host_approvals_timeout = connect.host.approvals_timeout_s;
                let result = self
                    .connect(connect.seams.busy_handler, &connect.config.extra.0)
                    .await;
                self.session.connected = result.connected;
                let body = protocol::ShimResponse::AdapterConnect(result).to_body();
                self.respond(&id, re, Ok(body)).await;
            }
            ShimRequest::AdapterDisconnect(_) => {
                // canon-wire.md §8.1: no wire call, the loops just stop.
                self.stop_loops();
                self.stream = None;
                self.session.connected = false;
                self.cancel_hitl(None);
                self.feed(Input::Disconnect).await;
                self.respond(&id, re, Ok(empty())).await;
            }
            ShimRequest::Shutdown(_) => {
                self.stop_loops();
                self.stream = None;
                self.session.connected = false;
                self.cancel_hitl(None);
                self.respond(&id, re, Ok(empty())).await;
            }
            ShimRequest::AdapterSend(send) => {
                let request = self.session.register(id, re);
                self.feed(Input::Send(HostSend {
                    request,
                    session_key: send.ctx.session_key,
                    conversation_id: send.chat_id,
                    content: send.content,
                    reply_to: send.reply_to,
                    metadata: send.metadata.unwrap_or_default(),
                    random: random_u128(),
                }))
                .await;
            }
            ShimRequest::AdapterEdit(edit) => {
                let request = self.session.register(id, re);
                self.feed(Input::Edit(HostEdit {
                    request,
                    session_key: edit.ctx.session_key,
                    conversation_id: edit.chat_id,
                    content: edit.content,
                    finalize: edit.finalize,
                    metadata: edit.metadata.unwrap_or_default(),
                    random: random_u128(),
                }))
                .await;
            }
            ShimRequest::TurnStart(start) => {
                let request = self.session.register(id, re);
                let input = self.processing_start(
                    request,
                    &start.event_ref,
                    start.session_key,
                    &start.event,
                    start.queue_depth,
                    Vec::new(),
                );
                self.feed(Input::ProcessingStart(input)).await;
            }
            ShimRequest::TurnAccepted(accepted) => {
                let request = self.session.register(id, re);
                let start = self.processing_start(
                    request,
                    &accepted.event_ref,
                    accepted.session_key,
                    &accepted.event,
                    accepted.queue_depth,
                    accepted.absorbed_refs,
                );
                self.feed(Input::QueueDequeued {
                    start,
                    interrupted: accepted.interrupted,
                })
                .await;
            }
            ShimRequest::TurnComplete(complete) => {
                let request = self.session.register(id, re);
                let conversation_id = self
                    .session
                    .complete(&complete.session_key, &complete.event_ref);
                self.cancel_hitl(Some(&complete.session_key));
                self.feed(Input::ProcessingComplete {
                    request,
                    session_key: complete.session_key,
                    conversation_id,
                    outcome: complete.outcome.into(),
                    queue_depth: complete.queue_depth,
                })
                .await;
            }
            ShimRequest::ToolCall(call) => {
                if requests::is_no_reply(&call) {
                    let request = self.session.register(id, re);
                    self.feed(Input::NoReply(requests::no_reply(&call, request)))
                        .await;
                } else {
                    self.unsupported(&id, re, re).await;
                }
            }
            ShimRequest::StandaloneSend(send) => {
                let home_channel_config =
                    requests::home_channel_config(send.pconfig.home_channel.as_ref());
                let request = self.session.register(id, re);
                let standalone = StandaloneSend {
                    request,
                    chat_id: send.chat_id,
                    home_channel_env: self.config.home_channel.clone(),
                    home_channel_config,
                    text: send.message,
                    media: None,
                    random: random_u128(),
                };
                let target = canon_host::turn::standalone_target(&standalone).map(str::to_owned);
                match target {
                    Some(target) if !send.media_files.is_empty() => {
                        self.upload_standalone(
                            standalone,
                            target,
                            send.media_files,
                            send.force_document,
                        );
                    }
                    _ => self.feed(Input::Standalone(standalone)).await,
                }
            }
            ShimRequest::AdapterSendMedia(media) => self.send_media(id, re, media).await,
            ShimRequest::AdapterSendClarify(clarify) => self.send_clarify(id, re, clarify).await,
            ShimRequest::AdapterSendExecApproval(approval) => {
                self.send_exec_approval(id, re, approval).await
            }
            ShimRequest::Resync(resync) => {
                let request = self.session.register(id, re);
                self.session.resync_sessions(&resync.open_turns);
                let open_turns = requests::resync_turns(resync.open_turns);
                self.feed(Input::Resync {
                    request,
                    open_turns,
                })
                .await;
            }
        }
    }

    pub(super) fn processing_start(
        &mut self,
        request: RequestId,
        event_ref: &str,
        session_key: String,
        event: &EventSummary,
        queue_depth: u32,
        absorbed_refs: Vec<String>,
    ) -> ProcessingStart {
        self.session.processing_start(
            request,
            event_ref,
            session_key,
            event,
            queue_depth,
            &absorbed_refs,
            random_u128(),
        )
    }

    pub(super) async fn on_notification(&mut self, kind: &str, body: Value) {
        let note = match ShimNotification::from_parts(kind, body) {
            Ok(note) => note,
            Err(error) => {
                tracing::debug!(kind, %error, "ignored a notification");
                return;
            }
        };
        let input = match note {
            ShimNotification::Typing(t) => Input::Typing {
                status: t
                    .metadata
                    .as_ref()
                    .and_then(|m| m.get("status"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                conversation_id: t.chat_id,
                on: t.on,
            },
            ShimNotification::PreToolCall(p) => {
                let Some(chat) = canon_chat(&p.ctx) else {
                    return;
                };
                Input::Activity {
                    session_key: p.ctx.session_key,
                    conversation_id: chat,
                    event: ActivityEvent::ToolStarted {
                        tool_call_id: p.tool_call_id,
                        tool_name: p.tool_name,
                        args: opaque(p.args),
                    },
                }
            }
            ShimNotification::PostToolCall(p) => {
                let Some(chat) = canon_chat(&p.ctx) else {
                    return;
                };
                Input::Activity {
                    session_key: p.ctx.session_key,
                    conversation_id: chat,
                    event: ActivityEvent::ToolFinished {
                        tool_call_id: p.tool_call_id,
                        tool_name: p.tool_name,
                        args: opaque(p.args),
                        result: opaque(p.result),
                        status: p.status,
                        duration_ms: p.duration_ms,
                    },
                }
            }
            ShimNotification::SubagentStop(s) => {
                let Some(chat) = canon_chat(&s.ctx) else {
                    return;
                };
                Input::Activity {
                    session_key: s.ctx.session_key,
                    conversation_id: chat,
                    event: ActivityEvent::SubagentStopped {
                        child_session_id: s.child_session_id,
                        child_role: s.child_role,
                        child_summary: opaque(s.child_summary),
                        child_status: s.child_status,
                        duration_ms: s.duration_ms,
                    },
                }
            }
            ShimNotification::QueueDepth(q) => Input::QueueDepth {
                session_key: q.session_key,
                depth: q.depth,
            },
            ShimNotification::TurnSteered(t) => Input::SteerAccepted {
                session_key: Some(t.session_key),
                conversation_id: t.chat_id,
            },
        };
        self.feed(input).await;
    }

    /// `probe` (hermes-host.md §19.6): without `verify` from the
    /// configuration alone, with no network I/O; with it, one health or
    /// `GET /agents/me` call on a task of its own. Never carries the key.
    pub(super) async fn probe(&mut self, id: String, re: &'static str, probe: &Probe) {
        let configured =
            !self.config.api_key.expose().is_empty() && !self.config.base_url.is_empty();
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        let mut result = ProbeResult {
            configured,
            profile: None,
            environment_id: self.config.environment_id.clone(),
            base_url: non_empty(&self.config.base_url),
            stream_url: non_empty(&self.config.stream_url),
            seed: None,
            error: None,
        };
        if probe.verify && !configured {
            result.error = Some("CANON_API_KEY and CANON_BASE_URL must be set".to_owned());
        }
        if !probe.verify || !configured {
            let body = protocol::ShimResponse::Probe(result).to_body();
            self.respond(&id, re, Ok(body)).await;
            return;
        }
        let client = match self.client() {
            Ok(client) => client,
            Err(error) => {
                result.error = Some(error.to_string());
                let body = protocol::ShimResponse::Probe(result).to_body();
                self.respond(&id, re, Ok(body)).await;
                return;
            }
        };
        let environment = self.config.environment_id.clone();
        let out = self.out.clone();
        self.spawn_background(async move {
            let check = async {
                match environment {
                    Some(environment) => client
                        .verify_environment(&environment, None)
                        .await
                        .map(drop),
                    None => client.get_me().await.map(drop),
                }
            };
            result.error = match tokio::time::timeout(PROBE_VERIFY_BUDGET, check).await {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some("Canon did not answer in time".to_owned()),
            };
            let body = protocol::ShimResponse::Probe(result).to_body();
            if out
                .send(protocol::encode_response(&id, re, Ok(body)))
                .await
                .is_err()
            {
                tracing::debug!("stdout writer is gone; probe answer dropped");
            }
        });
    }
}
