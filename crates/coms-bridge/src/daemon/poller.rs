//! One scan of the questions directory (coms-bridge.md §6.8, poll loop step 1), hardened: the
//! directory is written by a model with file tools, so an entry may be anything.
//!
//! - Dot names are not even looked at (the liaison writes through `.hermes-tmp.*` temps).
//! - Only the answer file of a pending qid is opened ([`content_needed`]); every other name is
//!   decided by the core from the name alone, so a FIFO or a device under another name is never
//!   opened.
//! - An entry must be a regular file by `lstat`, is opened with `O_NOFOLLOW | O_NONBLOCK` (no
//!   symbolic link is followed and no FIFO can block the open), must still be a regular file by
//!   `fstat`, and is read up to [`ANSWER_FILE_LIMIT`] bytes.
//! - Anything else is [`Content::Skipped`]: left in place, neither deleted nor logged, with one
//!   WARN per entry while it stays (directories, which the spec skips silently, get none).
//!
//! A scan is synchronous file I/O; the daemon runs it on the blocking pool, one at a time.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::core::answer::content_needed;
use crate::core::bridge::{Content, DirEntry};

/// The largest answer file read, in bytes. An answer must travel back in a response envelope,
/// and coms lines are capped at 64 KiB (`wire::socket::LINE_CAP`, coms-bridge.md §4.4), so a
/// larger file could never be delivered anyway.
pub(crate) const ANSWER_FILE_LIMIT: u64 = 64 * 1024;

/// Why an entry is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    /// A directory: skipped silently, as the spec says.
    Directory,
    /// A symbolic link, FIFO, socket or device.
    NotRegular,
    /// A regular file over [`ANSWER_FILE_LIMIT`].
    TooLarge,
    /// It could not be opened or read (permission, or replaced between `lstat` and `open`).
    Unreadable,
}

impl Skip {
    fn as_str(self) -> &'static str {
        match self {
            Skip::Directory => "a directory",
            Skip::NotRegular => "not a regular file",
            Skip::TooLarge => "larger than 64 KiB",
            Skip::Unreadable => "unreadable",
        }
    }
}

/// Scans one questions directory and remembers what it skipped last time, so each skipped
/// entry is warned about once while it stays.
#[derive(Debug)]
pub(crate) struct Poller {
    dir: PathBuf,
    skipped: HashMap<String, Skip>,
}

impl Poller {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Poller {
            dir,
            skipped: HashMap::new(),
        }
    }

    /// Every entry the core may act on, reading only the answer files of `awaited` qids. A
    /// directory that cannot be read yields nothing.
    pub(crate) fn scan(&mut self, awaited: &BTreeSet<String>) -> Vec<DirEntry> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let mut skipped = HashMap::new();
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let content = match self.examine(&name, awaited) {
                Ok(content) => content,
                Err(skip) => {
                    skipped.insert(name.clone(), skip);
                    Content::Skipped
                }
            };
            found.push(DirEntry { name, content });
        }
        for (name, skip) in &skipped {
            let warn = !matches!(skip, Skip::Directory) && self.skipped.get(name) != Some(skip);
            if warn {
                tracing::warn!(
                    file = ?name,
                    dir = %self.dir.display(),
                    reason = skip.as_str(),
                    "leaving an entry of the questions directory alone"
                );
            }
        }
        // Entries that went away or became readable are forgotten, so a later problem warns again.
        self.skipped = skipped;
        found
    }

    fn examine(&self, name: &str, awaited: &BTreeSet<String>) -> Result<Content, Skip> {
        let path = self.dir.join(name);
        let meta = std::fs::symlink_metadata(&path).map_err(|_| Skip::Unreadable)?;
        if meta.is_dir() {
            return Err(Skip::Directory);
        }
        if !meta.file_type().is_file() {
            return Err(Skip::NotRegular);
        }
        if !content_needed(name, |qid| awaited.contains(qid)) {
            return Ok(Content::Unread);
        }
        if meta.len() > ANSWER_FILE_LIMIT {
            return Err(Skip::TooLarge);
        }
        read_limited(&path).map(Content::Read)
    }
}

/// Reads a regular file of at most [`ANSWER_FILE_LIMIT`] bytes without following a symbolic
/// link and without blocking on a FIFO swapped in after the `lstat`.
fn read_limited(path: &Path) -> Result<Vec<u8>, Skip> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|error| {
        // ELOOP: the last component is a symbolic link now.
        if error == rustix::io::Errno::LOOP {
            Skip::NotRegular
        } else {
            Skip::Unreadable
        }
    })?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(|_| Skip::Unreadable)?;
    if !meta.file_type().is_file() {
        return Err(Skip::NotRegular);
    }
    let mut bytes = Vec::new();
    file.take(ANSWER_FILE_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| Skip::Unreadable)?;
    if u64::try_from(bytes.len()).map_or(true, |len| len > ANSWER_FILE_LIMIT) {
        return Err(Skip::TooLarge);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const QID: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
    const OTHER: &str = "01BX5ZZKBKACTAV9WEVGEMMVRZ";

    fn awaited() -> BTreeSet<String> {
        [QID.to_owned()].into()
    }

    fn scanned(poller: &mut Poller) -> Vec<(String, Content)> {
        let mut entries: Vec<_> = poller
            .scan(&awaited())
            .into_iter()
            .map(|e| (e.name, e.content))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
    }

    #[test]
    fn only_regular_answer_files_of_awaited_qids_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = |name: &str| dir.path().join(name);
        let answer = format!("{QID}.answer.json");
        std::fs::write(at(&answer), "{}").expect("answer");
        std::fs::write(at(&format!("{OTHER}.answer.json")), "{}").expect("foreign");
        std::fs::write(at("junk.json"), "{}").expect("junk");
        std::fs::write(at(".hermes-tmp.abc"), "{").expect("temp");
        mkfifo(&at("fifo"));
        mkfifo(&at(".fifo"));
        std::os::unix::fs::symlink("/dev/zero", at("zero")).expect("symlink");
        std::fs::create_dir(at("sub")).expect("dir");
        let mut poller = Poller::new(dir.path().to_owned());
        assert_eq!(
            scanned(&mut poller),
            [
                (answer.clone(), Content::Read(b"{}".to_vec())),
                (format!("{OTHER}.answer.json"), Content::Unread),
                ("fifo".to_owned(), Content::Skipped),
                ("junk.json".to_owned(), Content::Unread),
                ("sub".to_owned(), Content::Skipped),
                ("zero".to_owned(), Content::Skipped),
            ]
        );
        let skipped = [
            ("fifo", Skip::NotRegular),
            ("sub", Skip::Directory),
            ("zero", Skip::NotRegular),
        ]
        .map(|(name, skip)| (name.to_owned(), skip));
        assert_eq!(poller.skipped, HashMap::from(skipped));
    }

    #[test]
    fn awaited_answer_files_that_are_not_plain_files_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let answer = dir.path().join(format!("{QID}.answer.json"));
        let mut poller = Poller::new(dir.path().to_owned());
        for make in [
            (|p: &Path| mkfifo(p)) as fn(&Path),
            |p| std::os::unix::fs::symlink("/dev/zero", p).expect("symlink"),
            |p| std::fs::write(p, vec![b' '; 64 * 1024 + 1]).expect("large"),
        ] {
            make(&answer);
            assert_eq!(
                scanned(&mut poller),
                [(format!("{QID}.answer.json"), Content::Skipped)]
            );
            std::fs::remove_file(&answer).expect("remove");
        }
        std::fs::write(&answer, vec![b' '; 64 * 1024]).expect("at the limit");
        assert_eq!(
            scanned(&mut poller),
            [(
                format!("{QID}.answer.json"),
                Content::Read(vec![b' '; 64 * 1024])
            )]
        );
        assert!(poller.skipped.is_empty(), "readable again: forgotten");
    }

    #[test]
    fn read_limited_refuses_links_fifos_and_large_files_itself() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        assert_eq!(read_limited(&fifo), Err(Skip::NotRegular));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
        assert_eq!(read_limited(&link), Err(Skip::NotRegular));
        let large = dir.path().join("large");
        std::fs::write(&large, vec![b'x'; 64 * 1024 + 1]).expect("large");
        assert_eq!(read_limited(&large), Err(Skip::TooLarge));
        assert_eq!(
            read_limited(&dir.path().join("gone")),
            Err(Skip::Unreadable)
        );
    }
}
