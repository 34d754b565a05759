//! The detached-approval effects of the session (approvals.md §9–§14) and the reports of the
//! approvals tasks (`crate::detached`): tool and helper calls run as background tasks that
//! finish even during shutdown; receipt handling, the reconcile and the periodic scan belong
//! to the connection and stop with it; a claimed wake is kept here until the shim answers it.

use super::*;
use crate::detached::{self, Report};
use canon_host::detached::{ApprovalReceipt, DetachedCall};

impl Driver {
    /// Runs a detached-approval call; its result comes back as a [`Report::Done`].
    pub(super) fn run_detached(
        &mut self,
        id: String,
        re: &'static str,
        api: bool,
        call: DetachedCall,
    ) -> Option<SessionInput> {
        let Some(store) = self.approvals.clone() else {
            return Some(SessionInput::DetachedDone {
                id,
                re,
                api,
                result: Err(detached::NO_REGISTRY.to_owned()),
            });
        };
        let client = self.client().ok();
        let reports = self.approval_tx.clone();
        self.spawn_background(async move {
            let result = match call {
                DetachedCall::Request(ask) => match client {
                    Some(client) => detached::request(store, client, *ask).await,
                    None => Err(canon_host::tools::NO_CREDENTIALS.to_owned()),
                },
                DetachedCall::Check(check) => detached::check(store, client, check).await,
            };
            let _ = reports
                .send(Report::Done {
                    id,
                    re,
                    api,
                    result,
                })
                .await;
        });
        None
    }

    /// An `approval_reply` receipt from the stream (approvals.md §12).
    pub(super) fn approval_receipt(&mut self, receipt: ApprovalReceipt) {
        let (Some(store), Some(client)) = (self.approvals.clone(), self.client.clone()) else {
            tracing::debug!(
                "approval receipt with no registry or connection; the scan picks it up"
            );
            return;
        };
        while self.approval_tasks.try_join_next().is_some() {}
        self.approval_tasks.spawn(detached::on_receipt(
            store,
            client,
            receipt,
            self.approval_tx.clone(),
            self.recovery.clone(),
        ));
    }

    /// The reconcile and the periodic scan of a new connection (approvals.md §14.1, §14.3).
    pub(super) fn start_approvals(&mut self, client: CanonClient) {
        let Some(store) = self.approvals.clone() else {
            return;
        };
        self.approval_tasks.spawn(detached::approvals_loop(
            store,
            client,
            self.approval_tx.clone(),
            self.recovery.clone(),
            self.config.status_interval.clamp(
                crate::config::MIN_LOOP_INTERVAL,
                crate::config::MAX_LOOP_INTERVAL,
            ),
        ));
    }

    /// Stops the connection's approvals tasks.
    pub(super) fn stop_approvals(&mut self) {
        self.approval_tasks.abort_all();
        self.approval_tasks.detach_all();
        self.recovery.clear();
    }

    /// A report of an approvals task, as the session's input; `None` when nothing is to be
    /// handed over (a wake of an approval whose earlier wake the shim has not answered).
    pub(super) fn approval_report(&mut self, report: Report) -> Option<SessionInput> {
        match report {
            Report::Done {
                id,
                re,
                api,
                result,
            } => Some(SessionInput::DetachedDone {
                id,
                re,
                api,
                result,
            }),
            Report::Wake { job, receipt } => {
                if self.wake_jobs.contains_key(&job.approval_id) {
                    // Its lease runs out and the scan retries it if this one is not delivered.
                    return None;
                }
                let wake = detached::wake_event(&job, receipt.as_deref());
                self.wake_jobs.insert(job.approval_id.clone(), job);
                Some(SessionInput::ApprovalWake(Box::new(wake)))
            }
        }
    }

    /// The shim answered a wake, or it could not be handed over: finish its lease.
    pub(super) fn approval_wake_answered(&mut self, approval_id: &str, delivered: bool) {
        let (Some(store), Some(job)) = (self.approvals.clone(), self.wake_jobs.remove(approval_id))
        else {
            return;
        };
        if delivered {
            crate::faults::crash_point("wake.handed");
        }
        self.spawn_background(async move {
            detached::finish_wake(&store, job, delivered).await;
        });
    }
}
