//! Every server of the region (identity, placement, compute, image and
//! both console proxies) is served by `httpd`: a half-sent request head is
//! closed at the header timeout while new clients are served, and a
//! request beyond the concurrency limit gets the API's own 503 with
//! `Retry-After`. The image store lives where `image_store_dir` says.

use std::net::SocketAddr;
use std::time::Duration;

use region::Region;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where an API's error body holds its message (`None`: not that API's
/// format for a 503).
type ErrorMessage = fn(&Value) -> Option<&str>;

/// Bounds every wait (a hang guard, not a measurement).
const GUARD: Duration = Duration::from_secs(20);

/// Requests the region's servers take at once in this test.
const CONCURRENT: usize = 4;

/// Sends `raw` on a new connection and reads the answer until the server
/// closes the connection.
async fn exchange(addr: SocketAddr, raw: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(GUARD, s.read_to_end(&mut out))
        .await
        .expect("the server closes the connection")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// A request whose head is sent whole and whose body never comes: its
/// handler waits for the body, holding one of the server's places.
async fn held(addr: SocketAddr, method: &str, path: &str, token: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // An image upload is a stream of bytes; the rest take JSON.
    let kind = if path.ends_with("/file") {
        "application/octet-stream"
    } else {
        "application/json"
    };
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nX-Auth-Token: {token}\r\n\
         Content-Type: {kind}\r\nOpenStack-API-Version: placement 1.39\r\n\
         Content-Length: 100\r\n\r\n{{"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_closes_half_sent_heads_and_answers_its_own_503_when_full() {
    let mut cfg = crate::one_host("http_limits");
    cfg.region.http = httpd::Limits {
        header_timeout_ms: 500,
        max_concurrent_requests: CONCURRENT,
        retry_after_secs: 2,
        ..httpd::Limits::default()
    };
    // The image store on a path of its own, outside the data directory.
    let store = testkit::temp_dir("http_limits_images").join("store");
    cfg.region.image_store_dir = store.clone();
    let region = Region::start(&cfg, None).await.expect("start the region");
    let mode = std::fs::metadata(&store).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700
    );
    let files = std::fs::read_dir(&store).unwrap().count();
    assert!(files >= 1, "the seeded image's data is in the store");
    assert!(!cfg.region.data_dir.join("images").exists());
    let servers = [
        ("identity", region.identity.addr),
        ("placement", region.placement.addr),
        ("compute", region.compute.addr),
        ("image", region.image.addr),
        ("serial console proxy", region.compute.serial_proxy.unwrap()),
        ("noVNC proxy", region.compute.novnc_proxy.unwrap()),
    ];
    for (name, addr) in servers {
        let mut half = TcpStream::connect(addr).await.unwrap();
        half.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Half: ")
            .await
            .unwrap();
        // A new client is served meanwhile.
        let answer = exchange(
            addr,
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 "), "{name}: {answer}");
        assert!(!answer.starts_with("HTTP/1.1 5"), "{name}: {answer}");
        let mut b = [0u8; 256];
        let n = tokio::time::timeout(GUARD, half.read(&mut b))
            .await
            .unwrap_or_else(|_| panic!("{name} kept a half-sent head open"))
            .unwrap_or(0);
        assert_eq!(n, 0, "{name} answered a half-sent head: {:?}", &b[..n]);
    }

    // Each API's own 503 once its places are held by requests whose
    // bodies do not come.
    let identity = format!("http://{}", region.identity.addr);
    let token = region::password_token(&identity, &region.admin)
        .await
        .expect("admin token")
        .0;
    // Images to upload to, one per held request (an image takes one upload
    // at a time): their uploads' bodies never come.
    let mut images = Vec::new();
    for _ in 0..CONCURRENT {
        let created: Value = reqwest::Client::new()
            .post(format!("http://{}/v2/images", region.image.addr))
            .header("x-auth-token", &token)
            .json(&serde_json::json!({"name": "held", "disk_format": "raw", "container_format": "bare"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        images.push(created["id"].as_str().expect("an image id").to_owned());
    }
    let apis: [(&str, SocketAddr, &str, String, ErrorMessage); 4] = [
        (
            "identity",
            region.identity.addr,
            "POST",
            "/v3/auth/tokens".to_owned(),
            |v| {
                v["error"]["message"]
                    .as_str()
                    .filter(|_| v["error"]["code"] == 503)
            },
        ),
        (
            "placement",
            region.placement.addr,
            "POST",
            "/resource_providers".to_owned(),
            |v| {
                v["errors"][0]["detail"]
                    .as_str()
                    .filter(|_| v["errors"][0]["status"] == 503)
            },
        ),
        (
            "compute",
            region.compute.addr,
            "POST",
            "/v2.1/servers".to_owned(),
            |v| {
                v["serviceUnavailable"]["message"]
                    .as_str()
                    .filter(|_| v["serviceUnavailable"]["code"] == 503)
            },
        ),
        (
            "image",
            region.image.addr,
            "PUT",
            "/v2/images/IMAGE/file".to_owned(),
            |v| v["message"].as_str().filter(|_| v["code"] == 503),
        ),
    ];
    for (name, addr, method, path, message) in apis {
        let mut holding = Vec::new();
        for image in &images {
            let path = path.replace("IMAGE", image);
            holding.push(held(addr, method, &path, &token).await);
        }
        // The held requests reach their handlers in their own time.
        let deadline = tokio::time::Instant::now() + GUARD;
        let answer = loop {
            let a = exchange(
                addr,
                &format!("GET / HTTP/1.1\r\nHost: x\r\nX-Auth-Token: {token}\r\nConnection: close\r\n\r\n"),
            )
            .await;
            if a.starts_with("HTTP/1.1 503") || tokio::time::Instant::now() > deadline {
                break a;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if !answer.starts_with("HTTP/1.1 503") {
            for mut h in holding {
                let mut b = vec![0u8; 2048];
                let n = tokio::time::timeout(std::time::Duration::from_secs(1), h.read(&mut b))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or(0);
                eprintln!("held: {}", String::from_utf8_lossy(&b[..n]));
            }
            panic!("{name}: {answer}");
        }
        assert!(
            answer.to_ascii_lowercase().contains("retry-after: 2\r\n"),
            "{name}: {answer}"
        );
        let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or(""))
            .unwrap_or_else(|e| panic!("{name}: {e}: {answer}"));
        let msg = message(&body).unwrap_or_else(|| panic!("{name}'s error format: {body}"));
        assert!(
            msg.contains(&format!("limit of {CONCURRENT} requests")),
            "{name}: {msg}"
        );
        // Closing them frees the places.
        drop(holding);
        let deadline = tokio::time::Instant::now() + GUARD;
        loop {
            let a = exchange(
                addr,
                "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
            .await;
            if !a.starts_with("HTTP/1.1 503") {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} stays full: {a}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    region.shutdown().await;
}
