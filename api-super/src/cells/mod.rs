//! api-super's reach into the cells: the cell-mapping cache
//! ([`cell_mapping::CellCache`], sees new and disabled cells within
//! seconds) and, per cell, a database pool and a bus connection, opened on
//! first use and cached (re-opened when the cell's URLs change).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cell_mapping::{CellCache, CellDb, CellMapping};
use fabric::bus::Transport;
use fabric::ids::CellUuid;
use tokio::sync::Mutex as AsyncMutex;

/// Why a cell could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    /// Its database.
    #[error("cannot open the database of cell {0}")]
    Db(CellUuid, #[source] cell_mapping::Error),
    /// Its bus.
    #[error("cannot connect to the bus of cell {0}")]
    Bus(CellUuid, #[source] fabric::bus::BusError),
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

/// Connections to every cell.
#[derive(Clone)]
pub struct Cells {
    cache: CellCache,
    dbs: Arc<Mutex<HashMap<CellUuid, DbEntry>>>,
    buses: Arc<Mutex<HashMap<CellUuid, BusEntry>>>,
    opening: Arc<AsyncMutex<()>>,
}

impl std::fmt::Debug for Cells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cells").finish_non_exhaustive()
    }
}

impl Cells {
    /// Connections through `cache`.
    pub fn new(cache: CellCache) -> Self {
        Self {
            cache,
            dbs: Arc::default(),
            buses: Arc::default(),
            opening: Arc::default(),
        }
    }

    /// The cell-mapping cache.
    pub fn cache(&self) -> &CellCache {
        &self.cache
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

    /// The database of `cell`.
    pub async fn db(&self, cell: &CellMapping) -> Result<CellDb, CellError> {
        if let Some(e) = self.dbs.lock().expect("cells lock").get(&cell.uuid) {
            if e.url == cell.database_connection {
                return Ok(e.db.clone());
            }
        }
        let _one = self.opening.lock().await;
        if let Some(e) = self.dbs.lock().expect("cells lock").get(&cell.uuid) {
            if e.url == cell.database_connection {
                return Ok(e.db.clone());
            }
        }
        let db = CellDb::open(&cell.database_connection)
            .await
            .map_err(|e| CellError::Db(cell.uuid, e))?;
        self.dbs.lock().expect("cells lock").insert(
            cell.uuid,
            DbEntry {
                url: cell.database_connection.clone(),
                db: db.clone(),
            },
        );
        Ok(db)
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
        let _one = self.opening.lock().await;
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
