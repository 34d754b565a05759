//! `canon_communicate` end to end (runtime-control.md §5): a real Hermes gateway registers the
//! tool from the manifest with the daemon's availability verdict as its `check_fn`; the scripted
//! model calls every action; the daemon validates, makes the one Canon call and maps the
//! result. One gateway per outbound policy of the agent; the pure twin is
//! `crates/host/src/session/tests/communicate.rs`.
//!
//! | scenario | spec |
//! |---|---|
//! | `open`: every action reaches Canon and its result reaches the model (a directory page and the next, a message, a new direct conversation and a request, a group with added, pending and skipped members, a forward, a contact, members added, removed and pending) | runtime-control.md §5.4, §5.5 |
//! | `approval-required`: the tool is offered; the operator-gated actions answer `approval_required` | runtime-control.md §5.1, §5.5 |
//! | `closed`: the tool is not offered; offered again once `agent.context` opens the policy and withheld again once it closes; a call under a closed policy is refused before anything reaches Canon | runtime-control.md §5.1 |

use std::collections::BTreeSet;

use canon_sim::control::Injection;
use canon_sim::model::ModelServer;
use canon_sim::state::{ConversationSpec, PrincipalSpec};
use canon_sim::{Sim, SimHandle, State, DEFAULT_AGENT, DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};

use super::gateway_support::{start_gateway_prepared, GatewayOptions};
use super::hermes_support::{live_clock_config, model_server, Scenario};

/// A group of the owner and the agent, where messages are posted, forwarded from and members
/// managed.
const TEAM: &str = "c-team";
/// Two more direct conversations with the owner, each a session (and so an agent) of its own.
const SECOND: &str = "c-second";
const THIRD: &str = "c-third";
/// A discoverable agent that accepts direct messages and is the agent's contact.
const HELPER: &str = "a-helper";
/// A discoverable agent whose direct messages need its approval.
const GATED: &str = "a-gated";
/// Humans by group-join policy.
const JOINS: &str = "h-open";
const ASKS: &str = "h-ask";
const REFUSES: &str = "h-shut";

/// The principals and conversations the actions reach, the agent's outbound `policy`; returns
/// the id of the owner's message in [`TEAM`] that `forward_message` forwards.
fn populate(sim: &SimHandle, policy: &str) -> String {
    for (id, kind, name, owner, inbound, join, description) in [
        (
            HELPER,
            "ai_agent",
            "Helper",
            Some("h-ann"),
            "open",
            "open",
            "Helps with launches",
        ),
        (
            GATED,
            "ai_agent",
            "Gatekeeper",
            Some("h-ann"),
            "approval-required",
            "open",
            "",
        ),
        ("h-ann", "human", "Ann", None, "open", "open", ""),
        (JOINS, "human", "Olive", None, "open", "open", ""),
        (
            ASKS,
            "human",
            "Asher",
            None,
            "open",
            "approval-required",
            "",
        ),
        (REFUSES, "human", "Shut", None, "open", "closed", ""),
    ] {
        sim.create_principal(PrincipalSpec {
            id: Some(id.into()),
            kind: kind.into(),
            display_name: Some(name.into()),
            owner_id: owner.map(str::to_owned),
            inbound_policy: Some(inbound.into()),
            group_join_policy: Some(join.into()),
            description: Some(description.into()),
            ..PrincipalSpec::default()
        });
    }
    sim.with_state(|s| {
        let agent = s.principals.get_mut(DEFAULT_AGENT).expect("the agent");
        agent.outbound_policy = policy.into();
        agent.contacts.push(HELPER.into());
    });
    sim.create_conversation(ConversationSpec {
        id: Some(TEAM.into()),
        kind: "group".into(),
        name: Some("Team".into()),
        member_ids: vec![DEFAULT_OWNER.into(), DEFAULT_AGENT.into()],
        behavior: None,
    });
    for id in [SECOND, THIRD] {
        sim.create_conversation(ConversationSpec {
            id: Some(id.into()),
            kind: "direct".into(),
            name: Some("Owner".into()),
            member_ids: vec![DEFAULT_OWNER.into(), DEFAULT_AGENT.into()],
            behavior: None,
        });
    }
    // Before the gateway connects, so it never wakes a turn.
    let minutes = sim
        .inject_message(&Injection {
            conversation_id: Some(TEAM.into()),
            text: Some("Minutes: we ship on Friday".into()),
            ..Injection::default()
        })
        .expect("inject");
    minutes["id"].as_str().expect("a message id").to_owned()
}

/// One model step: the human's text contains `keyword` (or, for a chained call, the previous
/// tool result contains it) and the model calls `canon_communicate` with `args` as `id`.
fn call_rule(role: &str, keyword: &str, id: &str, args: Value) -> Value {
    json!({"match": {"role": role, "contains": keyword},
           "reply": {"toolCall": {"name": "canon_communicate", "arguments": args, "id": id}}})
}

/// A scenario whose simulator is populated for `policy` before the model (whose `rules` may
/// name the message to forward) and the gateway start.
async fn started(policy: &str, rules: impl FnOnce(&str) -> Vec<Value>) -> Scenario {
    let sim = Sim::start(live_clock_config())
        .await
        .expect("the simulator starts");
    let minutes = populate(&sim, policy);
    let mut all = rules(&minutes);
    all.push(json!({"match": {"role": "tool"}, "reply": {"echoToolResult": true, "prefix": "Tool said: "}}));
    all.push(json!({"match": {}, "reply": {"text": "Nothing to do."}}));
    let model: ModelServer = model_server(Value::from(all)).await;
    let gateway = tokio::task::block_in_place(|| {
        start_gateway_prepared(&sim, &model, &GatewayOptions::default(), |_| {})
    });
    Scenario::ready(sim, model, gateway).await
}

/// The distinct agent turns of `conversation` that published a closing state.
fn closed_turns(s: &State, conversation: &str) -> usize {
    s.turn_history
        .iter()
        .filter(|t| t["conversationId"] == conversation && t["agent"] == DEFAULT_AGENT)
        .filter(|t| matches!(t["state"].as_str(), Some("completed" | "interrupted")))
        .filter_map(|t| t["turnId"].as_str())
        .collect::<BTreeSet<_>>()
        .len()
}

impl Scenario {
    /// The owner says `text` in `conversation`; returns once that turn closed.
    async fn say(&self, conversation: &str, text: &str) {
        let before = self.sim.read_state(|s| closed_turns(s, conversation));
        self.inject(Injection {
            conversation_id: Some(conversation.into()),
            text: Some(text.into()),
            ..Injection::default()
        });
        let conversation = conversation.to_owned();
        self.wait(&format!("the turn of {text:?} closed"), move |s| {
            closed_turns(s, &conversation) > before
        })
        .await;
    }

    /// The tool result the model got for `call_id`, parsed.
    fn result(&self, call_id: &str) -> Value {
        let text = self.tool_message(call_id);
        serde_json::from_str(&text).unwrap_or_else(|_| self.fail(&format!("not JSON: {text}")))
    }

    /// The tools offered in the model's request for the human message containing `keyword`.
    fn offered(&self, keyword: &str) -> Vec<String> {
        let request = self
            .turn_requests()
            .into_iter()
            .find(|r| {
                r["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .is_some_and(|m| {
                        m["role"] == "user"
                            && m["content"].as_str().is_some_and(|c| c.contains(keyword))
                    })
            })
            .unwrap_or_else(|| self.fail(&format!("no model request for {keyword}")));
        request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// The agent's Canon calls of `canon_communicate`: verbs (but `no_reply`) and directory
    /// pages, as `(method path?query, request body, status)`.
    fn communicate_calls(&self) -> Vec<(String, Value, u16)> {
        let verbs = self.sim.journal(0, Some("/agent/verbs/"));
        let pages = self.sim.journal(0, Some("/agents/discover"));
        let mut calls: Vec<_> = verbs
            .into_iter()
            .chain(pages)
            .filter(|e| e.principal.as_deref() == Some(DEFAULT_AGENT))
            .filter(|e| e.path != "/agent/verbs/no_reply")
            .collect();
        calls.sort_by_key(|e| e.seq);
        calls
            .into_iter()
            .map(|e| {
                let target = if e.query.is_empty() {
                    e.path.clone()
                } else {
                    format!("{}?{}", e.path, e.query)
                };
                (format!("{} {target}", e.method), e.body, e.status)
            })
            .collect()
    }
}

/// The actions and the requests they make, under any policy (`forward` needs the id of the
/// message it forwards).
fn actions(minutes: &str) -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "DISCOVER",
            "call_discover",
            json!({"action": "discover_agents", "query": "", "limit": 1}),
        ),
        (
            "POST",
            "call_message",
            json!({"action": "message_existing", "conversationId": TEAM,
                   "text": "Status: on track", "messageId": "comm-status-1"}),
        ),
        (
            "DIRECT",
            "call_direct",
            json!({"action": "start_direct", "principalId": HELPER, "text": "Hello Helper",
                   "selection": {"mode": "new"}}),
        ),
        (
            "GROUP",
            "call_group",
            json!({"action": "create_group", "name": "Launch",
                   "memberIds": [JOINS, ASKS, REFUSES, JOINS]}),
        ),
        (
            "FORWARD",
            "call_forward",
            json!({"action": "forward_message", "sourceConversationId": TEAM,
                   "targetConversationId": DEFAULT_CONVERSATION, "messageId": minutes,
                   "text": "FYI"}),
        ),
        (
            "SHARE",
            "call_share",
            json!({"action": "share_contact", "conversationId": DEFAULT_CONVERSATION,
                   "contactUserId": HELPER, "text": "Meet Helper"}),
        ),
        (
            "MEMBERS",
            "call_add",
            json!({"action": "manage_group_members", "conversationId": TEAM, "userId": JOINS,
                   "operation": "add"}),
        ),
    ]
}

fn user_rules(minutes: &str) -> Vec<Value> {
    actions(minutes)
        .into_iter()
        .map(|(keyword, id, args)| call_rule("user", &format!("{keyword} now"), id, args))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_communicate_open_policy_reaches_canon_with_every_action() {
    let sc = started("open", |minutes| {
        let mut rules = vec![
            // Chained calls, recognized by the previous result.
            call_rule(
                "tool",
                "\"nextCursor\":\"cur-1:\"",
                "call_discover_next",
                json!({"action": "discover_agents", "query": "", "limit": 1, "cursor": "cur-1:"}),
            ),
            call_rule(
                "tool",
                "\"created\":true",
                "call_gated",
                json!({"action": "start_direct", "principalId": GATED, "text": "Hi"}),
            ),
            call_rule(
                "tool",
                "\"status\":\"added\"",
                "call_remove",
                json!({"action": "manage_group_members", "conversationId": TEAM,
                       "userId": JOINS, "operation": "remove"}),
            ),
            call_rule(
                "tool",
                "\"status\":\"removed\"",
                "call_invite",
                json!({"action": "manage_group_members", "conversationId": TEAM,
                       "userId": ASKS, "operation": "add"}),
            ),
        ];
        rules.extend(user_rules(minutes));
        rules
    })
    .await;
    let minutes = sc.sim.read_state(|s| {
        s.messages
            .iter()
            .find(|m| m.conversation_id == TEAM)
            .and_then(|m| m.message["id"].as_str().map(str::to_owned))
            .expect("the minutes")
    });
    for (keyword, _, _) in actions(&minutes) {
        sc.say(DEFAULT_CONVERSATION, &format!("{keyword} now"))
            .await;
    }
    assert!(sc
        .offered("DISCOVER now")
        .contains(&"canon_communicate".to_owned()));

    // discover_agents: one page of one agent, then the next with the page's cursor.
    let first = sc.result("call_discover");
    assert_eq!(first["success"], true, "{first}");
    assert_eq!(first["status"], "discovered", "{first}");
    assert_eq!(first["agents"].as_array().map(Vec::len), Some(1), "{first}");
    assert_eq!(first["nextCursor"], "cur-1:", "{first}");
    let next = sc.result("call_discover_next");
    assert_eq!(next["status"], "discovered", "{next}");
    let listed: BTreeSet<String> = [&first, &next]
        .iter()
        .flat_map(|page| page["agents"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a["principalId"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(listed.len(), 2, "two different agents: {listed:?}");
    let helper = [&first, &next]
        .iter()
        .flat_map(|page| page["agents"].as_array().cloned().unwrap_or_default())
        .find(|a| a["principalId"] == HELPER);
    if let Some(helper) = helper {
        assert_eq!(
            helper,
            json!({"principalId": HELPER, "displayName": "Helper",
                   "owner": {"principalId": "h-ann", "displayName": "Ann"},
                   "inboundPolicy": "open", "groupJoinPolicy": "open", "shareable": true,
                   "description": "Helps with launches"})
        );
    }

    // message_existing: the text in the team, its key as the client id, a complete turn.
    let posted = sc.result("call_message");
    assert_eq!(posted["status"], "messaged", "{posted}");
    assert_eq!(posted["conversationId"], TEAM);
    let stored = sc.sim.read_state(|s| {
        s.messages
            .iter()
            .find(|m| m.message["id"] == posted["messageId"])
            .cloned()
    });
    let stored = stored.unwrap_or_else(|| sc.fail("the message is in Canon"));
    assert_eq!(stored.conversation_id, TEAM);
    assert_eq!(stored.message["text"], "Status: on track");
    assert_eq!(stored.message["metadata"]["turnSemantics"], "turn_complete");
    assert_eq!(stored.client_id.as_deref(), Some("comm-status-1"));

    // start_direct: a new conversation with the helper; the gated agent is only requested.
    let direct = sc.result("call_direct");
    assert_eq!(direct["status"], "messaged", "{direct}");
    assert_eq!(direct["created"], true, "{direct}");
    let new_id = direct["conversationId"].as_str().expect("an id").to_owned();
    let members = sc.sim.read_state(|s| {
        s.conversations
            .get(&new_id)
            .map(|c| (c.kind.clone(), c.member_ids.clone()))
    });
    assert_eq!(
        members,
        Some((
            "direct".to_owned(),
            vec![DEFAULT_AGENT.to_owned(), HELPER.to_owned()]
        ))
    );
    let gated = sc.result("call_gated");
    assert_eq!(gated["status"], "requested", "{gated}");
    assert!(gated["requestId"].is_string(), "{gated}");
    assert_eq!(gated.as_object().map(|o| o.len()), Some(3), "{gated}");

    // create_group: one joined, one invited, one refused; the duplicate sent once.
    let group = sc.result("call_group");
    assert_eq!(group["status"], "created", "{group}");
    assert_eq!(group["added"], json!([JOINS]), "{group}");
    assert_eq!(group["pending"][0]["userId"], ASKS, "{group}");
    assert!(group["pending"][0]["requestId"].is_string(), "{group}");
    assert_eq!(
        group["skipped"],
        json!([{"userId": REFUSES, "reason": "closed"}])
    );
    let group_id = group["conversationId"].as_str().expect("an id").to_owned();
    let group_members = sc
        .sim
        .read_state(|s| s.conversations.get(&group_id).map(|c| c.member_ids.clone()));
    assert_eq!(
        group_members,
        Some(vec![DEFAULT_AGENT.to_owned(), JOINS.to_owned()])
    );

    // forward_message and share_contact land in the direct conversation.
    let forwarded = sc.result("call_forward");
    assert_eq!(
        forwarded,
        json!({"success": true, "status": "forwarded", "messageId": forwarded["messageId"],
               "targetConversationId": DEFAULT_CONVERSATION})
    );
    let shared = sc.result("call_share");
    assert_eq!(shared["status"], "shared", "{shared}");
    assert_eq!(shared["conversationId"], DEFAULT_CONVERSATION);
    let (forward_message, card_message) = sc.sim.read_state(|s| {
        let find = |id: &Value| {
            s.messages
                .iter()
                .find(|m| m.message["id"] == *id)
                .map(|m| m.message.clone())
        };
        (find(&forwarded["messageId"]), find(&shared["messageId"]))
    });
    let forward_message = forward_message.unwrap_or_else(|| sc.fail("the forward is in Canon"));
    assert_eq!(forward_message["text"], "FYI");
    assert_eq!(
        forward_message["forwardedFrom"],
        json!({"sourceConversationId": TEAM, "messageId": minutes})
    );
    let card_message = card_message.unwrap_or_else(|| sc.fail("the contact is in Canon"));
    assert_eq!(
        card_message["contentType"], "contact_card",
        "{card_message}"
    );

    // manage_group_members: added, removed, then an invitation that waits.
    assert_eq!(
        sc.result("call_add"),
        json!({"success": true, "status": "added", "conversationId": TEAM, "userId": JOINS})
    );
    assert_eq!(
        sc.result("call_remove"),
        json!({"success": true, "status": "removed", "conversationId": TEAM, "userId": JOINS})
    );
    let invited = sc.result("call_invite");
    assert_eq!(invited["status"], "pending", "{invited}");
    let team = sc
        .sim
        .read_state(|s| s.conversations.get(TEAM).map(|c| c.member_ids.clone()));
    assert_eq!(
        team,
        Some(vec![DEFAULT_OWNER.to_owned(), DEFAULT_AGENT.to_owned()])
    );

    // One Canon call per tool call, each the wire the reference sends.
    let calls = sc.communicate_calls();
    let shown: Vec<(&str, u16)> = calls.iter().map(|(c, _, s)| (c.as_str(), *s)).collect();
    assert_eq!(
        shown,
        [
            ("GET /agents/discover?query=&limit=1", 200),
            ("GET /agents/discover?query=&limit=1&cursor=cur-1%3A", 200),
            ("POST /agent/verbs/send_to", 200),
            ("POST /agent/verbs/send_to", 200),
            ("POST /agent/verbs/send_to", 200),
            ("POST /agent/verbs/create_group", 200),
            ("POST /agent/verbs/forward", 200),
            ("POST /agent/verbs/share_contact", 200),
            ("POST /agent/verbs/add_member", 200),
            ("POST /agent/verbs/remove_member", 200),
            ("POST /agent/verbs/add_member", 200),
        ],
        "{calls:#?}"
    );
    assert_eq!(
        calls[2].1,
        json!({"wire": "canon.verb-wire.v1", "verb": "send_to",
               "envelope": {"conversationId": TEAM, "idempotencyKey": "comm-status-1"},
               "body": {"encoding": "json", "value": {"text": "Status: on track",
                        "messageOptions": {"metadata": {"turnSemantics": "turn_complete"}}}}})
    );
    // Without the model's messageId, a send inside a turn is keyed by the turn and the call.
    let mut envelope = calls[3].1["envelope"].clone();
    let key = envelope
        .as_object_mut()
        .and_then(|e| e.remove("idempotencyKey"))
        .unwrap_or_default();
    assert!(
        key.as_str().is_some_and(|k| k.starts_with("hermes-call-")),
        "{key}"
    );
    assert_eq!(
        envelope,
        json!({"targetUserId": HELPER, "sessionSelection": {"mode": "new"}})
    );
    assert_eq!(
        calls[5].1["envelope"],
        json!({"memberIds": [JOINS, ASKS, REFUSES]})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_communicate_approval_required_policy_answers_approval_required() {
    let sc = started("approval-required", user_rules).await;
    let minutes = sc.sim.read_state(|s| {
        s.messages
            .iter()
            .find(|m| m.conversation_id == TEAM)
            .and_then(|m| m.message["id"].as_str().map(str::to_owned))
            .expect("the minutes")
    });
    for (keyword, _, _) in actions(&minutes) {
        sc.say(DEFAULT_CONVERSATION, &format!("{keyword} now"))
            .await;
    }
    assert!(sc
        .offered("DISCOVER now")
        .contains(&"canon_communicate".to_owned()));
    // The directory and a message into a conversation the agent is in need no operator.
    assert_eq!(sc.result("call_discover")["status"], "discovered");
    assert_eq!(sc.result("call_message")["status"], "messaged");
    let approval_required = json!({"success": true, "status": "approval_required",
                                   "reason": "The agent operator must approve this outbound action."});
    for id in [
        "call_direct",
        "call_group",
        "call_forward",
        "call_share",
        "call_add",
    ] {
        assert_eq!(sc.result(id), approval_required, "{id}");
    }
    // Canon was asked each time and refused with the operator's code; nothing was created.
    let calls = sc.communicate_calls();
    let refused: Vec<&str> = calls
        .iter()
        .filter(|(_, _, status)| *status == 403)
        .map(|(call, _, _)| call.as_str())
        .collect();
    assert_eq!(
        refused,
        [
            "POST /agent/verbs/send_to",
            "POST /agent/verbs/create_group",
            "POST /agent/verbs/forward",
            "POST /agent/verbs/share_contact",
            "POST /agent/verbs/add_member",
        ],
        "{calls:#?}"
    );
    let conversations = sc.sim.read_state(|s| s.conversations.len());
    assert_eq!(
        conversations, 4,
        "no conversation was created (direct, team, second, third)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_communicate_closed_policy_withholds_the_tool_and_refuses_calls() {
    let sc = started("closed", |minutes| {
        let mut rules = vec![
            json!({"match": {"role": "user", "contains": "HELLO"}, "reply": {"text": "Hello."}}),
            call_rule(
                "user",
                "REDISCOVER",
                "call_rediscover",
                json!({"action": "discover_agents"}),
            ),
        ];
        rules.extend(user_rules(minutes));
        rules
    })
    .await;
    let minutes = sc.sim.read_state(|s| {
        s.messages
            .iter()
            .find(|m| m.conversation_id == TEAM)
            .and_then(|m| m.message["id"].as_str().map(str::to_owned))
            .expect("the minutes")
    });
    // Closed from the start: the model is not offered the tool.
    sc.say(DEFAULT_CONVERSATION, "HELLO first").await;
    let offered = sc.offered("HELLO first");
    assert!(
        offered.contains(&"canon_runtime_control".to_owned()),
        "{offered:?}"
    );
    assert!(
        !offered.contains(&"canon_communicate".to_owned()),
        "{offered:?}"
    );

    // Opened by `agent.context`: the next session's agent is offered it, and it works.
    set_policy(&sc, "open");
    sc.say(SECOND, "DISCOVER now").await;
    assert!(sc
        .offered("DISCOVER now")
        .contains(&"canon_communicate".to_owned()));
    assert_eq!(sc.result("call_discover")["status"], "discovered");
    let reached = sc.communicate_calls().len();
    assert_eq!(reached, 1);

    // Closed again: that session's agent still lists the tool, but every action is refused
    // before its arguments are read and nothing reaches Canon.
    set_policy(&sc, "closed");
    for (keyword, id, _) in actions(&minutes).into_iter().skip(1) {
        sc.say(SECOND, &format!("{keyword} now")).await;
        assert_eq!(
            sc.result(id),
            json!({"error": "Canon proactive communication is closed", "success": false}),
            "{id}"
        );
    }
    sc.say(SECOND, "REDISCOVER now").await;
    assert_eq!(
        sc.result("call_rediscover"),
        json!({"error": "Canon proactive communication is closed", "success": false})
    );
    assert_eq!(
        sc.communicate_calls().len(),
        reached,
        "{:#?}",
        sc.communicate_calls()
    );

    // A new session is not offered the tool any more.
    sc.say(THIRD, "HELLO third").await;
    assert!(!sc
        .offered("HELLO third")
        .contains(&"canon_communicate".to_owned()));
}

/// Changes the agent's outbound policy in Canon and pushes it in an `agent.context` frame;
/// returns once the daemon has read it (the frame is in its stream before anything after it).
fn set_policy(sc: &Scenario, policy: &str) {
    sc.sim.with_state(|s| {
        if let Some(agent) = s.principals.get_mut(DEFAULT_AGENT) {
            agent.outbound_policy = policy.into();
        }
    });
    sc.sim.push_agent_context(DEFAULT_AGENT);
}
