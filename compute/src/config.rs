//! The `compute` binary's configuration (prefix `COMPUTE`; see
//! docs/CONFIG.md).

use std::time::Duration;

use fabric::config::TelemetryConfig;
use serde::{Deserialize, Serialize};

use crate::agent::{HostConfig, HostResources};

/// `[compute]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ComputeSection {
    /// Host name. With `fake_hosts > 1`, hosts are `<host>-0001`, ...
    pub host: String,
    /// Number of fake hosts this process runs (fake driver only).
    pub fake_hosts: u32,
    /// `fake` (simulated hosts, `fake_hosts` of them) or `libvirt` (this
    /// machine's hypervisor, one host; see `[libvirt]`).
    pub driver: String,
    /// Seconds between heartbeats.
    pub heartbeat_interval_secs: u64,
    /// Seconds a conductor call may take.
    pub call_timeout_secs: u64,
    /// Seconds during which a conductor call without an answer (broker
    /// connection lost, or no reply within the call timeout) is repeated
    /// (methods safe to repeat only; 0: never repeat).
    pub call_retry_secs: u64,
    /// Seconds the start-up reconciliation of each host may take (see
    /// [`crate::init_host`]).
    pub init_timeout_secs: u64,
    /// Milliseconds a fake spawn takes.
    pub fake_spawn_latency_ms: u64,
    /// Seconds between power-state syncs of every guest, not only those
    /// seen to change (Nova's `sync_power_state_interval`; drivers that
    /// sync at all: libvirt).
    pub sync_power_state_interval_secs: u64,
}

impl Default for ComputeSection {
    fn default() -> Self {
        Self {
            host: "compute1".to_owned(),
            fake_hosts: 1,
            driver: "fake".to_owned(),
            heartbeat_interval_secs: 1,
            call_timeout_secs: 30,
            call_retry_secs: 60,
            init_timeout_secs: 120,
            fake_spawn_latency_ms: 100,
            sync_power_state_interval_secs: 600,
        }
    }
}

/// `[resources]`: what each host offers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourcesSection {
    /// VCPU.
    pub vcpus: i64,
    /// MEMORY_MB.
    pub memory_mb: i64,
    /// DISK_GB.
    pub disk_gb: i64,
    /// VCPU allocation ratio.
    pub cpu_allocation_ratio: f64,
    /// MEMORY_MB allocation ratio.
    pub ram_allocation_ratio: f64,
    /// DISK_GB allocation ratio.
    pub disk_allocation_ratio: f64,
}

impl Default for ResourcesSection {
    fn default() -> Self {
        let r = HostResources::default();
        Self {
            vcpus: r.vcpus,
            memory_mb: r.memory_mb,
            disk_gb: r.disk_gb,
            cpu_allocation_ratio: r.cpu_allocation_ratio,
            ram_allocation_ratio: r.ram_allocation_ratio,
            disk_allocation_ratio: r.disk_allocation_ratio,
        }
    }
}

/// `[bus]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BusSection {
    /// The cell's broker: `amqp://…/<vhost>` or `inproc://<name>`.
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
    /// Base URL of the placement API; empty: do not report inventory.
    pub endpoint: String,
    /// A fixed `X-Auth-Token` sent to placement (development: `admin`
    /// with noauth2). Ignored when `auth.username` is set.
    pub token: String,
    /// A service user that logs in to identity and keeps its token fresh
    /// (`[placement.auth]`: auth_url, username, password, project_name,
    /// user_domain_name, project_domain_name).
    pub auth: fabric::login::ServiceCredentials,
}

/// `[image]`: the image service the libvirt driver downloads from.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImageSection {
    /// Base URL of the image API (`http://127.0.0.1:9292`). The token is
    /// the one `[placement]` logs in for.
    pub endpoint: String,
}

/// The whole file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ComputeConfig {
    /// The agent.
    pub compute: ComputeSection,
    /// Resources of each host.
    pub resources: ResourcesSection,
    /// The cell's bus.
    pub bus: BusSection,
    /// Placement.
    pub placement: PlacementSection,
    /// The image service (libvirt driver).
    pub image: ImageSection,
    /// The libvirt driver.
    pub libvirt: crate::driver::libvirt::config::LibvirtSection,
    /// Logging and metrics.
    pub telemetry: TelemetryConfig,
    /// What this process's clients trust (`[tls] ca_file`: https, amqps).
    pub tls: fabric::config::TlsConfig,
}

impl ComputeConfig {
    /// The settings of every host this process runs.
    pub fn hosts(&self) -> Vec<HostConfig> {
        let c = &self.compute;
        let names: Vec<String> = if c.fake_hosts <= 1 {
            vec![c.host.clone()]
        } else {
            (1..=c.fake_hosts)
                .map(|i| format!("{}-{i:04}", c.host))
                .collect()
        };
        let r = &self.resources;
        names
            .into_iter()
            .map(|name| {
                let mut h = HostConfig::new(&name);
                h.resources = HostResources {
                    vcpus: r.vcpus,
                    memory_mb: r.memory_mb,
                    disk_gb: r.disk_gb,
                    cpu_allocation_ratio: r.cpu_allocation_ratio,
                    ram_allocation_ratio: r.ram_allocation_ratio,
                    disk_allocation_ratio: r.disk_allocation_ratio,
                };
                h.heartbeat_interval = Duration::from_secs(c.heartbeat_interval_secs.max(1));
                h.call_timeout = Duration::from_secs(c.call_timeout_secs.max(1));
                h.call_retry_deadline = Duration::from_secs(c.call_retry_secs);
                h.init_timeout = Duration::from_secs(c.init_timeout_secs.max(1));
                h.power_sync_full_interval =
                    Duration::from_secs(c.sync_power_state_interval_secs.max(1));
                h
            })
            .collect()
    }
}
