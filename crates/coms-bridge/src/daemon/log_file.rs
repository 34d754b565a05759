//! The shared ndjson log (coms-bridge.md §6.13): one append-mode write per record, because every
//! bridge of the user appends to the same file.
//!
//! The log names questions and who answered them, so it is private: created with mode 0600, and
//! an existing file with group or other bits is tightened to 0600 before it is written. It is
//! never followed through a symbolic link. It does not grow without bound: once it reaches
//! [`ROTATE_AT`] bytes it is renamed to `<log>.1` (replacing any older one) and a fresh file is
//! started, so at most one predecessor is kept.

use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, Mode, OFlags};

/// The size at which the log is rotated, in bytes.
pub(crate) const ROTATE_AT: u64 = 4 * 1024 * 1024;

/// Appends `line` to the log at `path`, rotating it first when it has reached `rotate_at` bytes.
pub(crate) fn append(path: &Path, line: &[u8], rotate_at: u64) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = open(path)?;
    if file.metadata()?.len() >= rotate_at {
        rotate(path, &file, rotate_at)?;
        file = open(path)?;
    }
    file.write_all(line)
}

/// `<log>.1`, the one predecessor kept.
pub(crate) fn predecessor(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

fn open(path: &Path) -> io::Result<File> {
    let flags =
        OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = File::from(rustix::fs::open(path, flags, Mode::from_raw_mode(0o600))?);
    let mode = file.metadata()?.permissions().mode();
    if mode & 0o077 != 0 {
        // Best effort: a record is worth more than the mode of a file in our 0700 directory.
        if let Err(error) = file.set_permissions(std::fs::Permissions::from_mode(0o600)) {
            tracing::debug!(path = %path.display(), %error, "could not make the log private");
        }
    }
    Ok(file)
}

/// Renames the full log `file` (opened from `path`) to its predecessor.
///
/// Several bridges may decide to rotate at once. An exclusive `flock` on the old file elects one
/// of them, and it renames only if its open file is still the one at `path`, so a bridge that
/// comes second never rotates the fresh file another bridge has just started. The lock is only
/// tried, never waited for: a bridge that finds it taken leaves the rotation to the holder, and
/// a process holding the lock for ever cannot stall the daemon. Records appended to the old file
/// meanwhile land in the predecessor; none is lost.
fn rotate(path: &Path, file: &File, rotate_at: u64) -> io::Result<()> {
    match rustix::fs::flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Ok(()),
        Err(error) => return Err(error.into()),
    }
    let opened = file.metadata()?;
    let still_current = std::fs::symlink_metadata(path)
        .is_ok_and(|now| now.dev() == opened.dev() && now.ino() == opened.ino());
    let result = if still_current && opened.len() >= rotate_at {
        std::fs::rename(path, predecessor(path))
    } else {
        Ok(())
    };
    let _ = rustix::fs::flock(file, FlockOperation::Unlock);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .expect("exists")
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn a_new_log_is_private_and_an_open_one_is_tightened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.ndjson");
        append(&path, b"one\n", ROTATE_AT).expect("append");
        assert_eq!(mode(&path), 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        append(&path, b"two\n", ROTATE_AT).expect("append");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "one\ntwo\n");
    }

    #[test]
    fn a_full_log_becomes_the_one_predecessor() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.ndjson");
        append(&path, b"aaaa\n", 10).expect("append");
        append(&path, b"bbbb\n", 10).expect("append");
        assert!(!predecessor(&path).exists(), "not full before this write");
        append(&path, b"cccc\n", 10).expect("append");
        assert_eq!(
            std::fs::read_to_string(predecessor(&path)).expect("predecessor"),
            "aaaa\nbbbb\n"
        );
        assert_eq!(std::fs::read_to_string(&path).expect("log"), "cccc\n");
        append(&path, b"dddd\n", 10).expect("append");
        append(&path, b"eeee\n", 10).expect("append");
        assert_eq!(
            std::fs::read_to_string(predecessor(&path)).expect("predecessor"),
            "cccc\ndddd\n",
            "only one predecessor is kept"
        );
        assert_eq!(std::fs::read_to_string(&path).expect("log"), "eeee\n");
        assert_eq!(mode(&predecessor(&path)), 0o600);
    }

    #[test]
    fn a_bridge_that_lost_the_race_does_not_rotate_the_fresh_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.ndjson");
        std::fs::write(&path, "old-full\n").expect("full");
        // Both bridges opened the full log; the first rotates and starts a fresh one.
        let late = open(&path).expect("open");
        append(&path, b"first\n", 5).expect("append");
        rotate(&path, &late, 5).expect("rotate");
        assert_eq!(std::fs::read_to_string(&path).expect("log"), "first\n");
        assert_eq!(
            std::fs::read_to_string(predecessor(&path)).expect("predecessor"),
            "old-full\n"
        );
    }

    #[test]
    fn a_held_lock_postpones_the_rotation_without_waiting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.ndjson");
        std::fs::write(&path, "full\n").expect("full");
        let holder = open(&path).expect("open");
        rustix::fs::flock(&holder, FlockOperation::LockExclusive).expect("lock");
        append(&path, b"kept\n", 5).expect("append");
        assert!(!predecessor(&path).exists());
        assert_eq!(std::fs::read_to_string(&path).expect("log"), "full\nkept\n");
        rustix::fs::flock(&holder, FlockOperation::Unlock).expect("unlock");
        append(&path, b"next\n", 5).expect("append");
        assert_eq!(
            std::fs::read_to_string(predecessor(&path)).expect("predecessor"),
            "full\nkept\n"
        );
    }

    #[test]
    fn a_symbolic_link_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "").expect("target");
        let path = dir.path().join("log.ndjson");
        std::os::unix::fs::symlink(&target, &path).expect("symlink");
        assert!(append(&path, b"x\n", ROTATE_AT).is_err());
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "");
    }
}
