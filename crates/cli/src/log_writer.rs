//! The daemon's stderr as a lossy, never-blocking log sink.
//!
//! `serve --stdio` runs its whole loop on one thread, and its stderr is a pipe the shim drains
//! from Python, one line at a time, each through Hermes' log handlers and the interpreter lock.
//! A blocking write to a full pipe would stop everything the daemon does (stdin, the stream,
//! timers, replies) until the gateway gets round to reading: a burst of warnings (Canon down)
//! or `RUST_LOG=debug` while the gateway is busy would freeze the agent on its own logs. So a
//! log line is handed to a writer thread over a bounded queue; when the queue is full the line
//! is dropped and counted, and the writer reports how many it lost once it can write again.
//! The lines are whole: each `write` the subscriber makes holds one formatted event.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

/// Lines the queue holds before new ones are dropped: enough for a burst of a few hundred
/// events while the reader is busy, at most a few MiB of memory.
pub(crate) const QUEUE_LINES: usize = 4096;

/// A [`tracing_subscriber::fmt::MakeWriter`] that queues each event's bytes for the writer
/// thread.
#[derive(Clone)]
pub(crate) struct QueuedStderr {
    queue: SyncSender<Vec<u8>>,
    dropped: Arc<AtomicU64>,
    /// Lines queued and not yet written.
    pending: Arc<AtomicU64>,
}

impl QueuedStderr {
    /// Starts the writer thread on `out`, with a queue of `capacity` lines. Should the thread
    /// not start (no memory for its stack), the queue has no reader and every line is dropped:
    /// the daemon goes on without logs rather than not at all.
    pub(crate) fn start<W: Write + Send + 'static>(out: W, capacity: usize) -> QueuedStderr {
        let (queue, lines) = sync_channel(capacity);
        let dropped = Arc::new(AtomicU64::new(0));
        let pending = Arc::new(AtomicU64::new(0));
        let (counter, written) = (Arc::clone(&dropped), Arc::clone(&pending));
        let _ = std::thread::Builder::new()
            .name("canon-log".into())
            .spawn(move || drain(lines, out, &counter, &written));
        QueuedStderr {
            queue,
            dropped,
            pending,
        }
    }

    /// Waits until every queued line is written, or `wait` passed (an exiting process calls
    /// it, so its last lines are not lost with the writer thread).
    pub(crate) fn flush(&self, wait: std::time::Duration) {
        let deadline = std::time::Instant::now() + wait;
        while self.pending.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// Lines dropped so far because the queue was full.
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The writer thread: writes each line; before a line that follows drops, a line saying how
/// many were dropped.
fn drain<W: Write>(lines: Receiver<Vec<u8>>, mut out: W, dropped: &AtomicU64, pending: &AtomicU64) {
    let mut reported = 0u64;
    while let Ok(line) = lines.recv() {
        let written = Written(pending);
        let lost = dropped.load(Ordering::Relaxed);
        if lost > reported {
            let note = format!(
                " WARN canon_hermes::log: {} log lines dropped: stderr was not read fast enough\n",
                lost - reported
            );
            let _ = out.write_all(note.as_bytes());
            reported = lost;
        }
        if out.write_all(&line).and_then(|()| out.flush()).is_err() {
            // Nobody reads stderr any more (the shim is gone): keep draining so the queue
            // never fills, but stop trying.
            drop(written);
            for _ in lines.iter() {
                pending.fetch_sub(1, Ordering::AcqRel);
            }
            return;
        }
    }
}

/// Counts a received line as written when dropped, whatever happened to it.
struct Written<'a>(&'a AtomicU64);

impl Drop for Written<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One event's bytes, queued when the writer is dropped (the subscriber makes one writer per
/// event).
pub(crate) struct QueuedLine {
    line: Vec<u8>,
    queue: SyncSender<Vec<u8>>,
    dropped: Arc<AtomicU64>,
    pending: Arc<AtomicU64>,
}

impl Write for QueuedLine {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for QueuedLine {
    fn drop(&mut self) {
        if self.line.is_empty() {
            return;
        }
        let line = std::mem::take(&mut self.line);
        // Counted before the send, so the writer never sees it written before it is pending.
        self.pending.fetch_add(1, Ordering::AcqRel);
        match self.queue.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for QueuedStderr {
    type Writer = QueuedLine;

    fn make_writer(&'a self) -> QueuedLine {
        QueuedLine {
            line: Vec::with_capacity(128),
            queue: self.queue.clone(),
            dropped: Arc::clone(&self.dropped),
            pending: Arc::clone(&self.pending),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use tracing_subscriber::fmt::MakeWriter as _;

    /// A sink that blocks every write until the test lets it go, like a pipe nobody reads.
    struct Gate {
        open: mpsc::Receiver<()>,
        written: mpsc::Sender<Vec<u8>>,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let _ = self.open.recv();
            let _ = self.written.send(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn log(sink: &QueuedStderr, text: &str) {
        let mut writer = sink.make_writer();
        writer
            .write_all(text.as_bytes())
            .expect("a write to memory");
    }

    #[test]
    fn a_stalled_reader_never_blocks_the_logger_and_the_loss_is_reported() {
        let (open, gate) = mpsc::channel();
        let (written, lines) = mpsc::channel();
        let sink = QueuedStderr::start(
            Gate {
                open: gate,
                written,
            },
            4,
        );
        // The writer thread takes the first line and blocks in the sink; four more fill the
        // queue; the rest are dropped, and each call returned at once.
        for i in 0..20 {
            log(&sink, &format!("line {i}\n"));
        }
        assert!(sink.dropped() >= 15, "dropped {}", sink.dropped());
        let dropped = sink.dropped();
        for _ in 0..64 {
            let _ = open.send(());
        }
        // The reader is back: what was queued arrives (at most five lines, the one the thread
        // held and the four queued), then a line logged now.
        let mut seen = Vec::new();
        let mut logged_after = false;
        while let Ok(line) = lines.recv_timeout(std::time::Duration::from_secs(10)) {
            let text = String::from_utf8(line).expect("utf-8");
            let last = text == "after\n";
            seen.push(text);
            if last {
                break;
            }
            let kept = seen.iter().filter(|l| l.starts_with("line ")).count();
            if !logged_after && kept as u64 + dropped == 20 {
                log(&sink, "after\n");
                logged_after = true;
            }
        }
        assert!(seen.iter().any(|l| l == "line 0\n"), "{seen:?}");
        // Every drop is reported, in one note or several, before the line that followed it.
        let reported: u64 = seen
            .iter()
            .filter_map(|l| l.strip_prefix(" WARN canon_hermes::log: "))
            .filter_map(|l| l.split(' ').next()?.parse::<u64>().ok())
            .sum();
        assert_eq!(reported, dropped, "{seen:?}");
        assert_eq!(
            seen.iter().filter(|l| l.starts_with("line ")).count() as u64 + dropped,
            20,
            "each line written or counted: {seen:?}"
        );
        assert_eq!(seen.last().map(String::as_str), Some("after\n"));
    }
}
