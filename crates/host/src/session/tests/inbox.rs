//! The durable inbox through [`Session::handle`]: which records a frame produces, when a
//! message's frame settles, and how a resumed session drops a replayed message. The whole-binary
//! twins (a daemon killed with SIGKILL and restarted) are in `crates/cli/tests/it/serve_inbox.rs`.

use canon_inbox::{HandledSet, Record};

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
            SessionEffect::Inbox(records) => Some(records.clone()),
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
    daemon.session.inbox_resume(Some("e-0".into()), handled);
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
