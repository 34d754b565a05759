//! The shim's side of the process: one bounded JSON-lines reader on stdin
//! (an oversized line is reported, never buffered whole) and one writer on
//! stdout that writes lines in the order the loop sends them.

use canon_host::protocol::MAX_FRAME_BYTES;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// One line from the reader task.
pub(crate) enum Line {
    Frame(Vec<u8>),
    TooLarge,
}

pub(crate) async fn read_lines<R: AsyncBufRead + Unpin>(mut input: R, tx: mpsc::Sender<Line>) {
    let mut buf = Vec::new();
    loop {
        match read_bounded_line(&mut input, &mut buf).await {
            Ok(None) => return,
            Ok(Some(too_large)) => {
                let line = if too_large {
                    Line::TooLarge
                } else {
                    Line::Frame(std::mem::take(&mut buf))
                };
                if tx.send(line).await.is_err() {
                    return;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "reading stdin failed");
                return;
            }
        }
    }
}

/// Reads one LF-terminated line of at most [`MAX_FRAME_BYTES`]; a longer
/// line is consumed and reported as too large. `None` at EOF.
pub(crate) async fn read_bounded_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut too_large = false;
    let mut any = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(any.then_some(too_large));
        }
        any = true;
        let (take, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if !too_large {
            if buf.len() + take > MAX_FRAME_BYTES {
                too_large = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&available[..take]);
            }
        }
        input.consume(take);
        if done {
            return Ok(Some(too_large));
        }
    }
}

pub(crate) async fn write_lines<W: AsyncWrite + Unpin>(
    mut output: W,
    mut rx: mpsc::Receiver<String>,
) {
    while let Some(mut line) = rx.recv().await {
        line.push('\n');
        let written = async {
            output.write_all(line.as_bytes()).await?;
            output.flush().await
        };
        if let Err(error) = written.await {
            tracing::warn!(%error, "writing stdout failed; dropping further frames");
            while rx.recv().await.is_some() {}
            return;
        }
    }
    let _ = output.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounded_reader_splits_lines_and_flags_oversized_ones() {
        let mut big = vec![b'x'; MAX_FRAME_BYTES + 10];
        big.push(b'\n');
        let mut input = Vec::new();
        input.extend_from_slice(b"{\"a\":1}\n");
        input.extend_from_slice(&big);
        input.extend_from_slice(b"tail");
        let mut reader = tokio::io::BufReader::new(&input[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read_bounded_line(&mut reader, &mut buf).await.ok(),
            Some(Some(false))
        );
        assert_eq!(buf, b"{\"a\":1}\n");
        assert_eq!(
            read_bounded_line(&mut reader, &mut buf).await.ok(),
            Some(Some(true))
        );
        assert_eq!(
            read_bounded_line(&mut reader, &mut buf).await.ok(),
            Some(Some(false))
        );
        assert_eq!(buf, b"tail");
        assert_eq!(
            read_bounded_line(&mut reader, &mut buf).await.ok(),
            Some(None)
        );
    }
}
