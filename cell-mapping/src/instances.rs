//! Instance mappings: `map-instances` and `verify-instance`.

use fabric::ids::CellUuid;

use crate::db::{ApiDb, CellDb, CellMapping, InstanceMappingState};
use crate::Error;

/// Batch size when no `--max-count` is given (as upstream).
pub const DEFAULT_BATCH: i64 = 50;

/// The outcome of [`map_instances`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapInstances {
    /// Instance rows looked at.
    pub scanned: u64,
    /// Mappings created.
    pub mapped: u64,
    /// Whether instances remain (a marker was stored; run again).
    pub more: bool,
}

/// Maps the instances of a cell database (deleted ones too, as upstream)
/// that have no mapping yet, oldest first. With `max_count`, looks at that
/// many and stores a marker so the next run continues there; without, maps
/// all in batches of [`DEFAULT_BATCH`]. `reset` ignores a stored marker.
pub async fn map_instances(
    api: &ApiDb,
    cell: &CellUuid,
    max_count: Option<i64>,
    reset: bool,
) -> Result<MapInstances, Error> {
    let cell = api.cell_required(cell).await?;
    let db = CellDb::open(&cell.database_connection).await?;
    let res = map_with(api, &db, &cell, max_count, reset).await;
    db.close().await;
    res
}

async fn map_with(
    api: &ApiDb,
    db: &CellDb,
    cell: &CellMapping,
    max_count: Option<i64>,
    reset: bool,
) -> Result<MapInstances, Error> {
    let batch = max_count.unwrap_or(DEFAULT_BATCH).max(1);
    let stored = api.take_map_marker().await?;
    let mut marker = if reset { None } else { stored };
    let mut out = MapInstances {
        scanned: 0,
        mapped: 0,
        more: false,
    };
    loop {
        let rows = db.instances_after(marker.as_deref(), batch).await?;
        out.scanned += rows.len() as u64;
        out.mapped += api.map_instances(cell.id, &rows).await?;
        let full = rows.len() as i64 == batch;
        marker = rows.last().map(|r| r.uuid.clone());
        if !full {
            return Ok(out);
        }
        if max_count.is_some() {
            if let Some(m) = &marker {
                api.set_map_marker(m).await?;
                out.more = true;
            }
            return Ok(out);
        }
    }
}

/// Where an instance stands (upstream's verify_instance outcomes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// Mapped to a cell where it lives (exit 0).
    Mapped(CellMapping),
    /// No instance mapping (exit 1).
    NotMapped,
    /// A mapping without a cell yet: being scheduled (exit 2).
    NoCell,
    /// Mapped; soft-deleted in its cell (exit 3).
    Deleted(CellMapping),
    /// Mapped; no row in its cell any more (archived) (exit 4).
    Archived(CellMapping),
}

/// Verifies the instance mapping of `uuid`.
pub async fn verify_instance(api: &ApiDb, uuid: &str) -> Result<Verified, Error> {
    let cell = match api.instance_mapping(uuid).await? {
        InstanceMappingState::Missing => return Ok(Verified::NotMapped),
        InstanceMappingState::NoCell => return Ok(Verified::NoCell),
        InstanceMappingState::Cell(c) => c,
    };
    let db = CellDb::open(&cell.database_connection).await?;
    let deleted = db.instance_deleted(uuid).await;
    db.close().await;
    Ok(match deleted? {
        Some(false) => Verified::Mapped(cell),
        Some(true) => Verified::Deleted(cell),
        None => Verified::Archived(cell),
    })
}
