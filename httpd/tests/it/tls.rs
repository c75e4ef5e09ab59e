//! https: a server given a certificate and key speaks only TLS; bad TLS
//! files are refused before it serves; a client stalled in the handshake
//! is closed at the header timeout.

use std::time::Duration;

use httpd::{Limits, Server, TlsError};
use tokio::net::TcpStream;

use crate::{closed, exchange, start};

fn tls_limits(files: &testkit::pki::PkiFiles) -> Limits {
    Limits {
        tls_cert_file: Some(files.cert_file.clone()),
        tls_key_file: Some(files.key_file.clone()),
        ..Limits::default()
    }
}

fn client_trusting(ca_pem: &[u8]) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem).unwrap())
        .timeout(crate::GUARD)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_tls_server_answers_https_only() {
    let dir = testkit::temp_dir("httpd-tls");
    let pki = testkit::pki::TestPki::new();
    let files = pki.write_to(&dir);
    let (addr, server, _gate) = start(tls_limits(&files)).await;
    assert_eq!(server.scheme(), "https");

    for host in ["127.0.0.1", "localhost"] {
        let r = client_trusting(&pki.ca_pem)
            .get(format!("https://{host}:{}/", addr.port()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "ok");
    }
    // A client that does not trust the CA refuses the server.
    let e = reqwest::Client::new()
        .get(format!("https://127.0.0.1:{}/", addr.port()))
        .send()
        .await
        .unwrap_err();
    assert!(e.is_connect(), "{e:?}");
    // Plain HTTP gets no HTTP answer.
    let answer = exchange(addr, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(!answer.contains("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn a_client_stalled_in_the_handshake_is_closed_at_the_header_timeout() {
    let dir = testkit::temp_dir("httpd-tls-stall");
    let files = testkit::pki::TestPki::new().write_to(&dir);
    let (addr, _server, _gate) = start(Limits {
        header_timeout_ms: 300,
        ..tls_limits(&files)
    })
    .await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let t = std::time::Instant::now();
    assert!(closed(&mut s).await);
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn bad_tls_files_are_refused_with_the_reason() {
    use std::os::unix::fs::PermissionsExt;
    let dir = testkit::temp_dir("httpd-tls-bad");
    let files = testkit::pki::TestPki::new().write_to(&dir);
    let refuse = crate::refuse;
    let half = Limits {
        tls_key_file: None,
        ..tls_limits(&files)
    };
    let e = Server::new("t", half, refuse).unwrap_err();
    assert!(
        matches!(
            e,
            TlsError::Half {
                given: "tls_cert_file"
            }
        ),
        "{e}"
    );

    std::fs::set_permissions(&files.key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = Server::new("t", tls_limits(&files), refuse).unwrap_err();
    assert!(e.to_string().contains("readable by others"), "{e}");
    std::fs::set_permissions(&files.key_file, std::fs::Permissions::from_mode(0o600)).unwrap();

    // The CA's certificate with the server's key: not a pair.
    let wrong = Limits {
        tls_cert_file: Some(files.ca_file.clone()),
        ..tls_limits(&files)
    };
    let e = Server::new("t", wrong, refuse).unwrap_err();
    assert!(matches!(e, TlsError::NotAPair { .. }), "{e}");

    let missing = Limits {
        tls_cert_file: Some(dir.join("nope.pem")),
        ..tls_limits(&files)
    };
    let e = Server::new("t", missing, refuse).unwrap_err();
    assert!(e.to_string().contains("nope.pem"), "{e}");
}
