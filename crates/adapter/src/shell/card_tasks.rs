//! The card-wait effects of the session (durable-endpoint.md §10) and the reports of their tasks
//! (`crate::card_waits`): a tool call runs as a background task that finishes even during
//! shutdown; receipt handling and the wake scan belong to the connection and stop with it.

use super::*;
use crate::card_waits::{self, CardWaits};
use canon_host::card_waits::{CardReceipt, CardWaitCall, CardWake};
use canon_host::session::card_waits::WaitingTurn;

/// A finished card-wait tool call, reported to the select loop (claimed wakes come on their
/// own channel).
pub(crate) struct CardDone {
    id: String,
    re: &'static str,
    result: Result<serde_json::Value, String>,
    waiting: Option<WaitingTurn>,
}

impl Driver {
    fn card_waits(&mut self) -> Result<CardWaits, String> {
        let client = self.client().map_err(|e| e.to_string())?;
        CardWaits::open(
            self.config.canon_home.as_deref(),
            &self.config.base_url,
            self.agent_id.as_deref(),
            client,
            self.config.hitl_poll,
        )
    }

    /// Runs a card-wait call; its result comes back as a [`CardDone`].
    pub(super) fn run_card_wait(
        &mut self,
        id: String,
        re: &'static str,
        call: CardWaitCall,
        waiting: Option<WaitingTurn>,
    ) -> Option<SessionInput> {
        let waits = match self.card_waits() {
            Ok(waits) => waits,
            Err(error) => {
                return Some(SessionInput::CardWaitDone {
                    id,
                    re,
                    result: Err(error),
                    waiting,
                })
            }
        };
        let budget = call.waits().then_some(self.config.card_wait);
        let reports = self.card_tx.clone();
        self.spawn_background(async move {
            let result = match call {
                CardWaitCall::Request(interaction) => {
                    card_waits::request(waits, *interaction, budget).await
                }
                CardWaitCall::Check(check) => card_waits::check(waits, check).await,
            };
            let _ = reports
                .send(CardDone {
                    id,
                    re,
                    result,
                    waiting,
                })
                .await;
        });
        None
    }

    /// A `runtime_card_reply` receipt from the stream (durable-endpoint.md §10.8).
    pub(super) fn card_receipt(&mut self, receipt: CardReceipt) {
        if self.client.is_none() {
            return;
        }
        let Ok(waits) = self.card_waits() else {
            tracing::debug!("card receipt with no card-wait store");
            return;
        };
        let wakes = self.card_wake_tx.clone();
        self.approval_tasks
            .spawn(card_waits::on_receipt(waits, receipt, wakes));
    }

    /// The wake scan of a new connection (durable-endpoint.md §10.8 step 8).
    pub(super) fn start_card_scan(&mut self) {
        let Ok(waits) = self.card_waits() else {
            return;
        };
        let wakes = self.card_wake_tx.clone();
        let interval = self.config.status_interval.clamp(
            crate::config::MIN_LOOP_INTERVAL,
            crate::config::MAX_LOOP_INTERVAL,
        );
        self.approval_tasks
            .spawn(card_waits::scan(waits, wakes, interval));
    }

    /// A finished card-wait call, as the session's input.
    pub(super) fn card_done(done: CardDone) -> SessionInput {
        SessionInput::CardWaitDone {
            id: done.id,
            re: done.re,
            result: done.result,
            waiting: done.waiting,
        }
    }

    /// The shim answered a card wake: one Hermes did not take is put back.
    pub(super) fn card_wake_answered(&mut self, wake: CardWake, delivered: bool) {
        if delivered {
            return;
        }
        let Ok(waits) = self.card_waits() else {
            return;
        };
        self.spawn_background(async move {
            card_waits::release(&waits, &wake).await;
        });
    }
}
