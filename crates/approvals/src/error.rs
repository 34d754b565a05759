//! The crate's error type (style.md §6.4).
//!
//! `Err` means "the registry could not do the work" (unreadable or invalid file,
//! lock or write failure). Expected outcomes (an id that is missing, a lease held
//! by another worker, a lost lease) are values in [`crate::state`]. The messages
//! of the fail-closed load errors are the spec's parity strings (approvals.md §6)
//! and are kept byte for byte; the others follow the lowercase house style. No
//! message ever contains an approval summary.

use std::io;
use std::path::PathBuf;
use std::str::Utf8Error;
use std::time::Duration;

use crate::state::EntryProblem;

/// Why the registry file could not be read (the cause of [`RegistryError::Unreadable`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadFailure {
    /// An I/O error (including a dangling symlink in place of the file).
    #[error("read failed")]
    Io(#[source] io::Error),
    /// The path exists but is not a regular file (directory, FIFO, socket, device).
    #[error("not a regular file")]
    NotRegularFile,
    /// The bytes are not UTF-8.
    #[error("not UTF-8")]
    NotUtf8(#[source] Utf8Error),
    /// The text is not JSON.
    #[error("not valid JSON")]
    Json(#[source] serde_json::Error),
}

/// Which step of the atomic write failed (approvals.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteStage {
    /// Creating the temp file (`create_new`).
    CreateTemp,
    /// Writing the bytes.
    WriteTemp,
    /// `fsync` of the temp file.
    SyncTemp,
    /// The rename over the registry.
    Rename,
    /// `fsync` of the directory.
    SyncDir,
}

impl std::fmt::Display for WriteStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriteStage::CreateTemp => "create temp file",
            WriteStage::WriteTemp => "write temp file",
            WriteStage::SyncTemp => "fsync temp file",
            WriteStage::Rename => "rename",
            WriteStage::SyncDir => "fsync directory",
        })
    }
}

/// Everything that can stop a registry operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The file could not be read or is not JSON; it was left untouched.
    #[error("Detached approval registry is unreadable: {}", path.display())]
    Unreadable {
        /// The registry path.
        path: PathBuf,
        /// Why.
        #[source]
        source: LoadFailure,
    },
    /// The JSON root is not an object; the file was left untouched.
    #[error("Detached approval registry root is not an object: {}", path.display())]
    RootNotObject {
        /// The registry path.
        path: PathBuf,
    },
    /// One entry failed validation; the file was left untouched.
    #[error("Detached approval registry entry '{approval_id}' {problem}")]
    InvalidEntry {
        /// The registry path.
        path: PathBuf,
        /// The offending key.
        approval_id: String,
        /// What is wrong.
        problem: EntryProblem,
    },
    /// `create_begin` found the id already present (approvals.md §9.2).
    #[error("Detached approval id '{approval_id}' already exists")]
    DuplicateId {
        /// The id.
        approval_id: String,
    },
    /// `mkdir -p` of the Canon home failed.
    #[error("could not create the canon home {}", path.display())]
    CreateHome {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Opening or `flock`ing the lock file failed.
    #[error("could not lock the detached approval registry via {}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Another holder kept the lock longer than the configured bound (approvals.md Q6).
    #[error("timed out after {waited:?} waiting for the detached approval registry lock {}", path.display())]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
    /// A step of the atomic write failed; the registry file still holds its previous
    /// contents unless the failure was the final directory `fsync`.
    #[error("could not write the detached approval registry {} ({stage})", path.display())]
    Write {
        /// The path involved.
        path: PathBuf,
        /// The failed step.
        stage: WriteStage,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Serialization failed before anything touched the disk.
    #[error("could not serialize the detached approval registry")]
    Serialize {
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The kernel CSPRNG failed.
    #[error("could not draw random bytes")]
    Random {
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl From<crate::durable::DurableError> for RegistryError {
    fn from(error: crate::durable::DurableError) -> Self {
        use crate::durable::DurableError as D;
        match error {
            D::CreateHome { path, source } => RegistryError::CreateHome { path, source },
            D::Lock { path, source } => RegistryError::Lock { path, source },
            D::LockTimeout { path, waited } => RegistryError::LockTimeout { path, waited },
            D::Unreadable { path, source } => RegistryError::Unreadable { path, source },
            D::Write {
                path,
                stage,
                source,
            } => RegistryError::Write {
                path,
                stage,
                source,
            },
            D::Random { source } => RegistryError::Random { source },
        }
    }
}

impl RegistryError {
    /// Whether this is a fail-closed load error (corrupt or unreadable file), for
    /// which an operator must act (approvals.md §6, Q7).
    pub fn is_corrupt_registry(&self) -> bool {
        matches!(
            self,
            RegistryError::Unreadable { .. }
                | RegistryError::RootNotObject { .. }
                | RegistryError::InvalidEntry { .. }
        )
    }
}
