//! Durable card waits' I/O (durable-endpoint.md §10): the card-wait store of
//! `canon-approvals` (one file per agent and API origin under `CANON_HOME`, always called off
//! the event loop) and the Canon calls around it. The flows:
//!
//! * [`request`]: reserve before creating (the same card again resumes its row instead of
//!   asking twice), create, then for `request_card` a bounded wait of consume attempts; an
//!   unanswered card comes back `pending` with the note that says how to resume it.
//! * [`check`]: `check_card` with a card id (one consume attempt, never a new card) or the list.
//! * [`on_receipt`] and [`scan`]: a `runtime_card_reply` receipt marks the row and wakes the
//!   session once (unless a tool is still waiting on it, which consumes the answer itself);
//!   the scan of each status tick retries wakes whose lease ran out.
//!
//! Only `submitted` from the designated human authorizes; an answer from anyone else fails
//! closed with the tool's exact errors (runtime-control.md §4.6 step 11).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use canon_approvals::card_waits::{
    CardWait, CardWaitStore, NewCardWait, Reserved, OTHER_CARD_RESPONDER, UNKNOWN_CARD,
};
use canon_host::card_waits::{CardCheck, CardReceipt, CardWake};
use canon_host::tools::{ToolInteraction, DIFFERENT_HUMAN, NO_RESPONDER_IDENTITY};
use canon_transport::{CanonClient, TransportError};
use canon_wire::types::{ConsumeInteraction, InteractionKind, InteractionRequest};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::env::{now_ms, random_u128};

/// durable-endpoint.md §10.5 step 3, exact.
pub(crate) const CREATE_TIMED_OUT: &str = "Card creation confirmation timed out. The original card may exist; use check_card to recover it, not a replacement or verbal permission.";

/// The statuses that prove Canon created nothing (durable-endpoint.md §10.5 step 3).
const REJECTED: [u16; 5] = [400, 401, 403, 404, 422];

/// How long a wait of budget 0 (one consume attempt) may take (durable-endpoint.md §10.6).
const ONE_ATTEMPT: Duration = Duration::from_secs(15);

/// Where the card waits of this daemon's agent live, and how to reach Canon.
#[derive(Clone)]
pub(crate) struct CardWaits {
    pub(crate) store: Arc<CardWaitStore>,
    pub(crate) client: CanonClient,
    /// Between consume attempts of a bounded wait.
    pub(crate) poll: Duration,
}

impl CardWaits {
    /// The card waits of `agent_id` at `base_url` under `home`, or the exact error.
    pub(crate) fn open(
        home: Option<&std::path::Path>,
        base_url: &str,
        agent_id: Option<&str>,
        client: CanonClient,
        poll: Duration,
    ) -> Result<Self, String> {
        let home: PathBuf = home
            .ok_or(canon_approvals::card_waits::NO_SCOPE)?
            .to_path_buf();
        let scope = canon_approvals::card_waits::scope(base_url, agent_id.unwrap_or(""))
            .map_err(str::to_owned)?;
        Ok(CardWaits {
            store: Arc::new(CardWaitStore::new(&home, &scope)),
            client,
            poll,
        })
    }

    async fn mutate<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut canon_approvals::card_waits::CardWaits) -> T + Send + 'static,
    ) -> Result<T, String> {
        let store = Arc::clone(&self.store);
        match tokio::task::spawn_blocking(move || store.mutate(now_ms(), f)).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err("the card-wait store call did not finish".to_owned()),
        }
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&canon_approvals::card_waits::CardWaits) -> T + Send + 'static,
    ) -> Result<T, String> {
        let store = Arc::clone(&self.store);
        match tokio::task::spawn_blocking(move || store.read(f)).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err("the card-wait store call did not finish".to_owned()),
        }
    }
}

fn token() -> String {
    format!("{:032x}", random_u128())
}

fn is_timeout(error: &TransportError) -> bool {
    matches!(
        error,
        TransportError::ReadTimeout { .. } | TransportError::ConnectTimeout { .. }
    )
}

/// `request_card` / `send_card` of an interactive card (durable-endpoint.md §10.5); `budget`
/// is the bounded wait (zero: `send_card`, no wait at all).
pub(crate) async fn request(
    waits: CardWaits,
    interaction: ToolInteraction,
    budget: Option<Duration>,
) -> Result<Value, String> {
    let InteractionRequest::Card(mut card) = interaction.request else {
        return Err("not a card".to_owned());
    };
    let (new_id, lease, now) = (format!("hermes-card-{}", token()), token(), now_ms());
    let reserve_card = card.clone();
    let reserve_lease = lease.clone();
    let reserved = waits
        .mutate(move |w| {
            w.reserve(
                &NewCardWait {
                    conversation_id: &reserve_card.conversation_id,
                    card_id: reserve_card.card_id.as_deref(),
                    card: &reserve_card.card,
                    responder: reserve_card.response_user_id.as_deref(),
                    expires_at: reserve_card.expires_at.unwrap_or(now),
                },
                &new_id,
                &reserve_lease,
                now,
            )
        })
        .await?
        .map_err(str::to_owned)?;
    let row = match reserved {
        Reserved::Existing(row) if !row.status.is_active() => return Ok(row.result()),
        Reserved::Existing(row) => {
            // Asked before: resume it, never a second card.
            return match budget {
                Some(budget) => wait(&waits, &row, budget).await,
                None => consume_once(&waits, &row).await,
            };
        }
        Reserved::New(row) => row,
    };
    card.card_id = Some(row.card_id.clone());
    let created = match waits
        .client
        .request_interaction(&InteractionRequest::Card(card.clone()))
        .await
    {
        Ok(created) => created,
        Err(error) => {
            if error.status().is_some_and(|s| REJECTED.contains(&s)) {
                let (conversation, id) = (row.conversation_id.clone(), row.card_id.clone());
                let _ = waits
                    .mutate(move |w| w.creation_rejected(&conversation, &id, &lease))
                    .await;
                return Err(error.to_string());
            }
            if is_timeout(&error) {
                let mut result = row.result();
                result["note"] = CREATE_TIMED_OUT.into();
                return Ok(result);
            }
            // The create may have landed: the reservation stays for check_card.
            return Err(error.to_string());
        }
    };
    let (conversation, id) = (row.conversation_id.clone(), row.card_id.clone());
    let echoed_responder = created.response_user_id.clone();
    let echoed_card = created.card_id.clone();
    let echoed_expiry = created.expires_at.and_then(|e| u64::try_from(e).ok());
    let row = waits
        .mutate(move |w| {
            w.created(
                &conversation,
                &id,
                echoed_responder.as_deref(),
                echoed_card.as_deref(),
                echoed_expiry,
            )
        })
        .await?
        .map_err(str::to_owned)?;
    match budget {
        None => {
            let mut result = row.result();
            let request = created
                .raw
                .get("request")
                .cloned()
                .unwrap_or_else(|| InteractionRequest::Card(card).to_body());
            result["request"] = request;
            Ok(result)
        }
        Some(budget) => wait(&waits, &row, budget).await,
    }
}

/// The bounded wait (durable-endpoint.md §10.6): consume attempts every poll until the card is
/// no longer pending or the budget is spent; the card's own expiry is not a deadline (only
/// Canon knows whether the human answered in time), and giving up never cancels the card.
async fn wait(waits: &CardWaits, row: &CardWait, budget: Duration) -> Result<Value, String> {
    let (conversation, id) = (row.conversation_id.clone(), row.card_id.clone());
    let budget_ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX);
    waits
        .mutate(move |w| w.begin_wait(&conversation, &id, budget_ms, now_ms()))
        .await?;
    let start = Instant::now();
    let outcome = loop {
        let result = consume_once(waits, row).await;
        let pending = matches!(&result, Ok(r) if r["status"] == "pending");
        if !pending || start.elapsed() >= budget {
            break result;
        }
        tokio::time::sleep(waits.poll.min(budget.saturating_sub(start.elapsed()))).await;
    };
    let (conversation, id) = (row.conversation_id.clone(), row.card_id.clone());
    let _ = waits.mutate(move |w| w.end_wait(&conversation, &id)).await;
    outcome
}

/// One consume attempt (durable-endpoint.md §10.6 consume-once).
async fn consume_once(waits: &CardWaits, row: &CardWait) -> Result<Value, String> {
    let attempt = async {
        let (conversation, id) = (row.conversation_id.clone(), row.card_id.clone());
        let lease = token();
        let claim_lease = lease.clone();
        let claimed = waits
            .mutate(move |w| {
                match w.get(&conversation, &id) {
                    Some(r) if !r.status.is_active() => return Err(r.result()),
                    None => return Err(Value::Null),
                    _ => {}
                }
                w.claim(&conversation, &id, &claim_lease, now_ms())
                    .ok_or_else(|| {
                        w.get(&conversation, &id)
                            .map(CardWait::result)
                            .unwrap_or(Value::Null)
                    })
            })
            .await?;
        let row = match claimed {
            Ok(row) => row,
            Err(Value::Null) => return Err(UNKNOWN_CARD.to_owned()),
            Err(result) => return Ok(result),
        };
        let consume = ConsumeInteraction {
            kind: InteractionKind::Card,
            conversation_id: row.conversation_id.clone(),
            id: row.card_id.clone(),
            cancel: false,
        };
        let answer = match waits.client.consume_interaction(&consume).await {
            Ok(answer) => answer,
            Err(error) if is_timeout(&error) => return Ok(row.result()),
            Err(error) => {
                let settled = if error.status() == Some(404) {
                    "unknown"
                } else if error.status().is_some() {
                    "pending"
                } else {
                    // Cancellation or a broken connection: the lease runs out by itself.
                    return Err(error.to_string());
                };
                let finished = finish(waits, &row, &lease, settled).await?;
                return if settled == "unknown" {
                    Ok(finished.result())
                } else {
                    Err(error.to_string())
                };
            }
        };
        let status = if answer.status.is_empty() {
            "unknown".to_owned()
        } else {
            answer.status.clone()
        };
        if status == "submitted" {
            if let Some(expected) = &row.response_user_id {
                let refused = match answer.responded_by.as_deref() {
                    None => Some(NO_RESPONDER_IDENTITY),
                    Some(by) if by != expected => Some(DIFFERENT_HUMAN),
                    Some(_) => None,
                };
                if let Some(refused) = refused {
                    finish(waits, &row, &lease, "unknown").await?;
                    return Err(refused.to_owned());
                }
            }
        }
        let finished = finish(waits, &row, &lease, &status).await?;
        let mut result = finished.result();
        if let Value::Object(fields) = &mut result {
            fields.insert("status".into(), status.clone().into());
            if status != "pending" {
                fields.remove("note");
            }
            merge(fields, answer.raw);
        }
        Ok(result)
    };
    match tokio::time::timeout(ONE_ATTEMPT, attempt).await {
        Ok(result) => result,
        Err(_) => Ok(row.result()),
    }
}

fn merge(into: &mut Map<String, Value>, answer: Map<String, Value>) {
    for (key, value) in answer {
        if !matches!(key.as_str(), "conversationId" | "cardId" | "status") {
            into.insert(key, value);
        }
    }
}

async fn finish(
    waits: &CardWaits,
    row: &CardWait,
    lease: &str,
    status: &str,
) -> Result<CardWait, String> {
    let (conversation, id, lease, status) = (
        row.conversation_id.clone(),
        row.card_id.clone(),
        lease.to_owned(),
        status.to_owned(),
    );
    let (c2, i2) = (conversation.clone(), id.clone());
    waits
        .mutate(move |w| {
            w.finish(&conversation, &id, &lease, &status)
                .or_else(|| w.get(&c2, &i2).cloned())
        })
        .await?
        .ok_or_else(|| UNKNOWN_CARD.to_owned())
}

/// `check_card` (durable-endpoint.md §10.6).
pub(crate) async fn check(waits: CardWaits, check: CardCheck) -> Result<Value, String> {
    let Some(card_id) = check.card_id.clone() else {
        let (conversation, user) = (check.conversation_id.clone(), check.user_id.clone());
        let cards = waits
            .read(move |w| w.listed(&conversation, user.as_deref()))
            .await?;
        let mut out = Map::new();
        out.insert("status".into(), "listed".into());
        out.insert("conversationId".into(), check.conversation_id.into());
        out.insert(
            "cards".into(),
            Value::Array(cards.iter().map(CardWait::result).collect()),
        );
        return Ok(Value::Object(out));
    };
    let conversation = check.conversation_id.clone();
    let row = waits
        .read(move |w| w.get(&conversation, &card_id).cloned())
        .await?
        .ok_or_else(|| UNKNOWN_CARD.to_owned())?;
    if let (Some(expected), Some(user)) = (&row.response_user_id, &check.user_id) {
        if expected != user {
            return Err(OTHER_CARD_RESPONDER.to_owned());
        }
    }
    if !row.status.is_active() {
        return Ok(row.result());
    }
    consume_once(&waits, &row).await
}

/// A `runtime_card_reply` receipt (durable-endpoint.md §10.8 steps 1–2): an active row is
/// marked, then its wake claimed unless a tool is waiting on the card.
pub(crate) async fn on_receipt(
    waits: CardWaits,
    receipt: CardReceipt,
    wakes: mpsc::Sender<CardWake>,
) {
    let (conversation, card) = (receipt.conversation_id.clone(), receipt.card_id.clone());
    match waits
        .mutate(move |w| w.record_receipt(&conversation, &card).is_some())
        .await
    {
        Ok(true) => wake(&waits, &receipt.conversation_id, &receipt.card_id, &wakes).await,
        Ok(false) => {}
        Err(error) => tracing::warn!(
            card_id = receipt.card_id,
            error,
            "card receipt not recorded"
        ),
    }
}

/// Claims and hands over one card's wake.
async fn wake(waits: &CardWaits, conversation: &str, card: &str, wakes: &mpsc::Sender<CardWake>) {
    let lease = token();
    let (c, k, l) = (conversation.to_owned(), card.to_owned(), lease.clone());
    let claimed = match waits
        .mutate(move |w| w.claim_wake(&c, &k, &l, now_ms()))
        .await
    {
        Ok(Some(row)) => row,
        Ok(None) => return,
        Err(error) => {
            tracing::warn!(card_id = card, error, "card wake not claimed");
            return;
        }
    };
    let wake = CardWake {
        conversation_id: claimed.conversation_id,
        card_id: claimed.card_id,
        user_id: claimed.response_user_id,
        lease,
    };
    if let Err(mpsc::error::SendError(wake)) = wakes.send(wake).await {
        release(waits, &wake).await;
    }
}

/// Puts back a wake Hermes did not take (durable-endpoint.md §10.8 step 7).
pub(crate) async fn release(waits: &CardWaits, wake: &CardWake) {
    let (c, k, l) = (
        wake.conversation_id.clone(),
        wake.card_id.clone(),
        wake.lease.clone(),
    );
    if let Err(error) = waits.mutate(move |w| w.release_wake(&c, &k, &l)).await {
        tracing::warn!(card_id = wake.card_id, error, "card wake not released");
    }
}

/// Every `interval`, the wakes due again (durable-endpoint.md §10.8 step 8).
pub(crate) async fn scan(waits: CardWaits, wakes: mpsc::Sender<CardWake>, interval: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let due = match waits.read(|w| w.due_wakes(now_ms())).await {
            Ok(due) => due,
            Err(error) => {
                tracing::warn!(error, "card wake scan skipped");
                continue;
            }
        };
        for (conversation, card) in due {
            wake(&waits, &conversation, &card, &wakes).await;
        }
    }
}
