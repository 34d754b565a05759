//! Endpoints and the one-envelope exchange (coms-bridge.md §4.4).
//!
//! Each connection carries one envelope line (terminated by `\n`) from the client and one reply
//! line from the server, then closes. Lines are capped at [`LINE_CAP`] bytes: a server whose
//! buffer passes the cap without a newline replies nack `line too large` and drops the
//! connection; a client reading a longer reply fails with `line too large`. A stale socket file
//! (nothing accepts on it within 250 ms) is replaced at bind; a live one is refused.
//!
//! Our client gives each exchange at most [`EXCHANGE_LIMIT`] (the original has no limit:
//! coms-bridge.md §4.4 DEVIATION).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream};

/// The line cap, 64 KiB.
pub const LINE_CAP: usize = 64 * 1024;

/// How long a client exchange may take in all.
pub const EXCHANGE_LIMIT: Duration = Duration::from_secs(10);

/// How long the stale-socket probe waits for a connection.
pub const PROBE_LIMIT: Duration = Duration::from_millis(250);

/// Why an endpoint could not be bound.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// Another process accepts connections on the path.
    #[error("coms: endpoint already in use ({})", .0.display())]
    InUse(PathBuf),
    /// The socket could not be created.
    #[error("could not listen on {}", path.display())]
    Io {
        /// The endpoint.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Binds a Unix stream socket at `path`, replacing a stale socket file first.
pub async fn bind_endpoint(path: &Path) -> Result<UnixListener, BindError> {
    if std::fs::symlink_metadata(path).is_ok() {
        let probe = tokio::time::timeout(PROBE_LIMIT, UnixStream::connect(path)).await;
        if matches!(probe, Ok(Ok(_))) {
            return Err(BindError::InUse(path.to_owned()));
        }
        let _ = std::fs::remove_file(path);
    }
    UnixListener::bind(path).map_err(|source| BindError::Io {
        path: path.to_owned(),
        source,
    })
}

/// One read line, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// The text before the first `\n` (invalid UTF-8 replaced).
    Text(String),
    /// More than [`LINE_CAP`] bytes arrived without a newline.
    TooLarge,
    /// The peer closed before a newline.
    Closed,
}

/// Reads lines from one connection, keeping what follows a newline for the next call.
#[derive(Debug, Default)]
pub struct LineReader {
    buf: Vec<u8>,
}

impl LineReader {
    /// The next line of `stream`.
    pub async fn next_line<R: AsyncRead + Unpin>(&mut self, stream: &mut R) -> io::Result<Line> {
        let mut searched = 0;
        loop {
            if let Some(at) = self.buf[searched..].iter().position(|&b| b == b'\n') {
                let end = searched + at;
                if end > LINE_CAP {
                    return Ok(Line::TooLarge);
                }
                let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..=end);
                return Ok(Line::Text(line));
            }
            searched = self.buf.len();
            if self.buf.len() > LINE_CAP {
                return Ok(Line::TooLarge);
            }
            let mut chunk = [0u8; 8192];
            let read = stream.read(&mut chunk).await?;
            if read == 0 {
                return Ok(Line::Closed);
            }
            self.buf.extend_from_slice(&chunk[..read]);
        }
    }
}

/// Why a client exchange failed; the texts are what coms clients report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExchangeError {
    /// The peer replied nack with this error text (`nack` when it gave none).
    #[error("{0}")]
    Nack(String),
    /// The peer closed before replying.
    #[error("connection closed before line received")]
    Closed,
    /// The reply passed the line cap.
    #[error("line too large")]
    TooLarge,
    /// The reply was not JSON.
    #[error("invalid json reply")]
    InvalidReply,
    /// The exchange took longer than [`EXCHANGE_LIMIT`].
    #[error("timed out after {}ms", EXCHANGE_LIMIT.as_millis())]
    Timeout,
    /// Connecting, writing or reading failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Sends one envelope to `endpoint` and returns the reply (an ack or a pong); a nack is an error.
pub async fn exchange(endpoint: &Path, envelope: &Value) -> Result<Value, ExchangeError> {
    let attempt = async {
        let mut stream = UnixStream::connect(endpoint).await?;
        let mut line = envelope.to_string();
        line.push('\n');
        stream.write_all(line.as_bytes()).await?;
        let reply = match LineReader::default().next_line(&mut stream).await? {
            Line::Text(text) => text,
            Line::TooLarge => return Err(ExchangeError::TooLarge),
            Line::Closed => return Err(ExchangeError::Closed),
        };
        let _ = stream.shutdown().await;
        let reply: Value = serde_json::from_str(&reply).map_err(|_| ExchangeError::InvalidReply)?;
        if reply.get("type").and_then(Value::as_str) == Some("nack") {
            let error = reply
                .get("error")
                .and_then(Value::as_str)
                .filter(|e| !e.is_empty())
                .unwrap_or("nack");
            return Err(ExchangeError::Nack(error.to_owned()));
        }
        Ok(reply)
    };
    tokio::time::timeout(EXCHANGE_LIMIT, attempt)
        .await
        .unwrap_or(Err(ExchangeError::Timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn stale_socket_files_are_replaced_and_live_ones_refused() {
        runtime().block_on(async {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("s.sock");
            // A socket file nobody listens on any more.
            drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
            assert!(path.exists());
            let listener = bind_endpoint(&path).await.expect("stale file replaced");
            let error = bind_endpoint(&path).await.expect_err("in use");
            assert_eq!(
                error.to_string(),
                format!("coms: endpoint already in use ({})", path.display())
            );
            drop(listener);
            // A plain file in the way is replaced too.
            std::fs::remove_file(&path).expect("unlink");
            std::fs::write(&path, "x").expect("write");
            bind_endpoint(&path).await.expect("replaced");
        });
    }

    #[test]
    fn line_reader_splits_caps_and_reports_close() {
        runtime().block_on(async {
            let mut reader = LineReader::default();
            let mut input: &[u8] = b"one\ntwo\npartial";
            assert_eq!(
                reader.next_line(&mut input).await.expect("read"),
                Line::Text("one".into())
            );
            assert_eq!(
                reader.next_line(&mut input).await.expect("read"),
                Line::Text("two".into())
            );
            assert_eq!(
                reader.next_line(&mut input).await.expect("read"),
                Line::Closed
            );

            let exactly = vec![b'a'; LINE_CAP];
            let mut input = [exactly.as_slice(), b"\n"].concat();
            let mut slice = input.as_slice();
            assert!(matches!(
                LineReader::default().next_line(&mut slice).await.expect("read"),
                Line::Text(t) if t.len() == LINE_CAP
            ));
            input.insert(0, b'a');
            let mut slice = input.as_slice();
            assert_eq!(
                LineReader::default()
                    .next_line(&mut slice)
                    .await
                    .expect("read"),
                Line::TooLarge
            );
        });
    }

    #[test]
    fn exchange_reports_nacks_and_closes() {
        runtime().block_on(async {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("s.sock");
            let listener = bind_endpoint(&path).await.expect("bind");
            let server = tokio::spawn(async move {
                for reply in [
                    Some("{\"type\":\"ack\",\"msg_id\":\"m\"}\n"),
                    Some("{\"type\":\"nack\",\"msg_id\":\"m\",\"error\":\"no\"}\n"),
                    None,
                ] {
                    let (mut stream, _) = listener.accept().await.expect("accept");
                    let line = LineReader::default()
                        .next_line(&mut stream)
                        .await
                        .expect("read");
                    assert_eq!(line, Line::Text("{\"type\":\"ping\"}".into()));
                    if let Some(reply) = reply {
                        stream.write_all(reply.as_bytes()).await.expect("write");
                    }
                }
            });
            let ping = serde_json::json!({"type": "ping"});
            let ack = exchange(&path, &ping).await.expect("ack");
            assert_eq!(ack["type"], "ack");
            assert_eq!(
                exchange(&path, &ping).await.expect_err("nack").to_string(),
                "no"
            );
            assert_eq!(
                exchange(&path, &ping)
                    .await
                    .expect_err("closed")
                    .to_string(),
                "connection closed before line received"
            );
            server.await.expect("server");
            let missing = dir.path().join("missing.sock");
            assert!(matches!(
                exchange(&missing, &ping).await,
                Err(ExchangeError::Io(_))
            ));
        });
    }
}
