//! Hermes' blocking clarify and exec approval as Canon runtime
//! interactions: the session (`canon_host::session::interactions`) decides
//! what Canon is asked and opens the table entry; this file starts and
//! cancels their create-and-poll tasks, whose reports go back to the
//! session.

use super::*;
use crate::config::{MAX_LOOP_INTERVAL, MIN_LOOP_INTERVAL};
use crate::tasks::run_hitl;
use canon_host::session::handle::not_connected;
use canon_host::session::interactions::HitlStart;

impl Driver {
    /// Spawns the task of an opened interaction. Without a client (the
    /// session saw a connect, so this does not happen) the request is
    /// answered as not connected and the entry finishes at once.
    pub(super) async fn start_hitl(
        &mut self,
        id: String,
        re: &'static str,
        start: HitlStart,
    ) -> Option<SessionInput> {
        let HitlStart {
            key,
            conversation_id,
            request,
            consume,
            timeout,
            tool,
        } = start;
        let Some(client) = self.client.clone() else {
            tracing::error!("blocking interaction without a Canon client");
            if let SessionEffect::Frame(line) = not_connected(&id, re) {
                self.send_line(line).await;
            }
            return Some(SessionInput::HitlFinished {
                key,
                outcome: canon_host::hitl::table::HitlOutcome::Cancelled,
            });
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
            tool,
            timeout,
            self.config
                .hitl_poll
                .clamp(MIN_LOOP_INTERVAL, MAX_LOOP_INTERVAL),
            cancel_rx,
            self.hitl_tx.clone(),
        ));
        None
    }

    /// Stops these interactions' tasks: they stop polling and cancel their
    /// interaction on Canon.
    pub(super) fn cancel_hitl(&mut self, keys: Vec<u64>) {
        for key in keys {
            if let Some(cancel) = self.hitl_cancels.remove(&key) {
                let _ = cancel.send(());
            }
        }
    }
}
