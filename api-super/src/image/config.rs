//! The image service's options (the `[image]` section; see docs/IMAGES.md).

use serde::{Deserialize, Serialize};

/// `[image.database]`.
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
            connection: "sqlite://image.sqlite?mode=rwc".to_owned(),
            max_connections: 8,
        }
    }
}

/// `[image]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImageConfig {
    /// Address to serve the image API on (port 0 picks one).
    pub listen: String,
    /// Public base URL (empty: `http://<bound address>`), used in version
    /// documents.
    pub public_url: String,
    /// Where image metadata lives.
    pub database: DatabaseConfig,
    /// Directory holding the image files (Glance's
    /// `filesystem_store_datadir`); created at start.
    pub filesystem_store_datadir: String,
    /// Largest image accepted, in bytes (Glance's `image_size_cap`, 1 TiB).
    pub image_size_cap: u64,
    /// Largest page of `GET /v2/images` (Glance's `api_limit_max`).
    pub api_limit_max: u32,
    /// Page size when the client gives no `limit` (Glance's `limit_param_default`).
    pub limit_param_default: u32,
    /// A policy file (YAML or JSON) overriding default rules; empty for none.
    pub policy_file: String,
    /// How long a boot's lookup of an image by id may answer from memory,
    /// in milliseconds (0: read the database every time). Every write
    /// through this service drops the image's entry at once; a write by
    /// another process is seen within this time.
    pub boot_lookup_cache_ms: u64,
    /// Per-project limits (`[image.quota]`, Glance's unified limits).
    pub quota: ImageQuota,
    /// HTTP timeouts and limits (`[image.http]`, see [`httpd`]); the body
    /// timeout is an hour by default, for uploads.
    pub http: httpd::Limits,
}

impl Default for ImageConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:9292".to_owned(),
            public_url: String::new(),
            database: DatabaseConfig::default(),
            filesystem_store_datadir: "images".to_owned(),
            image_size_cap: 1 << 40,
            api_limit_max: 1000,
            limit_param_default: 25,
            policy_file: String::new(),
            boot_lookup_cache_ms: 1000,
            quota: ImageQuota::default(),
            http: httpd::Limits {
                body_timeout_ms: 3_600_000,
                ..httpd::Limits::default()
            },
        }
    }
}

/// `[image.quota]`: what one project may hold, as Glance's unified limits
/// (`use_keystone_limits`) name them; the fallback for a resource identity
/// has neither a project limit nor a registered default on
/// ([`super::limits`]). -1: unlimited.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImageQuota {
    /// Images of any status (checked at create).
    pub image_count_total: i64,
    /// Images whose data is being uploaded at once (checked at upload).
    pub image_count_uploading: i64,
    /// Bytes of image data held, in MiB (checked at upload; unlike Glance,
    /// an upload stops when it would pass the limit instead of after).
    pub image_size_total: i64,
}

impl Default for ImageQuota {
    fn default() -> Self {
        Self {
            image_count_total: 100,
            image_count_uploading: 10,
            image_size_total: 100 * 1024,
        }
    }
}
