//! Response bodies: a whole JSON document, or the newline-delimited events
//! of a watch, which end on `timeoutSeconds`, on [`crate::ApiServer::break_watches`],
//! or when the client drops the body.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval, MissedTickBehavior, Sleep};

use crate::store::Shared;

/// The body of every response.
pub struct ResponseBody {
    inner: Inner,
}

enum Inner {
    Full(Option<Bytes>),
    Watch(Box<WatchStream>),
}

impl fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Full(b) => f.debug_tuple("ResponseBody::Full").field(b).finish(),
            Inner::Watch(w) => f.debug_tuple("ResponseBody::Watch").field(&w.id).finish(),
        }
    }
}

impl ResponseBody {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        Self {
            inner: Inner::Full(Some(bytes.into())),
        }
    }

    pub(crate) fn watch(stream: WatchStream) -> Self {
        Self {
            inner: Inner::Watch(Box::new(stream)),
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.get_mut().inner {
            Inner::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Inner::Watch(w) => w.poll_line(cx).map(|line| line.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.inner, Inner::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Inner::Watch(_) => SizeHint::default(),
        }
    }
}

/// About how much of a watch's queued lines one chunk of its body carries.
const CHUNK_BYTES: usize = 64 * 1024;

/// An open watch: the lines the store queues for it, plus its own bookmark
/// ticks and deadline (timers only exist inside a Tokio runtime).
pub(crate) struct WatchStream {
    id: u64,
    rx: mpsc::UnboundedReceiver<Bytes>,
    shared: Arc<Shared>,
    bookmarks: Option<Interval>,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl WatchStream {
    pub fn new(
        id: u64,
        rx: mpsc::UnboundedReceiver<Bytes>,
        shared: Arc<Shared>,
        bookmark_every: Option<Duration>,
        timeout: Option<Duration>,
    ) -> Self {
        let timers = tokio::runtime::Handle::try_current().is_ok();
        let bookmarks = bookmark_every
            .filter(|every| timers && !every.is_zero())
            .map(|every| {
                let first = Instant::now()
                    .checked_add(every)
                    .unwrap_or_else(Instant::now);
                let mut interval = tokio::time::interval_at(first, every);
                interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
                interval
            });
        let deadline = timeout
            .filter(|_| timers)
            .map(|t| Box::pin(tokio::time::sleep(t)));
        Self {
            id,
            rx,
            shared,
            bookmarks,
            deadline,
        }
    }

    /// `line` and the lines queued behind it, as one chunk of at most about [`CHUNK_BYTES`]:
    /// a burst of writes reaches the client in a few writes, not one per event.
    fn with_queued(&mut self, line: Bytes) -> Bytes {
        let Ok(mut next) = self.rx.try_recv() else {
            return line;
        };
        let mut chunk = BytesMut::with_capacity(line.len().saturating_add(next.len()));
        chunk.extend_from_slice(&line);
        loop {
            chunk.extend_from_slice(&next);
            if chunk.len() >= CHUNK_BYTES {
                break;
            }
            match self.rx.try_recv() {
                Ok(more) => next = more,
                Err(_) => break,
            }
        }
        chunk.freeze()
    }

    fn poll_line(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(deadline) = &mut self.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            self.rx.close();
            return Poll::Ready(None);
        }
        loop {
            if let Poll::Ready(line) = self.rx.poll_recv(cx) {
                return Poll::Ready(line.map(|line| self.with_queued(line)));
            }
            let tick = self
                .bookmarks
                .as_mut()
                .is_some_and(|interval| interval.poll_tick(cx).is_ready());
            if !tick {
                return Poll::Pending;
            }
            self.shared.lock().bookmark(self.id);
        }
    }
}
