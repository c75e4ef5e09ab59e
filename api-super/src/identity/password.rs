//! Password hashing: argon2id, PHC strings in the store (the parameters
//! travel in the string, so changing the cost applies to new hashes only).
//! The default cost is OWASP's first argon2id choice and the crate's
//! default: 19 MiB, 2 passes, 1 lane. Hashing and checking run on the
//! blocking pool.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use rand::RngCore;
use serde::{Deserialize, Serialize};

use super::error::{IdentityError, Result};

/// The cost of new hashes (`[identity.password_hash]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cost {
    /// Memory in KiB (at least 8).
    pub memory_kib: u32,
    /// Passes (at least 1).
    pub iterations: u32,
}

impl Default for Cost {
    fn default() -> Self {
        Self {
            memory_kib: Params::DEFAULT_M_COST,
            iterations: Params::DEFAULT_T_COST,
        }
    }
}

impl Cost {
    /// The cheapest cost: for tests only.
    pub const TEST: Cost = Cost {
        memory_kib: 8,
        iterations: 1,
    };
}

/// Hashes `password` with a fresh random salt at the default cost.
pub fn hash(password: &str) -> Result<String> {
    hash_with(password, Cost::default())
}

/// Hashes `password` with a fresh random salt at `cost`.
pub fn hash_with(password: &str, cost: Cost) -> Result<String> {
    let mut salt = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| IdentityError::Internal(e.to_string()))?;
    let params = Params::new(cost.memory_kib.max(8), cost.iterations.max(1), 1, None)
        .map_err(|e| IdentityError::Config(format!("password_hash: {e}")))?;
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| IdentityError::Internal(format!("cannot hash a password: {e}")))
}

/// Whether `password` matches the PHC string `phc`. A malformed hash never
/// matches.
pub fn verify(password: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// [`hash_with`] on the blocking pool.
pub async fn hash_async(password: String, cost: Cost) -> Result<String> {
    tokio::task::spawn_blocking(move || hash_with(&password, cost))
        .await
        .map_err(|e| IdentityError::Internal(e.to_string()))?
}

/// [`verify`] on the blocking pool. With `phc` absent (unknown user, or a
/// user without a password) `dummy` (a hash at the configured cost) is
/// checked instead, so an unknown user takes as long as a wrong password.
pub async fn verify_async(password: String, phc: Option<String>, dummy: &str) -> bool {
    let dummy = dummy.to_owned();
    tokio::task::spawn_blocking(move || match phc {
        Some(phc) => verify(&password, &phc),
        None => {
            let _ = verify(&password, &dummy);
            false
        }
    })
    .await
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn hashes_and_verifies() {
        let h = super::hash_with("s3cret", super::Cost::TEST).unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(super::verify("s3cret", &h));
        assert!(!super::verify("wrong", &h));
        assert!(!super::verify("s3cret", "garbage"));
    }
}
