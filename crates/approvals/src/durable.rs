//! One durable JSON document in the Canon home, shared by the approvals registry (`store`) and
//! the card waits (`card_store`): the critical section of approvals.md §4 (process mutex →
//! `mkdir -p` → open the lock file, mode 0600, never deleted → `flock(LOCK_EX)`, bounded) and
//! the atomic write of approvals.md §5 (temp file with `create_new`, mode 0600 → write → `fsync`
//! → rename → `fsync(dir)`). A document that cannot be read is reported, never repaired or
//! moved; temp files seen under the lock are stale (writers create them only while holding
//! it) and are deleted by the next write. The errors are neutral ([`DurableError`]); each
//! document's own error type names the document.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use rustix::fs::{flock, FlockOperation, OFlags};
use serde_json::Value;

use crate::error::{LoadFailure, WriteStage};
use crate::ids::push_hex;
use crate::store::fault;

/// Mode of lock files and documents (approvals.md §3.1).
pub const FILE_MODE: u32 = 0o600;

/// Serializes critical sections inside this process (approvals.md §4 step 1), across
/// documents: they are small and rare, and one mutex keeps the lock order trivial.
static PROCESS_LOCK: Mutex<()> = Mutex::new(());

/// What can stop a durable-document operation.
#[derive(Debug)]
pub(crate) enum DurableError {
    /// `mkdir -p` of the Canon home failed.
    CreateHome { path: PathBuf, source: io::Error },
    /// Opening or `flock`ing the lock file failed.
    Lock { path: PathBuf, source: io::Error },
    /// Another holder kept the lock longer than the bound.
    LockTimeout { path: PathBuf, waited: Duration },
    /// The document could not be read or is not JSON; it was left untouched.
    Unreadable { path: PathBuf, source: LoadFailure },
    /// A step of the atomic write failed.
    Write {
        path: PathBuf,
        stage: WriteStage,
        source: io::Error,
    },
    /// The kernel CSPRNG failed.
    Random { source: io::Error },
}

/// Fills `buf` from the kernel CSPRNG.
pub(crate) fn random_bytes(buf: &mut [u8]) -> Result<(), DurableError> {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(DurableError::Random {
                    source: io::Error::from(e),
                })
            }
        }
    }
    Ok(())
}

/// Where one document lives.
#[derive(Debug, Clone)]
pub(crate) struct DurableFile {
    pub(crate) home: PathBuf,
    pub(crate) path: PathBuf,
    pub(crate) lock_path: PathBuf,
    /// Temp files are `<temp_prefix><pid>.<32 hex>.tmp`.
    pub(crate) temp_prefix: String,
    /// `None` waits forever.
    pub(crate) lock_timeout: Option<Duration>,
}

/// Temp file name suffix (approvals.md §3.1).
pub(crate) const TEMP_FILE_SUFFIX: &str = ".tmp";

/// A bounded wait: short sleeps, doubling up to 5 ms, until the deadline.
struct Backoff {
    start: Instant,
    limit: Duration,
    pause: Duration,
}

impl Backoff {
    fn new(limit: Duration) -> Self {
        Backoff {
            start: Instant::now(),
            limit,
            pause: Duration::from_micros(200),
        }
    }

    /// Sleeps once, or fails with `LockTimeout` when the deadline has passed.
    fn pause(&mut self, lock_path: &Path) -> Result<(), DurableError> {
        let waited = self.start.elapsed();
        if waited >= self.limit {
            return Err(DurableError::LockTimeout {
                path: lock_path.to_path_buf(),
                waited,
            });
        }
        std::thread::sleep(self.pause.min(self.limit - waited));
        self.pause = (self.pause * 2).min(Duration::from_millis(5));
        Ok(())
    }
}

/// Held while a document is locked; unlocks on drop.
pub(crate) struct Guard {
    file: File,
    _process: MutexGuard<'static, ()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock as well; unlocking first keeps the
        // release explicit. An error here cannot be acted on.
        let _ = flock(&self.file, FlockOperation::Unlock);
    }
}

impl DurableFile {
    /// Takes the process mutex and the file lock, within one deadline.
    pub(crate) fn lock(&self) -> Result<Guard, DurableError> {
        let mut wait = self.lock_timeout.map(Backoff::new);
        let process = match wait.as_mut() {
            None => PROCESS_LOCK.lock().unwrap_or_else(|e| e.into_inner()),
            Some(wait) => loop {
                match PROCESS_LOCK.try_lock() {
                    Ok(guard) => break guard,
                    Err(TryLockError::Poisoned(e)) => break e.into_inner(),
                    Err(TryLockError::WouldBlock) => wait.pause(&self.lock_path)?,
                }
            },
        };
        // A Canon home this creates is private (0700): it holds the agent's credentials and
        // decisions. An existing one keeps the mode its owner gave it.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.home)
            .map_err(|source| DurableError::CreateHome {
                path: self.home.clone(),
                source,
            })?;
        let lock_error = |source: io::Error| DurableError::Lock {
            path: self.lock_path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .open(&self.lock_path)
            .map_err(lock_error)?;
        match wait.as_mut() {
            None => loop {
                match flock(&file, FlockOperation::LockExclusive) {
                    Ok(()) => break,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(lock_error(e.into())),
                }
            },
            Some(wait) => loop {
                match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                    Ok(()) => break,
                    Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR) => {
                        wait.pause(&self.lock_path)?
                    }
                    Err(e) => return Err(lock_error(e.into())),
                }
            },
        }
        Ok(Guard {
            file,
            _process: process,
        })
    }

    /// The document as JSON, `None` when it does not exist; call only under the lock. A
    /// dangling symlink or any non-regular file in its place is unreadable.
    pub(crate) fn read_json(&self) -> Result<Option<Value>, DurableError> {
        let path = &self.path;
        let unreadable = |source: LoadFailure| DurableError::Unreadable {
            path: path.clone(),
            source,
        };
        match fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(unreadable(LoadFailure::Io(e))),
            Ok(_) => {}
        }
        let meta = fs::metadata(path).map_err(|e| unreadable(LoadFailure::Io(e)))?;
        if !meta.is_file() {
            return Err(unreadable(LoadFailure::NotRegularFile));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        OpenOptions::new()
            .read(true)
            // Never block on a FIFO swapped in after the metadata check.
            .custom_flags(OFlags::NONBLOCK.bits() as i32)
            .open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| unreadable(LoadFailure::Io(e)))?;
        let text = std::str::from_utf8(&bytes).map_err(|e| unreadable(LoadFailure::NotUtf8(e)))?;
        serde_json::from_str(text)
            .map(Some)
            .map_err(|e| unreadable(LoadFailure::Json(e)))
    }

    /// Deletes temp files left by crashed writers; call only under the lock.
    pub(crate) fn remove_stale_temp_files(&self) {
        let Ok(dir) = fs::read_dir(&self.home) else {
            return;
        };
        for item in dir.flatten() {
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(&self.temp_prefix) && name.ends_with(TEMP_FILE_SUFFIX) {
                let _ = fs::remove_file(item.path());
            }
        }
    }

    /// The atomic, durable write of `bytes` (approvals.md §5); call only under the lock.
    pub(crate) fn write_bytes(&self, bytes: &[u8]) -> Result<(), DurableError> {
        let mut suffix = [0u8; 16];
        random_bytes(&mut suffix)?;
        let mut name = format!("{}{}.", self.temp_prefix, std::process::id());
        push_hex(&mut name, &suffix);
        name.push_str(TEMP_FILE_SUFFIX);
        let temp = self.home.join(name);
        let fail = |path: &Path, stage: WriteStage| {
            let path = path.to_path_buf();
            move |source: io::Error| DurableError::Write {
                path,
                stage,
                source,
            }
        };
        fault::check(WriteStage::CreateTemp).map_err(fail(&temp, WriteStage::CreateTemp))?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&temp)
            .map_err(fail(&temp, WriteStage::CreateTemp))?;
        let result = (|| {
            fault::check(WriteStage::WriteTemp)
                .and_then(|()| file.write_all(bytes))
                .and_then(|()| file.flush())
                .map_err(fail(&temp, WriteStage::WriteTemp))?;
            fault::check(WriteStage::SyncTemp)
                .and_then(|()| file.sync_all())
                .map_err(fail(&temp, WriteStage::SyncTemp))?;
            // The mode was set at creation; chmod again as the spec does (umask may
            // only remove bits, but a failure is ignored either way).
            let _ = file.set_permissions(fs::Permissions::from_mode(FILE_MODE));
            fault::check(WriteStage::Rename)
                .and_then(|()| fs::rename(&temp, &self.path))
                .map_err(fail(&self.path, WriteStage::Rename))?;
            fault::check(WriteStage::SyncDir)
                .and_then(|()| File::open(&self.home))
                .and_then(|dir| dir.sync_all())
                .map_err(fail(&self.home, WriteStage::SyncDir))
        })();
        drop(file);
        if result.is_err() {
            // After a successful rename the temp name no longer exists; ignore that.
            let _ = fs::remove_file(&temp);
        }
        result
    }
}
