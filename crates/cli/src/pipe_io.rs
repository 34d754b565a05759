//! The daemon's stdin and stdout when they are the shim's pipes: read and written by the
//! runtime's own thread, woken by its reactor (epoll), instead of by tokio's `stdin()` and
//! `stdout()`, which do every read and write on a thread of the blocking pool and wake the
//! runtime from there.
//!
//! Why: the shim and the daemon trade one JSON line per gateway call, and the Hermes gateway's
//! stream consumer waits for each answer. Profiled with `perf` under the daemon bench
//! (`benches/daemon.rs`), about 40% of the daemon's CPU time was the kernel switching between
//! its threads (futex and epoll waits), against a few percent for its own work; and through a
//! real gateway (`benches/turn_floor.rs`) every hop from one thread to another also waits for a
//! free core while Hermes' agent thread and the gateway loop keep both busy. A pipe read by the
//! reactor's thread itself takes one wake-up per line instead of two, each way.
//!
//! Only a pipe is read this way: it is ours alone (the shim made it for this child), so
//! setting `O_NONBLOCK` on it changes nothing for another process. A terminal, a file or
//! `/dev/null` (an operator running `serve --stdio` by hand, tests) keeps tokio's own stdin
//! and stdout.

use std::io;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::pipe;

/// The daemon's stdin: the shim's pipe read by the reactor, else tokio's `stdin()`.
pub(crate) enum Input {
    Pipe(pipe::Receiver),
    Std(tokio::io::Stdin),
}

/// The daemon's stdout: the shim's pipe written by the runtime's thread, else tokio's `stdout()`.
pub(crate) enum Output {
    Pipe(pipe::Sender),
    Std(tokio::io::Stdout),
}

/// Stdin as [`Input`]; must run inside the tokio runtime (the reactor registers the pipe).
pub(crate) fn stdin() -> Input {
    match polled_receiver(io::stdin().as_fd()) {
        Some(pipe) => Input::Pipe(pipe),
        None => Input::Std(tokio::io::stdin()),
    }
}

/// Stdout as [`Output`]; must run inside the tokio runtime.
pub(crate) fn stdout() -> Output {
    match polled_sender(io::stdout().as_fd()) {
        Some(pipe) => Output::Pipe(pipe),
        None => Output::Std(tokio::io::stdout()),
    }
}

/// A duplicate of `fd` as a reactor-polled pipe when it is a pipe's read end, else `None`.
/// tokio checks that it is a pipe and sets `O_NONBLOCK` on it: the flag belongs to the pipe end,
/// shared with fd 0, so nothing in this process may read fd 0 with blocking calls afterwards,
/// and nothing does.
fn polled_receiver(fd: std::os::fd::BorrowedFd<'_>) -> Option<pipe::Receiver> {
    pipe::Receiver::from_owned_fd(fd.try_clone_to_owned().ok()?).ok()
}

/// [`polled_receiver`] for a pipe's write end (fd 1; tracing writes to stderr, never fd 1).
fn polled_sender(fd: std::os::fd::BorrowedFd<'_>) -> Option<pipe::Sender> {
    pipe::Sender::from_owned_fd(fd.try_clone_to_owned().ok()?).ok()
}

impl AsyncRead for Input {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Input::Pipe(pipe) => Pin::new(pipe).poll_read(cx, buf),
            Input::Std(stdin) => Pin::new(stdin).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Output {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Output::Pipe(pipe) => Pin::new(pipe).poll_write(cx, data),
            Output::Std(stdout) => Pin::new(stdout).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Output::Pipe(pipe) => Pin::new(pipe).poll_flush(cx),
            Output::Std(stdout) => Pin::new(stdout).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Output::Pipe(pipe) => Pin::new(pipe).poll_shutdown(cx),
            Output::Std(stdout) => Pin::new(stdout).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// A pipe's two ends polled as the daemon's stdin and stdout are.
    fn pipe_pair() -> (Input, Output) {
        let (read, write) = rustix::pipe::pipe().expect("a pipe");
        let reader = polled_receiver(read.as_fd()).expect("a pipe is polled");
        let writer = polled_sender(write.as_fd()).expect("a pipe is polled");
        (Input::Pipe(reader), Output::Pipe(writer))
    }

    #[tokio::test]
    async fn lines_cross_a_polled_pipe_whole_and_in_order_even_beyond_its_capacity() {
        let (input, mut output) = pipe_pair();
        // 4,000 lines of 100 bytes: far beyond a pipe's 64 KiB, so writes meet a full pipe
        // (EAGAIN) and reads an empty one many times.
        let writer = tokio::spawn(async move {
            for i in 0..4000 {
                let line = format!("{i:099}\n");
                output.write_all(line.as_bytes()).await.expect("write");
            }
            output.flush().await.expect("flush");
        });
        let mut lines = BufReader::new(input).lines();
        for i in 0..4000 {
            let line = lines.next_line().await.expect("read").expect("a line");
            assert_eq!(line, format!("{i:099}"));
        }
        writer.await.expect("the writer");
        assert!(
            lines.next_line().await.expect("read").is_none(),
            "EOF once the writer is gone"
        );
    }

    #[tokio::test]
    async fn a_file_is_not_taken_for_a_pipe() {
        let file = tempfile::tempfile().expect("a file");
        assert!(polled_receiver(file.as_fd()).is_none());
        assert!(polled_sender(file.as_fd()).is_none());
        let flags = rustix::fs::fcntl_getfl(&file).expect("flags");
        assert!(
            !flags.contains(rustix::fs::OFlags::NONBLOCK),
            "a file that is not a pipe keeps blocking I/O"
        );
    }
}
