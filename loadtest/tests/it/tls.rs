//! https in tests: a TLS-terminating TCP proxy (with `testkit::pki`'s
//! certificate) in front of a plain-http service, counting the handshakes
//! it finished and those the client broke off.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio_native_tls::{native_tls, TlsAcceptor};

/// A CA (its PEM, to trust) and the acceptor of a server certificate it
/// signed for 127.0.0.1 and localhost.
pub struct TestPki {
    /// The CA certificate, PEM.
    pub ca_pem: Vec<u8>,
    /// Serves the server certificate.
    pub acceptor: TlsAcceptor,
}

impl TestPki {
    /// A fresh CA and server certificate.
    pub fn new() -> Self {
        let pki = testkit::pki::TestPki::new();
        let identity = native_tls::Identity::from_pkcs8(&pki.cert_pem, &pki.key_pem).unwrap();
        Self {
            ca_pem: pki.ca_pem,
            acceptor: TlsAcceptor::from(native_tls::TlsAcceptor::new(identity).unwrap()),
        }
    }
}

/// A TLS-terminating proxy on 127.0.0.1 in front of a plain TCP service;
/// stops when dropped.
pub struct TlsProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    handshakes: Arc<AtomicUsize>,
    broken_off: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsProxy {
    /// Listens on a free port, carries each connection whose handshake
    /// succeeds to `upstream`.
    pub async fn start(upstream: SocketAddr, acceptor: TlsAcceptor) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handshakes = Arc::new(AtomicUsize::new(0));
        let broken_off = Arc::new(AtomicUsize::new(0));
        let (ok, failed) = (handshakes.clone(), broken_off.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, ok, failed) = (acceptor.clone(), ok.clone(), failed.clone());
                tokio::spawn(async move {
                    let mut tls = match acceptor.accept(tcp).await {
                        Ok(tls) => tls,
                        Err(_) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    };
                    ok.fetch_add(1, Ordering::SeqCst);
                    if let Ok(mut plain) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    }
                });
            }
        });
        Self {
            addr,
            handshakes,
            broken_off,
            task,
        }
    }

    /// `https://` and the address.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Handshakes finished so far.
    pub fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }

    /// Handshakes the client broke off (or that failed) so far.
    pub fn broken_off(&self) -> usize {
        self.broken_off.load(Ordering::SeqCst)
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
