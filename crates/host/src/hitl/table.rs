//! The open blocking clarifications and exec approvals, and what each step
//! of their life means for Hermes.
//!
//! The shell creates the Canon interaction and polls it on a task of its
//! own; this table decides everything around that: whether another one may
//! open, the effective approval rule once Canon answered the create call
//! (the requested session rule and the returned one must both allow it; the
//! expected responder is the requested one, else Canon's, else the owner),
//! which daemon request answers Hermes when the wait ends, and which
//! interactions a cancelled session must cancel on Canon.

use std::collections::BTreeMap;

use canon_wire::types::{InteractionCreated, InteractionResult};

use crate::hitl::{self, CLARIFY_CANCELLED, CLARIFY_TIMED_OUT};
use crate::protocol::{
    ApprovalChoice, ApprovalResolve, ClarifyResolve, DaemonRequest, SendResult, TurnContext,
    PLATFORM,
};

/// Open interactions at most (our number); one more is refused.
pub const MAX_HITL: usize = 256;

/// `SendResult.error` when [`MAX_HITL`] interactions are open.
pub const TOO_MANY: &str = "too many open Canon interactions";

/// Which blocking flow an interaction serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HitlKind {
    /// `adapter.send_clarify`, resolved through `clarify.resolve`.
    Clarify {
        /// Hermes' clarify id.
        clarify_id: String,
    },
    /// `adapter.send_exec_approval`, resolved through `approval.resolve`.
    Approval {
        /// Who must have answered: the requested responder, else Canon's
        /// effective one, else the owner (filled in when Canon answers the
        /// create call).
        expected: Option<String>,
        /// The effective `allowSessionRule` (runtime-control.md §6.3).
        allow_session: bool,
    },
}

/// One open interaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HitlEntry {
    /// The Hermes session that waits.
    pub session_key: String,
    /// Its conversation.
    pub conversation_id: String,
    /// The flow.
    pub kind: HitlKind,
    /// A cancel was already asked for (the session was interrupted).
    cancelled: bool,
}

impl HitlEntry {
    /// An entry not yet cancelled.
    pub fn new(session_key: String, conversation_id: String, kind: HitlKind) -> HitlEntry {
        HitlEntry {
            session_key,
            conversation_id,
            kind,
            cancelled: false,
        }
    }
}

/// What the shell does once Canon answered the create call.
#[derive(Debug, Clone, PartialEq)]
pub struct Created {
    /// The answer to Hermes' send request.
    pub reply: SendResult,
    /// `(session key, conversation)` of a turn that now waits for a human,
    /// for the turn machine's `WaitingInput`; `None` when the create failed
    /// or the session was cancelled meanwhile.
    pub waiting: Option<(String, String)>,
}

/// How a wait ended, as the shell saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum HitlOutcome {
    /// The interaction left `pending`.
    Answered(InteractionResult),
    /// Its deadline passed.
    TimedOut,
    /// The session cancelled it.
    Cancelled,
    /// A poll failed for good (a tool's wait, whose errors abort it; runtime-control.md §4.12
    /// and its open question 5): the safe error text.
    Failed(String),
}

/// What the shell does once a wait ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The Hermes session that waited.
    pub session_key: String,
    /// Its conversation.
    pub conversation_id: String,
    /// The request that hands Hermes the answer.
    pub request: DaemonRequest,
}

/// The open interactions, keyed by the shell's task key.
#[derive(Debug, Clone, Default)]
pub struct HitlTable {
    entries: BTreeMap<u64, HitlEntry>,
    next_key: u64,
}

impl HitlTable {
    /// Opens an entry; its key, or `None` when [`MAX_HITL`] are open (then
    /// Hermes is answered [`too_many`]).
    pub fn open(&mut self, entry: HitlEntry) -> Option<u64> {
        if self.entries.len() >= MAX_HITL {
            tracing::warn!("too many open clarifications and approvals; refused one");
            return None;
        }
        self.next_key += 1;
        self.entries.insert(self.next_key, entry);
        Some(self.next_key)
    }

    /// The entry under `key`.
    pub fn get(&self, key: u64) -> Option<&HitlEntry> {
        self.entries.get(&key)
    }

    /// How many are open.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Canon answered the create call: a failure closes the entry and is
    /// Hermes' answer; a success fixes the approval's effective rule and
    /// expected responder and answers with Canon's message id.
    pub fn created(
        &mut self,
        key: u64,
        result: Result<InteractionCreated, (String, bool)>,
        owner_id: Option<&str>,
    ) -> Created {
        let created = match result {
            Ok(created) => created,
            Err((error, retryable)) => {
                self.entries.remove(&key);
                return Created {
                    reply: failure(&error, retryable),
                    waiting: None,
                };
            }
        };
        let mut waiting = None;
        if let Some(entry) = self.entries.get_mut(&key) {
            if let HitlKind::Approval {
                expected,
                allow_session,
            } = &mut entry.kind
            {
                *allow_session &= created.allow_session_rule.unwrap_or(true);
                if expected.is_none() {
                    *expected = created
                        .response_user_id
                        .clone()
                        .or_else(|| owner_id.map(str::to_owned));
                }
            }
            if !entry.cancelled {
                waiting = Some((entry.session_key.clone(), entry.conversation_id.clone()));
            }
        }
        Created {
            reply: SendResult {
                success: true,
                message_id: created.message_id,
                ..SendResult::default()
            },
            waiting,
        }
    }

    /// A wait ended: the entry closes; a cancelled one answers nothing (the
    /// session is gone), anything else becomes the daemon request that
    /// hands Hermes the answer. A clarify answers the submitted text, the
    /// cancel text or the timeout text; an approval answers the choice its
    /// result allows (a deadline denies).
    pub fn finished(&mut self, key: u64, outcome: HitlOutcome) -> Option<Finished> {
        let entry = self.entries.remove(&key)?;
        let result = match outcome {
            HitlOutcome::Cancelled => return None,
            HitlOutcome::Answered(result) => Some(result),
            HitlOutcome::TimedOut | HitlOutcome::Failed(_) => None,
        };
        let status = result.as_ref().map_or("deadline", |r| r.status.as_str());
        let request = match &entry.kind {
            HitlKind::Clarify { clarify_id } => {
                let response = match &result {
                    Some(r) if r.status == "submitted" => hitl::answer_text(&r.raw),
                    Some(r) if r.status == "cancelled" => CLARIFY_CANCELLED.to_owned(),
                    _ => CLARIFY_TIMED_OUT.to_owned(),
                };
                tracing::info!(
                    conversation_id = entry.conversation_id,
                    status,
                    "clarification resolved"
                );
                DaemonRequest::ClarifyResolve(ClarifyResolve {
                    clarify_id: clarify_id.clone(),
                    response,
                })
            }
            HitlKind::Approval {
                expected,
                allow_session,
            } => {
                let choice = result.as_ref().map_or(ApprovalChoice::Deny, |r| {
                    hitl::approval_choice(&r.raw, expected.as_deref(), *allow_session)
                });
                let allowed = result.as_ref().is_some_and(|r| r.status == "allow");
                if allowed && choice == ApprovalChoice::Deny {
                    tracing::warn!(
                        conversation_id = entry.conversation_id,
                        "approval allowed by someone other than the expected human; denied"
                    );
                } else {
                    tracing::info!(
                        conversation_id = entry.conversation_id,
                        status,
                        ?choice,
                        "approval resolved"
                    );
                }
                DaemonRequest::ApprovalResolve(ApprovalResolve {
                    session_key: entry.session_key.clone(),
                    choice,
                    reason: None,
                })
            }
        };
        Some(Finished {
            session_key: entry.session_key,
            conversation_id: entry.conversation_id,
            request,
        })
    }

    /// Marks the open interactions of a session (of every session with
    /// `None`) cancelled; the keys whose Canon interaction the shell must
    /// now cancel. Each key is returned once.
    pub fn cancel_session(&mut self, session_key: Option<&str>) -> Vec<u64> {
        let mut keys = Vec::new();
        for (key, entry) in &mut self.entries {
            if !entry.cancelled && session_key.is_none_or(|k| k == entry.session_key) {
                entry.cancelled = true;
                keys.push(*key);
            }
        }
        keys
    }
}

/// Who answers a blocking interaction: the human recorded for the session's
/// turn, else the trusted user of the call's Canon context (its platform is
/// `canon`, in any case and padding); blank ids count as none. When both are
/// known and differ, the turn's wins.
pub fn responder(recorded: Option<&str>, ctx: &TurnContext) -> Option<String> {
    let recorded = recorded.map(str::trim).filter(|r| !r.is_empty());
    let trusted = ctx
        .platform
        .as_deref()
        .filter(|p| p.trim().eq_ignore_ascii_case(PLATFORM))
        .and(ctx.user_id.as_deref())
        .map(str::trim)
        .filter(|u| !u.is_empty());
    if let (Some(recorded), Some(trusted)) = (recorded, trusted) {
        if recorded != trusted {
            tracing::warn!(
                "the turn's responder differs from the call's trusted user; using the turn's"
            );
        }
    }
    recorded.or(trusted).map(str::to_owned)
}

/// The answer when [`MAX_HITL`] interactions are open: retryable.
pub fn too_many() -> SendResult {
    failure(TOO_MANY, true)
}

/// A failed blocking send: the error text and whether Hermes may retry.
pub fn failure(error: &str, retryable: bool) -> SendResult {
    SendResult {
        success: false,
        error: Some(error.to_owned()),
        retryable,
        ..SendResult::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn approval(expected: Option<&str>) -> HitlEntry {
        HitlEntry::new(
            "s1".into(),
            "c1".into(),
            HitlKind::Approval {
                expected: expected.map(str::to_owned),
                allow_session: true,
            },
        )
    }

    fn clarify() -> HitlEntry {
        HitlEntry::new(
            "s1".into(),
            "c1".into(),
            HitlKind::Clarify {
                clarify_id: "q1".into(),
            },
        )
    }

    fn created(value: Value) -> InteractionCreated {
        InteractionCreated::from_object(value.as_object().cloned().unwrap_or_default())
    }

    fn result(value: Value) -> InteractionResult {
        InteractionResult::from_object(value.as_object().cloned().unwrap_or_default())
    }

    #[test]
    fn the_table_is_bounded() {
        let mut table = HitlTable::default();
        for _ in 0..MAX_HITL {
            assert!(table.open(clarify()).is_some());
        }
        assert_eq!(table.open(clarify()), None);
        assert_eq!(too_many(), failure(TOO_MANY, true));
        assert_eq!(table.len(), MAX_HITL);
    }

    #[test]
    fn a_failed_create_closes_the_entry_and_answers_the_error() {
        let mut table = HitlTable::default();
        let key = table.open(clarify()).unwrap();
        let outcome = table.created(key, Err(("Canon API returned 400".into(), false)), None);
        assert_eq!(outcome.reply, failure("Canon API returned 400", false));
        assert_eq!(outcome.waiting, None);
        assert!(table.is_empty());
    }

    #[test]
    fn a_created_approval_takes_both_rules_and_falls_back_to_canon_then_the_owner() {
        let mut table = HitlTable::default();
        let key = table.open(approval(None)).unwrap();
        let outcome = table.created(
            key,
            Ok(created(
                json!({"messageId": "msg-1", "allowSessionRule": false}),
            )),
            Some("owner-1"),
        );
        assert_eq!(outcome.reply.message_id.as_deref(), Some("msg-1"));
        assert!(outcome.reply.success);
        assert_eq!(outcome.waiting, Some(("s1".into(), "c1".into())));
        assert_eq!(
            table.get(key).map(|e| e.kind.clone()),
            Some(HitlKind::Approval {
                expected: Some("owner-1".into()),
                allow_session: false
            })
        );
        let key = table.open(approval(None)).unwrap();
        table.created(
            key,
            Ok(created(json!({"responseUserId": "u9"}))),
            Some("owner-1"),
        );
        assert_eq!(
            table.get(key).map(|e| e.kind.clone()),
            Some(HitlKind::Approval {
                expected: Some("u9".into()),
                allow_session: true
            })
        );
        let key = table.open(approval(Some("u1"))).unwrap();
        table.created(
            key,
            Ok(created(json!({"responseUserId": "u9"}))),
            Some("owner-1"),
        );
        assert!(matches!(
            table.get(key).map(|e| &e.kind),
            Some(HitlKind::Approval { expected: Some(e), .. }) if e == "u1"
        ));
    }

    #[test]
    fn a_cancelled_session_does_not_wait_and_answers_nothing() {
        let mut table = HitlTable::default();
        let first = table.open(clarify()).unwrap();
        let other = table
            .open(HitlEntry::new(
                "s2".into(),
                "c2".into(),
                HitlKind::Clarify {
                    clarify_id: "q2".into(),
                },
            ))
            .unwrap();
        assert_eq!(table.cancel_session(Some("s1")), [first]);
        assert_eq!(table.cancel_session(Some("s1")), Vec::<u64>::new());
        let outcome = table.created(first, Ok(created(json!({}))), None);
        assert_eq!(outcome.waiting, None);
        assert_eq!(table.finished(first, HitlOutcome::Cancelled), None);
        assert_eq!(table.cancel_session(None), [other]);
    }

    #[test]
    fn clarify_answers_the_text_the_cancel_or_the_timeout() {
        let resolve = |outcome: HitlOutcome| {
            let mut table = HitlTable::default();
            let key = table.open(clarify()).unwrap();
            match table.finished(key, outcome).map(|f| f.request) {
                Some(DaemonRequest::ClarifyResolve(r)) => (r.clarify_id, r.response),
                other => panic!("expected a clarify.resolve: {other:?}"),
            }
        };
        let answered = resolve(HitlOutcome::Answered(result(
            json!({"status": "submitted", "value": "blue"}),
        )));
        assert_eq!(answered, ("q1".to_owned(), "blue".to_owned()));
        let cancelled = resolve(HitlOutcome::Answered(result(
            json!({"status": "cancelled"}),
        )));
        assert_eq!(cancelled.1, CLARIFY_CANCELLED);
        let timed_out = resolve(HitlOutcome::TimedOut);
        assert_eq!(timed_out.1, CLARIFY_TIMED_OUT);
        let expired = resolve(HitlOutcome::Answered(result(json!({"status": "expired"}))));
        assert_eq!(expired.1, CLARIFY_TIMED_OUT);
    }

    #[test]
    fn approvals_deny_on_deadline_and_on_the_wrong_responder() {
        let resolve = |expected: Option<&str>, outcome: HitlOutcome| {
            let mut table = HitlTable::default();
            let key = table.open(approval(expected)).unwrap();
            match table.finished(key, outcome) {
                Some(Finished {
                    request: DaemonRequest::ApprovalResolve(r),
                    session_key,
                    conversation_id,
                }) => {
                    assert_eq!(
                        (session_key.as_str(), conversation_id.as_str()),
                        ("s1", "c1")
                    );
                    assert_eq!(r.session_key, "s1");
                    r.choice
                }
                other => panic!("expected an approval.resolve: {other:?}"),
            }
        };
        assert_eq!(
            resolve(Some("u1"), HitlOutcome::TimedOut),
            ApprovalChoice::Deny
        );
        let allow =
            |by: &str| HitlOutcome::Answered(result(json!({"status": "allow", "respondedBy": by})));
        assert_eq!(resolve(Some("u1"), allow("u2")), ApprovalChoice::Deny);
        assert_eq!(resolve(Some("u1"), allow("u1")), ApprovalChoice::Once);
        let session = HitlOutcome::Answered(result(
            json!({"status": "allow", "respondedBy": "u1", "sessionRule": {"type": "approve-all"}}),
        ));
        assert_eq!(resolve(Some("u1"), session), ApprovalChoice::Session);
    }

    #[test]
    fn the_turns_responder_wins_over_the_calls_trusted_user() {
        let ctx = |platform: &str, user: &str| TurnContext {
            platform: Some(platform.to_owned()),
            user_id: Some(user.to_owned()),
            ..TurnContext::default()
        };
        assert_eq!(
            responder(Some("u1"), &ctx("canon", "u2")).as_deref(),
            Some("u1")
        );
        assert_eq!(
            responder(Some("  "), &ctx(" Canon ", " u2 ")).as_deref(),
            Some("u2")
        );
        assert_eq!(responder(None, &ctx("telegram", "u2")), None);
        assert_eq!(responder(None, &ctx("canon", " ")), None);
    }
}
