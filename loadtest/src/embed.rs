//! An embedded region for the boot scenario: [`region::Region`] on fresh
//! SQLite files in a data directory, every API on a free port.

use std::path::PathBuf;

use anyhow::Result;
use region::{Region, RegionConfig};

/// The shape of the embedded region.
#[derive(Debug, Clone)]
pub struct RegionSpec {
    /// Cells besides cell0.
    pub cells: u32,
    /// Fake hosts per cell.
    pub hosts_per_cell: u32,
    /// How long a fake spawn takes.
    pub fake_spawn_latency_ms: u64,
    /// The data directory (should be empty or absent).
    pub data_dir: PathBuf,
}

/// A fresh data directory under the system's temp directory.
pub fn temp_data_dir() -> PathBuf {
    std::env::temp_dir().join(format!("loadtest-boot-{}", uuid::Uuid::new_v4().simple()))
}

/// Starts the region. Its catalog names port 0 (the APIs bind free ports):
/// callers use the addresses in [`Region`], not the catalog.
pub async fn start(
    spec: &RegionSpec,
    telemetry: Option<fabric::telemetry::Telemetry>,
) -> Result<Region> {
    let mut cfg = RegionConfig::default();
    let r = &mut cfg.region;
    r.data_dir = spec.data_dir.clone();
    r.cells = spec.cells;
    r.hosts_per_cell = spec.hosts_per_cell;
    r.fake_spawn_latency_ms = spec.fake_spawn_latency_ms;
    r.listen_on_free_ports();
    cfg.telemetry.metrics_listen = String::new();
    Region::start(&cfg, telemetry).await
}
