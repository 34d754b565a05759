//! The registry file store: `<CANON_HOME>/detached-approvals.json` (approvals.md §3–§7).
//!
//! Every operation runs one critical section: process mutex → `mkdir -p` → open
//! `.detached-approvals.lock` (mode 0600, never deleted) → `flock(LOCK_EX)` →
//! load → validate → mutate → prune → atomic write → unlock. Plain reads take
//! the same lock and skip the write. Because the lock is BSD `flock` on the same
//! lock file the Python plugin uses, a 0.14.x–0.16.x plugin process and this
//! crate can share one `CANON_HOME` (approvals.md §3.5, §4).
//!
//! Invariants:
//!
//! * A write is temp file (`.detached-approvals.json.<pid>.<32 hex>.tmp`, created
//!   with `create_new`, mode 0600) → write → `fsync` → rename → `fsync(dir)`
//!   (approvals.md §5). A reader therefore sees the old or the new document, never
//!   a mix, and an operation that returned `Ok` survives a crash or power loss.
//! * A file that cannot be read, is not JSON, or fails validation is never
//!   written, repaired or moved: the operation fails with a typed error and the
//!   bytes stay as they were (approvals.md §6). A dangling symlink or any
//!   non-regular file in place of the registry counts as unreadable (stricter
//!   than 0.14.1, which treats a dangling symlink as a missing file).
//! * Temp files left by a crashed writer are deleted by the next mutation:
//!   writers only create temp files while holding the lock, so any temp file seen
//!   under the lock is stale. Nothing else in the directory is touched.
//! * The critical section is never re-entered and includes `fsync`s: call it from
//!   a blocking thread, not an async executor.
//! * Lock waits are bounded (30 s by default, approvals.md Q6); a failed or
//!   timed-out lock is an error, never a silent skip.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Number;

use crate::durable::{DurableFile, Guard};
use crate::error::RegistryError;
use crate::format::to_file_bytes;
use crate::ids::{ApprovalId, ClaimId};
use crate::state::{
    Activation, ConsumeClaim, ConsumeFinish, ConsumeLease, Entry, NewApproval, Registry,
    ServerOutcome, ValidationError, WakeJob,
};

/// Registry file name inside the Canon home (approvals.md §3.1).
pub const REGISTRY_FILE_NAME: &str = "detached-approvals.json";

/// Lock file name inside the Canon home (approvals.md §3.1).
pub const LOCK_FILE_NAME: &str = ".detached-approvals.lock";

/// Temp file name prefix (approvals.md §3.1): `<prefix><pid>.<32 hex><suffix>`.
pub const TEMP_FILE_PREFIX: &str = ".detached-approvals.json.";

/// Temp file name suffix (approvals.md §3.1).
pub const TEMP_FILE_SUFFIX: &str = crate::durable::TEMP_FILE_SUFFIX;

/// Default bound on the lock wait (approvals.md Q6).
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// Mode of the lock file and of the registry file (approvals.md §3.1).
pub use crate::durable::FILE_MODE;

/// Resolves the Canon home (approvals.md §3.1) from the values of `CANON_HOME` and
/// `HOME`, which the caller reads from the environment.
///
/// `CANON_HOME` is whitespace-trimmed and `~`/`~/…` expanded; when it is unset or
/// blank the result is `<HOME>/.canon`. `None` when a home directory is needed but
/// `home_dir` is absent. `~user` forms are not expanded.
pub fn resolve_canon_home(canon_home: Option<&str>, home_dir: Option<&Path>) -> Option<PathBuf> {
    let trimmed = canon_home.map(crate::text::py_strip).unwrap_or_default();
    if trimmed.is_empty() {
        return home_dir.map(|h| h.join(".canon"));
    }
    if trimmed == "~" {
        return home_dir.map(Path::to_path_buf);
    }
    if let Some(rest) = trimmed.strip_prefix("~/") {
        return home_dir.map(|h| h.join(rest));
    }
    Some(PathBuf::from(trimmed))
}

/// Fills `buf` from the kernel CSPRNG.
fn random_bytes(buf: &mut [u8]) -> Result<(), RegistryError> {
    crate::durable::random_bytes(buf).map_err(RegistryError::from)
}

/// Mints a fresh approval id from the kernel CSPRNG (approvals.md §2).
pub fn random_approval_id() -> Result<ApprovalId, RegistryError> {
    let mut bytes = [0u8; 10];
    random_bytes(&mut bytes)?;
    Ok(ApprovalId::from_random(bytes))
}

/// Mints a fresh claim id from the kernel CSPRNG (approvals.md §2).
pub fn random_claim_id() -> Result<ClaimId, RegistryError> {
    let mut bytes = [0u8; 16];
    random_bytes(&mut bytes)?;
    Ok(ClaimId::from_random(bytes))
}

/// Store configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// Bound on the lock wait; `None` waits forever (0.14.1 behaviour).
    pub lock_timeout: Option<Duration>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            lock_timeout: Some(DEFAULT_LOCK_TIMEOUT),
        }
    }
}

/// A `creating` reservation returned by [`Store::create_begin`].
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    /// The new entry as written.
    pub entry: Entry,
    /// The create claim id; pass it to [`Store::create_commit`] / [`Store::create_fail`].
    pub create_claim: ClaimId,
}

/// Result of a read-only [`Store::check`] (approvals.md §11).
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// Not in the registry: report this `unknown` result without contacting Canon.
    Missing(crate::state::CheckResult),
    /// Belongs to another conversation (domain helper rejection).
    WrongConversation,
    /// Terminal: the cached result.
    Settled(crate::state::CheckResult),
    /// Still live: build a client and run [`Store::consume_begin`].
    Live(Entry),
}

/// What one startup-reconcile iteration works on, read under one lock (approvals.md §14.1).
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcilePass {
    /// `creating`, `pending` and `consuming` ids: run `consume(wake_required=true)`.
    pub consume: Vec<String>,
    /// Resolved ids whose wake is `pending` or `delivering`.
    pub wakes: Vec<String>,
    /// `None`: no lease anywhere; otherwise sleep this long and loop.
    pub next_delay: Option<Duration>,
    /// The registry as read.
    pub registry: Registry,
}

/// The registry of one Canon home. Cheap to share by reference across threads.
#[derive(Debug)]
pub struct Store {
    home: PathBuf,
    registry_path: PathBuf,
    lock_path: PathBuf,
    owner: ClaimId,
    options: StoreOptions,
}

impl Store {
    /// A store for `home` (the resolved Canon home) with default options. Draws the
    /// process instance id used as lease owner.
    pub fn new(home: impl Into<PathBuf>) -> Result<Self, RegistryError> {
        Store::with_options(home, StoreOptions::default())
    }

    /// A store with explicit options.
    pub fn with_options(
        home: impl Into<PathBuf>,
        options: StoreOptions,
    ) -> Result<Self, RegistryError> {
        let home = home.into();
        Ok(Store {
            registry_path: home.join(REGISTRY_FILE_NAME),
            lock_path: home.join(LOCK_FILE_NAME),
            home,
            owner: random_claim_id()?,
            options,
        })
    }

    /// The Canon home.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// `<home>/detached-approvals.json`.
    pub fn registry_path(&self) -> &Path {
        &self.registry_path
    }

    /// `<home>/.detached-approvals.lock`.
    pub fn lock_path(&self) -> &Path {
        &self.lock_path
    }

    /// This store's process instance id (informational lease owner).
    pub fn owner(&self) -> &ClaimId {
        &self.owner
    }

    fn file(&self) -> DurableFile {
        DurableFile {
            home: self.home.clone(),
            path: self.registry_path.clone(),
            lock_path: self.lock_path.clone(),
            temp_prefix: TEMP_FILE_PREFIX.to_owned(),
            lock_timeout: self.options.lock_timeout,
        }
    }

    fn lock(&self) -> Result<Guard, RegistryError> {
        Ok(self.file().lock()?)
    }

    /// Loads and validates the file; call only under the lock.
    fn load(&self) -> Result<Registry, RegistryError> {
        let path = &self.registry_path;
        let Some(value) = self.file().read_json()? else {
            return Ok(Registry::default());
        };
        Registry::from_json(value).map_err(|e| match e {
            ValidationError::RootNotObject => RegistryError::RootNotObject { path: path.clone() },
            ValidationError::Entry {
                approval_id,
                problem,
            } => RegistryError::InvalidEntry {
                path: path.clone(),
                approval_id,
                problem,
            },
        })
    }

    /// Deletes temp files left by crashed writers; call only under the lock.
    fn remove_stale_temp_files(&self) {
        self.file().remove_stale_temp_files();
    }

    /// The atomic, durable write (approvals.md §5); call only under the lock.
    fn write(&self, registry: &Registry) -> Result<(), RegistryError> {
        let bytes =
            to_file_bytes(registry).map_err(|source| RegistryError::Serialize { source })?;
        Ok(self.file().write_bytes(&bytes)?)
    }

    /// Runs a read-only closure on the loaded registry under the lock.
    fn read<T>(&self, f: impl FnOnce(&Registry) -> T) -> Result<T, RegistryError> {
        let _guard = self.lock()?;
        let registry = self.load()?;
        Ok(f(&registry))
    }

    /// Lock → load → validate → mutate → prune → write. The closure returns its
    /// output and whether to write (the Python plugin always rewrites; only a
    /// rejected request skips the write).
    fn mutate<T>(
        &self,
        now_ms: u64,
        f: impl FnOnce(&mut Registry) -> Result<(T, bool), RegistryError>,
    ) -> Result<T, RegistryError> {
        let _guard = self.lock()?;
        let mut registry = self.load()?;
        let (out, write) = f(&mut registry)?;
        if write {
            registry.prune(now_ms);
            self.remove_stale_temp_files();
            self.write(&registry)?;
        }
        Ok(out)
    }

    /// `record_creating` (approvals.md §9.2): durably reserves the id with a 300 s
    /// create lease. Send the server create only after this returned `Ok`.
    pub fn create_begin(
        &self,
        new: &NewApproval,
        now_ms: u64,
    ) -> Result<Reservation, RegistryError> {
        let create_claim = random_claim_id()?;
        self.mutate(now_ms, |registry| {
            let entry = registry
                .record_creating(new, &create_claim, &self.owner, now_ms)
                .map_err(|dup| RegistryError::DuplicateId { approval_id: dup.0 })?;
            Ok((
                Reservation {
                    entry,
                    create_claim: create_claim.clone(),
                },
                true,
            ))
        })
    }

    /// `activate_created` after a successful server create (approvals.md §9.4).
    pub fn create_commit(
        &self,
        approval_id: &str,
        create_claim: &ClaimId,
        server_expires_at: Option<&Number>,
        server_responder: Option<&str>,
        now_ms: u64,
    ) -> Result<Activation, RegistryError> {
        self.mutate(now_ms, |registry| {
            let outcome = registry.activate_created(
                approval_id,
                create_claim.as_str(),
                server_expires_at,
                server_responder,
                now_ms,
            );
            Ok((outcome, true))
        })
    }

    /// `fail_creation` after a definitive rejection or an unavailable client
    /// (approvals.md §9.3). Returns the current entry, changed only if the claim still matched.
    pub fn create_fail(
        &self,
        approval_id: &str,
        create_claim: &ClaimId,
        reason: Option<&str>,
        now_ms: u64,
    ) -> Result<Option<Entry>, RegistryError> {
        self.mutate(now_ms, |registry| {
            Ok((
                registry.fail_creation(approval_id, create_claim.as_str(), reason, now_ms),
                true,
            ))
        })
    }

    /// `mark_receipt_pending` for an `approval_reply` receipt
    /// (approvals.md §12 step 2). `None`: the id is not ours (nothing is written).
    pub fn receipt(&self, approval_id: &str, now_ms: u64) -> Result<Option<Entry>, RegistryError> {
        self.mutate(now_ms, |registry| {
            let entry = registry.mark_receipt_pending(approval_id, now_ms);
            let write = entry.is_some();
            Ok((entry, write))
        })
    }

    /// Read-only lookup for `check_approval` (approvals.md §11): decides, before
    /// any client is built, whether Canon must be asked at all.
    pub fn check(
        &self,
        approval_id: &str,
        expected_conversation: Option<&str>,
    ) -> Result<Lookup, RegistryError> {
        self.read(|registry| match registry.get(approval_id) {
            None => Lookup::Missing(crate::state::CheckResult::not_in_registry(approval_id)),
            Some(entry) if expected_conversation.is_some_and(|c| c != entry.conversation_id()) => {
                Lookup::WrongConversation
            }
            Some(entry) => match entry.terminal_result() {
                Some(result) => Lookup::Settled(result),
                None => Lookup::Live(entry.clone()),
            },
        })
    }

    /// The consume claim (approvals.md §10.1). A cross-conversation rejection writes nothing.
    pub fn consume_begin(
        &self,
        approval_id: &str,
        expected_conversation: Option<&str>,
        now_ms: u64,
    ) -> Result<ConsumeClaim, RegistryError> {
        let claim = random_claim_id()?;
        self.mutate(now_ms, |registry| {
            let outcome = registry.claim_consume(
                approval_id,
                expected_conversation,
                &claim,
                &self.owner,
                now_ms,
            );
            let write = !matches!(outcome, ConsumeClaim::WrongConversation);
            Ok((outcome, write))
        })
    }

    /// Records the server's consume answer for a held lease (approvals.md §10.3).
    pub fn consume_finish(
        &self,
        lease: &ConsumeLease,
        outcome: &ServerOutcome,
        wake_required: bool,
        now_ms: u64,
    ) -> Result<ConsumeFinish, RegistryError> {
        self.mutate(now_ms, |registry| {
            Ok((
                registry.finish_consume(lease, outcome, wake_required, now_ms),
                true,
            ))
        })
    }

    /// `claim_wake` (approvals.md §13 step 1): `None` when there is nothing to deliver.
    pub fn wake_claim(
        &self,
        approval_id: &str,
        now_ms: u64,
    ) -> Result<Option<WakeJob>, RegistryError> {
        let claim = random_claim_id()?;
        self.mutate(now_ms, |registry| {
            Ok((
                registry.claim_wake(approval_id, &claim, &self.owner, now_ms),
                true,
            ))
        })
    }

    /// `finish_wake` (approvals.md §8.2, §13 step 5); `false` when the lease was lost.
    pub fn wake_finish(
        &self,
        job: &WakeJob,
        delivered: bool,
        now_ms: u64,
    ) -> Result<bool, RegistryError> {
        self.mutate(now_ms, |registry| {
            Ok((
                registry.finish_wake(&job.approval_id, job.claim_id.as_str(), delivered, now_ms),
                true,
            ))
        })
    }

    /// One entry (read-only).
    pub fn get(&self, approval_id: &str) -> Result<Option<Entry>, RegistryError> {
        self.read(|registry| registry.get(approval_id).cloned())
    }

    /// The whole validated registry (read-only); feed it to
    /// [`crate::state::ReconcileTracker`] and [`Registry::reconcile_targets`].
    pub fn snapshot(&self) -> Result<Registry, RegistryError> {
        self.read(Registry::clone)
    }

    /// Resolved entries with an undelivered wake (approvals.md §14.1 b).
    pub fn pending_wakes(&self) -> Result<Vec<String>, RegistryError> {
        self.read(Registry::pending_wakes)
    }

    /// Entries the periodic scan hands to receipt recovery (approvals.md §14.3).
    pub fn recovery_candidates(&self, now_ms: u64) -> Result<Vec<String>, RegistryError> {
        self.read(|registry| registry.recovery_candidates(now_ms))
    }

    /// One read for a startup-reconcile iteration (approvals.md §14.1): the ids to
    /// consume (step a), the wakes to deliver (step b), the next lease delay (step e)
    /// and the registry itself, for [`crate::state::ReconcileTracker`] (steps 1, c, f).
    pub fn reconcile_pass(&self, now_ms: u64) -> Result<ReconcilePass, RegistryError> {
        self.read(|registry| ReconcilePass {
            consume: registry.reconcile_targets(),
            wakes: registry.pending_wakes(),
            next_delay: registry
                .next_lease_retry_delay_ms(now_ms)
                .map(Duration::from_millis),
            registry: registry.clone(),
        })
    }

    /// The reconcile loop's next delay (approvals.md §14.1 e).
    pub fn next_lease_retry_delay(&self, now_ms: u64) -> Result<Option<Duration>, RegistryError> {
        self.read(|registry| {
            registry
                .next_lease_retry_delay_ms(now_ms)
                .map(Duration::from_millis)
        })
    }
}

/// Test-only fault injection: makes the next write fail before a chosen step.
#[cfg(test)]
pub(crate) mod fault {
    use std::cell::Cell;
    use std::io;

    use crate::error::WriteStage;

    thread_local! {
        static FAIL_AT: Cell<Option<WriteStage>> = const { Cell::new(None) };
    }

    pub(crate) fn fail_next(stage: WriteStage) {
        FAIL_AT.with(|f| f.set(Some(stage)));
    }

    pub(crate) fn check(stage: WriteStage) -> io::Result<()> {
        if FAIL_AT.with(|f| f.get()) == Some(stage) {
            FAIL_AT.with(|f| f.set(None));
            return Err(io::Error::other("injected failure"));
        }
        Ok(())
    }
}

#[cfg(not(test))]
pub(crate) mod fault {
    use std::io;

    use crate::error::WriteStage;

    #[inline(always)]
    pub(crate) fn check(_stage: WriteStage) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::WriteStage;
    use crate::state::Status;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    fn new_approval(n: u8, conversation: &str) -> NewApproval {
        NewApproval::new(
            ApprovalId::from_random([n; 10]),
            conversation,
            1_000_000,
            Some("Pay invoice?"),
            Some("human1"),
        )
        .unwrap()
    }

    #[test]
    fn resolve_canon_home_rules() {
        let home = Path::new("/home/u");
        assert_eq!(
            resolve_canon_home(None, Some(home)),
            Some(PathBuf::from("/home/u/.canon"))
        );
        assert_eq!(
            resolve_canon_home(Some("  "), Some(home)),
            Some(PathBuf::from("/home/u/.canon"))
        );
        assert_eq!(
            resolve_canon_home(Some(" ~/x "), Some(home)),
            Some(PathBuf::from("/home/u/x"))
        );
        assert_eq!(
            resolve_canon_home(Some("~"), Some(home)),
            Some(PathBuf::from("/home/u"))
        );
        assert_eq!(
            resolve_canon_home(Some("/srv/c"), None),
            Some(PathBuf::from("/srv/c"))
        );
        assert_eq!(resolve_canon_home(None, None), None);
    }

    #[test]
    fn injected_write_failures_leave_old_or_new_and_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path()).unwrap();
        store.create_begin(&new_approval(1, "c"), 10).unwrap();
        let stages = [
            WriteStage::CreateTemp,
            WriteStage::WriteTemp,
            WriteStage::SyncTemp,
            WriteStage::Rename,
            WriteStage::SyncDir,
        ];
        for (i, stage) in stages.into_iter().enumerate() {
            let before = fs::read(store.registry_path()).unwrap();
            fault::fail_next(stage);
            let err = store
                .create_begin(&new_approval(2 + i as u8, "c"), 10)
                .unwrap_err();
            assert!(
                matches!(err, RegistryError::Write { stage: s, .. } if s == stage),
                "{err:?}"
            );
            let after = fs::read(store.registry_path()).unwrap();
            let new_id = ApprovalId::from_random([2 + i as u8; 10]);
            let registry = Registry::from_json(serde_json::from_slice(&after).unwrap()).unwrap();
            if stage == WriteStage::SyncDir {
                // The rename already happened: the new version is in place.
                assert!(registry.get(new_id.as_str()).is_some());
            } else {
                assert_eq!(before, after, "stage {stage}");
            }
            let temps: Vec<_> = fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(TEMP_FILE_SUFFIX))
                .collect();
            assert!(temps.is_empty(), "temp left after {stage}");
        }
    }

    #[test]
    fn files_have_spec_modes() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("nested/home");
        let store = Store::new(&home).unwrap();
        store.create_begin(&new_approval(1, "c"), 10).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(store.registry_path()), 0o600);
        assert_eq!(mode(store.lock_path()), 0o600);
        assert_eq!(
            store
                .get(new_approval(1, "c").approval_id().as_str())
                .unwrap()
                .unwrap()
                .status(),
            Status::Creating
        );
    }

    #[test]
    fn stale_temp_files_are_removed_by_the_next_mutation() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path()).unwrap();
        let stale = dir.path().join(format!(
            "{TEMP_FILE_PREFIX}1.{}{TEMP_FILE_SUFFIX}",
            "0".repeat(32)
        ));
        fs::write(&stale, b"{\"half").unwrap();
        let unrelated = dir.path().join("agents.json");
        fs::write(&unrelated, b"{}").unwrap();
        store.create_begin(&new_approval(1, "c"), 10).unwrap();
        assert!(!stale.exists());
        assert!(unrelated.exists());
    }
}
