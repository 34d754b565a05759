//! The public domain-plugin API's rules that the daemon answers
//! (runtime-control.md §7): which trusted turn a call belongs to, read from
//! the turn context the shim captured in the calling task
//! (runtime-control.md §1), never from arguments, and the exact error
//! texts: `current_canon_inbound_media()` (runtime-control.md §7.6) as the
//! `api.inbound_media` request, and `current_canon_runtime_health()`
//! (durable-endpoint.md §11.1, [`runtime_health`]).

use crate::protocol::{TurnContext, PLATFORM};

/// The session context could not be read (runtime-control.md §7.2; exact).
pub const SESSION_CONTEXT_UNAVAILABLE: &str = "Hermes session context is unavailable";

/// Not a Canon turn, or no conversation (runtime-control.md §7.2; exact).
pub const NO_CANON_CONVERSATION: &str = "This operation requires an active Canon conversation";

/// `current_canon_turn(require_human=True)` without a trusted user id
/// (runtime-control.md §7.2; exact).
pub const NO_TRUSTED_HUMAN: &str = "This operation requires a trusted triggering Canon human";

/// A Canon turn without a message id (runtime-control.md §7.6; exact).
pub const NO_MESSAGE_PROVENANCE: &str =
    "This operation requires a Canon turn with trusted message provenance";

/// A context value as runtime-control.md §1 derives it: trimmed, and
/// absent when empty.
fn value(raw: Option<&str>) -> Option<&str> {
    raw.map(str::trim).filter(|v| !v.is_empty())
}

/// The Canon conversation of a turn context: its chat id when the platform
/// is `canon` (trimmed, case-insensitive), else absent
/// (runtime-control.md §1 `canon_turn_conversation_id`).
pub fn canon_conversation(ctx: &TurnContext) -> Option<&str> {
    let platform = value(ctx.platform.as_deref())?;
    if !platform.eq_ignore_ascii_case(PLATFORM) {
        return None;
    }
    value(ctx.chat_id.as_deref())
}

/// The capture key of `current_canon_inbound_media()`
/// (runtime-control.md §7.6): (conversation, message) of the trusted turn,
/// or the exact error.
pub fn inbound_media_key(ctx: &TurnContext) -> Result<(&str, &str), &'static str> {
    let conversation = canon_conversation(ctx).ok_or(NO_CANON_CONVERSATION)?;
    let message = value(ctx.message_id.as_deref()).ok_or(NO_MESSAGE_PROVENANCE)?;
    Ok((conversation, message))
}

/// durable-endpoint.md §11.2: no adapter owns an open turn in the conversation.
pub const OWNER_ABSENT: &str = "CANON_OWNER_ABSENT";
/// durable-endpoint.md §11.2: the owning adapter's transport is down.
pub const OWNER_DISCONNECTED: &str = "CANON_OWNER_DISCONNECTED";
/// durable-endpoint.md §11.2: an open turn without a running Hermes agent.
pub const NATIVE_TURN_UNAVAILABLE: &str = "CANON_NATIVE_TURN_UNAVAILABLE";

/// What the daemon knows of one conversation for [`runtime_health`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthFacts {
    /// `adapter.connect` succeeded and no disconnect followed.
    pub connected: bool,
    /// The event stream is open.
    pub stream_open: bool,
    /// Open Canon turns of the conversation (sessions between `turn.start` and `turn.complete`).
    pub open_turns: usize,
    /// Of those, the ones a Hermes agent runs. A turn is opened here only by Hermes' own
    /// processing start and resynced only from turns the shim still runs, so every open turn
    /// is bound; the field keeps the rule of the code order visible.
    pub bound_turns: usize,
}

/// `current_canon_runtime_health()` (durable-endpoint.md §11.1), read-only and granting
/// nothing. One daemon is one adapter: it owns the conversation's open turns or there are none.
/// The code is the first that applies: no open turn (`CANON_OWNER_ABSENT`), the transport down
/// (`CANON_OWNER_DISCONNECTED`), an unbound open turn (`CANON_NATIVE_TURN_UNAVAILABLE`), else
/// `null`. No turn is ever orphaned here: a resynced turn is bound to the Hermes run that still
/// holds it.
pub fn runtime_health(facts: HealthFacts) -> serde_json::Value {
    let adapters = usize::from(facts.open_turns > 0);
    let transport = if adapters == 0 {
        Some(OWNER_ABSENT)
    } else if !facts.connected || !facts.stream_open {
        Some(OWNER_DISCONNECTED)
    } else {
        None
    };
    let code =
        transport.or((facts.open_turns != facts.bound_turns).then_some(NATIVE_TURN_UNAVAILABLE));
    serde_json::json!({
        "adapterCount": adapters,
        "transportConnected": adapters > 0 && transport.is_none(),
        "openTurnCount": facts.open_turns,
        "boundNativeTurnCount": facts.bound_turns,
        "orphanedTurnCount": 0,
        "activeTurnBound": facts.open_turns > 0 && facts.open_turns == facts.bound_turns && code.is_none(),
        "code": code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_codes_come_in_their_order() {
        let facts = |connected, stream_open, open_turns, bound_turns| HealthFacts {
            connected,
            stream_open,
            open_turns,
            bound_turns,
        };
        let healthy = runtime_health(facts(true, true, 1, 1));
        assert_eq!(
            healthy,
            serde_json::json!({"adapterCount": 1, "transportConnected": true, "openTurnCount": 1,
                               "boundNativeTurnCount": 1, "orphanedTurnCount": 0,
                               "activeTurnBound": true, "code": null})
        );
        assert_eq!(
            runtime_health(facts(true, true, 0, 0))["code"],
            OWNER_ABSENT
        );
        assert_eq!(
            runtime_health(facts(false, true, 0, 0))["code"],
            OWNER_ABSENT
        );
        let down = runtime_health(facts(true, false, 1, 1));
        assert_eq!(down["code"], OWNER_DISCONNECTED);
        assert_eq!(down["transportConnected"], false);
        assert_eq!(down["activeTurnBound"], false);
        assert_eq!(
            runtime_health(facts(true, true, 2, 1))["code"],
            NATIVE_TURN_UNAVAILABLE
        );
    }

    fn ctx(platform: Option<&str>, chat: Option<&str>, message: Option<&str>) -> TurnContext {
        TurnContext {
            platform: platform.map(str::to_owned),
            chat_id: chat.map(str::to_owned),
            message_id: message.map(str::to_owned),
            ..TurnContext::default()
        }
    }

    #[test]
    fn the_key_comes_from_a_canon_turn_with_a_message() {
        let cases = [
            (ctx(Some("canon"), Some("c1"), Some("m1")), Ok(("c1", "m1"))),
            (
                ctx(Some(" Canon "), Some(" c1 "), Some(" m1 ")),
                Ok(("c1", "m1")),
            ),
            (
                ctx(None, Some("c1"), Some("m1")),
                Err(NO_CANON_CONVERSATION),
            ),
            (
                ctx(Some("telegram"), Some("c1"), Some("m1")),
                Err(NO_CANON_CONVERSATION),
            ),
            (
                ctx(Some("canon"), Some("  "), Some("m1")),
                Err(NO_CANON_CONVERSATION),
            ),
            (
                ctx(Some("canon"), Some("c1"), None),
                Err(NO_MESSAGE_PROVENANCE),
            ),
            (
                ctx(Some("canon"), Some("c1"), Some(" ")),
                Err(NO_MESSAGE_PROVENANCE),
            ),
        ];
        for (ctx, expected) in cases {
            assert_eq!(inbound_media_key(&ctx), expected, "{ctx:?}");
        }
    }
}
