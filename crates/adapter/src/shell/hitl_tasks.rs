//! Hermes' blocking clarify and exec approval as Canon runtime
//! interactions: the request is built by `canon_host::hitl`, the table of
//! open ones is `canon_host::hitl::table`; this file starts and cancels
//! their poll tasks and carries out what they report.

use super::*;

impl Driver {
    /// The responder of a blocking HITL request (runtime-control.md §6.1):
    /// the turn's recorded responder, else the trusted user of the call's
    /// Canon context; when both exist and differ, the recorded one.
    pub(super) fn responder_for(
        &self,
        session_key: &str,
        ctx: &protocol::TurnContext,
    ) -> Option<String> {
        hitl::table::responder(self.session.machine.responder(session_key), ctx)
    }

    /// `adapter.send_clarify` (runtime-control.md §6.4).
    pub(super) async fn send_clarify(
        &mut self,
        id: String,
        re: &'static str,
        clarify: AdapterSendClarify,
    ) {
        let Some(client) = self.hitl_client() else {
            self.respond_send(&id, re, hitl::table::failure(hitl::NOT_CONNECTED, false))
                .await;
            return;
        };
        let timeout = self.config.clarify_timeout;
        let responder = self.responder_for(&clarify.session_key, &clarify.ctx);
        let request = hitl::clarify_request(&hitl::ClarifyAsk {
            conversation_id: &clarify.chat_id,
            clarify_id: &clarify.clarify_id,
            question: &clarify.question,
            choices: clarify.choices.as_deref().unwrap_or_default(),
            responder,
            session_key: &clarify.session_key,
            expires_at: expires_at(timeout),
        });
        let consume = ConsumeInteraction {
            kind: InteractionKind::Input,
            conversation_id: clarify.chat_id.clone(),
            id: clarify.clarify_id.clone(),
            cancel: false,
        };
        let entry = HitlEntry::new(
            clarify.session_key,
            clarify.chat_id,
            HitlKind::Clarify {
                clarify_id: clarify.clarify_id,
            },
        );
        let request = InteractionRequest::Input(request);
        self.start_hitl(client, id, re, entry, request, consume, timeout)
            .await;
    }

    /// `adapter.send_exec_approval` (runtime-control.md §6.2, §6.3, §6.5,
    /// hermes-host.md Q2, Q10).
    pub(super) async fn send_exec_approval(
        &mut self,
        id: String,
        re: &'static str,
        approval: AdapterSendExecApproval,
    ) {
        let Some(client) = self.hitl_client() else {
            self.respond_send(&id, re, hitl::table::failure(hitl::NOT_CONNECTED, false))
                .await;
            return;
        };
        let timeout = hitl::approval_timeout(
            self.config.approval_timeout,
            self.session.host_approvals_timeout,
        );
        let approval_id = format!("hermes-{:020x}", random_u128() & ((1u128 << 80) - 1));
        let responder = self.responder_for(&approval.session_key, &approval.ctx);
        let request = hitl::approval_request(&hitl::ApprovalAsk {
            conversation_id: &approval.chat_id,
            approval_id: &approval_id,
            command: approval.command.expose(),
            description: approval.description.as_deref(),
            responder,
            owner_id: self.session.agent.owner_id.as_deref(),
            allow_session: approval.allow_session.unwrap_or(true),
            smart_denied: approval.smart_denied,
            session_key: &approval.session_key,
            expires_at: expires_at(timeout),
        });
        let consume = ConsumeInteraction {
            kind: InteractionKind::Approval,
            conversation_id: approval.chat_id.clone(),
            id: approval_id,
            cancel: false,
        };
        let entry = HitlEntry::new(
            approval.session_key,
            approval.chat_id,
            HitlKind::Approval {
                expected: request.response_user_id.clone(),
                allow_session: request.allow_session_rule,
            },
        );
        let request = InteractionRequest::Approval(request);
        self.start_hitl(client, id, re, entry, request, consume, timeout)
            .await;
    }

    /// The Canon client for a blocking HITL request: `None` unless
    /// connected.
    pub(super) fn hitl_client(&self) -> Option<CanonClient> {
        self.client.clone().filter(|_| self.session.connected)
    }

    /// Opens a HITL entry and spawns its task.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start_hitl(
        &mut self,
        client: CanonClient,
        id: String,
        re: &'static str,
        entry: HitlEntry,
        request: InteractionRequest,
        consume: ConsumeInteraction,
        timeout: Duration,
    ) {
        let conversation_id = entry.conversation_id.clone();
        let Some(key) = self.session.hitl.open(entry) else {
            self.respond_send(&id, re, hitl::table::too_many()).await;
            return;
        };
        while self.hitl_tasks.try_join_next().is_some() {}
        let (cancel_tx, cancel_rx) = oneshot::channel();
        self.hitl_cancels.insert(key, cancel_tx);
        tracing::info!(
            conversation_id,
            kind = re,
            timeout_s = timeout.as_secs(),
            "requesting a Canon interaction"
        );
        self.hitl_tasks.spawn(run_hitl(
            client,
            key,
            id,
            re,
            request,
            consume,
            timeout,
            self.config
                .hitl_poll
                .clamp(MIN_LOOP_INTERVAL, MAX_LOOP_INTERVAL),
            cancel_rx,
            self.hitl_tx.clone(),
        ));
    }

    /// Carries out what a HITL task reported.
    pub(super) async fn on_hitl(&mut self, event: HitlEvent) {
        match event {
            HitlEvent::Created {
                key,
                shim_id,
                re,
                result,
            } => {
                if let Err((error, _)) = &result {
                    self.hitl_cancels.remove(&key);
                    tracing::warn!(kind = re, %error, "Canon interaction request failed");
                }
                let created =
                    self.session
                        .hitl
                        .created(key, result, self.session.agent.owner_id.as_deref());
                if let Some((session_key, conversation_id)) = created.waiting {
                    self.feed(Input::WaitingInput {
                        session_key: Some(session_key),
                        conversation_id,
                    })
                    .await;
                }
                self.respond_send(&shim_id, re, created.reply).await;
            }
            HitlEvent::Finished { key, outcome } => {
                self.hitl_cancels.remove(&key);
                let Some(finished) = self.session.hitl.finished(key, outcome) else {
                    return;
                };
                // `tool` after every resolution while the turn waits
                // (turns.md OQ-3).
                if self.session.machine.turn_state(&finished.session_key)
                    == Some(TurnState::WaitingInput)
                {
                    self.feed(Input::InputResolved {
                        session_key: Some(finished.session_key.clone()),
                        conversation_id: finished.conversation_id.clone(),
                    })
                    .await;
                }
                self.send_request(finished.request).await;
            }
        }
    }

    /// Cancels the open HITL interactions of a session (all of them with
    /// `None`): their tasks stop polling and cancel them on Canon.
    pub(super) fn cancel_hitl(&mut self, session_key: Option<&str>) {
        for key in self.session.hitl.cancel_session(session_key) {
            if let Some(cancel) = self.hitl_cancels.remove(&key) {
                let _ = cancel.send(());
            }
        }
    }
}
