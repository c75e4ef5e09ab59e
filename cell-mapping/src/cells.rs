//! Cell onboarding and life cycle: map cell0, create, update, delete.
//! Each function validates everything it can before its single API-database
//! write (or its one transaction), so a refusal leaves nothing half-written.

use fabric::ids::{CellUuid, CELL0_UUID};

use crate::db::{ApiDb, CellDb, CellMapping};
use crate::url::CELL0_TRANSPORT_URL;
use crate::url::{mask, validate_database_url, validate_transport_url, TransportKind};
use crate::Error;

/// Parses a cell UUID given by an operator; anything that is not a UUID is
/// a cell that cannot be found.
pub fn parse_cell_uuid(s: &str) -> Result<CellUuid, Error> {
    s.parse().map_err(|_| Error::CellNotFound(s.to_owned()))
}

/// Makes sure the broker at `url` answers (RabbitMQ: one connection, then
/// closed). In-process and `none:///` URLs need no broker.
pub async fn check_broker(url: &str) -> Result<(), Error> {
    if validate_transport_url(url)? != TransportKind::Amqp {
        return Ok(());
    }
    let opts = fabric::bus::BusOptions {
        connection_name: "cell-manage".to_owned(),
        ..Default::default()
    };
    let bus = fabric::bus::connect_with(url, opts)
        .await
        .map_err(|source| Error::Broker {
            url: mask(url),
            source,
        })?;
    bus.close().await;
    Ok(())
}

/// Brings the cell database at `url` up to date; returns its version.
pub async fn migrate_cell_db(role: &'static str, url: &str) -> Result<i64, Error> {
    validate_database_url(url)?;
    migrations::migrate(migrations::Kind::Cell, url)
        .await
        .map(|a| a.version)
        .map_err(|source| Error::Migrate {
            role,
            url: mask(url),
            source,
        })
}

/// The outcome of [`map_cell0`].
#[derive(Debug)]
pub enum Cell0 {
    /// Created now.
    Created(CellMapping),
    /// Was already there.
    Existing(CellMapping),
}

impl Cell0 {
    /// The mapping.
    pub fn mapping(&self) -> &CellMapping {
        match self {
            Cell0::Created(c) | Cell0::Existing(c) => c,
        }
    }
}

/// Creates the cell0 mapping for `database_connection` (and migrates that
/// database) unless cell0 is mapped already.
pub async fn map_cell0(api: &ApiDb, database_connection: &str) -> Result<Cell0, Error> {
    if let Some(c) = api.cell(&CELL0_UUID).await? {
        return Ok(Cell0::Existing(c));
    }
    migrate_cell_db("cell0", database_connection).await?;
    match api
        .insert_cell(
            CELL0_UUID,
            Some("cell0"),
            CELL0_TRANSPORT_URL,
            database_connection,
            false,
        )
        .await
    {
        Ok(c) => Ok(Cell0::Created(c)),
        // Created concurrently.
        Err(Error::DuplicateCell(_)) => Ok(Cell0::Existing(api.cell_required(&CELL0_UUID).await?)),
        Err(e) => Err(e),
    }
}

/// What to create.
#[derive(Debug, Clone, Default)]
pub struct NewCell {
    /// Optional name (unique).
    pub name: Option<String>,
    /// The cell's bus.
    pub transport_url: String,
    /// The cell's database.
    pub database_connection: String,
    /// Create it disabled.
    pub disabled: bool,
}

/// Creates a cell: validates both URLs, refuses a URL already used by
/// another cell, checks the broker answers, migrates the cell database, then
/// inserts the mapping (one statement). Returns the mapping and the cell
/// database's schema version.
pub async fn create_cell(api: &ApiDb, new: &NewCell) -> Result<(CellMapping, i64), Error> {
    if validate_transport_url(&new.transport_url)? == TransportKind::None {
        return Err(Error::InvalidTransportUrl {
            url: new.transport_url.clone(),
            reason: "none:/// is reserved for cell0".to_owned(),
        });
    }
    validate_database_url(&new.database_connection)?;
    if let Some(other) = api
        .cell_using(&new.transport_url, &new.database_connection, None)
        .await?
    {
        return Err(Error::DuplicateCell(other));
    }
    check_broker(&new.transport_url).await?;
    let version = migrate_cell_db("cell", &new.database_connection).await?;
    let cell = api
        .insert_cell(
            CellUuid::new_random(),
            new.name.as_deref(),
            &new.transport_url,
            &new.database_connection,
            new.disabled,
        )
        .await?;
    tracing::info!(cell = %cell.uuid, transport = %mask(&cell.transport_url),
        database = %mask(&cell.database_connection), "created cell");
    Ok((cell, version))
}

/// What to change; `None` keeps the current value.
#[derive(Debug, Clone, Default)]
pub struct CellChange {
    /// New name.
    pub name: Option<String>,
    /// New bus.
    pub transport_url: Option<String>,
    /// New database.
    pub database_connection: Option<String>,
    /// Disable.
    pub disable: bool,
    /// Enable.
    pub enable: bool,
}

/// The outcome of [`update_cell`].
#[derive(Debug)]
pub struct Updated {
    /// The mapping as written.
    pub cell: CellMapping,
    /// Notes for the operator ("already disabled").
    pub notes: Vec<String>,
}

/// Updates a cell (one statement). Refusals: unknown cell, URL used by
/// another cell, invalid or unreachable new URL, enable+disable, any change
/// of cell0 but its name and database.
pub async fn update_cell(
    api: &ApiDb,
    uuid: &CellUuid,
    change: &CellChange,
) -> Result<Updated, Error> {
    let mut cell = api.cell_required(uuid).await?;
    let mut notes = Vec::new();
    if change.enable && change.disable {
        return Err(Error::EnableAndDisable);
    }
    if cell.is_cell0() {
        if change.enable || change.disable {
            return Err(Error::Cell0Immutable("disabled or enabled"));
        }
        if change
            .transport_url
            .as_deref()
            .is_some_and(|t| t != CELL0_TRANSPORT_URL)
        {
            return Err(Error::Cell0Immutable("given a transport URL"));
        }
    }
    let transport = change
        .transport_url
        .clone()
        .unwrap_or_else(|| cell.transport_url.clone());
    let database = change
        .database_connection
        .clone()
        .unwrap_or_else(|| cell.database_connection.clone());
    if let Some(other) = api.cell_using(&transport, &database, Some(cell.id)).await? {
        return Err(Error::DuplicateCell(other));
    }
    if let Some(t) = &change.transport_url {
        if !cell.is_cell0() && validate_transport_url(t)? == TransportKind::None {
            return Err(Error::InvalidTransportUrl {
                url: t.clone(),
                reason: "none:/// is reserved for cell0".to_owned(),
            });
        }
        check_broker(t).await?;
    }
    if let Some(d) = &change.database_connection {
        validate_database_url(d)?;
        // Must be reachable: never point a cell at nothing.
        let db = CellDb::open(d).await?;
        db.close().await;
    }
    if let Some(n) = &change.name {
        cell.name = Some(n.clone());
    }
    cell.transport_url = transport;
    cell.database_connection = database;
    if change.disable {
        if cell.disabled {
            notes.push(format!("cell {uuid} is already disabled"));
        }
        cell.disabled = true;
    }
    if change.enable {
        if !cell.disabled {
            notes.push(format!("cell {uuid} is already enabled"));
        }
        cell.disabled = false;
    }
    api.update_cell(&cell).await?;
    Ok(Updated { cell, notes })
}

/// What [`delete_cell`] removed.
#[derive(Debug, Default)]
pub struct Deleted {
    /// Host mappings removed (with `force`).
    pub hosts: i64,
    /// Instance mappings of deleted instances removed (with `force`).
    pub instance_mappings: i64,
}

/// Deletes a cell as upstream: refused while hosts are mapped (unless
/// `force`), while live instances are in it (always), and while instance
/// mappings of deleted instances remain (unless `force`). With `force`, the
/// cell's compute nodes are marked unmapped and its host and instance
/// mappings removed, in one API transaction with the cell itself.
pub async fn delete_cell(api: &ApiDb, uuid: &CellUuid, force: bool) -> Result<Deleted, Error> {
    let cell = api.cell_required(uuid).await?;
    let hosts = api.count_hosts(cell.id).await?;
    if hosts > 0 && !force {
        return Err(Error::CellHasHosts(hosts, cell.uuid));
    }
    let mappings = api.count_instance_mappings(cell.id).await?;
    let mut cell_db = None;
    if mappings > 0 || hosts > 0 {
        let db = CellDb::open(&cell.database_connection).await?;
        if mappings > 0 {
            let live = db.count_live_instances(None).await?;
            if live > 0 {
                db.close().await;
                return Err(Error::CellHasInstances(live, cell.uuid));
            }
            if !force {
                db.close().await;
                return Err(Error::CellHasInstanceMappings(mappings, cell.uuid));
            }
        }
        cell_db = Some(db);
    }
    if let Some(db) = cell_db {
        // So the hosts can be discovered again, in this or another cell.
        db.unmap(None).await?;
        db.close().await;
    }
    if !api.delete_cell(cell.id, force).await? {
        // Something was mapped to the cell meanwhile: report what.
        let hosts = api.count_hosts(cell.id).await?;
        if hosts > 0 {
            return Err(Error::CellHasHosts(hosts, cell.uuid));
        }
        let m = api.count_instance_mappings(cell.id).await?;
        return Err(Error::CellHasInstanceMappings(m, cell.uuid));
    }
    Ok(Deleted {
        hosts,
        instance_mappings: mappings,
    })
}
