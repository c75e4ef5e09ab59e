//! api-super's reach into the cells: the cell-mapping cache
//! ([`cell_mapping::CellCache`], sees new and disabled cells within
//! seconds) and, per cell, a database pool and a bus connection, opened on
//! first use and cached (re-opened when the cell's URLs change).
//!
//! **Down cells.** A cell whose database does not answer — its pool cannot
//! be opened, a read fails with a connection-level error
//! ([`cell_mapping::Error::is_unreachable`]) or does not finish within
//! [`CellLiveness::read_timeout`] — is marked down. While it is down,
//! [`Cells::db`] and [`Cells::read`] fail at once with [`CellDown`] instead
//! of waiting on the pool (whose acquire retries a refused connection
//! until its own timeout), except that one caller per
//! [`CellLiveness::probe_interval`] probes it with a single direct
//! connection attempt; the first probe that connects marks it up again.
//! The transitions are logged (warning when it goes down, naming the cell
//! and the cause; info when it is back) and counted in
//! [`CELLS_DOWN_TOTAL`] / [`CELLS_DOWN`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cell_mapping::{CellCache, CellDb, CellMapping};
use fabric::bus::Transport;
use fabric::ids::CellUuid;
use tokio::sync::Mutex as AsyncMutex;

/// Counter: a cell was marked down (one per outage).
pub const CELLS_DOWN_TOTAL: &str = "api_cells_down_total";
/// Gauge: cells marked down now.
pub const CELLS_DOWN: &str = "api_cells_down";

/// A cell that does not answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cell {cell} ({name}) is not responding: {reason}")]
pub struct CellDown {
    /// The cell.
    pub cell: CellUuid,
    /// Its name (empty when it has none).
    pub name: String,
    /// Why it is considered down (the first failure of this outage, or
    /// the last failed probe), one line, passwords masked.
    pub reason: String,
}

/// Why a cell could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    /// Its database does not answer.
    #[error(transparent)]
    Down(CellDown),
    /// A statement on its database failed (the database answered).
    #[error("a statement on the database of cell {0} failed")]
    Query(CellUuid, #[source] cell_mapping::Error),
    /// Its bus.
    #[error("cannot connect to the bus of cell {0}")]
    Bus(CellUuid, #[source] fabric::bus::BusError),
}

/// How long the Compute API waits on a cell, and how often it tries a
/// cell that is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellLiveness {
    /// Longest wait for one read of a cell (opening its pool included).
    pub read_timeout: Duration,
    /// While a cell is down, how often it is probed (in the background).
    pub probe_interval: Duration,
}

impl Default for CellLiveness {
    fn default() -> Self {
        Self {
            read_timeout: Duration::from_secs(5),
            probe_interval: Duration::from_secs(1),
        }
    }
}

#[derive(Clone)]
struct DbEntry {
    url: String,
    db: CellDb,
}

#[derive(Clone)]
struct BusEntry {
    url: String,
    bus: Arc<dyn Transport>,
}

/// A cell marked down.
#[derive(Debug)]
struct Outage {
    /// The database URL it was marked down with (a changed URL ends it).
    url: String,
    since: Instant,
    reason: String,
    next_probe: Instant,
    probing: bool,
}

/// A lock per cell and kind of connection being opened.
type OpenLocks = Arc<Mutex<HashMap<(CellUuid, bool), Arc<AsyncMutex<()>>>>>;

/// Connections to every cell.
#[derive(Clone)]
pub struct Cells {
    cache: CellCache,
    liveness: CellLiveness,
    dbs: Arc<Mutex<HashMap<CellUuid, DbEntry>>>,
    buses: Arc<Mutex<HashMap<CellUuid, BusEntry>>>,
    outages: Arc<Mutex<HashMap<CellUuid, Outage>>>,
    /// One opening at a time per cell and kind (`true`: its database,
    /// `false`: its bus), so a cell that hangs does not hold up the others.
    opening: OpenLocks,
}

impl std::fmt::Debug for Cells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cells").finish_non_exhaustive()
    }
}

fn name_of(cell: &CellMapping) -> String {
    cell.name.clone().unwrap_or_default()
}

impl Cells {
    /// Connections through `cache`, with the default [`CellLiveness`].
    pub fn new(cache: CellCache) -> Self {
        Self::with_liveness(cache, CellLiveness::default())
    }

    /// Connections through `cache`.
    pub fn with_liveness(cache: CellCache, liveness: CellLiveness) -> Self {
        Self {
            cache,
            liveness,
            dbs: Arc::default(),
            buses: Arc::default(),
            outages: Arc::default(),
            opening: Arc::default(),
        }
    }

    /// The cell-mapping cache.
    pub fn cache(&self) -> &CellCache {
        &self.cache
    }

    /// The timeouts in use.
    pub fn liveness(&self) -> CellLiveness {
        self.liveness
    }

    /// Every cell mapping (cell0 included).
    pub fn all(&self) -> Vec<CellMapping> {
        self.cache.snapshot().all().to_vec()
    }

    /// The cell with row id `id`.
    pub fn by_id(&self, id: i64) -> Option<CellMapping> {
        self.cache.snapshot().by_id(id).cloned()
    }

    /// cell0.
    pub fn cell0(&self) -> Option<CellMapping> {
        self.cache
            .snapshot()
            .all()
            .iter()
            .find(|c| c.is_cell0())
            .cloned()
    }

    fn lock_outages(&self) -> std::sync::MutexGuard<'_, HashMap<CellUuid, Outage>> {
        self.outages.lock().expect("cells lock")
    }

    /// `Err` while `cell` is marked down; when a probe is due, starts one
    /// in the background (the caller does not wait for it).
    fn gate(&self, cell: &CellMapping) -> Result<(), CellDown> {
        let mut outages = self.lock_outages();
        let Some(o) = outages.get_mut(&cell.uuid) else {
            return Ok(());
        };
        if o.url != cell.database_connection {
            // The mapping points elsewhere now: a new start.
            outages.remove(&cell.uuid);
            metrics::gauge!(CELLS_DOWN).decrement(1.0);
            return Ok(());
        }
        if !o.probing && Instant::now() >= o.next_probe {
            o.probing = true;
            let (cells, cell) = (self.clone(), cell.clone());
            tokio::spawn(async move { cells.probe(&cell).await });
        }
        Err(CellDown {
            cell: cell.uuid,
            name: name_of(cell),
            reason: o.reason.clone(),
        })
    }

    /// One direct connection attempt to the database of a cell marked
    /// down: up again when it connects.
    async fn probe(&self, cell: &CellMapping) {
        let res = cell_mapping::db::probe(
            "cell",
            &cell.database_connection,
            self.liveness.read_timeout,
        )
        .await;
        match res {
            Ok(()) => self.mark_up(cell),
            Err(e) => {
                self.mark_down(cell, e.one_line());
            }
        }
    }

    /// Marks `cell` down (or records a new reason while it is) and returns
    /// the error to answer with. A cell newly down loses its cached pool:
    /// connections that hang are not handed out again once it is back (a
    /// new pool is opened then).
    fn mark_down(&self, cell: &CellMapping, reason: String) -> CellDown {
        if self.note_down(cell, &reason) {
            let mut dbs = self.dbs.lock().expect("cells lock");
            if dbs
                .get(&cell.uuid)
                .is_some_and(|e| e.url == cell.database_connection)
            {
                dbs.remove(&cell.uuid);
            }
        }
        CellDown {
            cell: cell.uuid,
            name: name_of(cell),
            reason,
        }
    }

    /// Records the outage; true when the cell was not known down.
    fn note_down(&self, cell: &CellMapping, reason: &str) -> bool {
        let now = Instant::now();
        let mut outages = self.lock_outages();
        match outages.get_mut(&cell.uuid) {
            Some(o) if o.url == cell.database_connection => {
                o.probing = false;
                o.next_probe = now + self.liveness.probe_interval;
                tracing::debug!(cell = %cell.uuid, reason = %reason, "cell still not responding");
                reason.clone_into(&mut o.reason);
                false
            }
            old => {
                if old.is_none() {
                    metrics::gauge!(CELLS_DOWN).increment(1.0);
                }
                metrics::counter!(CELLS_DOWN_TOTAL).increment(1);
                tracing::warn!(
                    cell = %cell.uuid,
                    cell_name = %name_of(cell),
                    reason = %reason,
                    "cell database not responding: the cell is treated as down (its servers \
                     are left out of server lists, or shown as partial records from \
                     microversion 2.69) until it answers again"
                );
                outages.insert(
                    cell.uuid,
                    Outage {
                        url: cell.database_connection.clone(),
                        since: now,
                        reason: reason.to_owned(),
                        next_probe: now + self.liveness.probe_interval,
                        probing: false,
                    },
                );
                true
            }
        }
    }

    fn mark_up(&self, cell: &CellMapping) {
        if let Some(o) = self.lock_outages().remove(&cell.uuid) {
            metrics::gauge!(CELLS_DOWN).decrement(1.0);
            tracing::info!(
                cell = %cell.uuid,
                cell_name = %name_of(cell),
                down_for_ms = o.since.elapsed().as_millis() as u64,
                "cell database answers again"
            );
        }
    }

    /// The database of `cell`; [`CellError::Down`] at once while the cell
    /// is marked down, and when its pool cannot be opened within the read
    /// timeout.
    pub async fn db(&self, cell: &CellMapping) -> Result<CellDb, CellError> {
        self.gate(cell).map_err(CellError::Down)?;
        if let Some(db) = self.cached_db(cell) {
            return Ok(db);
        }
        let lock = self.opening_lock(cell, true);
        let _one = lock.lock().await;
        if let Some(db) = self.cached_db(cell) {
            return Ok(db);
        }
        let opened = tokio::time::timeout(
            self.liveness.read_timeout,
            CellDb::open(&cell.database_connection),
        )
        .await;
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(e)) => return Err(CellError::Down(self.mark_down(cell, e.one_line()))),
            Err(_) => {
                let reason = format!(
                    "cannot open its database within {} ms",
                    self.liveness.read_timeout.as_millis()
                );
                return Err(CellError::Down(self.mark_down(cell, reason)));
            }
        };
        self.dbs.lock().expect("cells lock").insert(
            cell.uuid,
            DbEntry {
                url: cell.database_connection.clone(),
                db: db.clone(),
            },
        );
        Ok(db)
    }

    fn opening_lock(&self, cell: &CellMapping, db: bool) -> Arc<AsyncMutex<()>> {
        self.opening
            .lock()
            .expect("cells lock")
            .entry((cell.uuid, db))
            .or_default()
            .clone()
    }

    fn cached_db(&self, cell: &CellMapping) -> Option<CellDb> {
        self.dbs
            .lock()
            .expect("cells lock")
            .get(&cell.uuid)
            .filter(|e| e.url == cell.database_connection)
            .map(|e| e.db.clone())
    }

    /// Runs `read` on the database of `cell`, bounded by the read timeout.
    /// A cell that is down, a read that does not finish in time and a
    /// connection-level failure are [`CellError::Down`] (the cell is marked
    /// down); any other failure of the statement is [`CellError::Query`].
    pub async fn read<T, F, Fut>(&self, cell: &CellMapping, read: F) -> Result<T, CellError>
    where
        F: FnOnce(CellDb) -> Fut,
        Fut: Future<Output = Result<T, cell_mapping::Error>>,
    {
        let db = self.db(cell).await?;
        match tokio::time::timeout(self.liveness.read_timeout, read(db)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) if e.is_unreachable() => {
                Err(CellError::Down(self.mark_down(cell, e.one_line())))
            }
            Ok(Err(e)) => Err(CellError::Query(cell.uuid, e)),
            Err(_) => {
                let reason = format!(
                    "no answer within {} ms",
                    self.liveness.read_timeout.as_millis()
                );
                Err(CellError::Down(self.mark_down(cell, reason)))
            }
        }
    }

    /// Closes every cell bus opened so far (at shutdown, so that no broker
    /// connection is left to fail while the runtime stops).
    pub async fn close_buses(&self) {
        let buses: Vec<BusEntry> = self
            .buses
            .lock()
            .expect("cells lock")
            .drain()
            .map(|(_, e)| e)
            .collect();
        for e in buses {
            e.bus.close().await;
        }
    }

    /// The bus of `cell`.
    pub async fn bus(&self, cell: &CellMapping) -> Result<Arc<dyn Transport>, CellError> {
        if let Some(e) = self.buses.lock().expect("cells lock").get(&cell.uuid) {
            if e.url == cell.transport_url {
                return Ok(e.bus.clone());
            }
        }
        let lock = self.opening_lock(cell, false);
        let _one = lock.lock().await;
        if let Some(e) = self.buses.lock().expect("cells lock").get(&cell.uuid) {
            if e.url == cell.transport_url {
                return Ok(e.bus.clone());
            }
        }
        let bus = fabric::bus::connect(&cell.transport_url)
            .await
            .map_err(|e| CellError::Bus(cell.uuid, e))?;
        self.buses.lock().expect("cells lock").insert(
            cell.uuid,
            BusEntry {
                url: cell.transport_url.clone(),
                bus: bus.clone(),
            },
        );
        Ok(bus)
    }
}
