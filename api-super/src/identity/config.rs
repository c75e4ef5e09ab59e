//! The identity service's options (the `[identity]` section; see
//! docs/CONFIG.md).

use serde::{Deserialize, Serialize};

/// `[identity.database]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `postgres://…` or `sqlite://path?mode=rwc`.
    pub connection: String,
    /// Pool size (PostgreSQL; SQLite uses one connection).
    pub max_connections: u32,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            connection: "sqlite://identity.sqlite?mode=rwc".to_owned(),
            max_connections: 8,
        }
    }
}

/// `[identity.endpoints]`: the other services in the catalog.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EndpointsConfig {
    /// Compute API.
    pub compute: String,
    /// Placement API.
    pub placement: String,
    /// Image API.
    pub image: String,
}

impl Default for EndpointsConfig {
    fn default() -> Self {
        Self {
            compute: "http://127.0.0.1:8774/v2.1".to_owned(),
            placement: "http://127.0.0.1:8778".to_owned(),
            image: "http://127.0.0.1:9292".to_owned(),
        }
    }
}

/// `[identity.token]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenConfig {
    /// Token lifetime in seconds (Keystone's default: 3600).
    pub expiration_secs: u64,
    /// How often keys and revocations are re-read from the database (ms).
    pub refresh_interval_ms: u64,
    /// Most single tokens one user may have revoked while they are still
    /// in force; the next revocation revokes all the user's tokens instead
    /// (bounds the revocation list every validator downloads).
    pub max_token_revocations_per_user: u32,
    /// The file of the key that encrypts the signing keys at rest
    /// (created 0600 when missing; see [`super::keyseal`]). Empty: beside
    /// a SQLite database (`<file>.kek`); PostgreSQL needs it set.
    pub key_file: String,
}

impl Default for TokenConfig {
    fn default() -> Self {
        Self {
            expiration_secs: 3600,
            refresh_interval_ms: 2000,
            max_token_revocations_per_user: 100,
            key_file: String::new(),
        }
    }
}

/// `[identity.rate_limit]`: slowing password guessing per (user, source)
/// and per user, and bounding the password checks under way.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Failures allowed per (user, source) before delays start.
    pub free_attempts: u32,
    /// Failures allowed per user, all sources together, before delays
    /// start.
    pub user_free_attempts: u32,
    /// Password checks (argon2, 19 MiB each at the default cost) run at
    /// once, at most; 0: one per CPU.
    pub max_concurrent_hashes: u32,
    /// How long a login waits for a free check before a 503 (ms).
    pub hash_wait_ms: u64,
    /// First delay (ms); doubles with each further failure.
    pub base_delay_ms: u64,
    /// Longest delay (ms).
    pub max_delay_ms: u64,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            free_attempts: 5,
            user_free_attempts: 20,
            max_concurrent_hashes: 0,
            hash_wait_ms: 5000,
            base_delay_ms: 1000,
            max_delay_ms: 60_000,
        }
    }
}

/// `[identity]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdentityConfig {
    /// Address to serve the identity API on (port 0 picks one).
    pub listen: String,
    /// Public base URL of the identity API (empty: `http://<bound address>`).
    pub public_url: String,
    /// Region name in the catalog.
    pub region: String,
    /// The identity store.
    pub database: DatabaseConfig,
    /// The other services' endpoints.
    pub endpoints: EndpointsConfig,
    /// Tokens.
    pub token: TokenConfig,
    /// Password guessing.
    pub rate_limit: RateLimitConfig,
    /// A policy file (YAML or JSON) overriding default rules; empty for none.
    pub policy_file: String,
    /// Cost of new password hashes.
    pub password_hash: super::password::Cost,
    /// HTTP timeouts and limits (`[identity.http]`, see [`httpd`]).
    pub http: httpd::Limits,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:5000".to_owned(),
            public_url: String::new(),
            region: "RegionOne".to_owned(),
            database: DatabaseConfig::default(),
            endpoints: EndpointsConfig::default(),
            token: TokenConfig::default(),
            rate_limit: RateLimitConfig::default(),
            policy_file: String::new(),
            password_hash: super::password::Cost::default(),
            http: httpd::Limits::default(),
        }
    }
}
