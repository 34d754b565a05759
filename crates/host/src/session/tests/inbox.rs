//! The durable inbox through [`Session::handle`]: which records a frame produces, when a
//! message's frame settles, and how a resumed session drops a replayed message. The whole-binary
//! twins (a daemon killed with SIGKILL and restarted) are in `crates/cli/tests/it/serve_inbox.rs`.

use canon_inbox::{HandledSet, OpenTurns, Record};

use super::*;

fn frame(event_id: &str, message_id: &str, text: &str) -> SessionInput {
    let payload = json!({"conversationId": "c1", "conversation": {"id": "c1", "type": "direct"},
        "message": {"id": message_id, "senderId": "u1", "senderName": "Una",
                    "senderType": "human", "text": text}});
    let Value::Object(payload) = payload else {
        unreachable!()
    };
    SessionInput::StreamFrame {
        id: event_id.to_owned(),
        kind: EventKind::MessageCreated(Box::new(MessageCreated {
            conversation_id: "c1".into(),
            message: payload["message"].as_object().cloned().unwrap_or_default(),
            payload,
            reply_authority: None,
        })),
    }
}

fn records(effects: &[SessionEffect]) -> Vec<Record> {
    effects
        .iter()
        .filter_map(|e| match e {
            SessionEffect::Inbox(records) | SessionEffect::JournalThenCanon { records, .. } => {
                Some(records.clone())
            }
            _ => None,
        })
        .flatten()
        .collect()
}

fn inbound_request_ids(effects: &[SessionEffect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            SessionEffect::Frame(line) => {
                let v: Value = serde_json::from_str(line).ok()?;
                (v["type"] == json!("inbound.message"))
                    .then(|| v["id"].as_str().map(str::to_owned))?
            }
            _ => None,
        })
        .collect()
}

fn answer(id: &str) -> SessionInput {
    SessionInput::Line(
        protocol::encode_response(id, "inbound.message", Ok(json!({"accepted": true})))
            .into_bytes(),
    )
}

#[test]
fn a_message_frame_settles_only_when_the_shim_answered_its_hand_over() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let effects = daemon.handle_effects(frame("e-1", "m-1", "hello"));
    assert_eq!(
        records(&effects),
        vec![],
        "nothing is durable before Hermes took it"
    );
    let [request] = inbound_request_ids(&effects)
        .try_into()
        .expect("one hand-over");
    let typing = daemon.handle_effects(SessionInput::StreamFrame {
        id: "e-2".into(),
        kind: EventKind::Ignored {
            name: "typing".into(),
            data: json!({"conversationId": "c1"}),
        },
    });
    assert_eq!(
        records(&typing),
        vec![],
        "e-2 waits behind the unsettled e-1"
    );
    let answered = daemon.handle_effects(answer(&request));
    assert_eq!(
        records(&answered),
        vec![
            Record::Handled {
                message_id: "m-1".into(),
                at_ms: daemon.now
            },
            Record::Cursor("e-2".into())
        ]
    );
    assert_eq!(daemon.session.inbox_cursor(), Some("e-2"));
}

#[test]
fn a_resumed_session_drops_a_replayed_handled_message_and_hands_over_the_rest() {
    let mut handled = HandledSet::default();
    handled.insert("m-1", 5);
    let mut daemon = Daemon::connected();
    daemon.session.inbox_resume(
        Some("e-0".into()),
        handled,
        &OpenTurns::default(),
        &Default::default(),
    );
    daemon.connect();
    assert_eq!(daemon.session.inbox_new_stream().as_deref(), Some("e-0"));
    let replayed = daemon.handle_effects(frame("e-1", "m-1", "hello"));
    assert_eq!(inbound_request_ids(&replayed), Vec::<String>::new());
    assert_eq!(records(&replayed), vec![Record::Cursor("e-1".into())]);
    let missed = daemon.handle_effects(frame("e-2", "m-2", "sent while down"));
    let [request] = inbound_request_ids(&missed)
        .try_into()
        .expect("one hand-over");
    let answered = daemon.handle_effects(answer(&request));
    assert_eq!(
        records(&answered),
        vec![
            Record::Handled {
                message_id: "m-2".into(),
                at_ms: daemon.now
            },
            Record::Cursor("e-2".into())
        ]
    );
}

#[test]
fn a_new_stream_resumes_from_the_last_settled_frame_not_the_last_read_one() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let settled = daemon.handle_effects(SessionInput::StreamFrame {
        id: "e-1".into(),
        kind: EventKind::Ignored {
            name: "typing".into(),
            data: json!({"conversationId": "c1"}),
        },
    });
    assert_eq!(records(&settled), vec![Record::Cursor("e-1".into())]);
    let effects = daemon.handle_effects(frame("e-2", "m-2", "in flight"));
    assert_eq!(inbound_request_ids(&effects).len(), 1);
    // The connection drops before the shim answered: the next stream starts after e-1, so e-2
    // is replayed (and, if the shim did take it, dropped there by its message id).
    assert_eq!(daemon.session.inbox_new_stream().as_deref(), Some("e-1"));
}

#[test]
fn a_frame_whose_id_cannot_be_resent_never_becomes_the_durable_cursor() {
    let mut daemon = Daemon::connected();
    daemon.session.inbox_resume(
        Some("e-0".into()),
        HandledSet::default(),
        &OpenTurns::default(),
        &Default::default(),
    );
    daemon.connect();
    for odd in [
        "caf\u{e9}-1".to_owned(),
        "9".repeat(5_000),
        "a\u{7f}b".to_owned(),
    ] {
        let effects = daemon.handle_effects(SessionInput::StreamFrame {
            id: odd.clone(),
            kind: EventKind::Ignored {
                name: "typing".into(),
                data: json!({"conversationId": "c1"}),
            },
        });
        assert_eq!(records(&effects), vec![], "{odd:.20} moved the cursor");
    }
    let effects = daemon.handle_effects(frame("caf\u{e9}-2", "m-2", "hello"));
    let [request] = inbound_request_ids(&effects)
        .try_into()
        .expect("the message is still handed over");
    let answered = daemon.handle_effects(answer(&request));
    assert_eq!(
        records(&answered),
        vec![Record::Handled {
            message_id: "m-2".into(),
            at_ms: daemon.now
        }],
        "handled, but no cursor record"
    );
    assert_eq!(daemon.session.inbox_cursor(), Some("e-0"));
    assert_eq!(daemon.session.inbox_new_stream().as_deref(), Some("e-0"));
    let replayed = daemon.handle_effects(frame("caf\u{e9}-2", "m-2", "hello"));
    assert_eq!(
        inbound_request_ids(&replayed),
        Vec::<String>::new(),
        "its replay is dropped by message id"
    );
}

/// A `turn.start` of the conversation's session, as the shim sends it, for an event that names
/// `message` (or none: Hermes' resume of a session its restart cut off is an internal event
/// with no text and no message).
fn turn_start_line(id: &str, conversation: &str, message: Option<&str>) -> SessionInput {
    let body = json!({"event_ref": format!("shim:{id}"), "session_key": session_key(conversation),
        "event": {"chat_id": conversation, "chat_type": "dm", "user_id": "u1", "user_name": "Una",
                  "message_id": message, "message_type": "text", "internal": message.is_none(),
                  "text_len": 0, "delivery_intent": "queue"},
        "queue_depth": 0});
    SessionInput::Line(protocol::encode_request(id, "turn.start", body).into_bytes())
}

/// The active message ids of the first `/runtime/turn` publish among `effects`.
/// A `turn.complete` of `conversation`'s session for the turn opened under `event_ref`.
fn turn_complete_line(
    id: &str,
    event_ref: &str,
    conversation: &str,
    queue_depth: u32,
    draining: bool,
) -> SessionInput {
    let mut body = json!({"event_ref": event_ref, "session_key": session_key(conversation),
                          "outcome": "success", "queue_depth": queue_depth});
    if draining {
        body["draining"] = json!(true);
    }
    SessionInput::Line(protocol::encode_request(id, "turn.complete", body).into_bytes())
}

/// A connected daemon whose predecessor left open one turn per `(conversation, message)`.
fn inheriting(turns: &[(&str, &str)]) -> Daemon {
    let mut open = OpenTurns::default();
    for (conversation, message) in turns {
        open.open(
            &session_key(conversation),
            conversation,
            &[(*message).to_owned()],
        );
    }
    let mut daemon = Daemon::connected();
    daemon
        .session
        .inbox_resume(None, HandledSet::default(), &open, &Default::default());
    daemon.connect();
    daemon
}

fn published_active(effects: &[SessionEffect]) -> Vec<String> {
    effects
        .iter()
        .find_map(|e| match e {
            SessionEffect::Canon(Effect::PublishTurn(update))
            | SessionEffect::JournalThenCanon {
                effect: Effect::PublishTurn(update),
                ..
            } => update.active_message_ids.clone(),
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn the_resume_of_a_session_cut_off_by_a_restart_answers_its_messages() {
    // The daemon before a gateway restart opened a turn for m-7 and never closed it.
    let mut daemon = inheriting(&[("c1", "m-7"), ("c2", "m-9")]);
    // Hermes resumes c1's session with an event naming no message: that turn answers m-7.
    let resumed = daemon.handle_effects(turn_start_line("t1", "c1", None));
    assert_eq!(published_active(&resumed), vec!["m-7".to_owned()]);
    assert!(records(&resumed).contains(&Record::TurnOpened {
        session_key: session_key("c1"),
        conversation_id: "c1".into(),
        message_ids: vec!["m-7".into()],
    }));
    // c2's human wrote again before any resume: that turn runs on the transcript that holds
    // m-9, so it answers m-9 too (found by the fault harness: the answer to the cut-off
    // message came in the new message's turn, and m-9 counted as never answered). The
    // inheritance ends there.
    let fresh = daemon.handle_effects(turn_start_line("t2", "c2", Some("m-10")));
    assert_eq!(
        published_active(&fresh),
        vec!["m-10".to_owned(), "m-9".to_owned()]
    );
    assert!(records(&fresh).contains(&Record::TurnOpened {
        session_key: session_key("c2"),
        conversation_id: "c2".into(),
        message_ids: vec!["m-10".into(), "m-9".into()],
    }));
    let closed = daemon.handle_effects(turn_complete_line("t3", "shim:t2", "c2", 0, false));
    assert!(records(&closed).contains(&Record::TurnClosed {
        session_key: session_key("c2"),
    }));
    let later = daemon.handle_effects(turn_start_line("t4", "c2", None));
    assert_eq!(published_active(&later), Vec::<String>::new());
}

/// Found by the fault harness: a restarted Hermes resumes a session in two passes, the
/// first of which closes at once without an answer. The interrupted turn's message must stay
/// with the resume, so the pass that really answers replies to it.
#[test]
fn a_resume_pass_that_answers_nothing_leaves_the_messages_to_the_next_pass() {
    let mut daemon = inheriting(&[("c1", "m-7")]);
    let first = daemon.handle_effects(turn_start_line("t1", "c1", None));
    assert_eq!(published_active(&first), vec!["m-7".to_owned()]);
    // The first pass ends while still `thinking`: nothing streamed, no tool ran.
    let closed = daemon.handle_effects(turn_complete_line("t2", "shim:t1", "c1", 1, false));
    assert!(
        !records(&closed).contains(&Record::TurnClosed {
            session_key: session_key("c1"),
        }),
        "the interrupted turn stays open in the journal"
    );
    let second = daemon.handle_effects(turn_start_line("t3", "c1", None));
    assert_eq!(published_active(&second), vec!["m-7".to_owned()]);
}

/// Found by the fault harness: a turn the gateway's stop closed is closed in the journal
/// when its final is stored, and not before. Closing it at the drain because it had streamed
/// lost the message when the final then never reached Canon (it waited behind a hung preview
/// write until the daemon exited; Hermes redelivered it after the restart, and only an open
/// turn lets the successor give that redelivery its message), and Hermes' own shutdown notice
/// makes a turn look streamed. Keeping a streamed turn open after its final was stored let
/// Hermes' resume answer its message a second time.
#[test]
fn a_turn_the_stop_closed_stays_open_in_the_journal_until_its_final_is_stored() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let close = |id: &str, conversation: &str| {
        turn_complete_line(
            id,
            &format!("shim:open-{conversation}"),
            conversation,
            0,
            true,
        )
    };
    for conversation in ["c1", "c2"] {
        let start = turn_start_line(&format!("open-{conversation}"), conversation, Some("m-1"));
        let _ = daemon.handle_effects(start);
    }
    // c1's answer streams and is finalized; c2's turn is cut while still thinking.
    let ctx = json!({"platform": "canon", "session_key": session_key("c1"), "chat_id": "c1"});
    let send = protocol::encode_request(
        "s1",
        "adapter.send",
        json!({"chat_id": "c1", "content": "The answer", "reply_to": "m-1",
               "metadata": {"expect_edits": true}, "ctx": ctx}),
    );
    let _ = daemon.handle_effects(SessionInput::Line(send.into_bytes()));
    let finalize = protocol::encode_request(
        "s2",
        "adapter.edit",
        json!({"chat_id": "c1", "message_id": "ignored", "content": "The answer",
               "finalize": true, "metadata": null, "ctx": ctx}),
    );
    let sent = daemon.handle_effects(SessionInput::Line(finalize.into_bytes()));
    let streamed_close = daemon.handle_effects(close("t1", "c1"));
    let cut = daemon.handle_effects(close("t2", "c2"));
    assert_eq!((records(&streamed_close), records(&cut)), (vec![], vec![]));
    let op = sent
        .iter()
        .chain(&streamed_close)
        .find_map(|e| match e {
            SessionEffect::Canon(Effect::Deliver(d)) => Some(d.op),
            _ => None,
        })
        .unwrap_or_else(|| panic!("c1's final goes out: {sent:?} {streamed_close:?}"));
    let stored = daemon.handle_effects(SessionInput::Delivered {
        op,
        result: Ok(Some("m-2".to_owned())),
    });
    assert_eq!(
        records(&stored),
        vec![Record::TurnClosed {
            session_key: session_key("c1")
        }]
    );
}

/// A stop that begins between a turn's start and Hermes' run of its message has Hermes answer
/// the message "⏳ Gateway is shutting down and is not accepting new work right now." instead
/// of running it (the shim marks that send `stop_notice`). The refusal is not posted: it would
/// become the turn's `turn_complete` and spend the message's reply authority, which the real
/// answer after the restart needs. The turn stays open in the journal, so the restarted
/// gateway's resume or next turn of the session answers the message. A real answer sent during
/// the stop is delivered and closes its turn there as before.
#[test]
fn a_stopping_gateways_refusal_is_not_posted_and_leaves_the_turn_open() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let mut outcomes = Vec::new();
    for (n, conversation, content, stop_notice) in [
        (
            0,
            "c1",
            "⏳ Gateway is shutting down and is not accepting new work right now.",
            true,
        ),
        (1, "c2", "The answer", false),
    ] {
        let start = turn_start_line(&format!("open-{n}"), conversation, Some("m-1"));
        let _ = daemon.handle_effects(start);
        let ctx = json!({"platform": "canon", "session_key": session_key(conversation),
                         "chat_id": conversation});
        // Hermes sends a cycle's answer with `notify` (its final, not previewed).
        let mut body = json!({"chat_id": conversation, "content": content, "reply_to": "m-1",
                              "metadata": {"notify": true}, "ctx": ctx});
        if stop_notice {
            body["stop_notice"] = json!(true);
        }
        let send = protocol::encode_request(&format!("s{n}"), "adapter.send", body);
        let sent = daemon.handle_effects(SessionInput::Line(send.into_bytes()));
        let closed = daemon.handle_effects(turn_complete_line(
            &format!("t{n}"),
            &format!("shim:open-{n}"),
            conversation,
            0,
            true,
        ));
        assert_eq!(records(&closed), vec![], "the stop keeps the turn open");
        let op = sent.iter().chain(&closed).find_map(|e| match e {
            SessionEffect::Canon(Effect::Deliver(d)) => Some(d.op),
            _ => None,
        });
        let stored = op.map(|op| {
            records(&daemon.handle_effects(SessionInput::Delivered {
                op,
                result: Ok(Some(format!("m-answer-{n}"))),
            }))
        });
        outcomes.push(stored);
    }
    assert_eq!(
        outcomes,
        vec![
            None,
            Some(vec![Record::TurnClosed {
                session_key: session_key("c2")
            }])
        ],
        "the refusal is not posted and leaves its turn open; the real answer closes its own"
    );
}

#[test]
fn a_message_hermes_queued_settles_when_its_turn_starts_and_not_at_a_gateway_stop() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let handed = daemon.handle_effects(frame("e-1", "m-1", "while busy"));
    let [request] = inbound_request_ids(&handed)
        .try_into()
        .expect("one hand-over");
    let event_ref = handed
        .iter()
        .find_map(|e| match e {
            SessionEffect::Frame(line) => {
                let v: Value = serde_json::from_str(line).ok()?;
                v["body"]["event_ref"].as_str().map(str::to_owned)
            }
            _ => None,
        })
        .expect("the event's reference");
    let queued = protocol::encode_response(
        &request,
        "inbound.message",
        Ok(json!({"accepted": true, "queued": true, "session_key": session_key("c1")})),
    );
    let answered = daemon.handle_effects(SessionInput::Line(queued.into_bytes()));
    assert_eq!(records(&answered), vec![], "queued: not handled yet");
    // The gateway stops while the message waits: nothing settles, so the next daemon's stream
    // replays it.
    let stop = turn_complete_line("t0", "shim:other", "c1", 0, true);
    assert_eq!(records(&daemon.handle_effects(stop)), vec![]);
    assert_eq!(daemon.session.inbox_cursor(), None);
    // Without the stop, its turn starting hands it over for good.
    let start = protocol::encode_request(
        "t1",
        "turn.start",
        json!({"event_ref": event_ref, "session_key": session_key("c1"),
               "event": {"chat_id": "c1", "chat_type": "dm", "user_id": "u1", "user_name": "Una",
                         "message_id": "m-1", "message_type": "text", "internal": false,
                         "text_len": 10, "delivery_intent": "queue"},
               "queue_depth": 0}),
    );
    let started = records(&daemon.handle_effects(SessionInput::Line(start.into_bytes())));
    assert_eq!(
        started[..2],
        [
            Record::Handled {
                message_id: "m-1".into(),
                at_ms: daemon.now
            },
            Record::Cursor("e-1".into())
        ]
    );
}

#[test]
fn an_answer_redelivered_after_a_restart_replies_to_its_interrupted_turns_message() {
    let mut daemon = inheriting(&[("c1", "m-7")]);
    // Hermes' recovered-final redelivery: a send outside any session, replying to nothing.
    let send = |id: &str| {
        SessionInput::Line(
            protocol::encode_request(
                id,
                "adapter.send",
                json!({"chat_id": "c1", "content": "The answer.", "reply_to": null,
                       "metadata": null, "ctx": {}}),
            )
            .into_bytes(),
        )
    };
    let reply_to = |effects: &[SessionEffect]| {
        effects.iter().find_map(|e| match e {
            SessionEffect::Canon(Effect::Deliver(delivery)) => Some(format!("{delivery:?}")),
            _ => None,
        })
    };
    let effects = daemon.handle_effects(send("s1"));
    let first = reply_to(&effects).expect("a delivery");
    assert!(first.contains("\"m-7\""), "{first}");
    // The journal closes the interrupted turn with it: after another crash the next daemon
    // must not hand m-7 to Hermes' resume, which would answer it a second time.
    assert_eq!(
        records(&effects),
        vec![Record::TurnClosed {
            session_key: session_key("c1")
        }]
    );
    // Once: a second turn-less send is just a send.
    let second = reply_to(&daemon.handle_effects(send("s2"))).expect("a delivery");
    assert!(!second.contains("m-7"), "{second}");
}

/// The restarted gateway redelivers from Hermes' delivery ledger a refusal its stop kept from
/// Canon ("♻️ Recovered reply — …:\n\n⏳ Gateway is shutting down and is not accepting new work
/// right now.", marked `stop_notice` by the shim). It answers nothing: it is not posted, and it
/// does not claim the turn a predecessor left open, whose message the resume or the next turn
/// answers; a real redelivered answer after it still does.
#[test]
fn a_redelivered_refusal_does_not_claim_the_interrupted_turn() {
    let mut daemon = inheriting(&[("c1", "m-7")]);
    let send = |id: &str, content: &str, stop_notice: bool| {
        SessionInput::Line(
            protocol::encode_request(
                id,
                "adapter.send",
                json!({"chat_id": "c1", "content": content, "reply_to": null,
                       "metadata": null, "ctx": {}, "stop_notice": stop_notice}),
            )
            .into_bytes(),
        )
    };
    let delivered = |effects: &[SessionEffect]| {
        effects.iter().find_map(|e| match e {
            SessionEffect::Canon(Effect::Deliver(delivery)) => Some(format!("{delivery:?}")),
            _ => None,
        })
    };
    let refusal = daemon.handle_effects(send(
        "s1",
        "♻️ Recovered reply — the gateway restarted during delivery, so this may be a \
         duplicate:\n\n⏳ Gateway is shutting down and is not accepting new work right now.",
        true,
    ));
    assert_eq!((delivered(&refusal), records(&refusal)), (None, vec![]));
    let answer = daemon.handle_effects(send("s2", "The answer.", false));
    assert!(
        delivered(&answer).is_some_and(|d| d.contains("\"m-7\"")),
        "{answer:?}"
    );
}

#[test]
fn a_message_the_shim_could_not_hand_to_hermes_stays_unsettled() {
    // During a gateway stop the adapter is gone and the shim answers `not_connected`: Hermes
    // never took the message, so nothing is recorded and a successor replays its frame.
    let mut daemon = Daemon::connected();
    daemon.connect();
    let handed = daemon.handle_effects(frame("e-1", "m-1", "during the stop"));
    let [request] = inbound_request_ids(&handed)
        .try_into()
        .expect("one hand-over");
    let error = protocol::ErrorBody {
        code: protocol::ErrorCode::NotConnected,
        message: "no loop".into(),
        retryable: true,
    };
    let refused = protocol::encode_response(&request, "inbound.message", Err(&error));
    let answered = daemon.handle_effects(SessionInput::Line(refused.into_bytes()));
    assert_eq!(records(&answered), vec![]);
    assert_eq!(daemon.session.inbox_cursor(), None);
}

/// An adapter that refused a message for a moment (or a shim that did not answer in time) is
/// offered the message again, on a doubling schedule: when Hermes takes a later offer, the
/// frame settles and the durable cursor moves on instead of staying before it for the rest of
/// the connection. A message refused on every offer stays unsettled, for the next daemon.
#[test]
fn a_refused_message_is_offered_again_and_settles_when_hermes_takes_it() {
    use crate::session::inbox::{INBOUND_ANSWER_MS, MAX_OFFERS, REOFFER_FIRST_MS};
    let mut daemon = Daemon::connected();
    daemon.connect();
    let refuse = |daemon: &mut Daemon, request: &str| {
        let error = protocol::ErrorBody {
            code: protocol::ErrorCode::NotConnected,
            message: "no loop".into(),
            retryable: true,
        };
        let refused = protocol::encode_response(request, "inbound.message", Err(&error));
        daemon.handle_effects(SessionInput::Line(refused.into_bytes()))
    };
    let handed = daemon.handle_effects(frame("e-1", "m-1", "refused for a moment"));
    let (request, event_ref) = handed_over(&handed);
    assert_eq!(records(&refuse(&mut daemon, &request)), vec![]);
    let due = daemon.session.next_deadline().expect("a re-offer is due");
    assert_eq!(due, daemon.now + REOFFER_FIRST_MS);
    daemon.now = due - 10;
    let offered = daemon.handle_effects(SessionInput::Timeout);
    let (again, again_ref) = handed_over(&offered);
    assert_ne!(again, request);
    assert_eq!(again_ref, event_ref, "the same message");
    let settled = records(&daemon.handle_effects(answer(&again)));
    assert!(
        settled
            .iter()
            .any(|r| matches!(r, Record::Handled { message_id, .. } if message_id == "m-1")),
        "{settled:?}"
    );
    assert_eq!(daemon.session.inbox_cursor(), Some("e-1"));

    // A shim that never answers: after the answer wait the offer counts as refused.
    let handed = daemon.handle_effects(frame("e-2", "m-2", "unanswered"));
    let (first, _) = handed_over(&handed);
    daemon.now += INBOUND_ANSWER_MS;
    assert!(inbound_request_ids(&daemon.handle_effects(SessionInput::Timeout)).is_empty());
    let late = daemon.handle_effects(answer(&first));
    assert_eq!(
        records(&late),
        vec![],
        "a late answer to a timed-out offer settles nothing"
    );

    // Refused on every offer: offered MAX_OFFERS times, then left for the next daemon.
    let mut offers = 1;
    while let Some(due) = daemon.session.next_deadline() {
        daemon.now = due - 10;
        let offered = daemon.handle_effects(SessionInput::Timeout);
        for request in inbound_request_ids(&offered) {
            offers += 1;
            refuse(&mut daemon, &request);
        }
        assert!(offers <= MAX_OFFERS, "offered {offers} times");
    }
    assert_eq!(offers, MAX_OFFERS);
    assert_eq!(
        daemon.session.inbox_cursor(),
        Some("e-1"),
        "e-2 stays unsettled"
    );
}

/// A stream that closes while a message's hand-over is unanswered replays that message's frame
/// on the next stream. The replay must not settle the frame (Hermes has not taken the message
/// yet): a daemon killed before the shim's answer must leave the cursor before it, or its
/// successor never sees the message.
#[test]
fn a_replay_of_a_message_whose_hand_over_is_unanswered_does_not_move_the_cursor_past_it() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let effects = daemon.handle_effects(frame("e-1", "m-1", "hello"));
    let [request] = inbound_request_ids(&effects)
        .try_into()
        .expect("one hand-over");
    assert_eq!(
        daemon.session.inbox_new_stream(),
        None,
        "nothing settled yet"
    );
    let replayed = daemon.handle_effects(frame("e-1", "m-1", "hello"));
    assert_eq!(
        inbound_request_ids(&replayed),
        Vec::<String>::new(),
        "the message is on its way already"
    );
    let later = daemon.handle_effects(SessionInput::StreamFrame {
        id: "e-2".into(),
        kind: EventKind::Ignored {
            name: "typing".into(),
            data: json!({"conversationId": "c1"}),
        },
    });
    assert_eq!(
        records(&replayed)
            .into_iter()
            .chain(records(&later))
            .collect::<Vec<_>>(),
        vec![],
        "e-1 and e-2 wait for the hand-over's answer"
    );
    assert_eq!(daemon.session.inbox_cursor(), None);
    let answered = daemon.handle_effects(answer(&request));
    assert_eq!(
        records(&answered),
        vec![
            Record::Handled {
                message_id: "m-1".into(),
                at_ms: daemon.now
            },
            Record::Cursor("e-2".into())
        ]
    );
}

/// The `inbound.message` request id and event reference of the one hand-over among `effects`.
fn handed_over(effects: &[SessionEffect]) -> (String, String) {
    effects
        .iter()
        .find_map(|e| match e {
            SessionEffect::Frame(line) => {
                let v: Value = serde_json::from_str(line).ok()?;
                (v["type"] == json!("inbound.message")).then(|| {
                    (
                        v["id"].as_str().unwrap_or_default().to_owned(),
                        v["body"]["event_ref"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    )
                })
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("one hand-over: {effects:?}"))
}

/// The shim's answer to `request`: Hermes queued the event in `conversation`'s session.
fn answer_queued(request: &str, conversation: &str) -> SessionInput {
    SessionInput::Line(
        protocol::encode_response(
            request,
            "inbound.message",
            Ok(json!({"accepted": true, "queued": true,
                      "session_key": session_key(conversation)})),
        )
        .into_bytes(),
    )
}

/// A `turn.start` of `conversation`'s session for `message` under `event_ref`, sent while the
/// gateway stops when `draining`.
fn turn_start_for(
    id: &str,
    event_ref: &str,
    conversation: &str,
    message: &str,
    draining: bool,
) -> SessionInput {
    let mut body = json!({"event_ref": event_ref, "session_key": session_key(conversation),
        "event": {"chat_id": conversation, "chat_type": "dm", "user_id": "u1", "user_name": "Una",
                  "message_id": message, "message_type": "text", "internal": false,
                  "text_len": 4, "delivery_intent": "queue"},
        "queue_depth": 0});
    if draining {
        body["draining"] = json!(true);
    }
    SessionInput::Line(protocol::encode_request(id, "turn.start", body).into_bytes())
}

/// The fault harness's seed 11: a stop cut off the turn of m-1 mid-answer, then Hermes started
/// m-2 (queued behind it) while it stopped, and refused it. The journal must still hold m-1's
/// turn open (Hermes resumes m-1 after the restart, and the resume must answer m-1, not m-2),
/// and m-2 must stay unsettled, so the restarted daemon's stream replays it for a turn of its
/// own. Before the fix, m-2's start recorded it as handled and as the session's open turn.
#[test]
fn a_turn_started_while_the_gateway_stops_settles_nothing_and_keeps_the_cut_off_turn_open() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let mut journal = Vec::new();
    let first = daemon.handle_effects(frame("e-1", "m-1", "first"));
    let (request, first_ref) = handed_over(&first);
    journal.extend(records(&daemon.handle_effects(answer(&request))));
    journal.extend(records(
        &daemon.handle_effects(turn_start_for("t1", &first_ref, "c1", "m-1", false)),
    ));
    let second = daemon.handle_effects(frame("e-2", "m-2", "second"));
    let (request, second_ref) = handed_over(&second);
    journal.extend(records(
        &daemon.handle_effects(answer_queued(&request, "c1")),
    ));
    // The stop: m-1's turn closes cut off, then Hermes starts m-2 and ends it at once.
    journal.extend(records(
        &daemon.handle_effects(turn_complete_line("t2", &first_ref, "c1", 1, true)),
    ));
    let hollow = daemon.handle_effects(turn_start_for("t3", &second_ref, "c1", "m-2", true));
    journal.extend(records(&hollow));
    journal.extend(records(&daemon.handle_effects(turn_complete_line(
        "t4",
        &second_ref,
        "c1",
        0,
        true,
    ))));

    assert!(
        !journal
            .iter()
            .any(|r| matches!(r, Record::Handled { message_id, .. } if message_id == "m-2")),
        "m-2 never ran: {journal:?}"
    );
    assert_eq!(
        daemon.session.inbox_cursor(),
        Some("e-1"),
        "e-2 is replayed"
    );
    // What the journal holds after these records, as the restarted daemon loads it.
    let loaded = loaded_from(&journal);
    let held: Vec<Vec<String>> = loaded
        .open_turns
        .iter()
        .map(|t| t.message_ids.clone())
        .collect();
    assert_eq!(
        held,
        [vec!["m-1".to_owned()]],
        "m-1's turn is still the open one"
    );
    // The restarted daemon: Hermes' resume answers m-1, and the replayed m-2 is handed over.
    let mut next = successor_of(loaded);
    let resume = next.handle_effects(turn_start_line("r1", "c1", None));
    assert_eq!(published_active(&resume), ["m-1"]);
    let replayed = next.handle_effects(frame("e-2", "m-2", "second"));
    assert_eq!(inbound_request_ids(&replayed).len(), 1, "m-2 gets its turn");
}

/// What the journal holds after `journal`'s records, as a restarted daemon loads it.
fn loaded_from(journal: &[Record]) -> canon_inbox::Loaded {
    let mut loaded = canon_inbox::Loaded::default();
    for record in journal {
        loaded.apply(record);
    }
    loaded
}

/// A connected daemon that resumed from `loaded`, as the successor of a killed one.
fn successor_of(loaded: canon_inbox::Loaded) -> Daemon {
    let mut next = Daemon::connected();
    next.session.inbox_resume(
        loaded.cursor,
        loaded.handled,
        &loaded.open_turns,
        &loaded.runtime_turns,
    );
    next.connect();
    next
}

/// A decided approval's wake Hermes queued behind a running turn: a gateway stop that discards
/// the queue puts the wake back (the registry hands it over after the restart); its turn
/// starting delivers it. Before the fix, the shim's answer finished the wake as delivered at
/// once, so a stop lost the decision (the fault harness's seed 11, "answered, never woke the
/// agent").
#[test]
fn a_queued_approval_wake_is_delivered_when_its_turn_starts_and_put_back_by_a_stop() {
    let wake = |approval_id: &str| {
        SessionInput::ApprovalWake(Box::new(crate::detached::ApprovalWake {
            approval_id: approval_id.to_owned(),
            conversation_id: "c1".into(),
            text: "The owner approved.".into(),
            user_id: "u1".into(),
            user_name: "Una".into(),
            raw: json!({"conversationId": "c1"}),
        }))
    };
    let ends = |effects: &[SessionEffect]| -> Vec<(String, bool)> {
        effects
            .iter()
            .filter_map(|e| match e {
                SessionEffect::ApprovalWakeAnswered {
                    approval_id,
                    delivered,
                } => Some((approval_id.clone(), *delivered)),
                _ => None,
            })
            .collect()
    };
    let mut daemon = Daemon::connected();
    daemon.connect();
    let (request, stopped_ref) = handed_over(&daemon.handle_effects(wake("ap-1")));
    assert_eq!(
        ends(&daemon.handle_effects(answer_queued(&request, "c1"))),
        [],
        "queued: not delivered yet"
    );
    let stop = daemon.handle_effects(turn_complete_line("t1", "shim:running", "c1", 1, true));
    assert_eq!(
        ends(&stop),
        [("ap-1".to_owned(), false)],
        "the stop puts it back"
    );
    // A started turn that was refused while stopping delivers nothing either.
    let (request, wake_ref) = handed_over(&daemon.handle_effects(wake("ap-2")));
    let _ = daemon.handle_effects(answer_queued(&request, "c1"));
    let hollow = daemon.handle_effects(turn_start_for(
        "t2",
        &wake_ref,
        "c1",
        "canon-detached-approval:ap-2",
        true,
    ));
    assert_eq!(ends(&hollow), []);
    let started = daemon.handle_effects(turn_start_for(
        "t3",
        &wake_ref,
        "c1",
        "canon-detached-approval:ap-2",
        false,
    ));
    assert_eq!(ends(&started), [("ap-2".to_owned(), true)]);
    // A wake Hermes took at once ends with the answer, as before.
    let (request, _) = handed_over(&daemon.handle_effects(wake("ap-3")));
    assert_eq!(
        ends(&daemon.handle_effects(answer(&request))),
        [("ap-3".to_owned(), true)]
    );
    assert_ne!(stopped_ref, wake_ref);
}

/// The records a turn's publishes leave: its first open state is journaled once, and the
/// publish waits for that record to be on disk; its closing publish carries its closed record,
/// which the shell journals only after the write landed.
#[test]
fn a_canon_turn_is_journaled_open_once_and_closed_after_its_closing_publish() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let started = daemon.handle_effects(turn_start_line("t1", "c1", Some("m-1")));
    let opened: Vec<(Record, &Effect)> = started
        .iter()
        .filter_map(|e| match e {
            SessionEffect::JournalThenCanon { records, effect } => records
                .iter()
                .find(|r| matches!(r, Record::RuntimeTurnOpened { .. }))
                .map(|r| (r.clone(), effect)),
            _ => None,
        })
        .collect();
    let [(
        Record::RuntimeTurnOpened {
            turn_id,
            conversation_id,
            ..
        },
        Effect::PublishTurn(publish),
    )] = opened.as_slice()
    else {
        panic!("one open record, the opening publish after it: {started:?}");
    };
    assert_eq!(conversation_id, "c1");
    assert_eq!(publish.turn_id.as_deref(), Some(turn_id.as_str()));
    assert!(
        !started
            .iter()
            .any(|e| matches!(e, SessionEffect::Canon(Effect::PublishTurn(_)))),
        "the opening publish is sent only behind its record: {started:?}"
    );
    let edit = protocol::encode_request(
        "t2",
        "adapter.edit",
        json!({"chat_id": "c1", "message_id": turn_id, "content": "Hel", "ctx":
               {"platform": "canon", "chat_id": "c1", "session_key": session_key("c1")}}),
    );
    let streamed = daemon.handle_effects(SessionInput::Line(edit.into_bytes()));
    assert!(
        !records(&streamed)
            .iter()
            .any(|r| matches!(r, Record::RuntimeTurnOpened { .. })),
        "a later open state is not journaled again: {streamed:?}"
    );
    let closed = daemon.handle_effects(turn_complete_line("t3", "shim:t1", "c1", 0, false));
    let mut all = closed;
    all.extend(daemon.handle_effects(SessionInput::Timeout));
    daemon.now += crate::turn::FINAL_HANDOFF_MS;
    all.extend(daemon.handle_effects(SessionInput::Timeout));
    let closing: Vec<&Vec<Record>> = all
        .iter()
        .filter_map(|e| match e {
            SessionEffect::CanonJournaled {
                effect: Effect::PublishTurn(update),
                records,
            } if update.state.is_closing() => Some(records),
            _ => None,
        })
        .collect();
    assert_eq!(
        closing,
        [&vec![Record::RuntimeTurnClosed {
            turn_id: turn_id.clone()
        }]],
        "{all:?}"
    );
}

/// The fault harness's seed 3: Hermes pops the queued m-2 just before m-1's turn
/// reports its queue (empty), then a gateway stop cancels m-2's start. Settling m-2 at the
/// empty queue recorded it as handled, so the restart never replayed it and it was lost. Now
/// it stays unsettled through the stop; without a stop it settles once its turn starts, or
/// after the grace when no turn of its own ever comes.
#[test]
fn a_message_popped_for_a_start_the_gateway_stop_cancels_stays_unsettled() {
    let run = |stop: bool| {
        let mut daemon = Daemon::connected();
        daemon.connect();
        let mut journal = Vec::new();
        let first = daemon.handle_effects(frame("e-1", "m-1", "first"));
        let (request, first_ref) = handed_over(&first);
        journal.extend(records(&daemon.handle_effects(answer(&request))));
        journal.extend(records(
            &daemon.handle_effects(turn_start_for("t1", &first_ref, "c1", "m-1", false)),
        ));
        let second = daemon.handle_effects(frame("e-2", "m-2", "second"));
        let (request, second_ref) = handed_over(&second);
        journal.extend(records(
            &daemon.handle_effects(answer_queued(&request, "c1")),
        ));
        journal.extend(records(
            &daemon.handle_effects(turn_complete_line("t2", &first_ref, "c1", 0, false)),
        ));
        let handled_m2 = |journal: &[Record]| {
            journal
                .iter()
                .any(|r| matches!(r, Record::Handled { message_id, .. } if message_id == "m-2"))
        };
        assert!(!handled_m2(&journal), "not at the empty queue: {journal:?}");
        if stop {
            journal.extend(records(&daemon.handle_effects(turn_start_for(
                "t3",
                &second_ref,
                "c1",
                "m-2",
                true,
            ))));
        }
        let grace = daemon.session.next_deadline().expect("a deadline");
        daemon.now = daemon.now.max(grace);
        journal.extend(records(&daemon.handle_effects(SessionInput::Timeout)));
        (
            handled_m2(&journal),
            daemon.session.inbox_cursor().map(str::to_owned),
        )
    };
    assert_eq!(
        run(true),
        (false, Some("e-1".into())),
        "replayed after the restart"
    );
    assert_eq!(
        run(false),
        (true, Some("e-2".into())),
        "let go after the grace"
    );
}

/// Hermes can start a message's turn before the shim's answer to its hand-over arrives. A
/// daemon killed in between must not leave the message looking unhandled: its successor would
/// hand the replayed frame to Hermes again, and Hermes would answer it twice (once in its
/// resume of the interrupted turn, once as a new message). The turn's start records it handled.
#[test]
fn a_turn_that_starts_before_the_hand_over_is_answered_records_its_message_handled() {
    let mut daemon = Daemon::connected();
    daemon.connect();
    let offered = daemon.handle_effects(frame("e-1", "m-1", "hello"));
    let mut journal = records(&offered);
    let (_request, event_ref) = handed_over(&offered);
    let started = daemon.handle_effects(turn_start_for("t1", &event_ref, "c1", "m-1", false));
    journal.extend(records(&started));
    let handled_at = journal
        .iter()
        .position(|r| matches!(r, Record::Handled { message_id, .. } if message_id == "m-1"));
    let opened_at = journal
        .iter()
        .position(|r| matches!(r, Record::TurnOpened { .. }));
    assert!(
        matches!((handled_at, opened_at), (Some(h), Some(o)) if h < o),
        "m-1 is handled before its turn's open record: {journal:?}"
    );
    // The daemon dies here, before the shim's answer. Its successor loads the journal.
    let mut next = successor_of(loaded_from(&journal));
    let replayed = next.handle_effects(frame("e-1", "m-1", "hello"));
    assert_eq!(
        inbound_request_ids(&replayed),
        Vec::<String>::new(),
        "m-1 is not handed over again"
    );
    assert_eq!(records(&replayed), vec![Record::Cursor("e-1".into())]);
}

/// A journal that holds a turn open for a message without its handled record (written before
/// turns recorded their messages handled): the replay of that message is still not handed over,
/// since Hermes' resume of the interrupted turn answers it; it is recorded handled then.
#[test]
fn a_replayed_message_of_an_inherited_turn_is_not_handed_over_again() {
    let mut daemon = inheriting(&[("c1", "m-7")]);
    let replayed = daemon.handle_effects(frame("e-7", "m-7", "cut off"));
    assert_eq!(inbound_request_ids(&replayed), Vec::<String>::new());
    assert_eq!(
        records(&replayed),
        vec![
            Record::Handled {
                message_id: "m-7".into(),
                at_ms: daemon.now
            },
            Record::Cursor("e-7".into())
        ]
    );
    let resume = daemon.handle_effects(turn_start_line("r1", "c1", None));
    assert_eq!(published_active(&resume), ["m-7"], "the resume answers it");
}

/// Hermes' resume of an interrupted turn replies to nothing. Its answer replies to the
/// interrupted turn's message, so Canon ties the two even when the turn's opening publish
/// (the only one that names the message) failed.
#[test]
fn the_answer_of_a_resume_replies_to_its_interrupted_turns_message() {
    let mut daemon = inheriting(&[("c1", "m-7")]);
    let resumed = daemon.handle_effects(turn_start_line("r1", "c1", None));
    assert_eq!(published_active(&resumed), ["m-7"]);
    // Hermes streams the resume's answer and finalizes it, replying to nothing.
    let ctx = json!({"platform": "canon", "session_key": session_key("c1"), "chat_id": "c1"});
    let send = protocol::encode_request(
        "s1",
        "adapter.send",
        json!({"chat_id": "c1", "content": "The answer", "reply_to": null,
               "metadata": {"expect_edits": true}, "ctx": ctx}),
    );
    let mut effects = daemon.handle_effects(SessionInput::Line(send.into_bytes()));
    let finalize = protocol::encode_request(
        "s2",
        "adapter.edit",
        json!({"chat_id": "c1", "message_id": "ignored", "content": "The answer",
               "finalize": true, "metadata": null, "ctx": ctx}),
    );
    effects.extend(daemon.handle_effects(SessionInput::Line(finalize.into_bytes())));
    effects.extend(daemon.handle_effects(turn_complete_line("t2", "shim:r1", "c1", 0, false)));
    let delivery = effects
        .iter()
        .find_map(|e| match e {
            SessionEffect::Canon(Effect::Deliver(delivery)) => Some(format!("{delivery:?}")),
            _ => None,
        })
        .expect("the final goes out");
    assert!(delivery.contains("reply_to: Some(\"m-7\")"), "{delivery}");
}
