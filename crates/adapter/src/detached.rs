//! Detached approvals' I/O (approvals.md §9–§14): the durable registry (`canon-approvals`, a
//! file under `CANON_HOME`, always called off the event loop) and the Canon calls around it.
//! Every decision — normalization, failure classes, the legacy retry, leases, result mapping,
//! recovery steps, the wake text — is `canon-approvals`'; this module only runs them in order:
//!
//! * [`request`]: reserve durably, create on Canon (once more with a 30-minute deadline after a
//!   definitive rejection of a longer one), activate with what Canon echoed.
//! * [`check`]: the cached result, or a consume under the single-consumer lease.
//! * [`on_receipt`]: an `approval_reply` receipt marks the entry, consumes it and wakes it.
//! * [`approvals_loop`]: the reconcile at connect (which also recovers what a predecessor left
//!   leased), then the periodic scan that hands flagged entries to [`recover`].
//!
//! A claimed wake goes to the select loop as a [`Report::Wake`]; the session hands it to Hermes
//! and the loop finishes the lease with the shim's answer ([`finish_wake`]). A registry error
//! never lets a decision through: the call fails with the registry's message (which never
//! holds an approval's summary).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use canon_approvals::request::{self as ask, CreateFailure};
use canon_approvals::state::Activation;
use canon_approvals::state::{
    recovery_action, CheckResult, ConsumeClaim, ConsumeFinish, NewApproval, ReconcileTracker,
    RecoveryAction, ServerOutcome, WakeJob, RECOVERY_BACKOFF_START_MS,
};
use canon_approvals::store::{random_approval_id, Lookup, Store};
use canon_host::detached::{
    ApprovalAsk, ApprovalCheck, ApprovalReceipt, ApprovalWake, WRONG_CONVERSATION,
};
use canon_transport::CanonClient;
use canon_wire::types::{
    ApprovalDetail, ApprovalRequest, ConsumeInteraction, InteractionKind, InteractionRequest,
};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::env::now_ms;

/// What an approvals task reports to the select loop.
pub(crate) enum Report {
    /// A tool or helper call finished.
    Done {
        id: String,
        re: &'static str,
        api: bool,
        result: Result<Value, String>,
    },
    /// A wake was claimed: hand it to Hermes, then finish it.
    Wake {
        job: WakeJob,
        receipt: Option<Box<ApprovalReceipt>>,
    },
}

/// The error of a call made while no Canon home holds a registry.
pub(crate) const NO_REGISTRY: &str =
    "Detached approvals need a Canon home (CANON_HOME) to keep them in; none is configured";

/// How long the reconcile loop waits when a lease changed between two looks
/// (approvals.md §14.1 f).
const SETTLE_PAUSE: Duration = Duration::from_millis(50);

/// The approval ids a recovery task runs for (approvals.md §14.2: one per id), cleared when
/// the connection stops.
#[derive(Clone, Default)]
pub(crate) struct RecoverySet(Arc<Mutex<HashSet<String>>>);

impl RecoverySet {
    fn enter(&self, id: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_owned())
    }

    fn leave(&self, id: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }

    pub(crate) fn clear(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Runs a registry call on the blocking pool (it locks a file and fsyncs).
async fn registry<T, F>(store: &Arc<Store>, f: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce(&Store) -> Result<T, canon_approvals::error::RegistryError> + Send + 'static,
{
    let store = Arc::clone(store);
    match tokio::task::spawn_blocking(move || f(&store)).await {
        Ok(result) => result.map_err(|error| error.to_string()),
        Err(_) => Err("the detached-approval registry call did not finish".to_owned()),
    }
}

/// The detail rows of the create body (approvals.md §9.1).
fn details(ask_: &ApprovalAsk) -> Option<Vec<ApprovalDetail>> {
    let rows = ask::detail_rows(ask_.context.as_ref(), ask_.options.as_ref());
    (!rows.is_empty()).then(|| {
        rows.into_iter()
            .map(|row| ApprovalDetail {
                label: row.label,
                value: row.value,
                monospace: None,
            })
            .collect()
    })
}

/// `request_approval` and `request_detached_approval_for_current_human` (approvals.md §9).
pub(crate) async fn request(
    store: Arc<Store>,
    client: CanonClient,
    call: ApprovalAsk,
) -> Result<Value, String> {
    let summary = ask::summary(call.question.as_ref(), call.title.as_ref())
        .ok_or_else(|| ask::MISSING_SUMMARY_MESSAGE.to_owned())?;
    let timeout_s = ask::clamp_timeout_seconds(call.timeout_seconds.as_ref());
    let now = now_ms();
    let approval_id = random_approval_id().map_err(|e| e.to_string())?;
    let id = approval_id.as_str().to_owned();
    let new = NewApproval::new(
        approval_id,
        &call.conversation_id,
        ask::requested_expires_at_ms(now, timeout_s),
        Some(&summary),
        call.responder.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    // Nothing goes to Canon before the reservation is on disk (approvals.md §9.2).
    let reservation = registry(&store, move |s| s.create_begin(&new, now)).await?;
    crate::faults::crash_point("create.reserved");
    let claim = reservation.create_claim.clone();
    let mut body = ApprovalRequest {
        conversation_id: call.conversation_id.clone(),
        approval_id: id.clone(),
        tool_name: ask::tool_name(call.title.as_ref()),
        tool_summary: ask::tool_summary(&summary),
        expires_at: ask::requested_expires_at_ms(now, timeout_s),
        allow_session_rule: false,
        response_user_id: call.responder.clone(),
        details: details(&call),
        native: Some(
            json!({"runtime": "hermes", "method": "detached_approval", "requestId": id})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        ),
    };
    let mut first_attempt = true;
    let created = loop {
        match client
            .request_interaction(&InteractionRequest::Approval(body.clone()))
            .await
        {
            Ok(created) => break created,
            Err(error) => {
                let status = error.status();
                let class = CreateFailure::classify(status);
                if let Some(retry_at) =
                    ask::legacy_cap_retry(class, first_attempt, timeout_s, now_ms())
                {
                    tracing::info!(
                        approval_id = id,
                        status,
                        "approval create rejected; retrying once with a 30-minute deadline"
                    );
                    first_attempt = false;
                    body.expires_at = retry_at;
                    continue;
                }
                if let (CreateFailure::Definitive, Some(status)) = (class, status) {
                    let (rid, rclaim) = (id.clone(), claim.clone());
                    let reason = ask::rejected_reason(status);
                    if let Err(e) = registry(&store, move |s| {
                        s.create_fail(&rid, &rclaim, Some(&reason), now_ms())
                    })
                    .await
                    {
                        tracing::warn!(
                            approval_id = id,
                            error = e,
                            "could not close a rejected approval"
                        );
                    }
                }
                // An ambiguous failure leaves the entry `creating`: recovery consumes it once
                // its lease ends (approvals.md §9.3).
                return Err(error.to_string());
            }
        }
    };
    crate::faults::crash_point("create.sent");
    let echoed_expiry = created
        .raw
        .get("expiresAt")
        .and_then(Value::as_number)
        .cloned();
    let responder =
        ask::effective_responder(created.raw.get("responseUserId"), call.responder.as_deref())
            .map(str::to_owned);
    let (aid, aclaim) = (id.clone(), claim);
    let activation = registry(&store, move |s| {
        s.create_commit(
            &aid,
            &aclaim,
            echoed_expiry.as_ref(),
            responder.as_deref(),
            now_ms(),
        )
    })
    .await?;
    let entry = match activation {
        Activation::Activated(entry) => entry,
        other => {
            return Err(other
                .error_message(&id)
                .unwrap_or_else(|| "Canon approval creation could not be activated safely".into()))
        }
    };
    let result = ask::requested_result(&entry);
    if call.strict_responder {
        let echoed = result.get("responseUserId").and_then(Value::as_str);
        if echoed.is_some_and(|r| Some(r) != call.responder.as_deref()) {
            return Err(canon_host::tools::OTHER_RESPONDER.to_owned());
        }
    }
    Ok(result)
}

/// `check_approval` and `check_detached_approval` (approvals.md §11): a missing or settled
/// entry is answered from the registry with no Canon call, a token from another conversation
/// is refused before any lease or write, a live one is consumed.
pub(crate) async fn check(
    store: Arc<Store>,
    client: Option<CanonClient>,
    call: ApprovalCheck,
) -> Result<Value, String> {
    let (id, bound) = (call.approval_id.clone(), call.bound_conversation.clone());
    let lookup = registry(&store, move |s| s.check(&id, bound.as_deref())).await?;
    match lookup {
        Lookup::Missing(result) | Lookup::Settled(result) => Ok(result.to_json()),
        Lookup::WrongConversation => Err(WRONG_CONVERSATION.to_owned()),
        Lookup::Live(_) => {
            let client = client.ok_or_else(|| canon_host::tools::NO_CREDENTIALS.to_owned())?;
            consume(
                &store,
                &client,
                &call.approval_id,
                call.bound_conversation.as_deref(),
                false,
            )
            .await
            .map(|result| result.to_json())
        }
    }
}

/// The one consume of approvals.md §10: claim, `POST /runtime-interaction/consume` with the
/// registry's conversation, record what the server said.
async fn consume(
    store: &Arc<Store>,
    client: &CanonClient,
    approval_id: &str,
    bound: Option<&str>,
    wake_required: bool,
) -> Result<CheckResult, String> {
    let (id, bound) = (approval_id.to_owned(), bound.map(str::to_owned));
    let claim = registry(store, move |s| {
        s.consume_begin(&id, bound.as_deref(), now_ms())
    })
    .await?;
    let lease = match claim {
        ConsumeClaim::Missing(result)
        | ConsumeClaim::Settled(result)
        | ConsumeClaim::Busy(result) => return Ok(result),
        ConsumeClaim::WrongConversation => return Err(WRONG_CONVERSATION.to_owned()),
        ConsumeClaim::Claimed(lease) => lease,
    };
    crate::faults::crash_point("consume.claimed");
    let request = ConsumeInteraction {
        kind: InteractionKind::Approval,
        conversation_id: lease.conversation_id.clone(),
        id: lease.approval_id.clone(),
        cancel: false,
    };
    let (outcome, failure) = match client.consume_interaction(&request).await {
        Ok(answer) => (
            ServerOutcome::from_response(&Value::Object(answer.raw)),
            None,
        ),
        Err(error) if matches!(error.status(), Some(404 | 409)) => (ServerOutcome::Gone, None),
        Err(error) => (ServerOutcome::Failed, Some(error.to_string())),
    };
    crate::faults::crash_point("consume.answered");
    let finish = registry(store, move |s| {
        s.consume_finish(&lease, &outcome, wake_required, now_ms())
    })
    .await?;
    match finish {
        ConsumeFinish::Recorded(result) | ConsumeFinish::LeaseLost(result) => Ok(result),
        ConsumeFinish::Deferred => {
            Err(failure.unwrap_or_else(|| "Canon approval consume failed".to_owned()))
        }
    }
}

/// Claims the wake of a resolved entry and hands it to the select loop (approvals.md §13
/// steps 1–2); nothing when there is nothing to deliver or a live lease holds it.
async fn deliver_wake(
    store: &Arc<Store>,
    approval_id: &str,
    receipt: Option<&ApprovalReceipt>,
    reports: &mpsc::Sender<Report>,
) {
    let id = approval_id.to_owned();
    let job = match registry(store, move |s| s.wake_claim(&id, now_ms())).await {
        Ok(Some(job)) => job,
        Ok(None) => return,
        Err(error) => {
            tracing::warn!(approval_id, error, "could not claim an approval wake");
            return;
        }
    };
    crate::faults::crash_point("wake.claimed");
    let report = Report::Wake {
        job,
        receipt: receipt.cloned().map(Box::new),
    };
    if let Err(mpsc::error::SendError(Report::Wake { job, .. })) = reports.send(report).await {
        // The loop is gone (exit): put the wake back for the next start.
        finish_wake(store, job, false).await;
    }
}

/// `finish_wake` after the shim's answer (approvals.md §13 step 5).
pub(crate) async fn finish_wake(store: &Arc<Store>, job: WakeJob, delivered: bool) {
    let approval_id = job.approval_id.clone();
    match registry(store, move |s| s.wake_finish(&job, delivered, now_ms())).await {
        Ok(true) => tracing::info!(approval_id, delivered, "approval wake finished"),
        Ok(false) => tracing::warn!(
            approval_id,
            "approval wake lease was lost before it finished"
        ),
        Err(error) => tracing::warn!(approval_id, error, "could not finish an approval wake"),
    }
}

/// What the session hands to Hermes for a claimed wake (approvals.md §13 step 4).
pub(crate) fn wake_event(job: &WakeJob, receipt: Option<&ApprovalReceipt>) -> ApprovalWake {
    let user_id = job
        .responded_by
        .clone()
        .or_else(|| receipt.and_then(|r| r.sender_id.clone()))
        .unwrap_or_else(|| "canon-approval".to_owned());
    let user_name = receipt
        .and_then(|r| r.sender_name.clone())
        .unwrap_or_else(|| "Canon".to_owned());
    let raw = match receipt {
        Some(receipt) => receipt.payload.clone(),
        None => {
            let mut raw = Map::new();
            raw.insert("conversationId".into(), job.conversation_id.clone().into());
            raw.insert(
                "canonDetachedApproval".into(),
                json!({"approvalId": job.approval_id, "decision": job.decision.as_str()}),
            );
            Value::Object(raw)
        }
    };
    ApprovalWake {
        approval_id: job.approval_id.clone(),
        conversation_id: job.conversation_id.clone(),
        text: job.text.clone(),
        user_id,
        user_name,
        raw,
    }
}

/// An `approval_reply` receipt (approvals.md §12 steps 2–7): marked on the entry first, so a
/// receipt that races the creator's activation is kept and resumed by recovery.
pub(crate) async fn on_receipt(
    store: Arc<Store>,
    client: CanonClient,
    receipt: ApprovalReceipt,
    reports: mpsc::Sender<Report>,
    recovery: RecoverySet,
) {
    let id = receipt.approval_id.clone();
    let entry = match registry(&store, move |s| s.receipt(&id, now_ms())).await {
        Ok(Some(entry)) => entry,
        Ok(None) => return,
        Err(error) => {
            tracing::warn!(
                approval_id = receipt.approval_id,
                error,
                "approval receipt not recorded"
            );
            return;
        }
    };
    use canon_approvals::state::{Status, WakeStatus};
    match (entry.status(), entry.wake_status()) {
        (Status::Creating, _) => {
            recover(
                store,
                client,
                receipt.approval_id.clone(),
                reports,
                recovery,
            )
            .await;
        }
        (Status::Resolved, Some(WakeStatus::Pending)) => {
            deliver_wake(&store, &receipt.approval_id, Some(&receipt), &reports).await;
        }
        (Status::Pending | Status::Consuming, _) => {
            match consume(&store, &client, &receipt.approval_id, None, true).await {
                Ok(result) if result.to_json()["status"] == "resolved" => {
                    deliver_wake(&store, &receipt.approval_id, Some(&receipt), &reports).await;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(
                        approval_id = receipt.approval_id,
                        error,
                        "approval receipt consume failed"
                    );
                }
            }
        }
        _ => {}
    }
}

/// The receipt-recovery task of one approval (approvals.md §14.2, with the periodic retry of an
/// undelivered wake of approvals.md §14.3): at most one per id at a time.
pub(crate) async fn recover(
    store: Arc<Store>,
    client: CanonClient,
    approval_id: String,
    reports: mpsc::Sender<Report>,
    recovery: RecoverySet,
) {
    if !recovery.enter(&approval_id) {
        return;
    }
    let mut backoff = RECOVERY_BACKOFF_START_MS;
    loop {
        let id = approval_id.clone();
        let entry = match registry(&store, move |s| s.get(&id)).await {
            Ok(entry) => entry,
            Err(error) => {
                tracing::warn!(approval_id, error, "approval recovery stopped");
                break;
            }
        };
        match recovery_action(entry.as_ref(), backoff, now_ms()) {
            RecoveryAction::Stop => break,
            RecoveryAction::Wait { delay_ms } => {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                backoff = canon_approvals::state::next_recovery_backoff(backoff);
            }
            RecoveryAction::DeliverWake => {
                deliver_wake(&store, &approval_id, None, &reports).await;
                break;
            }
            RecoveryAction::Consume => {
                match consume(&store, &client, &approval_id, None, true).await {
                    Ok(result) if result.to_json()["status"] == "resolved" => {
                        deliver_wake(&store, &approval_id, None, &reports).await;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(approval_id, error, "approval recovery consume failed")
                    }
                }
                break;
            }
        }
    }
    recovery.leave(&approval_id);
}

/// The approvals work of one connection: the reconcile of approvals.md §14.1 (every live entry
/// consumed once, every undelivered wake delivered, leases a predecessor left waited out) and,
/// beside it, every `scan_interval` from the connect, the periodic scan of approvals.md §14.3.
/// The two run side by side, as in the reference (the scan rides its status loop, not the
/// reconcile task): the reconcile sleeps until every lease in the registry has expired, this
/// daemon's own ones included (a wake lease holds 60 s), so a scan that waited for it missed a
/// wake Hermes refused meanwhile for as long. A registry that cannot be read ends the reconcile
/// (it fails closed) but not the scan, which logs and tries again.
pub(crate) async fn approvals_loop(
    store: Arc<Store>,
    client: CanonClient,
    reports: mpsc::Sender<Report>,
    recovery: RecoverySet,
    scan_interval: Duration,
) {
    tokio::join!(
        reconcile(&store, &client, &reports),
        scan(&store, &client, &reports, &recovery, scan_interval)
    );
}

/// The periodic scan of approvals.md §14.3: every `scan_interval`, a receipt-recovery task for
/// each candidate (at most one per id runs, `RecoverySet`). Never ends.
async fn scan(
    store: &Arc<Store>,
    client: &CanonClient,
    reports: &mpsc::Sender<Report>,
    recovery: &RecoverySet,
    scan_interval: Duration,
) {
    let mut scan =
        tokio::time::interval_at(tokio::time::Instant::now() + scan_interval, scan_interval);
    scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        scan.tick().await;
        let ids = match registry(store, |s| s.recovery_candidates(now_ms())).await {
            Ok(ids) => ids,
            Err(error) => {
                tracing::warn!(error, "approval scan skipped");
                continue;
            }
        };
        for id in ids {
            tokio::spawn(recover(
                Arc::clone(store),
                client.clone(),
                id,
                reports.clone(),
                recovery.clone(),
            ));
        }
    }
}

async fn reconcile(store: &Arc<Store>, client: &CanonClient, reports: &mpsc::Sender<Report>) {
    let mut tracker: Option<ReconcileTracker> = None;
    loop {
        let pass = match registry(store, |s| s.reconcile_pass(now_ms())).await {
            Ok(pass) => pass,
            Err(error) => {
                tracing::error!(
                    error,
                    "approval reconcile stopped: the registry cannot be read"
                );
                return;
            }
        };
        let tracker = tracker.get_or_insert_with(|| ReconcileTracker::new(&pass.registry));
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for id in &pass.consume {
            let status = match consume(store, client, id, None, true).await {
                Ok(result) => result.to_json()["status"]
                    .as_str()
                    .unwrap_or("unknown")
                    .to_owned(),
                Err(_) => "error".to_owned(),
            };
            *counts.entry(status).or_default() += 1;
        }
        if !counts.is_empty() {
            tracing::info!(?counts, "approval reconcile pass");
        }
        let wakes = match registry(store, |s| s.pending_wakes()).await {
            Ok(wakes) => wakes,
            Err(_) => pass.wakes,
        };
        for id in wakes {
            deliver_wake(store, &id, None, reports).await;
        }
        let after = match registry(store, |s| s.snapshot()).await {
            Ok(registry) => registry,
            Err(error) => {
                tracing::error!(
                    error,
                    "approval reconcile stopped: the registry cannot be read"
                );
                return;
            }
        };
        if tracker.observe(&after) {
            continue;
        }
        match registry(store, |s| s.next_lease_retry_delay(now_ms())).await {
            Ok(Some(delay)) => {
                tokio::time::sleep(delay).await;
                continue;
            }
            Ok(None) => {}
            Err(_) => return,
        }
        if tracker.is_settled() {
            return;
        }
        tokio::time::sleep(SETTLE_PAUSE).await;
    }
}
