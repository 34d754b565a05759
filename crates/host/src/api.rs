//! The public domain-plugin API's rules that the daemon answers
//! (runtime-control.md §7): which trusted turn a call belongs to, read from
//! the turn context the shim captured in the calling task
//! (runtime-control.md §1), never from arguments, and the exact error
//! texts. Today: `current_canon_inbound_media()` (runtime-control.md §7.6)
//! as the `api.inbound_media` request.

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

#[cfg(test)]
mod tests {
    use super::*;

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
