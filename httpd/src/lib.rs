//! `httpd`: how every HTTP API of the region is served (identity, compute,
//! image, placement and the console proxies), with the same timeouts and
//! limits everywhere.
//!
//! `axum::serve` sets no timer on hyper's connections, so a client that
//! sends half a request head holds its connection (and its task) forever,
//! and nothing bounds how many connections or requests a server takes. This
//! crate's accept loop ([`Server::serve`]) serves each connection with
//! hyper's HTTP/1.1 server and:
//! - **a header timeout** ([`Limits::header_timeout_ms`]): the whole request
//!   head must arrive within it. hyper starts that clock whenever the
//!   connection is ready for a head, so the same limit closes a keep-alive
//!   connection left idle between requests (the idle timeout);
//! - **a body timeout** ([`Limits::body_timeout_ms`]): the request body must
//!   have arrived within it from the end of the head; after that, reading
//!   it fails (the handler answers as for any broken body) and the
//!   connection closes;
//! - **a connection limit** ([`Limits::max_connections`]): when it is
//!   reached, a new connection first takes the place of the connection
//!   that has been waiting longest for a request head (half-sent requests
//!   and idle keep-alive connections, never one with a request in
//!   progress); when every connection is in a request, the new one is
//!   answered `503` with `Retry-After` and closed;
//! - **a concurrency limit** ([`Limits::max_concurrent_requests`]): a
//!   request beyond it is answered `503` with `Retry-After` at once, before
//!   any handler runs. A request holds its place until its response body
//!   has been sent (a streamed image download counts while it streams).
//!
//! A handler that has started is never cancelled by these limits: handlers
//! are bounded by their own timeouts (every query, RPC and publish has
//! one), and cancelling one midway could leave half-written state. Why not
//! `tower::limit` and `tower_http::timeout`: `ConcurrencyLimit` queues
//! instead of refusing and lets go at the end of the response future, not
//! of its body; `TimeoutLayer` cancels handlers; and neither can see a
//! connection that has not sent a whole head.
//!
//! Each API gives the body of its own `503` ([`Server::new`]'s `refuse`),
//! in its own OpenStack error format.
//!
//! **TLS** ([`Limits::tls_cert_file`], [`Limits::tls_key_file`]): the
//! server speaks only https, TLS 1.2 or later, through the system's
//! OpenSSL; the handshake runs in the connection's task within the header
//! timeout. A connection refused for a full TLS server is closed without
//! an answer (a plain-text `503` would be noise to a TLS client).
//!
//! May depend on: tokio, hyper, hyper-util, axum, serde, tracing,
//! native-tls and openssl. Must not depend on any service crate.

mod body;
mod conns;
mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

pub use body::BodyTimeout;
use conns::{Conn, Conns, Counted};
pub use tls::TlsError;

/// A server's timeouts, limits and TLS (`[<service>.http]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Longest wait for a whole request head, in ms, counted from when the
    /// connection is ready for one: a new connection, or a keep-alive
    /// connection after its last response (then it is the idle timeout).
    pub header_timeout_ms: u64,
    /// Longest wait for a whole request body, in ms, from the end of its
    /// head.
    pub body_timeout_ms: u64,
    /// Most connections open at once (requests in progress, idle
    /// keep-alive connections, connections still sending a head, and
    /// upgraded ones such as console websockets).
    pub max_connections: usize,
    /// Most requests in progress at once.
    pub max_concurrent_requests: usize,
    /// The `Retry-After` of a `503` for a full server, in seconds.
    pub retry_after_secs: u64,
    /// Serve https with this PEM certificate chain (leaf first); needs
    /// [`Self::tls_key_file`].
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// The certificate's PKCS#8 PEM private key, readable by its owner
    /// only (a key others may read is refused).
    pub tls_key_file: Option<std::path::PathBuf>,
}

impl Limits {
    /// `https` when these settings name a certificate (the server then
    /// speaks TLS only), else `http`: the scheme of the server's URLs.
    pub fn scheme(&self) -> &'static str {
        if self.tls_cert_file.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout_ms: 20_000,
            body_timeout_ms: 60_000,
            max_connections: 1024,
            max_concurrent_requests: 512,
            retry_after_secs: 1,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

/// Connections a full server answers `503` at once (each for at most
/// [`REFUSAL_TIME`]); beyond them a new connection is closed unanswered.
const MAX_REFUSING: usize = 256;

/// Longest time spent answering a connection refused for a full server.
const REFUSAL_TIME: Duration = Duration::from_secs(3);

/// How long the accept loop waits for an evicted connection's place.
const EVICTION_WAIT: Duration = Duration::from_millis(500);

/// Builds an API's `503` body from a message (the server sets the status,
/// `Retry-After` and, for a refused connection, `Connection: close`).
pub type Refuse = Arc<dyn Fn(&str) -> Response<Body> + Send + Sync>;

/// Counts a server has kept since it started (for tests and metrics).
#[derive(Debug, Default)]
pub struct Stats {
    /// Connections accepted and served.
    pub accepted: std::sync::atomic::AtomicU64,
    /// Connections closed to make room for a new one.
    pub evicted: std::sync::atomic::AtomicU64,
    /// Connections answered `503` (or closed) because every place was in a
    /// request.
    pub refused_connections: std::sync::atomic::AtomicU64,
    /// Requests answered `503` for the concurrency limit.
    pub refused_requests: std::sync::atomic::AtomicU64,
}

/// One API's server: its limits, its `503`, its live connections.
pub struct Server {
    name: &'static str,
    limits: Limits,
    refuse: Refuse,
    conns: Conns,
    connections: Arc<Semaphore>,
    requests: Arc<Semaphore>,
    refusing: Arc<Semaphore>,
    stats: Arc<Stats>,
    tls: Option<tokio_native_tls::TlsAcceptor>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.name)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A server named `name` (in logs) with `limits`, whose `503` bodies
    /// `refuse` writes. A limit of 0 is taken as 1. Fails only on its TLS
    /// files.
    pub fn new(
        name: &'static str,
        limits: Limits,
        refuse: impl Fn(&str) -> Response<Body> + Send + Sync + 'static,
    ) -> Result<Arc<Self>, TlsError> {
        let tls = tls::acceptor(
            limits.tls_cert_file.as_deref(),
            limits.tls_key_file.as_deref(),
        )?;
        Ok(Arc::new(Self {
            name,
            connections: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            requests: Arc::new(Semaphore::new(limits.max_concurrent_requests.max(1))),
            refusing: Arc::new(Semaphore::new(MAX_REFUSING)),
            limits,
            refuse: Arc::new(refuse),
            conns: Conns::default(),
            stats: Arc::default(),
            tls,
        }))
    }

    /// `https` when the server speaks TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        self.limits.scheme()
    }

    /// What the server has counted.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.limits.max_connections.max(1) - self.connections.available_permits()
    }

    /// Serves `router` on `listener` until the task is dropped. Every
    /// request carries its peer as `ConnectInfo<SocketAddr>`.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, router: Router) {
        self.serve_wrapped(listener, router, |tcp| tcp).await
    }

    /// [`Self::serve`] with each accepted connection wrapped by `wrap`
    /// before hyper reads it.
    pub async fn serve_wrapped<Io, W>(
        self: Arc<Self>,
        listener: TcpListener,
        router: Router,
        wrap: W,
    ) where
        Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        W: Fn(TcpStream) -> Io + Send + 'static,
    {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors, or a connection reset
                    // before it was taken: wait a little, go on.
                    tracing::warn!(server = self.name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            match self.place().await {
                Some(permit) => {
                    self.stats
                        .accepted
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let io = Counted::new(wrap(tcp), permit);
                    match &self.tls {
                        None => {
                            tokio::spawn(self.clone().connection(io, peer, router.clone()));
                        }
                        Some(acceptor) => {
                            let (server, acceptor) = (self.clone(), acceptor.clone());
                            tokio::spawn(server.handshake(acceptor, io, peer, router.clone()));
                        }
                    }
                }
                None if self.tls.is_some() => {
                    self.stats
                        .refused_connections
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                None => self.refuse_connection(tcp),
            }
        }
    }

    /// A place for a new connection: a free one, else the place of the
    /// connection waiting longest for a head; `None` when every place is
    /// in a request.
    async fn place(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Ok(p) = self.connections.clone().try_acquire_owned() {
            return Some(p);
        }
        if !self.conns.evict_longest_waiting() {
            return None;
        }
        self.stats
            .evicted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::time::timeout(EVICTION_WAIT, self.connections.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
    }

    fn http1(&self) -> hyper::server::conn::http1::Builder {
        let mut b = hyper::server::conn::http1::Builder::new();
        b.timer(TokioTimer::new())
            .header_read_timeout(Duration::from_millis(self.limits.header_timeout_ms.max(1)));
        b
    }

    /// The TLS handshake of a new connection (within the header timeout),
    /// then the connection.
    async fn handshake<Io>(
        self: Arc<Self>,
        acceptor: tokio_native_tls::TlsAcceptor,
        io: Io,
        peer: SocketAddr,
        router: Router,
    ) where
        Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let limit = Duration::from_millis(self.limits.header_timeout_ms.max(1));
        match tokio::time::timeout(limit, acceptor.accept(io)).await {
            Ok(Ok(tls)) => self.connection(tls, peer, router).await,
            Ok(Err(e)) => {
                tracing::debug!(server = self.name, %peer, error = %e, "TLS handshake failed");
            }
            Err(_) => {
                tracing::debug!(server = self.name, %peer, "TLS handshake timed out");
            }
        }
    }

    /// Serves one connection until it closes, times out or is evicted.
    async fn connection<Io>(self: Arc<Self>, io: Io, peer: SocketAddr, router: Router)
    where
        Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let conn = self.conns.open();
        let server = self.clone();
        let c = conn.clone();
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            server.request(&c, peer, &router, req)
        });
        let served = self
            .http1()
            .serve_connection(TokioIo::new(io), svc)
            .with_upgrades();
        tokio::select! {
            r = served => {
                if let Err(e) = r {
                    tracing::debug!(server = self.name, %peer, error = %e, "connection ended");
                }
            }
            () = conn.evicted() => {
                tracing::debug!(server = self.name, %peer, "connection closed for a new one");
            }
        }
        self.conns.close(&conn);
    }

    /// One request: refused when the connection was evicted or the server
    /// is full, else handed to `router` with a deadline on its body.
    fn request(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        peer: SocketAddr,
        router: &Router,
        req: Request<Incoming>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>> {
        let Some(busy) = conn.enter() else {
            // Evicted between its head and this call: the connection is
            // being closed, so is this exchange.
            return Box::pin(std::future::ready(Ok(self.refusal(
                "the connection is being closed; send the request again",
                true,
            ))));
        };
        let Ok(permit) = self.requests.clone().try_acquire_owned() else {
            self.stats
                .refused_requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let msg = format!(
                "the {} API is handling its limit of {} requests at once; try again in {} s",
                self.name, self.limits.max_concurrent_requests, self.limits.retry_after_secs
            );
            return Box::pin(std::future::ready(Ok(self.refusal(&msg, false))));
        };
        let limit = Duration::from_millis(self.limits.body_timeout_ms.max(1));
        let mut req = req.map(|b| Body::new(body::Deadline::new(b, limit)));
        req.extensions_mut().insert(ConnectInfo(peer));
        let mut router = router.clone();
        Box::pin(async move {
            let resp = match tower_service::Service::call(&mut router, req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            // The request keeps its places until its body has been sent.
            Ok(resp.map(|b| {
                Body::new(b.map_frame(move |f| {
                    let _held = (&busy, &permit);
                    f
                }))
            }))
        })
    }

    /// The API's `503` for `msg`, with `Retry-After`, closing the
    /// connection when `close`.
    fn refusal(&self, msg: &str, close: bool) -> Response<Body> {
        let mut resp = (self.refuse)(msg);
        *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let h = resp.headers_mut();
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from(self.limits.retry_after_secs),
        );
        if close {
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }

    /// Answers a connection that found every place in a request: `503`
    /// to its first request, then closed; closed at once when too many
    /// are being answered so already.
    fn refuse_connection(self: &Arc<Self>, tcp: TcpStream) {
        self.stats
            .refused_connections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Ok(permit) = self.refusing.clone().try_acquire_owned() else {
            return;
        };
        let msg = format!(
            "the {} API holds its limit of {} connections, each in a request; try again in {} s",
            self.name, self.limits.max_connections, self.limits.retry_after_secs
        );
        let (head, body) = self.refusal(&msg, true).into_parts();
        let (status, headers) = (head.status, head.headers);
        let body = body.collect();
        let mut b = self.http1();
        b.keep_alive(false).header_read_timeout(
            REFUSAL_TIME.min(Duration::from_millis(self.limits.header_timeout_ms.max(1))),
        );
        tokio::spawn(async move {
            let _permit = permit;
            let Ok(bytes) = body.await.map(|c| c.to_bytes()) else {
                return;
            };
            let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                let mut resp = Response::new(Body::from(bytes.clone()));
                *resp.status_mut() = status;
                *resp.headers_mut() = headers.clone();
                std::future::ready(Ok::<_, Infallible>(resp))
            });
            let _ = tokio::time::timeout(REFUSAL_TIME, b.serve_connection(TokioIo::new(tcp), svc))
                .await;
        });
    }
}
