//! The live connections of a server, for the connection limit: which ones
//! are in a request, and which has waited longest for a head (the one a
//! new connection replaces when the server is full).

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit};

/// Set in [`Conn::state`] once the connection is evicted.
const EVICTED: usize = 1 << (usize::BITS - 1);

/// One connection.
#[derive(Debug)]
pub(crate) struct Conn {
    id: u64,
    /// Requests in progress, or [`EVICTED`].
    state: AtomicUsize,
    /// When it last had no request in progress (ms since the table's
    /// epoch).
    waiting_since_ms: AtomicU64,
    evict: Notify,
    epoch: Instant,
}

impl Conn {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Marks a request in progress until the guard drops; `None` once the
    /// connection is evicted (no handler may start on it then).
    pub(crate) fn enter(self: &Arc<Self>) -> Option<Busy> {
        self.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & EVICTED == 0).then_some(s + 1)
            })
            .ok()
            .map(|_| Busy(self.clone()))
    }

    /// Resolves once the connection is evicted.
    pub(crate) async fn evicted(&self) {
        self.evict.notified().await;
    }

    /// Evicts it if no request is in progress.
    fn try_evict(&self) -> bool {
        let done = self
            .state
            .compare_exchange(0, EVICTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if done {
            // `notify_one` keeps the wake-up for a waiter still to come.
            self.evict.notify_one();
        }
        done
    }
}

/// A request in progress on a connection.
#[derive(Debug)]
pub(crate) struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        let c = &self.0;
        c.waiting_since_ms.store(c.now_ms(), Ordering::Release);
        c.state.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The live connections.
#[derive(Debug)]
pub(crate) struct Conns {
    table: Mutex<HashMap<u64, Arc<Conn>>>,
    next: AtomicU64,
    epoch: Instant,
}

impl Default for Conns {
    fn default() -> Self {
        Self {
            table: Mutex::default(),
            next: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl Conns {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        // The table stays consistent whatever panicked while it was held.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a new connection.
    pub(crate) fn open(&self) -> Arc<Conn> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            id,
            state: AtomicUsize::new(0),
            waiting_since_ms: AtomicU64::new(0),
            evict: Notify::new(),
            epoch: self.epoch,
        });
        conn.waiting_since_ms
            .store(conn.now_ms(), Ordering::Release);
        self.table().insert(id, conn.clone());
        conn
    }

    /// Forgets a closed connection.
    pub(crate) fn close(&self, conn: &Conn) {
        self.table().remove(&conn.id);
    }

    /// Evicts the connection that has waited longest for a head (none in
    /// a request); false when every connection is in one.
    pub(crate) fn evict_longest_waiting(&self) -> bool {
        let mut table = self.table();
        loop {
            let oldest = table
                .values()
                .filter(|c| c.state.load(Ordering::Acquire) == 0)
                .min_by_key(|c| c.waiting_since_ms.load(Ordering::Acquire))
                .cloned();
            let Some(c) = oldest else {
                return false;
            };
            // It may have started a request since it was looked at.
            if c.try_evict() {
                table.remove(&c.id);
                return true;
            }
        }
    }
}

/// A connection's stream holding its place in the connection limit: the
/// place is freed when the stream is dropped, which for an upgraded
/// connection (a console's websocket) is when the upgrade ends.
#[derive(Debug)]
pub(crate) struct Counted<S> {
    io: S,
    _place: OwnedSemaphorePermit,
}

impl<S> Counted<S> {
    pub(crate) fn new(io: S, place: OwnedSemaphorePermit) -> Self {
        Self { io, _place: place }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_waiting_idle_connection_is_evicted_never_a_busy_one() {
        let conns = Conns::default();
        let a = conns.open();
        std::thread::sleep(std::time::Duration::from_millis(3));
        let b = conns.open();
        std::thread::sleep(std::time::Duration::from_millis(3));
        let c = conns.open();
        let busy = a.enter().expect("a is not evicted");
        assert!(conns.evict_longest_waiting());
        assert!(b.enter().is_none(), "b waited longest of the idle ones");
        assert!(c.enter().is_some());
        drop(busy);
        // a is idle again, and now waited less than c.
        let busy_c = c.enter().unwrap();
        assert!(conns.evict_longest_waiting());
        assert!(a.enter().is_none());
        assert!(
            !conns.evict_longest_waiting(),
            "only c is left, in a request"
        );
        drop(busy_c);
        assert!(conns.evict_longest_waiting());
    }
}
