//! The durable inbox's file and its writer. The rules and the text format are the pure crate
//! `canon-inbox`'s (`tracker`, `format`); this module owns the file `<CANON_HOME>/inbox-<scope>.jsonl`:
//! one daemon holds it at a time (`flock` on `inbox-<scope>.lock`, mode 0600, never deleted,
//! held for the journal's lifetime); each batch of records is one append plus `fdatasync`; a
//! last line a crash cut short is truncated away at open; anything else the format refuses, or
//! a file larger than the format allows, fails closed ([`InboxError::Corrupt`] names the file
//! and line; the file is left untouched); a journal past `COMPACT_LINES` lines is rewritten
//! atomically (temp file → `fsync` → rename → `fsync` of the directory).
//!
//! The journal lives on a thread of its own, so an `fdatasync` never holds up the daemon's
//! loop. The session's records arrive in order over a channel; a burst is written as one append
//! with one `fdatasync`. Dropping the writer flushes what is queued and joins the thread (a
//! graceful exit loses nothing; a crash loses at most the records still queued, which only makes
//! the next start replay a little more, and the shim drops a message Hermes already took). A
//! write that must follow its records (a turn's first open state on Canon) waits for the
//! writer's acknowledgement ([`InboxWriter::write_acked`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use canon_inbox::format::{self, Loaded, COMPACT_LINES, MAX_FILE_BYTES};
use canon_inbox::Record;
use rustix::fs::{flock, FlockOperation};

/// Mode of the journal and its lock file: they name conversations' messages.
const FILE_MODE: u32 = 0o600;

/// What can stop the journal.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InboxError {
    /// The Canon home could not be created.
    #[error("cannot create the Canon home {path}: {source}")]
    CreateHome { path: PathBuf, source: io::Error },
    /// A file of the journal could not be opened, read or locked.
    #[error("cannot open the Canon inbox {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    /// Another process held the journal's lock for longer than the wait.
    #[error(
        "the Canon inbox {path} is in use by another canon-hermes daemon (waited {} ms)",
        waited.as_millis()
    )]
    Busy { path: PathBuf, waited: Duration },
    /// The journal holds something this version did not write; it was left untouched.
    #[error(
        "the Canon inbox {path} is unreadable at line {line}: {reason}; it was left untouched \
         (move it aside to start again without the record of handled messages)"
    )]
    Corrupt {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// Writing failed; the records of this call may be missing from the file.
    #[error("writing the Canon inbox {path} failed: {source}")]
    Write { path: PathBuf, source: io::Error },
}

/// An open journal (its lock held).
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    scope: String,
    file: File,
    /// Held for the journal's lifetime; the `flock` goes with the descriptor.
    _lock: File,
    lines: usize,
    state: Loaded,
    /// A write failed (a full disk, EIO): the file may end in part of a line, and records
    /// applied to `state` may be missing from it. The next append rewrites the whole journal
    /// from `state` (temp file and rename) instead of appending after the damage.
    rewrite_pending: bool,
}

impl Journal {
    /// Opens (or creates) the journal of `scope` in `home`, waiting up to `lock_wait` for a
    /// predecessor to let go of it.
    pub(crate) fn open(
        home: &Path,
        scope: &str,
        lock_wait: Duration,
    ) -> Result<(Journal, Loaded), InboxError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(home)
            .map_err(|source| InboxError::CreateHome {
                path: home.to_owned(),
                source,
            })?;
        let path = home.join(format!("inbox-{scope}.jsonl"));
        let lock = lock_file(&home.join(format!("inbox-{scope}.lock")), lock_wait)?;
        let open_error = |source| InboxError::Open {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(FILE_MODE)
            .open(&path)
            .map_err(open_error)?;
        let size = file.metadata().map_err(open_error)?.len();
        if size > MAX_FILE_BYTES {
            return Err(InboxError::Corrupt {
                path,
                line: 1,
                reason: format!("the file is {size} bytes, more than this inbox ever writes"),
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.read_to_end(&mut bytes).map_err(open_error)?;
        let parsed =
            format::parse(&bytes, scope).map_err(|(line, reason)| InboxError::Corrupt {
                path: path.clone(),
                line,
                reason,
            })?;
        let torn_tail = parsed.complete_bytes < bytes.len();
        if torn_tail {
            file.set_len(parsed.complete_bytes as u64)
                .map_err(|source| InboxError::Write {
                    path: path.clone(),
                    source,
                })?;
        }
        let mut journal = Journal {
            path,
            scope: scope.to_owned(),
            file,
            _lock: lock,
            lines: parsed.lines,
            state: Loaded {
                torn_tail,
                ..parsed.state
            },
            rewrite_pending: false,
        };
        if parsed.lines == 0 {
            journal.write_text(&format::header_line(scope))?;
            journal.lines = 1;
        }
        let loaded = journal.state.clone();
        Ok((journal, loaded))
    }

    /// The journal's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `records` and makes them durable (`fdatasync`); compacts instead when the
    /// journal would grow past `COMPACT_LINES` lines.
    pub(crate) fn append(&mut self, records: &[Record]) -> Result<(), InboxError> {
        // Memory and disk hold the same, readable forms: a record the reader would refuse
        // would fail every later start closed (canon_inbox::format::journalable).
        let kept: Vec<Record> = records.iter().filter_map(format::journalable).collect();
        if kept.len() < records.len() {
            tracing::warn!(
                dropped = records.len() - kept.len(),
                "inbox: records with an empty or over-long id are not journaled"
            );
        }
        if kept.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        for record in &kept {
            self.state.apply(record);
            text.push_str(&format::record_line(record));
        }
        if self.rewrite_pending || self.lines + kept.len() > COMPACT_LINES {
            return self.compact();
        }
        self.write_text(&text)?;
        self.lines += kept.len();
        Ok(())
    }

    fn write_error(&self, source: io::Error) -> InboxError {
        InboxError::Write {
            path: self.path.clone(),
            source,
        }
    }

    fn write_text(&mut self, text: &str) -> Result<(), InboxError> {
        let good_length = self.file.metadata().map(|m| m.len());
        let written = self
            .file
            .write_all(text.as_bytes())
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            // Take back a partial line where the file allows it; the next append rewrites the
            // journal whole in any case, so a fragment never ends up mid-file.
            if let Ok(length) = good_length {
                let _ = self.file.set_len(length);
            }
            self.rewrite_pending = true;
            return Err(self.write_error(e));
        }
        Ok(())
    }

    /// Rewrites the journal as its live state.
    fn compact(&mut self) -> Result<(), InboxError> {
        let text = format::snapshot(&self.scope, &self.state);
        let written = replace_file(&self.path, "jsonl", text.as_bytes())
            .and_then(|()| OpenOptions::new().read(true).append(true).open(&self.path));
        match written {
            Ok(file) => {
                self.file = file;
                self.lines = text.lines().count();
                self.rewrite_pending = false;
                Ok(())
            }
            Err(e) => {
                self.rewrite_pending = true;
                Err(self.write_error(e))
            }
        }
    }
}

/// Replaces `path` with `bytes` atomically: a private temp file beside it (named from
/// `extension` and this process), `fsync`, rename over `path`, `fsync` of the directory. On a
/// failure the temp file is removed; one before the rename leaves `path` as it was.
fn replace_file(path: &Path, extension: &str, bytes: &[u8]) -> std::io::Result<()> {
    let temp = path.with_extension(format!("{extension}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&temp);
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(&temp)
        .and_then(|mut out| {
            out.write_all(bytes)?;
            out.sync_all()
        })
        .and_then(|()| fs::rename(&temp, path))
        .and_then(|()| match path.parent() {
            Some(dir) => File::open(dir).and_then(|d| d.sync_all()),
            None => Ok(()),
        });
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

/// Records one stream gap (`last`, as the session describes it) in `home`'s gap record of
/// `scope` (`canon_inbox::gaps`), counting on top of what the file held, replacing the file
/// atomically. A record it cannot read is started again; a failure is logged, never fatal (the
/// gap was logged at WARN already). Blocking: call it off the daemon's loop.
pub(crate) fn record_gap(
    home: &Path,
    scope: &str,
    last: serde_json::Map<String, serde_json::Value>,
) {
    use canon_inbox::gaps::{self, GapRecord};
    let path = home.join(gaps::file_name(scope));
    let previous = fs::symlink_metadata(&path)
        .ok()
        .filter(|meta| meta.is_file() && meta.len() <= gaps::MAX_BYTES as u64)
        .and_then(|_| fs::read_to_string(&path).ok())
        .and_then(|text| GapRecord::parse(&text).ok());
    let record = GapRecord::next(previous.as_ref(), last);
    if let Err(error) = replace_file(&path, "json", record.render().as_bytes()) {
        tracing::warn!(path = %path.display(), %error, "the stream gap could not be recorded");
    }
}

/// Takes the lock file's `flock`, polling until `wait` is over.
fn lock_file(path: &Path, wait: Duration) -> Result<File, InboxError> {
    let open_error = |source| InboxError::Open {
        path: path.to_owned(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(path)
        .map_err(open_error)?;
    let started = Instant::now();
    loop {
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => {
                if started.elapsed() >= wait {
                    return Err(InboxError::Busy {
                        path: path.to_owned(),
                        waited: started.elapsed(),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(errno) => return Err(open_error(io::Error::from(errno))),
        }
    }
}

/// The open journal's writer thread.
#[derive(Debug)]
pub(crate) struct InboxWriter {
    scope: String,
    path: PathBuf,
    tx: Sink,
    thread: Option<JoinHandle<()>>,
}

/// One batch for the writer thread, and whom to tell once it is on disk (or the append failed).
type Batch = (Vec<Record>, Option<tokio::sync::oneshot::Sender<()>>);

/// The writer thread's channel, shared with the [`InboxSink`]s; emptied when the writer drops,
/// so no sink keeps the thread alive past it.
type Sink = Arc<Mutex<Option<mpsc::Sender<Batch>>>>;

/// A handle that queues records for the journal from elsewhere (a Canon write lane, once its
/// write landed). Records queued after the writer dropped are lost, as a crash would lose
/// them.
#[derive(Debug, Clone)]
pub(crate) struct InboxSink(Sink);

impl InboxSink {
    /// Queues records for the journal, if it is still open.
    pub(crate) fn write(&self, records: Vec<Record>) {
        self.send((records, None));
    }

    fn send(&self, batch: Batch) {
        let tx = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = tx.as_ref() {
            if tx.send(batch).is_err() {
                tracing::error!("the inbox writer stopped; records dropped");
            }
        }
    }
}

impl InboxWriter {
    /// Opens the journal of `scope` in `home` (on a blocking thread: it may wait for the lock).
    pub(crate) async fn open(
        home: &Path,
        scope: String,
        lock_wait: Duration,
    ) -> Result<(InboxWriter, Loaded), InboxError> {
        let home = home.to_owned();
        let key = scope.clone();
        let opened = tokio::task::spawn_blocking(move || Journal::open(&home, &key, lock_wait))
            .await
            .unwrap_or_else(|error| {
                Err(InboxError::Open {
                    path: PathBuf::new(),
                    source: std::io::Error::other(error.to_string()),
                })
            });
        let (journal, loaded) = opened?;
        let path = journal.path().to_owned();
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("canon-inbox".into())
            .spawn(move || write_loop(journal, rx))
            .map_err(|source| InboxError::Open {
                path: path.clone(),
                source,
            })?;
        Ok((
            InboxWriter {
                scope,
                path,
                tx: Arc::new(Mutex::new(Some(tx))),
                thread: Some(thread),
            },
            loaded,
        ))
    }

    /// The scope this journal belongs to.
    pub(crate) fn scope(&self) -> &str {
        &self.scope
    }

    /// The journal file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Queues records for the journal.
    pub(crate) fn write(&self, records: Vec<Record>) {
        self.sink().write(records);
    }

    /// Queues records for the journal; the receiver resolves once they are on disk, or the
    /// append failed, or the writer is gone (the caller waits for the attempt, not success:
    /// a failing disk must not stop what waits on it).
    pub(crate) fn write_acked(&self, records: Vec<Record>) -> tokio::sync::oneshot::Receiver<()> {
        let (done, written) = tokio::sync::oneshot::channel();
        self.sink().send((records, Some(done)));
        written
    }

    /// A handle that queues records for this journal while it is open.
    pub(crate) fn sink(&self) -> InboxSink {
        InboxSink(Arc::clone(&self.tx))
    }
}

impl Drop for InboxWriter {
    fn drop(&mut self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn write_loop(mut journal: Journal, rx: mpsc::Receiver<Batch>) {
    let mut failing = false;
    while let Ok((mut batch, first)) = rx.recv() {
        let mut waiting: Vec<_> = first.into_iter().collect();
        while let Ok((more, done)) = rx.try_recv() {
            batch.extend(more);
            waiting.extend(done);
        }
        let batch = coalesce(batch);
        let appended = journal.append(&batch);
        for done in waiting {
            let _ = done.send(());
        }
        match appended {
            Ok(()) => {
                if failing {
                    tracing::info!(path = %journal.path().display(), "inbox writes work again");
                    failing = false;
                }
            }
            Err(error) => {
                if !failing {
                    // The messages were handed to Hermes already; what is lost is only the
                    // record of it, so a restart may replay them once more.
                    tracing::error!(%error, "inbox write failed");
                    failing = true;
                }
            }
        }
    }
}

/// A burst's records with only its last cursor (a cursor replaces every earlier one), placed
/// after every handled record of the burst, so no cursor is written before the records it
/// passes.
fn coalesce(batch: Vec<Record>) -> Vec<Record> {
    let mut out = Vec::with_capacity(batch.len());
    let mut cursor = None;
    for record in batch {
        match record {
            Record::Cursor(id) => cursor = Some(id),
            handled => out.push(handled),
        }
    }
    out.extend(cursor.map(Record::Cursor));
    out
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod coalesce_tests {
    use super::*;

    #[test]
    fn a_burst_keeps_every_handled_record_and_only_the_last_cursor() {
        let handled = |id: &str| Record::Handled {
            message_id: id.into(),
            at_ms: 1,
        };
        let batch = vec![
            Record::Cursor("e-1".into()),
            handled("m-1"),
            Record::Cursor("e-2".into()),
            handled("m-2"),
        ];
        assert_eq!(
            coalesce(batch),
            vec![handled("m-1"), handled("m-2"), Record::Cursor("e-2".into())]
        );
    }
}
