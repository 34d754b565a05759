//! How the turn machine's answers become shim protocol replies: the
//! response body of each [`HostReply`] (the Hermes `SendResult` of a send or
//! edit among them), and the machine's view of Hermes' processing outcome. Kept apart so [`crate::protocol`] stays a leaf that
//! knows nothing of the turn machine.

use serde_json::{Map, Value};

use crate::protocol::{
    ProcessingOutcome, SendResult, ShimResponse, StandaloneResult, ToolResult, TurnStarted,
};
use crate::turn::{HostReply, Outcome, SendOutcome};

/// The answer to a media send whose upload failed: a standalone send's
/// `Canon standalone send failed: …` text, or a failed `SendResult` Hermes
/// does not retry.
pub fn upload_failed(standalone: bool, error: String) -> HostReply {
    if standalone {
        HostReply::Standalone(Err(format!(
            "{}{error}",
            crate::turn::STANDALONE_ERROR_PREFIX
        )))
    } else {
        HostReply::Send(SendOutcome::Failed {
            error,
            retryable: false,
        })
    }
}

/// The response body of a turn-machine answer: a `SendResult` for a send
/// or edit, the turn id for `turn.start` and `turn.accepted`, `{}` for
/// `turn.complete` and `resync`, the tool result for `no_reply`, and
/// `{success, message_id}` or `{error}` for `standalone.send`.
pub fn reply_body(reply: HostReply) -> Value {
    match reply {
        HostReply::Send(outcome) => serde_json::to_value(SendResult::from(&outcome))
            .unwrap_or_else(|_| Value::Object(Map::new())),
        HostReply::TurnStarted { turn_id } => {
            ShimResponse::TurnStart(TurnStarted { turn_id }).to_body()
        }
        HostReply::Done => Value::Object(Map::new()),
        HostReply::NoReply(outcome) => ShimResponse::ToolCall(ToolResult {
            result: outcome.tool_result(),
        })
        .to_body(),
        HostReply::Standalone(result) => {
            let result = match result {
                Ok(message_id) => StandaloneResult {
                    success: Some(true),
                    message_id,
                    error: None,
                },
                Err(error) => StandaloneResult {
                    success: None,
                    message_id: None,
                    error: Some(error),
                },
            };
            ShimResponse::StandaloneSend(result).to_body()
        }
    }
}

impl From<&SendOutcome> for SendResult {
    /// The Hermes `SendResult` for a turn-machine answer (turns.md §7.3,
    /// turns.md §7.6, §8.2; hermes-host.md §8.4): staged sends return the
    /// turn id as `message_id`; suppressed, silenced and duplicate sends
    /// succeed with no id and a marker in `raw_response`; a failure keeps
    /// its text and retry flag (a timeout's text contains `timed out` and
    /// is never retryable, so Hermes neither re-sends nor falls back).
    fn from(outcome: &SendOutcome) -> SendResult {
        use SendOutcome as O;
        let marker = |key: &str, turn_id: &str| {
            let mut raw = Map::new();
            raw.insert(key.to_owned(), Value::Bool(true));
            raw.insert("turnId".to_owned(), Value::from(turn_id));
            Some(Value::Object(raw))
        };
        let ok = SendResult {
            success: true,
            ..SendResult::default()
        };
        match outcome {
            O::Preview { turn_id } => SendResult {
                message_id: Some(turn_id.clone()),
                ..ok
            },
            O::SuppressedAuxiliary { turn_id } => SendResult {
                raw_response: marker("suppressedAuxiliary", turn_id),
                ..ok
            },
            O::Silenced { turn_id } => SendResult {
                raw_response: marker("silenced", turn_id),
                ..ok
            },
            O::DuplicateFinal { turn_id } => SendResult {
                raw_response: marker("duplicateFinal", turn_id),
                ..ok
            },
            O::Delivered { message_id } => SendResult {
                message_id: message_id.clone(),
                ..ok
            },
            O::Failed { error, retryable } => SendResult {
                success: false,
                error: Some(error.clone()),
                retryable: *retryable,
                ..SendResult::default()
            },
        }
    }
}

impl From<ProcessingOutcome> for Outcome {
    fn from(outcome: ProcessingOutcome) -> Outcome {
        match outcome {
            ProcessingOutcome::Success => Outcome::Success,
            ProcessingOutcome::Failure => Outcome::Failure,
            ProcessingOutcome::Cancelled => Outcome::Cancelled,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::turn::NoReplyOutcome;

    #[test]
    fn a_failed_upload_is_answered_in_the_senders_terms() {
        assert_eq!(
            reply_body(upload_failed(true, "file too large".into())),
            json!({"error": "Canon standalone send failed: file too large"})
        );
        let send = reply_body(upload_failed(false, "file too large".into()));
        assert_eq!(
            (
                send["success"].clone(),
                send["error"].clone(),
                send["retryable"].clone()
            ),
            (json!(false), json!("file too large"), json!(false))
        );
    }

    #[test]
    fn every_reply_has_its_response_body() {
        assert_eq!(
            reply_body(HostReply::TurnStarted {
                turn_id: "hermes-1".into()
            }),
            json!({"turn_id": "hermes-1"})
        );
        assert_eq!(reply_body(HostReply::Done), json!({}));
        assert_eq!(
            reply_body(HostReply::Standalone(Ok(Some("m9".into())))),
            json!({"success": true, "message_id": "m9"})
        );
        assert_eq!(
            reply_body(HostReply::Standalone(Err(
                "Canon standalone send failed: x".into()
            ))),
            json!({"error": "Canon standalone send failed: x"})
        );
        let refused = reply_body(HostReply::NoReply(NoReplyOutcome::Refused {
            error: "nope".into(),
        }));
        let text = refused["result"].as_str().expect("a result string");
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            json!({"error": "nope", "success": false})
        );
        assert_eq!(
            reply_body(HostReply::Send(SendOutcome::Delivered {
                message_id: Some("m1".into())
            }))["message_id"],
            json!("m1")
        );
    }

    #[test]
    fn turn_answers_map_onto_send_results() {
        let check = |outcome: SendOutcome, expected: Value| {
            let result = SendResult::from(&outcome);
            assert_eq!(
                serde_json::to_value(&result).unwrap_or_default(),
                expected,
                "{outcome:?}"
            );
        };
        let t = "hermes-0123456789abcdef0123";
        check(
            SendOutcome::Preview { turn_id: t.into() },
            json!({"success": true, "message_id": t, "error": null, "retryable": false, "retry_after": null, "error_kind": null, "raw_response": null}),
        );
        check(
            SendOutcome::SuppressedAuxiliary { turn_id: t.into() },
            json!({"success": true, "message_id": null, "error": null, "retryable": false, "retry_after": null, "error_kind": null, "raw_response": {"suppressedAuxiliary": true, "turnId": t}}),
        );
        check(
            SendOutcome::Silenced { turn_id: t.into() },
            json!({"success": true, "message_id": null, "error": null, "retryable": false, "retry_after": null, "error_kind": null, "raw_response": {"silenced": true, "turnId": t}}),
        );
        check(
            SendOutcome::Failed {
                error: "Canon request timed out".into(),
                retryable: false,
            },
            json!({"success": false, "message_id": null, "error": "Canon request timed out", "retryable": false, "retry_after": null, "error_kind": null, "raw_response": null}),
        );
        assert_eq!(
            Outcome::from(ProcessingOutcome::Cancelled),
            Outcome::Cancelled
        );
    }
}
