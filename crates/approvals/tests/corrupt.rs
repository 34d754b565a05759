//! Fail-closed loading (approvals.md §6): every damaged or unreadable registry makes
//! every operation fail with a typed error and leaves the path exactly as it was.
//!
//! Tests run as root, where `chmod 000` does not stop reads, so "unreadable" is
//! produced with paths the process cannot read as a regular file whatever its
//! privileges: a dangling symlink, a FIFO (which would also block a naive
//! reader), a directory, and bytes that are not UTF-8.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use canon_approvals::error::{LoadFailure, RegistryError};
use canon_approvals::state::{EntryProblem, ServerOutcome};
use canon_approvals::store::Store;

use crate::util::{approval, new_approval, temp_files, T0};

/// What a path looks like on disk, compared before and after every operation.
#[derive(Debug, PartialEq)]
enum Shape {
    File(Vec<u8>, u64),
    Dir(u64),
    Symlink(std::path::PathBuf),
    Fifo(u64),
}

fn shape(path: &Path) -> Shape {
    let meta = fs::symlink_metadata(path).expect("path exists");
    let ft = meta.file_type();
    if ft.is_symlink() {
        Shape::Symlink(fs::read_link(path).expect("link"))
    } else if ft.is_dir() {
        Shape::Dir(meta.ino())
    } else if ft.is_fifo() {
        Shape::Fifo(meta.ino())
    } else {
        Shape::File(fs::read(path).expect("bytes"), meta.ino())
    }
}

/// Runs every store operation against the damaged registry and checks each fails
/// closed with `expected` and changes nothing.
fn check(setup: impl FnOnce(&Path), expected: impl Fn(&RegistryError) -> bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path()).expect("store");
    setup(store.registry_path());
    let before = shape(store.registry_path());
    let id = approval(1);
    let results: Vec<(&str, RegistryError)> = vec![
        (
            "create_begin",
            store
                .create_begin(&new_approval(1, "conv1"), T0)
                .unwrap_err(),
        ),
        ("receipt", store.receipt(id.as_str(), T0).unwrap_err()),
        (
            "consume_begin",
            store.consume_begin(id.as_str(), None, T0).unwrap_err(),
        ),
        (
            "check",
            store.check(id.as_str(), Some("conv1")).unwrap_err(),
        ),
        ("wake_claim", store.wake_claim(id.as_str(), T0).unwrap_err()),
        ("get", store.get(id.as_str()).unwrap_err()),
        ("snapshot", store.snapshot().unwrap_err()),
        ("pending_wakes", store.pending_wakes().unwrap_err()),
        (
            "recovery_candidates",
            store.recovery_candidates(T0).unwrap_err(),
        ),
        (
            "next_lease_retry_delay",
            store.next_lease_retry_delay(T0).unwrap_err(),
        ),
    ];
    for (op, err) in &results {
        assert!(expected(err), "{op}: unexpected error {err:?}");
        assert!(err.is_corrupt_registry(), "{op}: {err}");
        assert_eq!(
            shape(store.registry_path()),
            before,
            "{op} touched the registry"
        );
    }
    assert!(temp_files(dir.path()).is_empty());
    // The message is the spec's, naming the path and never the summary.
    let message = results[0].1.to_string();
    assert!(
        message.starts_with("Detached approval registry"),
        "{message}"
    );
    assert!(!message.contains("PINVOICE"));
}

fn unreadable(pred: impl Fn(&LoadFailure) -> bool) -> impl Fn(&RegistryError) -> bool {
    move |e| {
        matches!(e, RegistryError::Unreadable { source, .. } if pred(source))
            && e.to_string()
                .starts_with("Detached approval registry is unreadable: ")
    }
}

fn write(bytes: &'static [u8]) -> impl FnOnce(&Path) {
    move |path| fs::write(path, bytes).expect("write")
}

#[test]
fn truncated_json_fails_closed() {
    check(
        write(b"{\n  \"hermes-0101010101010101010"),
        unreadable(|s| matches!(s, LoadFailure::Json(_))),
    );
    check(
        write(b""),
        unreadable(|s| matches!(s, LoadFailure::Json(_))),
    );
}

#[test]
fn non_standard_json_fails_closed() {
    check(
        write(br#"{"a": {"expiresAt": NaN}}"#),
        unreadable(|s| matches!(s, LoadFailure::Json(_))),
    );
}

#[test]
fn invalid_utf8_fails_closed() {
    check(
        write(b"{\"x\xff\": 1}"),
        unreadable(|s| matches!(s, LoadFailure::NotUtf8(_))),
    );
}

#[test]
fn root_not_object_fails_closed() {
    check(write(b"[]"), |e| {
        matches!(e, RegistryError::RootNotObject { .. })
            && e.to_string()
                .starts_with("Detached approval registry root is not an object: ")
    });
}

#[test]
fn wrong_types_fail_closed_naming_the_entry() {
    let doc: &'static [u8] = br#"{
  "hermes-0101010101010101010a": {"approvalId": "hermes-0101010101010101010a", "conversationId": "c", "status": "pending", "expiresAt": "tomorrow"}
}"#;
    check(write(doc), |e| {
        matches!(e, RegistryError::InvalidEntry { problem: EntryProblem::InvalidExpiresAt, approval_id, .. } if approval_id == "hermes-0101010101010101010a")
            && e.to_string()
                == "Detached approval registry entry 'hermes-0101010101010101010a' has an invalid expiresAt"
    });
    check(write(br#"{"k": {"approvalId": "k", "conversationId": "c", "status": "creating", "expiresAt": 1}}"#), |e| {
        e.to_string() == "Detached approval registry entry 'k' has an invalid create lease"
    });
    check(write(br#"{"k": 5}"#), |e| {
        e.to_string() == "Detached approval registry entry 'k' is not an object"
    });
}

#[test]
fn directory_in_place_of_the_file_fails_closed() {
    check(
        |path| fs::create_dir(path).expect("mkdir"),
        unreadable(|s| matches!(s, LoadFailure::NotRegularFile)),
    );
}

#[test]
fn dangling_symlink_fails_closed() {
    check(
        |path| {
            std::os::unix::fs::symlink("/nonexistent/canon/registry.json", path).expect("symlink")
        },
        unreadable(|s| matches!(s, LoadFailure::Io(e) if e.kind() == std::io::ErrorKind::NotFound)),
    );
}

#[test]
fn fifo_in_place_of_the_file_fails_closed_without_blocking() {
    check(
        |path| {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                path,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .expect("mkfifo")
        },
        unreadable(|s| matches!(s, LoadFailure::NotRegularFile)),
    );
}

#[test]
fn a_valid_symlink_is_followed_for_reading() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path()).expect("store");
    let target = dir.path().join("real.json");
    fs::write(&target, b"{}").expect("write");
    std::os::unix::fs::symlink(&target, store.registry_path()).expect("symlink");
    assert!(store.snapshot().expect("readable").is_empty());
    // A finish for an unknown lease changes nothing and is still a value.
    let lease = canon_approvals::state::ConsumeLease {
        approval_id: approval(9).as_str().to_owned(),
        conversation_id: "c".into(),
        claim_id: canon_approvals::ids::ClaimId::from_random([1; 16]),
        expires_at_ms: T0,
    };
    let finish = store
        .consume_finish(&lease, &ServerOutcome::Timeout, false, T0)
        .expect("finish");
    assert!(matches!(
        finish,
        canon_approvals::state::ConsumeFinish::LeaseLost(_)
    ));
}
