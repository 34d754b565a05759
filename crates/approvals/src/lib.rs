//! canon-approvals: the durable detached-approval registry (approvals.md).
//!
//! A detached approval is created by the model or a domain plugin, returns at
//! once, and is decided later by a human; its id, routing and leases live in
//! `<CANON_HOME>/detached-approvals.json`, a file shared with the Python
//! canon-hermes-plugin during a rolling replacement. This crate is the only
//! one that knows that file format.
//!
//! Layout:
//!
//! * [`state`]: the pure model. [`state::Registry`] holds validated entries
//!   ([`state::Entry`]) and implements every transition of approvals.md §8
//!   (create, activate, fail, receipt, consume claim/finish, wake claim/finish),
//!   pruning (approvals.md §7), reconcile and recovery decisions (§14), result
//!   mapping (approvals.md §10.3, §11) and the wake text (§13). Time is a
//!   `now_ms` parameter, ids are parameters; no I/O, no clock, no randomness.
//! * [`request`]: pure normalization of `request_approval` inputs
//!   (approvals.md §9.1), including the 72 h timeout clamp, create-failure
//!   classification (approvals.md §9.3), the \[seed\] legacy-cap retry rule
//!   (approvals.md §9.5) and the success result (§9.4).
//! * [`store`]: the file store. [`store::Store`] runs lock → load → validate →
//!   mutate → prune → atomic durable write in one `flock`-guarded critical section
//!   per call (approvals.md §4, §5) and fails closed on a damaged file (§6).
//! * [`format`](mod@format): the file's byte layout (approvals.md §3.4). [`ids`]: id
//!   formats (approvals.md §2). [`error`]: [`error::RegistryError`], the one error type.
//!
//! Invariants: the crate is synchronous (the adapter calls it from a blocking
//! task, the critical section includes `fsync`s); it does no network I/O and
//! depends on no async runtime or HTTP crate and on no other workspace crate
//! (style.md §6.2); it never logs, and approval summaries (the question text) are
//! never part of an error message or `Debug` output. The registry file stays in
//! the unversioned 0.14.1 format (no new top-level keys, unknown entry fields
//! preserved) so a Python plugin can share the `CANON_HOME` (approvals.md §3.5).
//! Wire bodies are the adapter's business (canon-wire.md §9.5); this crate only
//! classifies what the adapter hands it.
//!
//! ```
//! use canon_approvals::ids::ApprovalId;
//! use canon_approvals::state::{NewApproval, ServerOutcome, ConsumeClaim, ConsumeFinish, Decision};
//! use canon_approvals::store::Store;
//!
//! let home = tempfile::tempdir().unwrap();
//! let store = Store::new(home.path()).unwrap();
//! let now = 1_795_994_884_394;
//! let id = ApprovalId::from_random([7; 10]);
//! let new = NewApproval::new(id.clone(), "conv1", now + 3_600_000, Some("Pay?"), Some("human1")).unwrap();
//! let reservation = store.create_begin(&new, now).unwrap();
//! // ... POST /runtime-interaction/request succeeds ...
//! store.create_commit(id.as_str(), &reservation.create_claim, None, Some("human1"), now + 5).unwrap();
//! let ConsumeClaim::Claimed(lease) = store.consume_begin(id.as_str(), None, now + 10).unwrap() else { panic!() };
//! // ... POST /runtime-interaction/consume answers allow ...
//! let outcome = ServerOutcome::Decision { decision: Decision::Allow, responded_by: Some("human1".into()) };
//! let ConsumeFinish::Recorded(result) = store.consume_finish(&lease, &outcome, false, now + 20).unwrap() else { panic!() };
//! assert_eq!(result.to_json()["decision"], "allow");
//! ```

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod card_waits;
mod durable;
pub mod error;
pub mod format;
pub mod ids;
pub mod request;
pub mod state;
pub mod store;
mod text;
