//! The cell-mapping cache api-super reads cells through.
//!
//! Upstream Nova's scheduler caches cell mappings until restarted or sent
//! SIGHUP. Here a background task polls a cheap change marker of
//! `cell_mappings` (row count, highest id, latest `updated_at`) every
//! [`CacheConfig::refresh_interval_ms`] and reloads the (small) table only
//! when the marker moved, so a new, changed, disabled or deleted cell is seen
//! within one interval, with no restart and no signal.
//!
//! Lookups are cheap: [`CellCache::snapshot`] clones an `Arc` out of a
//! `tokio::sync::watch` channel (a short read lock, never held across an
//! await). A refresh that fails keeps the last good snapshot and retries on
//! the next tick.
//!
//! What a disabled cell means for callers: it is absent from
//! [`CellSnapshot::schedulable`] (no new builds go there) but still found by
//! [`CellSnapshot::get`] (its instances keep working).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::ids::CellUuid;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::db::{ApiDb, CellMapping};
use crate::Error;

/// Cache settings (api-super's `[cell_cache]` section).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// How often the change marker is polled, in milliseconds.
    pub refresh_interval_ms: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            refresh_interval_ms: 2000,
        }
    }
}

/// One consistent view of every cell mapping.
#[derive(Debug)]
pub struct CellSnapshot {
    cells: Vec<CellMapping>,
    by_uuid: HashMap<CellUuid, usize>,
    /// Increases with every reload that saw a change.
    pub generation: u64,
    /// When this snapshot was loaded.
    pub loaded_at: Instant,
}

impl CellSnapshot {
    fn new(cells: Vec<CellMapping>, generation: u64) -> Self {
        let by_uuid = cells.iter().enumerate().map(|(i, c)| (c.uuid, i)).collect();
        Self {
            cells,
            by_uuid,
            generation,
            loaded_at: Instant::now(),
        }
    }

    /// The cell with this UUID, enabled or not (instances in a disabled
    /// cell keep working).
    pub fn get(&self, uuid: &CellUuid) -> Option<&CellMapping> {
        self.by_uuid.get(uuid).map(|&i| &self.cells[i])
    }

    /// The cell with this database id.
    pub fn by_id(&self, id: i64) -> Option<&CellMapping> {
        self.cells.iter().find(|c| c.id == id)
    }

    /// Every cell, cell0 included, by id.
    pub fn all(&self) -> &[CellMapping] {
        &self.cells
    }

    /// The cells new builds may go to: enabled, not cell0.
    pub fn schedulable(&self) -> impl Iterator<Item = &CellMapping> {
        self.cells.iter().filter(|c| !c.disabled && !c.is_cell0())
    }
}

/// Aborts the refresh task when the last cache handle is dropped.
#[derive(Debug)]
struct Refresher(tokio::task::JoinHandle<()>);

impl Drop for Refresher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The cell-mapping cache. Cheap to clone; the refresh task stops when the
/// last clone is dropped.
#[derive(Debug, Clone)]
pub struct CellCache {
    rx: watch::Receiver<Arc<CellSnapshot>>,
    _refresher: Arc<Refresher>,
}

type Marker = (i64, Option<i64>, Option<String>);

impl CellCache {
    /// Loads every cell mapping (failing if the API database cannot be
    /// read) and starts the refresh task.
    pub async fn start(api: ApiDb, config: CacheConfig) -> Result<CellCache, Error> {
        let marker = api.cells_marker().await?;
        let cells = api.cells().await?;
        let (tx, rx) = watch::channel(Arc::new(CellSnapshot::new(cells, 0)));
        let interval = Duration::from_millis(config.refresh_interval_ms.max(10));
        let task = tokio::spawn(refresh_loop(api, tx, marker, interval));
        Ok(CellCache {
            rx,
            _refresher: Arc::new(Refresher(task)),
        })
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<CellSnapshot> {
        self.rx.borrow().clone()
    }

    /// The cell with this UUID (enabled or not).
    pub fn get(&self, uuid: &CellUuid) -> Option<CellMapping> {
        self.rx.borrow().get(uuid).cloned()
    }

    /// Waits for the next snapshot that differs from the one last seen by
    /// this handle.
    pub async fn changed(&mut self) -> Arc<CellSnapshot> {
        let _ = self.rx.changed().await;
        self.rx.borrow_and_update().clone()
    }
}

async fn refresh_loop(
    api: ApiDb,
    tx: watch::Sender<Arc<CellSnapshot>>,
    mut marker: Marker,
    interval: Duration,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut generation = 0;
    loop {
        tick.tick().await;
        let res: Result<Option<Vec<CellMapping>>, Error> = async {
            let now = api.cells_marker().await?;
            if now == marker {
                return Ok(None);
            }
            let cells = api.cells().await?;
            marker = now;
            Ok(Some(cells))
        }
        .await;
        match res {
            Ok(None) => {}
            Ok(Some(cells)) => {
                generation += 1;
                metrics::counter!(crate::metrics::CACHE_RELOADS).increment(1);
                tracing::debug!(cells = cells.len(), generation, "cell mappings changed");
                tx.send_replace(Arc::new(CellSnapshot::new(cells, generation)));
            }
            Err(e) => {
                metrics::counter!(crate::metrics::CACHE_ERRORS).increment(1);
                tracing::warn!(error = %e.one_line(), "cannot refresh the cell-mapping cache; keeping the last snapshot");
            }
        }
    }
}
