//! Many threads, each with its own `Store` (so each opens the lock file itself), on
//! one registry: no update may be lost.

use std::sync::Arc;

use canon_approvals::ids::ApprovalId;
use canon_approvals::state::{NewApproval, Status};
use canon_approvals::store::Store;

use crate::util::{temp_files, T0};

#[test]
fn concurrent_threads_lose_no_update() {
    const THREADS: u8 = 6;
    const PER_THREAD: u8 = 12;
    let dir = tempfile::tempdir().expect("tempdir");
    let home = Arc::new(dir.path().to_path_buf());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let home = Arc::clone(&home);
            std::thread::spawn(move || {
                let store = Store::new(home.as_path()).expect("store");
                for i in 0..PER_THREAD {
                    let mut bytes = [t; 10];
                    bytes[9] = i;
                    let new =
                        NewApproval::new(ApprovalId::from_random(bytes), "c", T0, None, Some("h"))
                            .expect("valid");
                    let reservation = store.create_begin(&new, T0).expect("create");
                    store
                        .receipt(new.approval_id().as_str(), T0)
                        .expect("receipt");
                    store
                        .create_commit(
                            new.approval_id().as_str(),
                            &reservation.create_claim,
                            None,
                            None,
                            T0,
                        )
                        .expect("commit");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("thread");
    }
    let registry = Store::new(home.as_path())
        .expect("store")
        .snapshot()
        .expect("snapshot");
    assert_eq!(
        registry.len(),
        usize::from(THREADS) * usize::from(PER_THREAD)
    );
    assert!(registry
        .entries()
        .all(|e| e.status() == Status::Pending && e.receipt_pending()));
    assert!(temp_files(&home).is_empty());
}
