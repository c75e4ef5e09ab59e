//! What the scheduler knows about compute hosts besides placement: which
//! cell each host is mapped to (API DB `host_mappings`), its compute service
//! (up, enabled: the cell databases' `services`) and node (provider uuid =
//! compute node uuid), its recent build failures (the node's `stats`), its
//! availability zone (the `availability_zone`
//! metadata of its aggregates, else the default zone), the metadata of
//! its aggregates (for `AggregateInstanceExtraSpecsFilter`) and the guests
//! its hypervisor runs (for `ImagePropertiesFilter`).
//! Loaded from every enabled cell in parallel and cached for a short time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cell_mapping::CellMapping;
use chrono::Utc;
use tokio::sync::Mutex;

use crate::cells::Cells;
use crate::compute_api::db::ComputeDb;

/// One compute node as the filters see it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostInfo {
    /// Service host.
    pub host: String,
    /// Node (hypervisor hostname).
    pub node: String,
    /// Placement resource provider (= compute node uuid).
    pub provider: String,
    /// Its cell.
    pub cell: CellMapping,
    /// Availability zone.
    pub availability_zone: String,
    /// The compute service reported within the down time and is not
    /// forced down.
    pub service_up: bool,
    /// The compute service is disabled.
    pub service_disabled: bool,
    /// The metadata of the host's aggregates: every value of each key.
    pub aggregate_metadata: BTreeMap<String, BTreeSet<String>>,
    /// Consecutive build failures on the node (`compute_nodes.stats`
    /// `failed_builds`, counted by the cell conductor; 0 after a success).
    pub failed_builds: u64,
    /// The node's `hypervisor_version` (Nova's integer encoding).
    pub hypervisor_version: i64,
    /// What guests the node runs: `(architecture, hypervisor type, vm
    /// mode)` triples (`ImagePropertiesFilter`).
    pub supported_instances: Vec<[String; 3]>,
}

/// Host information by provider uuid.
#[derive(Debug, Clone, Default)]
pub struct HostMap {
    /// By provider uuid (shared with the candidates made from them).
    pub by_provider: HashMap<String, Arc<HostInfo>>,
}

/// The cached loader.
#[derive(Debug)]
pub struct HostStateCache {
    db: ComputeDb,
    cells: Cells,
    ttl: Duration,
    service_down: Duration,
    default_az: String,
    cached: Mutex<Option<(Instant, Arc<HostMap>)>>,
    zones: Mutex<Option<(Instant, Arc<HostZones>)>>,
}

/// The zone of every host in an aggregate that names one (host → zone);
/// a host not in it is in the default zone.
pub type HostZones = HashMap<String, String>;

impl HostStateCache {
    /// A cache valid for `ttl`; a service is down after `service_down`
    /// without a heartbeat.
    pub fn new(
        db: ComputeDb,
        cells: Cells,
        ttl: Duration,
        service_down: Duration,
        default_az: String,
    ) -> Self {
        Self {
            db,
            cells,
            ttl,
            service_down,
            default_az,
            cached: Mutex::new(None),
            zones: Mutex::new(None),
        }
    }

    /// The current host map (reloaded when older than the ttl).
    pub async fn get(&self) -> Result<Arc<HostMap>, crate::compute_api::error::ApiError> {
        let mut c = self.cached.lock().await;
        if let Some((at, m)) = c.as_ref() {
            if at.elapsed() < self.ttl {
                return Ok(m.clone());
            }
        }
        let m = Arc::new(self.load().await?);
        *c = Some((Instant::now(), m.clone()));
        Ok(m)
    }

    /// Forgets the cached map and zones (an operator changed an aggregate
    /// or a service).
    pub async fn invalidate(&self) {
        *self.cached.lock().await = None;
        *self.zones.lock().await = None;
    }

    /// The zones of hosts (reloaded when older than the ttl; one statement,
    /// the aggregates' `availability_zone` keys). Every server show and
    /// list shows its host's zone as it is now; cached, a show reads no
    /// aggregate. A zone change made through this process shows at once
    /// ([`invalidate`](Self::invalidate)); one made through another API
    /// process within the ttl. The lock is held across the load, so an
    /// invalidation waits for a load in progress and then clears it.
    pub async fn zones(&self) -> Result<Arc<HostZones>, crate::compute_api::error::ApiError> {
        let mut c = self.zones.lock().await;
        if let Some((at, z)) = c.as_ref() {
            if at.elapsed() < self.ttl {
                return Ok(z.clone());
            }
        }
        let z: Arc<HostZones> = Arc::new(self.db.host_zones().await?.into_iter().collect());
        *c = Some((Instant::now(), z.clone()));
        Ok(z)
    }

    async fn load(&self) -> Result<HostMap, crate::compute_api::error::ApiError> {
        let mappings = self.db.api().hosts(None).await?;
        let host_cell: HashMap<String, fabric::ids::CellUuid> = mappings
            .into_iter()
            .map(|h| (h.host, h.cell_uuid))
            .collect();
        let zones = self.zones().await?;
        let mut metadata: HashMap<String, BTreeMap<String, BTreeSet<String>>> = HashMap::new();
        for agg in self.db.api().aggregates(None).await? {
            for h in &agg.hosts {
                let m = metadata.entry(h.clone()).or_default();
                for (k, v) in &agg.metadata {
                    m.entry(k.clone()).or_default().insert(v.clone());
                }
            }
        }
        let snapshot = self.cells.cache().snapshot();
        let cells: Vec<CellMapping> = snapshot.schedulable().cloned().collect();
        let loads = cells.into_iter().map(|cell| {
            let cells = self.cells.clone();
            async move {
                let db = cells.db(&cell).await;
                let rows = match db {
                    Ok(db) => db.compute_hosts().await.map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                (cell, rows)
            }
        });
        let now = Utc::now();
        let down = chrono::Duration::from_std(self.service_down).unwrap_or(chrono::Duration::MAX);
        let mut out = HostMap::default();
        for (cell, rows) in futures_util::future::join_all(loads).await {
            let rows = match rows {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(cell = %cell.uuid, error = %e, "cell unreachable: its hosts are not schedulable");
                    continue;
                }
            };
            for r in rows {
                // Only hosts mapped to this very cell are schedulable.
                if host_cell.get(&r.host) != Some(&cell.uuid) {
                    continue;
                }
                let aggregate_metadata = metadata.get(&r.host).cloned().unwrap_or_default();
                let failed_builds = r.failed_builds();
                let supported_instances = r.supported_instances();
                let up = !r.forced_down && r.last_seen_up.is_some_and(|t| now - t <= down);
                out.by_provider.insert(
                    r.uuid.clone(),
                    Arc::new(HostInfo {
                        availability_zone: zones
                            .get(&r.host)
                            .cloned()
                            .unwrap_or_else(|| self.default_az.clone()),
                        host: r.host,
                        node: r.hypervisor_hostname,
                        provider: r.uuid,
                        cell: cell.clone(),
                        service_up: up,
                        service_disabled: r.disabled,
                        aggregate_metadata,
                        failed_builds,
                        hypervisor_version: r.hypervisor_version,
                        supported_instances,
                    }),
                );
            }
        }
        Ok(out)
    }
}
