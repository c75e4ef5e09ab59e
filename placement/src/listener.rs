//! The API's listener: TCP connections whose request heads are looked at
//! once before hyper parses them, for the one client mistake that hyper
//! answers by itself, before any handler runs.
//!
//! A request whose `Content-Length` is not an integer is refused by hyper's
//! parser with a bare `400` and no body. Upstream Placement answers it with
//! its usual error body, "content-length header must be an integer". So
//! [`Guarded`] reads each request head in full before handing it on; when a
//! `Content-Length` value is not a plain decimal number, it renames that
//! header to [`INVALID_CONTENT_LENGTH`], adds `Connection: close`, and hands
//! on nothing after that head (the body's length is unknown, so nothing
//! after it can be framed: RFC 9112 §6.3 has the server answer 400 and
//! close). The request frame (`api::frame`) answers a request carrying
//! [`INVALID_CONTENT_LENGTH`] with that 400.
//!
//! To find the next head on a keep-alive connection, [`Guarded`] skips each
//! request's body by its `Content-Length`. A head it cannot frame or does not
//! understand (a `Transfer-Encoding`, an upgrade, one httparse rejects or
//! one larger than [`MAX_HEAD`]) ends the inspection for the rest of that
//! connection: from there on bytes go to hyper untouched, and hyper's own
//! answers apply. Nothing else in a head is changed.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// The header a `Content-Length` that is not an integer is renamed to.
pub const INVALID_CONTENT_LENGTH: &str = "x-placement-invalid-content-length";

/// Largest request head inspected; a larger one is passed to hyper as it is.
pub const MAX_HEAD: usize = 64 * 1024;

/// Most headers in an inspected head (hyper's default limit).
const MAX_HEADERS: usize = 100;

/// A TCP listener whose connections are [`Guarded`].
#[derive(Debug)]
pub struct Listener(TcpListener);

impl Listener {
    /// Wraps a bound listener.
    pub fn new(inner: TcpListener) -> Self {
        Self(inner)
    }
}

impl axum::serve::Listener for Listener {
    type Io = Guarded<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.0).await;
        (Guarded::new(io), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// Where a connection's input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a request head.
    Head,
    /// Inside a body with this many bytes still to come.
    Body(u64),
    /// No more inspection: bytes pass untouched.
    Through,
    /// A head was rewritten for an invalid `Content-Length`: nothing after it
    /// is handed on (hyper answers it and closes the connection).
    Ended,
}

/// What to do with a complete request head.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it on unchanged; a body of this many bytes follows.
    Body(u64),
    /// Hand it on unchanged and stop inspecting this connection.
    Through,
    /// Hand on this rewritten head instead, and nothing after it.
    Rewritten(Vec<u8>),
}

/// A request head at the start of `buf`: `None` while incomplete, else its
/// length and what to do with it.
pub fn classify(buf: &[u8]) -> Option<(usize, Verdict)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Partial) => return None,
        Ok(httparse::Status::Complete(len)) => len,
        // hyper answers what it cannot parse; a head httparse rejects
        // ends the inspection but is never held back.
        Err(_) => return Some((buf.len(), Verdict::Through)),
    };
    if req.method == Some("CONNECT") {
        return Some((len, Verdict::Through));
    }
    let mut length: Option<u64> = None;
    let mut invalid = false;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding")
            || h.name.eq_ignore_ascii_case("upgrade")
        {
            return Some((len, Verdict::Through));
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            match (decimal(h.value), length) {
                (Some(n), None) => length = Some(n),
                (Some(n), Some(seen)) if n == seen => {}
                _ => invalid = true,
            }
        }
    }
    if !invalid {
        return Some((len, Verdict::Body(length.unwrap_or(0))));
    }
    let mut head = Vec::with_capacity(len + 64);
    head.extend_from_slice(req.method.unwrap_or("GET").as_bytes());
    head.push(b' ');
    head.extend_from_slice(req.path.unwrap_or("/").as_bytes());
    head.extend_from_slice(if req.version == Some(0) {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
    for h in req.headers.iter() {
        let name = if h.name.eq_ignore_ascii_case("content-length") {
            INVALID_CONTENT_LENGTH
        } else {
            h.name
        };
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(h.value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"connection: close\r\n\r\n");
    Some((len, Verdict::Rewritten(head)))
}

/// A `Content-Length` value as hyper accepts it: decimal digits only
/// (around optional whitespace), fitting in a `u64`.
fn decimal(value: &[u8]) -> Option<u64> {
    let v = value.trim_ascii();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// A connection whose request heads are inspected before hyper reads them
/// (see the module documentation). Writes pass through.
#[derive(Debug)]
pub struct Guarded<S> {
    io: S,
    state: State,
    /// Read from `io`, not yet classified.
    input: Vec<u8>,
    /// Classified, not yet handed on; `out[out_pos..]` is pending.
    out: Vec<u8>,
    out_pos: usize,
}

impl<S> Guarded<S> {
    /// Wraps a connection.
    pub fn new(io: S) -> Self {
        Self {
            io,
            state: State::Head,
            input: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
        }
    }

    /// Moves the first `n` bytes of `input` to `out`.
    fn pass(&mut self, n: usize) {
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
        self.out.extend(self.input.drain(..n));
    }

    /// Classifies what `input` holds, as far as it goes. Returns whether
    /// more input is needed to go on.
    fn advance(&mut self) -> bool {
        loop {
            match self.state {
                State::Through => {
                    let n = self.input.len();
                    self.pass(n);
                    return true;
                }
                State::Ended => {
                    self.input.clear();
                    return false;
                }
                _ if self.input.is_empty() => return true,
                State::Body(left) => {
                    let n =
                        usize::try_from(left).map_or(self.input.len(), |l| l.min(self.input.len()));
                    self.pass(n);
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::Head
                    } else {
                        State::Body(left)
                    };
                }
                State::Head => match classify(&self.input) {
                    None if self.input.len() >= MAX_HEAD => self.state = State::Through,
                    None => return true,
                    Some((len, Verdict::Body(body))) => {
                        self.pass(len);
                        self.state = if body == 0 {
                            State::Head
                        } else {
                            State::Body(body)
                        };
                    }
                    Some((len, Verdict::Through)) => {
                        self.pass(len);
                        self.state = State::Through;
                    }
                    Some((_, Verdict::Rewritten(head))) => {
                        if self.out_pos == self.out.len() {
                            self.out.clear();
                            self.out_pos = 0;
                        }
                        self.out.extend_from_slice(&head);
                        self.input.clear();
                        self.state = State::Ended;
                    }
                },
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.out_pos < this.out.len() {
                let n = (this.out.len() - this.out_pos).min(buf.remaining());
                buf.put_slice(&this.out[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                return Poll::Ready(Ok(()));
            }
            if this.state == State::Through && this.input.is_empty() {
                return Pin::new(&mut this.io).poll_read(cx, buf);
            }
            let wants_input = this.advance();
            if this.out_pos < this.out.len() {
                continue;
            }
            if !wants_input {
                // Ended: hyper answers the rewritten head and closes the
                // connection (the head asks it to); nothing more to read.
                return Poll::Pending;
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // End of input: hand on an incomplete head as it is (hyper
                // reports it), then the end.
                let n = this.input.len();
                if n == 0 {
                    return Poll::Ready(Ok(()));
                }
                this.pass(n);
                this.state = State::Through;
                continue;
            }
            this.input.extend_from_slice(read.filled());
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
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
    fn heads_are_framed_by_their_content_length() {
        assert_eq!(classify(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
        assert_eq!(
            classify(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nrest"),
            Some((27, Verdict::Body(0)))
        );
        assert_eq!(
            classify(b"POST /a HTTP/1.1\r\ncontent-length: 12\r\n\r\n"),
            Some((40, Verdict::Body(12)))
        );
        assert_eq!(
            classify(b"POST /a HTTP/1.1\r\nContent-Length:  7 \r\nContent-Length: 7\r\n\r\n")
                .map(|v| v.1),
            Some(Verdict::Body(7))
        );
        assert_eq!(
            classify(b"POST /a HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n").map(|v| v.1),
            Some(Verdict::Through)
        );
        assert_eq!(
            classify(b"\x01\x02 nonsense\r\n\r\n").map(|v| v.1),
            Some(Verdict::Through)
        );
    }

    #[test]
    fn an_invalid_content_length_is_renamed_and_closes() {
        for value in ["hi mom", "-1", "+4", "1, 1", "", "99999999999999999999999"] {
            let head =
                format!("POST /rp HTTP/1.1\r\nHost: x\r\nContent-Length: {value}\r\n\r\nbody");
            let Some((len, Verdict::Rewritten(new))) = classify(head.as_bytes()) else {
                panic!("{value:?} not rewritten");
            };
            assert_eq!(len, head.len() - 4);
            assert_eq!(
                String::from_utf8(new).unwrap(),
                format!(
                    "POST /rp HTTP/1.1\r\nHost: x\r\n{INVALID_CONTENT_LENGTH}: {}\r\nconnection: close\r\n\r\n",
                    value.trim()
                )
            );
        }
        // Two different lengths are as bad.
        let two = b"POST / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n";
        assert!(matches!(classify(two), Some((_, Verdict::Rewritten(_)))));
    }
}
