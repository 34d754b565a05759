//! Turns of the real `canon-hermes serve --stdio` binary against canon-sim, through the fake
//! shim of `shim_support.rs` (hermes-host.md §19): an inbound wake, a streamed turn that
//! ends in exactly one `turn_complete`, a 20 KB answer in ordered parts, `no_reply` and its
//! lifting by `turn.steered`, `turn.accepted` answering the follow-up's turn id, typing and tool
//! hooks, a failed disposition release retried behind later writes, a refused closing publish
//! sent again, and typing coalescing.

use canon_sim::control::Injection;
use canon_sim::{SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};

use super::serve_support::{inject_text, journal, send_streamed, status_fault};
use super::shim_support::{
    complete_turn, ctx, dm_event, open_turn, open_turn_with, sim, Shim, SESSION, WAIT,
};

/// The agent's messages in the direct conversation, in creation order: (text, turnSemantics).
fn agent_messages(sim: &SimHandle) -> Vec<(String, String)> {
    sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.conversation_id == DEFAULT_CONVERSATION)
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .map(|m| {
                (
                    m.message["text"].as_str().unwrap_or_default().to_owned(),
                    m.message["metadata"]["turnSemantics"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    })
}

/// The finalizing `adapter.edit` of `turn_id` in the direct conversation; the response.
async fn edit_final(shim: &mut Shim, turn_id: &str, content: &str) -> Value {
    shim.request(
        "adapter.edit",
        json!({"chat_id": DEFAULT_CONVERSATION, "message_id": turn_id, "content": content,
               "finalize": true, "ctx": ctx()}),
    )
    .await
}

/// `canon_runtime_control` called with `args` in the current turn; the response.
async fn runtime_control(shim: &mut Shim, args: Value) -> Value {
    shim.request(
        "tool.call",
        json!({"name": "canon_runtime_control", "args": args, "ctx": ctx()}),
    )
    .await
}

/// The JSON result of a `tool.call` response.
fn tool_result(tool: &Value) -> Value {
    serde_json::from_str(tool["body"]["result"].as_str().expect("result"))
        .expect("the tool result is JSON")
}

#[tokio::test(flavor = "multi_thread")]
async fn injected_human_message_reaches_the_shim_as_inbound_message() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    inject_text(&sim, "hello from a human");
    let inbound = shim.expect("inbound.message").await;
    assert!(inbound["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("d:")));
    let event = &inbound["body"]["event"];
    assert_eq!(event["text"], "hello from a human");
    assert_eq!(event["source"]["chat_id"], DEFAULT_CONVERSATION);
    assert_eq!(event["source"]["user_id"], DEFAULT_OWNER);
    assert!(!inbound.to_string().contains("replyAuthority"));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn streamed_turn_ends_with_exactly_one_turn_complete() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "what is two plus two").await;

    let sent = send_streamed(&mut shim, "Two plus").await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    assert_eq!(sent["body"]["message_id"], turn_id.as_str());
    let edited = edit_final(&mut shim, &turn_id, "Two plus two is four.").await;
    assert_eq!(edited["body"]["success"], true, "{edited}");
    // Staged, not yet durable (turns.md §7.4).
    assert!(agent_messages(&sim).is_empty());

    complete_turn(&mut shim, &event_ref).await;
    let messages = agent_messages(&sim);
    assert_eq!(
        messages,
        vec![(
            "Two plus two is four.".to_owned(),
            "turn_complete".to_owned()
        )]
    );
    let states: Vec<Value> = sim.read_state(|s| {
        s.turn_history
            .iter()
            .filter(|t| t["turnId"] == turn_id.as_str())
            .map(|t| t["state"].clone())
            .collect()
    });
    assert_eq!(states.first(), Some(&json!("thinking")));
    assert_eq!(states.last(), Some(&json!("completed")));
    assert_eq!(shim.close().await, Some(0));
    assert_eq!(agent_messages(&sim).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_kilobyte_answer_arrives_as_ordered_parts_with_one_turn_complete() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "write a long essay").await;

    let answer: String = (0..300)
        .map(|i| {
            format!("Paragraph {i:03}: the quick brown fox jumps over the lazy dog again.\n\n")
        })
        .collect::<String>()
        .trim_end()
        .to_owned();
    assert!(answer.len() > 20_000);
    // Streamed: the first delta opens the bubble, the finalizing edit carries the whole text.
    let sent = send_streamed(&mut shim, &answer[..100]).await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    let edited = edit_final(&mut shim, &turn_id, &answer).await;
    assert_eq!(edited["body"]["success"], true, "{edited}");
    complete_turn(&mut shim, &event_ref).await;

    let messages = agent_messages(&sim);
    assert!(messages.len() >= 6, "{} parts", messages.len());
    let (last, leading) = messages.split_last().expect("parts");
    assert_eq!(last.1, "turn_complete");
    assert!(leading.iter().all(|(_, semantics)| semantics == "progress"));
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let joined: String = messages.iter().map(|(text, _)| squash(text)).collect();
    assert_eq!(joined, squash(&answer), "parts arrive whole and in order");
    assert!(messages.iter().all(|(text, _)| text.len() <= 3_800));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn no_reply_silences_the_turn_and_records_the_silence() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, _turn_id) = open_turn(&mut shim, &sim, "nothing to say here").await;
    let tool = runtime_control(
        &mut shim,
        json!({"action": "no_reply", "reason": "secret model text"}),
    )
    .await;
    let result = tool_result(&tool);
    assert_eq!(result["status"], "acknowledged", "{tool}");
    complete_turn(&mut shim, &event_ref).await;
    sim.wait_for("silence recorded", WAIT, |s| !s.no_replies.is_empty())
        .await
        .expect("the daemon records the silence");
    let record = sim
        .read_state(|s| s.no_replies.front().cloned())
        .expect("a record");
    assert_eq!(record["conversationId"], DEFAULT_CONVERSATION);
    assert_eq!(record["hasReason"], true);
    assert!(
        agent_messages(&sim).is_empty(),
        "a silenced turn posts nothing"
    );
    assert_eq!(shim.close().await, Some(0));
}

/// Streams `text` into `turn_id` and finalizes it (staged until `turn.complete`).
async fn stage_final(shim: &mut Shim, turn_id: &str, text: &str) {
    let sent = send_streamed(shim, text).await;
    assert_eq!(sent["body"]["success"], true, "{sent}");
    let edited = edit_final(shim, turn_id, text).await;
    assert_eq!(edited["body"]["success"], true, "{edited}");
}

/// `turn.steered` after `no_reply`: the steer lifts the silence (hermes-host.md §12.3 step 5),
/// so the turn's final is delivered after all.
#[tokio::test(flavor = "multi_thread")]
async fn accepted_steer_lifts_the_no_reply_silence() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "nothing to say yet").await;
    let tool = runtime_control(&mut shim, json!({"action": "no_reply"})).await;
    let result = tool_result(&tool);
    assert_eq!(result["status"], "acknowledged", "{tool}");
    shim.write(&json!({"v": 1, "type": "turn.steered",
        "body": {"session_key": SESSION, "chat_id": DEFAULT_CONVERSATION}}))
        .await;
    stage_final(&mut shim, &turn_id, "Steered answer.").await;
    complete_turn(&mut shim, &event_ref).await;
    assert_eq!(
        agent_messages(&sim),
        vec![("Steered answer.".to_owned(), "turn_complete".to_owned())]
    );
    assert_eq!(shim.close().await, Some(0));
}

/// `turn.accepted` (a dequeued follow-up, turns.md OQ-18) answers the follow-up's own turn
/// id, and the follow-up's final lands under it (hermes-host.md §19.6, additive).
#[tokio::test(flavor = "multi_thread")]
async fn turn_accepted_answers_the_follow_ups_turn_id() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (_first_ref, first_turn) = open_turn(&mut shim, &sim, "first question").await;
    stage_final(&mut shim, &first_turn, "First answer.").await;

    inject_text(&sim, "second question");
    let inbound = shim.accept_inbound().await;
    let second_ref = inbound["body"]["event_ref"].as_str().expect("event_ref");
    let message_id = &inbound["body"]["event"]["message_id"];
    let accepted = shim
        .request(
            "turn.accepted",
            json!({"event_ref": second_ref, "session_key": SESSION, "phase": "queue_dequeue",
                   "event": dm_event(message_id.clone())}),
        )
        .await;
    assert_eq!(accepted["ok"], true, "{accepted}");
    let second_turn = accepted["body"]["turn_id"]
        .as_str()
        .expect("turn.accepted answers a turn id")
        .to_owned();
    assert_ne!(second_turn, first_turn);

    stage_final(&mut shim, &second_turn, "Second answer.").await;
    complete_turn(&mut shim, second_ref.to_owned().as_str()).await;
    sim.wait_for("two finals", WAIT, |s| {
        s.messages
            .iter()
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .count()
            >= 2
    })
    .await
    .expect("both turns deliver their final");
    let finals: Vec<(String, String)> = sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .map(|m| {
                (
                    m.message["metadata"]["turnId"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    m.message["text"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    });
    assert_eq!(
        finals,
        [
            (first_turn, "First answer.".to_owned()),
            (second_turn, "Second answer.".to_owned())
        ]
    );
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn typing_and_tool_hooks_are_carried_to_canon() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "use a tool").await;
    shim.write(&json!({"v": 1, "type": "typing",
        "body": {"chat_id": DEFAULT_CONVERSATION, "on": true}}))
        .await;
    shim.write(&json!({"v": 1, "type": "hook.pre_tool_call",
        "body": {"ctx": ctx(), "tool_name": "web_search", "args": {"q": "rust"},
                 "tool_call_id": "call-1"}}))
        .await;
    sim.wait_for("tool state published", WAIT, |s| {
        s.turn_history
            .iter()
            .any(|t| t["turnId"] == turn_id.as_str() && t["state"] == "tool")
    })
    .await
    .expect("the tool start is published as the turn's tool state");
    complete_turn(&mut shim, &event_ref).await;
    assert!(sim.read_state(|s| !s.typing_history.is_empty()));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_disposition_release_is_retried_behind_later_writes() {
    let sim = sim().await;
    let mut fault = status_fault("PATCH", "/conversations/*", 503);
    fault.matcher.nth = Some(vec![1]);
    sim.add_fault(fault).expect("fault installed");
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let injection = Injection {
        text: Some("a queued question".to_owned()),
        metadata: Some(json!({"inboundDisposition": "queued"})),
        ..Injection::default()
    };
    let (event_ref, _turn_id) = open_turn_with(&mut shim, &sim, &injection).await;
    sim.wait_for("disposition retried", WAIT, |s| {
        s.journal.count(Some("PATCH"), "/conversations/") >= 2
    })
    .await
    .expect("the failed release is retried");

    let entries = sim.journal(0, Some("/conversations/"));
    let patches: Vec<_> = entries.iter().filter(|e| e.method == "PATCH").collect();
    assert_eq!(patches.len(), 2, "one failure, one successful retry");
    assert_eq!(patches[0].status, 503);
    assert_eq!(patches[1].status, 200);
    assert_eq!(
        patches[1].body,
        json!({"inboundDisposition": "accepted_now"})
    );
    // The ordered worker did not wait for the retry: the read mark behind
    // the failed release went out before the retry did.
    let read = entries
        .iter()
        .find(|e| e.method == "POST" && e.path.ends_with("/read"))
        .expect("the turn marks the conversation read");
    assert!(patches[0].seq < read.seq && read.seq < patches[1].seq);
    let released = sim.read_state(|s| {
        s.messages.iter().any(|m| {
            m.message["text"] == "a queued question"
                && m.message["metadata"]["inboundDisposition"] == "accepted_now"
        })
    });
    assert!(released, "Canon holds the message as accepted_now");
    complete_turn(&mut shim, &event_ref).await;
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_closing_publish_is_sent_again_until_canon_takes_it() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "close me").await;
    stage_final(&mut shim, &turn_id, "Closed properly.").await;
    // The next two publishes are refused: the next one is the closing `completed` (the
    // rule counts the requests it sees from now on).
    let mut fault = status_fault("POST", "/runtime/turn", 503);
    fault.matcher.nth = Some(vec![1, 2]);
    sim.add_fault(fault).expect("fault installed");
    complete_turn(&mut shim, &event_ref).await;

    let closing: Vec<(u16, Value)> = sim
        .journal(0, Some("/runtime/turn"))
        .iter()
        .filter(|e| e.body["turnId"] == turn_id.as_str() && e.body["state"] == "completed")
        .map(|e| (e.status, e.body["state"].clone()))
        .collect();
    assert_eq!(
        closing
            .iter()
            .map(|(status, _)| *status)
            .collect::<Vec<_>>(),
        vec![503, 503, 200],
        "two refusals, then Canon takes the closing state"
    );
    let last = sim.read_state(|s| {
        s.turn_history
            .iter()
            .rfind(|t| t["turnId"] == turn_id.as_str())
            .map(|t| t["state"].clone())
    });
    assert_eq!(last, Some(json!("completed")));
    assert_eq!(
        agent_messages(&sim),
        vec![("Closed properly.".to_owned(), "turn_complete".to_owned())]
    );
    assert_eq!(shim.close().await, Some(0));
}

/// A turn's opening publish carries `activeMessageIds`, what ties the turn's answer to every
/// message it answers beyond the one its final replies to (a message a follow-up absorbed, a
/// cut-off turn's message that the next turn of its session answers): a refused one is sent
/// again, ahead of the turn's later writes in its conversation.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_opening_publish_is_sent_again_until_canon_takes_it() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    // The next publish, the opening `thinking`, is refused once.
    let mut fault = status_fault("POST", "/runtime/turn", 503);
    fault.matcher.nth = Some(vec![1]);
    sim.add_fault(fault).expect("fault installed");
    let (event_ref, turn_id) = open_turn(&mut shim, &sim, "open me").await;
    stage_final(&mut shim, &turn_id, "Opened properly.").await;
    complete_turn(&mut shim, &event_ref).await;

    let publishes: Vec<(u16, Value, Value)> = sim
        .journal(0, Some("/runtime/turn"))
        .iter()
        .filter(|e| e.body["turnId"] == turn_id.as_str())
        .map(|e| {
            (
                e.status,
                e.body["state"].clone(),
                e.body["activeMessageIds"].clone(),
            )
        })
        .collect();
    let opening: Vec<u16> = publishes
        .iter()
        .filter(|(_, _, active)| active.is_array())
        .map(|(status, _, _)| *status)
        .collect();
    assert_eq!(opening, vec![503, 200], "{publishes:?}");
    let first_landed = publishes
        .iter()
        .find(|(status, _, _)| *status == 200)
        .map(|(_, state, active)| (state.clone(), active.is_array()));
    assert_eq!(
        first_landed,
        Some((json!("thinking"), true)),
        "no later state of the turn lands before its opening one: {publishes:?}"
    );
    assert_eq!(shim.close().await, Some(0));
}

/// The `typing` flag of every `POST /typing` the daemon made, in order.
fn typing_writes(sim: &SimHandle) -> Vec<Value> {
    journal(sim, "/typing")
        .into_iter()
        .filter(|(method, _)| method == "POST")
        .map(|(_, body)| body["typing"].clone())
        .collect()
}

/// hermes-host.md §19.9: repeated `typing on` for one chat reach Canon at most once per 1.5 s;
/// `typing off` always passes and re-arms the chat.
#[tokio::test(flavor = "multi_thread")]
async fn repeated_typing_on_is_coalesced_per_chat() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let typing = |on: bool| json!({"v": 1, "type": "typing", "body": {"chat_id": DEFAULT_CONVERSATION, "on": on}});
    let started = std::time::Instant::now();
    for _ in 0..10 {
        shim.write(&typing(true)).await;
    }
    shim.write(&typing(false)).await;
    // Writes leave in order, so once `off` is in, every earlier write is too.
    sim.wait_for("typing off written", WAIT, |s| {
        s.journal
            .since(0, Some("/typing"))
            .iter()
            .any(|e| e.body["typing"] == false)
    })
    .await
    .expect("typing off reaches Canon");
    let elapsed = started.elapsed();
    let writes = typing_writes(&sim);
    let on = writes.iter().take_while(|t| **t == true).count();
    assert_eq!(writes.get(on), Some(&json!(false)), "{writes:?}");
    // The ten frames were handled within `elapsed`, so coalescing lets through one, plus one
    // per full 1.5 s window that passed (none on any usual machine).
    let allowed = 1 + usize::try_from(elapsed.as_millis() / 1_500).unwrap_or(usize::MAX);
    assert!(
        (1..=allowed).contains(&on),
        "{on} typing-on writes for 10 notifications within {elapsed:?}"
    );

    shim.write(&typing(true)).await;
    sim.wait_for("typing on after off", WAIT, |s| {
        s.journal.count(Some("POST"), "/typing") > on + 1
    })
    .await
    .expect("typing on passes again right after off");
    assert_eq!(typing_writes(&sim).last(), Some(&json!(true)));
    assert_eq!(shim.close().await, Some(0));
}

/// A fault that holds `path`'s first request in `conversation` for 4 s before Canon answers.
fn slow_in(conversation: &str, path: &str) -> canon_sim::faults::FaultRule {
    canon_sim::faults::FaultRule {
        id: String::new(),
        matcher: canon_sim::faults::FaultMatcher {
            method: Some("POST".to_owned()),
            path: Some(path.to_owned()),
            conversation: Some(conversation.to_owned()),
            times: Some(1),
            ..canon_sim::faults::FaultMatcher::default()
        },
        action: canon_sim::faults::FaultAction::DelayBefore { ms: 4_000 },
        seen: 0,
        fired: 0,
    }
}

/// The bodies of `path`'s journaled requests in `conversation` (journaled once answered).
fn answered_in(sim: &SimHandle, path: &str, conversation: &str) -> usize {
    journal(sim, path)
        .iter()
        .filter(|(_, body)| body["conversationId"] == conversation)
        .count()
}

/// Best-effort Canon writes run in one ordered lane per conversation. While the direct
/// conversation's `/runtime/turn` publish (at `turn.start`), then its `/streaming` write (at
/// an edit), hangs, the group's `turn.start` and edit are answered at once; the direct
/// conversation's own replies still wait for the writes they follow, so each arrives only
/// after Canon answered its slow write.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_write_in_one_conversation_delays_no_other_conversations_reply() {
    use super::serve_support::{add_group, GROUP};
    let sim = sim().await;
    add_group(&sim);
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    const GROUP_SESSION: &str = "agent:main:canon:group:c-team";
    let group_ctx = json!({"platform": "canon", "chat_id": GROUP, "session_key": GROUP_SESSION});

    sim.add_fault(slow_in(DEFAULT_CONVERSATION, "/runtime/turn"))
        .expect("fault installed");
    let slow = shim
        .send(
            "turn.start",
            json!({"event_ref": "e-direct", "session_key": SESSION, "event": dm_event("m-direct")}),
        )
        .await;
    let fast = shim
        .send(
            "turn.start",
            json!({"event_ref": "e-group", "session_key": GROUP_SESSION,
                   "event": {"chat_id": GROUP, "chat_type": "group", "user_id": DEFAULT_OWNER,
                             "message_id": "m-group"}}),
        )
        .await;
    let (fast_reply, _) = shim.reply(&fast).await;
    assert_eq!(
        answered_in(&sim, "/runtime/turn", DEFAULT_CONVERSATION),
        0,
        "the group's reply came while the direct publish still hangs"
    );
    assert_eq!(answered_in(&sim, "/runtime/turn", GROUP), 1);
    let (slow_reply, _) = shim.reply(&slow).await;
    assert_eq!(
        answered_in(&sim, "/runtime/turn", DEFAULT_CONVERSATION),
        1,
        "the direct reply waited for its publish"
    );
    let turn = |reply: &Value| {
        reply["body"]["turn_id"]
            .as_str()
            .expect("a turn")
            .to_owned()
    };
    let (direct_turn, group_turn) = (turn(&slow_reply), turn(&fast_reply));

    sim.add_fault(slow_in(DEFAULT_CONVERSATION, "/streaming"))
        .expect("fault installed");
    let slow = shim
        .send(
            "adapter.edit",
            json!({"chat_id": DEFAULT_CONVERSATION, "message_id": direct_turn,
                   "content": "Thinking it over", "finalize": false, "ctx": ctx()}),
        )
        .await;
    let fast = shim
        .send(
            "adapter.edit",
            json!({"chat_id": GROUP, "message_id": group_turn, "content": "Working on it",
                   "finalize": false, "ctx": group_ctx}),
        )
        .await;
    let (fast_reply, _) = shim.reply(&fast).await;
    assert_eq!(fast_reply["ok"], true, "{fast_reply}");
    assert_eq!(
        answered_in(&sim, "/streaming", DEFAULT_CONVERSATION),
        0,
        "the group's edit was answered while the direct streaming write still hangs"
    );
    assert_eq!(answered_in(&sim, "/streaming", GROUP), 1);
    let (slow_reply, _) = shim.reply(&slow).await;
    assert_eq!(slow_reply["ok"], true, "{slow_reply}");
    assert_eq!(answered_in(&sim, "/streaming", DEFAULT_CONVERSATION), 1);
    assert_eq!(shim.close().await, Some(0));
}
