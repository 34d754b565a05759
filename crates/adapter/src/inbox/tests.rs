//! The journal against real files: reopening, torn tails, corruption, compaction, the lock.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use canon_inbox::format::{scope_key, COMPACT_LINES};
use canon_inbox::Record;

use super::{InboxError, Journal};

const SCOPE: &str = "0123456789abcdef0123456789abcdef";
const WAIT: Duration = Duration::from_millis(200);

fn handled(id: &str, at_ms: u64) -> Record {
    Record::Handled {
        message_id: id.to_owned(),
        at_ms,
    }
}

#[test]
fn a_reopened_journal_has_the_cursor_and_the_handled_ids() {
    let home = tempfile::tempdir().unwrap();
    {
        let (mut journal, loaded) = Journal::open(home.path(), SCOPE, WAIT).unwrap();
        assert_eq!(loaded.cursor, None);
        assert!(loaded.handled.is_empty());
        journal
            .append(&[handled("m-1", 10), Record::Cursor("e-4".into())])
            .unwrap();
        journal.append(&[Record::Cursor("e-9".into())]).unwrap();
    }
    let (journal, loaded) = Journal::open(home.path(), SCOPE, WAIT).unwrap();
    assert_eq!(loaded.cursor.as_deref(), Some("e-9"));
    assert!(loaded.handled.contains("m-1"));
    assert!(!loaded.torn_tail);
    let mode = fs::metadata(journal.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn records_past_the_reader_s_limits_never_keep_the_next_start_out() {
    let home = tempfile::tempdir().unwrap();
    let long = "x".repeat(canon_inbox::format::MAX_ID_BYTES + 1);
    let merged: Vec<String> = (0..65).map(|n| format!("m-{n}")).collect();
    {
        let (mut journal, _) = Journal::open(home.path(), SCOPE, WAIT).unwrap();
        journal
            .append(&[
                Record::TurnOpened {
                    session_key: "s-1".into(),
                    conversation_id: "c-1".into(),
                    message_ids: merged.clone(),
                },
                handled("", 1),
                handled(&long, 2),
                handled("m-ok", 3),
                Record::Cursor(long.clone()),
            ])
            .unwrap();
    }
    let (_, loaded) = Journal::open(home.path(), SCOPE, WAIT).expect("the journal reads back");
    let turn = loaded.open_turns.iter().next().expect("the open turn");
    assert_eq!(turn.message_ids, merged[..64].to_vec());
    assert!(loaded.handled.contains("m-ok"));
    assert!(!loaded.handled.contains(""));
    assert_eq!(loaded.cursor, None);
}

#[test]
fn after_a_failed_append_the_next_one_rewrites_the_journal_from_its_state() {
    let home = tempfile::tempdir().unwrap();
    let (mut journal, _) = Journal::open(home.path(), SCOPE, WAIT).unwrap();
    journal.append(&[handled("m-1", 1)]).unwrap();
    let path = journal.path().to_owned();
    // A write that dies part way (a full disk): a fragment stays at the end of the file, and
    // the journal's own descriptor refuses the append (read-only here).
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(br#"{"handled":"m-2","a"#);
    fs::write(&path, &bytes).unwrap();
    journal.file = fs::File::open(&path).unwrap();
    assert!(journal.append(&[handled("m-2", 2)]).is_err());
    // Space is back: the next append must not land after the fragment.
    journal.append(&[handled("m-3", 3)]).unwrap();
    drop(journal);
    let (_, loaded) = Journal::open(home.path(), SCOPE, WAIT).expect("the journal reads back");
    assert!(!loaded.torn_tail);
    for id in ["m-1", "m-2", "m-3"] {
        assert!(loaded.handled.contains(id), "{id}");
    }
}

#[test]
fn a_line_cut_short_by_a_crash_is_dropped_and_the_file_truncated() {
    let home = tempfile::tempdir().unwrap();
    let path = {
        let (mut journal, _) = Journal::open(home.path(), SCOPE, WAIT).unwrap();
        journal.append(&[handled("m-1", 1)]).unwrap();
        journal.path().to_owned()
    };
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(br#"{"handled":"m-2","a"#);
    fs::write(&path, &bytes).unwrap();
    let (mut journal, loaded) = Journal::open(home.path(), SCOPE, WAIT).unwrap();
    assert!(loaded.torn_tail);
    assert!(loaded.handled.contains("m-1"));
    assert!(!loaded.handled.contains("m-2"));
    journal.append(&[handled("m-3", 3)]).unwrap();
    drop(journal);
    let (_, loaded) = Journal::open(home.path(), SCOPE, WAIT).unwrap();
    assert!(!loaded.torn_tail, "the next append starts on a clean line");
    assert!(loaded.handled.contains("m-3"));
}

#[test]
fn a_damaged_line_fails_closed_and_leaves_the_file_untouched() {
    let home = tempfile::tempdir().unwrap();
    let path = {
        let (mut journal, _) = Journal::open(home.path(), SCOPE, WAIT).unwrap();
        journal.append(&[handled("m-1", 1)]).unwrap();
        journal.path().to_owned()
    };
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"handled\":42,\"at\":1}\n{\"cursor\":\"e-1\"}\n");
    fs::write(&path, &bytes).unwrap();
    let error = Journal::open(home.path(), SCOPE, WAIT).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, InboxError::Corrupt { line: 3, .. }),
        "{text}"
    );
    assert!(text.contains("a message id that is not a string"), "{text}");
    assert!(text.contains("move it aside"), "{text}");
    assert_eq!(fs::read(&path).unwrap(), bytes);
}

#[test]
fn a_header_of_another_version_or_scope_fails_closed() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join(format!("inbox-{SCOPE}.jsonl"));
    fs::write(&path, "{\"canonInbox\":2,\"scope\":\"x\"}\n").unwrap();
    let text = Journal::open(home.path(), SCOPE, WAIT)
        .unwrap_err()
        .to_string();
    assert!(text.contains("format version 2"), "{text}");
    fs::write(&path, "{\"canonInbox\":1,\"scope\":\"other\"}\n").unwrap();
    let text = Journal::open(home.path(), SCOPE, WAIT)
        .unwrap_err()
        .to_string();
    assert!(text.contains("scope other"), "{text}");
}

#[test]
fn a_long_journal_is_compacted_to_its_live_state() {
    let home = tempfile::tempdir().unwrap();
    let (mut journal, _) = Journal::open(home.path(), SCOPE, WAIT).unwrap();
    let batch: Vec<Record> = (0..100).map(|i| Record::Cursor(format!("e-{i}"))).collect();
    for round in 0..(COMPACT_LINES / 100 + 2) {
        journal.append(&batch).unwrap();
        journal
            .append(&[handled(&format!("m-{round}"), 1)])
            .unwrap();
    }
    let lines = fs::read_to_string(journal.path()).unwrap().lines().count();
    assert!(lines < COMPACT_LINES / 2, "{lines} lines after compaction");
    drop(journal);
    let (_, loaded) = Journal::open(home.path(), SCOPE, WAIT).unwrap();
    assert_eq!(loaded.cursor.as_deref(), Some("e-99"));
    assert!(loaded.handled.contains("m-0"));
    assert!(loaded
        .handled
        .contains(&format!("m-{}", COMPACT_LINES / 100 + 1)));
}

#[test]
fn a_second_opener_waits_then_is_told_the_journal_is_busy() {
    let home = tempfile::tempdir().unwrap();
    let (first, _) = Journal::open(home.path(), SCOPE, WAIT).unwrap();
    let error = Journal::open(home.path(), SCOPE, WAIT).unwrap_err();
    assert!(matches!(error, InboxError::Busy { .. }), "{error}");
    drop(first);
    assert!(Journal::open(home.path(), SCOPE, WAIT).is_ok());
}

#[test]
fn the_scope_key_is_stable_and_separates_agents_and_origins() {
    let key = scope_key("https://api.canonmail.com", "agent-1");
    assert_eq!(key.len(), 32);
    assert_eq!(key, scope_key("https://api.canonmail.com", "agent-1"));
    assert_ne!(key, scope_key("https://api.canonmail.com", "agent-2"));
    assert_ne!(key, scope_key("http://127.0.0.1:9", "agent-1"));
}
