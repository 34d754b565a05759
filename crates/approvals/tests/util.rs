//! Shared helpers for the integration tests.

use std::fs;
use std::path::Path;

use canon_approvals::ids::ApprovalId;
use canon_approvals::state::NewApproval;
use canon_approvals::store::{TEMP_FILE_PREFIX, TEMP_FILE_SUFFIX};

pub(crate) const T0: u64 = 1_795_994_884_394;

pub(crate) fn approval(n: u8) -> ApprovalId {
    ApprovalId::from_random([n; 10])
}

pub(crate) fn new_approval(n: u8, conversation: &str) -> NewApproval {
    NewApproval::new(
        approval(n),
        conversation,
        T0 + 3_600_000,
        Some("File PINVOICE 12345 for 8,200 ILS?"),
        Some("human1"),
    )
    .expect("valid request")
}

pub(crate) fn temp_files(home: &Path) -> Vec<String> {
    fs::read_dir(home)
        .expect("home")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(TEMP_FILE_PREFIX) && n.ends_with(TEMP_FILE_SUFFIX))
        .collect()
}
