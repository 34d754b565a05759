//! The journal format's parser: any cut of a valid journal, and arbitrary bytes.

use proptest::prelude::*;

use crate::format::{journalable, parse, record_line, MAX_ID_BYTES};
use crate::Record;

const SCOPE: &str = "0123456789abcdef0123456789abcdef";

fn handled(id: &str, at_ms: u64) -> Record {
    Record::Handled {
        message_id: id.to_owned(),
        at_ms,
    }
}

#[test]
fn a_damaged_line_or_header_is_refused_with_its_line_number() {
    let header = format!("{{\"canonInbox\":1,\"scope\":\"{SCOPE}\"}}\n");
    let bad = format!("{header}{{\"cursor\":\"e-1\"}}\n{{\"handled\":42,\"at\":1}}\n");
    let (line, reason) = parse(bad.as_bytes(), SCOPE).unwrap_err();
    assert_eq!(
        (line, reason.as_str()),
        (3, "a message id that is not a string")
    );
    let (line, reason) = parse(b"{\"canonInbox\":2,\"scope\":\"x\"}\n", SCOPE).unwrap_err();
    assert_eq!(line, 1);
    assert!(reason.contains("format version 2"), "{reason}");
    let (_, reason) = parse(b"{\"canonInbox\":1,\"scope\":\"other\"}\n", SCOPE).unwrap_err();
    assert!(reason.contains("scope other"), "{reason}");
    let (line, _) = parse(format!("{header}\n").as_bytes(), SCOPE).unwrap_err();
    assert_eq!(line, 2, "an empty line is not a record");
}

#[test]
fn an_open_turn_survives_compaction_until_it_closes() {
    let opened = Record::TurnOpened {
        session_key: "agent:main:canon:dm:c-1".into(),
        conversation_id: "c-1".into(),
        message_ids: vec!["m-1".into(), "m-2".into()],
    };
    let parsed = parse(journal_text(&[opened]).as_bytes(), SCOPE).unwrap();
    let snapshot = crate::format::snapshot(SCOPE, &parsed.state);
    let again = parse(snapshot.as_bytes(), SCOPE).unwrap();
    assert_eq!(again.state.open_turns, parsed.state.open_turns);
    assert_eq!(again.state.open_turns.len(), 1);
    let mut state = again.state;
    state.apply(&Record::TurnClosed {
        session_key: "agent:main:canon:dm:c-1".into(),
    });
    assert!(state.open_turns.is_empty());
    let (line, reason) = parse(
        format!(
            "{}{{\"open\":\"s\",\"conversation\":\"c\",\"messages\":[1]}}\n",
            journal_text(&[])
        )
        .as_bytes(),
        SCOPE,
    )
    .unwrap_err();
    assert_eq!(
        (line, reason.as_str()),
        (2, "a message id that is not a string")
    );
}

#[test]
fn a_canon_turn_told_open_stays_open_through_compaction_until_told_closed() {
    let opened = |id: &str| Record::RuntimeTurnOpened {
        turn_id: id.into(),
        conversation_id: "c-1".into(),
        opened_at_ms: 1_700_000_000_000,
    };
    let text = journal_text(&[
        opened("hermes-a"),
        opened("hermes-b"),
        opened("hermes-a"),
        Record::RuntimeTurnClosed {
            turn_id: "hermes-b".into(),
        },
    ]);
    let parsed = parse(text.as_bytes(), SCOPE).unwrap();
    let open: Vec<&str> = parsed
        .state
        .runtime_turns
        .iter()
        .map(|t| t.turn_id.as_str())
        .collect();
    assert_eq!(open, ["hermes-a"]);
    let again = parse(
        crate::format::snapshot(SCOPE, &parsed.state).as_bytes(),
        SCOPE,
    )
    .unwrap();
    assert_eq!(again.state.runtime_turns, parsed.state.runtime_turns);
    let bad = format!(
        "{}{{\"turn\":\"hermes-a\",\"conversation\":\"c-1\"}}\n",
        journal_text(&[])
    );
    assert_eq!(
        parse(bad.as_bytes(), SCOPE).unwrap_err(),
        (2, "a Canon turn record without its opening time".to_owned())
    );
    let bad = format!(
        "{}{{\"turnClosed\":\"hermes-a\",\"x\":1}}\n",
        journal_text(&[])
    );
    assert_eq!(
        parse(bad.as_bytes(), SCOPE).unwrap_err(),
        (
            2,
            "a closed Canon turn record with unexpected fields".to_owned()
        )
    );
}

fn journal_text(records: &[Record]) -> String {
    let mut text = format!("{{\"canonInbox\":1,\"scope\":\"{SCOPE}\"}}\n");
    for record in records {
        text.push_str(&record_line(record));
    }
    text
}

/// Any id a writer might be handed: empty, ordinary, or past the reader's limit.
fn arb_any_id() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z0-9-]{1,12}",
        (MAX_ID_BYTES - 2..MAX_ID_BYTES + 3).prop_map(|n| "x".repeat(n)),
    ]
}

/// Records as the daemon may produce them, beyond what the reader accepts: empty and over-long
/// ids, and open turns merging up to 100 messages.
fn arb_any_record() -> impl Strategy<Value = Record> {
    prop_oneof![
        (arb_any_id(), any::<u64>()).prop_map(|(id, at)| handled(&id, at)),
        arb_any_id().prop_map(Record::Cursor),
        (
            arb_any_id(),
            arb_any_id(),
            proptest::collection::vec(arb_any_id(), 0..100)
        )
            .prop_map(
                |(session_key, conversation_id, message_ids)| Record::TurnOpened {
                    session_key,
                    conversation_id,
                    message_ids,
                }
            ),
        arb_any_id().prop_map(|session_key| Record::TurnClosed { session_key }),
        (arb_any_id(), arb_any_id(), any::<u64>()).prop_map(
            |(turn_id, conversation_id, opened_at_ms)| Record::RuntimeTurnOpened {
                turn_id,
                conversation_id,
                opened_at_ms,
            }
        ),
        arb_any_id().prop_map(|turn_id| Record::RuntimeTurnClosed { turn_id }),
    ]
}

fn arb_record() -> impl Strategy<Value = Record> {
    prop_oneof![
        ("[a-z0-9:/ é\"\\\\-]{1,40}", any::<u64>()).prop_map(|(id, at)| handled(&id, at)),
        "[a-z0-9-]{1,20}".prop_map(Record::Cursor),
        (
            "[a-z:]{1,12}",
            "c-[0-9]{1,3}",
            proptest::collection::vec("m-[0-9]{1,4}", 0..4)
        )
            .prop_map(
                |(session_key, conversation_id, message_ids)| Record::TurnOpened {
                    session_key,
                    conversation_id,
                    message_ids,
                }
            ),
        "[a-z:]{1,12}".prop_map(|session_key| Record::TurnClosed { session_key }),
        ("hermes-[0-9a-f]{1,3}", "c-[0-9]{1,3}", any::<u64>()).prop_map(
            |(turn_id, conversation_id, opened_at_ms)| Record::RuntimeTurnOpened {
                turn_id,
                conversation_id,
                opened_at_ms,
            }
        ),
        "hermes-[0-9a-f]{1,3}".prop_map(|turn_id| Record::RuntimeTurnClosed { turn_id }),
    ]
}

proptest! {
    /// A journal cut at any byte (a crash mid-append) loads exactly the records whose lines
    /// are complete, and never fails.
    #[test]
    fn a_journal_cut_anywhere_loads_its_complete_records(
        records in proptest::collection::vec(arb_record(), 0..20),
        cut in any::<proptest::sample::Index>(),
    ) {
        let text = journal_text(&records);
        let header = text.find('\n').unwrap() + 1;
        let at = header + cut.index(text.len() - header + 1);
        let parsed = parse(&text.as_bytes()[..at], SCOPE).unwrap();
        let complete = text.as_bytes()[..at].iter().filter(|b| **b == b'\n').count() - 1;
        let mut expected_cursor = None;
        let mut expected_handled = Vec::new();
        let mut expected_open: Vec<(String, String, Vec<String>)> = Vec::new();
        let mut expected_runtime: Vec<(String, String, u64)> = Vec::new();
        for record in &records[..complete] {
            match record {
                Record::Cursor(c) => expected_cursor = Some(c.clone()),
                Record::Handled { message_id, .. } => {
                    if !expected_handled.contains(message_id) {
                        expected_handled.push(message_id.clone());
                    }
                }
                Record::TurnOpened { session_key, conversation_id, message_ids } => {
                    expected_open.retain(|(s, _, _)| s != session_key);
                    expected_open.push((session_key.clone(), conversation_id.clone(), message_ids.clone()));
                }
                Record::TurnClosed { session_key } => {
                    expected_open.retain(|(s, _, _)| s != session_key);
                }
                Record::RuntimeTurnOpened { turn_id, conversation_id, opened_at_ms } => {
                    if !expected_runtime.iter().any(|(t, _, _)| t == turn_id) {
                        expected_runtime.push((turn_id.clone(), conversation_id.clone(), *opened_at_ms));
                    }
                }
                Record::RuntimeTurnClosed { turn_id } => {
                    expected_runtime.retain(|(t, _, _)| t != turn_id);
                }
            }
        }
        let runtime: Vec<(String, String, u64)> = parsed
            .state
            .runtime_turns
            .iter()
            .map(|t| (t.turn_id.clone(), t.conversation_id.clone(), t.opened_at_ms))
            .collect();
        prop_assert_eq!(runtime, expected_runtime);
        let again = parse(crate::format::snapshot(SCOPE, &parsed.state).as_bytes(), SCOPE).unwrap();
        prop_assert_eq!(&again.state.runtime_turns, &parsed.state.runtime_turns);
        prop_assert_eq!(&again.state.open_turns, &parsed.state.open_turns);
        let open: Vec<(String, String, Vec<String>)> = parsed
            .state
            .open_turns
            .iter()
            .map(|t| (t.session_key.clone(), t.conversation_id.clone(), t.message_ids.clone()))
            .collect();
        prop_assert_eq!(open, expected_open);
        prop_assert_eq!(parsed.state.cursor, expected_cursor);
        let got: Vec<String> = parsed.state.handled.iter().map(|(id, _)| id.to_owned()).collect();
        prop_assert_eq!(got, expected_handled);
        prop_assert_eq!(parsed.lines, complete + 1);
    }

    /// Whatever a writer journals (the `journalable` form of any record, ids empty, long or
    /// many), the reader loads, and a snapshot of that state loads too.
    #[test]
    fn every_journalable_record_reads_back(
        records in proptest::collection::vec(arb_any_record(), 0..12),
    ) {
        let kept: Vec<Record> = records.iter().filter_map(journalable).collect();
        let text = journal_text(&kept);
        let parsed = parse(text.as_bytes(), SCOPE);
        prop_assert!(parsed.is_ok(), "{:?}", parsed.err());
        let parsed = parsed.unwrap();
        prop_assert_eq!(parsed.lines, kept.len() + 1);
        for record in &kept {
            if let Record::TurnOpened { message_ids, .. } = record {
                prop_assert!(message_ids.len() <= crate::tracker::MAX_TURN_MESSAGES);
            }
        }
        let again = parse(crate::format::snapshot(SCOPE, &parsed.state).as_bytes(), SCOPE);
        prop_assert!(again.is_ok(), "{:?}", again.err());
    }

    /// Arbitrary bytes never panic the parser: they load or fail with a line number.
    #[test]
    fn arbitrary_bytes_load_or_fail_with_a_line(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        match parse(&bytes, SCOPE) {
            Ok(parsed) => prop_assert!(parsed.complete_bytes <= bytes.len()),
            Err((line, reason)) => {
                prop_assert!(line >= 1);
                prop_assert!(!reason.is_empty());
            }
        }
    }
}
