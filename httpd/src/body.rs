//! A request body with a deadline.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

/// The error of a body that did not arrive in time.
#[derive(Debug)]
pub struct BodyTimeout(pub Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {} s",
            self.0.as_secs_f64()
        )
    }
}

impl std::error::Error for BodyTimeout {}

/// `Incoming` that fails with [`BodyTimeout`] once `limit` has passed since
/// it was made (the end of the request head).
pub(crate) struct Deadline {
    inner: Incoming,
    deadline: Instant,
    limit: Duration,
    /// Made at the first wait only: a body that is already complete (most
    /// are) never needs a timer.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Deadline {
    pub(crate) fn new(inner: Incoming, limit: Duration) -> Self {
        Self {
            inner,
            deadline: Instant::now() + limit,
            limit,
            sleep: None,
        }
    }
}

impl Body for Deadline {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout(this.limit))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
