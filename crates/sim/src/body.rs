//! The response body type: a whole buffer, or a channel of chunks for SSE streams and for
//! faults that abort a connection mid-body (an `Err` chunk makes hyper drop the connection).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// Why a streamed body ended abnormally (aborts the connection).
#[derive(Debug, thiserror::Error)]
#[error("connection aborted by the simulator")]
pub struct Aborted;

/// A response body.
#[derive(Debug)]
pub enum SimBody {
    /// A complete body.
    Full(Option<Bytes>),
    /// Chunks from a channel; `Err` aborts.
    Channel(mpsc::Receiver<Result<Bytes, Aborted>>),
}

impl SimBody {
    /// A complete body.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        Self::Full(Some(bytes.into()))
    }

    /// A streamed body and its sender (capacity 64 chunks, bounded).
    pub fn channel() -> (mpsc::Sender<Result<Bytes, Aborted>>, Self) {
        let (tx, rx) = mpsc::channel(64);
        (tx, Self::Channel(rx))
    }
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = Aborted;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Aborted>>> {
        match self.get_mut() {
            Self::Full(slot) => Poll::Ready(slot.take().map(|b| Ok(Frame::data(b)))),
            Self::Channel(rx) => match rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(b))) => Poll::Ready(Some(Ok(Frame::data(b)))),
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Self::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Self::Full(None) => SizeHint::with_exact(0),
            Self::Channel(_) => SizeHint::default(),
        }
    }
}
