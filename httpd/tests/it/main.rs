//! The server's timeouts and limits against real sockets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Response, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use httpd::{Limits, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

mod tls;

/// Bounds every wait of these tests (a hang guard, not a measurement).
const GUARD: Duration = Duration::from_secs(30);

fn refuse(msg: &str) -> Response<Body> {
    let body = serde_json::json!({"overLimit": {"code": 503, "message": msg}});
    Response::new(Body::from(body.to_string()))
}

/// Routes: `/` answers at once; `/hold` waits for a permit of `gate`;
/// `/echo` returns its body; `/stream` streams until `gate` gives a permit.
fn router(gate: Arc<Semaphore>) -> Router {
    let g = gate.clone();
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route(
            "/hold",
            get(move || async move {
                g.acquire().await.unwrap().forget();
                "held"
            }),
        )
        .route("/echo", post(|b: Bytes| async move { b }))
        .route(
            "/stream",
            get(move || async move {
                let gate = gate.clone();
                let s = futures_stream(gate);
                Body::from_stream(s)
            }),
        )
}

/// One chunk now, another once `gate` gives a permit.
fn futures_stream(
    gate: Arc<Semaphore>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::spawn(async move {
        let _ = tx.send(Ok(Bytes::from_static(b"first "))).await;
        gate.acquire().await.unwrap().forget();
        let _ = tx.send(Ok(Bytes::from_static(b"last"))).await;
    });
    tokio_stream_of(rx)
}

fn tokio_stream_of<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

async fn start(limits: Limits) -> (SocketAddr, Arc<Server>, Arc<Semaphore>) {
    let gate = Arc::new(Semaphore::new(0));
    let (addr, server) = start_with(limits, router(gate.clone())).await;
    (addr, server, gate)
}

async fn start_with(limits: Limits, app: Router) -> (SocketAddr, Arc<Server>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let server = Server::new("test", limits, refuse).unwrap();
    tokio::spawn(server.clone().serve(l, app));
    (addr, server)
}

/// Sends `raw` on a new connection and reads until the server closes it.
async fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(GUARD, s.read_to_end(&mut out))
        .await
        .expect("the server closes the connection");
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the server closed `s` (a read gives end of input or a reset).
async fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    matches!(
        tokio::time::timeout(GUARD, s.read(&mut b)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_half_sent_requests_are_closed_while_new_clients_are_served() {
    // Long enough that none of the 2,000 times out while they are being
    // opened (seconds on a loaded machine): the places are made by
    // eviction alone.
    let (addr, server, _gate) = start(Limits {
        header_timeout_ms: 10_000,
        ..Limits::default()
    })
    .await;
    let mut half = Vec::with_capacity(2000);
    for i in 0..2000 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        // The server may have closed it already (evicted for a newer one).
        let _ = s
            .write_all(format!("GET /{i} HTTP/1.1\r\nHost: x\r\nX-Slow: ").as_bytes())
            .await;
        half.push(s);
    }
    // New clients are served at once, although 2,000 connections are
    // held open by half-sent heads (more than the 1,024 places).
    let client = reqwest::Client::new();
    for _ in 0..20 {
        let r = client
            .get(format!("http://{addr}/"))
            .timeout(GUARD)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.text().await.unwrap(), "ok");
    }
    let evicted = server
        .stats()
        .evicted
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        evicted >= 2000 - 1024,
        "the oldest half-sent connections made room: {evicted} evicted"
    );
    // Every one of them is closed: evicted, or at the header timeout.
    for (i, s) in half.iter_mut().enumerate() {
        assert!(closed(s).await, "half-sent connection {i} still open");
    }
    // Their places are given back as their tasks end (a closed socket may
    // be seen before its task has dropped it).
    let since = std::time::Instant::now();
    while server.open_connections() > 1 {
        assert!(
            since.elapsed() < GUARD,
            "{} connections still hold places; only the client's idle one may",
            server.open_connections()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_keep_alive_connection_left_idle_is_closed_at_the_header_timeout() {
    let (addr, _server, _gate) = start(Limits {
        header_timeout_ms: 300,
        ..Limits::default()
    })
    .await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut b = vec![0u8; 1024];
    let n = s.read(&mut b).await.unwrap();
    let answer = String::from_utf8_lossy(&b[..n]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");
    assert!(closed(&mut s).await, "the idle connection was closed");
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_fails_the_request() {
    let (addr, _server, _gate) = start(Limits {
        body_timeout_ms: 300,
        ..Limits::default()
    })
    .await;
    // Three of the ten bytes promised, then nothing.
    let answer = exchange(
        addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // A whole body is echoed.
    let answer = exchange(
        addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("abc"), "{answer}");
}

#[tokio::test]
async fn requests_beyond_the_concurrency_limit_get_503_with_retry_after() {
    let (addr, server, gate) = start(Limits {
        max_concurrent_requests: 2,
        retry_after_secs: 7,
        ..Limits::default()
    })
    .await;
    let client = reqwest::Client::new();
    let url = |p: &str| format!("http://{addr}{p}");
    let held = tokio::spawn(client.get(url("/hold")).timeout(GUARD).send());
    // A streamed response holds its place until its body ends.
    let stream = client
        .get(url("/stream"))
        .timeout(GUARD)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    // Wait until the held request is in its handler.
    while server
        .stats()
        .refused_requests
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
    {
        let r = client.get(url("/")).timeout(GUARD).send().await.unwrap();
        if r.status() == StatusCode::OK {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()["retry-after"], "7");
        let body: serde_json::Value = r.json().await.unwrap();
        let msg = body["overLimit"]["message"].as_str().unwrap();
        assert!(msg.contains("limit of 2 requests"), "{msg}");
        assert_eq!(body["overLimit"]["code"], 503);
    }
    // Both places free again: the held request and the stream end.
    gate.add_permits(2);
    assert_eq!(held.await.unwrap().unwrap().text().await.unwrap(), "held");
    assert_eq!(stream.text().await.unwrap(), "first last");
    let r = client.get(url("/")).timeout(GUARD).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_connection_beyond_the_limit_gets_503_when_every_place_is_in_a_request() {
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(Semaphore::new(0));
    let (g, e) = (gate.clone(), entered.clone());
    let app = Router::new().route("/", get(|| async { "ok" })).route(
        "/hold",
        get(move || async move {
            e.add_permits(1);
            g.acquire().await.unwrap().forget();
            "held"
        }),
    );
    let (addr, server) = start_with(
        Limits {
            max_connections: 2,
            retry_after_secs: 3,
            ..Limits::default()
        },
        app,
    )
    .await;
    let url = format!("http://{addr}/hold");
    let a = tokio::spawn(reqwest::Client::new().get(&url).timeout(GUARD).send());
    let b = tokio::spawn(reqwest::Client::new().get(&url).timeout(GUARD).send());
    entered.acquire_many(2).await.unwrap().forget();
    // Both places are taken by requests in progress.
    let answer = exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 503"),
        "{answer} {:?} open {}",
        server.stats(),
        server.open_connections()
    );
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 3\r\n"), "{answer}");
    assert!(lower.contains("connection: close\r\n"), "{answer}");
    assert!(answer.contains("limit of 2 connections"), "{answer}");
    assert!(
        server
            .stats()
            .refused_connections
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    gate.add_permits(2);
    assert_eq!(a.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(b.await.unwrap().unwrap().status(), StatusCode::OK);
    // The held connections are idle now: a new one takes a place.
    let answer = exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn requests_carry_their_peer_address() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let app = Router::new().route(
        "/peer",
        get(
            |axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>| async move {
                peer.ip().to_string()
            },
        ),
    );
    tokio::spawn(
        Server::new("test", Limits::default(), refuse)
            .unwrap()
            .serve(l, app),
    );
    let r = reqwest::get(format!("http://{addr}/peer")).await.unwrap();
    assert_eq!(r.text().await.unwrap(), "127.0.0.1");
}
