//! Tests of the sends that name no turn (turns.md §4.6 and §7.6): a turn-less send, as
//! Hermes' in-process cron delivery makes, and `standalone.send` each get a fresh standalone
//! id group derived from the input's randomness, are chunked into ordered parts and keep the
//! Hermes metadata.

use canon_chunking::ids::{stable_final_message_id, Ordinal};
use serde_json::{json, Map, Value};

use super::support::*;
use crate::turn::*;

/// A durable `send` with no session, no open turn and no `notify`: it
/// resolves to no turn id (turns.md §7.6), as Hermes' in-process cron
/// delivery does.
fn turnless_send(request: u64, content: &str, metadata: Value, random: u128) -> Input {
    Input::Send(HostSend {
        request: RequestId(request),
        session_key: None,
        conversation_id: C1.to_owned(),
        content: content.to_owned(),
        reply_to: None,
        metadata: meta(metadata),
        random,
        stop_notice: false,
    })
}

fn compact(metadata: &Map<String, Value>) -> String {
    Value::Object(metadata.clone()).to_string()
}

/// Lead decision on turns.md §7.6 vs §4.6: a send with no turn id gets the
/// id group `standalone:<32 hex>` of its input's randomness, and its ids
/// follow from that randomness alone.
#[test]
fn turnless_send_ids_derive_from_its_randomness() {
    let random = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;
    let send = || turnless_send(1, "Nightly report: all is well.", Value::Null, random);
    let first = only_delivery(&TurnMachine::new(TurnConfig::default()).handle(send(), 0));
    let second = only_delivery(&TurnMachine::new(TurnConfig::default()).handle(send(), 5));
    assert_eq!(first, second, "same randomness, same delivery");

    let group = StandaloneGroup::new(C1, random);
    assert_eq!(group.token(), "standalone:0123456789abcdef0123456789abcdef");
    assert_eq!(
        stable_final_message_id(C1, Some(group.token()), Ordinal::FIRST).as_deref(),
        Some(group.base_id())
    );
    assert_eq!(first.route, Route::SendTo);
    assert_eq!(first.conversation_id, C1);
    assert_eq!(first.turn_id, None, "the token never reaches the wire");
    assert_eq!(first.parts.len(), 1);
    let part = &first.parts[0];
    assert_eq!(part.message_id.as_deref(), Some(group.base_id()));
    assert_eq!(
        compact(&part.metadata),
        r#"{"turnSemantics":"turn_complete","turnComplete":true}"#
    );
    assert_eq!(part.reply_authority, None);
}

/// Every invocation mints a fresh group: two sends of the same text never
/// share an id, while a send with a turn id keeps the ledger's ids.
#[test]
fn turnless_sends_never_share_ids() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    let text = "word ".repeat(1_600);
    let ids = |delivery: &Delivery| -> Vec<String> {
        delivery
            .parts
            .iter()
            .map(|p| p.message_id.clone().expect("every part has an id"))
            .collect()
    };
    let first = only_delivery(&machine.handle(turnless_send(1, &text, Value::Null, 1), 0));
    let second = only_delivery(&machine.handle(turnless_send(2, &text, Value::Null, 2), 1));
    assert_eq!(first.parts.len(), 3);
    assert_eq!(second.parts.len(), 3);
    let (first_ids, second_ids) = (ids(&first), ids(&second));
    assert!(
        first_ids.iter().all(|id| !second_ids.contains(id)),
        "{first_ids:?} vs {second_ids:?}"
    );
    let group_id = |d: &Delivery| d.parts[0].metadata["messageChunk"]["groupId"].clone();
    assert_ne!(group_id(&first), group_id(&second));
    // The same randomness again (which the driver never supplies) would
    // replay the first group: the ids depend on nothing else.
    let again = only_delivery(&machine.handle(turnless_send(3, &text, Value::Null, 1), 2));
    assert_eq!(ids(&again), first_ids);
    check_steps(
        &mut machine,
        vec![
            (3, delivered(1), &["reply r1 delivered canon-msg-1"]),
            (
                4,
                failed(2, FailureClass::Ambiguous),
                &["reply r2 failed \"Canon send timed out unconfirmed; it may have been delivered, so it is not retried\" retryable=false"],
            ),
        ],
    );
    // Nothing is kept for a turn-less send: no session, no pending plan.
    assert!(machine.sessions.is_empty());
}

/// hermes-host.md §8.4: a retry of a turn-less send is a new invocation
/// under new ids, so an ambiguous failure (a 5xx after Canon stored it, a
/// reset, a read timeout), which the transport reports as retryable with its
/// own text, is answered as "timed out" and not retryable; Hermes then
/// neither retries it nor sends a fallback copy. A failure that provably
/// stored nothing keeps its text and retry flag, so Hermes may send it again
/// safely; so does a turn-less media send.
#[test]
fn turnless_ambiguous_failure_says_timed_out_and_is_not_retryable() {
    let failure = |op: u64, class: FailureClass, error: &str| Input::DeliveryOutcome {
        op: OpId(op),
        result: Err(DeliveryFailure {
            class,
            error: error.to_owned(),
            retryable: true,
        }),
    };
    let mut machine = TurnMachine::new(TurnConfig::default());
    for (request, random) in [(1, 1), (2, 2), (3, 3)] {
        only_delivery(&machine.handle(turnless_send(request, "report", Value::Null, random), 0));
    }
    check_steps(
        &mut machine,
        vec![
            (
                1,
                failure(
                    1,
                    FailureClass::Ambiguous,
                    "Canon API returned 502: bad gateway",
                ),
                &["reply r1 failed \"Canon send timed out unconfirmed; it may have been delivered, so it is not retried\" retryable=false"],
            ),
            (
                2,
                failure(2, FailureClass::PreHandler, "Canon API returned 503: busy"),
                &["reply r2 failed \"Canon API returned 503: busy\" retryable=true"],
            ),
            (3, delivered(3), &["reply r3 delivered canon-msg-1"]),
        ],
    );
    assert_eq!(
        format!("{UNCONFIRMED_SEND:?}"),
        "\"Canon send timed out unconfirmed; it may have been delivered, so it is not retried\""
    );
    // A media send outside any turn is a turn-less send too.
    let media = Input::Media(HostMedia {
        request: RequestId(4),
        session_key: None,
        conversation_id: C1.to_owned(),
        caption: "chart".to_owned(),
        reply_to: None,
        metadata: Map::new(),
        media: MediaPayload {
            content_type: "image".to_owned(),
            attachments: vec![json!({"url": "https://files.example/chart.png"})],
        },
        random: 4,
    });
    only_delivery(&machine.handle(media, 4));
    check_steps(
        &mut machine,
        vec![(
            5,
            failure(4, FailureClass::Ambiguous, "broken pipe"),
            &["reply r4 failed \"Canon send timed out unconfirmed; it may have been delivered, so it is not retried\" retryable=false"],
        )],
    );
}

/// turns.md §3.6 and §4.6: a 10 KB turn-less send splits into parts of at
/// most 3,800 bytes with ids `base-part-i`, leading parts `progress` with
/// `suppress_auto_reply`, one `turn_complete` final, `messageChunk` with the
/// group id on every part, and no `turnId` or trail.
#[test]
fn turnless_ten_kilobyte_send_is_one_chunked_group() {
    let text: String = (0..200)
        .map(|i| format!("Cron line {i:03}: the nightly report says all is well.\n"))
        .collect();
    assert!(text.len() > 10_000);
    let random = 42;
    let mut machine = TurnMachine::new(TurnConfig::default());
    let effects = machine.handle(turnless_send(1, &text, Value::Null, random), 0);
    assert_eq!(
        effects.iter().map(describe).collect::<Vec<_>>(),
        ["deliver op1 send_to conv-1 [part-1 progress 3795B, part-2 progress 3795B, part-3 turn_complete 2808B]"]
    );
    let delivery = only_delivery(&effects);
    let base = StandaloneGroup::new(C1, random).base_id().to_owned();
    let count = delivery.parts.len();
    for (i, part) in delivery.parts.iter().enumerate() {
        let index = i + 1;
        assert!(part.text.len() <= 3_800, "part {index}");
        assert_eq!(
            part.message_id.as_deref(),
            Some(format!("{base}-part-{index}").as_str())
        );
        let chunk = format!(
            r#""messageChunk":{{"type":"text","index":{index},"count":{count},"groupId":"{base}"}}"#
        );
        let expected = if index < count {
            format!(
                r#"{{"turnSemantics":"progress","replyBehavior":"suppress_auto_reply",{chunk}}}"#
            )
        } else {
            format!(r#"{{"turnSemantics":"turn_complete","turnComplete":true,{chunk}}}"#)
        };
        assert_eq!(compact(&part.metadata), expected, "part {index}");
    }
    let texts: Vec<&str> = delivery.parts.iter().map(|p| p.text.as_str()).collect();
    assert_eq!(texts.join("\n"), text, "each line cut consumes one newline");
}

/// The Hermes metadata of a turn-less send stays on every part (cron's
/// `job_id` under `metadata.hermes`, or a `canon_metadata` bag); `replyTo`
/// rides on every part, content options on the final part only.
#[test]
fn turnless_send_keeps_the_hermes_metadata() {
    let text = "word ".repeat(1_000);
    let mut machine = TurnMachine::new(TurnConfig::default());
    let cron = only_delivery(&machine.handle(
        turnless_send(1, &text, json!({"job_id": "job-7", "nested": {"a": 1}}), 3),
        0,
    ));
    assert_eq!(cron.parts.len(), 2);
    let base = StandaloneGroup::new(C1, 3).base_id().to_owned();
    assert_eq!(
        compact(&cron.parts[0].metadata),
        format!(
            r#"{{"hermes":{{"job_id":"job-7"}},"turnSemantics":"progress","replyBehavior":"suppress_auto_reply","messageChunk":{{"type":"text","index":1,"count":2,"groupId":"{base}"}}}}"#
        )
    );
    assert_eq!(
        compact(&cron.parts[1].metadata),
        format!(
            r#"{{"hermes":{{"job_id":"job-7"}},"turnSemantics":"turn_complete","turnComplete":true,"messageChunk":{{"type":"text","index":2,"count":2,"groupId":"{base}"}}}}"#
        )
    );

    let mut send = turnless_send(
        2,
        "Done.",
        json!({
            "canon_metadata": {"source": "cron", "turnTrail": [], "messageChunk": {}},
            "canon_options": {"mentions": ["u1"], "contentType": "x"},
        }),
        4,
    );
    if let Input::Send(host) = &mut send {
        host.reply_to = Some("m9".to_owned());
    }
    let bagged = only_delivery(&machine.handle(send, 1));
    let part = &bagged.parts[0];
    assert_eq!(
        compact(&part.metadata),
        r#"{"source":"cron","turnSemantics":"turn_complete","turnComplete":true}"#
    );
    assert_eq!(part.reply_to.as_deref(), Some("m9"));
    assert_eq!(compact(&part.options), r#"{"mentions":["u1"]}"#);
}

/// turns.md §4.6: a standalone send is chunked under a fresh id group to
/// the home channel; without any target it fails with the exact message.
#[test]
fn standalone_sends() {
    let standalone = |request, chat: Option<&str>, home: Option<&str>, text: &str| {
        Input::Standalone(StandaloneSend {
            request: RequestId(request),
            chat_id: chat.map(str::to_owned),
            home_channel_env: home.map(str::to_owned),
            home_channel_config: None,
            text: text.to_owned(),
            media: None,
            random: 7,
        })
    };
    let long = "cron line\n".repeat(500);
    check(vec![
        (0, standalone(1, None, None, "x"), &[
            "reply r1 standalone err \"Canon standalone send failed: no conversation ID provided\"",
        ]),
        (1, standalone(2, Some(" "), Some("home-1"), &long), &[
            "deliver op1 send_to home-1 [part-1 progress 3799B, part-2 turn_complete 1200B]",
        ]),
        (2, delivered(1), &["reply r2 standalone ok canon-msg-1"]),
        (3, standalone(3, Some("conv-9"), None, "hi"), &[
            "deliver op2 send_to conv-9 [base turn_complete \"hi\"]",
        ]),
        (4, failed(2, FailureClass::Ambiguous), &[
            "reply r3 standalone err \"Canon standalone send failed: Canon request timed out\"",
        ]),
    ]);
}
