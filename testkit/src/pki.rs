//! TLS in tests: a CA and a server certificate for 127.0.0.1 and
//! localhost, made in-process with OpenSSL (P-256 keys, valid for a day),
//! as PEM and as files a server and its clients are configured with; and
//! [`TlsProxy`], a TLS-terminating TCP proxy in front of a plain service
//! (a real RabbitMQ for `amqps://`, a plain-http API), counting the
//! handshakes it finished and those the client broke off.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::x509::extension::{
    BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
};
use openssl::x509::{X509Builder, X509Name, X509};
use tokio::net::{TcpListener, TcpStream};
use tokio_native_tls::{native_tls, TlsAcceptor};

/// A CA and a server certificate it signed, all PEM.
pub struct TestPki {
    /// The CA certificate (what clients trust).
    pub ca_pem: Vec<u8>,
    /// The server certificate.
    pub cert_pem: Vec<u8>,
    /// The server certificate's private key, PKCS#8.
    pub key_pem: Vec<u8>,
}

/// Where [`TestPki::write_to`] put the files.
pub struct PkiFiles {
    /// The CA certificate.
    pub ca_file: PathBuf,
    /// The server certificate.
    pub cert_file: PathBuf,
    /// Its key (mode 0600).
    pub key_file: PathBuf,
}

fn p256_key() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

fn common_name(cn: &str) -> X509Name {
    let mut n = X509Name::builder().unwrap();
    n.append_entry_by_text("CN", cn).unwrap();
    n.build()
}

/// A certificate of `subject`'s `key`, valid from now for a day, with
/// everything but the issuer and the extensions.
fn builder(subject: &str, key: &PKey<Private>, serial: u32) -> X509Builder {
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    let serial = BigNum::from_u32(serial).unwrap().to_asn1_integer().unwrap();
    b.set_serial_number(&serial).unwrap();
    b.set_subject_name(&common_name(subject)).unwrap();
    b.set_pubkey(key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(1).unwrap())
        .unwrap();
    b
}

impl TestPki {
    /// A fresh CA and a server certificate it signed for 127.0.0.1 and
    /// localhost.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        let ca_key = p256_key();
        let mut ca = builder("cells test CA", &ca_key, 1);
        ca.set_issuer_name(&common_name("cells test CA")).unwrap();
        ca.append_extension(BasicConstraints::new().critical().ca().build().unwrap())
            .unwrap();
        ca.append_extension(
            KeyUsage::new()
                .critical()
                .key_cert_sign()
                .crl_sign()
                .build()
                .unwrap(),
        )
        .unwrap();
        ca.sign(&ca_key, MessageDigest::sha256()).unwrap();
        let ca = ca.build();

        let key = p256_key();
        let mut server = builder("localhost", &key, 2);
        server.set_issuer_name(ca.subject_name()).unwrap();
        let san = SubjectAlternativeName::new()
            .ip("127.0.0.1")
            .dns("localhost")
            .build(&server.x509v3_context(Some(&ca), None))
            .unwrap();
        server.append_extension(san).unwrap();
        server
            .append_extension(BasicConstraints::new().build().unwrap())
            .unwrap();
        server
            .append_extension(
                KeyUsage::new()
                    .critical()
                    .digital_signature()
                    .build()
                    .unwrap(),
            )
            .unwrap();
        server
            .append_extension(ExtendedKeyUsage::new().server_auth().build().unwrap())
            .unwrap();
        server.sign(&ca_key, MessageDigest::sha256()).unwrap();
        let server = server.build();

        Self {
            ca_pem: ca.to_pem().unwrap(),
            cert_pem: server.to_pem().unwrap(),
            key_pem: key.private_key_to_pem_pkcs8().unwrap(),
        }
    }

    /// An acceptor serving the server certificate.
    pub fn acceptor(&self) -> TlsAcceptor {
        let identity = native_tls::Identity::from_pkcs8(&self.cert_pem, &self.key_pem).unwrap();
        TlsAcceptor::from(native_tls::TlsAcceptor::new(identity).unwrap())
    }

    /// Writes `ca.pem`, `cert.pem` and `key.pem` (0600) into `dir`.
    pub fn write_to(&self, dir: &Path) -> PkiFiles {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir).unwrap();
        let files = PkiFiles {
            ca_file: dir.join("ca.pem"),
            cert_file: dir.join("cert.pem"),
            key_file: dir.join("key.pem"),
        };
        std::fs::write(&files.ca_file, &self.ca_pem).unwrap();
        std::fs::write(&files.cert_file, &self.cert_pem).unwrap();
        std::fs::write(&files.key_file, &self.key_pem).unwrap();
        std::fs::set_permissions(&files.key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        files
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
