//! The shell's background tasks and what they report: the HITL create and
//! poll task, the runtime-signal pass and doorbell consumes, the status
//! loop, conversation re-fetches, media and upload reports, and the timer
//! and parent-process helpers of the select loop.

use std::time::Duration;

use canon_host::hitl::table::HitlOutcome;
use canon_host::protocol::InboundMessage;
use canon_host::tools::{AfterCreate, ToolInteraction};
use canon_host::turn::RequestId;
use canon_transport::client::{PollErrors, PollOutcome};
use canon_transport::{CanonClient, TransportError};
use canon_wire::types::{
    ConsumeInteraction, InteractionCreated, InteractionRequest, RuntimeSignal,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Interval, MissedTickBehavior};

use crate::config::HITL_CREATE_BUDGET;

/// Waits for the next tick of an optional interval; never, without one.
pub(crate) async fn tick(interval: Option<&mut Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Whether a process with this id exists (`kill(pid, 0)`): only "no such
/// process" counts as gone; a process we may not signal still exists.
pub(crate) fn process_exists(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        // Not a pid a process can have: nothing to watch.
        return true;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// A finished outbound upload: the uploaded media, or the error's text.
pub(crate) struct Uploaded {
    pub(crate) request: RequestId,
    pub(crate) result: Result<canon_host::turn::MediaPayload, String>,
}

/// What a HITL task reports.
pub(crate) enum HitlEvent {
    /// The create call ended; the shim's request waits for this.
    Created {
        key: u64,
        shim_id: String,
        re: &'static str,
        /// The created interaction, or a safe error text and whether it is
        /// retryable.
        result: Result<InteractionCreated, (String, bool)>,
    },
    /// The interaction left `pending`, its deadline passed, or the driver
    /// cancelled it.
    Finished { key: u64, outcome: HitlOutcome },
}

/// A HITL task: creates the interaction, reports, then polls until it
/// leaves `pending`, its deadline passes (a cancel is sent) or `cancel`
/// fires (a cancel is sent too).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_hitl(
    client: CanonClient,
    key: u64,
    shim_id: String,
    re: &'static str,
    request: InteractionRequest,
    consume: ConsumeInteraction,
    tool: Option<Box<ToolInteraction>>,
    timeout: Duration,
    poll: Duration,
    mut cancel: oneshot::Receiver<()>,
    tx: mpsc::Sender<HitlEvent>,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    let result = match tokio::time::timeout(
        HITL_CREATE_BUDGET,
        client.request_interaction(&request),
    )
    .await
    {
        Ok(result) => result.map_err(|error| (error.to_string(), error.is_retryable())),
        Err(_) => Err((
            "Canon did not answer the runtime interaction request in time".to_owned(),
            false,
        )),
    };
    // A tool's interaction polls only when its action waits for the human, under the id Canon
    // returned (the same pure decision the session makes on this report); Hermes' blocking
    // flows always poll.
    let consume = match (&tool, &result) {
        (_, Err(_)) => None,
        (None, Ok(_)) => Some(consume),
        (Some(tool), Ok(created)) => match tool.after_create(Ok(created)) {
            AfterCreate::Wait(consume) => Some(consume),
            AfterCreate::Answer(_) => None,
        },
    };
    let errors = if tool.is_some() {
        PollErrors::RetryableAsPending
    } else {
        PollErrors::AsPending
    };
    let report = HitlEvent::Created {
        key,
        shim_id,
        re,
        result,
    };
    if tx.send(report).await.is_err() {
        return;
    }
    let Some(consume) = consume else {
        return;
    };
    let outcome = tokio::select! {
        polled = client.poll_interaction(&consume, deadline, poll, errors) => {
            match polled {
                Ok(PollOutcome::Answered(result)) => HitlOutcome::Answered(result),
                Ok(PollOutcome::TimedOut) => HitlOutcome::TimedOut,
                Err(error) => HitlOutcome::Failed(error.to_string()),
            }
        }
        _ = &mut cancel => {
            let cancel = ConsumeInteraction { cancel: true, ..consume };
            if let Err(error) = client.consume_interaction(&cancel).await {
                tracing::debug!(%error, "interaction cancel failed");
            }
            HitlOutcome::Cancelled
        }
    };
    let _ = tx.send(HitlEvent::Finished { key, outcome }).await;
}

/// A media task's finished `inbound.message`.
pub(crate) struct MediaDone {
    pub(crate) conversation_id: String,
    pub(crate) job: u64,
    pub(crate) message: Box<InboundMessage>,
    pub(crate) materialized: Option<Box<canon_host::inbound::Materialized>>,
}

/// Aborts a task when dropped (the media work task, if its reporter is
/// aborted at exit).
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The result of a `GET /conversations` re-fetch task.
pub(crate) struct Refetched {
    /// [`Driver::refetch_id`] when the task started.
    pub(crate) id: u64,
    pub(crate) result: Result<Vec<canon_wire::types::Conversation>, TransportError>,
}

/// The status loop (canon-wire.md §8.1 step 7): T10 every `every`, the
/// first one `every` after connect (connect publishes its own). A failure
/// is logged and the loop goes on; it ends when aborted.
pub(crate) async fn publish_status(client: CanonClient, every: Duration) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    // A publish slower than the interval delays the next one instead of
    // sending them back to back.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match client.publish_runtime_status().await {
            Ok(()) => tracing::trace!("runtime status published"),
            Err(error) => tracing::warn!(%error, "runtime status publish failed"),
        }
    }
}

/// A runtime signal a signal task consumed from Canon.
pub(crate) struct ConsumedSignal {
    pub(crate) conversation_id: String,
    pub(crate) signal: RuntimeSignal,
}

/// The signal pass: every conversation in `ids`, one after another, at once
/// and then every `every` (canon-wire.md §4.9, §8.1 step 7). Ends when the
/// loop stops listening.
pub(crate) async fn poll_signals(
    client: CanonClient,
    ids: watch::Receiver<Vec<String>>,
    every: Duration,
    tx: mpsc::Sender<ConsumedSignal>,
) {
    let mut ticker = tokio::time::interval(every);
    // A pass longer than the interval delays the next one instead of
    // starting passes back to back.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let pass = ids.borrow().clone();
        tracing::trace!(conversations = pass.len(), "signal pass");
        for conversation_id in pass {
            if !consume_signal(&client, conversation_id, &tx).await {
                return;
            }
        }
    }
}

/// Consumes the pending signal of one conversation and reports it; `false`
/// once nobody listens any more.
pub(crate) async fn consume_signal(
    client: &CanonClient,
    conversation_id: String,
    tx: &mpsc::Sender<ConsumedSignal>,
) -> bool {
    match client.consume_signal(&conversation_id).await {
        Ok(Some(signal)) => tx
            .send(ConsumedSignal {
                conversation_id,
                signal,
            })
            .await
            .is_ok(),
        Ok(None) => !tx.is_closed(),
        Err(error) => {
            tracing::debug!(conversation_id, %error, "signal consume failed");
            !tx.is_closed()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reaped_process_no_longer_exists() {
        assert!(process_exists(std::process::id()));
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("`true` runs");
        let pid = child.id();
        child.wait().expect("`true` exits and is reaped");
        assert!(!process_exists(pid));
        // Ids no process can have are not watched.
        assert!(process_exists(0));
        assert!(process_exists(u32::MAX));
    }
}
