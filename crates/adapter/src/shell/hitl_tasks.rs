//! Hermes' blocking clarify and exec approval as Canon runtime
//! interactions: `canon_host::session::interactions` decides what Canon is
//! asked and opens the table entry (`canon_host::hitl::table`); this file
//! starts and cancels their poll tasks and carries out what they report.

use super::*;
use crate::config::{MAX_LOOP_INTERVAL, MIN_LOOP_INTERVAL};
use crate::env::{now_ms, random_u128};
use crate::tasks::{run_hitl, HitlEvent};

impl Driver {
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
        let start = self
            .session
            .clarify(clarify, self.config.clarify_timeout, now_ms());
        self.start_hitl(client, id, re, start).await;
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
        let start = self.session.exec_approval(
            approval,
            self.config.approval_timeout,
            now_ms(),
            random_u128(),
        );
        self.start_hitl(client, id, re, start).await;
    }

    /// The Canon client for a blocking HITL request: `None` unless
    /// connected.
    pub(super) fn hitl_client(&self) -> Option<CanonClient> {
        self.client.clone().filter(|_| self.session.connected)
    }

    /// Spawns the task of an opened HITL entry, or answers that too many
    /// are open (`start` is `None`).
    pub(super) async fn start_hitl(
        &mut self,
        client: CanonClient,
        id: String,
        re: &'static str,
        start: Option<HitlStart>,
    ) {
        let Some(HitlStart {
            key,
            conversation_id,
            request,
            consume,
            timeout,
        }) = start
        else {
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
