//! Scenario tests of the bridge state machine: inputs in, effects out, time as a number.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

const Q1: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
const Q2: &str = "01BX5ZZKBKACTAV9WEVGEMMVRZ";
const PEER: &str = "/tmp/c/sockets/peer.sock";
const T0: u64 = 1_784_896_496_000;

fn config() -> BridgeConfig {
    BridgeConfig {
        name: "user-remote".into(),
        project: "hermes-bridge-test".into(),
        target: "telegram".into(),
        timeout_ms: 120_000,
        poll_ms: 25,
        foreign_grace_ms: 100,
        session_id: "01BRIDGE0000000000000000SS".into(),
        endpoint: "/tmp/c/sockets/bridge.sock".into(),
        pane_id: None,
    }
}

fn prompt(qid: &str, text: &str) -> Input {
    Input::Line(json!({
        "type": "prompt", "msg_id": qid, "sender_session": "S", "sender_endpoint": PEER,
        "hops": 0, "timestamp": "t", "prompt": text, "sender_name": "claude-cli", "sender_cwd": "/w",
    }))
}

fn ask_user(qid: &str) -> Input {
    let payload =
        json!({"question": "Ship?", "options": [{"title": "Approve"}, {"title": "Revise"}]});
    prompt(qid, &payload.to_string())
}

fn cancel(qid: &str) -> Input {
    Input::Line(json!({
        "type": "cancel", "msg_id": "01CANCE100000000000000000X", "from": "ask-user-remote",
        "to": "user-remote", "created_at": "t", "ref_msg_id": qid,
    }))
}

fn answer_file(qid: &str, answer: &str) -> DirEntry {
    let body = json!({"qid": qid, "answer": answer, "answered_by": "telegram:ann", "at": "2026-07-08T12:34:56.000Z"});
    raw_file(&format!("{qid}.answer.json"), &body.to_string())
}

fn raw_file(name: &str, content: &str) -> DirEntry {
    DirEntry {
        name: name.into(),
        content: Content::Read(content.as_bytes().to_vec()),
    }
}

fn logs(effects: &[Effect]) -> Vec<(String, String, Option<Value>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Log(r) => Some((
                r.event_name().to_owned(),
                r.qid().to_owned(),
                r.detail().cloned(),
            )),
            _ => None,
        })
        .collect()
}

fn events(effects: &[Effect]) -> Vec<String> {
    logs(effects).into_iter().map(|l| l.0).collect()
}

fn runs(effects: &[Effect]) -> Vec<(u64, String)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::RunHermes { job, text } => Some((*job, text.clone())),
            _ => None,
        })
        .collect()
}

fn responses(effects: &[Effect]) -> Vec<(String, Purpose, Value)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Respond {
                endpoint,
                purpose,
                envelope,
                ..
            } => Some((endpoint.clone(), *purpose, envelope.clone())),
            _ => None,
        })
        .collect()
}

fn reply(effects: &[Effect]) -> Value {
    match effects.first() {
        Some(Effect::Reply(reply)) => reply.to_value(),
        other => panic!("the first effect is the reply, got {other:?}"),
    }
}

/// Asks `qid` and returns the job of its `hermes send`.
fn asked(bridge: &mut Bridge, qid: &str, now: u64) -> u64 {
    let effects = bridge.handle(ask_user(qid), now);
    runs(&effects)[0].0
}

#[test]
fn happy_path_acks_first_then_delivers_and_answers() {
    let mut bridge = Bridge::new(config());
    let effects = bridge.handle(ask_user(Q1), T0);
    assert_eq!(reply(&effects), json!({"type": "ack", "msg_id": Q1}));
    assert_eq!(
        logs(&effects),
        [(
            "question_received".into(),
            Q1.into(),
            Some(json!({"from": "claude-cli"}))
        )]
    );
    let (job, text) = runs(&effects).remove(0);
    assert!(text.starts_with(&format!("❓ [HUB-Q:{Q1}] Ship?")));
    assert!(text.contains("📁 Project: hermes-bridge-test"));
    assert_eq!(bridge.state_of(Q1), Some(State::Pending));
    assert_eq!(bridge.queue_depth(), 1);
    assert_eq!(bridge.next_deadline(), Some(T0 + 120_000));

    let effects = bridge.handle(
        Input::HermesDone {
            job,
            result: Ok(()),
        },
        T0 + 10,
    );
    assert_eq!(
        logs(&effects),
        [(
            "delivered".into(),
            Q1.into(),
            Some(json!({"to": "telegram"}))
        )]
    );
    assert_eq!(bridge.state_of(Q1), Some(State::Delivered));

    let effects = bridge.handle(Input::Scan(vec![answer_file(Q1, " 2 ")]), T0 + 20);
    assert_eq!(
        effects[0],
        Effect::Delete {
            file: format!("{Q1}.answer.json")
        }
    );
    assert_eq!(
        logs(&effects),
        [(
            "answered".into(),
            Q1.into(),
            Some(json!({"answered_by": "telegram:ann"}))
        )]
    );
    let (endpoint, purpose, envelope) = responses(&effects).remove(0);
    assert_eq!((endpoint.as_str(), purpose), (PEER, Purpose::Answer));
    assert_eq!(
        envelope["response"],
        json!({"kind": "selection", "selections": ["Revise"]})
    );
    assert_eq!(envelope["error"], Value::Null);
    assert_eq!(envelope["hops"], 0);
    assert_eq!(envelope["msg_id"], Q1);
    assert_eq!(envelope["sender_session"], "01BRIDGE0000000000000000SS");
    assert_eq!(bridge.state_of(Q1), Some(State::Answered));
    assert_eq!(bridge.queue_depth(), 0);
    assert_eq!(bridge.next_deadline(), None);
}

#[test]
fn dispatch_replies() {
    let mut bridge = Bridge::new(config());
    asked(&mut bridge, Q1, T0);
    asked(&mut bridge, Q2, T0);
    let pong = reply(&bridge.handle(Input::Line(json!({"type": "ping", "msg_id": "p"})), T0));
    assert_eq!(pong["type"], "pong");
    assert_eq!(pong["msg_id"], "p");
    assert_eq!(pong["agent_card"]["queue_depth"], 2);
    assert_eq!(pong["agent_card"]["name"], "user-remote");
    assert_eq!(pong["agent_card"]["status"], "idle");
    assert_eq!(
        reply(&bridge.handle(Input::Line(json!({"type": "ping"})), T0))["msg_id"],
        ""
    );
    for other in [
        json!({"type": "response", "msg_id": "r", "response": null}),
        json!({"type": "prompt", "msg_id": "r", "prompt": "p", "sender_endpoint": "e"}),
        json!({"type": "cancel", "msg_id": "r", "ref_msg_id": Q1}),
        json!({"type": "wat", "msg_id": "r"}),
    ] {
        let effects = bridge.handle(Input::Line(other), T0);
        assert_eq!(effects.len(), 1);
        assert_eq!(
            reply(&effects),
            json!({"type": "nack", "msg_id": "r", "error": "bridge accepts prompts, cancels, and pings"})
        );
    }
    assert_eq!(bridge.queue_depth(), 2, "nothing was cancelled");
}

#[test]
fn an_invalid_qid_is_acked_then_answered_with_an_error_and_not_logged() {
    let mut bridge = Bridge::new(config());
    let lower = Q1.to_lowercase();
    let effects = bridge.handle(prompt(&lower, "hi"), T0);
    assert_eq!(reply(&effects), json!({"type": "ack", "msg_id": lower}));
    assert!(logs(&effects).is_empty());
    assert!(runs(&effects).is_empty());
    let (_, purpose, envelope) = responses(&effects).remove(0);
    assert_eq!(purpose, Purpose::Error);
    assert_eq!(envelope["response"], Value::Null);
    assert_eq!(
        envelope["error"],
        "prompt msg_id must be a 26-character Crockford ULID qid"
    );
    assert_eq!(bridge.queue_depth(), 0);
}

#[test]
fn plain_prompts_carry_their_sender_as_context() {
    let mut bridge = Bridge::new(config());
    let effects = bridge.handle(prompt(Q1, "Can you answer?"), T0);
    let text = &runs(&effects)[0].1;
    assert!(text.contains(
        "Can you answer?\n\n📁 Project: hermes-bridge-test\n\nContext: From claude-cli @ /w\n\n↩"
    ));
    let effects = bridge.handle(Input::Scan(vec![answer_file(Q1, "2")]), T0 + 1);
    assert_eq!(
        responses(&effects)[0].2["response"],
        json!({"kind": "freeform", "text": "2"})
    );
}

#[test]
fn an_answer_before_hermes_returns_is_accepted_and_delivered_is_not_logged() {
    let mut bridge = Bridge::new(config());
    let job = asked(&mut bridge, Q1, T0);
    let effects = bridge.handle(Input::Scan(vec![answer_file(Q1, "Approve")]), T0 + 5);
    assert_eq!(events(&effects), ["answered"]);
    let effects = bridge.handle(
        Input::HermesDone {
            job,
            result: Ok(()),
        },
        T0 + 10,
    );
    assert!(effects.is_empty());
    assert_eq!(bridge.state_of(Q1), Some(State::Answered));
}

#[test]
fn cancel_closes_and_a_late_answer_gets_a_note_but_no_response() {
    let mut bridge = Bridge::new(config());
    asked(&mut bridge, Q1, T0);
    let effects = bridge.handle(cancel(Q1), T0 + 1);
    assert_eq!(
        reply(&effects),
        json!({"type": "ack", "msg_id": "01CANCE100000000000000000X"})
    );
    assert_eq!(
        logs(&effects),
        [(
            "cancelled".into(),
            Q1.into(),
            Some(json!({"reason": "cancel envelope"}))
        )]
    );
    assert_eq!(runs(&effects)[0].1, crate::core::outcome::cancel_note(Q1));
    assert!(responses(&effects).is_empty());
    assert_eq!(bridge.next_deadline(), None, "the timer went with it");

    // Even invalid content for a closed qid is a late answer.
    let effects = bridge.handle(
        Input::Scan(vec![raw_file(&format!("{Q1}.answer.json"), "{")]),
        T0 + 2,
    );
    assert_eq!(
        effects[0],
        Effect::Delete {
            file: format!("{Q1}.answer.json")
        }
    );
    assert_eq!(
        logs(&effects),
        [(
            "late_answer".into(),
            Q1.into(),
            Some(json!({"state": "cancelled"}))
        )]
    );
    assert_eq!(runs(&effects)[0].1, crate::core::outcome::late_note(Q1));
    assert!(responses(&effects).is_empty());

    // A cancel for an unknown, closed or invalid qid is only acked.
    for qid in [Q1, Q2, "nope"] {
        let effects = bridge.handle(cancel(qid), T0 + 3);
        assert_eq!(effects.len(), 1, "{qid}");
    }
}

#[test]
fn timeout_logs_notes_and_answers_once() {
    let mut bridge = Bridge::new(config());
    asked(&mut bridge, Q1, T0);
    assert!(bridge.handle(Input::Tick, T0 + 119_999).is_empty());
    let effects = bridge.handle(Input::Tick, T0 + 120_000);
    assert_eq!(
        logs(&effects),
        [(
            "timeout".into(),
            Q1.into(),
            Some(json!({"timeout_ms": 120_000}))
        )]
    );
    assert_eq!(
        runs(&effects)[0].1,
        format!("⌛ [HUB-Q:{Q1}] The question timed out after 120000ms.")
    );
    let (_, purpose, envelope) = responses(&effects).remove(0);
    assert_eq!(purpose, Purpose::Timeout);
    assert_eq!(envelope["response"], Value::Null);
    assert_eq!(envelope["error"], "no remote answer within 120000ms");
    assert!(bridge.handle(Input::Tick, T0 + 200_000).is_empty());
    assert_eq!(bridge.state_of(Q1), Some(State::Timeout));
}

#[test]
fn a_failed_send_answers_with_the_error_and_leaves_the_qid_unknown() {
    let mut bridge = Bridge::new(config());
    let job = asked(&mut bridge, Q1, T0);
    let error = "hermes send failed (42): fake hermes failure for x".to_owned();
    let effects = bridge.handle(
        Input::HermesDone {
            job,
            result: Err(error.clone()),
        },
        T0 + 1,
    );
    assert_eq!(
        logs(&effects),
        [(
            "delivery_error".into(),
            Q1.into(),
            Some(json!({"error": error}))
        )]
    );
    assert_eq!(responses(&effects)[0].2["error"], error.as_str());
    assert_eq!(bridge.state_of(Q1), None);
    assert_eq!(bridge.next_deadline(), None);
    // A later answer is foreign, not late.
    let file = answer_file(Q1, "x");
    assert!(bridge
        .handle(Input::Scan(vec![file.clone()]), T0 + 2)
        .is_empty());
    let effects = bridge.handle(Input::Scan(vec![file]), T0 + 102);
    assert_eq!(
        logs(&effects),
        [(
            "answer_rejected".into(),
            Q1.into(),
            Some(json!({"reason": "foreign_qid", "file": format!("{Q1}.answer.json")}))
        )]
    );
}

#[test]
fn a_timeout_during_a_slow_failing_send_is_the_only_response() {
    let mut bridge = Bridge::new(config());
    let job = asked(&mut bridge, Q1, T0);
    let effects = bridge.handle(Input::Tick, T0 + 120_000);
    assert_eq!(responses(&effects).len(), 1);
    let effects = bridge.handle(
        Input::HermesDone {
            job,
            result: Err("hermes send failed (1)".into()),
        },
        T0 + 130_000,
    );
    assert_eq!(
        events(&effects),
        ["delivery_error"],
        "still logged (coms-bridge.md §6.3)"
    );
    assert!(responses(&effects).is_empty());
}

#[test]
fn failing_notes_are_delivery_errors_with_their_phase() {
    let mut bridge = Bridge::new(config());
    asked(&mut bridge, Q1, T0);
    let note = runs(&bridge.handle(cancel(Q1), T0 + 1))[0].0;
    let effects = bridge.handle(
        Input::HermesDone {
            job: note,
            result: Err("boom".into()),
        },
        T0 + 2,
    );
    assert_eq!(
        logs(&effects),
        [(
            "delivery_error".into(),
            Q1.into(),
            Some(json!({"phase": "cancel_note", "error": "boom"}))
        )]
    );
    assert_eq!(bridge.state_of(Q1), Some(State::Cancelled));
    asked(&mut bridge, Q2, T0);
    let timeout_note = runs(&bridge.handle(Input::Tick, T0 + 120_000))[0].0;
    let effects = bridge.handle(
        Input::HermesDone {
            job: timeout_note,
            result: Err("x".into()),
        },
        T0 + 120_001,
    );
    assert_eq!(
        logs(&effects)[0].2.as_ref().expect("detail")["phase"],
        "timeout_note"
    );
    let late = runs(&bridge.handle(Input::Scan(vec![answer_file(Q2, "y")]), T0 + 120_002))[0].0;
    let effects = bridge.handle(
        Input::HermesDone {
            job: late,
            result: Err("x".into()),
        },
        T0 + 120_003,
    );
    assert_eq!(
        logs(&effects)[0].2.as_ref().expect("detail")["phase"],
        "late_note"
    );
}

#[test]
fn rejected_files_are_deleted_before_they_are_logged() {
    let mut bridge = Bridge::new(config());
    asked(&mut bridge, Q1, T0);
    let files = vec![
        raw_file("not-an-answer.json", "{}"),
        raw_file("not-a-ulid.answer.json", "{}"),
        raw_file(
            &format!("{Q1}.answer.json"),
            &json!({"qid": Q1, "answer": "x"}).to_string(),
        ),
    ];
    let effects = bridge.handle(Input::Scan(files), T0 + 1);
    let expected = [
        (&*format!("{Q1}.answer.json"), "invalid_schema", Q1),
        (
            "not-a-ulid.answer.json",
            "invalid_qid",
            crate::core::log::ZERO_QID,
        ),
        (
            "not-an-answer.json",
            "invalid_path",
            crate::core::log::ZERO_QID,
        ),
    ];
    assert_eq!(effects.len(), 6);
    for (pair, (file, reason, qid)) in effects.chunks(2).zip(expected) {
        assert_eq!(pair[0], Effect::Delete { file: file.into() });
        let Effect::Log(record) = &pair[1] else {
            panic!("a log record")
        };
        assert_eq!(record.event_name(), "answer_rejected");
        assert_eq!(record.qid(), qid);
        assert_eq!(
            record.detail(),
            Some(&json!({"reason": reason, "file": file}))
        );
    }
    assert_eq!(bridge.state_of(Q1), Some(State::Pending), "still waiting");
}

#[test]
fn dot_files_and_unreadable_entries_are_left_alone() {
    let mut bridge = Bridge::new(config());
    asked(&mut bridge, Q1, T0);
    let entries = vec![
        raw_file(".hermes-tmp.abc123", "{"),
        raw_file(&format!(".{Q1}.answer.json"), "{"),
        DirEntry {
            name: format!("{Q1}.answer.json"),
            content: Content::Skipped,
        },
    ];
    for later in [1, 10_000, 100_000] {
        assert!(bridge
            .handle(Input::Scan(entries.clone()), T0 + later)
            .is_empty());
    }
}

fn unread(name: &str) -> DirEntry {
    DirEntry {
        name: name.into(),
        content: Content::Unread,
    }
}

#[test]
fn unread_entries_are_decided_by_their_names_alone() {
    let mut bridge = Bridge::new(config());
    asked(&mut bridge, Q1, T0);
    asked(&mut bridge, Q2, T0);
    assert_eq!(
        bridge.awaited_qids().into_iter().collect::<Vec<_>>(),
        [Q1, Q2]
    );
    bridge.handle(cancel(Q2), T0 + 1);
    assert_eq!(bridge.awaited_qids().into_iter().collect::<Vec<_>>(), [Q1]);
    // The answer file of a pending qid left unread (its qid was not pending at the daemon's
    // scan) waits for the next scan; a closed qid's is a late answer; junk is rejected.
    let effects = bridge.handle(
        Input::Scan(vec![
            unread(&format!("{Q1}.answer.json")),
            unread(&format!("{Q2}.answer.json")),
            unread("not-an-answer.json"),
        ]),
        T0 + 2,
    );
    assert_eq!(
        events(&effects),
        ["late_answer", "answer_rejected"],
        "{effects:?}"
    );
    assert_eq!(bridge.state_of(Q1), Some(State::Pending));
    let effects = bridge.handle(Input::Scan(vec![answer_file(Q1, "read now")]), T0 + 3);
    assert_eq!(responses(&effects).len(), 1);
    assert_eq!(bridge.state_of(Q1), Some(State::Answered));
}

#[test]
fn partial_writes_wait_out_the_grace() {
    let mut bridge = Bridge::new(config());
    asked(&mut bridge, Q1, T0);
    assert_eq!(bridge.json_grace_ms(), 1000);
    let partial = raw_file(&format!("{Q1}.answer.json"), "{\"qid\":");
    for at in [0, 25, 500, 999] {
        assert!(
            bridge
                .handle(Input::Scan(vec![partial.clone()]), T0 + 100 + at)
                .is_empty(),
            "{at}"
        );
    }
    let effects = bridge.handle(
        Input::Scan(vec![answer_file(Q1, "Finished write")]),
        T0 + 1099,
    );
    assert_eq!(
        responses(&effects)[0].2["response"],
        json!({"kind": "freeform", "text": "Finished write"})
    );

    asked(&mut bridge, Q2, T0);
    let garbage = raw_file(&format!("{Q2}.answer.json"), "not json at all");
    assert!(bridge
        .handle(Input::Scan(vec![garbage.clone()]), T0 + 2000)
        .is_empty());
    let effects = bridge.handle(Input::Scan(vec![garbage]), T0 + 3000);
    assert_eq!(
        effects[0],
        Effect::Delete {
            file: format!("{Q2}.answer.json")
        }
    );
    assert_eq!(
        logs(&effects)[0].2.as_ref().expect("detail")["reason"],
        "invalid_json"
    );

    // A vanished file's clock is forgotten.
    let mut bridge = Bridge::new(BridgeConfig {
        poll_ms: 800,
        ..config()
    });
    assert_eq!(bridge.json_grace_ms(), 1600);
    asked(&mut bridge, Q1, T0);
    let partial = raw_file(&format!("{Q1}.answer.json"), "{");
    assert!(bridge
        .handle(Input::Scan(vec![partial.clone()]), T0)
        .is_empty());
    assert!(bridge.handle(Input::Scan(Vec::new()), T0 + 1000).is_empty());
    assert!(
        bridge
            .handle(Input::Scan(vec![partial]), T0 + 2000)
            .is_empty(),
        "a new first sight"
    );
}

#[test]
fn duplicate_prompts_replace_and_reopen() {
    let mut bridge = Bridge::new(config());
    let first = asked(&mut bridge, Q1, T0);
    let second = asked(&mut bridge, Q1, T0 + 50);
    assert_eq!(bridge.queue_depth(), 1);
    assert_eq!(
        bridge.next_deadline(),
        Some(T0 + 50 + 120_000),
        "the old timer is gone"
    );
    // The first run's failure no longer owns the question.
    let effects = bridge.handle(
        Input::HermesDone {
            job: first,
            result: Err("old".into()),
        },
        T0 + 60,
    );
    assert_eq!(events(&effects), ["delivery_error"]);
    assert!(responses(&effects).is_empty());
    assert_eq!(bridge.state_of(Q1), Some(State::Pending));
    bridge.handle(
        Input::HermesDone {
            job: second,
            result: Ok(()),
        },
        T0 + 70,
    );
    assert_eq!(bridge.state_of(Q1), Some(State::Delivered));
    bridge.handle(cancel(Q1), T0 + 80);
    // A closed qid asked again is answerable (coms-bridge.md §15, open question 6).
    asked(&mut bridge, Q1, T0 + 90);
    let effects = bridge.handle(Input::Scan(vec![answer_file(Q1, "again")]), T0 + 100);
    assert_eq!(events(&effects), ["answered"]);
}

#[test]
fn foreign_files_wait_their_grace_and_evicted_qids_become_foreign() {
    let mut bridge = Bridge::new(config());
    let foreign = answer_file(Q2, "not mine");
    assert!(bridge
        .handle(Input::Scan(vec![foreign.clone()]), T0)
        .is_empty());
    assert!(bridge
        .handle(Input::Scan(vec![foreign.clone()]), T0 + 99)
        .is_empty());
    let effects = bridge.handle(Input::Scan(vec![foreign]), T0 + 100);
    assert_eq!(events(&effects), ["answer_rejected"]);

    let qids: Vec<String> = (0..=crate::core::state::CLOSED_CAPACITY)
        .map(|i| format!("01ARZ3NDEKTSV4RRFF{i:08}"))
        .collect();
    for qid in &qids {
        asked(&mut bridge, qid, T0);
        bridge.handle(cancel(qid), T0);
    }
    let effects = bridge.handle(Input::Scan(vec![answer_file(&qids[1], "late")]), T0);
    assert_eq!(events(&effects), ["late_answer"]);
    let evicted = answer_file(&qids[0], "late");
    assert!(bridge
        .handle(Input::Scan(vec![evicted.clone()]), T0)
        .is_empty());
    let effects = bridge.handle(Input::Scan(vec![evicted]), T0 + 100);
    assert_eq!(
        logs(&effects)[0].2.as_ref().expect("detail")["reason"],
        "foreign_qid"
    );
}

#[derive(Debug, Clone)]
enum Op {
    Ask(usize),
    Cancel(usize),
    Finish(usize, bool),
    Answer(usize, bool),
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..4).prop_map(Op::Ask),
        (0usize..4).prop_map(Op::Cancel),
        (0usize..8, any::<bool>()).prop_map(|(j, ok)| Op::Finish(j, ok)),
        (0usize..4, any::<bool>()).prop_map(|(q, valid)| Op::Answer(q, valid)),
        (0u64..80_000).prop_map(Op::Wait),
    ]
}

proptest! {
    /// At most one response envelope per asked question, whatever happens in between
    /// (coms-bridge.md §6.14), and every logged qid is valid.
    #[test]
    fn at_most_one_response_per_question(ops in proptest::collection::vec(op(), 0..60)) {
        let qids = ["01ARZ3NDEKTSV4RRFFQ69G5FA0", "01ARZ3NDEKTSV4RRFFQ69G5FA1", "01ARZ3NDEKTSV4RRFFQ69G5FA2", "01ARZ3NDEKTSV4RRFFQ69G5FA3"];
        let mut bridge = Bridge::new(config());
        let mut now = T0;
        let mut asked = [false; 4];
        let mut jobs: Vec<u64> = Vec::new();
        let mut answered: HashMap<String, usize> = HashMap::new();
        for op in ops {
            let effects = match op {
                Op::Ask(q) if !asked[q] => {
                    asked[q] = true;
                    bridge.handle(ask_user(qids[q]), now)
                }
                Op::Ask(_) => Vec::new(),
                Op::Cancel(q) => bridge.handle(cancel(qids[q]), now),
                Op::Finish(j, ok) => match jobs.get(j).copied() {
                    Some(job) => bridge.handle(Input::HermesDone { job, result: if ok { Ok(()) } else { Err("e".into()) } }, now),
                    None => Vec::new(),
                },
                Op::Answer(q, valid) => {
                    let file = if valid { answer_file(qids[q], "1") } else { raw_file(&format!("{}.answer.json", qids[q]), "{") };
                    bridge.handle(Input::Scan(vec![file]), now)
                }
                Op::Wait(ms) => {
                    now += ms;
                    bridge.handle(Input::Tick, now)
                }
            };
            for effect in &effects {
                match effect {
                    Effect::RunHermes { job, .. } => jobs.push(*job),
                    Effect::Respond { qid, .. } => *answered.entry(qid.clone()).or_default() += 1,
                    Effect::Log(record) => prop_assert!(is_ulid(record.qid())),
                    _ => {}
                }
            }
        }
        for (qid, count) in answered {
            prop_assert!(count <= 1, "{} got {} responses", qid, count);
        }
    }
}
