//! TLS for a server: its certificate chain and private key from PEM files,
//! through the system's OpenSSL (native-tls). The handshake runs in the
//! connection's own task, bounded by the header timeout, so a client that
//! stalls in it holds nothing but its connection's place.

use std::path::{Path, PathBuf};

/// Why a server's TLS files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Only one of the two files was given.
    #[error("TLS needs both tls_cert_file and tls_key_file (only {given} is set)")]
    Half {
        /// The option that was set.
        given: &'static str,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The private key is readable by every user of the machine.
    #[error(
        "the private key {path} is readable by others (mode {mode:o}): \
         make it readable by its owner only (chmod 600)"
    )]
    KeyReadableByOthers {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The key is not the certificate's (or either does not parse).
    #[error(
        "{key} is not the private key of the first certificate in {cert} \
         (both must be PEM: the chain leaf first, the key PKCS#8)"
    )]
    NotAPair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// OpenSSL refused the certificate or key.
    #[error(
        "the certificate {cert} and key {key} are not a PEM certificate chain \
         with its PKCS#8 PEM private key: {source}"
    )]
    Identity {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// OpenSSL's reason.
        source: native_tls::Error,
    },
}

/// The acceptor for `cert` and `key` (both PEM; the key PKCS#8, readable
/// by its owner only); `None` when neither is set.
pub(crate) fn acceptor(
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Option<tokio_native_tls::TlsAcceptor>, TlsError> {
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(TlsError::Half {
                given: "tls_cert_file",
            })
        }
        (None, Some(_)) => {
            return Err(TlsError::Half {
                given: "tls_key_file",
            })
        }
        (Some(c), Some(k)) => (c, k),
    };
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| TlsError::Read {
            path: p.to_owned(),
            source,
        })
    };
    check_private(key)?;
    let (cert_pem, key_pem) = (read(cert)?, read(key)?);
    if !pair(&cert_pem, &key_pem) {
        return Err(TlsError::NotAPair {
            cert: cert.to_owned(),
            key: key.to_owned(),
        });
    }
    let identity = native_tls::Identity::from_pkcs8(&cert_pem, &key_pem).map_err(|source| {
        TlsError::Identity {
            cert: cert.to_owned(),
            key: key.to_owned(),
            source,
        }
    })?;
    let acceptor = native_tls::TlsAcceptor::builder(identity)
        .min_protocol_version(Some(native_tls::Protocol::Tlsv12))
        .build()
        .map_err(|source| TlsError::Identity {
            cert: cert.to_owned(),
            key: key.to_owned(),
            source,
        })?;
    Ok(Some(acceptor.into()))
}

/// Whether the first certificate of `cert_pem` is the public half of
/// `key_pem` (OpenSSL would otherwise take a mismatched pair and fail
/// every handshake); false when either does not parse.
fn pair(cert_pem: &[u8], key_pem: &[u8]) -> bool {
    let leaf = openssl::x509::X509::stack_from_pem(cert_pem)
        .ok()
        .and_then(|chain| chain.into_iter().next());
    let key = openssl::pkey::PKey::private_key_from_pem(key_pem).ok();
    match (leaf.and_then(|l| l.public_key().ok()), key) {
        (Some(public), Some(private)) => public.public_eq(&private),
        _ => false,
    }
}

/// Refuses a key file that others than its owner and group may read.
fn check_private(key: &Path) -> Result<(), TlsError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(key).map_err(|source| TlsError::Read {
        path: key.to_owned(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o004 != 0 {
        return Err(TlsError::KeyReadableByOthers {
            path: key.to_owned(),
            mode,
        });
    }
    Ok(())
}
