//! How the shim's requests and notifications and Canon's runtime signals
//! become what the daemon acts on: the turn-machine input of a hook
//! notification, the `no_reply` action of a tool call, the home channel of
//! a standalone send, the turns a respawned daemon re-attaches, a chat's
//! facts, the answer to a `probe`, and the `control.signal` of a consumed
//! runtime signal.

use canon_wire::types::{RuntimeSignal, SignalKind};
use serde_json::Value;

use crate::connect::MISSING_CREDENTIALS_MESSAGE;
use crate::conversations::{canon_chat, conversation_type_of, ConversationCache};
use crate::credentials::CredentialFacts;
use crate::protocol::{
    ChatInfo, ControlSignal, OpenTurn, ProbeResult, ShimNotification, Signal, ToolCall, PLATFORM,
};
use crate::turn::{ActivityEvent, Input, NoReplyRequest, RequestId, ResyncTurn};

/// `updated_by` of a signal when neither Canon nor `agent.context` named
/// anyone (canon-wire.md §4.9; exact).
pub const RUNTIME_CONTROL_USER: &str = "canon-runtime-control";

/// The tool that carries the `no_reply` action.
pub const RUNTIME_CONTROL_TOOL: &str = "canon_runtime_control";

/// The randomness an `adapter.send`'s `send_key` stands for: its 32
/// lowercase hex digits as a number; `None` for any other text, which then
/// gets fresh randomness.
pub fn send_key(key: &str) -> Option<u128> {
    let hex = key.len() == 32 && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !hex {
        tracing::debug!("adapter.send key ignored: not 32 lowercase hex digits");
        return None;
    }
    u128::from_str_radix(key, 16).ok()
}

/// The turn-machine input of a shim notification. Tool and subagent hooks
/// count only inside a Canon turn (their context's platform is `canon` with
/// a chat id); others are dropped (`None`). A typing notification keeps the
/// `status` string of its metadata.
pub fn notification_input(note: ShimNotification) -> Option<Input> {
    let opaque = |value: canon_wire::secret::Opaque| (!value.0.is_null()).then_some(value.0);
    let input = match note {
        ShimNotification::Typing(t) => Input::Typing {
            status: t
                .metadata
                .as_ref()
                .and_then(|m| m.get("status"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            conversation_id: t.chat_id,
            on: t.on,
        },
        ShimNotification::PreToolCall(p) => Input::Activity {
            conversation_id: canon_chat(&p.ctx)?,
            session_key: p.ctx.session_key,
            event: ActivityEvent::ToolStarted {
                tool_call_id: p.tool_call_id,
                tool_name: p.tool_name,
                args: opaque(p.args),
            },
        },
        ShimNotification::PostToolCall(p) => Input::Activity {
            conversation_id: canon_chat(&p.ctx)?,
            session_key: p.ctx.session_key,
            event: ActivityEvent::ToolFinished {
                tool_call_id: p.tool_call_id,
                tool_name: p.tool_name,
                args: opaque(p.args),
                result: opaque(p.result),
                status: p.status,
                duration_ms: p.duration_ms,
            },
        },
        ShimNotification::SubagentStop(s) => Input::Activity {
            conversation_id: canon_chat(&s.ctx)?,
            session_key: s.ctx.session_key,
            event: ActivityEvent::SubagentStopped {
                child_session_id: s.child_session_id,
                child_role: s.child_role,
                child_summary: opaque(s.child_summary),
                child_status: s.child_status,
                duration_ms: s.duration_ms,
            },
        },
        ShimNotification::QueueDepth(q) => Input::QueueDepth {
            session_key: q.session_key,
            depth: q.depth,
        },
        ShimNotification::TurnSteered(t) => Input::SteerAccepted {
            session_key: Some(t.session_key),
            conversation_id: t.chat_id,
        },
    };
    Some(input)
}

/// How a `probe` is answered (hermes-host.md §19.6).
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeStep {
    /// Answer now, from the configuration alone (no network I/O).
    Answer(ProbeResult),
    /// Check Canon once (the environment when one is configured, else
    /// `GET /agents/me`), put the check's error in the result, then answer.
    Verify(ProbeResult),
}

/// The label of the home channel when `CANON_HOME_CHANNEL_NAME` is unset
/// or blank (cli.md §8.2; exact).
pub const DEFAULT_HOME_CHANNEL_NAME: &str = "Canon Home";

/// What a `probe` is answered from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeFacts<'a> {
    /// The credentials (the daemon's, or those of the probe's config).
    pub credentials: &'a CredentialFacts,
    /// `CANON_HOME_CHANNEL`, when set.
    pub home_channel: Option<&'a str>,
    /// `CANON_HOME_CHANNEL_NAME`, when set.
    pub home_channel_name: Option<&'a str>,
}

/// The `seed` of a probe answer, which the shim's `env_enablement_fn`
/// hands Hermes (hermes-host.md §6, §7.3: the gateway merges it into the
/// platform config and makes its `home_channel` the platform's home
/// channel). Only when the credentials resolve, as 0.14.1's
/// `_env_enablement`, and only the home channel: `CANON_HOME_CHANNEL`
/// (trimmed) labelled `CANON_HOME_CHANNEL_NAME`, else
/// [`DEFAULT_HOME_CHANNEL_NAME`]. 0.14.1 also seeded the profile name (or
/// the key itself), the environment and the URLs; the daemon resolves
/// those itself, the gateway's merge would put them over the extras of
/// config.yaml, and the key never crosses the protocol, so they are left
/// out. `None` when there is nothing to seed.
pub fn enablement_seed(facts: ProbeFacts<'_>) -> Option<Value> {
    if !facts.credentials.configured() {
        return None;
    }
    let chat_id = facts
        .home_channel
        .map(str::trim)
        .filter(|c| !c.is_empty())?;
    let name = facts
        .home_channel_name
        .filter(|n| !n.trim().is_empty())
        .unwrap_or(DEFAULT_HOME_CHANNEL_NAME);
    Some(serde_json::json!({"home_channel": {"chat_id": chat_id, "name": name}}))
}

/// The probe's result from the credentials: configured when the key and
/// the base URL are set, with the [`enablement_seed`]. Unconfigured, the
/// result carries why the credentials did not resolve (the cli.md §5.1
/// message), and a `verify` probe is answered at once, with the
/// missing-credentials error when nothing failed. Never carries the key.
pub fn probe(facts: ProbeFacts<'_>, verify: bool) -> ProbeStep {
    let credentials = facts.credentials;
    let configured = credentials.configured();
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let mut result = ProbeResult {
        configured,
        profile: credentials.profile.clone(),
        environment_id: credentials.environment_id.clone(),
        base_url: non_empty(&credentials.base_url),
        stream_url: non_empty(&credentials.stream_url),
        seed: enablement_seed(facts).map(canon_wire::secret::Opaque),
        error: None,
    };
    if !configured {
        result.error = credentials
            .error
            .clone()
            .or_else(|| verify.then(|| MISSING_CREDENTIALS_MESSAGE.to_owned()));
    }
    if verify && configured {
        ProbeStep::Verify(result)
    } else {
        ProbeStep::Answer(result)
    }
}

/// Whether a tool call is `canon_runtime_control` with `action: no_reply`.
pub fn is_no_reply(call: &ToolCall) -> bool {
    let action = call.args.0.get("action").and_then(Value::as_str);
    call.name == RUNTIME_CONTROL_TOOL && action == Some("no_reply")
}

/// The turn machine's `no_reply` request of such a call. Whether a reason
/// was given is kept (a string with something other than whitespace); the
/// reason itself is never kept. The Canon context comes from the call's
/// trusted turn context, never from the model's arguments.
pub fn no_reply(call: &ToolCall, request: RequestId) -> NoReplyRequest {
    let args = &call.args.0;
    NoReplyRequest {
        request,
        in_canon_context: call.ctx.platform.as_deref() == Some(PLATFORM),
        session_key: call.ctx.session_key.clone(),
        conversation_id: call.ctx.chat_id.clone(),
        target: args
            .get("target")
            .and_then(Value::as_str)
            .map(str::to_owned),
        reason_given: args
            .get("reason")
            .and_then(Value::as_str)
            .is_some_and(|r| !r.trim().is_empty()),
    }
}

/// The configured home channel of a standalone send: the `chat_id` string
/// of the platform configuration's `home_channel` object.
pub fn home_channel_config(home_channel: Option<&Value>) -> Option<String> {
    home_channel
        .and_then(|h| h.get("chat_id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The turns a respawned daemon re-attaches, in the shim's order, as the
/// turn machine's resync input.
pub fn resync_turns(open_turns: Vec<OpenTurn>) -> Vec<ResyncTurn> {
    open_turns
        .into_iter()
        .map(|t| ResyncTurn {
            reply_authority: crate::session::handed_back_authority(
                t.reply_authority.as_ref(),
                &t.event.message_id,
            ),
            conversation_type: conversation_type_of(t.event.chat_type.as_deref()),
            session_key: t.session_key,
            conversation_id: t.event.chat_id,
            turn_id: t.turn_id,
            message_id: t.event.message_id,
            started_at_ms: t.started_at_ms,
            durable_sent: t.durable_sent,
        })
        .collect()
}

/// `adapter.chat_info`: the cached chat facts.
pub fn chat_info(chat_id: String, conversations: &ConversationCache) -> ChatInfo {
    let (name, kind) = conversations.chat_facts(&chat_id);
    ChatInfo {
        name,
        kind: kind.to_owned(),
        id: chat_id,
    }
}

/// The `control.signal` of a consumed runtime signal: the chat's cached
/// facts, the signal, and who sent it — Canon's non-blank `updatedBy`, else
/// the agent, else [`RUNTIME_CONTROL_USER`] (canon-wire.md §4.9).
pub fn control_signal(
    conversation_id: String,
    signal: RuntimeSignal,
    agent_id: Option<&str>,
    conversations: &ConversationCache,
) -> ControlSignal {
    let kind = match signal.signal {
        SignalKind::Interrupt => Signal::Interrupt,
        SignalKind::StopAndDrop => Signal::StopAndDrop,
        SignalKind::NewSession => Signal::NewSession,
    };
    let (chat_name, chat_type) = conversations.chat_facts(&conversation_id);
    let updated_by = signal
        .updated_by
        .filter(|u| !u.trim().is_empty())
        .or_else(|| agent_id.map(str::to_owned))
        .unwrap_or_else(|| RUNTIME_CONTROL_USER.to_owned());
    ControlSignal {
        chat_id: conversation_id,
        chat_name: Some(chat_name),
        chat_type: chat_type.to_owned(),
        signal: kind,
        updated_by: Some(updated_by),
    }
}

#[cfg(test)]
mod tests {
    use canon_dispatch::verbosity::ConversationType;
    use canon_wire::secret::Opaque;
    use serde_json::json;

    use super::*;
    use crate::protocol::{EventSummary, TurnContext};

    fn call(name: &str, args: Value, platform: &str) -> ToolCall {
        ToolCall {
            name: name.to_owned(),
            args: Opaque(args),
            ctx: TurnContext {
                platform: Some(platform.to_owned()),
                chat_id: Some("c1".to_owned()),
                session_key: Some("s1".to_owned()),
                ..TurnContext::default()
            },
            hook: Default::default(),
        }
    }

    #[test]
    fn no_reply_reads_the_action_target_and_whether_a_reason_was_given() {
        let args = json!({"action": "no_reply", "reason": "  nothing to add ", "target": "m1"});
        let canon = call(RUNTIME_CONTROL_TOOL, args, "canon");
        assert!(is_no_reply(&canon));
        let request = no_reply(&canon, RequestId(7));
        assert_eq!(
            request,
            NoReplyRequest {
                request: RequestId(7),
                in_canon_context: true,
                session_key: Some("s1".into()),
                conversation_id: Some("c1".into()),
                target: Some("m1".into()),
                reason_given: true,
            }
        );
        let blank = json!({"action": "no_reply", "reason": "   "});
        let request = no_reply(&call(RUNTIME_CONTROL_TOOL, blank, "telegram"), RequestId(1));
        assert!(!request.reason_given && !request.in_canon_context);
        assert_eq!(request.target, None);
        let other_action = json!({"action": "send_card"});
        assert!(!is_no_reply(&call(
            RUNTIME_CONTROL_TOOL,
            other_action,
            "canon"
        )));
        let other_tool = json!({"action": "no_reply"});
        assert!(!is_no_reply(&call(
            "canon_communicate",
            other_tool,
            "canon"
        )));
    }

    #[test]
    fn hooks_count_only_inside_a_canon_turn() {
        use crate::protocol::{PreToolCall, QueueDepthNote};
        let pre = |platform: &str| {
            ShimNotification::PreToolCall(PreToolCall {
                tool_name: Some("terminal".into()),
                tool_call_id: Some("call-1".into()),
                args: Opaque(json!({"command": "ls"})),
                ctx: TurnContext {
                    platform: Some(platform.to_owned()),
                    chat_id: Some("c1".to_owned()),
                    session_key: Some("s1".to_owned()),
                    ..TurnContext::default()
                },
                task_id: None,
                session_id: None,
                turn_id: None,
                api_request_id: None,
            })
        };
        match notification_input(pre("canon")) {
            Some(Input::Activity {
                session_key,
                conversation_id,
                event:
                    ActivityEvent::ToolStarted {
                        tool_name, args, ..
                    },
            }) => {
                assert_eq!(
                    (session_key.as_deref(), conversation_id.as_str()),
                    (Some("s1"), "c1")
                );
                assert_eq!(tool_name.as_deref(), Some("terminal"));
                assert_eq!(args, Some(json!({"command": "ls"})));
            }
            other => panic!("expected tool activity: {other:?}"),
        }
        assert_eq!(notification_input(pre("telegram")), None);
        let depth = ShimNotification::QueueDepth(QueueDepthNote {
            session_key: "s1".into(),
            chat_id: "c1".into(),
            depth: 2,
        });
        assert_eq!(
            notification_input(depth),
            Some(Input::QueueDepth {
                session_key: "s1".into(),
                depth: 2
            })
        );
    }

    #[test]
    fn probes_answer_from_the_configuration_and_verify_only_when_configured() {
        let probe = |credentials: &CredentialFacts, verify: bool| {
            let facts = ProbeFacts {
                credentials,
                home_channel: None,
                home_channel_name: None,
            };
            probe(facts, verify)
        };
        let facts = |key: bool, base: &str, error: Option<&str>| CredentialFacts {
            api_key_set: key,
            base_url: base.to_owned(),
            stream_url: String::new(),
            environment_id: Some("canon-prod-v1".into()),
            profile: Some("ops".into()),
            error: error.map(str::to_owned),
        };
        let ProbeStep::Answer(quiet) = probe(&facts(true, "https://api", None), false) else {
            panic!("no verify, no check");
        };
        assert!(quiet.configured && quiet.error.is_none());
        assert_eq!(quiet.base_url.as_deref(), Some("https://api"));
        assert_eq!(quiet.stream_url, None);
        assert_eq!(quiet.environment_id.as_deref(), Some("canon-prod-v1"));
        assert_eq!(quiet.profile.as_deref(), Some("ops"));
        assert!(
            matches!(probe(&facts(true, "https://api", None), true), ProbeStep::Verify(r) if r.error.is_none())
        );
        let ProbeStep::Answer(missing) = probe(&facts(false, "https://api", None), true) else {
            panic!("an unconfigured verify answers at once");
        };
        assert!(!missing.configured);
        assert_eq!(missing.error.as_deref(), Some(MISSING_CREDENTIALS_MESSAGE));
        assert!(
            matches!(probe(&facts(true, "", None), true), ProbeStep::Answer(r) if !r.configured)
        );
        // Nothing configured and nothing wrong: no error without verify.
        let ProbeStep::Answer(none) = probe(&facts(false, "", None), false) else {
            panic!("answered");
        };
        assert_eq!(none.error, None);
        // Credentials that failed to resolve say why, with or without verify.
        let why = "CANON_ENVIRONMENT_ID is required when CANON_API_KEY is used directly";
        for verify in [false, true] {
            let ProbeStep::Answer(failed) = probe(&facts(false, "", Some(why)), verify) else {
                panic!("answered");
            };
            assert!(!failed.configured);
            assert_eq!(failed.error.as_deref(), Some(why));
        }
    }

    #[test]
    fn the_seed_is_the_named_home_channel_when_the_credentials_resolve() {
        let configured = CredentialFacts {
            api_key_set: true,
            base_url: "https://api".into(),
            ..CredentialFacts::default()
        };
        let unconfigured = CredentialFacts::default();
        let seed = |credentials: &CredentialFacts, home: Option<&str>, name: Option<&str>| {
            let facts = ProbeFacts {
                credentials,
                home_channel: home,
                home_channel_name: name,
            };
            let ProbeStep::Answer(result) = probe(facts, false) else {
                panic!("answered");
            };
            assert_eq!(
                result.seed.as_ref().map(|s| s.0.clone()),
                enablement_seed(facts)
            );
            enablement_seed(facts)
        };
        assert_eq!(
            seed(&configured, Some(" c-home "), None),
            Some(json!({"home_channel": {"chat_id": "c-home", "name": "Canon Home"}}))
        );
        assert_eq!(
            seed(&configured, Some("c-home"), Some("Ops Room")),
            Some(json!({"home_channel": {"chat_id": "c-home", "name": "Ops Room"}}))
        );
        assert_eq!(
            seed(&configured, Some("c-home"), Some("  ")),
            Some(json!({"home_channel": {"chat_id": "c-home", "name": DEFAULT_HOME_CHANNEL_NAME}}))
        );
        assert_eq!(seed(&configured, None, Some("Ops Room")), None);
        assert_eq!(seed(&configured, Some("  "), None), None);
        assert_eq!(seed(&unconfigured, Some("c-home"), Some("Ops Room")), None);
    }

    #[test]
    fn home_channel_is_the_chat_id_string() {
        assert_eq!(
            home_channel_config(Some(&json!({"chat_id": "c9"}))).as_deref(),
            Some("c9")
        );
        assert_eq!(home_channel_config(Some(&json!({"chat_id": 9}))), None);
        assert_eq!(home_channel_config(Some(&json!("c9"))), None);
        assert_eq!(home_channel_config(None), None);
    }

    #[test]
    fn resync_keeps_each_open_turn() {
        // The shim hands back the reply authority it kept with the event; a respawned daemon
        // accepts it under the stream's rules, for the turn's own message only.
        let authority = serde_json::json!({"schema": "canon.agent-reply-authority.v1",
            "sourceMessageId": "m1", "token": "tok-1", "expiresAt": "2026-12-02T17:49:51.508Z"});
        let foreign = serde_json::json!({"schema": "canon.agent-reply-authority.v1",
            "sourceMessageId": "m9", "token": "tok-9", "expiresAt": "2026-12-02T17:49:51.508Z"});
        let other = resync_turns(vec![OpenTurn {
            event_ref: "e:2".into(),
            session_key: "s2".into(),
            turn_id: "hermes-2".into(),
            event: EventSummary {
                chat_id: "c2".into(),
                message_id: Some("m2".into()),
                ..EventSummary::default()
            },
            started_at_ms: 1,
            reply_authority: Some(foreign),
            durable_sent: false,
        }]);
        assert_eq!(other[0].reply_authority, None);
        let turns = resync_turns(vec![OpenTurn {
            event_ref: "e:1".into(),
            session_key: "s1".into(),
            turn_id: "hermes-1".into(),
            event: EventSummary {
                chat_id: "c1".into(),
                chat_type: Some("group".into()),
                message_id: Some("m1".into()),
                ..EventSummary::default()
            },
            started_at_ms: 42,
            reply_authority: Some(authority.clone()),
            durable_sent: false,
        }]);
        assert_eq!(
            turns,
            [ResyncTurn {
                session_key: "s1".into(),
                conversation_id: "c1".into(),
                turn_id: "hermes-1".into(),
                message_id: Some("m1".into()),
                started_at_ms: 42,
                conversation_type: ConversationType::Group,
                reply_authority: canon_wire::authority::ReplyAuthority::accept(&authority, "m1"),
                durable_sent: false,
            }]
        );
    }

    #[test]
    fn signals_name_the_sender_the_agent_or_the_literal() {
        let mut cache = ConversationCache::default();
        cache.insert("c1", json!({"id": "c1", "name": "Team", "type": "group"}));
        let signal = |kind, by: Option<&str>| RuntimeSignal {
            signal: kind,
            updated_by: by.map(str::to_owned),
        };
        let sent = control_signal(
            "c1".into(),
            signal(SignalKind::Interrupt, Some("u1")),
            Some("a1"),
            &cache,
        );
        assert_eq!(
            sent,
            ControlSignal {
                chat_id: "c1".into(),
                chat_name: Some("Team".into()),
                chat_type: "group".into(),
                signal: Signal::Interrupt,
                updated_by: Some("u1".into()),
            }
        );
        let by_agent = control_signal(
            "c2".into(),
            signal(SignalKind::StopAndDrop, Some(" ")),
            Some("a1"),
            &cache,
        );
        assert_eq!(
            (
                by_agent.signal,
                by_agent.updated_by.as_deref(),
                by_agent.chat_type.as_str()
            ),
            (Signal::StopAndDrop, Some("a1"), "dm")
        );
        assert_eq!(by_agent.chat_name.as_deref(), Some("c2"));
        let literal = control_signal(
            "c1".into(),
            signal(SignalKind::NewSession, None),
            None,
            &cache,
        );
        assert_eq!(
            (literal.signal, literal.updated_by.as_deref()),
            (Signal::NewSession, Some(RUNTIME_CONTROL_USER))
        );
    }

    #[test]
    fn chat_info_reads_the_cache() {
        let mut cache = ConversationCache::default();
        cache.insert("c1", json!({"topic": "Launch", "type": "group"}));
        assert_eq!(
            chat_info("c1".into(), &cache),
            ChatInfo {
                name: "Launch".into(),
                kind: "group".into(),
                id: "c1".into(),
            }
        );
    }

    #[test]
    fn send_keys_are_32_lowercase_hex_digits() {
        assert_eq!(
            send_key("0123456789abcdef0123456789abcdef"),
            Some(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef)
        );
        assert_eq!(send_key(&"f".repeat(32)), Some(u128::MAX));
        for bad in [
            "",
            "0123456789abcdef",
            "0123456789ABCDEF0123456789ABCDEF",
            "+123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcdefa",
            "0123456789abcdeg0123456789abcdef",
        ] {
            assert_eq!(send_key(bad), None, "{bad}");
        }
    }
}
