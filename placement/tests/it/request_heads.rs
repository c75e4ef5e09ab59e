//! Request heads on the wire (`placement::listener`): a `Content-Length`
//! that is not an integer gets upstream's 400 and the connection closes;
//! the bodies of other requests frame the next head on a keep-alive
//! connection however the bytes arrive.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::reshaper::start;

/// Writes `data` (in pieces of `piece` bytes, pausing between them), then
/// reads until the server closes the connection.
fn exchange(addr: SocketAddr, data: &[u8], piece: usize) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_nodelay(true).unwrap();
    for part in data.chunks(piece) {
        s.write_all(part).unwrap();
        if piece < data.len() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .expect("the server closes the connection");
    String::from_utf8(out).unwrap()
}

fn post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nx-auth-token: admin\r\nopenstack-api-version: placement 1.2\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

const LIST_AND_CLOSE: &str =
    "GET /resource_providers HTTP/1.1\r\nHost: t\r\nx-auth-token: admin\r\nconnection: close\r\n\r\n";

fn heads(addr: SocketAddr) {
    // Not an integer: upstream's error body, then the connection closes
    // (the request after it is never read).
    for length in ["hi mom", "-1", "1, 1"] {
        let bad = format!(
            "POST /resource_providers HTTP/1.1\r\nHost: t\r\nx-auth-token: admin\r\n\
             content-type: application/json\r\ncontent-length: {length}\r\n\r\n{{\"name\": \"x\"}}{LIST_AND_CLOSE}"
        );
        let out = exchange(addr, bad.as_bytes(), bad.len());
        assert!(out.starts_with("HTTP/1.1 400 "), "{length}: {out}");
        assert!(
            out.contains("content-length header must be an integer"),
            "{length}: {out}"
        );
        assert!(out.contains("\"status\":400"), "{length}: {out}");
        assert!(
            out.to_ascii_lowercase().contains("connection: close"),
            "{length}: {out}"
        );
        assert_eq!(out.matches("HTTP/1.1").count(), 1, "{length}: {out}");
    }

    // Pipelined requests with bodies, in one write and byte by byte.
    for (n, piece) in [(1, usize::MAX), (2, 3), (3, 1)] {
        let mut data = post("/resource_providers", &format!(r#"{{"name": "rp{n}"}}"#));
        data.push_str("\r\n"); // a stray CRLF between requests is allowed
        data.push_str(&post(
            "/resource_classes",
            &format!(r#"{{"name": "CUSTOM_C{n}"}}"#),
        ));
        data.push_str(LIST_AND_CLOSE);
        let out = exchange(addr, data.as_bytes(), piece.min(data.len()));
        let statuses: Vec<&str> = out.lines().filter(|l| l.starts_with("HTTP/1.1 ")).collect();
        assert_eq!(statuses.len(), 3, "{out}");
        assert!(statuses[0].starts_with("HTTP/1.1 201"), "{out}");
        assert!(statuses[1].starts_with("HTTP/1.1 201"), "{out}");
        assert!(statuses[2].starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.contains(&format!("\"name\":\"rp{n}\"")), "{out}");
    }

    // A chunked body is passed on untouched, and so is what follows it.
    let body = r#"{"name": "chunked"}"#;
    let chunked = format!(
        "POST /resource_providers HTTP/1.1\r\nHost: t\r\nx-auth-token: admin\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n{LIST_AND_CLOSE}",
        body.len()
    );
    let out = exchange(addr, chunked.as_bytes(), 5);
    assert!(out.starts_with("HTTP/1.1 201"), "{out}");
    assert!(out.contains("\"name\":\"chunked\""), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_heads_on_the_wire() {
    let db = testkit::sqlite("placement_request_heads");
    let running = start(&db.url).await;
    let addr = running.addr;
    tokio::task::spawn_blocking(move || heads(addr))
        .await
        .unwrap();
}
