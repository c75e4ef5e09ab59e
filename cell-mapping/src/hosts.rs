//! Host mappings: listing and deleting (discovery is in [`crate::discover`]).

use fabric::ids::CellUuid;

use crate::db::{ApiDb, CellDb, HostMapping};
use crate::Error;

/// Host mappings of one cell (unknown cell: [`Error::CellNotFound`]) or all.
pub async fn list_hosts(api: &ApiDb, cell: Option<&CellUuid>) -> Result<Vec<HostMapping>, Error> {
    let cell_id = match cell {
        Some(u) => Some(api.cell_required(u).await?.id),
        None => None,
    };
    api.hosts(cell_id).await
}

/// Deletes the mapping of `host` in the cell, as upstream: refused when the
/// cell or the host is unknown, the host is in another cell, or live
/// instances are on it. The host's compute nodes are marked unmapped so a
/// later discovery can map it again.
pub async fn delete_host(api: &ApiDb, cell: &CellUuid, host: &str) -> Result<(), Error> {
    let cell = api.cell_required(cell).await?;
    let Some(cell_id) = api.host_cell(host).await? else {
        return Err(Error::HostNotFound(host.to_owned()));
    };
    if cell_id != cell.id {
        return Err(Error::HostInOtherCell {
            host: host.to_owned(),
            cell: cell.uuid,
        });
    }
    let db = CellDb::open(&cell.database_connection).await?;
    let res = async {
        let live = db.count_live_instances(Some(host)).await?;
        if live > 0 {
            return Err(Error::HostHasInstances(live, host.to_owned()));
        }
        db.unmap(Some(host)).await?;
        Ok(())
    }
    .await;
    db.close().await;
    res?;
    if !api.delete_host(cell.id, host).await? {
        return Err(Error::HostNotFound(host.to_owned()));
    }
    Ok(())
}
