//! Out-of-turn sends of the real `canon-hermes serve --stdio` binary against canon-sim,
//! through the fake shim of `shim_support.rs` (hermes-host.md §19): one standalone id group
//! through `send_to`, replayed without duplicates after an ambiguous failure.

use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};
use canon_sim::{SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::{json, Value};

use super::serve_support::{assert_one_group, journal};
use super::shim_support::{sim, Shim};

/// A 10 KB cron report: 200 lines, 10,400 bytes, three parts.
fn cron_text() -> String {
    (0..200)
        .map(|i| format!("Cron line {i:03}: the nightly report says all is well.\n"))
        .collect()
}

/// `adapter.send` outside any turn, as Hermes' in-process cron delivers through the live
/// adapter (hermes-host.md §10, §15): no session, no `notify`, so no turn id (turns.md §7.6).
async fn send_out_of_turn(shim: &mut Shim, text: &str, metadata: Value) -> Value {
    shim.request(
        "adapter.send",
        json!({"chat_id": DEFAULT_CONVERSATION, "content": text, "reply_to": null,
               "metadata": metadata, "ctx": {}}),
    )
    .await
}

/// The agent's stored messages in the direct conversation: (client id, message).
fn stored_parts(sim: &SimHandle) -> Vec<(Option<String>, Value)> {
    sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.conversation_id == DEFAULT_CONVERSATION)
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .map(|m| (m.client_id.clone(), m.message.clone()))
            .collect()
    })
}

/// The `messageId` a `send_to` journal entry was answered with (null when none).
fn verb_message_id(response: &Value) -> &Value {
    &response["result"]["value"]["messageId"]
}

/// Lead decision on turns.md §7.6 vs §4.6: a send without a turn id is one standalone id
/// group, `hermes-final-<32 hex>` with `-part-i` ids and `messageChunk.groupId`, sent part by
/// part through `send_to` with the part id as `idempotencyKey`.
#[tokio::test(flavor = "multi_thread")]
async fn out_of_turn_send_is_one_durable_chunked_message_group() {
    let sim = sim().await;
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    let text = cron_text();
    assert!(text.len() > 10_000);
    let sent = send_out_of_turn(&mut shim, &text, json!({"job_id": "job-1"})).await;
    assert_eq!(sent["body"]["success"], true, "{sent}");

    let parts = stored_parts(&sim);
    assert_eq!(parts.len(), 3, "10 KB in 3,800-byte parts");
    let base = assert_one_group(&parts, &text);
    let count = parts.len();
    for (i, (_, message)) in parts.iter().enumerate() {
        let metadata = &message["metadata"];
        assert_eq!(metadata["hermes"], json!({"job_id": "job-1"}));
        assert!(metadata.get("turnTrail").is_none(), "{metadata}");
        if i + 1 < count {
            assert!(metadata.get("turnComplete").is_none(), "{metadata}");
        }
    }
    assert_eq!(sent["body"]["message_id"], parts[count - 1].1["id"]);

    let sends = journal(&sim, "/agent/verbs/send_to");
    assert_eq!(sends.len(), count, "one request per part, no retries");
    for ((method, body), (client_id, _)) in sends.iter().zip(&parts) {
        assert_eq!(method, "POST");
        assert_eq!(body["verb"], "send_to");
        assert_eq!(
            body["envelope"],
            json!({"conversationId": DEFAULT_CONVERSATION, "idempotencyKey": client_id})
        );
    }
    assert!(journal(&sim, "/messages/send").is_empty());

    // A second send of the same text is a new invocation: a new id group. Its `reply_to`
    // rides in the envelope on every part (canon-wire.md §4.15 [target]).
    let reply_to = parts[count - 1].1["id"].clone();
    let again = shim
        .request(
            "adapter.send",
            json!({"chat_id": DEFAULT_CONVERSATION, "content": text, "reply_to": reply_to,
                   "metadata": null, "ctx": {}}),
        )
        .await;
    assert_eq!(again["body"]["success"], true, "{again}");
    let all = stored_parts(&sim);
    assert_eq!(all.len(), 2 * count);
    let second_base = &all[count].1["metadata"]["messageChunk"]["groupId"];
    assert_ne!(second_base, &json!(base));
    assert!(all[count..]
        .iter()
        .all(|(id, _)| id.as_deref().is_some_and(|id| !id.starts_with(&base))));
    assert!(all[count..].iter().all(|(_, m)| m["replyTo"] == reply_to));
    let sends = journal(&sim, "/agent/verbs/send_to");
    assert!(sends[count..]
        .iter()
        .all(|(_, body)| body["envelope"]["replyTo"] == reply_to));
    assert_eq!(shim.close().await, Some(0));
}

/// turns.md §4.5 and §4.7 for a send without a turn id: an ambiguous failure of one part
/// (processed, then the connection dropped or a 502) is replayed with identical bytes under
/// the same `idempotencyKey`, and Canon stores exactly one copy of every part.
#[tokio::test(flavor = "multi_thread")]
async fn out_of_turn_send_replays_an_ambiguous_part_without_duplicates() {
    for (nth, action) in [
        (1, FaultAction::ProcessThenDrop),
        (3, FaultAction::ProcessThenStatus { status: 502 }),
    ] {
        let sim = sim().await;
        sim.add_fault(FaultRule {
            id: String::new(),
            matcher: FaultMatcher {
                method: Some("POST".to_owned()),
                path: Some("/agent/verbs/send_to".to_owned()),
                agent: Some(DEFAULT_AGENT.to_owned()),
                nth: Some(vec![nth]),
                ..FaultMatcher::default()
            },
            action: action.clone(),
            seen: 0,
            fired: 0,
        })
        .expect("fault installed");
        let mut shim = Shim::spawn(&sim);
        shim.connect(&sim).await;
        let text = cron_text();
        let sent = send_out_of_turn(&mut shim, &text, Value::Null).await;
        assert_eq!(sent["body"]["success"], true, "{action:?}: {sent}");

        let parts = stored_parts(&sim);
        assert_eq!(parts.len(), 3, "{action:?}: one stored copy of each part");
        let ids: Vec<&str> = parts
            .iter()
            .map(|(id, _)| id.as_deref().expect("a client id"))
            .collect();
        let texts: Vec<&str> = parts
            .iter()
            .map(|(_, m)| m["text"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(texts.join("\n"), text, "{action:?}: nothing lost");

        let entries = sim.journal(0, Some("/agent/verbs/send_to"));
        let statuses: Vec<u16> = entries.iter().map(|e| e.status).collect();
        let keys: Vec<&str> = entries
            .iter()
            .map(|e| e.body["envelope"]["idempotencyKey"].as_str().unwrap_or(""))
            .collect();
        let first = nth as usize - 1;
        let mut expected_statuses = vec![200; 4];
        expected_statuses[first] = match action {
            FaultAction::ProcessThenStatus { status } => status,
            _ => 0,
        };
        assert_eq!(statuses, expected_statuses, "{action:?}");
        let mut expected_keys = ids.clone();
        expected_keys.insert(first, ids[first]);
        assert_eq!(keys, expected_keys, "{action:?}: the replay reuses the id");
        assert!(
            entries[first].body == entries[first + 1].body,
            "{action:?}: the replay sends identical bytes"
        );
        // The failed attempt was processed and stored the part; the replay was answered with
        // that very message.
        let stored = &parts[first].1["id"];
        assert_eq!(verb_message_id(&entries[first + 1].response), stored);
        if matches!(action, FaultAction::ProcessThenDrop) {
            assert_eq!(verb_message_id(&entries[first].response), stored);
        }
        assert_eq!(sent["body"]["message_id"], parts[2].1["id"]);
        assert!(journal(&sim, "/messages/send").is_empty());
        assert_eq!(shim.close().await, Some(0));
    }
}
