//! Token signing keys encrypted at rest: each private seed is stored in the
//! identity database sealed with ChaCha20-Poly1305 under a key-encryption
//! key (KEK) that lives outside the database, in a file of its own (0600).
//! Whoever reads the database (a backup, a replica, a dump) cannot sign
//! tokens without that file too.
//!
//! Stored form: `enc1.<base64url(nonce ‖ ciphertext ‖ tag)>`, the key id as
//! associated data (a sealed seed moved to another key id does not open).
//! A seed stored in the clear (`<base64url(seed)>`, before this existed)
//! is still read, and [`crate::identity::Identity`] seals it again.
//!
//! Where the KEK file is: `[identity.token] key_file`; when empty, beside
//! a SQLite database (`<database file>.kek`). PostgreSQL needs the option:
//! every api-super sharing the database must read the same file. A missing
//! file is created (32 random bytes, base64url, mode 0600 from creation).

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::RngCore;

use super::error::{IdentityError, Result};

/// Prefix of a sealed seed.
const SEALED: &str = "enc1.";

/// The key-encryption key.
pub struct Sealer {
    cipher: ChaCha20Poly1305,
    path: PathBuf,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself.
        f.debug_struct("Sealer").field("path", &self.path).finish()
    }
}

/// Where the KEK file is for `key_file` and the database `connection`.
pub fn kek_path(key_file: &str, connection: &str) -> Result<PathBuf> {
    if !key_file.is_empty() {
        return Ok(PathBuf::from(key_file));
    }
    let file = connection
        .strip_prefix("sqlite://")
        .or_else(|| connection.strip_prefix("sqlite:"))
        .map(|rest| rest.split('?').next().unwrap_or(""))
        .filter(|f| !f.is_empty() && !f.starts_with(':'));
    match file {
        Some(f) => Ok(PathBuf::from(format!("{f}.kek"))),
        None => Err(IdentityError::Config(
            "[identity.token] key_file is required with this database: the token signing keys \
             are encrypted at rest with the key in that file (created 0600 when missing; every \
             identity process sharing the database needs the same file)"
                .into(),
        )),
    }
}

impl Sealer {
    /// Reads the KEK at `path`, creating it (0600) when missing.
    pub fn open(path: &Path) -> Result<Self> {
        let encoded = match std::fs::read_to_string(path) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path)?,
            Err(e) => {
                return Err(IdentityError::Config(format!(
                    "cannot read the signing-key encryption key {}: {e}",
                    path.display()
                )))
            }
        };
        let key: [u8; 32] = B64
            .decode(encoded.trim())
            .ok()
            .and_then(|k| k.try_into().ok())
            .ok_or_else(|| {
                IdentityError::Config(format!(
                    "{} does not hold a key (32 bytes, base64url)",
                    path.display()
                ))
            })?;
        Ok(Self {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
            path: path.to_owned(),
        })
    }

    /// `seed` sealed for the key `kid`.
    pub fn seal(&self, kid: &str, seed: &[u8; 32]) -> Result<String> {
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: seed,
                    aad: kid.as_bytes(),
                },
            )
            .map_err(|_| IdentityError::Internal("cannot seal a signing key".into()))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(format!("{SEALED}{}", B64.encode(out)))
    }

    /// The seed of key `kid` as stored, and whether it was stored in the
    /// clear (to be sealed again).
    pub fn open_seed(&self, kid: &str, stored: &str) -> Result<([u8; 32], bool)> {
        let undecodable = || IdentityError::Internal(format!("undecodable signing key {kid}"));
        let Some(sealed) = stored.strip_prefix(SEALED) else {
            let seed = B64
                .decode(stored)
                .ok()
                .and_then(|s| s.try_into().ok())
                .ok_or_else(undecodable)?;
            return Ok((seed, true));
        };
        let bytes = B64.decode(sealed).map_err(|_| undecodable())?;
        if bytes.len() < 12 {
            return Err(undecodable());
        }
        let (nonce, body) = bytes.split_at(12);
        let seed = self
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: body,
                    aad: kid.as_bytes(),
                },
            )
            .map_err(|_| {
                IdentityError::Config(format!(
                    "signing key {kid} does not open with the key in {}: it was sealed with \
                     another key file (every identity process sharing the database needs the \
                     same one)",
                    self.path.display()
                ))
            })?;
        Ok((seed.try_into().map_err(|_| undecodable())?, false))
    }
}

/// Writes a new random KEK at `path` (0600 from creation) and returns it.
fn create(path: &Path) -> Result<String> {
    let mut key = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut key);
    let encoded = B64.encode(key);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let written = opts
        .open(path)
        .and_then(|mut f| f.write_all(encoded.as_bytes()).and_then(|()| f.sync_all()));
    match written {
        Ok(()) => {
            tracing::info!(path = %path.display(), "created the signing-key encryption key");
            Ok(encoded)
        }
        // Another process made it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::read_to_string(path)
            .map_err(|e| IdentityError::Config(format!("cannot read {}: {e}", path.display()))),
        Err(e) => Err(IdentityError::Config(format!(
            "cannot create the signing-key encryption key {}: {e}",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("keyseal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn seeds_are_sealed_and_open_only_with_their_key_and_kid() {
        let path = temp("a");
        let s = Sealer::open(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let seed = [7u8; 32];
        let stored = s.seal("k1", &seed).unwrap();
        assert!(stored.starts_with("enc1."));
        assert!(
            !stored.contains(&B64.encode(seed)),
            "the seed is not in the clear"
        );
        assert_eq!(s.open_seed("k1", &stored).unwrap(), (seed, false));
        // The same file opened again: the same key.
        let again = Sealer::open(&path).unwrap();
        assert_eq!(again.open_seed("k1", &stored).unwrap().0, seed);
        // Another key id, another key file, a damaged text: refused.
        assert!(s.open_seed("k2", &stored).is_err());
        let other = Sealer::open(&temp("b")).unwrap();
        let e = other.open_seed("k1", &stored).unwrap_err().to_string();
        assert!(e.contains("another key file"), "{e}");
        assert!(s.open_seed("k1", "enc1.AAAA").is_err());
        // A seed stored in the clear is read, to be sealed again.
        assert_eq!(s.open_seed("k1", &B64.encode(seed)).unwrap(), (seed, true));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn the_key_file_is_beside_a_sqlite_database_or_required() {
        assert_eq!(
            kek_path("", "sqlite://data/identity.sqlite?mode=rwc").unwrap(),
            PathBuf::from("data/identity.sqlite.kek")
        );
        assert_eq!(
            kek_path("/etc/x.kek", "postgres://h/db").unwrap(),
            PathBuf::from("/etc/x.kek")
        );
        let e = kek_path("", "postgres://h/db").unwrap_err().to_string();
        assert!(e.contains("key_file is required"), "{e}");
        assert!(kek_path("", "sqlite::memory:").is_err());
    }
}
