//! Tests of outbound media (the media row of turns.md §7.6 and turns.md OQ-6): in an open turn
//! media is its own durable `turn_complete` under the turn's next ordinal, even when it fails
//! ambiguously; a silenced turn answers success and writes nothing; out of turn, media is a
//! standalone id group with the attachments on the final part, as they are for a
//! `standalone.send` with media.

use canon_chunking::ids::{stable_final_message_id, Ordinal};
use serde_json::{json, Map};

use super::support::*;
use crate::turn::*;

fn media(request: u64, session: Option<&str>, caption: &str, random: u128) -> Input {
    Input::Media(HostMedia {
        request: RequestId(request),
        session_key: session.map(str::to_owned),
        conversation_id: C1.to_owned(),
        caption: caption.to_owned(),
        reply_to: None,
        metadata: Map::new(),
        media: image_payload(),
        random,
    })
}

fn deliveries(effects: &[Effect]) -> Vec<Delivery> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deliver(d) => Some(d.clone()),
            _ => None,
        })
        .collect()
}

/// turns.md OQ-6: media in an open turn is its own durable `turn_complete` with
/// the turn id and the peeked trail, under the id of the turn's next ordinal;
/// its success consumes the activity, and the final takes the ordinal after.
#[test]
fn media_in_an_open_turn_is_its_own_turn_complete_under_the_next_ordinal() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m1", 4), 0);
    machine.handle(tool_started("call-1", "search"), 1);
    machine.handle(tool_finished("call-1", "search"), 2);
    let sent = machine.handle(media(2, Some(S1), "Here it is", rand(7)), 3);
    let delivery = only_delivery(&sent);
    assert_eq!(delivery.route, Route::Messages);
    assert_eq!(delivery.turn_id.as_deref(), Some(turn_id(4).as_str()));
    let [part] = delivery.parts.as_slice() else {
        panic!("one part: {delivery:?}");
    };
    assert_eq!(
        part.message_id,
        stable_final_message_id(C1, Some(&turn_id(4)), Ordinal::FIRST)
    );
    assert_eq!(part.text, "Here it is");
    assert_eq!(part.metadata["turnSemantics"], "turn_complete");
    assert_eq!(part.metadata["turnId"], json!(turn_id(4)));
    assert!(part.metadata.contains_key("turnTrail"), "{part:?}");
    assert_eq!(part.content_type.as_deref(), Some("image"));
    assert_eq!(part.attachments, image_payload().attachments);
    let done = machine.handle(delivered(delivery.op.0), 4);
    assert_eq!(
        done.iter().map(describe).collect::<Vec<_>>(),
        ["reply r2 delivered canon-msg-1"]
    );
    machine.handle(preview(3, "All done"), 5);
    machine.handle(edit(4, "All done", true), 6);
    let closed = machine.handle(complete(5, Outcome::Success), 7);
    let [flush] = deliveries(&closed).try_into().expect("one flush");
    let final_part = &flush.parts[0];
    assert_eq!(
        final_part.message_id,
        stable_final_message_id(C1, Some(&turn_id(4)), Ordinal::FIRST.next())
    );
    let trail = final_part.metadata["turnTrail"]
        .as_array()
        .expect("a trail");
    assert!(
        trail.iter().all(|b| b["kind"] == "text"),
        "the media consumed the tool activity: {final_part:?}"
    );
    assert!(final_part.attachments.is_empty());
    assert_eq!(final_part.content_type, None);
}

/// A media send that fails ambiguously still uses up its ordinal, so the
/// final can never collide with a media message Canon may have stored.
#[test]
fn failed_media_uses_up_its_ordinal() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    machine.handle(start(1, "m1", 4), 0);
    let sent = machine.handle(media(2, Some(S1), "", rand(7)), 1);
    let delivery = only_delivery(&sent);
    assert_eq!(delivery.parts[0].text, "");
    check_steps(
        &mut machine,
        vec![(
            2,
            failed(delivery.op.0, FailureClass::Ambiguous),
            &["reply r2 failed \"Canon request timed out\" retryable=false"],
        )],
    );
    let again = only_delivery(&machine.handle(media(3, Some(S1), "", rand(7)), 3));
    assert_eq!(
        again.parts[0].message_id,
        stable_final_message_id(C1, Some(&turn_id(4)), Ordinal::FIRST.next())
    );
}

/// A silenced turn answers media with success and writes nothing.
#[test]
fn media_in_a_silenced_turn_is_suppressed_with_success() {
    check(vec![
        (
            0,
            start(1, "m1", 4),
            &[
                "read conv-1",
                "turn thinking T4 q=0 active=m1",
                "reply r1 started T4",
            ],
        ),
        (
            1,
            no_reply(2, None, true),
            &[
                "no_reply record conv-1 m1 given",
                "reply r2 no_reply ack conv-1",
            ],
        ),
        (
            2,
            media(3, Some(S1), "pic", rand(7)),
            &["reply r3 silenced T4"],
        ),
    ]);
}

/// Out of turn, media is a fresh standalone id group through `send_to`
/// with the attachments on the final part only.
#[test]
fn media_out_of_turn_is_a_standalone_group_with_media_on_the_final_part() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    let caption = "word ".repeat(1_000);
    let delivery = only_delivery(&machine.handle(media(1, None, &caption, rand(5)), 0));
    assert_eq!(delivery.route, Route::SendTo);
    assert_eq!(delivery.turn_id, None);
    assert_eq!(delivery.parts.len(), 2);
    let group = StandaloneGroup::new(C1, rand(5));
    assert_eq!(
        delivery.parts[1].message_id.as_deref(),
        Some(format!("{}-part-2", group.base_id()).as_str())
    );
    assert!(delivery.parts[0].attachments.is_empty());
    assert_eq!(delivery.parts[0].content_type, None);
    assert_eq!(delivery.parts[1].attachments, image_payload().attachments);
    assert_eq!(delivery.parts[1].content_type.as_deref(), Some("image"));
    assert!(delivery
        .parts
        .iter()
        .all(|p| !p.metadata.contains_key("turnId")));
    let other = only_delivery(&machine.handle(media(2, None, "x", rand(6)), 1));
    assert_ne!(other.parts[0].message_id, delivery.parts[1].message_id);
}

/// `standalone.send` with media: the attachments ride on the final part.
#[test]
fn standalone_media_rides_on_the_final_part() {
    let mut machine = TurnMachine::new(TurnConfig::default());
    let effects = machine.handle(
        Input::Standalone(StandaloneSend {
            request: RequestId(1),
            chat_id: Some(C1.to_owned()),
            home_channel_env: None,
            home_channel_config: None,
            text: "word ".repeat(1_000),
            media: Some(image_payload()),
            random: rand(3),
        }),
        0,
    );
    let delivery = only_delivery(&effects);
    assert_eq!(delivery.parts.len(), 2);
    assert!(delivery.parts[0].attachments.is_empty());
    assert_eq!(delivery.parts[1].attachments.len(), 1);
}
