//! What the scheduler knows about compute hosts besides placement: which
//! cell each host is mapped to (API DB `host_mappings`), its compute service
//! (up, enabled: the cell databases' `services`) and node (provider uuid =
//! compute node uuid), its recent build failures (the node's `stats`), its
//! availability zone (the `availability_zone`
//! metadata of its aggregates, else the default zone), the metadata of
//! its aggregates (for `AggregateInstanceExtraSpecsFilter`) and the guests
//! its hypervisor runs (for `ImagePropertiesFilter`).
//! Loaded from every enabled cell in parallel and cached for a short time.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cell_mapping::CellMapping;
use chrono::Utc;

use super::source::{HostSource, HostStateError};
use crate::cells::Cells;

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
    /// The compute service is forced down (`os-services`, 2.11).
    pub service_forced_down: bool,
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

impl HostInfo {
    /// Whether this is the named host and node (`None` names any): a
    /// requested destination, a forced host, the tree placement is asked
    /// for.
    pub fn is_named(&self, host: Option<&str>, node: Option<&str>) -> bool {
        host.is_none_or(|h| self.host == h) && node.is_none_or(|n| self.node == n)
    }
}

/// Host information by provider uuid, indexed by service host, by node
/// and by available zone: a server view's `host_status`, the create's
/// zone and requested-host checks and the scheduler's named tree each
/// look one host up rather than scan the fleet (10,000 entries at 10,000
/// hypervisors). Built whole ([`FromIterator`]) and never changed after.
#[derive(Debug, Clone, Default)]
pub struct HostMap {
    /// By provider uuid (shared with the candidates made from them).
    by_provider: HashMap<String, Arc<HostInfo>>,
    /// The nodes of each service host.
    by_host: HashMap<String, Vec<Arc<HostInfo>>>,
    /// The providers of each node name.
    by_node: HashMap<String, Vec<Arc<HostInfo>>>,
    /// Zones with at least one enabled compute service.
    available_zones: HashSet<String>,
}

impl FromIterator<Arc<HostInfo>> for HostMap {
    fn from_iter<I: IntoIterator<Item = Arc<HostInfo>>>(iter: I) -> Self {
        let mut m = HostMap::default();
        for h in iter {
            m.by_host
                .entry(h.host.clone())
                .or_default()
                .push(Arc::clone(&h));
            m.by_node
                .entry(h.node.clone())
                .or_default()
                .push(Arc::clone(&h));
            if !h.service_disabled && !m.available_zones.contains(&h.availability_zone) {
                m.available_zones.insert(h.availability_zone.clone());
            }
            m.by_provider.insert(h.provider.clone(), h);
        }
        m
    }
}

impl HostMap {
    /// Every node, by provider uuid.
    pub fn by_provider(&self) -> &HashMap<String, Arc<HostInfo>> {
        &self.by_provider
    }

    /// The node of placement provider `provider`.
    pub fn get(&self, provider: &str) -> Option<&Arc<HostInfo>> {
        self.by_provider.get(provider)
    }

    /// The nodes of service host `host` (none when unknown).
    pub fn nodes_of(&self, host: &str) -> &[Arc<HostInfo>] {
        self.by_host
            .get(host)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The nodes that are the named host and node (`None` names any; both
    /// `None`: every node), found by index.
    pub fn named<'a: 'b, 'b>(
        &'a self,
        host: Option<&'b str>,
        node: Option<&'b str>,
    ) -> impl Iterator<Item = &'a Arc<HostInfo>> + 'b {
        let (indexed, all) = match (host, node) {
            (Some(h), _) => (Some(self.nodes_of(h)), None),
            (None, Some(n)) => (
                Some(self.by_node.get(n).map(Vec::as_slice).unwrap_or_default()),
                None,
            ),
            (None, None) => (None, Some(self.by_provider.values())),
        };
        indexed
            .into_iter()
            .flatten()
            .chain(all.into_iter().flatten())
            .filter(move |h| h.is_named(host, node))
    }

    /// Whether zone `az` has an enabled compute service (Nova's test of an
    /// available zone).
    pub fn zone_available(&self, az: &str) -> bool {
        self.available_zones.contains(az)
    }
}

/// The cached loader.
#[derive(Debug)]
pub struct HostStateCache {
    source: Arc<dyn HostSource>,
    cells: Cells,
    ttl: Duration,
    service_down: Duration,
    default_az: String,
    cached: Reloading<HostMap>,
    zones: Reloading<HostZones>,
}

/// A value loaded at most once per ttl by whoever asks first after it
/// expired; while that caller reloads it, everyone else is answered with
/// the value it replaces (for at most another ttl) instead of waiting.
/// Scheduling and server shows read the host map and zones on every
/// request; with a lock held across the reload (several statements, every
/// cell read) all of them stood still once per ttl. (The boot benchmark's
/// figures did not move with this; see docs/BENCHMARKS.md.)
///
/// [`invalidate`](Self::invalidate) forgets the value at once: callers
/// after it wait for a fresh load, and a load that started before it is
/// not kept (an epoch), though it still answers its own caller, who asked
/// before the change.
#[derive(Debug)]
struct Reloading<T> {
    slot: Mutex<Slot<T>>,
    /// Held by the one caller that is loading.
    loading: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Slot<T> {
    value: Option<(Instant, Arc<T>)>,
    /// Bumped by every invalidation.
    epoch: u64,
}

impl<T> Reloading<T> {
    fn new() -> Self {
        Self {
            slot: Mutex::new(Slot {
                value: None,
                epoch: 0,
            }),
            loading: tokio::sync::Mutex::new(()),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot<T>> {
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The value if younger than `ttl`; else the caller reloads it, unless
    /// another caller is doing so and the old value is younger than twice
    /// `ttl` (then the old value).
    async fn get<F, Fut>(&self, ttl: Duration, load: F) -> Result<Arc<T>, HostStateError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, HostStateError>>,
    {
        let stale = match &self.slot().value {
            Some((at, v)) if at.elapsed() < ttl => return Ok(v.clone()),
            Some((at, v)) if at.elapsed() < ttl.saturating_mul(2) => Some(v.clone()),
            _ => None,
        };
        let _loading = match stale {
            Some(v) => match self.loading.try_lock() {
                Ok(g) => g,
                Err(_) => return Ok(v),
            },
            None => self.loading.lock().await,
        };
        // A caller that held the lock before this one may have loaded it.
        let epoch = {
            let slot = self.slot();
            if let Some((at, v)) = &slot.value {
                if at.elapsed() < ttl {
                    return Ok(v.clone());
                }
            }
            slot.epoch
        };
        let started = Instant::now();
        let v = Arc::new(load().await?);
        let mut slot = self.slot();
        if slot.epoch == epoch {
            slot.value = Some((started, v.clone()));
        }
        Ok(v)
    }

    /// Forgets the value (see the type's documentation).
    fn invalidate(&self) {
        let mut slot = self.slot();
        slot.value = None;
        slot.epoch += 1;
    }
}

/// The zone of every host in an aggregate that names one (host → zone);
/// a host not in it is in the default zone.
pub type HostZones = HashMap<String, String>;

impl HostStateCache {
    /// A cache valid for `ttl`; a service is down after `service_down`
    /// without a heartbeat.
    pub fn new(
        source: Arc<dyn HostSource>,
        cells: Cells,
        ttl: Duration,
        service_down: Duration,
        default_az: String,
    ) -> Self {
        Self {
            source,
            cells,
            ttl,
            service_down,
            default_az,
            cached: Reloading::new(),
            zones: Reloading::new(),
        }
    }

    /// The current host map (reloaded when older than the ttl; while one
    /// caller reloads it, the others get the map it replaces).
    pub async fn get(&self) -> Result<Arc<HostMap>, HostStateError> {
        self.cached.get(self.ttl, || self.load()).await
    }

    /// Forgets the cached map and zones (an operator changed an aggregate
    /// or a service): every later caller waits for maps read after this.
    pub fn invalidate(&self) {
        self.cached.invalidate();
        self.zones.invalidate();
    }

    /// The zones of hosts (reloaded when older than the ttl, as the map;
    /// one statement, the aggregates' `availability_zone` keys). Every
    /// server show and list shows its host's zone as it is now; cached, a
    /// show reads no aggregate. A zone change made through this process
    /// shows at once ([`invalidate`](Self::invalidate)); one made through
    /// another API process within the ttl.
    pub async fn zones(&self) -> Result<Arc<HostZones>, HostStateError> {
        self.zones
            .get(self.ttl, || async {
                let zones = self.source.host_zones().await;
                Ok(zones
                    .map_err(HostStateError::reading("host zones"))?
                    .into_iter()
                    .collect())
            })
            .await
    }

    async fn load(&self) -> Result<HostMap, HostStateError> {
        let host_cell: HashMap<String, fabric::ids::CellUuid> = self
            .source
            .host_cells()
            .await
            .map_err(HostStateError::reading("host mappings"))?
            .into_iter()
            .collect();
        let zones = self.zones().await?;
        let mut metadata: HashMap<String, BTreeMap<String, BTreeSet<String>>> = HashMap::new();
        let aggregates = self.source.aggregates().await;
        for agg in aggregates.map_err(HostStateError::reading("aggregates"))? {
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
        let mut out = Vec::new();
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
                out.push(Arc::new(HostInfo {
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
                    service_forced_down: r.forced_down,
                    aggregate_metadata,
                    failed_builds,
                    hypervisor_version: r.hypervisor_version,
                    supported_instances,
                }));
            }
        }
        Ok(out.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    const TTL: Duration = Duration::from_millis(200);

    /// Loads count up; each load waits for `gate` when given.
    async fn load(
        n: &AtomicU32,
        gate: Option<tokio::sync::oneshot::Receiver<()>>,
    ) -> Result<u32, HostStateError> {
        let v = n.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(g) = gate {
            g.await.expect("gate");
        }
        Ok(v)
    }

    type Shared = (Arc<Reloading<u32>>, Arc<AtomicU32>);

    /// A caller of `get` in a task of its own; with a gate, a load it
    /// starts waits for the gate.
    fn spawn_get(
        (r, n): &Shared,
        gate: Option<tokio::sync::oneshot::Receiver<()>>,
    ) -> tokio::task::JoinHandle<u32> {
        let (r, n) = (r.clone(), n.clone());
        tokio::spawn(async move { *r.get(TTL, || load(&n, gate)).await.unwrap() })
    }

    /// Waits until `k` loads have started.
    async fn loads_started((_, n): &Shared, k: u32) {
        while n.load(Ordering::SeqCst) < k {
            tokio::task::yield_now().await;
        }
    }

    fn shared() -> Shared {
        (Arc::new(Reloading::new()), Arc::new(AtomicU32::new(0)))
    }

    #[tokio::test]
    async fn a_reload_holds_up_only_its_own_caller_and_an_invalidation_wins_over_it() {
        let sh = shared();
        let (r, n) = &sh;
        assert_eq!(*r.get(TTL, || load(n, None)).await.unwrap(), 1);
        // Fresh: no load.
        assert_eq!(*r.get(TTL, || load(n, None)).await.unwrap(), 1);
        assert_eq!(n.load(Ordering::SeqCst), 1);

        // Expired: the first caller reloads (held at the gate) ...
        tokio::time::sleep(TTL).await;
        let (open, gate) = tokio::sync::oneshot::channel();
        let reloading = spawn_get(&sh, Some(gate));
        loads_started(&sh, 2).await;
        // ... and everyone else gets the old value at once, loading nothing.
        let old = tokio::time::timeout(Duration::from_secs(5), r.get(TTL, || load(n, None)))
            .await
            .expect("not held up by the reload");
        assert_eq!(*old.unwrap(), 1);
        assert_eq!(n.load(Ordering::SeqCst), 2);
        open.send(()).unwrap();
        assert_eq!(reloading.await.unwrap(), 2);
        assert_eq!(*r.get(TTL, || load(n, None)).await.unwrap(), 2);

        // An invalidation during a load: the load answers its caller but
        // is not kept; the next caller loads again.
        r.invalidate();
        let (open, gate) = tokio::sync::oneshot::channel();
        let before = spawn_get(&sh, Some(gate));
        loads_started(&sh, 3).await;
        r.invalidate();
        open.send(()).unwrap();
        assert_eq!(before.await.unwrap(), 3);
        assert_eq!(*r.get(TTL, || load(n, None)).await.unwrap(), 4);
        assert_eq!(*r.get(TTL, || load(n, None)).await.unwrap(), 4);
    }

    #[tokio::test]
    async fn with_nothing_or_a_value_older_than_twice_the_ttl_callers_wait_for_the_load() {
        let sh = shared();
        let (_, n) = &sh;
        // Nothing yet: a second caller waits for the first one's load and
        // takes its value.
        let (open, gate) = tokio::sync::oneshot::channel();
        let first = spawn_get(&sh, Some(gate));
        loads_started(&sh, 1).await;
        let second = spawn_get(&sh, None);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!second.is_finished(), "waits for the load in progress");
        open.send(()).unwrap();
        assert_eq!(first.await.unwrap(), 1);
        assert_eq!(second.await.unwrap(), 1);

        // Too old to stand in: a caller waits for the reload in progress.
        tokio::time::sleep(TTL * 2).await;
        let (open, gate) = tokio::sync::oneshot::channel();
        let reload = spawn_get(&sh, Some(gate));
        loads_started(&sh, 2).await;
        let waiting = spawn_get(&sh, None);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "a value older than twice the ttl is not served"
        );
        open.send(()).unwrap();
        assert_eq!(reload.await.unwrap(), 2);
        assert_eq!(waiting.await.unwrap(), 2);
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }
}
