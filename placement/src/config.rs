//! The placement service's configuration (`PLACEMENT` prefix; see docs/CONFIG.md).

use fabric::config::TelemetryConfig;
use serde::{Deserialize, Serialize};

/// `[database]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// Database URL: `postgres://…` or `sqlite://path?mode=rwc`.
    pub connection: String,
    /// Pool size (PostgreSQL; SQLite always uses one connection).
    pub max_connections: u32,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            connection: "sqlite://placement.sqlite?mode=rwc".to_owned(),
            max_connections: 16,
        }
    }
}

/// `[keystone_remote]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeystoneRemoteConfig {
    /// The service user (`auth_url` defaults to `identity_url`).
    pub auth: fabric::login::ServiceCredentials,
    /// Seconds a validation is cached (a revoked token keeps working at
    /// most this long, as with keystonemiddleware's cache).
    pub cache_ttl_secs: u64,
}

impl Default for KeystoneRemoteConfig {
    fn default() -> Self {
        Self {
            auth: Default::default(),
            cache_ttl_secs: 60,
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementConfig {
    /// Address to serve the API on.
    pub listen: String,
    /// `noauth2` (development and conformance runs) or `keystone` (the
    /// region's identity tokens, validated locally).
    pub auth_strategy: String,
    /// Whether `noauth2` may serve on an address that is not loopback.
    /// Off: placement refuses to start so, since under `noauth2` anyone
    /// who reaches it is an administrator (the token `admin`).
    pub allow_noauth2_remote: bool,
    /// Accept an `http://` `identity_url` on another machine for
    /// `keystone` and `keystone_remote` (keys, revocations and token
    /// checks then travel unprotected). Default: https, or http on a
    /// loopback address only.
    pub allow_plain_http_identity: bool,
    /// The identity service (for `keystone` and `keystone_remote`), e.g.
    /// `http://127.0.0.1:5000`.
    pub identity_url: String,
    /// Placement's service user (`[keystone_remote.auth]`): for
    /// `keystone_remote` its token authorizes the token checks (answers
    /// cached `cache_ttl_secs`); for `keystone` it reads the revocation
    /// list.
    pub keystone_remote: KeystoneRemoteConfig,
    /// The database.
    pub database: DatabaseConfig,
    /// On PostgreSQL, how often (seconds) the in-memory index is rebuilt
    /// from the database in case a change announcement from another
    /// placement process was lost; 0: never.
    pub index_reconcile_secs: u64,
    /// Upstream's `[placement] randomize_allocation_candidates`: when a
    /// `GET /allocation_candidates` is limited, return a random sample of
    /// all the candidates (in random order) instead of the first `limit`
    /// in provider order, so that a limited query samples the whole fleet.
    /// Off: the order is stable (provider creation order).
    pub randomize_allocation_candidates: bool,
    /// Logging and metrics.
    pub telemetry: TelemetryConfig,
    /// What this process's clients trust (`[tls] ca_file`: https, amqps).
    pub tls: fabric::config::TlsConfig,
    /// A policy file (YAML or JSON) overriding upstream's default rules
    /// ([`crate::policy`]); empty for none.
    pub policy_file: String,
    /// HTTP timeouts and limits (`[http]`, see [`httpd`]).
    pub http: httpd::Limits,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8778".to_owned(),
            auth_strategy: "noauth2".to_owned(),
            allow_noauth2_remote: false,
            allow_plain_http_identity: false,
            identity_url: String::new(),
            keystone_remote: KeystoneRemoteConfig::default(),
            database: DatabaseConfig::default(),
            index_reconcile_secs: 60,
            randomize_allocation_candidates: false,
            telemetry: TelemetryConfig::default(),
            tls: Default::default(),
            policy_file: String::new(),
            http: httpd::Limits::default(),
        }
    }
}
