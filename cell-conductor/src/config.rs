//! The `cell-conductor` binary's configuration (prefix `CELL_CONDUCTOR`;
//! see docs/CONFIG.md).

use fabric::config::TelemetryConfig;
use serde::{Deserialize, Serialize};

/// `[conductor]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConductorSection {
    /// This conductor's host name (its `nova-conductor` service row).
    pub host: String,
    /// Requests handled at once.
    pub concurrency: usize,
    /// Seconds between reports of the conductor's own service.
    pub report_interval_secs: u64,
    /// Milliseconds between writes of the compute heartbeats seen (one
    /// statement for all of them).
    pub heartbeat_flush_ms: u64,
    /// A compute without a heartbeat for this long is down (the API's
    /// `[scheduler] service_down_time_secs`; keep them equal).
    pub service_down_time_secs: u64,
    /// Seconds between healing passes (0: no healing in this conductor).
    pub heal_interval_secs: u64,
    /// A build older than this goes to ERROR (Nova's
    /// `instance_build_timeout`, on by default here; 0: never).
    pub instance_build_timeout_secs: u64,
    /// Seconds between placement audits of the cell (missing allocations
    /// healed, misplaced ones moved, orphaned ones removed; 0: none).
    pub placement_audit_interval_secs: u64,
    /// A delete on a live host that nothing has touched for this long
    /// (its terminate cast lost) is sent to the host again; keep it
    /// longer than a cast lives (60 s); 0: never.
    pub delete_resend_secs: u64,
}

impl Default for ConductorSection {
    fn default() -> Self {
        Self {
            host: "cell-conductor".to_owned(),
            concurrency: 64,
            report_interval_secs: 10,
            heartbeat_flush_ms: 1000,
            service_down_time_secs: 5,
            heal_interval_secs: 1,
            instance_build_timeout_secs: 900,
            placement_audit_interval_secs: 300,
            delete_resend_secs: 70,
        }
    }
}

/// `[database]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSection {
    /// The cell database: `postgres://…` or `sqlite://path?mode=rwc`.
    pub connection: String,
    /// Pool size (PostgreSQL; SQLite uses one connection).
    pub max_connections: u32,
}

impl Default for DatabaseSection {
    fn default() -> Self {
        Self {
            connection: "sqlite://cell1.sqlite?mode=rwc".to_owned(),
            max_connections: 8,
        }
    }
}

/// `[bus]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BusSection {
    /// The cell's broker: `amqp://user:pass@host:5672/<vhost>` or `inproc://<name>`.
    pub transport_url: String,
}

impl Default for BusSection {
    fn default() -> Self {
        Self {
            transport_url: "amqp://guest:guest@127.0.0.1:5672/cell1".to_owned(),
        }
    }
}

/// `[placement]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementSection {
    /// Base URL of the placement API; empty: no placement (reschedules end
    /// in ERROR, deletes remove no allocations).
    pub endpoint: String,
    /// A fixed `X-Auth-Token` sent to placement (development: `admin`
    /// with noauth2). Ignored when `auth.username` is set.
    pub token: String,
    /// A service user that logs in to identity and keeps its token fresh
    /// (`[placement.auth]`: auth_url, username, password, project_name,
    /// user_domain_name, project_domain_name).
    pub auth: fabric::login::ServiceCredentials,
}

/// The whole file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConductorConfig {
    /// The conductor.
    pub conductor: ConductorSection,
    /// The cell database.
    pub database: DatabaseSection,
    /// The cell's bus.
    pub bus: BusSection,
    /// Placement.
    pub placement: PlacementSection,
    /// Logging and metrics.
    pub telemetry: TelemetryConfig,
    /// What this process's clients trust (`[tls] ca_file`: https, amqps).
    pub tls: fabric::config::TlsConfig,
}
