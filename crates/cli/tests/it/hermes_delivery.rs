//! Delivery of answers end to end with a real Hermes gateway (scenario in
//! `hermes_support.rs`): long answers in ordered parts, the replay of an ambiguous final, a
//! cron job's standalone delivery, and the home channel Hermes is told about.
//!
//! | scenario | spec |
//! |---|---|
//! | 20 KB answer: ordered parts, one `turn_complete` | canon-wire.md §8.4, turns.md §3–4 |
//! | ambiguous failure of the final: replay under the same id | turns.md §4.4, §4.7 |
//! | cron job to the home channel: untruncated parts, one standalone id group via `send_to` | hermes-host.md §15, turns.md §4.6 |
//! | the home channel reaches Hermes under `CANON_HOME_CHANNEL_NAME` (default `Canon Home`) | cli.md §8.2, hermes-host.md §7.3 |

use std::time::Duration;

use canon_sim::config::SimConfig;
use canon_sim::control::Injection;
use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};
use canon_sim::{ConversationSpec, Sim, State, DEFAULT_AGENT, DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};

use super::gateway_support::{hermes_cli, start_gateway, GatewayOptions, ANSWER};
use super::hermes_support::{is_turn_complete, model_server, semantics, Scenario};

/// A 20 KB answer with multi-byte text and no separators (U+0020, LF), so every cut is a hard
/// cut that consumes nothing (turns.md §3.3) and the parts concatenate back byte for byte.
fn long_answer() -> String {
    let mut text = String::new();
    let mut n = 0;
    while text.len() < 20 * 1024 {
        n += 1;
        text.push_str(&format!("Part-{n:04}:Ωé漢😀|"));
    }
    text
}

/// `text` in pieces of about `size` bytes, cut on char boundaries.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let mut out = vec![String::new()];
    for c in text.chars() {
        if out.last().is_some_and(|p| p.len() >= size) {
            out.push(String::new());
        }
        if let Some(p) = out.last_mut() {
            p.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_long_answer_arrives_as_ordered_parts() {
    let answer = long_answer();
    let sc = Scenario::start(
        json!([{"match": {}, "reply": {"deltas": pieces(&answer, 700), "delayMs": 5}}]),
        GatewayOptions::default(),
    )
    .await;
    let inbound = sc.inject(Injection {
        text: Some("write me something long".into()),
        ..Injection::default()
    });
    let inbound_id = inbound["id"].as_str().expect("an id").to_owned();
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let turn_id = sc.turn_history(DEFAULT_CONVERSATION)[0]["turnId"]
        .as_str()
        .expect("a turn id")
        .to_owned();

    let parts = sc.agent_messages_with_ids(DEFAULT_CONVERSATION);
    let count = parts.len();
    assert!(count >= 6, "20 KB in parts of at most 3,800 bytes: {count}");
    let base = parts[0].1["metadata"]["messageChunk"]["groupId"]
        .as_str()
        .expect("a group id")
        .to_owned();
    assert!(
        base.starts_with("hermes-final-") && base.len() == 45,
        "{base}"
    );
    for (i, (client_id, part)) in parts.iter().enumerate() {
        let index = i + 1;
        let metadata = &part["metadata"];
        assert_eq!(
            client_id.as_deref(),
            Some(format!("{base}-part-{index}").as_str())
        );
        assert_eq!(
            metadata["messageChunk"],
            json!({"type": "text", "index": index, "count": count, "groupId": base})
        );
        assert_eq!(metadata["turnId"], turn_id.as_str());
        assert_eq!(part["replyTo"], inbound_id.as_str());
        let text = part["text"].as_str().expect("text");
        assert!(text.len() <= 3_800, "part {index} has {} bytes", text.len());
        if index < count {
            assert_eq!(semantics(part), "progress", "part {index}");
            assert_eq!(metadata["replyBehavior"], "suppress_auto_reply");
            assert!(metadata.get("turnComplete").is_none());
            // A hard cut backs off at most one code point (4 bytes) from the budget.
            assert!(text.len() > 3_796, "part {index} has {} bytes", text.len());
        } else {
            assert_eq!(semantics(part), "turn_complete");
            assert_eq!(metadata["turnComplete"], true);
            // The trail held only the answer's own speech, stripped from a chunked final
            // (turns.md §3.7).
            assert!(metadata.get("turnTrail").is_none(), "{metadata:#}");
        }
    }
    let joined: String = parts
        .iter()
        .map(|(_, p)| p["text"].as_str().unwrap_or_default())
        .collect();
    assert!(
        joined == answer,
        "the parts concatenate to the model's answer byte for byte"
    );
    assert_eq!(
        parts.iter().filter(|(_, p)| is_turn_complete(p)).count(),
        1,
        "exactly one turn_complete"
    );
}

/// One ambiguous failure of the final's first POST: the server stored the message, then the
/// client saw no answer (or a 5xx).
fn ambiguous_final_fault(action: FaultAction) -> FaultRule {
    FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            method: Some("POST".into()),
            path: Some("/messages/send".into()),
            agent: Some(DEFAULT_AGENT.into()),
            times: Some(1),
            ..FaultMatcher::default()
        },
        action,
        seen: 0,
        fired: 0,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_replays_an_ambiguous_final_under_the_same_id() {
    let sim = Sim::start(SimConfig::for_tests())
        .await
        .expect("the simulator starts");
    let model = model_server(json!([{"match": {}, "reply": {"text": ANSWER}}])).await;
    let gateway = tokio::task::block_in_place(|| start_gateway(&sim, &model));
    let sc = Scenario::ready(sim, model, gateway).await;

    for (round, action) in [
        FaultAction::ProcessThenDrop,
        FaultAction::ProcessThenStatus { status: 502 },
    ]
    .into_iter()
    .enumerate()
    {
        let first_status = match action {
            FaultAction::ProcessThenStatus { status } => status,
            _ => 0,
        };
        sc.sim.clear_faults();
        sc.sim.add_fault(ambiguous_final_fault(action));
        let since = sc.sim.journal(0, None).last().map_or(0, |e| e.seq);
        let closed = |s: &State| {
            s.turn_history
                .iter()
                .filter(|t| {
                    t["conversationId"] == DEFAULT_CONVERSATION && t["state"] == "completed"
                })
                .count()
        };
        let closed_before = sc.sim.read_state(closed);
        sc.inject(Injection {
            text: Some(format!("question {round}")),
            ..Injection::default()
        });
        sc.wait("the turn closes", move |s| closed(s) > closed_before)
            .await;
        // Let a duplicate arrive before counting.
        tokio::time::sleep(Duration::from_secs(2)).await;

        // The daemon replayed the identical request under the same id …
        let sends = sc.sim.journal(since, Some("/messages/send"));
        let statuses: Vec<u16> = sends.iter().map(|e| e.status).collect();
        assert_eq!(statuses, [first_status, 200], "round {round}");
        assert!(
            sends[0].body == sends[1].body,
            "round {round}: the replay sends identical bytes"
        );
        let client_id = sends[0].body["messageId"]
            .as_str()
            .expect("a client id")
            .to_owned();
        assert!(client_id.starts_with("hermes-final-"), "{client_id}");

        // Exactly one stored bubble for the turn, and the replay was answered with it.
        let turn_id = sends[0].body["metadata"]["turnId"].clone();
        let finals: Vec<(Option<String>, Value)> = sc
            .agent_messages_with_ids(DEFAULT_CONVERSATION)
            .into_iter()
            .filter(|(_, m)| m["metadata"]["turnId"] == turn_id)
            .collect();
        assert_eq!(finals.len(), 1, "round {round}: {finals:#?}");
        assert_eq!(finals[0].0.as_deref(), Some(client_id.as_str()));
        let stored_id = &finals[0].1["id"];
        assert_eq!(&sends[1].response["id"], stored_id, "round {round}");
        if first_status == 0 {
            // The dropped attempt was processed: it stored that very message.
            assert_eq!(&sends[0].response["id"], stored_id);
        }
        assert!(is_turn_complete(&finals[0].1));
        assert_eq!(finals[0].1["text"], ANSWER);
    }
    assert_eq!(
        sc.agent_messages(DEFAULT_CONVERSATION).len(),
        2,
        "one bubble per turn"
    );
}

const HOME_CHANNEL: &str = "c-home";

/// The cron job's report: 12 KB without separators, then a last line with spaces.
fn cron_report() -> String {
    let mut text = String::new();
    let mut n = 0;
    while text.len() < 12 * 1024 {
        n += 1;
        text.push_str(&format!("Report-{n:04}:ΔΣ✓|"));
    }
    text.push_str("\nEnd of the weekly report.");
    text
}

/// UTC now as an ISO timestamp Hermes' cron parser reads as a one-shot due at once.
fn iso_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}+00:00",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_cron_job_delivers_to_the_home_channel() {
    let report = cron_report();
    let job = std::sync::Mutex::new(String::new());
    let sc = Scenario::start_full(
        SimConfig::for_tests(),
        json!([
            {"match": {"contains": "CRONJOB"}, "reply": {"deltas": pieces(&report, 900)}},
            {"match": {}, "reply": {"text": ANSWER}},
        ]),
        GatewayOptions {
            env: vec![("CANON_HOME_CHANNEL".into(), HOME_CHANNEL.into())],
            ..GatewayOptions::default()
        },
        |sim| {
            sim.create_conversation(ConversationSpec {
                id: Some(HOME_CHANNEL.into()),
                kind: "direct".into(),
                name: Some("Home".into()),
                member_ids: vec![DEFAULT_OWNER.into(), DEFAULT_AGENT.into()],
                behavior: None,
            });
        },
        |home| {
            let out = hermes_cli(
                home,
                &[
                    "cron",
                    "create",
                    &iso_now(),
                    "CRONJOB: write the weekly report",
                    "--name",
                    "canon-report",
                    "--deliver",
                    "canon",
                ],
            );
            *job.lock().expect("job id") = out
                .lines()
                .find_map(|l| l.strip_prefix("Created job: "))
                .expect("the job id")
                .trim()
                .to_owned();
        },
    )
    .await;
    let job = job.into_inner().expect("job id");
    // Hermes' in-process scheduler ticks once at start: the job is due and runs at once.
    sc.wait("the cron delivery", |s| {
        s.messages.iter().any(|m| {
            m.conversation_id == HOME_CHANNEL
                && m.message["senderId"] == DEFAULT_AGENT
                && is_turn_complete(&m.message)
        })
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Hermes wraps cron output (cron.wrap_response) and, since the adapter splits long
    // messages itself, hands over the whole text (hermes-host.md §15).
    let delivered = format!(
        "Cronjob Response: canon-report\n(job_id: {job})\n-------------\n\n{report}\n\n\
         To stop or manage this job, send me a new message (e.g. \"stop reminder canon-report\")."
    );
    let parts = sc.agent_messages_with_ids(HOME_CHANNEL);
    let count = parts.len();
    assert!(count >= 4, "12 KB in parts of at most 3,800 bytes: {count}");
    let joined: String = parts
        .iter()
        .map(|(_, p)| p["text"].as_str().unwrap_or_default())
        .collect();
    assert!(
        joined == delivered,
        "the parts concatenate to the whole cron output, untruncated"
    );
    // Outside any turn the send resolves to no turn id (turns.md §7.6), so it is one
    // standalone id group (turns.md §4.6, lead decision): part ids `<base>-part-i`,
    // `groupId` = the base, no turn id, no trail, the cron job id kept in `metadata.hermes`.
    let base = parts[0].1["metadata"]["messageChunk"]["groupId"]
        .as_str()
        .unwrap_or_else(|| sc.fail("the first part names its group"))
        .to_owned();
    assert!(
        base.len() == 45 && base.starts_with("hermes-final-"),
        "{base}"
    );
    for (i, (client_id, part)) in parts.iter().enumerate() {
        let index = i + 1;
        let metadata = &part["metadata"];
        assert_eq!(
            client_id.as_deref(),
            Some(format!("{base}-part-{index}").as_str()),
            "part {index}"
        );
        assert!(metadata.get("turnId").is_none(), "{metadata:#}");
        assert!(metadata.get("turnTrail").is_none(), "{metadata:#}");
        assert_eq!(metadata["hermes"], json!({"job_id": job}));
        assert_eq!(
            metadata["messageChunk"],
            json!({"type": "text", "index": index, "count": count, "groupId": base})
        );
        assert!(part["text"].as_str().is_some_and(|t| t.len() <= 3_800));
        if index < count {
            assert_eq!(semantics(part), "progress");
            assert_eq!(metadata["replyBehavior"], "suppress_auto_reply");
        } else {
            assert_eq!(semantics(part), "turn_complete");
            assert_eq!(metadata["turnComplete"], true);
        }
    }
    // A standalone delivery: no turn, no live node, nothing anywhere else.
    assert!(sc.turn_history(HOME_CHANNEL).is_empty());
    assert!(sc.streaming_history(HOME_CHANNEL).is_empty());
    assert!(sc.agent_messages(DEFAULT_CONVERSATION).is_empty());
    assert!(sc.sim.journal(0, Some("/messages/send")).is_empty());
    // One `send_to` per part, in order, each keyed by its part id; no retries.
    let sends = sc.sim.journal(0, Some("/agent/verbs/send_to"));
    assert_eq!(sends.len(), count, "one request per part, no retries");
    for (send, (client_id, _)) in sends.iter().zip(&parts) {
        assert_eq!(send.status, 200);
        assert_eq!(send.principal.as_deref(), Some(DEFAULT_AGENT));
        assert_eq!(
            send.body["envelope"],
            json!({"conversationId": HOME_CHANNEL, "idempotencyKey": client_id})
        );
    }
}

/// The text of every message the model was sent, joined.
fn model_prompts(sc: &Scenario) -> String {
    let mut out = String::new();
    for request in sc.model.requests() {
        for message in request["messages"].as_array().into_iter().flatten() {
            if let Some(text) = message["content"].as_str() {
                out.push_str(text);
                out.push('\n');
            }
        }
    }
    out
}

/// cli.md §8.2: `CANON_HOME_CHANNEL_NAME` labels the home channel, default `Canon Home`. The
/// shim's `env_enablement_fn` hands Hermes the daemon's seed (hermes-host.md §7.3), so the
/// gateway's Canon home channel is `CANON_HOME_CHANNEL` under that name: Hermes lists it in the
/// agent's system prompt among the home channels and the cron delivery targets.
#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_home_channel_carries_its_name() {
    for (name, shown) in [(Some("Ops Room"), "Ops Room"), (None, "Canon Home")] {
        let mut env = vec![("CANON_HOME_CHANNEL".to_owned(), HOME_CHANNEL.to_owned())];
        if let Some(name) = name {
            env.push(("CANON_HOME_CHANNEL_NAME".to_owned(), name.to_owned()));
        }
        let sc = Scenario::start(
            json!([{"match": {}, "reply": {"text": ANSWER}}]),
            GatewayOptions {
                env,
                ..GatewayOptions::default()
            },
        )
        .await;
        sc.inject(Injection {
            text: Some("where do reports go?".into()),
            ..Injection::default()
        });
        sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
        let prompts = model_prompts(&sc);
        // Hermes quotes these values as untrusted text.
        assert!(
            prompts.contains(&format!("canon: \"{shown}\" (ID: \"{HOME_CHANNEL}\")")),
            "{prompts}"
        );
        assert!(
            prompts.contains(&format!("`\"canon\"` → Home channel (\"{shown}\")")),
            "{prompts}"
        );
    }
}
