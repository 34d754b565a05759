//! Canon writes: the one in-order worker for best-effort writes (and the
//! replies that must queue behind them), the background disposition
//! retries, and a durable delivery sent call by call.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use canon_host::delivery;
use canon_host::turn::{Delivery, DeliveryFailure, Effect};
use canon_transport::{CanonClient, ClientConfig, DurableRequest, TransportError};
use canon_wire::types::{delivered_message_id, DurableCall, NoReplyRecord};
use tokio::sync::mpsc;

use crate::config::{DISPOSITION_RETRY_DELAYS, MAX_DISPOSITION_RETRIES, NO_REPLY_RECORD_BUDGET};
use crate::Config;

/// Work for the in-order worker.
pub(crate) enum Job {
    /// A best-effort Canon write.
    Write { client: CanonClient, effect: Effect },
    /// A response line to the shim, written only after every earlier write
    /// finished (the closing publish happens inside `turn.complete`).
    Respond {
        out: mpsc::Sender<String>,
        line: String,
    },
}

pub(crate) async fn run_jobs(mut rx: mpsc::Receiver<Job>) {
    let retrying = Arc::new(AtomicUsize::new(0));
    while let Some(job) = rx.recv().await {
        let (client, effect) = match job {
            Job::Write { client, effect } => (client, effect),
            Job::Respond { out, line } => {
                if out.send(line).await.is_err() {
                    tracing::debug!("stdout writer is gone; frame dropped");
                }
                continue;
            }
        };
        let (what, result) = match &effect {
            Effect::PublishTurn(update) => ("runtime turn", client.publish_turn(update).await),
            Effect::Streaming(update) => ("streaming", client.streaming(update).await),
            Effect::Typing(typing) => ("typing", client.set_typing(typing).await),
            Effect::MarkRead { conversation_id } => {
                ("read", client.mark_read(conversation_id).await)
            }
            Effect::AckDisposition {
                conversation_id,
                message_id,
            } => {
                let Err(error) = client.accept_disposition(conversation_id, message_id).await
                else {
                    continue;
                };
                // The retries sleep for up to 40 s; they run beside the
                // worker so later writes keep their pace and order.
                if retrying.fetch_add(1, Ordering::Relaxed) < MAX_DISPOSITION_RETRIES {
                    tracing::debug!(
                        conversation_id,
                        message_id,
                        %error,
                        "disposition release failed; retrying in the background"
                    );
                    let retrying = Arc::clone(&retrying);
                    let (conversation_id, message_id) =
                        (conversation_id.clone(), message_id.clone());
                    tokio::spawn(async move {
                        retry_disposition(&client, &conversation_id, &message_id).await;
                        retrying.fetch_sub(1, Ordering::Relaxed);
                    });
                } else {
                    retrying.fetch_sub(1, Ordering::Relaxed);
                    tracing::warn!(
                        conversation_id,
                        message_id,
                        %error,
                        "disposition release failed; too many retries pending"
                    );
                }
                continue;
            }
            Effect::RecordNoReply {
                conversation_id,
                message_id,
                reason_given,
            } => {
                let (envelope, value) = NoReplyRecord {
                    conversation_id: conversation_id.clone(),
                    message_id: message_id.clone(),
                    reason_given: *reason_given,
                }
                .envelope_and_value();
                let call = client.execute_verb("no_reply", envelope, value);
                match tokio::time::timeout(NO_REPLY_RECORD_BUDGET, call).await {
                    Ok(result) => ("no_reply record", result.map(drop)),
                    Err(_) => {
                        tracing::debug!("no_reply record exceeded its budget");
                        continue;
                    }
                }
            }
            _ => continue,
        };
        if let Err(error) = result {
            tracing::warn!(what, %error, "best-effort Canon write failed");
        }
    }
}

/// Re-sends a failed `accepted_now` release after each of
/// [`DISPOSITION_RETRY_DELAYS`], then gives up with a warning
/// (canon-wire.md §4.10; the PATCH is idempotent on the server).
pub(crate) async fn retry_disposition(
    client: &CanonClient,
    conversation_id: &str,
    message_id: &str,
) {
    let mut last = None;
    for (attempt, delay) in DISPOSITION_RETRY_DELAYS.iter().enumerate() {
        tokio::time::sleep(*delay).await;
        match client.accept_disposition(conversation_id, message_id).await {
            Ok(()) => {
                tracing::debug!(
                    conversation_id,
                    message_id,
                    attempt = attempt + 2,
                    "disposition released"
                );
                return;
            }
            Err(error) => last = Some(error),
        }
    }
    if let Some(error) = last {
        tracing::warn!(
            conversation_id,
            message_id,
            %error,
            "disposition release failed after every retry"
        );
    }
}

/// The Canon client of a configuration: its URLs, its key and, when set, its durable backoff.
/// The daemon builds its one client with it, and so does a standalone send.
pub(crate) fn client_for(config: &Config) -> Result<CanonClient, TransportError> {
    let mut client = ClientConfig::new(
        config.base_url.clone(),
        config.stream_url.clone(),
        config.api_key.clone(),
    );
    if let Some(backoff) = config.durable_backoff {
        client.durable_backoff = backoff;
    }
    CanonClient::new(client)
}

pub(crate) type DeliveryResult = Result<Option<String>, DeliveryFailure>;

/// Sends every part of a delivery in order; Canon's id of the last part.
pub(crate) async fn deliver(client: CanonClient, delivery: Delivery) -> DeliveryResult {
    let mut last = None;
    for call in delivery::durable_calls(&delivery) {
        let request = match &call {
            DurableCall::Message(message) => DurableRequest::message(message),
            DurableCall::SendTo(send) => {
                let (envelope, value) = send.envelope_and_value();
                DurableRequest::verb("send_to", envelope, value)
            }
        };
        let request = request.map_err(|error| failure(&error))?;
        let reply = client
            .send_durable(&request)
            .await
            .map_err(|error| failure(&error))?;
        last = delivered_message_id(&reply);
    }
    Ok(last)
}

/// The ledger's view of a transport failure (`canon_host::delivery`).
pub(crate) fn failure(error: &TransportError) -> DeliveryFailure {
    delivery::classify_failure(error.kind(), error.to_string(), error.is_retryable())
}
